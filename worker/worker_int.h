/* worker/worker_int — the main thread's state, shared by worker.c (setup,
 * event loop, teardown), session.c (the scheduler link and its messages)
 * and report.c (encoding what the worker sends). Main thread only. */
#ifndef TSR_WORKER_INT_H
#define TSR_WORKER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "devtier.h"
#include "executor.h"
#include "nvml.h"
#include "store.h"
#include "task.h"
#include "worker.h"

/* The scheduler link: DOWN (no socket; retry at retry_at_ms) -> HELLO
 * (hello sent, waiting for welcome) -> READY (welcomed). Silence for the
 * heartbeat timeout, or "unknown peer", sends it back to DOWN. */
typedef enum { TSR_LINK_DOWN = 0, TSR_LINK_HELLO, TSR_LINK_READY } tsr_link_state;

typedef struct tsr_worker {
  tsr_worker_opts opts;
  /* The main thread holds mu while it works (not while it polls or serves
   * chunks); an executor thread that finished the only queued task takes
   * it, if free, to report that task itself (worker.c complete_here).
   * Everything below that the reports touch — the link, the socket, the
   * outbound batch, pending and needs, the metrics — is read and written
   * only under it. */
  pthread_mutex_t mu;
  void *zctx;                 /* data plane, inproc completions, executor fetches */
  tsr_xfer_server *server;
  tsr_zap *zap;               /* the data socket's ZAP handler with CURVE (security.c), else NULL */
  char data_address[TSR_MAX_ADDR_LEN];  /* what peers are told to fetch from: the bound address, or
                                           --contact-address */
  void *pull;                 /* completions from the executor threads */
  char done_endpoint[64];
  tsr_wstore *store;
  tsr_wexec *exec;
  tsr_wgpu *gpu;              /* a GPU worker's device, or NULL */
  tsr_wgpu_slot *serve_slot;  /* the main thread's stream: copies device chunks it serves */
  tsr_wgpu_slot *tier_slot;   /* the device tier's stream: moves device chunks down */
  struct tsr_wshare *share;   /* device-to-device transfers (share.h), or NULL */
  tsr_devtier *devtier;       /* a GPU worker's device tier, or NULL */

  /* scheduler link: a dealer of common/zmtp (frames read and written on
   * this thread) */
  struct tsr_zmtp *sched;
  tsr_link_state link;
  uint64_t link_gen;          /* bumped on every reset: stop handling an old frame */
  uint64_t attempt;           /* connection attempts since the last welcome */
  uint64_t last_heard_ms;     /* last frame from the scheduler (or hello time) */
  uint64_t next_beat_ms;
  uint64_t retry_at_ms;
  uint64_t beat_ms;           /* effective heartbeat interval */
  uint64_t peer_id;           /* the scheduler's id for us (welcome) */
  tsr_wbuf out;               /* this iteration's outbound batch */
  uint64_t disk_peak;         /* most spill-file bytes seen at a heartbeat (report.c) */

  /* tasks handed to the executor and not yet reported (this epoch) */
  tsr_strmap *pending;        /* key -> tsr_wtask * */
  tsr_strmap *needs;          /* input key -> number of pending tasks reading it */
  uint64_t tasks_done;
  tsr_nvml_stats nvml;        /* the last NVML sample (each heartbeat); -1s on a CPU worker */
  struct tsr_wmetrics *metrics;  /* --metrics (wmetrics.h), NULL when off */

  bool stopping;
  int exit_code;
} tsr_worker;

/* security.c: CURVE (docs/security.md); each a no-op without keys */
/* Opens the data socket (w->server), with CURVE and its ZAP handler. */
int tsr_wsec_open_data(tsr_worker *w, const char *endpoint, const char *host, tsr_errbuf *err);
/* Appends "#curve=KEY" to w->data_address. */
void tsr_wsec_tag_address(tsr_worker *w);
/* The scheduler link's socket: a CURVE client with keys. 0 or a TSR_E*
 * (logged). */
int tsr_wsec_link(tsr_worker *w, struct tsr_zmtp **sock_p);
/* The scheduler's `peers`: whom the data socket admits. */
void tsr_wsec_on_peers(tsr_worker *w, const msgpack_object *map);

/* session.c */
void tsr_link_tick(tsr_worker *w, uint64_t now_ms);
uint64_t tsr_link_next_deadline(const tsr_worker *w);
void tsr_link_recv(tsr_worker *w);
void tsr_link_flush(tsr_worker *w);
void tsr_link_goodbye(tsr_worker *w);
/* Completions from the executor: report and free. */
void tsr_worker_complete(tsr_worker *w, tsr_wtask *task);

/* report.c: each appends one message to w->out */
void tsr_report_hello(tsr_worker *w);
void tsr_report_heartbeat(tsr_worker *w);
void tsr_report_task(tsr_worker *w, const tsr_wtask *task);
/* chunks_moved with the tier moves recorded since the last one, except
 * skip_key's (NULL: none); nothing when there are none. */
void tsr_report_moves(tsr_worker *w, const char *skip_key);
void tsr_report_task_erred(tsr_worker *w, uint64_t id, const char *key, const char *message);
void tsr_report_error(tsr_worker *w, int code, const char *message, const char *ref);
void tsr_report_goodbye(tsr_worker *w);

#endif
