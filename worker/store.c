/* The chunk store: a tsr_strmap (key -> tsr_chunk *) behind one mutex, and
 * refcounted chunks whose bytes are freed by the last reference, wherever it
 * is dropped. The accounting counters are atomics so the last unref (maybe
 * on ZeroMQ's I/O thread) never needs the store's lock. */
#include "store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devtier.h"
#include "tiers.h"
#include "wire/wire.h"

struct tsr_wstore {
  pthread_mutex_t lock;
  tsr_strmap *map;          /* key -> tsr_chunk *, one reference each; under lock */
  uint64_t epoch;           /* under lock */
  uint64_t memory_limit;
  atomic_uint_fast64_t bytes;        /* host chunks */
  atomic_uint_fast64_t device_bytes; /* device chunks */
  atomic_uint_fast64_t peak, device_peak;  /* the most bytes / device_bytes ever held (docs/report.md) */
  tsr_device_copy_fn device_copy;
  void *device_copy_arg;
  tsr_device_serve_fn device_serve;
  void *device_serve_arg;
  _Atomic uint64_t host_copies;   /* device chunks served through a host copy */
  atomic_uint_fast64_t live;
  atomic_bool warned_limit;
  struct tsr_tiers *tiers;   /* set before tasks run, then read-only */
  struct tsr_devtier *devtier; /* likewise (GPU workers) */
  uint64_t clock;            /* LRU clock; under lock */
};

tsr_wstore *tsr_wstore_new(uint64_t memory_limit)
{
  tsr_wstore *store = calloc(1, sizeof *store);
  if (store == NULL) return NULL;
  store->map = tsr_strmap_new(1024);
  if (store->map == NULL) {
    free(store);
    return NULL;
  }
  pthread_mutex_init(&store->lock, NULL);
  store->epoch = 1;
  store->memory_limit = memory_limit;
  atomic_init(&store->bytes, 0);
  atomic_init(&store->device_bytes, 0);
  atomic_init(&store->peak, 0);
  atomic_init(&store->device_peak, 0);
  atomic_init(&store->live, 0);
  atomic_init(&store->warned_limit, false);
  return store;
}

static void unref_entry(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)arg, (void)key, (void)key_len;
  tsr_chunk *chunk = (tsr_chunk *)(uintptr_t)value;
  tsr_chunk_unref(&chunk);
}

void tsr_wstore_destroy(tsr_wstore **store_p)
{
  if (store_p == NULL || *store_p == NULL) return;
  tsr_wstore *store = *store_p;
  tsr_strmap_each(store->map, unref_entry, NULL);
  tsr_strmap_destroy(&store->map);
  uint64_t live = atomic_load(&store->live);
  if (live != 0) TSR_ERROR("chunk store destroyed with %llu chunks still referenced", (unsigned long long)live);
  pthread_mutex_destroy(&store->lock);
  free(store);
  *store_p = NULL;
}

