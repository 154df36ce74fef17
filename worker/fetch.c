/* Fetching with a per-thread connection cache: an LRU of at most
 * TSR_WFETCH_SLOTS connections, one per peer address; and connections
 * made ahead of the first fetch from a peer (the warmer, below). */
#include "fetch.h"

#include <stdio.h>
#include <string.h>

#include "util/util.h"

int tsr_wfetch_group_init(tsr_wfetch_group *g)
{
  g->inflight = tsr_strmap_new(64);
  if (g->inflight == NULL) return TSR_ENOMEM;
  g->ngone = 0;
  atomic_init(&g->fetches, 0);
  atomic_init(&g->fetch_failures, 0);
  atomic_init(&g->fetch_bytes, 0);
  atomic_init(&g->fetch_us, 0);
  atomic_init(&g->connects, 0);
  atomic_init(&g->warm_made, 0);
  atomic_init(&g->warm_taken, 0);
  g->zctx = NULL;
  g->curve = NULL;
  g->warmer_started = g->warm_stop = false;
  g->nwanted = g->nshelf = g->nseen = 0;
  g->warming[0] = '\0';
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->done, NULL);
  pthread_cond_init(&g->warm_cond, NULL);
  return 0;
}

void tsr_wfetch_group_destroy(tsr_wfetch_group *g)
{
  if (g->inflight == NULL) return;
  pthread_mutex_lock(&g->lock);
  g->warm_stop = true;
  pthread_cond_broadcast(&g->warm_cond);
  pthread_mutex_unlock(&g->lock);
  if (g->warmer_started) pthread_join(g->warmer, NULL);
  for (unsigned i = 0; i < g->nshelf; i++) tsr_xfer_close(&g->shelf[i]);
  g->nshelf = 0;
  tsr_strmap_destroy(&g->inflight);
  pthread_cond_destroy(&g->warm_cond);
  pthread_cond_destroy(&g->done);
  pthread_mutex_destroy(&g->lock);
}

bool tsr_wfetch_claim(tsr_wfetch_group *g, const char *key)
{
  size_t len = strlen(key);
  uint64_t v;
  pthread_mutex_lock(&g->lock);
  bool waited = false;
  while (tsr_strmap_get(g->inflight, key, len, &v)) {
    pthread_cond_wait(&g->done, &g->lock);
    waited = true;
  }
  /* Out of memory for the entry: fetch anyway, uncoordinated. */
  if (!waited) tsr_strmap_put(g->inflight, key, len, 1);
  pthread_mutex_unlock(&g->lock);
  return !waited;
}

void tsr_wfetch_release(tsr_wfetch_group *g, const char *key)
{
  pthread_mutex_lock(&g->lock);
  tsr_strmap_del(g->inflight, key, strlen(key));
  pthread_cond_broadcast(&g->done);
  pthread_mutex_unlock(&g->lock);
}

void tsr_wfetch_gone(tsr_wfetch_group *g, const char *address, uint64_t now_ms)
{
  pthread_mutex_lock(&g->lock);
  unsigned at = g->ngone++ % TSR_WFETCH_GONE;
  snprintf(g->gone[at].address, sizeof g->gone[at].address, "%s", address);
  g->gone[at].at_ms = now_ms;
  pthread_mutex_unlock(&g->lock);
}

/* True when address was declared dead at or after since_ms. */
static bool gone_since(tsr_wfetch_group *g, const char *address, uint64_t since_ms)
{
  bool gone = false;
  pthread_mutex_lock(&g->lock);
  unsigned n = g->ngone < TSR_WFETCH_GONE ? g->ngone : TSR_WFETCH_GONE;
  for (unsigned i = 0; i < n && !gone; i++)
    gone = g->gone[i].at_ms >= since_ms && strcmp(g->gone[i].address, address) == 0;
  pthread_mutex_unlock(&g->lock);
  return gone;
}

/* ---------- connections made ahead ---------- */

