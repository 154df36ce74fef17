/* worker/fetch — fetching input chunks from peers' data sockets, with a
 * small per-thread cache of connections (one tsr_xfer_conn per address).
 *
 * Threading: a tsr_wfetcher belongs to the one thread that uses it (its
 * ZeroMQ sockets do). Each executor thread has its own. */
#ifndef TSR_WORKER_FETCH_H
#define TSR_WORKER_FETCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/curve.h"
#include "net/net.h"

#define TSR_WFETCH_SLOTS 8

/* Keys being fetched right now, shared by the executor threads of one
 * worker: a second thread that needs a key already on its way waits for
 * that fetch instead of moving the same bytes twice. */
#define TSR_WFETCH_GONE 32
/* Connections made ahead and not yet taken, peers waiting for one, and
 * peers remembered as connected once (so not warmed again). */
#define TSR_WFETCH_SHELF 8
#define TSR_WFETCH_SEEN 64
/* How long the warmer waits for a connection to be wired up. */
#define TSR_WFETCH_WARM_MS 5000

typedef struct tsr_wfetch_group {
  pthread_mutex_t lock;
  pthread_cond_t done;
  tsr_strmap *inflight;    /* key -> 1; under lock */
  /* Data addresses the scheduler declared dead (`peer_gone`), when, in a
   * ring of the last TSR_WFETCH_GONE; under lock. */
  struct {
    char address[TSR_MAX_ADDR_LEN];
    uint64_t at_ms;
  } gone[TSR_WFETCH_GONE];
  unsigned ngone;
  /* Transfers since start, for /metrics (wmetrics.h): relaxed atomics,
   * added once per fetch by the thread that made it. */
  _Atomic uint64_t fetches, fetch_failures, fetch_bytes, fetch_us;
  /* Connections made ahead (tsr_wfetch_warm), under lock: a UCX peer an
   * input of a queued task comes from, never connected to before, gets
   * one connection opened and wired up by a background thread (the
   * warmer) and shelved; the first executor thread to fetch from that
   * peer takes it instead of connecting inside its fetch. */
  void *zctx;                 /* for tsr_xfer_open_curve (set by the first warm) */
  const tsr_curve *curve;
  pthread_t warmer;
  bool warmer_started, warm_stop;
  pthread_cond_t warm_cond;   /* a want arrived / a connection landed / stop */
  char wanted[TSR_WFETCH_SHELF][TSR_MAX_ADDR_LEN];
  unsigned nwanted;
  char warming[TSR_MAX_ADDR_LEN];   /* being connected now; "" none */
  tsr_xfer_conn *shelf[TSR_WFETCH_SHELF];
  unsigned nshelf;
  char seen[TSR_WFETCH_SEEN][TSR_MAX_ADDR_LEN];   /* ring */
  unsigned nseen;
  /* connections opened inside a fetch / made ahead / made ahead and taken */
  _Atomic uint64_t connects, warm_made, warm_taken;
} tsr_wfetch_group;

/* 0 or TSR_ENOMEM. */
int tsr_wfetch_group_init(tsr_wfetch_group *g);
void tsr_wfetch_group_destroy(tsr_wfetch_group *g);
/* Returns true when the caller now owns the fetch of key (it must call
 * tsr_wfetch_release() afterwards, whatever the outcome); false after
 * waiting for another thread's fetch of key to end: look in the store
 * again, then claim again if it is still not there. */
bool tsr_wfetch_claim(tsr_wfetch_group *g, const char *key);
void tsr_wfetch_release(tsr_wfetch_group *g, const char *key);
/* The scheduler declared the worker at address dead at now_ms: fetches
 * from it that began before give up at once (TSR_ECONN) instead of
 * waiting out the fetch timeout; later ones (a worker restarted on the
 * same address) are not affected. */
void tsr_wfetch_gone(tsr_wfetch_group *g, const char *address, uint64_t now_ms);
/* A queued task will fetch from address: when this process fetches from
 * it over UCX and has never connected to it, a background thread opens
 * and wires up a connection now (zctx and curve as tsr_wfetcher's),
 * for the first fetch from it to take. Returns at once. Any thread. */
void tsr_wfetch_warm(tsr_wfetch_group *g, const char *address, void *zctx, const tsr_curve *curve);

typedef struct tsr_wfetcher {
  void *zctx;
  int timeout_ms;
  tsr_wfetch_group *group;   /* may be NULL: no coordination */
  /* This worker's own data address, or NULL. An input "from" here that is
   * not in the store was dropped or lost here: asking our own data socket
   * would only say so after a round trip. */
  const char *self_address;
  const tsr_curve *curve;    /* this worker's CURVE keys for fetching from peers, or NULL */
  /* A GPU worker's thread over a CUDA-aware UCX: large inputs land in
   * device memory (share.h) and become device chunks on this slot; else
   * both NULL. */
  struct tsr_wshare *share;
  struct tsr_wgpu_slot *gpu_slot;
  uint64_t tick;
  struct {
    tsr_xfer_conn *conn;
    uint64_t used;          /* tick of last use, for LRU eviction */
  } slot[TSR_WFETCH_SLOTS];
} tsr_wfetcher;

void tsr_wfetcher_init(tsr_wfetcher *f, void *zctx, int timeout_ms);
/* Closes every cached connection. */
void tsr_wfetcher_close(tsr_wfetcher *f);
/* Fetches key from the data socket at address, as tsr_xfer_get does
 * (same errors, same ownership of *out). A connection that timed out or
 * failed is closed and forgotten, so a late reply can never be taken for
 * the answer to a later request. */
int tsr_wfetcher_get(tsr_wfetcher *f, const char *address, const char *key, tsr_chunk_header *hdr,
                     tsr_xfer_data *out, tsr_errbuf *err);

#endif