/* Raises *peak to now when now is higher (concurrent adders: the largest wins). */
static void raise_peak(atomic_uint_fast64_t *peak, uint64_t now)
{
  uint_fast64_t seen = atomic_load_explicit(peak, memory_order_relaxed);
  while (seen < now && !atomic_compare_exchange_weak_explicit(peak, &seen, now, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Counts a new chunk in; warns once when the limit is first exceeded. */
static void account_add(tsr_wstore *store, size_t nbytes)
{
  uint64_t now = atomic_fetch_add(&store->bytes, nbytes) + nbytes;
  raise_peak(&store->peak, now);
  atomic_fetch_add(&store->live, 1);
  if (store->memory_limit == 0 || now <= store->memory_limit) return;
  if (atomic_exchange(&store->warned_limit, true)) return;
  char held[32], limit[32];
  TSR_WARN("chunk store holds %s, over the memory limit of %s (logged once)",
           tsr_format_bytes(now, held, sizeof held), tsr_format_bytes(store->memory_limit, limit, sizeof limit));
}

static int chunk_alloc(tsr_wstore *store, const char *key, const tsr_meta *meta, tsr_chunk **chunk_p)
{
  size_t key_len = strlen(key);
  if (key_len == 0 || key_len > TSR_MAX_KEY_LEN) return TSR_EINVAL;
  tsr_chunk *chunk = calloc(1, sizeof *chunk);
  if (chunk == NULL) return TSR_ENOMEM;
  chunk->key = malloc(key_len + 1);
  if (chunk->key == NULL) {
    free(chunk);
    return TSR_ENOMEM;
  }
  memcpy(chunk->key, key, key_len + 1);
  chunk->meta = *meta;
  chunk->store = store;
  chunk->device = -1;
  atomic_init(&chunk->refs, 1);
  *chunk_p = chunk;
  return 0;
}

int tsr_chunk_new_malloc(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                         tsr_chunk **chunk_p)
{
  tsr_chunk *chunk;
  int rc = chunk_alloc(store, key, meta, &chunk);
  if (rc != 0) return rc;
  chunk->owner = TSR_CHUNK_MALLOC;
  chunk->data = data;
  chunk->nbytes = nbytes;
  account_add(store, nbytes);
  *chunk_p = chunk;
  return 0;
}

int tsr_chunk_new_xfer(tsr_wstore *store, const char *key, const tsr_meta *meta, tsr_xfer_data *xfer,
                       tsr_chunk **chunk_p)
{
  tsr_chunk *chunk;
  int rc = chunk_alloc(store, key, meta, &chunk);
  if (rc != 0) return rc;
  chunk->owner = TSR_CHUNK_XFER;
  chunk->xfer = *xfer;
  chunk->data = xfer->data;
  chunk->nbytes = xfer->nbytes;
  chunk->replica = true;
  memset(xfer, 0, sizeof *xfer);
  account_add(store, chunk->nbytes);
  *chunk_p = chunk;
  return 0;
}

/* A chunk over bytes it does not own, freed by release(release_arg, ...):
 * the device and pinned kinds, which differ in their accounting only. */
static int chunk_new_released(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                              tsr_chunk_owner owner, tsr_chunk_release_fn release, void *release_arg,
                              tsr_chunk **chunk_p)
{
  int rc = chunk_alloc(store, key, meta, chunk_p);
  if (rc != 0) return rc;
  tsr_chunk *chunk = *chunk_p;
  chunk->owner = owner;
  chunk->data = data;
  chunk->nbytes = nbytes;
  chunk->release = release;
  chunk->release_arg = release_arg;
  return 0;
}

int tsr_chunk_new_device(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                         int device, tsr_chunk_release_fn release, void *release_arg, tsr_chunk **chunk_p)
{
  int rc = chunk_new_released(store, key, meta, data, nbytes, TSR_CHUNK_DEVICE, release, release_arg, chunk_p);
  if (rc != 0) return rc;
  (*chunk_p)->device = device;
  raise_peak(&store->device_peak, atomic_fetch_add(&store->device_bytes, nbytes) + nbytes);
  atomic_fetch_add(&store->live, 1);
  return 0;
}

int tsr_chunk_new_pinned(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                         tsr_chunk_release_fn release, void *release_arg, tsr_chunk **chunk_p)
{
  int rc = chunk_new_released(store, key, meta, data, nbytes, TSR_CHUNK_PINNED, release, release_arg, chunk_p);
  if (rc == 0) account_add(store, nbytes);
  return rc;
}

tsr_chunk *tsr_chunk_ref(tsr_chunk *chunk)
{
  atomic_fetch_add_explicit(&chunk->refs, 1, memory_order_relaxed);
  return chunk;
}

void tsr_chunk_unref(tsr_chunk **chunk_p)
{
  if (chunk_p == NULL || *chunk_p == NULL) return;
  tsr_chunk *chunk = *chunk_p;
  *chunk_p = NULL;
  /* acq_rel: the freeing thread must see every write made under the other
   * references (the usual refcount pairing). */
  if (atomic_fetch_sub_explicit(&chunk->refs, 1, memory_order_acq_rel) != 1) return;
  tsr_wstore *store = chunk->store;
  size_t nbytes = chunk->nbytes;
  bool device = chunk->owner == TSR_CHUNK_DEVICE;
  if (chunk->owner == TSR_CHUNK_XFER)
    tsr_xfer_data_release(&chunk->xfer);
  else if (device || chunk->owner == TSR_CHUNK_PINNED)
    chunk->release(chunk->release_arg, chunk->data, nbytes);
  else
    free(chunk->data);
  free(chunk->key);
  free(chunk);
  atomic_fetch_sub(device ? &store->device_bytes : &store->bytes, nbytes);
  atomic_fetch_sub(&store->live, 1);
}

/* Replaces the map's entry for chunk->key; the old chunk's reference is
 * handed back in *old_p so it is dropped outside the lock. */
static int map_replace(tsr_wstore *store, tsr_chunk *chunk, tsr_chunk **old_p)
{
  size_t len = strlen(chunk->key);
  uint64_t value;
  *old_p = tsr_strmap_get(store->map, chunk->key, len, &value) ? (tsr_chunk *)(uintptr_t)value : NULL;
  int rc = tsr_strmap_put(store->map, chunk->key, len, (uint64_t)(uintptr_t)chunk);
  if (rc != 0) *old_p = NULL;
  return rc;
}

int tsr_wstore_put(tsr_wstore *store, tsr_chunk *chunk, uint64_t epoch, const atomic_bool *cancelled)
{
  tsr_chunk *old = NULL;
  int rc;
  tsr_chunk_ref(chunk);
  pthread_mutex_lock(&store->lock);
  if (epoch != store->epoch || (cancelled != NULL && atomic_load(cancelled)))
    rc = TSR_ECANCELED;
  else
    rc = map_replace(store, chunk, &old);
  if (rc == 0) chunk->last_use = ++store->clock;
  pthread_mutex_unlock(&store->lock);
  if (rc != 0) tsr_chunk_unref(&chunk);
  tsr_chunk_unref(&old);
  return rc;
}

int tsr_wstore_get(tsr_wstore *store, const char *key, tsr_chunk **chunk_p)
{
  if (tsr_wstore_get_mem(store, key, chunk_p) == 0) return 0;
  return store->tiers != NULL ? tsr_tiers_load(store->tiers, store, key, chunk_p) : TSR_ENOTFOUND;
}

int tsr_wstore_get_mem(tsr_wstore *store, const char *key, tsr_chunk **chunk_p)
{
  uint64_t value;
  pthread_mutex_lock(&store->lock);
  bool found = tsr_strmap_get(store->map, key, strlen(key), &value);
  tsr_chunk *chunk = found ? tsr_chunk_ref((tsr_chunk *)(uintptr_t)value) : NULL;
  if (found) {
    chunk->last_use = ++store->clock;
    atomic_store_explicit(&chunk->read, true, memory_order_relaxed);
  }
  pthread_mutex_unlock(&store->lock);
  if (!found) return TSR_ENOTFOUND;
  *chunk_p = chunk;
  return 0;
}

bool tsr_wstore_has(tsr_wstore *store, const char *key)
{
  uint64_t value;
  pthread_mutex_lock(&store->lock);
  bool found = tsr_strmap_get(store->map, key, strlen(key), &value);
  pthread_mutex_unlock(&store->lock);
  return found;
}

static bool del_if(tsr_wstore *store, const char *key, bool only_replica)
{
  size_t len = strlen(key);
  uint64_t value;
  tsr_chunk *chunk = NULL;
  /* The spill file first: a load in progress then finishes before the key
   * leaves the map, and cannot bring it back afterwards. */
  bool on_disk = !only_replica && store->tiers != NULL && tsr_tiers_del(store->tiers, key);
  pthread_mutex_lock(&store->lock);
  if (tsr_strmap_get(store->map, key, len, &value)) {
    chunk = (tsr_chunk *)(uintptr_t)value;
    if (only_replica && !chunk->replica)
      chunk = NULL;
    else
      tsr_strmap_del(store->map, key, len);
  }
  pthread_mutex_unlock(&store->lock);
  bool found = chunk != NULL || on_disk;
  tsr_chunk_unref(&chunk);
  return found;
}

bool tsr_wstore_del(tsr_wstore *store, const char *key) { return del_if(store, key, false); }
bool tsr_wstore_del_replica(tsr_wstore *store, const char *key) { return del_if(store, key, true); }

uint64_t tsr_wstore_clear(tsr_wstore *store)
{
  /* Swap in an empty map and drop the old one's references outside the
   * lock. Without memory for an empty map the worker cannot go on coherently
   * (it would keep chunks the scheduler believes gone). */
  tsr_strmap *old = tsr_strmap_new(1024);
  if (old == NULL) {
    TSR_ERROR("out of memory while clearing the chunk store");
    abort();
  }
  if (store->tiers != NULL) tsr_tiers_clear(store->tiers);
  pthread_mutex_lock(&store->lock);
  tsr_strmap *swap = store->map;
  store->map = old;
  old = swap;
  uint64_t epoch = ++store->epoch;
  pthread_mutex_unlock(&store->lock);
  tsr_strmap_each(old, unref_entry, NULL);
  tsr_strmap_destroy(&old);
  return epoch;
}

/* Collects the keys of replicas (tsr_strmap_each callback). */
typedef struct key_list {
  char **keys;
  size_t n, cap;
} key_list;

static void collect_replica(void *arg, const char *key, size_t key_len, uint64_t value)
{
  key_list *l = arg;
  if (!((tsr_chunk *)(uintptr_t)value)->replica) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    char **grown = realloc(l->keys, cap * sizeof *grown);
    if (grown == NULL) return;
    l->keys = grown, l->cap = cap;
  }
  if ((l->keys[l->n] = strndup(key, key_len)) != NULL) l->n++;
}

uint64_t tsr_wstore_renew(tsr_wstore *store)
{
  if (store->tiers != NULL) tsr_tiers_clear(store->tiers);
  key_list l = {0};
  pthread_mutex_lock(&store->lock);
  tsr_strmap_each(store->map, collect_replica, &l);
  uint64_t epoch = ++store->epoch;
  pthread_mutex_unlock(&store->lock);
  for (size_t i = 0; i < l.n; i++) {
    del_if(store, l.keys[i], true);
    free(l.keys[i]);
  }
  free(l.keys);
  return epoch;
}

typedef struct each_ctx {
  tsr_wstore_chunk_fn fn;
  void *arg;
} each_ctx;

static void each_chunk(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)key, (void)key_len;
  each_ctx *ctx = arg;
  ctx->fn(ctx->arg, (const tsr_chunk *)(uintptr_t)value);
}

void tsr_wstore_each(tsr_wstore *store, tsr_wstore_chunk_fn fn, void *arg)
{
  each_ctx ctx = {fn, arg};
  pthread_mutex_lock(&store->lock);
  tsr_strmap_each(store->map, each_chunk, &ctx);
  pthread_mutex_unlock(&store->lock);
}

uint64_t tsr_wstore_epoch(tsr_wstore *store)
{
  pthread_mutex_lock(&store->lock);
  uint64_t epoch = store->epoch;
  pthread_mutex_unlock(&store->lock);
  return epoch;
}

uint64_t tsr_wstore_bytes(const tsr_wstore *store) { return atomic_load(&store->bytes); }
uint64_t tsr_wstore_device_bytes(const tsr_wstore *store) { return atomic_load(&store->device_bytes); }
uint64_t tsr_wstore_peak_bytes(const tsr_wstore *store) { return atomic_load(&store->peak); }
uint64_t tsr_wstore_device_peak_bytes(const tsr_wstore *store) { return atomic_load(&store->device_peak); }
uint64_t tsr_wstore_live_chunks(const tsr_wstore *store) { return atomic_load(&store->live); }
uint64_t tsr_wstore_memory_limit(const tsr_wstore *store) { return store->memory_limit; }

size_t tsr_wstore_count(tsr_wstore *store)
{
  pthread_mutex_lock(&store->lock);
  size_t n = tsr_strmap_count(store->map);
  pthread_mutex_unlock(&store->lock);
  return n;
}

/* ZeroMQ's free callback for served bytes: drops the server's reference. */
static void xfer_release(void *data, void *hint)
{
  (void)data;
  tsr_chunk *chunk = hint;
  tsr_chunk_unref(&chunk);
}

void tsr_wstore_set_device_copy(tsr_wstore *store, tsr_device_copy_fn copy, void *arg)
{
  store->device_copy = copy;
  store->device_copy_arg = arg;
}

void tsr_wstore_set_device_serve(tsr_wstore *store, tsr_device_serve_fn serve, void *arg)
{
  store->device_serve = serve;
  store->device_serve_arg = arg;
}

uint64_t tsr_wstore_host_copies(const tsr_wstore *store) { return atomic_load(&store->host_copies); }

/* ZeroMQ's free callback for the host copy of a device chunk. */
static void free_copy(void *data, void *hint)
{
  (void)data;
  free(hint);
}

/* Serves a device chunk from device memory when the peer's transport
 * takes it, else from a host copy: the chunk's reference is dropped here,
 * on the serving thread, never on ZeroMQ's (both copy it first). */
static int lookup_device(tsr_wstore *store, tsr_chunk *chunk, tsr_xfer_chunk *out)
{
  if (out->device_ok && store->device_serve != NULL &&
      store->device_serve(store->device_serve_arg, chunk, out) == 0) {
    out->meta = chunk->meta;
    tsr_chunk_unref(&chunk);
    return 0;
  }
  atomic_fetch_add(&store->host_copies, 1);
  tsr_errbuf err = {{0}};
  void *copy = malloc(chunk->nbytes ? chunk->nbytes : 1);
  int rc = copy == NULL ? tsr_fail(&err, TSR_ENOMEM, "out of memory")
           : store->device_copy == NULL ? tsr_fail(&err, TSR_EINTERNAL, "no device copy installed")
           : store->device_copy(store->device_copy_arg, copy, chunk->data, chunk->nbytes, &err);
  if (rc != 0) {
    TSR_WARN("cannot serve device chunk '%s' (%zu bytes): %s", chunk->key, chunk->nbytes, err.text);
    free(copy);
    tsr_chunk_unref(&chunk);
    return TSR_ENOTFOUND;
  }
  out->meta = chunk->meta;
  out->data = copy;
  out->nbytes = chunk->nbytes;
  out->release = free_copy;
  out->hint = copy;
  tsr_chunk_unref(&chunk);
  return 0;
}

/* ---------- tiers ---------- */

void tsr_wstore_set_tiers(tsr_wstore *store, struct tsr_tiers *tiers) { store->tiers = tiers; }
struct tsr_tiers *tsr_wstore_tiers(const tsr_wstore *store) { return store->tiers; }

void tsr_wstore_set_devtier(tsr_wstore *store, struct tsr_devtier *devtier) { store->devtier = devtier; }

void tsr_wstore_balance(tsr_wstore *store)
{
  /* Device first: what it moves down lands in host memory, which the host
   * tiers then balance. */
  if (store->devtier != NULL) tsr_devtier_balance(store->devtier);
  if (store->tiers != NULL) tsr_tiers_balance(store->tiers, store);
}

typedef struct idle_list {
  tsr_chunk **chunks;
  size_t n, cap;
  bool device;   /* collect device chunks (else host chunks) */
  bool failed;
} idle_list;

static void collect_idle(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)key, (void)key_len;
  idle_list *l = arg;
  tsr_chunk *chunk = (tsr_chunk *)(uintptr_t)value;
  if (l->failed || tsr_chunk_on_device(chunk) != l->device || atomic_load(&chunk->refs) != 1) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    tsr_chunk **grown = realloc(l->chunks, cap * sizeof *grown);
    if (grown == NULL) {
      l->failed = true;
      return;
    }
    l->chunks = grown;
    l->cap = cap;
  }
  l->chunks[l->n++] = tsr_chunk_ref(chunk);
}

