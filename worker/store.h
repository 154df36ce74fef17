/* worker/store — the worker's chunk store: key -> refcounted chunk.
 *
 * A chunk is immutable once created: its key, metadata and bytes never
 * change, so any thread holding a reference may read it without a lock.
 * Its lifetime is its reference count alone. The store's map holds one
 * reference; every reader (a running task, the data-plane server while
 * ZeroMQ sends the bytes) holds its own. Dropping a key from the map (free,
 * replace, reconnect) therefore never frees bytes that are still being read:
 * they go when the last reference does.
 *
 * Memory accounting counts every live chunk (in the map or not), because
 * that is what the process really holds; `chunks` counts map entries.
 * Host and device bytes are counted apart.
 *
 * Location: a chunk's bytes are in host memory or, on a GPU worker, in
 * device memory (TSR_CHUNK_DEVICE; data is then a device pointer and is
 * freed through the chunk's release callback). Device chunks are never
 * handed to ZeroMQ: serving one copies it to a host buffer first, through
 * the copy function the worker installs (tsr_wstore_set_device_copy).
 *
 * Epochs: the main thread bumps the epoch when it drops everything after a
 * reconnect. A put carries the epoch its task was started under and is
 * refused when it is stale, so a task that was running across a reconnect
 * cannot leave a chunk the new scheduler session does not know about.
 *
 * Threading: every function may be called from any thread. A chunk's last
 * unref may run on ZeroMQ's I/O thread (the xfer release callback): freeing
 * a chunk therefore touches host memory and atomics only, never a lock of
 * this store, never a ZeroMQ socket. The store must outlive its chunks:
 * destroy it only after the ZeroMQ context is terminated and the executor
 * threads are joined. */
#ifndef TSR_WORKER_STORE_H
#define TSR_WORKER_STORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/net.h"
#include "util/util.h"

typedef struct tsr_wstore tsr_wstore;

/* How a chunk's bytes are freed. */
typedef enum {
  TSR_CHUNK_MALLOC = 1,  /* free(data): kernel outputs */
  TSR_CHUNK_XFER,        /* tsr_xfer_data_release(): bytes received from a peer */
  TSR_CHUNK_DEVICE,      /* release(release_arg, data, nbytes): device memory of a GPU worker */
  TSR_CHUNK_PINNED,      /* release(release_arg, data, nbytes): host memory a GPU worker pinned (slabs.h) */
} tsr_chunk_owner;

/* Frees a device or pinned chunk's bytes. Called by the last unref, on the
 * thread that drops it: never ZeroMQ's I/O thread for a device chunk (see
 * above); a pinned chunk is a host chunk and may be served, so its release
 * must be safe there (no CUDA call). */
typedef void (*tsr_chunk_release_fn)(void *arg, void *data, size_t nbytes);

typedef struct tsr_chunk {
  char *key;             /* NUL-terminated, owned */
  tsr_meta meta;
  void *data;            /* nbytes bytes, C order; may be NULL when nbytes is 0 */
  size_t nbytes;
  atomic_uint refs;
  tsr_chunk_owner owner;
  tsr_xfer_data xfer;    /* TSR_CHUNK_XFER only */
  tsr_chunk_release_fn release;  /* TSR_CHUNK_DEVICE and TSR_CHUNK_PINNED only */
  void *release_arg;
  int device;            /* TSR_CHUNK_DEVICE: the GPU holding data; -1 for host chunks */
  bool replica;          /* fetched from a peer, not computed here */
  bool recompute;        /* cheaper to recompute than to spill: evicted by dropping (set before the put) */
  uint64_t last_use;     /* the store's clock at the last put/get; under the store's lock */
  atomic_bool read;      /* got at least once since the put */
  tsr_wstore *store;     /* for the byte accounting */
} tsr_chunk;

/* A store with an optional memory limit (0 = none; exceeding it is only
 * logged, once, for now). NULL on ENOMEM. */
tsr_wstore *tsr_wstore_new(uint64_t memory_limit);
/* Drops the map's references and frees the store. NULL is a no-op. Chunks
 * still referenced elsewhere at that point are a bug and are logged. */
void tsr_wstore_destroy(tsr_wstore **store_p);

/* Wraps kernel output (malloc'd, freed with free()). On success the chunk
 * owns data and *chunk_p holds its one reference; on error the caller still
 * owns data. 0, TSR_ENOMEM or TSR_EINVAL (key too long). */
