/* worker/slabs — a first-fit allocator over a few big regions (slabs)
 * made on demand. A GPU worker has two:
 *
 * - The pinned host tier (gpu.h tsr_wgpu_set_pinned): chunks moved off the
 *   device land here while there is room (devtier.h), so copies between
 *   them and the device are plain DMA at the bus's speed, with no staging
 *   copy and no page faults. Pinning is slow and pinned memory is taken
 *   from the whole machine, so slabs are made `slab_bytes` at a time, up
 *   to `limit`.
 * - The device arena (gpu.h tsr_wgpu_use_arena): device memory another
 *   process can map with one IPC handle per slab, so UCX's cuda_ipc sends
 *   and receives chunks where they live (share.h).
 *
 * Slabs are kept until the allocator is destroyed. Past the limit, alloc
 * says NULL and the caller uses other memory.
 *
 * The slabs come from the caller's functions (cudaHostAlloc or cudaMalloc
 * and their frees on a GPU worker, malloc/free in the unit tests), so this
 * file needs no CUDA. Extents are 4 KiB-aligned.
 *
 * Threading: every function may be called from any thread. free touches
 * only this allocator's mutex and memory, never a CUDA call: a chunk's last
 * reference may drop on ZeroMQ's I/O thread (store.h). alloc may call the
 * slab function (cudaHostAlloc, cudaMalloc). */
#ifndef TSR_WORKER_SLABS_H
#define TSR_WORKER_SLABS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tsr_slabs tsr_slabs;

/* Makes (and pins) a slab of bytes, or NULL. */
typedef void *(*tsr_slabs_make_fn)(void *arg, size_t bytes);
/* Gives a slab back (at destroy only). */
typedef void (*tsr_slabs_unmake_fn)(void *arg, void *slab, size_t bytes);

/* An allocator of at most limit bytes of slabs. NULL on ENOMEM. */
tsr_slabs *tsr_slabs_new(uint64_t limit, size_t slab_bytes, tsr_slabs_make_fn slab, tsr_slabs_unmake_fn unslab,
                         void *arg);
/* Gives every slab back; every allocation must have been freed (logged
 * otherwise). NULL is a no-op. */
void tsr_slabs_destroy(tsr_slabs **p);

/* nbytes (> 0) of a slab, or NULL when the limit is reached (or a
 * slab cannot be made). */
void *tsr_slabs_alloc(tsr_slabs *p, size_t nbytes);
/* Frees what alloc returned (nbytes as asked). The signature of
 * tsr_chunk_release_fn, arg = the allocator. */
void tsr_slabs_free(void *p, void *ptr, size_t nbytes);
/* True when ptr lies in one of the slabs. */
bool tsr_slabs_owns(tsr_slabs *p, const void *ptr);
/* Bytes handed out now / bytes of slabs made. */
uint64_t tsr_slabs_used(tsr_slabs *p);
uint64_t tsr_slabs_made(tsr_slabs *p);

#endif