/* Eviction order; under the store's lock. */
static uint64_t evict_rank(const tsr_chunk *c)
{
  return c->last_use + (c->recompute && !atomic_load_explicit(&c->read, memory_order_relaxed) ? 1ull << 62 : 0);
}

static int by_last_use(const void *a, const void *b)
{
  uint64_t x = evict_rank(*(tsr_chunk *const *)a), y = evict_rank(*(tsr_chunk *const *)b);
  return (x > y) - (x < y);
}

static size_t idle_where(tsr_wstore *store, bool device, tsr_chunk ***chunks_p)
{
  idle_list l = {.device = device};
  pthread_mutex_lock(&store->lock);
  tsr_strmap_each(store->map, collect_idle, &l);
  if (l.n > 1) qsort(l.chunks, l.n, sizeof *l.chunks, by_last_use);
  pthread_mutex_unlock(&store->lock);
  if (l.failed) {
    for (size_t i = 0; i < l.n; i++) tsr_chunk_unref(&l.chunks[i]);
    free(l.chunks);
    l.chunks = NULL, l.n = 0;
  }
  *chunks_p = l.chunks;
  return l.n;
}

size_t tsr_wstore_idle(tsr_wstore *store, tsr_chunk ***chunks_p) { return idle_where(store, false, chunks_p); }
size_t tsr_wstore_idle_device(tsr_wstore *store, tsr_chunk ***chunks_p) { return idle_where(store, true, chunks_p); }