int tsr_chunk_new_malloc(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                         tsr_chunk **chunk_p);
/* Wraps received bytes. On success takes *xfer (zeroing it) and marks the
 * chunk a replica; on error the caller still owns *xfer. */
int tsr_chunk_new_xfer(tsr_wstore *store, const char *key, const tsr_meta *meta, tsr_xfer_data *xfer,
                       tsr_chunk **chunk_p);
/* Wraps device memory (a CUDA variant's output): data is a device pointer
 * on `device`, freed by release(release_arg, data, nbytes) at the last
 * unref. On error the caller still owns data. */
int tsr_chunk_new_device(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                         int device, tsr_chunk_release_fn release, void *release_arg, tsr_chunk **chunk_p);
/* Wraps host memory freed by release(release_arg, data, nbytes) at the last
 * unref, on any thread (pinned memory: a chunk the device tier moved down).
 * Counted as host bytes, evicted and served like any host chunk. On error
 * the caller still owns data. */
int tsr_chunk_new_pinned(tsr_wstore *store, const char *key, const tsr_meta *meta, void *data, size_t nbytes,
                         tsr_chunk_release_fn release, void *release_arg, tsr_chunk **chunk_p);
static inline bool tsr_chunk_on_device(const tsr_chunk *chunk) { return chunk->owner == TSR_CHUNK_DEVICE; }
/* Adds a reference; returns chunk. */
tsr_chunk *tsr_chunk_ref(tsr_chunk *chunk);
/* Drops the caller's reference and NULLs *chunk_p; frees at zero. NULL and
 * *NULL are no-ops. Safe on any thread, lock-free. */
void tsr_chunk_unref(tsr_chunk **chunk_p);

/* Inserts chunk under its key with a new reference held by the map,
 * replacing (and unreferencing) any chunk there before. Refused with
 * TSR_ECANCELED, without touching the map, when epoch is not the store's
 * current epoch or when *cancelled (may be NULL) is true at the moment of
 * insertion; both are checked under the store's lock, so a concurrent
 * tsr_wstore_clear() or a "cancel, then delete" sequence on another thread
 * can never be overtaken. 0 on success, or TSR_ENOMEM. The caller keeps its
 * own reference either way. */
int tsr_wstore_put(tsr_wstore *store, tsr_chunk *chunk, uint64_t epoch, const atomic_bool *cancelled);
/* Returns 0 and a new reference in *chunk_p, or TSR_ENOTFOUND. */
int tsr_wstore_get(tsr_wstore *store, const char *key, tsr_chunk **chunk_p);
bool tsr_wstore_has(tsr_wstore *store, const char *key);
/* Drops key from the map (readers keep their references). Returns true when
 * it was there. */
bool tsr_wstore_del(tsr_wstore *store, const char *key);
/* Same, but only when the chunk held under key is a replica. */
bool tsr_wstore_del_replica(tsr_wstore *store, const char *key);
/* Drops every key and starts a new epoch, which it returns. */
uint64_t tsr_wstore_clear(tsr_wstore *store);
uint64_t tsr_wstore_epoch(tsr_wstore *store);
/* Starts a new epoch (a task of the old one can no longer store its
 * result) keeping the results in memory: replicas and spilled chunks go.
 * After the scheduler link was lost, the kept results are reported in the
 * next hello (a restarted scheduler adopts them). Returns the epoch. */
uint64_t tsr_wstore_renew(tsr_wstore *store);
/* Calls fn for every chunk of the map, under the store's lock: fn must
 * not call into the store. */
typedef void (*tsr_wstore_chunk_fn)(void *arg, const tsr_chunk *chunk);
void tsr_wstore_each(tsr_wstore *store, tsr_wstore_chunk_fn fn, void *arg);

/* Host bytes held by live chunks (in the map or still referenced
 * elsewhere); device chunks are counted apart. */
uint64_t tsr_wstore_bytes(const tsr_wstore *store);
uint64_t tsr_wstore_device_bytes(const tsr_wstore *store);
/* The most host / device bytes held at once since the store was made. */
uint64_t tsr_wstore_peak_bytes(const tsr_wstore *store);
uint64_t tsr_wstore_device_peak_bytes(const tsr_wstore *store);
/* Number of keys in the map. */
size_t tsr_wstore_count(tsr_wstore *store);
/* Live chunk objects (in the map or not); for tests and leak checks. */
uint64_t tsr_wstore_live_chunks(const tsr_wstore *store);
uint64_t tsr_wstore_memory_limit(const tsr_wstore *store);

