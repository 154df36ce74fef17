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
 * Index: the live workers of each kind (CPU, GPU) are kept in a binary
 * min-heap on (no free slot, in flight / threads, index), updated when a
 * task is sent or comes back, a worker joins, leaves or (un)pauses. A
 * task whose inputs are held nowhere takes the first worker of the op's
 * kind in that order that passes the filters above (a walk of the heap in
 * order, usually one step); a task with inputs compares only the workers
 * that hold them, and the order's first when none of them can take it.
 *
 * Cost: O(inputs + log workers) per placed task when the first workers in
 * load order can take it; a walk past workers that lack the op (plugin
 * ops on a few workers) or whose memory window is full costs O(k log k)
 * for the k workers it passes. The pass is O(ops) per placed task to pick
 * the most urgent runnable task over the op heaps. */
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

/* ---------- workers by load ---------- */

/* The order of the by_load heaps: workers with a free slot first, then
 * the least occupied, then the lowest index. Whether a worker is full is
 * cached at its last re-sift (sched_worker_free_slots divides: computed
 * in every comparison it took a tenth of the scheduler's time at 10^7
 * tasks). */
static bool load_before(const sched_state *st, uint16_t a, uint16_t b)
{
  const sched_worker *wa = &st->workers[a], *wb = &st->workers[b];
  if (wa->load_full != wb->load_full) return wb->load_full;
  if (less_busy(wa, wb)) return true;
  return !less_busy(wb, wa) && a < b;
}

static void heap_set(sched_state *st, sched_worker_heap *h, uint32_t i, uint16_t w)
{
  h->ids[i] = w;
  st->workers[w].load_pos = i;
}

