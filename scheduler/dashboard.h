/* scheduler/dashboard.h — the scheduler's dashboard and /metrics
 * (docs/dashboard.md, docs/metrics.md): an HTTP server (http/) on its own
 * thread, fed by snapshots the event loop publishes.
 *
 * The loop keeps only plain integers per event (task done or erred, a
 * heartbeat): no lock, no allocation on its hot path beyond a ring slot.
 * Every SCHED_DASH_PERIOD_MS (longer when building them would take more
 * than 1/SCHED_DASH_MAX_SHARE of the loop's time), and only while someone polled within
 * SCHED_DASH_IDLE_MS, sched_dash_tick builds the JSON of /api/workers,
 * /api/tasks, /api/graphs and the /metrics text from the state and
 * publishes them (http/board.h); the HTTP thread copies the latest.
 *
 * Every function here is a no-op while st->dash is NULL (--no-dashboard,
 * or the address could not be bound). Event loop thread only. */
#ifndef TSR_SCHED_DASHBOARD_H
#define TSR_SCHED_DASHBOARD_H

#include "state.h"

#define SCHED_DASH_DEFAULT_ADDRESS "127.0.0.1:8787"
#define SCHED_DASH_PERIOD_MS 500
#define SCHED_DASH_MAX_SHARE 50       /* snapshots take at most 1/50 of the loop's time */
#define SCHED_DASH_IDLE_MS 10000
#define SCHED_DASH_STREAM_S 20        /* the task stream covers the last 20 s */
#define SCHED_DASH_STREAM_MAX 4000    /* ... at most this many task events */

/* Starts the HTTP server on address ("HOST:PORT" / ":PORT") and sets
 * st->dash. A port that cannot be bound is logged as a warning and the
 * scheduler goes on without a dashboard (returns 0, st->dash NULL): a
 * second scheduler on the same host must still start. Logs the bound
 * address ("dashboard on http://HOST:PORT/"). 0 or TSR_ENOMEM. */
int sched_dash_open(sched_state *st, const char *address);
/* Stops the server and frees the counters; st->dash becomes NULL. */
void sched_dash_close(sched_state *st);
/* Publishes fresh snapshots when due and wanted. Cheap otherwise. */
void sched_dash_tick(sched_state *st, uint64_t now_ms);

/* Event hooks (handlers.c), called before the transition they report. */
/* task_done of task id from worker slot w: duration_us as reported;
 * start_us (wall clock, 0: unknown) and lane (executor thread or stream,
 * UINT32_MAX: unknown) are task_done's optional fields. */
void sched_dash_task_done(sched_state *st, uint32_t id, uint32_t w, uint64_t duration_us, uint64_t start_us,
                          uint32_t lane);
void sched_dash_task_erred(sched_state *st, uint32_t id);
/* A heartbeat from worker slot w: its interval, and the NVML fields of a
 * GPU worker (gpu_memory_used, gpu_memory_total, gpu_power_mw; optional,
 * docs/protocol.md). A malformed NVML field is logged and ignored. */
void sched_dash_heartbeat(sched_state *st, uint32_t w, const msgpack_object *map);

#endif
