/* tessera.h — the public C API of libtessera.
 *
 * A client connects to a scheduler, builds task graphs (each task: a key, an
 * op name, msgpack params, input keys), submits them, waits on futures and
 * gathers results straight from the workers that hold them.
 *
 * Conventions (after libuv and SQLite):
 * - Every int-returning function returns 0 on success or a negative TSR_E*
 *   code (tessera/base.h). Out-params come last, end in _p, and are written
 *   only on success.
 * - After a failure, tsr_errmsg() returns a message for this thread that
 *   names what went wrong (the field, the key, the limit).
 * - Handles are opaque. _destroy/_release functions take &handle, set it to
 *   NULL, and accept NULL.
 * - No function prints or exits the process. Log lines go to the callback in
 *   tsr_client_opts, if any.
 *
 * Threading: a tsr_client may be used from any number of threads at once.
 * A tsr_graph, tsr_args, tsr_future or tsr_chunk belongs to one thread at a
 * time. */
#ifndef TESSERA_H
#define TESSERA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_client tsr_client;
typedef struct tsr_graph tsr_graph;
typedef struct tsr_args tsr_args;
typedef struct tsr_future tsr_future;

/* Message of the last failed call on this thread; "" when none. The pointer
 * is valid until the next call into libtessera on this thread. */
const char *tsr_errmsg(void);

/* ---------- connecting ---------- */

typedef void (*tsr_log_fn)(void *arg, int level, const char *line);

/* The scheduler counts as lost after 10 heartbeat periods of silence (the
 * period its welcome announces), or after the duration in the environment
 * variable TESSERA_HEARTBEAT_TIMEOUT ("1500ms") when set; waits of that
 * session then return TSR_ECONN. The log callback runs on API threads and
 * on the client's I/O thread, possibly with the client's lock held: it must
 * not call libtessera functions on the same client. */
typedef struct tsr_client_opts {
  const char *name;         /* shown by `tessera status`; NULL: "client-PID" */
  int connect_timeout_ms;   /* how long tsr_client_open waits for the scheduler (0: 10 s; < 0: forever) */
  int heartbeat_ms;         /* heartbeat period; the scheduler may override */
  tsr_log_fn log;           /* NULL: the library logs nothing */
  void *log_arg;
  /* CURVE (docs/security.md): this client's secret-key file and the
   * scheduler's public-key file, as `tessera keygen` writes them. NULL:
   * the environment variables TESSERA_CURVE_SECRET / TESSERA_SCHEDULER_KEY;
   * neither: plaintext. With keys, the scheduler connection and every
   * gather from a worker are authenticated and encrypted; a scheduler that
   * refuses the key shows as no answer (TSR_ETIMEDOUT) and logs why. */
  const char *curve_secret;
  const char *scheduler_key;
} tsr_client_opts;

#define TSR_CLIENT_OPTS_DEFAULT {NULL, 10000, 1000, NULL, NULL, NULL, NULL}

/* Connects to the scheduler at address ("tcp://HOST:PORT"); with address
 * NULL, uses the environment variable TESSERA_SCHEDULER (else TESSERA_SCHEDULER_ADDRESS,
 * the workers' name for it). opts may be NULL
 * (defaults). Blocks until the scheduler welcomes the client.
 * Errors: TSR_EINVAL (no address), TSR_ECONN / TSR_ETIMEDOUT (no answer),
 * TSR_EVERSION (protocol mismatch). On success the caller owns *client_p. */
int tsr_client_open(tsr_client **client_p, const char *address, const tsr_client_opts *opts);
/* Releases every future's keys, says goodbye and closes. NULL is a no-op.
 * No other thread may be using the client. Futures may outlive it: waiting
 * on one then returns TSR_ECLOSED, and it must still be released. */
void tsr_client_close(tsr_client *client);
/* The scheduler address this client connected to. Static for the client's life. */
const char *tsr_client_address(const tsr_client *client);

/* ---------- params (a msgpack map, without needing msgpack) ---------- */

int tsr_args_new(tsr_args **args_p);
void tsr_args_destroy(tsr_args **args_p);
int tsr_args_int(tsr_args *args, const char *name, int64_t value);
int tsr_args_float(tsr_args *args, const char *name, double value);
int tsr_args_bool(tsr_args *args, const char *name, bool value);
int tsr_args_str(tsr_args *args, const char *name, const char *value);
int tsr_args_ints(tsr_args *args, const char *name, const int64_t *values, size_t n);
int tsr_args_floats(tsr_args *args, const char *name, const double *values, size_t n);
/* The encoded map. The pointer lives until the next change or destroy. */
const void *tsr_args_data(const tsr_args *args, size_t *len_p);