/* ---------- tiers (tiers.h) ----------
 * With tiers attached, a get that misses memory loads the key from its
 * spill file, del and clear delete spill files too, and evicted chunks
 * leave the map. The store never holds its lock while calling tiers. */
struct tsr_tiers;
/* Attaches tiers (main thread, before any task runs); NULL detaches. */
void tsr_wstore_set_tiers(tsr_wstore *store, struct tsr_tiers *tiers);
struct tsr_tiers *tsr_wstore_tiers(const tsr_wstore *store);
/* tsr_wstore_get for memory only (never loads from disk). */
int tsr_wstore_get_mem(tsr_wstore *store, const char *key, tsr_chunk **chunk_p);
/* The host chunks of the map that only the map references (no running
 * task, no send in flight), least recently used first — except that
 * recomputable chunks nobody has read yet come last, so a fresh random
 * chunk is not dropped before its consumer runs — each with a new
 * reference: the caller unrefs each and frees the array. Returns the
 * count (0 also on ENOMEM, with *chunks_p NULL). */
size_t tsr_wstore_idle(tsr_wstore *store, tsr_chunk ***chunks_p);
/* The same for the device chunks of the map (devtier.h). */
size_t tsr_wstore_idle_device(tsr_wstore *store, tsr_chunk ***chunks_p);
/* Removes chunk from the map if it is still the key's chunk and nobody but
 * the map and the caller references it. True when removed (the bytes go
 * with the caller's reference). */
bool tsr_wstore_evict(tsr_wstore *store, tsr_chunk *chunk);
/* Puts fresh (a copy of old elsewhere: old's device bytes in host memory)
 * in old's place, with old's LRU age, read state and recompute mark, if old
 * is still the key's chunk and nobody but the map and the caller
 * references it (checked under the store's lock, so no get can slip in).
 * True when replaced: the map then holds its own reference to fresh, and
 * old's bytes go with the caller's reference. The caller keeps its
 * reference to fresh either way. */
bool tsr_wstore_replace(tsr_wstore *store, tsr_chunk *old, tsr_chunk *fresh);
/* tsr_wstore_replace for a device copy of a host chunk (fresh), whoever
 * else reads old: they keep old's bytes until they drop it, and every
 * later get finds fresh. */
bool tsr_wstore_promote(tsr_wstore *store, tsr_chunk *old, tsr_chunk *fresh);

/* ---------- device tier (devtier.h) ----------
 * A GPU worker attaches its device tier (main thread, before any task
 * runs; NULL detaches); balancing then moves device chunks down first. */
struct tsr_devtier;
void tsr_wstore_set_devtier(tsr_wstore *store, struct tsr_devtier *devtier);
/* Balances the tiers after the store grew (device tier, then host tiers);
 * no-op without them. */
void tsr_wstore_balance(tsr_wstore *store);

/* Copies nbytes of device memory at src to host memory at dst; 0 or an
 * error. Runs on the thread that serves the data socket. */
typedef int (*tsr_device_copy_fn)(void *arg, void *dst, const void *src, size_t nbytes, tsr_errbuf *err);
/* Installs the copy that serving a device chunk uses (main thread, before
 * serving starts). Without one, device chunks are not served. */
void tsr_wstore_set_device_copy(tsr_wstore *store, tsr_device_copy_fn copy, void *arg);
/* Serves a device chunk from device memory (share.h): fills out's data,
 * nbytes, release, hint and on_device, taking a reference of its own when
 * it sends from the chunk itself; 0, or an error (then a host copy is
 * served). Runs on the serving thread. */
typedef int (*tsr_device_serve_fn)(void *arg, tsr_chunk *chunk, tsr_xfer_chunk *out);
/* Installs it (main thread, before serving starts): used when the server
 * says the peer's transport takes device memory (out->device_ok). */
void tsr_wstore_set_device_serve(tsr_wstore *store, tsr_device_serve_fn serve, void *arg);
/* Device chunks served through a host copy since start (any thread). */
uint64_t tsr_wstore_host_copies(const tsr_wstore *store);

/* The data-plane server's lookup (tsr_xfer_lookup_fn with arg = store):
 * for a host chunk, a new reference that the server drops through
 * chunk->release, possibly on ZeroMQ's I/O thread; for a device chunk, a
 * host copy (malloc'd, freed by the release callback) made with the
 * installed copy function. 0 or TSR_ENOTFOUND (also when a device chunk
 * cannot be copied: the asker then reports the input missing and the
 * scheduler recomputes it). */
int tsr_wstore_xfer_lookup(void *store, const char *key, tsr_xfer_chunk *chunk);

#endif
