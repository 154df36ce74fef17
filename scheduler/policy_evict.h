/* scheduler/policy_evict — recompute or spill: which results a worker may
 * drop under memory pressure (the scheduler recomputes them when they are
 * needed again) and which it must spill to disk, and the accounting that
 * decision needs. Pure functions of the scheduler state, plus the updates
 * made when a task reports (durations, costs, recompute counts) and when a
 * worker reports tier moves (`chunks_moved`). See docs/memory.md.
 *
 * Costs, in microseconds:
 *   recompute_cost(k) = duration(k) + sum over k's inputs i of
 *       cost(i)       when nobody wants i (it is released once its present
 *                     consumers finish, so it may be gone when k is needed
 *                     again: held now or not, it counts whole) or it is no
 *                     longer held,
 *       read(i)       when i is wanted and held only on its worker's disk,
 *       0             when i is wanted and in memory (the lineage stops
 *                     at what clients keep).
 *   Memoized in sched_task.cost_us when k reports task_done (measured
 *   duration; the inputs' memos): O(inputs) per task, no recursion, so a
 *   10^6-long chain costs 10^6 steps. Before k has run, duration(k) and
 *   nbytes(k) are estimated from its largest input and its op's moving
 *   averages of duration and output bytes per input byte (a task without
 *   inputs: the op's averages; an op never measured: the input's size,
 *   made at SCHED_OP_BPS_DEFAULT).
 *   spill_cost(k) = nbytes × (1/write_bps + 1/read_bps), with the
 *   throughput the worker measured and reports in its heartbeat, or the
 *   SCHED_SPILL_*_BPS_DEFAULT constants until it has.
 *
 * Decision (`compute.recompute`), made when the task is dispatched:
 *   - never for a key a client wants (it will be gathered: dropping it would
 *     make the client wait for a recomputation, and wanted keys that do not
 *     fit would be dropped and recomputed in a loop);
 *   - always for a task without inputs (random data, file reads,
 *     constants: making it again reads nothing, which no reload beats);
 *   - else recompute_cost <= spill_cost with the estimates above.
 * The scheduler flag --recompute never|always overrides it (always still
 * keeps wanted keys). */
#ifndef TSR_SCHED_POLICY_EVICT_H
#define TSR_SCHED_POLICY_EVICT_H

#include "state.h"

/* Until a worker has measured its own spill files (bytes per second of
 * chunk data written / read back, compression and checksums included). */
#define SCHED_SPILL_WRITE_BPS_DEFAULT (400ull << 20)
#define SCHED_SPILL_READ_BPS_DEFAULT (800ull << 20)
/* An op that never reported is assumed to make its output at this rate
 * (an elementwise step), from its largest input. */
#define SCHED_OP_BPS_DEFAULT (1ull << 30)

/* "auto", "never", "always" -> SCHED_RECOMPUTE_*; -1 for anything else. */
int sched_recompute_mode_parse(const char *s);
const char *sched_recompute_mode_name(sched_recompute_mode mode);

/* Microseconds to write nbytes to worker w's spill files and read them back. */
uint64_t sched_evict_spill_cost_us(const sched_state *st, uint16_t w, uint64_t nbytes);
/* The part of task id's recompute cost that comes from its inputs (the sum
 * above), from the inputs' current states and memos. */
uint64_t sched_evict_lineage_us(const sched_state *st, uint32_t id);
/* Estimated duration and output bytes of task id before it runs. */
uint64_t sched_evict_estimate_us(const sched_state *st, uint32_t id);
uint64_t sched_evict_estimate_bytes(const sched_state *st, uint32_t id);
/* The decision for task id dispatched to worker w: true when its output
 * may be dropped rather than spilled. */
bool sched_evict_may_drop(const sched_state *st, uint32_t id, uint16_t w);

/* task_done of id on worker w, before sched_tr_done: memoizes its cost,
 * updates its op's averages, counts a recomputation on w. */
void sched_evict_on_done(sched_state *st, uint32_t id, uint16_t w, uint64_t duration_us, uint64_t nbytes);

/* One entry of a worker's `chunks_moved` report. */
typedef enum { SCHED_MOVE_SPILLED = 0, SCHED_MOVE_LOADED, SCHED_MOVE_DROPPED } sched_move;
/* Applies it when id is in memory on w (else it is stale: ignored).
 * Returns true when applied. Follow with sched_settle(). */
bool sched_evict_moved(sched_state *st, uint16_t w, sched_move move, uint32_t id);

#endif
