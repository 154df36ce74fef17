/* scheduler/transitions.c — the task state machine. Every change of a
 * task's `state` field happens in this file, through set_state().
 *
 *   NEW ──admit──> WAITING ──inputs in memory──> READY ──no free slot──> QUEUED
 *                    ^  ^                          │                       │
 *                    │  │                          └──────dispatch─────────┤
 *                    │  │                                                  v
 *                    │  └──worker died (suspicion < 3) / missing_input── PROCESSING
 *                    │                                                     │ │
 *                    │                                          task_done  │ │ task_erred, an input
 *                    │                                                     v v failed, 3 workers died
 *                    │        LOST <──holder died / unfetchable── MEMORY   ERRED ──> (forgotten)
 *                    │          │                                   │
 *                    ├─needed───┘ (else RELEASED)       nobody needs│it: `free`
 *                    │                                              v
 *                    └──────────────needed again─────────────── RELEASED ──> (forgotten)
 *
 *   waiting    some input is not in memory (nwaiting_deps > 0)
 *   ready      all inputs in memory; in its op's queue, to be placed this iteration
 *   queued     ready, but no worker had a free slot; stays in its op's queue
 *   processing sent to a worker in a `compute` (processing_on)
 *   memory     the result is on a worker (who_has)
 *   released   no result; the record stays while dependent records exist
 *   erred      failed, an input failed, or it was running on 3 workers that died
 *   lost       its holder died; immediately WAITING if needed, else RELEASED
 *   (forgotten) the slot goes to the free list and the key is unmapped
 *
 * Deferred recomputation (policy_evict.h): a result its worker dropped
 * under memory pressure (`chunks_moved`) leaves MEMORY at once. Still
 * needed (by dependents, or wanted by a client: a persisted array larger
 * than the workers' memory), it is RELEASED with SCHED_EV_DEFERRED and
 * stays so until one of its dependents is *otherwise ready* — waiting, and
 * every input it misses is a deferred one (nwaiting_deps ==
 * ndeferred_deps) — then it goes back to WAITING with that dependent's
 * priority (and so do the released inputs it needs), so dropped chunks are
 * made again one consumer at a time, in the consumers' order, never a
 * whole pass ahead of its use. A client learns of a wanted key's drop only
 * if it fetches it: its `key_missing` (or a new want of the key) makes it
 * again at once. Recomputing a wanted key eagerly would loop (made, not
 * read, dropped again under the same pressure).
 *
 * Derived counters, kept exact by set_state():
 *   nneeded        dependents (with multiplicity) in an active state
 *                  (waiting, ready, queued, processing)
 *   nwaiting_deps  inputs (with multiplicity) not in memory, for WAITING tasks
 *   nlive_dependents  dependent records alive (maintained by forget())
 * A task whose counters change is queued on st->work; sched_settle() then
 * applies the rules of examine() until nothing changes. All loops are
 * iterative (explicit work lists), so graph depth never grows the C stack.
 *
 * Events from outside (task_done, a worker's death, a client's release)
 * are the sched_tr_* functions; the handlers call sched_settle() after. */
#include "policy_evict.h"
#include "progress.h"
#include "sched.h"

#include <stdio.h>
#include <string.h>

static inline bool active(int s)
{
  return s == TS_WAITING || s == TS_READY || s == TS_QUEUED || s == TS_PROCESSING;
}

static inline int counts_done(int s) { return s == TS_MEMORY || s == TS_RELEASED; }

void sched_recheck(sched_state *st, uint32_t id)
{
  if (sched_grow((void **)&st->work, &st->cap_work, st->nwork + 1, sizeof *st->work) != 0) {
    TSR_ERROR("out of memory queueing task %u for re-examination", id);
    return;
  }
  st->work[st->nwork++] = id;
}

/* Each live dependent of id (same-graph ones from the arena, later graphs'
 * from ext), with multiplicity. fn may change states but not add edges. */
typedef void (*dependent_fn)(sched_state *st, uint32_t dependent, void *arg);