static void load_sift_up(sched_state *st, sched_worker_heap *h, uint32_t i)
{
  uint16_t w = h->ids[i];
  while (i > 0 && load_before(st, w, h->ids[(i - 1) / 2])) {
    heap_set(st, h, i, h->ids[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  heap_set(st, h, i, w);
}

static void load_sift_down(sched_state *st, sched_worker_heap *h, uint32_t i)
{
  uint16_t w = h->ids[i];
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= h->n) break;
    if (child + 1 < h->n && load_before(st, h->ids[child + 1], h->ids[child])) child++;
    if (!load_before(st, h->ids[child], w)) break;
    heap_set(st, h, i, h->ids[child]);
    i = child;
  }
  heap_set(st, h, i, w);
}

int sched_place_worker_joined(sched_state *st, uint32_t w)
{
  sched_worker *wk = &st->workers[w];
  sched_worker_heap *h = &st->by_load[wk->gpu];
  if (wk->load_pos != SCHED_NONE) return 0;
  if (sched_grow((void **)&h->ids, &h->cap, h->n + 1, sizeof *h->ids) != 0 ||
      sched_grow((void **)&st->walk, &st->cap_walk, h->cap, sizeof *st->walk) != 0)
    return TSR_ENOMEM;
  wk->load_full = sched_worker_free_slots(wk) == 0;
  h->ids[h->n++] = (uint16_t)w;
  load_sift_up(st, h, h->n - 1);
  return 0;
}

void sched_place_worker_left(sched_state *st, uint32_t w)
{
  sched_worker *wk = &st->workers[w];
  sched_worker_heap *h = &st->by_load[wk->gpu];
  uint32_t i = wk->load_pos;
  if (i == SCHED_NONE) return;
  wk->load_pos = SCHED_NONE;
  uint16_t last = h->ids[--h->n];
  if (i == h->n) return;
  heap_set(st, h, i, last);
  load_sift_up(st, h, i);
  load_sift_down(st, h, st->workers[last].load_pos);
}

void sched_place_worker_changed(sched_state *st, uint32_t w)
{
  uint32_t i = st->workers[w].load_pos;
  if (i == SCHED_NONE) return;
  sched_worker_heap *h = &st->by_load[st->workers[w].gpu];
  st->workers[w].load_full = sched_worker_free_slots(&st->workers[w]) == 0;
  load_sift_up(st, h, i);
  load_sift_down(st, h, st->workers[w].load_pos);
}

/* Worker w may run a task of op now; with a task id, also within its
 * memory window (memory_fits). */
static bool can_take(const sched_state *st, uint16_t w, uint32_t op, uint32_t id)
{
  const sched_worker *wk = &st->workers[w];
  return wk->alive && sched_worker_eligible(st, wk, op) && sched_worker_free_slots(wk) > 0 &&
         (id == SCHED_NONE || memory_fits(st, wk, id));
}

/* The walk's frontier (heap indexes of h) is itself a min-heap in load
 * order: popping it visits h's workers in order. */
static void walk_push(sched_state *st, const sched_worker_heap *h, uint32_t *n, uint32_t pos)
{
  uint32_t i = (*n)++;
  while (i > 0 && load_before(st, h->ids[pos], h->ids[st->walk[(i - 1) / 2]])) {
    st->walk[i] = st->walk[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  st->walk[i] = pos;
}

static uint32_t walk_pop(sched_state *st, const sched_worker_heap *h, uint32_t *n)
{
  uint32_t top = st->walk[0], last = st->walk[--*n], i = 0;
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= *n) break;
    if (child + 1 < *n && load_before(st, h->ids[st->walk[child + 1]], h->ids[st->walk[child]])) child++;
    if (!load_before(st, h->ids[st->walk[child]], h->ids[last])) break;
    st->walk[i] = st->walk[child];
    i = child;
  }
  st->walk[i] = last;
  return top;
}

/* The first worker of h in load order that can take a task of op (and
 * task id, unless SCHED_NONE). Stops at the first full worker: all that
 * follow are full too. */
static uint16_t first_in_order(sched_state *st, const sched_worker_heap *h, uint32_t op, uint32_t id)
{
  uint32_t n = 0;
  if (h->n > 0) walk_push(st, h, &n, 0);
  while (n > 0) {
    uint32_t pos = walk_pop(st, h, &n);
    uint16_t w = h->ids[pos];
    if (st->workers[w].load_full) break;
    if (can_take(st, w, op, id)) return w;
    if (2 * pos + 1 < h->n) walk_push(st, h, &n, 2 * pos + 1);
    if (2 * pos + 2 < h->n) walk_push(st, h, &n, 2 * pos + 2);
  }
  return SCHED_NO_WORKER;
}

/* The least loaded worker that can take a task of op (and task id unless
 * SCHED_NONE), lowest index among equals. Only the heap of the kind the op
 * prefers holds candidates (sched_worker_eligible), except when no live
 * worker has it native: then both are walked. */
static uint16_t least_loaded(sched_state *st, uint32_t op, uint32_t id)
{
  if (st->ops[op].ngpu_native > 0) return first_in_order(st, &st->by_load[1], op, id);
  if (st->ops[op].ncpu > 0) return first_in_order(st, &st->by_load[0], op, id);
  uint16_t cpu = first_in_order(st, &st->by_load[0], op, id), gpu = first_in_order(st, &st->by_load[1], op, id);
  if (cpu == SCHED_NO_WORKER) return gpu;
  return gpu == SCHED_NO_WORKER || load_before(st, cpu, gpu) ? cpu : gpu;
}

/* ---------- one task ---------- */

/* Bytes of t's inputs per holder into st->loc_bytes; the holders into
 * st->loc_touched. Returns how many. */
static uint32_t tally_inputs(sched_state *st, const sched_task *t)
{
  uint32_t ntouched = 0;
  for (uint32_t i = 0; i < t->ndeps; i++) {
    const sched_task *d = &st->tasks[t->deps[i]];
    if (d->who_has == SCHED_NO_WORKER) continue;
    if (st->loc_bytes[d->who_has] == 0) st->loc_touched[ntouched++] = d->who_has;
    /* +1 so that a zero-byte input still counts as "held here" */
    st->loc_bytes[d->who_has] += d->nbytes + 1;
    if (ntouched == st->nworkers_slots) break;
  }
  return ntouched;
}

/* a is the better holder: more input bytes, then less occupied, then lower index. */
static bool closer(const sched_state *st, uint16_t a, uint16_t b)
{
  const sched_worker *wa = &st->workers[a], *wb = &st->workers[b];
  if (st->loc_bytes[a] != st->loc_bytes[b]) return st->loc_bytes[a] > st->loc_bytes[b];
  if (less_busy(wa, wb)) return true;
  return !less_busy(wb, wa) && a < b;
}

uint16_t sched_policy_place(sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  uint32_t ntouched = tally_inputs(st, t);
  uint16_t best = SCHED_NO_WORKER;
  for (uint32_t i = 0; i < ntouched; i++) {
    uint16_t w = st->loc_touched[i];
    if (can_take(st, w, t->op, id) && (best == SCHED_NO_WORKER || closer(st, w, best))) best = w;
  }
  for (uint32_t i = 0; i < ntouched; i++) st->loc_bytes[st->loc_touched[i]] = 0;
  /* a holder of any input wins over every worker holding none */
  return best != SCHED_NO_WORKER ? best : least_loaded(st, t->op, id);
}

/* ---------- the pass ---------- */

/* The most urgent runnable task over the ops not blocked in this pass. */
static uint32_t most_urgent(const sched_state *st)
{
  uint32_t best = SCHED_NONE;
  for (uint32_t o = 0; o < st->nops; o++) {
    if (st->ops[o].blocked) continue;
    uint32_t id = sched_queue_peek(st, o);
    if (id == SCHED_NONE) continue;
    if (best == SCHED_NONE || st->tasks[id].priority < st->tasks[best].priority ||
        (st->tasks[id].priority == st->tasks[best].priority && id < best))
      best = id;
  }
  return best;
}

/* A pass stops after this long (a `compute` of a fan-in of 100,000 inputs
 * takes milliseconds to build): the rest waits for the next iteration,
 * which then polls without waiting (st->place_more), so the pass never
 * holds the loop for long (issue 13). */
#define PLACE_BUDGET_US 20000

uint32_t sched_place_pass(sched_state *st)
{
  /* Frees first: a key freed and recomputed on the same worker in one
   * iteration must see `free` before its new `compute`. */
  sched_flush_frees(st);
  uint32_t placed = 0;
  st->place_more = false;
  if (st->count_by_state[TS_READY] + st->count_by_state[TS_QUEUED] > 0 && st->nworkers_alive > 0) {
    uint64_t deadline = tsr_now_us() + PLACE_BUDGET_US;
    for (uint32_t o = 0; o < st->nops; o++) st->ops[o].blocked = false;
    for (;;) {
      if (placed > 0 && tsr_now_us() >= deadline) {
        st->place_more = true;
        break;
      }
      uint32_t id = most_urgent(st);
      if (id == SCHED_NONE) break;
      uint32_t op = st->tasks[id].op;
      /* an op no worker has a slot for waits, and its tasks' inputs are
       * not looked at before one has */
      if (least_loaded(st, op, SCHED_NONE) == SCHED_NO_WORKER) {
        st->ops[op].blocked = true;
        continue;
      }
      if (sched_tr_inputs_gone(st, id)) continue;  /* waits for them again; they are being made */
      uint16_t w = sched_policy_place(st, id);
      if (w == SCHED_NO_WORKER) {
        st->ops[op].blocked = true;  /* no window fits it: the op's next tasks wait for the next pass */
        continue;
      }
      sched_tr_dispatch(st, id, w);
      placed++;
    }
  }
  sched_tr_mark_queued(st);
  return placed;
}