/* ---------- graphs ---------- */

int tsr_graph_new(tsr_graph **graph_p);
void tsr_graph_destroy(tsr_graph **graph_p);
/* Adds task key = op(params; inputs...). params is one msgpack-encoded map
 * (copied; NULL/0 for none). inputs are keys of tasks in this graph or of
 * keys this client already holds from an earlier submission (copied).
 * Errors: TSR_EINVAL (empty or too long key/op, params not one map),
 * TSR_EEXIST (key added twice in this graph). Cycles, unknown ops and
 * missing inputs are found at tsr_submit. */
int tsr_graph_add(tsr_graph *graph, const char *key, const char *op, const void *params, size_t params_len,
                  const char *const *inputs, size_t n_inputs);
/* Same with params from a tsr_args (NULL for none). */
int tsr_graph_add_args(tsr_graph *graph, const char *key, const char *op, const tsr_args *args,
                       const char *const *inputs, size_t n_inputs);
/* Marks key as a result to keep and gather. A submission without any wanted
 * key wants every task with no dependents. */
int tsr_graph_want(tsr_graph *graph, const char *key);
size_t tsr_graph_size(const tsr_graph *graph);

/* ---------- submitting and futures ---------- */

/* Submits the graph and waits until the scheduler accepts or rejects it.
 * On success takes the graph (sets *graph_p to NULL) and returns a future
 * over its wanted keys. On error the caller still owns the graph, nothing
 * was kept by the scheduler, and tsr_errmsg() names the problem:
 * TSR_ECYCLE, TSR_EUNKNOWNOP, TSR_EMISSING (an input is neither in the
 * graph nor held), TSR_EEXIST (a key already known with another
 * definition), TSR_ELIMIT, TSR_ECONN. */
int tsr_submit(tsr_client *client, tsr_graph **graph_p, tsr_future **future_p);

/* Waits until every wanted key is computed, one erred, or timeout_ms
 * passed (-1: forever). Returns 0, TSR_ETASK (see tsr_future_error),
 * TSR_ETIMEDOUT or TSR_ECONN (scheduler lost). */
int tsr_future_wait(tsr_future *future, int timeout_ms);
/* As completed: waits until a wanted key this call has not returned before
 * is done and sets *index_p to it (tsr_future_key(future, *index_p)), each
 * index once, in about the order the keys finish — for gathering results
 * while the rest still computes. Returns 0, TSR_ETASK (a key erred; see
 * tsr_future_error), TSR_ETIMEDOUT, TSR_ECONN, or TSR_ENOTFOUND once every
 * key was returned. A returned key that is lost later is recomputed as
 * usual (tsr_gather follows it); it is not returned again. */
int tsr_future_next_done(tsr_future *future, int timeout_ms, size_t *index_p);
/* Keys done (in memory) and total wanted, now. */
void tsr_future_progress(const tsr_future *future, size_t *done_p, size_t *total_p);
/* ---------- progress (docs/progress.md) ----------
 *
 * Progress is per graph: the tasks a submission added to the scheduler
 * (the `submitted` count; a fused task counts as its parts; a key shared
 * with an earlier graph counts there, not here), by state, in total and
 * per group (the tasks of one op). Counts are monotone: tasks_done,
 * tasks_erred, bytes_done and tasks_total never go down, even when a lost
 * result is recomputed or the scheduler restarts from its journal;
 * tasks_waiting and tasks_processing are the counts now. A graph is
 * final when tasks_done + tasks_erred == tasks_total (done == total when
 * nothing failed). "Done" counts tasks computed and tasks the scheduler
 * no longer needed to run. bytes_done sums the output bytes of results
 * made (a recomputed result counts again). */
typedef struct tsr_progress_group {
  const char *op;              /* the op name; valid until the future is released (client callback: the call) */
  uint64_t tasks_total, tasks_waiting, tasks_processing, tasks_done, tasks_erred, bytes_done;
  uint64_t busy_us;            /* run time of the group's finished tasks on the workers (sum of their
                                  durations, fetches excluded; a fused task's shared by its parts);
                                  0 from a scheduler that does not report it (docs/report.md) */
} tsr_progress_group;