static void each_dependent(sched_state *st, uint32_t id, dependent_fn fn, void *arg)
{
  const sched_task *t = &st->tasks[id];
  for (uint32_t i = 0; i < t->ndependents; i++)
    if (sched_edge_live(st, t->dependents[i])) fn(st, t->dependents[i].id, arg);
  if (t->ext != NULL)
    for (uint32_t i = 0; i < t->ext->nx; i++)
      if (sched_edge_live(st, t->ext->xdeps[i])) fn(st, t->ext->xdeps[i].id, arg);
}

static void needed_changed(sched_state *st, const sched_task *t, bool entering)
{
  for (uint32_t i = 0; i < t->ndeps; i++) {
    sched_task *d = &st->tasks[t->deps[i]];
    if (entering ? d->nneeded++ == 0 : --d->nneeded == 0) sched_recheck(st, t->deps[i]);
  }
}

static void set_state(sched_state *st, uint32_t id, int to);

static inline bool is_deferred(const sched_task *t)
{
  return t->state == TS_RELEASED && (t->evict & SCHED_EV_DEFERRED);
}

/* A waiting task whose only missing inputs are deferred drops. */
static inline bool otherwise_ready(const sched_task *t)
{
  return t->state == TS_WAITING && t->ndeferred_deps > 0 && t->nwaiting_deps == t->ndeferred_deps;
}

/* Queues the deferred inputs of an otherwise-ready task: examine() wakes them. */
static void recheck_deferred_inputs(sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  for (uint32_t i = 0; i < t->ndeps; i++)
    if (is_deferred(&st->tasks[t->deps[i]])) sched_recheck(st, t->deps[i]);
}

static void input_arrived(sched_state *st, uint32_t dependent, void *arg)
{
  (void)arg;
  sched_task *d = &st->tasks[dependent];
  if (d->state == TS_WAITING && d->nwaiting_deps > 0 && --d->nwaiting_deps == 0) sched_recheck(st, dependent);
  else if (otherwise_ready(d)) recheck_deferred_inputs(st, dependent);
}

static void input_departed(sched_state *st, uint32_t dependent, void *arg)
{
  (void)arg;
  sched_task *d = &st->tasks[dependent];
  if (d->state == TS_READY || d->state == TS_QUEUED) {
    /* Every input was in memory a moment ago, so only this one is missing;
     * counting one per edge keeps a task that lists an input twice exact. */
    sched_queue_remove(st, dependent);
    set_state(st, dependent, TS_WAITING);
    d->nwaiting_deps = 0;
    d->ndeferred_deps = 0;
  }
  if (d->state == TS_WAITING) d->nwaiting_deps++;
}

/* The one place a task's state field is written. */
static void set_state(sched_state *st, uint32_t id, int to)
{
  sched_task *t = &st->tasks[id];
  int from = t->state;
  if (from == to) return;
  st->count_by_state[from]--;
  st->count_by_state[to]++;
  t->state = (uint8_t)to;
  if (t->graph != SCHED_NONE) {
    sched_graph *g = st->graphs[t->graph];
    uint32_t w = sched_task_weight(t);  /* a fused task counts by its parts */
    g->ndone += w * (uint32_t)(counts_done(to) - counts_done(from));
    g->nerred += w * (uint32_t)((to == TS_ERRED) - (from == TS_ERRED));
    sched_progress_on_state(st, id, from, to);
  }
  if (active(from) != active(to)) needed_changed(st, t, active(to));
  if ((from == TS_MEMORY) != (to == TS_MEMORY)) each_dependent(st, id, to == TS_MEMORY ? input_arrived : input_departed, NULL);
  TSR_DEBUG("task '%s': %s -> %s", t->key, sched_tstate_name(from), sched_tstate_name(to));
}

static void push_stack(sched_state *st, uint32_t id)
{
  if (sched_grow((void **)&st->stack, &st->cap_stack, st->nstack + 1, sizeof *st->stack) != 0) {
    TSR_ERROR("out of memory propagating a failure to task %u", id);
    return;
  }
  st->stack[st->nstack++] = id;
}

