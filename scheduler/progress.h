/* scheduler/progress.h — per-graph and per-group task counts for the
 * `progress` messages clients subscribe to (docs/progress.md).
 *
 * A group is (op name, graph), like Dask's task prefixes. Every graph
 * record carries a sched_progress (created at admission); each of its own
 * tasks names its group in sched_task.pgroup. A fused task names a
 * composite: the (group, parts) pairs of its parts, so it counts as its
 * parts in every group (the `submitted` rule).
 *
 * Counting: a task counts in one category by state — waiting (WAITING,
 * READY, LOST), processing (QUEUED, PROCESSING), done (MEMORY, RELEASED:
 * computed, or not needed any more), erred — and stays counted in done or
 * erred after it is forgotten. Scheduler-side values may go back (a lost
 * result is waiting again); the client keeps them monotone.
 *
 * Cost: sched_progress_on_state is O(1) for a plain task and O(distinct
 * ops) for a fused one, with no allocation; it runs inside set_state.
 * Allocation happens only at admission (groups and composites).
 *
 * Messages: only clients that subscribed (hello `progress: true` or a
 * `progress` message) get them. Changed graphs are sent by
 * sched_progress_tick (the loop calls it every SCHED_PROGRESS_MS); the
 * message that makes a graph complete (done + erred == total) is sent at
 * once, before the key_done of the same transition. */
#ifndef TSR_SCHED_PROGRESS_H
#define TSR_SCHED_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

#define SCHED_PROGRESS_MS 150              /* at most one message per graph per period */
#define SCHED_PGROUP_COMPOSITE 0x8000u     /* sched_task.pgroup: a composite index follows */
#define SCHED_PGROUP_MAX 0x7fffu           /* groups (and composites) per graph */

typedef struct sched_pcounts {
  uint32_t total, waiting, processing, done, erred;
  uint64_t bytes_done;                     /* output bytes of results made (a recomputation counts again) */
  uint64_t busy_us;                        /* sum of task_done duration_us (the op's run time, fetches
                                              excluded; a recomputation counts again): "time per op" */
} sched_pcounts;

typedef struct sched_pgroup {
  uint16_t op;                             /* op id: the group's name is st->ops[op].name */
  sched_pcounts n;
} sched_pgroup;

typedef struct sched_pitem {
  uint16_t group;
  uint32_t parts;
} sched_pitem;

typedef struct sched_pcomposite {
  uint32_t first, n;                       /* items[first, first+n); the output part's group first */
} sched_pcomposite;

typedef struct sched_progress {
  sched_pcounts n;                         /* the whole graph, by parts */
  sched_pgroup *groups;
  uint32_t ngroups, cap_groups;
  sched_pitem *items;
  uint32_t nitems, cap_items;
  sched_pcomposite *comps;
  uint32_t ncomps, cap_comps;
  bool dirty;                              /* changed since its last message */
  bool final_sent;                         /* the complete message went out at this completion */
} sched_progress;

/* Frees a graph's record; NULL is a no-op. */
void sched_progress_free(sched_progress *p);
/* Fuse hook: the fused task root of graph g now holds the tasks parts[0..np)
 * (the last is root's own former self). Records its composite. 0 or
 * TSR_ENOMEM (the task then counts in its output part's group only). */
int sched_progress_fused(sched_state *st, uint32_t g, uint32_t root, const uint32_t *parts, uint32_t np);
/* Admission hook, before the fresh NEW tasks of graph g are admitted:
 * gives every plain task its group and counts every task in the totals. */
void sched_progress_admit(sched_state *st, uint32_t g, const uint32_t *fresh, uint32_t nfresh);
/* After admission: a graph complete already (no new task, or every one
 * erred at once) gets its complete message now. */
void sched_progress_admitted(sched_state *st, uint32_t g);
/* set_state hook: task id went from state `from` to `to`. */
void sched_progress_on_state(sched_state *st, uint32_t id, int from, int to);
/* task_done hook, before the transition to MEMORY (so a completing
 * message carries it): adds the worker's duration_us of task id to its
 * graph and groups. A fused task's time is shared among its parts' groups
 * in proportion to their part counts (the worker times the task whole).
 * O(1) plain, O(distinct ops) fused. */
void sched_progress_busy(sched_state *st, uint32_t id, uint64_t duration_us);
/* status_reply: how many fields sched_progress_pack_status adds to a
 * graph's map (0 for a graph without a record), and the fields: `busy_us`
 * and `groups` [[op, total, done, erred, busy_us, bytes_done]] (docs/protocol.md). */
uint32_t sched_progress_status_fields(const sched_graph *gr);
void sched_progress_pack_status(const sched_state *st, msgpack_packer *pk, const sched_graph *gr);
/* Client c subscribes (on) or not; subscribing sends every live graph of
 * the client at the next tick. */
void sched_progress_subscribe(sched_state *st, uint32_t c, bool on);
/* Sends a `progress` for every changed graph of a subscribed client. */
void sched_progress_tick(sched_state *st);

#endif