typedef struct tsr_progress {
  uint64_t graph;              /* the client's number for the graph (one per tsr_submit) */
  uint64_t tasks_total, tasks_waiting, tasks_processing, tasks_done, tasks_erred, bytes_done;
  bool final;                  /* tasks_done + tasks_erred == tasks_total */
  size_t ngroups;
  const tsr_progress_group *groups;
  uint64_t busy_us;            /* the graph's busy time: the sum over its groups (monotone) */
} tsr_progress;

/* A progress callback. It runs on the client's I/O thread, without the
 * client's lock held; it must return quickly and must not block or wait
 * on the client (no tsr_future_wait, tsr_gather, tsr_submit,
 * tsr_client_close); it may call tsr_future_progress_get and
 * tsr_future_release. `progress` and its groups live only for the call.
 * Per graph the calls are monotone (see above), happen only when a count
 * changed, and exactly one has final set: the last one for that graph. */
typedef void (*tsr_progress_fn)(void *user, const tsr_progress *progress);

/* Fills *progress_p with the future's graph's progress now (zeros, total
 * from the submission, until the scheduler's first report). The first
 * call subscribes the client to reports (they follow within ~150 ms).
 * progress_p->groups lives until the next call on this future or its
 * release. 0 or TSR_EINVAL. */
int tsr_future_progress_get(tsr_future *future, tsr_progress *progress_p);
/* Calls fn(user, progress) as the future's graph progresses (see
 * tsr_progress_fn); fn NULL stops the calls. Subscribes the client. After
 * tsr_future_release returns (or this call with NULL returns) fn is never
 * called again for this future, also when a call was in flight: release
 * waits for it (unless released from inside the callback). Returns 0 or
 * TSR_EINVAL. */
int tsr_future_on_progress(tsr_future *future, tsr_progress_fn fn, void *user);
/* The same for every graph this client submits (from now on, and those
 * in flight): what CLIs use when graph builders submit for them. fn NULL
 * stops the calls; after that call or tsr_client_close returns, fn is
 * never called again. 0 or TSR_EINVAL. */
int tsr_client_on_progress(tsr_client *client, tsr_progress_fn fn, void *user);

/* The first failure ("key 'x': add: shapes f64[3] and f64[4] differ"), or
 * NULL. Valid until the future is released. */
const char *tsr_future_error(const tsr_future *future);
size_t tsr_future_count(const tsr_future *future);
/* Wanted key i (0 <= i < count); valid until the future is released. */
const char *tsr_future_key(const tsr_future *future, size_t i);
/* Tells the scheduler this client no longer needs the future's keys; their
 * chunks are freed on the workers once nothing else needs them. */
void tsr_future_release(tsr_future **future_p);

/* ---------- gathering ---------- */

/* A gathered chunk: host bytes in C order, data aligned to 64 bytes. */
typedef struct tsr_chunk {
  tsr_dtype dtype;
  int ndim;
  int64_t shape[TSR_MAX_NDIM];
  void *data;
  size_t nbytes;
  void *priv_;      /* private */
} tsr_chunk;

/* Fetches key's chunk from the worker that holds it, waiting up to
 * timeout_ms (-1: forever) for it to be computed. The key must be wanted by
 * a live future of this client. If the worker is lost, the scheduler
 * recomputes the key and the fetch follows it. Errors: TSR_ENOTFOUND (not
 * wanted by this client), TSR_ETASK, TSR_ETIMEDOUT, TSR_ECONN. */
int tsr_gather(tsr_client *client, const char *key, int timeout_ms, tsr_chunk **chunk_p);
/* tsr_gather into the caller's buffer: the chunk's bytes are copied once
 * into buf (cap bytes; TSR_ELIMIT when they do not fit) and info gets its
 * dtype, ndim, shape and nbytes, with info->data = buf and no priv_ (do not
 * tsr_chunk_destroy it). For callers that place results in arrays of their
 * own: it skips the aligned copy tsr_gather makes when a transport leaves
 * the bytes off a 64-byte boundary. */
int tsr_gather_into(tsr_client *client, const char *key, int timeout_ms, void *buf, size_t cap, tsr_chunk *info);
void tsr_chunk_destroy(tsr_chunk **chunk_p);

/* ---------- cluster ---------- */