static void push_if_pending(sched_state *st, uint32_t dependent, void *arg)
{
  (void)arg;
  int s = st->tasks[dependent].state;
  if (s == TS_WAITING || s == TS_READY || s == TS_QUEUED) push_stack(st, dependent);
}

/* root -> ERRED with error e, then every pending dependent, transitively.
 * A dependent already running keeps running (its inputs were fetched). */
static void err_cascade(sched_state *st, uint32_t root, sched_error *e)
{
  push_stack(st, root);
  while (st->nstack > 0) {
    uint32_t id = st->stack[--st->nstack];
    sched_task *t = &st->tasks[id];
    if (t->state == TS_ERRED || t->state == TS_FREE || (t->state == TS_PROCESSING && id != root)) continue;
    if (t->state == TS_READY || t->state == TS_QUEUED) sched_queue_remove(st, id);
    sched_task_ext *ext = sched_task_ext_get(st, id);
    if (ext != NULL && e != NULL) {
      sched_error_unref(ext->error);
      ext->error = e;
      e->refs++;
    }
    set_state(st, id, TS_ERRED);
    if (t->nwanted > 0) sched_notify_erred(st, id, SCHED_NONE);
    each_dependent(st, id, push_if_pending, NULL);
    sched_recheck(st, id);
  }
}

/* -> WAITING, counting inputs not in memory; -> ERRED if one failed. */
static void enter_waiting(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  uint32_t missing = 0, deferred = 0;
  for (uint32_t i = 0; i < t->ndeps; i++) {
    const sched_task *d = &st->tasks[t->deps[i]];
    if (d->state == TS_ERRED) {
      sched_error *e = d->ext ? d->ext->error : NULL;
      err_cascade(st, id, e);
      return;
    }
    missing += d->state != TS_MEMORY;
    deferred += is_deferred(d);
  }
  set_state(st, id, TS_WAITING);
  t->nwaiting_deps = missing;
  t->ndeferred_deps = deferred;
  if (otherwise_ready(t)) recheck_deferred_inputs(st, id);
  sched_recheck(st, id);
}

static void make_ready(sched_state *st, uint32_t id)
{
  if (sched_queue_push(st, id) != 0 ||
      sched_grow((void **)&st->ready, &st->cap_ready, st->nready + 1, sizeof *st->ready) != 0) {
    sched_queue_remove(st, id);
    TSR_ERROR("out of memory queueing task '%s'; it stays waiting", st->tasks[id].key);
    return;
  }
  set_state(st, id, TS_READY);
  st->ready[st->nready++] = id;
}

static void release_record(sched_state *st, uint32_t id)
{
  set_state(st, id, TS_RELEASED);
  sched_recheck(st, id);
}

static uint64_t minus_sat(uint64_t a, uint64_t b) { return b <= a ? a - b : 0; }

/* A dependent was sent to read t (or t leaves memory): t no longer
 * counts as unread on its holder. */
static void mark_read(sched_state *st, sched_task *t)
{
  if (!(t->evict & SCHED_EV_UNREAD)) return;
  t->evict &= (uint8_t)~SCHED_EV_UNREAD;
  if (t->who_has != SCHED_NO_WORKER) {
    sched_worker *w = &st->workers[t->who_has];
    w->unread_bytes = minus_sat(w->unread_bytes, t->nbytes);
  }
}

/* Forgets where the result is held, and its bytes in the holder's tiers. */
static void unhold(sched_state *st, sched_task *t)
{
  mark_read(st, t);
  if (t->who_has != SCHED_NO_WORKER) {
    sched_worker *w = &st->workers[t->who_has];
    w->bytes_held = minus_sat(w->bytes_held, t->nbytes);
    if (t->evict & SCHED_EV_ON_DISK) w->held_disk = minus_sat(w->held_disk, t->nbytes);
  }
  t->evict &= (uint8_t)~SCHED_EV_ON_DISK;
  t->who_has = SCHED_NO_WORKER;
}

