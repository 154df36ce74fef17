/* tsr_gather: fetching a result straight from a worker's data socket.
 *
 * The flow per call: wait (under the client mutex) until the key is DONE,
 * copy its addresses, then fetch without the mutex through a cached
 * data-plane connection. A fetch can fail because the worker died; the
 * scheduler then sends key_lost and, after recomputing, a new key_done. It
 * can also find no such chunk: its worker dropped it under memory pressure
 * (a recomputable result, docs/memory.md); the client says so
 * (key_missing) and the scheduler recomputes it the same way.
 * So a failed fetch never ends the call while time remains: a timeout
 * retries with a doubled slice (a big chunk may just be slow, and a dead
 * worker cannot answer at all), any other failure waits for the key's next
 * update (gen) or a short pause, then looks again.
 *
 * Idle connections live in a small cache under xmu. A connection is taken
 * out while in use (a ZeroMQ socket belongs to one thread at a time; the
 * mutex hand-over is the memory barrier ZeroMQ asks for) and put back only
 * after a clean reply; a connection that saw an error is closed. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define GATHER_FIRST_SLICE_MS 2000
#define GATHER_MAX_SLICE_MS 60000
#define GATHER_PAUSE_MS 250
#define GATHER_ALIGN 64

/* The public chunk followed by what keeps its bytes alive. */
typedef struct chunk_box {
  tsr_chunk pub;
  tsr_xfer_data xd;
  void *copy;
} chunk_box;

static tsr_xfer_conn *cache_take(tsr_client *c, const char *address)
{
  tsr_xfer_conn *conn = NULL;
  pthread_mutex_lock(&c->xmu);
  for (size_t i = 0; i < c->n_xcache; i++)
    if (strcmp(tsr_xfer_address(c->xcache[i]), address) == 0) {
      conn = c->xcache[i];
      c->xcache[i] = c->xcache[--c->n_xcache];
      break;
    }
  pthread_mutex_unlock(&c->xmu);
  return conn;
}

static void cache_put(tsr_client *c, tsr_xfer_conn *conn)
{
  pthread_mutex_lock(&c->xmu);
  if (c->n_xcache < CLIENT_XFER_CACHE) {
    c->xcache[c->n_xcache++] = conn;
    conn = NULL;
  }
  pthread_mutex_unlock(&c->xmu);
  tsr_xfer_close(&conn);
}

void gather_cache_close_all(tsr_client *c)
{
  pthread_mutex_lock(&c->xmu);
  for (size_t i = 0; i < c->n_xcache; i++) tsr_xfer_close(&c->xcache[i]);
  c->n_xcache = 0;
  pthread_mutex_unlock(&c->xmu);
}

/* Wraps received bytes as a tsr_chunk. ZeroMQ may hand out a payload at
 * any byte offset inside its receive buffer; callers cast data to
 * double *, so a misaligned payload is copied to an aligned buffer. */
static int make_chunk(const tsr_chunk_header *hdr, tsr_xfer_data *xd, tsr_chunk **chunk_p)
{
  chunk_box *box = calloc(1, sizeof *box);
  if (box == NULL) return TSR_ENOMEM;
  box->xd = *xd;
  box->pub.data = xd->data;
  if (xd->nbytes > 0 && (uintptr_t)xd->data % GATHER_ALIGN != 0) {
    size_t size = (xd->nbytes + GATHER_ALIGN - 1) / GATHER_ALIGN * GATHER_ALIGN;
    box->copy = aligned_alloc(GATHER_ALIGN, size);
    if (box->copy == NULL) {
      free(box);
      return TSR_ENOMEM;
    }
    memcpy(box->copy, xd->data, xd->nbytes);
    tsr_xfer_data_release(&box->xd);
    box->pub.data = box->copy;
  }
  box->pub.dtype = hdr->meta.dtype;
  box->pub.ndim = hdr->meta.ndim;
  memcpy(box->pub.shape, hdr->meta.shape, sizeof box->pub.shape);
  box->pub.nbytes = (size_t)hdr->nbytes;
  box->pub.priv_ = box;
  *xd = (tsr_xfer_data){0};
  *chunk_p = &box->pub;
  return 0;
}

