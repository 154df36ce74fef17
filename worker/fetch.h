/* worker/fetch — fetching input chunks from peers' data sockets, with a
 * small per-thread cache of connections (one tsr_xfer_conn per address).
 *
 * Threading: a tsr_wfetcher belongs to the one thread that uses it (its
 * ZeroMQ sockets do). Each executor thread has its own. */
#ifndef TSR_WORKER_FETCH_H
#define TSR_WORKER_FETCH_H

#include <stdint.h>

#include "net/net.h"

#define TSR_WFETCH_SLOTS 8

typedef struct tsr_wfetcher {
  void *zctx;
  int timeout_ms;
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