static void free_result(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (t->who_has != SCHED_NO_WORKER) sched_queue_free(st, t->who_has, t->key, t->key_len);
  unhold(st, t);
  release_record(st, id);
}

/* Adds *(int *)arg to the deferred-input count of a waiting dependent. */
static void count_deferred(sched_state *st, uint32_t dependent, void *arg)
{
  sched_task *d = &st->tasks[dependent];
  int delta = *(const int *)arg;
  if (d->state != TS_WAITING) return;
  if (delta > 0) d->ndeferred_deps++;
  else if (d->ndeferred_deps > 0) d->ndeferred_deps--;
}

/* Clears the deferred mark, and its count in the waiting dependents. */
static void undefer(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (!(t->evict & SCHED_EV_DEFERRED)) return;
  t->evict &= (uint8_t)~SCHED_EV_DEFERRED;
  int minus = -1;
  each_dependent(st, id, count_deferred, &minus);
}

typedef struct urgent_dependent {
  int64_t priority;
  bool found;
} urgent_dependent;

static void find_otherwise_ready(sched_state *st, uint32_t dependent, void *arg)
{
  urgent_dependent *u = arg;
  const sched_task *d = &st->tasks[dependent];
  if (otherwise_ready(d) && (!u->found || d->priority < u->priority)) *u = (urgent_dependent){d->priority, true};
}

/* Gives id, and the released inputs its recomputation needs, priority at
 * least prio: they run just before the dependent that needs them rather
 * than at their original place in the graph's order (a whole pass
 * earlier). Iterative (explicit stack), each task visited once per prio. */
static void inherit_priority(sched_state *st, uint32_t id, int64_t prio)
{
  push_stack(st, id);
  while (st->nstack > 0) {
    sched_task *t = &st->tasks[st->stack[--st->nstack]];
    if (t->priority >= prio) continue;
    t->priority = prio;
    for (uint32_t i = 0; i < t->ndeps; i++) {
      const sched_task *d = &st->tasks[t->deps[i]];
      if ((d->state == TS_RELEASED || d->state == TS_LOST) && d->priority < prio) push_stack(st, t->deps[i]);
    }
  }
}

/* RELEASED and needed again: back to WAITING — at once, unless it is a
 * deferred drop that no client wants, which waits for a dependent that is
 * otherwise ready and takes the most urgent such dependent's priority.
 * Returns without a change while it waits. */
static void recompute_released(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (t->evict & SCHED_EV_DEFERRED) {
    urgent_dependent u = {0, false};
    each_dependent(st, id, find_otherwise_ready, &u);
    if (!u.found) return;
    undefer(st, id);
    inherit_priority(st, id, u.priority);
  }
  undefer(st, id);
  enter_waiting(st, id);
}

static void forget(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  TSR_DEBUG("task '%s': forgotten", t->key);
  sched_task_unindex(st, id);
  for (uint32_t i = 0; i < t->ndeps; i++) {
    st->tasks[t->deps[i]].nlive_dependents--;
    sched_recheck(st, t->deps[i]);
  }
  if (t->graph != SCHED_NONE) {
    sched_graph *g = st->graphs[t->graph];
    uint32_t w = sched_task_weight(t);
    g->ndone -= w * (uint32_t)counts_done(t->state);
    g->nerred -= w * (uint32_t)(t->state == TS_ERRED);
    if (sched_task_fused_parts(t) > 0) {
      g->nfused--;
      g->nfused_parts -= sched_task_fused_parts(t);
    }
    g->ntasks -= w;
    if (g->ntasks == 0 && !g->pinned) sched_graph_free(st, t->graph);
  }
  sched_task_free(st, id);
}

