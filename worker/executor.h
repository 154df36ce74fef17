/* worker/executor — the executor pool: N threads that take tasks from the
 * priority queue, resolve their inputs (local store, else fetched from the
 * `from` peer and kept in the store as a replica), run the op on the CPU,
 * put the output in the store, and hand the finished task back to the main
 * thread.
 *
 * Completions travel over inproc PUSH/PULL: each executor thread owns a
 * PUSH socket connected to `done_endpoint` (which the main thread has
 * bound as a PULL before starting the pool) and sends the task pointer as
 * one frame of sizeof(tsr_wtask *) bytes; the main thread reports and
 * frees the task. When nothing else is queued, `complete` may take the
 * task on the executor thread instead (the worker reports it from there:
 * one thread hand-off less on the task's round trip).
 *
 * Threading: start/submit/stop from the main thread; the counters from any
 * thread. */
#ifndef TSR_WORKER_EXECUTOR_H
#define TSR_WORKER_EXECUTOR_H

#include <stdint.h>

#include "fetch.h"
#include "gpu.h"
#include "store.h"
#include "task.h"

typedef struct tsr_wexec tsr_wexec;

typedef struct tsr_wexec_opts {
  int threads;                 /* >= 1 */
  void *zctx;                  /* the process's ZeroMQ context */
  const char *done_endpoint;   /* inproc endpoint the main thread pulls from */
  const char *worker_name;     /* named in "unknown op" messages */
  int fetch_timeout_ms;        /* per input fetch */
  const char *data_address;    /* this worker's advertised data address, or NULL */
  const tsr_curve *curve;      /* CURVE keys for fetches from peers (borrowed), or NULL */
  tsr_wgpu *gpu;               /* a GPU worker's device (each thread gets a slot), or NULL */
  struct tsr_wshare *share;    /* device-to-device fetches (share.h), or NULL */
  bool fetch_ahead;            /* at submit: receive buffers and connections for the task's inputs */
  /* Called on the executor thread with a finished task when no other task
   * is queued and none handed over is still untaken (a backlog's
   * completions go to the main thread in batches, and order is kept):
   * true when it took the task (reported and freed it), false to hand it
   * over as usual. NULL: always hand it over. */
  bool (*complete)(void *arg, tsr_wtask *task);
  void *complete_arg;
} tsr_wexec_opts;

/* Starts the threads (with opts->gpu, one GPU slot each: a stream and its
 * library handles). 0, or TSR_ENOMEM / TSR_EINTERNAL with a message (no
 * thread is left running then). The store must outlive the pool. */
int tsr_wexec_start(const tsr_wexec_opts *opts, tsr_wstore *store, tsr_wexec **exec_p, tsr_errbuf *err);
/* Queues a task (the pool takes it). 0 or TSR_ENOMEM (caller keeps it).
 * With fetch_ahead, first asks for what its fetches will need: receive
 * buffers of its inputs' sizes (tsr_xfer_pool_warm) and a connection to
 * each peer they come from (tsr_wfetch_warm), made in the background. */
int tsr_wexec_submit(tsr_wexec *exec, tsr_wtask *task);
/* The main thread took n finished tasks from done_endpoint. */
void tsr_wexec_taken(tsr_wexec *exec, unsigned n);
/* Tasks executing right now / waiting in the queue. */
unsigned tsr_wexec_running(const tsr_wexec *exec);
/* Fetches of inputs from peers since start: done, failed, bytes, time. */
typedef struct tsr_wexec_fetch_stats {
  uint64_t fetches, failures, bytes, us;
} tsr_wexec_fetch_stats;
void tsr_wexec_fetch_stats_get(tsr_wexec *exec, tsr_wexec_fetch_stats *out);
/* Connections to peers: opened inside a fetch, made ahead, made ahead and
 * then taken by a fetch. */
typedef struct tsr_wexec_conn_stats {
  uint64_t connects, made_ahead, taken_ahead;
} tsr_wexec_conn_stats;
void tsr_wexec_conn_stats_get(tsr_wexec *exec, tsr_wexec_conn_stats *out);
size_t tsr_wexec_queued(tsr_wexec *exec);
/* The scheduler declared the worker at address dead: the executor
 * threads' fetches from it end now (tsr_wfetch_gone). Any thread. */
void tsr_wexec_peer_gone(tsr_wexec *exec, const char *address);
/* Stops taking tasks, waits up to timeout_ms for the running ones, then
 * joins the threads and frees the pool (tasks still queued are freed
 * unreported). Returns 0, or TSR_ETIMEDOUT when some thread is still busy:
 * the pool is then abandoned (not freed), and the caller must not destroy
 * the store or the ZeroMQ context; it should exit the process. Sets
 * *exec_p to NULL either way. */
int tsr_wexec_stop(tsr_wexec **exec_p, int timeout_ms);

/* Runs one task to completion on the calling thread and fills its result
 * fields (status, out_meta/out_nbytes/duration_us, message, missing_input).
 * fetcher may be NULL: inputs not in the store are then missing. The
 * output, on success, is in the store under task->key (unless the task was
 * cancelled or its epoch is stale: status TSR_WTASK_CANCELLED). This is the
 * body of every executor thread, exposed so tests can run tasks without
 * threads or sockets. */
void tsr_wtask_run(tsr_wtask *task, tsr_wstore *store, tsr_wfetcher *fetcher, const char *worker_name);
/* The same on a GPU worker's slot (NULL: as tsr_wtask_run). An op with a
 * CUDA variant runs on the slot's stream with its inputs on the device
 * (host inputs are copied up for the task) and its output stays there; an
 * op without one runs on the host, device inputs copied down for it. The
 * slot's stream is synchronized before the task's result is set. */
void tsr_wtask_run_on(tsr_wtask *task, tsr_wstore *store, tsr_wfetcher *fetcher, const char *worker_name,
                      tsr_wgpu_slot *slot);

#endif
