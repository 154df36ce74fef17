/* worker/pinned — the pinned host tier's memory: a first-fit allocator
 * over a few big host regions (slabs) that a GPU worker pins.
 *
 * Chunks moved off the device land here while there is room (devtier.h):
 * copies between pinned memory and the device are plain DMA at the bus's
 * speed, with no staging copy and no page faults, in both directions
 * (moving down, and a later task copying the chunk back up). Pinning is
 * slow and pinned memory is taken from the whole machine, so slabs are
 * made on demand, `slab_bytes` at a time, up to `limit`, and kept until
 * the allocator is destroyed. Past the limit, alloc says NULL and the
 * caller uses ordinary memory.
 *
 * The slabs come from the caller's functions (cudaHostAlloc/cudaFreeHost
 * on a GPU worker, malloc/free in the unit tests), so this file needs no
 * CUDA. Extents are 4 KiB-aligned.
 *
 * Threading: every function may be called from any thread. free touches
 * only this allocator's mutex and memory, never a CUDA call: a chunk's last
 * reference may drop on ZeroMQ's I/O thread (store.h). alloc may call the
 * slab function (cudaHostAlloc) and is meant for the device tier's mover. */
#ifndef TSR_WORKER_PINNED_H
#define TSR_WORKER_PINNED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tsr_pinned tsr_pinned;

/* Makes (and pins) a slab of bytes, or NULL. */
typedef void *(*tsr_pinned_slab_fn)(void *arg, size_t bytes);
/* Gives a slab back (at destroy only). */
typedef void (*tsr_pinned_unslab_fn)(void *arg, void *slab, size_t bytes);

/* An allocator of at most limit bytes of slabs. NULL on ENOMEM. */
tsr_pinned *tsr_pinned_new(uint64_t limit, size_t slab_bytes, tsr_pinned_slab_fn slab, tsr_pinned_unslab_fn unslab,
                           void *arg);
/* Gives every slab back; every allocation must have been freed (logged
 * otherwise). NULL is a no-op. */
void tsr_pinned_destroy(tsr_pinned **p);

/* nbytes (> 0) of pinned memory, or NULL when the limit is reached (or a
 * slab cannot be made). */
void *tsr_pinned_alloc(tsr_pinned *p, size_t nbytes);
/* Frees what alloc returned (nbytes as asked). The signature of
 * tsr_chunk_release_fn, arg = the allocator. */
void tsr_pinned_free(void *p, void *ptr, size_t nbytes);
/* True when ptr lies in one of the slabs. */
bool tsr_pinned_owns(tsr_pinned *p, const void *ptr);
/* Bytes handed out now / bytes of slabs made. */
uint64_t tsr_pinned_used(tsr_pinned *p);
uint64_t tsr_pinned_slabs(tsr_pinned *p);

#endif