/* The rules a task is re-examined against when its counters changed. */
static void examine(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  switch (t->state) {
  case TS_WAITING:
    if (!sched_needed(t)) release_record(st, id);
    else if (t->nwaiting_deps == 0) make_ready(st, id);
    return;
  case TS_READY:
  case TS_QUEUED:
    if (!sched_needed(t)) {
      sched_queue_remove(st, id);
      release_record(st, id);
    }
    return;
  case TS_MEMORY:
    if (sched_releasable(t)) free_result(st, id);
    else if (t->nneeded == 0) mark_read(st, t);  /* kept for a client: no reader to wait for */
    return;
  case TS_LOST:
    if (sched_needed(t)) enter_waiting(st, id);
    else release_record(st, id);
    return;
  case TS_RELEASED:
    if (sched_needed(t)) {
      recompute_released(st, id);
      return;
    }
    undefer(st, id);
    if (sched_forgettable(t) && sched_admit_may_forget(st, id)) forget(st, id);
    return;
  case TS_ERRED:
    if (sched_forgettable(t) && sched_admit_may_forget(st, id)) forget(st, id);
    return;
  default: return;
  }
}

void sched_settle(sched_state *st)
{
  /* First in, first out: tasks re-examined in the order they were queued,
   * so a graph admitted in priority order enters the op heaps in priority
   * order (each push then stops at once instead of sifting to the root). */
  for (uint32_t i = 0; i < st->nwork; i++) {
    uint32_t id = st->work[i];
    if (id < st->ntasks) examine(st, id);
  }
  st->nwork = 0;
  if (st->cap_work > (1u << 20)) {
    /* a million-task event is over: give its work list back */
    free(st->work);
    st->work = NULL;
    st->cap_work = 0;
  }
}

/* ---------- events ---------- */

void sched_tr_admit(sched_state *st, uint32_t id) { enter_waiting(st, id); }

void sched_tr_discard_new(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (t->key != NULL) sched_task_unindex(st, id);
  t->graph = SCHED_NONE;
  sched_task_free(st, id);
}

void sched_tr_dispatch(sched_state *st, uint32_t id, uint16_t w)
{
  sched_task *t = &st->tasks[id];
  sched_queue_remove(st, id);
  set_state(st, id, TS_PROCESSING);
  t->processing_on = w;
  st->workers[w].nprocessing++;
  sched_worker_note_placed(st, w, id);
  /* While PROCESSING, nbytes holds the output's estimate (task_done sets
   * the real size): what the worker's in-flight bytes count. */
  t->nbytes = sched_evict_estimate_bytes(st, id);
  st->workers[w].inflight_bytes += t->nbytes;
  st->workers[w].working_bytes += sched_task_working_bytes(st->tasks, t, t->nbytes);
  sched_place_worker_changed(st, w);
  for (uint32_t i = 0; i < t->ndeps; i++) mark_read(st, &st->tasks[t->deps[i]]);
  st->tasks_sent++;
  sched_emit_compute(st, id, w);
}

void sched_tr_mark_queued(sched_state *st)
{
  for (uint32_t i = 0; i < st->nready; i++)
    if (st->tasks[st->ready[i]].state == TS_READY) set_state(st, st->ready[i], TS_QUEUED);
  st->nready = 0;
}

static void stop_processing(sched_state *st, sched_task *t)
{
  if (t->processing_on != SCHED_NO_WORKER && st->workers[t->processing_on].nprocessing > 0) {
    sched_worker *wk = &st->workers[t->processing_on];
    wk->nprocessing--;
    wk->inflight_bytes -= t->nbytes < wk->inflight_bytes ? t->nbytes : wk->inflight_bytes;
    /* (an input lost meanwhile may have a new size: saturate, and start
     * over whenever the worker runs nothing) */
    uint64_t working = sched_task_working_bytes(st->tasks, t, t->nbytes);
    working = working < wk->working_bytes ? working : wk->working_bytes;
    wk->working_bytes = wk->nprocessing == 0 ? 0 : wk->working_bytes - working;
    sched_place_worker_changed(st, t->processing_on);
  }
  t->processing_on = SCHED_NO_WORKER;
}