TSR_API void tsr_chunk_destroy(tsr_chunk **chunk_p)
{
  if (chunk_p == NULL || *chunk_p == NULL) return;
  chunk_box *box = (*chunk_p)->priv_;
  *chunk_p = NULL;
  if (box == NULL) return;  /* tsr_gather_into's info: the caller's memory */
  tsr_xfer_data_release(&box->xd);
  free(box->copy);
  free(box);
}

/* Fetches key's raw bytes from address: hdr, and xd holding the bytes
 * where the transport left them (element-aligned, not copied). */
static int fetch_one(tsr_client *c, const char *address, const char *key, int timeout_ms, tsr_chunk_header *hdr,
                     tsr_xfer_data *xd, tsr_errbuf *err)
{
  tsr_xfer_conn *conn = cache_take(c, address);
  int rc = conn ? 0 : tsr_xfer_open_curve(c->zctx, address, &c->curve, &conn, err);
  if (rc != 0) return rc;
  rc = tsr_xfer_get(conn, key, timeout_ms, hdr, xd, err);
  /* After a timeout the reply may still come: that connection is spoilt. */
  if (rc == 0 || rc == TSR_ENOTFOUND) cache_put(c, conn);
  else tsr_xfer_close(&conn);
  return rc;
}

/* What a fetch needs to know about the key, copied out of the table. */
typedef struct key_view {
  char **where;
  size_t n_where;
  uint64_t gen;
} key_view;

static void view_free(key_view *v)
{
  for (size_t i = 0; i < v->n_where; i++) free(v->where[i]);
  free(v->where);
  memset(v, 0, sizeof *v);
}

/* Waits until key is DONE and copies its addresses. Caller holds mu. */
static int wait_done_locked(tsr_client *c, const char *key, uint64_t deadline, key_view *v)
{
  for (;;) {
    uint64_t value;
    if (c->state == CONN_CLOSED) return client_fail(TSR_ECLOSED, "the client is closed");
    if (!tsr_strmap_get(c->keys, key, strlen(key), &value))
      return client_fail(TSR_ENOTFOUND, "key '%s' is not wanted by a live future of this client", key);
    key_entry *e = (key_entry *)(uintptr_t)value;
    if (e->epoch != c->epoch)
      return client_fail(TSR_ECONN, "lost the scheduler at %s: %s", c->address, c->lost_msg);
    if (e->state == KEY_ERRED) return client_fail(TSR_ETASK, "key '%s': %s", key, e->error ? e->error : "failed");
    if (e->state == KEY_DONE && e->n_where > 0) {
      v->where = calloc(e->n_where, sizeof *v->where);
      if (v->where == NULL) return client_fail(TSR_ENOMEM, "tsr_gather: out of memory");
      for (size_t i = 0; i < e->n_where; i++)
        if ((v->where[v->n_where] = strdup(e->where[i])) != NULL) v->n_where++;
      v->gen = e->gen;
      return 0;
    }
    if (!client_wait_until(c, deadline))
      return client_fail(TSR_ETIMEDOUT, "key '%s' was not computed in time", key);
  }
}

/* After a failed fetch: waits until the key changes or a short pause ends. */
static void wait_change_locked(tsr_client *c, const char *key, uint64_t gen, uint64_t deadline)
{
  uint64_t pause = tsr_now_ns() + (uint64_t)GATHER_PAUSE_MS * 1000000u;
  if (deadline != 0 && deadline < pause) pause = deadline;
  for (;;) {
    uint64_t value;
    if (c->state == CONN_CLOSED || !tsr_strmap_get(c->keys, key, strlen(key), &value)) return;
    if (((key_entry *)(uintptr_t)value)->gen != gen) return;
    if (!client_wait_until(c, pause)) return;
  }
}