typedef struct tsr_worker_info {
  char name[64];
  char address[256];     /* data address */
  char device[32];       /* "cpu" or "gpu:N" */
  int threads;
  uint64_t memory_used;
  uint64_t memory_limit; /* 0: none */
  uint64_t tasks_running;
  uint64_t tasks_done;
  /* GPU workers (device "gpu:N"); empty / 0 / -1 for CPU workers. */
  char gpu_name[64];             /* "NVIDIA H200" */
  uint64_t device_memory_used;   /* bytes allocated from the worker's device pool */
  uint64_t device_memory_limit;  /* its hard device memory limit, bytes */
  int gpu_util;                  /* percent of the last sample period a kernel ran; -1 when unknown (no NVML) */
  /* Memory tiers (docs/memory.md); 0 without a memory limit. */
  uint64_t disk_bytes;           /* bytes of chunks in spill files now (uncompressed) */
  uint64_t bytes_spilled;        /* written to spill files since the worker started */
  uint64_t bytes_dropped;        /* evicted by dropping (recomputed if needed again) since it started */
  int paused;                    /* 1 while over its memory pause threshold: it gets no new tasks */
  /* The scheduler's accounting of the results it placed on this worker
   * (docs/memory.md): bytes in memory and on its disk tier now, and the
   * tasks it ran again (and their output bytes) because their results had
   * been dropped or lost. */
  uint64_t memory_held;
  uint64_t disk_held;
  uint64_t tasks_recomputed;
  uint64_t bytes_recomputed;
  /* Device tier of GPU workers (docs/gpu.md, "Device memory"); 0 for CPU workers. */
  uint64_t device_bytes_moved;   /* device chunks moved down to host memory since the worker started */
  uint64_t device_bytes_dropped; /* recomputable device chunks dropped (recomputed if needed again) */
  /* Use of resources since the worker started (docs/report.md); all 0 with
   * has_usage 0 from a worker or scheduler that does not report them. */
  int has_usage;
  uint64_t cpu_us;               /* CPU time of the worker process, user + system, microseconds */
  uint64_t memory_peak;          /* most host chunk bytes held at once */
  uint64_t disk_peak;            /* most spill-file bytes seen (sampled each heartbeat) */
  uint64_t device_memory_peak;   /* most device chunk bytes held at once (GPU workers) */
  uint64_t fetch_bytes;          /* input bytes fetched from other workers */
  uint64_t fetch_us;             /* time those fetches took, summed over the worker's threads */
  int64_t gpu_memory_used;       /* NVML: device memory used by every process, bytes; -1 unknown */
  int64_t gpu_power_mw;          /* NVML: board power, milliwatts; -1 unknown */
} tsr_worker_info;

/* A graph's tasks of one op (a progress group, docs/progress.md). */
typedef struct tsr_graph_group {
  char op[64];
  uint64_t tasks_total, tasks_done, tasks_erred;
  uint64_t busy_us;      /* run time of its finished tasks on the workers (docs/report.md) */
  uint64_t bytes_done;   /* output bytes of its results made */
} tsr_graph_group;

typedef struct tsr_graph_info {
  char client[64];
  uint64_t graph;
  uint64_t tasks_total;  /* tasks as submitted: a fused task counts by its parts */
  uint64_t tasks_done;
  uint64_t tasks_erred;
  uint64_t fused_tasks;  /* tasks the scheduler fused parts into (docs/scheduler.md "Fusion") */
  uint64_t fused_parts;  /* the parts they hold */
  uint64_t busy_us;      /* run time of its finished tasks (sum over groups); 0 when not reported */
  size_t n_groups;       /* its tasks by op; 0 from a scheduler that does not report them */
  tsr_graph_group *groups;  /* owned by the tsr_cluster_info (freed by tsr_cluster_info_destroy) */
} tsr_graph_info;

typedef struct tsr_cluster_info {
  size_t n_workers;
  tsr_worker_info *workers;
  size_t n_graphs;
  tsr_graph_info *graphs;
  uint64_t tasks_total;   /* tasks the scheduler holds */
} tsr_cluster_info;

/* Asks the scheduler for its workers and graphs in flight. */
int tsr_cluster_info_get(tsr_client *client, int timeout_ms, tsr_cluster_info **info_p);
void tsr_cluster_info_destroy(tsr_cluster_info **info_p);
/* Waits until at least n workers are connected. 0 or TSR_ETIMEDOUT
 * (also TSR_ECONN / TSR_ECLOSED when the scheduler is lost / the client closed). */
int tsr_wait_for_workers(tsr_client *client, size_t n, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