void sched_tr_done(sched_state *st, uint32_t id, uint16_t w, uint64_t nbytes, const tsr_meta *meta)
{
  sched_task *t = &st->tasks[id];
  bool noted = t->processing_on == w;   /* its entry in w's placed list stands for the result too */
  stop_processing(st, t);
  t->who_has = w;
  if (!noted) sched_worker_note_placed(st, w, id);
  t->evict &= (uint8_t)~SCHED_EV_ON_DISK;
  t->nbytes = nbytes;
  t->dtype = (uint8_t)meta->dtype;
  t->ndim = (uint8_t)meta->ndim;
  memcpy(t->shape, meta->shape, sizeof t->shape);
  st->workers[w].bytes_held += nbytes;
  if (t->nneeded > 0) {
    t->evict |= SCHED_EV_UNREAD;
    st->workers[w].unread_bytes += nbytes;
  }
  st->tasks_computed++;
  set_state(st, id, TS_MEMORY);
  if (t->nwanted > 0) sched_notify_done(st, id, SCHED_NONE);
  sched_recheck(st, id);
}

void sched_tr_adopt(sched_state *st, uint32_t id, uint16_t w, uint64_t nbytes, const tsr_meta *meta)
{
  sched_task *t = &st->tasks[id];
  if (t->state == TS_READY || t->state == TS_QUEUED) sched_queue_remove(st, id);
  t->processing_on = SCHED_NO_WORKER;
  t->evict |= SCHED_EV_RAN;
  sched_tr_done(st, id, w, nbytes, meta);
  st->tasks_computed--;   /* found, not computed */
}

void sched_tr_erred(sched_state *st, uint32_t id, const char *message, size_t len)
{
  sched_task *t = &st->tasks[id];
  stop_processing(st, t);
  sched_error *e = sched_error_new(t->key, t->key_len, message, len);
  err_cascade(st, id, e);
  sched_error_unref(e);
}

/* MEMORY -> LOST: the holder died or cannot serve it. */
static void lose_result(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  t->evict &= (uint8_t)~SCHED_EV_GONE;
  unhold(st, t);
  set_state(st, id, TS_LOST);
  if (t->nwanted > 0) sched_notify_lost(st, id);
  sched_recheck(st, id);
}

bool sched_tr_inputs_gone(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  bool gone = false;
  for (uint32_t i = 0; i < t->ndeps; i++) {
    sched_task *d = &st->tasks[t->deps[i]];
    if (d->state == TS_MEMORY && (d->evict & SCHED_EV_GONE)) {
      TSR_DEBUG("input '%s' of task '%s' was dropped by its holder; making it again first", d->key, t->key);
      lose_result(st, t->deps[i]);
    }
    gone |= d->state != TS_MEMORY;
  }
  if (!gone) return false;
  sched_queue_remove(st, id);
  enter_waiting(st, id);
  return true;
}

void sched_tr_missing_input(sched_state *st, uint32_t id, uint32_t input, const char *from, size_t from_len)
{
  sched_task *t = &st->tasks[id];
  stop_processing(st, t);
  sched_task *x = input != SCHED_NONE ? &st->tasks[input] : NULL;
  if (x != NULL && x->state == TS_MEMORY && x->who_has != SCHED_NO_WORKER) {
    sched_worker *h = &st->workers[x->who_has];
    if (strlen(h->address) == from_len && memcmp(h->address, from, from_len) == 0) {
      TSR_INFO("input '%s' of task '%s' could not be fetched from worker '%s'; recomputing it", x->key, t->key,
               h->name);
      /* The holder may still list it: make it drop its copy too. */
      sched_queue_free(st, x->who_has, x->key, x->key_len);
      lose_result(st, input);
    }
  }
  enter_waiting(st, id);
}