bool tsr_wstore_evict(tsr_wstore *store, tsr_chunk *chunk)
{
  size_t len = strlen(chunk->key);
  uint64_t value;
  bool evicted = false;
  pthread_mutex_lock(&store->lock);
  if (tsr_strmap_get(store->map, chunk->key, len, &value) && (tsr_chunk *)(uintptr_t)value == chunk &&
      atomic_load(&chunk->refs) == 2) {
    tsr_strmap_del(store->map, chunk->key, len);
    evicted = true;
  }
  pthread_mutex_unlock(&store->lock);
  /* The map's reference; the caller's keeps the chunk alive. */
  if (evicted) atomic_fetch_sub_explicit(&chunk->refs, 1, memory_order_acq_rel);
  return evicted;
}

/* Puts fresh in old's place while old is the key's chunk and, when
 * sole_reader, nobody but the map and the caller reads it. */
static bool replace_if(tsr_wstore *store, tsr_chunk *old, tsr_chunk *fresh, bool sole_reader)
{
  size_t len = strlen(old->key);
  uint64_t value;
  bool replaced = false;
  tsr_chunk_ref(fresh);
  pthread_mutex_lock(&store->lock);
  if (tsr_strmap_get(store->map, old->key, len, &value) && (tsr_chunk *)(uintptr_t)value == old &&
      (!sole_reader || atomic_load(&old->refs) == 2) &&
      tsr_strmap_put(store->map, old->key, len, (uint64_t)(uintptr_t)fresh) == 0) {
    /* Same age and read state: the move is not a use. */
    fresh->last_use = old->last_use;
    atomic_store(&fresh->read, atomic_load(&old->read));
    fresh->recompute = old->recompute;
    replaced = true;
  }
  pthread_mutex_unlock(&store->lock);
  if (replaced)
    atomic_fetch_sub_explicit(&old->refs, 1, memory_order_acq_rel);  /* the map's; the caller's keeps it alive */
  else
    tsr_chunk_unref(&fresh);
  return replaced;
}

bool tsr_wstore_replace(tsr_wstore *store, tsr_chunk *old, tsr_chunk *fresh)
{
  return replace_if(store, old, fresh, true);
}

bool tsr_wstore_promote(tsr_wstore *store, tsr_chunk *old, tsr_chunk *fresh)
{
  return replace_if(store, old, fresh, false);
}

int tsr_wstore_xfer_lookup(void *arg, const char *key, tsr_xfer_chunk *out)
{
  tsr_chunk *chunk;
  if (tsr_wstore_get(arg, key, &chunk) != 0) return TSR_ENOTFOUND;
  if (tsr_chunk_on_device(chunk)) return lookup_device(arg, chunk, out);
  out->meta = chunk->meta;
  out->data = chunk->data;
  out->nbytes = chunk->nbytes;
  out->release = xfer_release;
  out->hint = chunk;
  return 0;
}