/* Under the lock: address was connected to (or warmed) before. */
static bool seen_locked(const tsr_wfetch_group *g, const char *address)
{
  unsigned n = g->nseen < TSR_WFETCH_SEEN ? g->nseen : TSR_WFETCH_SEEN;
  for (unsigned i = 0; i < n; i++)
    if (strcmp(g->seen[i], address) == 0) return true;
  return false;
}

static void remember_locked(tsr_wfetch_group *g, const char *address)
{
  if (seen_locked(g, address)) return;
  snprintf(g->seen[g->nseen++ % TSR_WFETCH_SEEN], TSR_MAX_ADDR_LEN, "%s", address);
}

/* Opens a connection to address and waits until it is wired up; NULL
 * when it cannot (the fetch then connects itself and reports why). */
static tsr_xfer_conn *connect_ahead(tsr_wfetch_group *g, const char *address)
{
  tsr_errbuf err = {{0}};
  tsr_xfer_conn *conn = NULL;
  uint64_t t0 = tsr_now_us();
  int rc = tsr_xfer_open_curve(g->zctx, address, g->curve, &conn, &err);
  if (rc == 0) rc = tsr_xfer_ready(conn, TSR_WFETCH_WARM_MS, &err);
  if (rc != 0) {
    TSR_DEBUG("fetch: connecting ahead to %s failed (%s); the first fetch connects itself", address, err.text);
    tsr_xfer_close(&conn);
    return NULL;
  }
  atomic_fetch_add(&g->warm_made, 1);
  TSR_DEBUG("fetch: connected ahead to %s in %.3f ms", address, (double)(tsr_now_us() - t0) / 1e3);
  return conn;
}

/* The warmer: connects to each wanted peer in turn and shelves the
 * connection, until the group is destroyed. */