static int remaining_ms(uint64_t deadline, int cap)
{
  if (deadline == 0) return cap;
  uint64_t now = tsr_now_ns();
  if (now >= deadline) return 0;
  uint64_t left = (deadline - now + 999999u) / 1000000u;
  return left < (uint64_t)cap ? (int)left : cap;
}

/* Waits for key and fetches its raw bytes, following the key through
 * worker losses and recomputes until timeout_ms runs out. */
static int gather_raw(tsr_client *client, const char *key, int timeout_ms, tsr_chunk_header *hdr, tsr_xfer_data *xd)
{
  uint64_t deadline = client_deadline(timeout_ms);
  int slice = GATHER_FIRST_SLICE_MS;
  tsr_errbuf err = {{0}};
  for (;;) {
    key_view v = {0};
    pthread_mutex_lock(&client->mu);
    int rc = wait_done_locked(client, key, deadline, &v);
    pthread_mutex_unlock(&client->mu);
    if (rc != 0) return rc;   /* message already set */
    for (size_t i = 0; i < v.n_where; i++) {
      err.text[0] = '\0';
      rc = fetch_one(client, v.where[i], key, remaining_ms(deadline, slice), hdr, xd, &err);
      if (rc == 0) break;
      if (rc == TSR_ENOTFOUND) {  /* dropped there under memory pressure: ask for it again */
        pthread_mutex_lock(&client->mu);
        keys_send_missing_locked(client, key, v.where[i]);
        pthread_mutex_unlock(&client->mu);
      }
      client_log(client, TSR_LOG_INFO, "gather of '%s' from %s failed (%s); retrying", key, v.where[i], err.text);
    }
    if (rc == 0) {
      view_free(&v);
      return 0;
    }
    if (remaining_ms(deadline, 1) == 0) {
      view_free(&v);
      return client_fail(TSR_ETIMEDOUT, "gather of '%s' timed out; last error: %s", key, err.text);
    }
    if (rc == TSR_ETIMEDOUT) {
      slice = slice * 2 > GATHER_MAX_SLICE_MS ? GATHER_MAX_SLICE_MS : slice * 2;
    } else {
      pthread_mutex_lock(&client->mu);
      wait_change_locked(client, key, v.gen, deadline);
      pthread_mutex_unlock(&client->mu);
    }
    view_free(&v);
  }
}

TSR_API int tsr_gather(tsr_client *client, const char *key, int timeout_ms, tsr_chunk **chunk_p)
{
  if (client == NULL || key == NULL || chunk_p == NULL)
    return client_fail(TSR_EINVAL, "tsr_gather: client, key and chunk_p are required");
  tsr_chunk_header hdr;
  tsr_xfer_data xd = {0};
  int rc = gather_raw(client, key, timeout_ms, &hdr, &xd);
  if (rc == 0 && make_chunk(&hdr, &xd, chunk_p) != 0) rc = client_fail(TSR_ENOMEM, "tsr_gather: out of memory");
  tsr_xfer_data_release(&xd);
  return rc;
}

TSR_API int tsr_gather_into(tsr_client *client, const char *key, int timeout_ms, void *buf, size_t cap,
                            tsr_chunk *info)
{
  if (client == NULL || key == NULL || (buf == NULL && cap > 0) || info == NULL)
    return client_fail(TSR_EINVAL, "tsr_gather_into: client, key, buf and info are required");
  tsr_chunk_header hdr;
  tsr_xfer_data xd = {0};
  int rc = gather_raw(client, key, timeout_ms, &hdr, &xd);
  if (rc == 0 && xd.nbytes > cap)
    rc = client_fail(TSR_ELIMIT, "tsr_gather_into: chunk '%s' has %zu bytes, the buffer %zu", key, xd.nbytes, cap);
  if (rc == 0) {
    memcpy(buf, xd.data, xd.nbytes);
    *info = (tsr_chunk){.dtype = hdr.meta.dtype, .ndim = hdr.meta.ndim, .data = buf, .nbytes = xd.nbytes};
    memcpy(info->shape, hdr.meta.shape, sizeof info->shape);
  }
  tsr_xfer_data_release(&xd);
  return rc;
}
