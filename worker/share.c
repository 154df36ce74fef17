/* Device chunks in place (the arena), else through shared device buffers:
 * a small table, lent and idle entries, one lock. A chunk takes the
 * smallest idle buffer that holds it and is not more than twice its size
 * (a 1 GiB buffer is not tied up by a 1 MiB chunk); otherwise a new one is
 * made, rounded up to SHARE_ROUND so that chunks of nearly one size share
 * buffers. */
#include "share.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SHARE_ROUND ((size_t)2 << 20)

typedef struct share_buf {
  void *ptr;
  size_t cap;
  bool lent;
} share_buf;

struct tsr_wshare {
  tsr_wgpu *gpu;
  tsr_wgpu_slot *serve_slot;
  tsr_xfer_device_sink sink;
  pthread_mutex_t lock;
  share_buf bufs[TSR_WSHARE_MAX];   /* under lock; ptr NULL: unused entry */
  tsr_wshare_stats stats;           /* under lock */
};

static void *sink_alloc(void *arg, size_t nbytes);
static void sink_free(void *arg, void *ptr, size_t nbytes);

tsr_wshare *tsr_wshare_new(tsr_wgpu *gpu, tsr_wgpu_slot *serve_slot)
{
  if (gpu == NULL || !tsr_xfer_device_capable()) return NULL;
  tsr_wshare *share = calloc(1, sizeof *share);
  if (share == NULL) return NULL;
  const char *arena = getenv("TESSERA_DEVICE_ARENA");
  tsr_errbuf err = {{0}};
  if ((arena == NULL || strcmp(arena, "0") != 0) && tsr_wgpu_use_arena(gpu, &err) != 0)
    TSR_WARN("gpu:%d: no device arena (%s): device chunks move through shared buffers", tsr_wgpu_device(gpu), err.text);
  share->gpu = gpu;
  share->serve_slot = serve_slot;
  share->sink = (tsr_xfer_device_sink){sink_alloc, sink_free, share};
  pthread_mutex_init(&share->lock, NULL);
  return share;
}

void tsr_wshare_free(tsr_wshare **share_p)
{
  if (share_p == NULL || *share_p == NULL) return;
  tsr_wshare *share = *share_p;
  for (int i = 0; i < TSR_WSHARE_MAX; i++) {
    share_buf *b = &share->bufs[i];
    if (b->ptr == NULL) continue;
    if (b->lent) TSR_ERROR("gpu:%d: a shared buffer of %zu bytes is still lent at exit", tsr_wgpu_device(share->gpu), b->cap);
    else tsr_wgpu_ipc_free(share->gpu, b->ptr, b->cap);
  }
  pthread_mutex_destroy(&share->lock);
  free(share);
  *share_p = NULL;
}

/* The best idle buffer for nbytes, lent out; NULL when none fits (under lock). */
static void *lend_idle(tsr_wshare *share, size_t nbytes)
{
  share_buf *best = NULL;
  for (int i = 0; i < TSR_WSHARE_MAX; i++) {
    share_buf *b = &share->bufs[i];
    if (b->ptr == NULL || b->lent || b->cap < nbytes || b->cap / 2 > nbytes + SHARE_ROUND) continue;
    if (best == NULL || b->cap < best->cap) best = b;
  }
  if (best == NULL) return NULL;
  best->lent = true;
  return best->ptr;
}

/* An entry for a new buffer: an unused one, else an idle one whose buffer
 * goes (*evicted gets it, to free outside the lock). NULL when every entry
 * is lent or being filled by another thread (lent, no ptr yet; under lock). */
static share_buf *free_entry(tsr_wshare *share, share_buf *evicted)
{
  share_buf *idle = NULL;
  for (int i = 0; i < TSR_WSHARE_MAX; i++) {
    share_buf *b = &share->bufs[i];
    if (b->lent) continue;
    if (b->ptr == NULL) return b;
    if (idle == NULL) idle = b;
  }
  if (idle != NULL) {
    *evicted = *idle;
    *idle = (share_buf){0};
  }
  return idle;
}

static void *take(tsr_wshare *share, size_t nbytes)
{
  share_buf evicted = {0};
  pthread_mutex_lock(&share->lock);
  void *ptr = lend_idle(share, nbytes);
  share_buf *entry = ptr == NULL ? free_entry(share, &evicted) : NULL;
  if (entry != NULL) entry->lent = true;   /* reserved while we allocate */
  pthread_mutex_unlock(&share->lock);
  if (evicted.ptr != NULL) tsr_wgpu_ipc_free(share->gpu, evicted.ptr, evicted.cap);
  if (ptr != NULL || entry == NULL) return ptr;
  size_t cap = (nbytes + SHARE_ROUND - 1) / SHARE_ROUND * SHARE_ROUND;
  ptr = tsr_wgpu_ipc_alloc(share->gpu, cap);
  pthread_mutex_lock(&share->lock);
  if (ptr != NULL) {
    *entry = (share_buf){ptr, cap, true};
    share->stats.buffers++;
    share->stats.buffer_bytes += cap;
  } else {
    entry->lent = false;
  }
  pthread_mutex_unlock(&share->lock);
  return ptr;
}

/* Back to the table; freed when the idle buffers would pass
 * TSR_WSHARE_IDLE_SHARE of the device limit (freeing synchronizes the
 * device, and a new buffer's IPC handle is opened again by every peer:
 * buffers are kept while they fit). */