static void *warmer_main(void *arg)
{
  tsr_wfetch_group *g = arg;
  char address[TSR_MAX_ADDR_LEN];
  pthread_mutex_lock(&g->lock);
  for (;;) {
    while (!g->warm_stop && g->nwanted == 0) pthread_cond_wait(&g->warm_cond, &g->lock);
    if (g->warm_stop) break;
    snprintf(address, sizeof address, "%s", g->wanted[0]);
    memmove(g->wanted[0], g->wanted[1], --g->nwanted * sizeof g->wanted[0]);
    snprintf(g->warming, sizeof g->warming, "%s", address);
    pthread_mutex_unlock(&g->lock);
    tsr_xfer_conn *conn = connect_ahead(g, address);
    pthread_mutex_lock(&g->lock);
    if (conn != NULL) g->shelf[g->nshelf++] = conn;   /* room: counted in at the want */
    g->warming[0] = '\0';
    pthread_cond_broadcast(&g->warm_cond);
  }
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

void tsr_wfetch_warm(tsr_wfetch_group *g, const char *address, void *zctx, const tsr_curve *curve)
{
  if (address[0] == '\0' || strlen(address) >= TSR_MAX_ADDR_LEN || !tsr_xfer_fetches_over_ucx(address)) return;
  pthread_mutex_lock(&g->lock);
  /* the shelf has room for every want and the one being made */
  bool room = g->nshelf + g->nwanted + (g->warming[0] != '\0') < TSR_WFETCH_SHELF;
  if (!g->warm_stop && room && !seen_locked(g, address)) {
    g->zctx = zctx;
    g->curve = curve;
    remember_locked(g, address);
    snprintf(g->wanted[g->nwanted++], TSR_MAX_ADDR_LEN, "%s", address);
    if (!g->warmer_started) g->warmer_started = pthread_create(&g->warmer, NULL, warmer_main, g) == 0;
    if (!g->warmer_started) g->nwanted = 0;
    pthread_cond_broadcast(&g->warm_cond);
  }
  pthread_mutex_unlock(&g->lock);
}

/* An executor thread about to connect to address: the connection made
 * ahead for it (waiting for one being made), or NULL (then it connects
 * itself, and a want still queued for address is dropped). */
static tsr_xfer_conn *take_ahead(tsr_wfetch_group *g, const char *address)
{
  tsr_xfer_conn *conn = NULL;
  pthread_mutex_lock(&g->lock);
  remember_locked(g, address);
  for (unsigned i = 0; i < g->nwanted; i++)
    if (strcmp(g->wanted[i], address) == 0) {
      memmove(g->wanted[i], g->wanted[i + 1], (--g->nwanted - i) * sizeof g->wanted[0]);
      break;
    }
  while (strcmp(g->warming, address) == 0) pthread_cond_wait(&g->warm_cond, &g->lock);
  for (unsigned i = 0; i < g->nshelf && conn == NULL; i++)
    if (strcmp(tsr_xfer_address(g->shelf[i]), address) == 0) {
      conn = g->shelf[i];
      g->shelf[i] = g->shelf[--g->nshelf];
    }
  pthread_mutex_unlock(&g->lock);
  if (conn != NULL) atomic_fetch_add(&g->warm_taken, 1);
  return conn;
}

typedef struct fetch_start {
  tsr_wfetch_group *group;
  uint64_t at_ms;
} fetch_start;

static bool abandon_fetch(void *ctx, const char *address)
{
  const fetch_start *start = ctx;
  return gone_since(start->group, address, start->at_ms);
}

void tsr_wfetcher_init(tsr_wfetcher *f, void *zctx, int timeout_ms)
{
  memset(f, 0, sizeof *f);
  f->zctx = zctx;
  f->timeout_ms = timeout_ms;
}

void tsr_wfetcher_close(tsr_wfetcher *f)
{
  for (int i = 0; i < TSR_WFETCH_SLOTS; i++) tsr_xfer_close(&f->slot[i].conn);
}

/* Returns the slot connected to address, opening one (evicting the least
 * recently used) when needed; -1 with err set when it cannot connect. */
static int slot_for(tsr_wfetcher *f, const char *address, tsr_errbuf *err)
{
  int victim = 0;
  for (int i = 0; i < TSR_WFETCH_SLOTS; i++) {
    tsr_xfer_conn *conn = f->slot[i].conn;
    if (conn != NULL && strcmp(tsr_xfer_address(conn), address) == 0) return i;
    if (conn == NULL || (f->slot[victim].conn != NULL && f->slot[i].used < f->slot[victim].used)) victim = i;
  }
  tsr_xfer_close(&f->slot[victim].conn);
  f->slot[victim].conn = f->group != NULL ? take_ahead(f->group, address) : NULL;
  if (f->slot[victim].conn != NULL) return victim;
  if (tsr_xfer_open_curve(f->zctx, address, f->curve, &f->slot[victim].conn, err) != 0) return -1;
  if (f->group != NULL) atomic_fetch_add(&f->group->connects, 1);
  return victim;
}

static void count_fetch(tsr_wfetch_group *g, int rc, uint64_t nbytes, uint64_t us)
{
  atomic_fetch_add_explicit(rc == 0 ? &g->fetches : &g->fetch_failures, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&g->fetch_bytes, nbytes, memory_order_relaxed);
  atomic_fetch_add_explicit(&g->fetch_us, us, memory_order_relaxed);
}

int tsr_wfetcher_get(tsr_wfetcher *f, const char *address, const char *key, tsr_chunk_header *hdr,
                     tsr_xfer_data *out, tsr_errbuf *err)
{
  if (address[0] == '\0') return tsr_fail(err, TSR_ECONN, "no address to fetch '%s' from", key);
  int i = slot_for(f, address, err);
  if (i < 0) return TSR_ECONN;
  f->slot[i].used = ++f->tick;
  fetch_start start = {f->group, tsr_now_ms()};
  uint64_t t0 = tsr_now_us();
  int rc = tsr_xfer_get_abortable(f->slot[i].conn, key, f->timeout_ms, f->group != NULL ? abandon_fetch : NULL, &start,
                                  hdr, out, err);
  if (f->group != NULL) count_fetch(f->group, rc, rc == 0 ? hdr->nbytes : 0, tsr_now_us() - t0);
  /* After a timeout the reply may still arrive; after a send/receive error
   * the socket's state is unknown. Either way, start afresh next time. */
  if (rc == TSR_ETIMEDOUT || rc == TSR_ECONN) tsr_xfer_close(&f->slot[i].conn);
  return rc;
}
