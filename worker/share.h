/* worker/share — device chunks between GPU workers without host memory.
 *
 * Over a CUDA-aware UCX (net.h "device memory"; docs/transport.md "Device
 * to device") a GPU worker serves a device chunk from device memory, and
 * its executor threads receive large inputs into device memory: between two
 * GPU workers of one host the bytes move by cuda_ipc, GPU to GPU, and never
 * through host memory. Everywhere else (ZeroMQ, a UCX without CUDA, no
 * buffer to be had) a device chunk is served from a host copy as before.
 *
 * Both ends need memory another process can map, and UCX 1.13's cuda_ipc
 * cannot export the pool's stream-ordered memory (gpu.h "Device memory
 * another process can map"). So the share puts the GPU's allocations in
 * its arena (tsr_wgpu_use_arena; TESSERA_DEVICE_ARENA=0 keeps the pool):
 * a chunk is then sent from where it lives, and a received one lands in
 * arena memory that becomes the chunk: no copy on either side.
 *
 * A chunk outside the arena (TESSERA_DEVICE_ARENA=0, or the arena was
 * full) is first copied device to device into a shared buffer, and without
 * the arena a received one lands in a shared buffer and is copied into the
 * pool as its chunk: copies at device-memory speed (about 1.5 TB/s on an
 * H100) in place of a staging round trip through the host at PCIe speed
 * (about 25 GB/s each way). Shared buffers are counted against the device
 * limit and kept for reuse (idle ones up to a sixteenth of the limit;
 * cudaFree synchronizes the whole device); when none can be had the
 * transfer falls back to host memory.
 *
 * Threading: tsr_wshare_serve on the serving thread (its slot is that
 * thread's); the sink and tsr_wshare_adopt on executor threads, each with
 * its own slot; buffers come back from any of them. */
#ifndef TSR_WORKER_SHARE_H
#define TSR_WORKER_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "net/net.h"
#include "store.h"

#define TSR_WSHARE_MAX 32         /* shared buffers at once, lent or idle */
/* Smaller device chunks are served from a host copy: UCX sends a small
 * CUDA message eagerly through cuda_copy, about 160 us one way on an H200
 * (ucx_perftest tag_lat -m cuda), where our copy down takes tens of us
 * (bench/transfer_gpu.sh: 1 KiB fetches 0.74 ms from device memory, 0.07
 * ms from a host copy; 1 MiB 0.50 against 0.74 ms). */
#define TSR_WSHARE_MIN ((size_t)256 << 10)
#define TSR_WSHARE_IDLE_SHARE 16  /* idle ones kept up to this fraction of the device limit */

typedef struct tsr_wshare tsr_wshare;

/* NULL when this process's UCX cannot move device memory (or
 * TESSERA_DEVICE_TRANSFER=0): device chunks then go through host copies.
 * Otherwise turns on gpu's arena unless TESSERA_DEVICE_ARENA is "0" (main
 * thread, before tasks run). serve_slot is the serving thread's. */
tsr_wshare *tsr_wshare_new(tsr_wgpu *gpu, tsr_wgpu_slot *serve_slot);
/* Frees the idle buffers and the share; every lent buffer must be back
 * (the server closed, the executor stopped). NULL is a no-op. */
void tsr_wshare_free(tsr_wshare **share_p);

/* Serves a device chunk from device memory: from the chunk itself when it
 * lies in the arena (holding a reference until UCX is done), else from a
 * shared copy. Fills out's data, nbytes, release, hint and on_device. 0,
 * or TSR_EINVAL under TSR_WSHARE_MIN, TSR_ENOMEM when no shared buffer can
 * be had now, or the copy's error (the caller then serves a host copy). The
 * signature of tsr_device_serve_fn (store.h), arg = the share. */
int tsr_wshare_serve(void *share, tsr_chunk *chunk, tsr_xfer_chunk *out);

/* The sink an executor thread gives its fetches (net.h). */
const tsr_xfer_device_sink *tsr_wshare_sink(tsr_wshare *share);

/* A fetched input that landed in device memory (data->on_device) becomes a
 * device chunk: arena memory is the chunk as it is; a shared buffer is
 * copied into the pool on slot's stream and given back (data released
 * whatever the outcome). 0, or the allocation's TSR_ELIMIT / TSR_ENOMEM, or
 * the copy's error. */
int tsr_wshare_adopt(tsr_wshare *share, tsr_wgpu_slot *slot, tsr_wstore *store, const char *key, const tsr_meta *meta,
                     tsr_xfer_data *data, tsr_chunk **chunk_p, tsr_errbuf *err);

typedef struct tsr_wshare_stats {
  uint64_t served, served_bytes;       /* device chunks sent from device memory */
  uint64_t received, received_bytes;   /* inputs received into device memory */
  uint64_t buffers, buffer_bytes;      /* shared buffers made (cudaMalloc) */
  uint64_t copies, copy_bytes;         /* device copies into or out of shared buffers */
} tsr_wshare_stats;
void tsr_wshare_stats_get(tsr_wshare *share, tsr_wshare_stats *stats);

#endif