/* Task id ran or lived on worker w, which died. */
static void lose_on(sched_state *st, uint32_t id, uint16_t w, uint32_t *rescheduled, uint32_t *lost)
{
  sched_task *t = &st->tasks[id];
  if (t->state == TS_PROCESSING && t->processing_on == w) {
    t->processing_on = SCHED_NO_WORKER;
    (*rescheduled)++;
    if (!sched_needed(t)) {
      release_record(st, id);
    } else if (++t->suspicion >= SCHED_MAX_SUSPICION) {
      char msg[TSR_MAX_KEY_LEN + TSR_MAX_NAME_LEN + 96];
      int n = snprintf(msg, sizeof msg, "task '%s' was running on %d workers that died (last: %s)", t->key,
                       (int)t->suspicion, st->workers[w].name);
      TSR_WARN("%s", msg);
      sched_error *e = sched_error_new(t->key, t->key_len, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
      err_cascade(st, id, e);
      sched_error_unref(e);
    } else {
      enter_waiting(st, id);
    }
  } else if (t->state == TS_MEMORY && t->who_has == w) {
    (*lost)++;
    lose_result(st, id);
  }
}

static int cmp_id(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Only the tasks in w's placed list are visited (in id order, once each,
 * as a scan of every record would), unless an id could not be noted. */
void sched_tr_worker_lost(sched_state *st, uint16_t w, uint32_t *rescheduled_p, uint32_t *lost_p)
{
  uint32_t rescheduled = 0, lost = 0;
  sched_worker *wk = &st->workers[w];
  sched_place_worker_left(st, w);
  if (wk->placed_lossy) {
    for (uint32_t id = 0; id < st->ntasks; id++) lose_on(st, id, w, &rescheduled, &lost);
  } else {
    if (wk->nplaced > 1) qsort(wk->placed, wk->nplaced, sizeof *wk->placed, cmp_id);
    for (uint32_t i = 0; i < wk->nplaced; i++)
      if ((i == 0 || wk->placed[i] != wk->placed[i - 1]) && wk->placed[i] < st->ntasks)
        lose_on(st, wk->placed[i], w, &rescheduled, &lost);
  }
  free(wk->placed);
  wk->placed = NULL;
  wk->nplaced = wk->cap_placed = 0;
  wk->placed_lossy = false;
  wk->nprocessing = 0;
  wk->inflight_bytes = 0;
  wk->working_bytes = 0;
  wk->unread_bytes = 0;
  wk->bytes_held = 0;
  wk->held_disk = 0;
  *rescheduled_p = rescheduled;
  *lost_p = lost;
}

void sched_tr_dropped(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  TSR_DEBUG("task '%s': dropped by worker '%s'%s", t->key, st->workers[t->who_has].name,
            sched_needed(t) ? "; recomputed when a dependent or a client needs it" : "");
  unhold(st, t);
  if (!sched_needed(t)) {
    release_record(st, id);
    return;
  }
  t->evict |= SCHED_EV_DEFERRED;
  set_state(st, id, TS_RELEASED);
  int plus = 1;
  each_dependent(st, id, count_deferred, &plus);
  sched_recheck(st, id);
}

void sched_tr_key_missing(sched_state *st, uint32_t id, const char *from, size_t from_len)
{
  sched_task *t = &st->tasks[id];
  if (is_deferred(t)) {
    TSR_DEBUG("task '%s': a client asked for its dropped result; recomputing it", t->key);
    undefer(st, id);
    if (t->nwanted > 0) sched_notify_lost(st, id);
    sched_recheck(st, id);
    return;
  }
  if (t->state != TS_MEMORY || t->who_has == SCHED_NO_WORKER) return;
  const sched_worker *h = &st->workers[t->who_has];
  if (strlen(h->address) != from_len || memcmp(h->address, from, from_len) != 0) return;
  TSR_INFO("a client could not fetch '%s' from worker '%s'; recomputing it", t->key, h->name);
  sched_queue_free(st, t->who_has, t->key, t->key_len);
  lose_result(st, id);
}

void sched_tr_want(sched_state *st, uint32_t client, uint32_t id)
{
  /* A new want of a dropped result is a request for it: make it now. */
  if (is_deferred(&st->tasks[id])) {
    undefer(st, id);
    sched_recheck(st, id);
  }
  if (sched_idset_add(&st->clients[client].wants, id) != 1) return;
  st->tasks[id].nwanted++;
  sched_recheck(st, id);
}

void sched_tr_unwant(sched_state *st, uint32_t client, uint32_t id)
{
  if (!sched_idset_del(&st->clients[client].wants, id)) return;
  st->tasks[id].nwanted--;
  sched_recheck(st, id);
}
