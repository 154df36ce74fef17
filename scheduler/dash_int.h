/* scheduler/dash_int.h — the dashboard's counters, shared by dashboard.c
 * (hooks, tick, HTTP routes), dash_json.c (/api/...) and dash_metrics.c
 * (/metrics). Event loop thread only, except `board` and `http`, which
 * are thread-safe by contract (http/board.h, http/http.h). */
#ifndef TSR_SCHED_DASH_INT_H
#define TSR_SCHED_DASH_INT_H

#include "board.h"
#include "dashboard.h"
#include "http.h"
#include "prom.h"

enum { DASH_WORKERS = 0, DASH_TASKS, DASH_GRAPHS, DASH_METRICS, DASH_NSLOTS };

/* Per op id: finished tasks and their durations. */
typedef struct dash_op {
  uint64_t done, erred;
  tsr_hist duration;
} dash_op;

/* Per worker slot; peer_id tells a reused slot from its former worker. */
typedef struct dash_worker {
  uint64_t peer_id;
  uint64_t last_beat_ms;             /* 0: no heartbeat yet */
  int64_t gpu_mem_used, gpu_mem_total, gpu_power_mw;   /* NVML; -1: not reported */
  uint64_t done;                     /* task_done seen from it */
  tsr_hist duration;                 /* of its tasks */
} dash_worker;

/* One finished task in the stream ring. */
typedef struct dash_event {
  uint64_t start_us;                 /* wall clock */
  uint32_t duration_us;              /* saturating */
  uint16_t worker;                   /* worker slot */
  uint16_t op;
  uint32_t lane;
  uint64_t worker_peer;              /* the slot's worker then */
} dash_event;

#define DASH_RING 65536u             /* power of two */

/* Per (graph, op): tasks finished for the first time, and erred. */
typedef struct dash_group {
  uint64_t graph_id;                 /* with graph_slot: the graph (slots are reused) */
  uint32_t graph_slot;               /* SCHED_NONE: empty entry */
  uint16_t op;
  uint64_t done, erred;
  uint32_t live[TS_COUNT];           /* scratch of a snapshot: its live task records by state
                                        (recomputations in progress under TS_LOST) */
} dash_group;

struct sched_dash {
  tsr_http *http;
  tsr_board *board;
  uint64_t next_publish_ms;
  dash_op *ops;
  uint32_t nops;
  dash_worker *workers;
  uint32_t nworkers;
  dash_event *ring;
  uint64_t nevents;                  /* ever pushed; ring index = n % DASH_RING */
  dash_group *groups;                /* open addressing on (graph_slot, op) */
  uint32_t cap_groups, ngroups;
  tsr_hist heartbeat_gap;            /* seconds between a worker's heartbeats */
  uint64_t tasks_done, tasks_erred;  /* since start */
  uint64_t snapshots;                /* published */
  uint64_t build_us;                 /* time spent building snapshots */
};

/* dashboard.c: the group of (graph slot, op), created when absent; NULL on ENOMEM. */
dash_group *sched_dash_group(sched_state *st, uint32_t graph_slot, uint16_t op);
/* dashboard.c: calls count(g, n, arg) for each group task t counts in,
 * with its number of parts there: a fused task whose parts the progress
 * module recorded (progress.h, a composite) counts as its parts in their
 * own ops' groups, as `progress` messages and the report count them; any
 * other task in its op's group, by weight. A group may move between two
 * calls (the table grows): hold no pointer across them. */
typedef void dash_count_fn(dash_group *g, uint32_t n, void *arg);
void sched_dash_count(sched_state *st, const sched_task *t, dash_count_fn *count, void *arg);
/* dashboard.c: forgets the groups of graphs that are gone. */
void sched_dash_prune_groups(sched_state *st);
/* dashboard.c: the counters of worker slot w, reset if the slot changed hands; NULL on ENOMEM. */
dash_worker *sched_dash_worker(sched_state *st, uint32_t w);

/* dash_json.c: malloc'd JSON texts of the API (docs/dashboard.md); NULL on ENOMEM. */
char *sched_dash_workers_json(sched_state *st, uint64_t now_ms, size_t *len_p);
char *sched_dash_tasks_json(sched_state *st, size_t *len_p);
char *sched_dash_graphs_json(sched_state *st, size_t *len_p);
/* dash_metrics.c: the /metrics text (docs/metrics.md); NULL on ENOMEM. */
char *sched_dash_metrics_text(sched_state *st, uint64_t now_ms, size_t *len_p);

/* Wall clock in microseconds (the task stream's time base). */
uint64_t sched_dash_wall_us(void);

#endif