static void give_back(tsr_wshare *share, void *ptr)
{
  share_buf gone = {0};
  uint64_t idle = 0;
  pthread_mutex_lock(&share->lock);
  share_buf *entry = NULL;
  for (int i = 0; i < TSR_WSHARE_MAX; i++) {
    share_buf *b = &share->bufs[i];
    if (b->ptr == ptr) entry = b;
    else if (b->ptr != NULL && !b->lent) idle += b->cap;
  }
  if (entry != NULL) {
    entry->lent = false;
    if (idle + entry->cap > tsr_wgpu_limit(share->gpu) / TSR_WSHARE_IDLE_SHARE) {
      gone = *entry;
      *entry = (share_buf){0};
    }
  }
  pthread_mutex_unlock(&share->lock);
  if (gone.ptr != NULL) tsr_wgpu_ipc_free(share->gpu, gone.ptr, gone.cap);
}

/* With the arena a fetch lands in arena memory, which becomes the chunk
 * (tsr_wshare_adopt); without it, in a shared buffer. */
static void *sink_alloc(void *arg, size_t nbytes)
{
  tsr_wshare *share = arg;
  return tsr_wgpu_has_arena(share->gpu) ? tsr_wgpu_ipc_alloc(share->gpu, nbytes) : take(share, nbytes);
}

static void sink_free(void *arg, void *ptr, size_t nbytes)
{
  tsr_wshare *share = arg;
  if (tsr_wgpu_exportable(share->gpu, ptr)) tsr_wgpu_ipc_free(share->gpu, ptr, nbytes);
  else give_back(share, ptr);
}

static void count_copy(tsr_wshare *share, size_t nbytes)
{
  pthread_mutex_lock(&share->lock);
  share->stats.copies++;
  share->stats.copy_bytes += nbytes;
  pthread_mutex_unlock(&share->lock);
}

const tsr_xfer_device_sink *tsr_wshare_sink(tsr_wshare *share) { return share != NULL ? &share->sink : NULL; }

/* The server's releases: UCX is done sending from the buffer, or from the
 * chunk itself. */
static void served(void *data, void *hint) { give_back(hint, data); }

static void served_in_place(void *data, void *hint)
{
  (void)data;
  tsr_chunk *chunk = hint;
  tsr_chunk_unref(&chunk);
}

/* A shared copy of the chunk in out (the chunk is not in the arena). */
static int serve_copy(tsr_wshare *share, const tsr_chunk *chunk, tsr_xfer_chunk *out)
{
  void *buf = take(share, chunk->nbytes);
  if (buf == NULL) return TSR_ENOMEM;
  tsr_errbuf err = {{0}};
  if (tsr_wgpu_copy(share->serve_slot, buf, chunk->data, chunk->nbytes, &err) != 0) {
    TSR_WARN("gpu:%d: cannot copy a chunk of %zu bytes to serve it from device memory: %s",
             tsr_wgpu_device(share->gpu), chunk->nbytes, err.text);
    give_back(share, buf);
    return TSR_EINTERNAL;
  }
  count_copy(share, chunk->nbytes);
  out->data = buf;
  out->release = served;
  out->hint = share;
  return 0;
}

int tsr_wshare_serve(void *arg, tsr_chunk *chunk, tsr_xfer_chunk *out)
{
  tsr_wshare *share = arg;
  size_t nbytes = chunk->nbytes;
  if (nbytes < TSR_WSHARE_MIN) return TSR_EINVAL;
  if (tsr_wgpu_exportable(share->gpu, chunk->data)) {
    out->data = chunk->data;
    out->release = served_in_place;
    out->hint = tsr_chunk_ref(chunk);
  } else {
    int rc = serve_copy(share, chunk, out);
    if (rc != 0) return rc;
  }
  out->nbytes = nbytes;
  out->on_device = true;
  pthread_mutex_lock(&share->lock);
  share->stats.served++;
  share->stats.served_bytes += nbytes;
  pthread_mutex_unlock(&share->lock);
  return 0;
}

int tsr_wshare_adopt(tsr_wshare *share, tsr_wgpu_slot *slot, tsr_wstore *store, const char *key, const tsr_meta *meta,
                     tsr_xfer_data *data, tsr_chunk **chunk_p, tsr_errbuf *err)
{
  size_t nbytes = data->nbytes;
  tsr_wgpu *gpu = tsr_wgpu_slot_gpu(slot);
  void *ptr = NULL;
  if (tsr_wgpu_exportable(gpu, data->data)) {
    /* arena memory of the sink's (tsr_wgpu_ipc_alloc): the chunk's as it is */
    ptr = data->data;
    data->data = NULL;
    tsr_xfer_data_release(data);
  } else {
    int rc = tsr_wgpu_alloc(slot, nbytes, key, true, &ptr, err);
    if (rc == 0) rc = tsr_wgpu_copy(slot, ptr, data->data, nbytes, err);
    tsr_xfer_data_release(data);
    if (rc != 0) {
      tsr_wgpu_free(slot, ptr, nbytes, true);
      return rc;
    }
    count_copy(share, nbytes);
    tsr_wgpu_keep(slot, nbytes);   /* the chunk's from here: freed at its last unref */
  }
  if (tsr_chunk_new_device(store, key, meta, ptr, nbytes, tsr_wgpu_device(gpu), tsr_wgpu_release, gpu, chunk_p) != 0) {
    tsr_wgpu_release(gpu, ptr, nbytes);
    return tsr_fail(err, TSR_ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&share->lock);
  share->stats.received++;
  share->stats.received_bytes += nbytes;
  pthread_mutex_unlock(&share->lock);
  return 0;
}

void tsr_wshare_stats_get(tsr_wshare *share, tsr_wshare_stats *stats)
{
  pthread_mutex_lock(&share->lock);
  *stats = share->stats;
  pthread_mutex_unlock(&share->lock);
}
