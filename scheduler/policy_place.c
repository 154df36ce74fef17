/* Placement policy: which worker runs a runnable task, and the pass that
 * hands runnable tasks to workers once per loop iteration.
 *
 * Choice for one task, among live workers that advertised its op
 * (resource fit) and have a free slot:
 *   0. where the op is native (a GPU worker for an op with a CUDA variant,
 *      a CPU worker for a CPU-only op). This preference is strict: while
 *      some live worker has the op native, only such workers are
 *      candidates, so a busy GPU is waited for rather than bypassed by a
 *      CPU worker on which the same task can take a hundred times longer.
 *      Without one (the GPU worker died, or no CPU worker for a CPU-only
 *      op), every worker that advertised the op is (it runs it on the
 *      host);
 *   1. the worker already holding the most bytes of its inputs (locality:
 *      those bytes need not move),
 *   2. then the least occupied (tasks in flight / threads),
 *   3. then the lowest worker index (deterministic).
 * A worker has threads x slots-per-thread slots, so its executor has the
 * next task at hand when one finishes. Slots per thread start at
 * SCHED_SLOTS_PER_THREAD and grow for short tasks (measured durations) so
 * the in-flight work covers the round trip. On a worker with a memory
 * limit (the device limit on a GPU worker: outputs stay there) the window
 * is also capped so that its tasks' outputs, at the worker's average output
 * size, stay within 1/SCHED_INFLIGHT_MEMORY_FRACTION of the limit — a
 * smooth cap with no size threshold (Dask queues root tasks only below a
 * fixed ratio), never below one task per thread. Everything beyond stays QUEUED
 * here, in per-op heaps ordered by priority, so late-arriving urgent work
 * is not stuck behind a deep worker-side queue.
 *
 * Cost: O(inputs + workers) per placed task; the pass is O(ops) per placed
 * task to pick the most urgent runnable task over the op heaps. */
#include "policy_evict.h"
#include "sched.h"

/* Tasks in flight per thread: about SCHED_INFLIGHT_US of work, within
 * [SCHED_SLOTS_PER_THREAD, SCHED_MAX_SLOTS_PER_THREAD]. */
static uint64_t slots_per_thread(const sched_worker *w)
{
  if (w->avg_task_us == 0) return SCHED_SLOTS_PER_THREAD;
  uint64_t per = SCHED_INFLIGHT_US / w->avg_task_us;
  return per < SCHED_SLOTS_PER_THREAD ? SCHED_SLOTS_PER_THREAD : per > SCHED_MAX_SLOTS_PER_THREAD ? SCHED_MAX_SLOTS_PER_THREAD : per;
}

/* Most tasks in flight whose outputs fit the memory share above; no cap
 * without a limit or before the first output size is known. */
static uint64_t memory_cap(const sched_worker *w, uint64_t threads)
{
  uint64_t limit = w->gpu && w->device_memory_limit ? w->device_memory_limit : w->memory_limit;
  if (limit == 0 || w->avg_out_bytes == 0) return UINT64_MAX;
  uint64_t cap = limit / SCHED_INFLIGHT_MEMORY_FRACTION / w->avg_out_bytes;
  return cap < threads ? threads : cap;
}

uint32_t sched_worker_free_slots(const sched_worker *w)
{
  if (w->paused) return 0;  /* over its memory pause threshold */
  uint64_t threads = w->threads ? w->threads : 1;
  uint64_t slots = threads * slots_per_thread(w), cap = memory_cap(w, threads);
  if (slots > cap) slots = cap;
  return w->nprocessing >= slots ? 0 : (uint32_t)(slots - w->nprocessing);
}

/* Whether task id's estimated output still fits beside the outputs of the
 * worker's tasks in flight within 1/SCHED_INFLIGHT_MEMORY_FRACTION of its
 * limit (one task per thread always does). Without this, many short tasks
 * with big outputs (random chunks made again for their consumers) fill a
 * tight worker with unread chunks that it must drop before their
 * consumers run: a drop-and-recompute loop.
 *
 * A task that brings new data without reading any (a root) or makes a
 * dropped result again must also fit beside the results the worker holds
 * that no dependent has been sent to read yet (unread_bytes, when there
 * are any), unless the worker runs nothing: such tasks are quick (random
 * chunks: microseconds on a GPU) and would otherwise run a whole pass
 * ahead of their readers through the one-per-thread rule. An idle worker
 * always takes one, so a reader waiting for a second such input is never
 * starved. */
/* The worker's unread bytes that task t would not read itself: its own
 * unread inputs there stop counting once it is sent (a recomputation
 * waiting on the unread input made for it would otherwise wait for
 * itself, until the worker idled). */
static uint64_t unread_besides(const sched_state *st, const sched_worker *w, const sched_task *t)
{
  uint64_t unread = w->unread_bytes;
  for (uint32_t i = 0; i < t->ndeps; i++) {
    const sched_task *d = &st->tasks[t->deps[i]];
    if ((d->evict & SCHED_EV_UNREAD) && &st->workers[d->who_has] == w) unread -= d->nbytes < unread ? d->nbytes : unread;
  }
  return unread;
}

static bool memory_fits(const sched_state *st, const sched_worker *w, uint32_t id)
{
  uint64_t limit = w->gpu && w->device_memory_limit ? w->device_memory_limit : w->memory_limit;
  if (limit == 0) return true;
  const sched_task *t = &st->tasks[id];
  uint64_t window = limit / SCHED_INFLIGHT_MEMORY_FRACTION, estimate = sched_evict_estimate_bytes(st, id);
  bool fresh_data = t->ndeps == 0 || (t->evict & SCHED_EV_RAN);
  if (fresh_data && w->nprocessing > 0) {
    /* (with nothing unread the rules below alone apply: a root larger
     * than the window still runs one per thread) */
    uint64_t unread = unread_besides(st, w, t);
    if (unread > 0 && unread + estimate > window) return false;
  }
  /* A GPU's running tasks hold their inputs and outputs on the device,
   * where the device tier cannot move them: tasks that together need more
   * than the device limit would each wait for the others' memory, for
   * ever. One runs whatever its size (the worker fails it if it cannot
   * fit at all). */
  if (w->gpu && w->device_memory_limit && w->nprocessing > 0 &&
      w->working_bytes + sched_task_working_bytes(st->tasks, t, estimate) > w->device_memory_limit)
    return false;
  return w->nprocessing < (w->threads ? w->threads : 1) || w->inflight_bytes + estimate <= window;
}

/* a is less occupied than b: nproc_a / threads_a < nproc_b / threads_b */
static bool less_busy(const sched_worker *a, const sched_worker *b)
{
  uint64_t ta = a->threads ? a->threads : 1, tb = b->threads ? b->threads : 1;
  return (uint64_t)a->nprocessing * tb < (uint64_t)b->nprocessing * ta;
}

uint16_t sched_policy_place(sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  uint32_t ntouched = 0;
  for (uint32_t i = 0; i < t->ndeps; i++) {
    const sched_task *d = &st->tasks[t->deps[i]];
    if (d->who_has == SCHED_NO_WORKER) continue;
    if (st->loc_bytes[d->who_has] == 0) st->loc_touched[ntouched++] = d->who_has;
    /* +1 so that a zero-byte input still counts as "held here" */
    st->loc_bytes[d->who_has] += d->nbytes + 1;
    if (ntouched == st->nworkers_slots) break;
  }
  uint16_t best = SCHED_NO_WORKER;
  uint64_t best_bytes = 0;
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    const sched_worker *wk = &st->workers[w];
    if (!wk->alive || !sched_worker_eligible(st, wk, t->op) || sched_worker_free_slots(wk) == 0 ||
        !memory_fits(st, wk, id))
      continue;
    uint64_t bytes = st->loc_bytes[w];
    if (best == SCHED_NO_WORKER || bytes > best_bytes ||
        (bytes == best_bytes && less_busy(wk, &st->workers[best]))) {
      best = (uint16_t)w;
      best_bytes = bytes;
    }
  }
  for (uint32_t i = 0; i < ntouched; i++) st->loc_bytes[st->loc_touched[i]] = 0;
  return best;
}

/* Free slots per op over live eligible workers: the pass stops looking at
 * an op whose workers are all busy. */
static void count_op_slots(sched_state *st)
{
  for (uint32_t o = 0; o < st->nops; o++) st->ops[o].free_slots = 0;
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    const sched_worker *wk = &st->workers[w];
    uint32_t slots = wk->alive ? sched_worker_free_slots(wk) : 0;
    if (slots == 0) continue;
    for (uint32_t o = 0; o < st->nops; o++)
      if (sched_worker_eligible(st, wk, o)) st->ops[o].free_slots += slots;
  }
}

/* The most urgent runnable task over the ops that still have a free slot. */
static uint32_t most_urgent(const sched_state *st)
{
  uint32_t best = SCHED_NONE;
  for (uint32_t o = 0; o < st->nops; o++) {
    if (st->ops[o].free_slots == 0) continue;
    uint32_t id = sched_queue_peek(st, o);
    if (id == SCHED_NONE) continue;
    if (best == SCHED_NONE || st->tasks[id].priority < st->tasks[best].priority ||
        (st->tasks[id].priority == st->tasks[best].priority && id < best))
      best = id;
  }
  return best;
}

uint32_t sched_place_pass(sched_state *st)
{
  /* Frees first: a key freed and recomputed on the same worker in one
   * iteration must see `free` before its new `compute`. */
  sched_flush_frees(st);
  uint32_t placed = 0;
  if (st->count_by_state[TS_READY] + st->count_by_state[TS_QUEUED] > 0 && st->nworkers_alive > 0) {
    count_op_slots(st);
    for (;;) {
      uint32_t id = most_urgent(st);
      if (id == SCHED_NONE) break;
      if (sched_tr_inputs_gone(st, id)) continue;  /* waits for them again; they are being made */
      uint16_t w = sched_policy_place(st, id);
      if (w == SCHED_NO_WORKER) {
        st->ops[st->tasks[id].op].free_slots = 0;  /* cannot happen; never spin */
        continue;
      }
      sched_tr_dispatch(st, id, w);
      placed++;
      const sched_worker *wk = &st->workers[w];
      for (uint32_t o = 0; o < st->nops; o++)
        if (sched_worker_eligible(st, wk, o) && st->ops[o].free_slots > 0) st->ops[o].free_slots--;
    }
  }
  sched_tr_mark_queued(st);
  return placed;
}
