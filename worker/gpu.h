/* worker/gpu — the GPU a worker owns (`tessera-worker --gpu N`): its
 * stream-ordered memory pool with a hard byte limit, pinned host staging
 * buffers, one execution slot per executor thread (a stream with a cuBLAS
 * and a cuSOLVER handle bound to it), and utilization through NVML.
 *
 * Two implementations behind this header, chosen by CMake: gpu_cuda.c
 * (built when the CUDA kernels are, links the CUDA runtime, cuBLAS and
 * cuSOLVER) and gpu_none.c (every entry point fails with "this build has
 * no CUDA"). No CUDA type appears here, so the rest of the worker compiles
 * the same either way.
 *
 * Memory. Every device allocation (chunks, input copies, kernel scratch)
 * comes from one cudaMemPool and is counted here against the limit. An
 * allocation that would pass it first asks the reclaim hook (the worker's
 * device tier, devtier.h) to move idle chunks out of device memory; when
 * nothing more can be moved it waits a while for running tasks to give
 * memory back (their transient bytes, the chunks they hold), and then is
 * refused with TSR_ELIMIT and a message naming what it was for, its size
 * and the limit — never a CUDA out-of-memory crash. A request larger than
 * the whole limit is refused at once. Device memory is never managed
 * memory. A GPU worker that moves chunks over cuda_ipc takes its memory
 * from an arena of cudaMalloc'd slabs instead (tsr_wgpu_use_arena), the
 * pool only when the arena is full.
 *
 * Ordering. A slot's work is ordered on its own stream only: nothing here
 * synchronizes the device. Device bytes are freed only once every stream
 * that used them has been synchronized (the executor synchronizes its
 * stream before it drops its references), so a free needs no cross-stream
 * event.
 *
 * Threading. tsr_wgpu_open/close on the main thread. A slot belongs to one
 * thread at a time (its stream and staging buffers). tsr_wgpu_release and
 * the counters may be called from any thread except ZeroMQ's I/O thread
 * (device chunks are never handed to ZeroMQ: they are copied to host
 * memory first). */
#ifndef TSR_WORKER_GPU_H
#define TSR_WORKER_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels.h"
#include "util/util.h"

typedef struct tsr_wgpu tsr_wgpu;
typedef struct tsr_wgpu_slot tsr_wgpu_slot;

/* True when this build can drive a GPU (gpu_cuda.c). */
bool tsr_wgpu_built(void);

/* Writes one line per visible GPU to out ("INDEX<TAB>NAME<TAB>BYTES") and
 * returns the count (> 0). TSR_ENODEV with a message when this build has no
 * CUDA or no GPU can be used (no driver, no device). */
int tsr_wgpu_list(FILE *out, tsr_errbuf *err);

/* Opens device `device` for `slots` executor slots plus two: the main
 * thread's (serving device chunks) and the device tier's (moving them
 * down). limit 0 means 90% of the device's
 * memory; a larger limit than the device has is lowered to its size (with
 * a warning). 0, TSR_ENODEV (no such GPU / no CUDA), TSR_ENOMEM or
 * TSR_EINTERNAL, with a message. */
int tsr_wgpu_open(int device, uint64_t limit, int slots, tsr_wgpu **gpu_p, tsr_errbuf *err);
/* Frees the pool, staging buffers and NVML. Every slot and every device
 * chunk must be gone. NULL is a no-op. */
void tsr_wgpu_close(tsr_wgpu **gpu_p);

int tsr_wgpu_device(const tsr_wgpu *gpu);
/* "NVIDIA H200"; static for the life of gpu. */
const char *tsr_wgpu_name(const tsr_wgpu *gpu);
uint64_t tsr_wgpu_limit(const tsr_wgpu *gpu);
/* Bytes allocated from the pool now (chunks, input copies, scratch). */
uint64_t tsr_wgpu_used(const tsr_wgpu *gpu);
/* Counters since open, for the log at exit and benchmarks: copies through
 * the staging blocks (bytes, and thread time spent in them) and the time
 * allocations spent waiting for memory over the limit. */
typedef struct tsr_wgpu_stats {
  uint64_t upload_bytes, upload_us;
  uint64_t download_bytes, download_us;
  uint64_t waits, wait_us;
  uint64_t pinned_bytes, pin_us;   /* slabs of the pinned host tier made, and the time pinning took */
  uint64_t arena_bytes;            /* slabs of the device arena made (tsr_wgpu_use_arena) */
} tsr_wgpu_stats;
void tsr_wgpu_stats_get(tsr_wgpu *gpu, tsr_wgpu_stats *stats);
/* GPU utilization in percent over NVML's last sample period, or -1 when
 * NVML is not available (libnvidia-ml.so.1 is loaded at run time). */
int tsr_wgpu_util(tsr_wgpu *gpu);
/* Utilization, memory and power of the device from NVML (nvml.h), each
 * -1 when unknown; all -1 without NVML or without a GPU. Main thread. */
struct tsr_nvml_stats;
void tsr_wgpu_nvml(tsr_wgpu *gpu, struct tsr_nvml_stats *out);
/* True after a CUDA error that leaves the context unusable (an illegal
 * address in a kernel, say): the process should exit so the scheduler
 * recomputes its work elsewhere. */
bool tsr_wgpu_broken(const tsr_wgpu *gpu);

/* A slot: stream, cuBLAS and cuSOLVER handles on it, two pinned staging
 * blocks. Make the calling thread use the device first (tsr_wgpu_bind). */
int tsr_wgpu_slot_new(tsr_wgpu *gpu, tsr_wgpu_slot **slot_p, tsr_errbuf *err);
void tsr_wgpu_slot_destroy(tsr_wgpu_slot **slot_p);
/* Makes gpu's device current on the calling thread. 0 or TSR_EINTERNAL. */
int tsr_wgpu_bind(tsr_wgpu *gpu);
tsr_wgpu *tsr_wgpu_slot_gpu(tsr_wgpu_slot *slot);
/* What a CUDA variant gets: stream, handles, scratch (counted against the
 * limit, transient). Valid while the slot lives. */
const tsr_gpu_ctx *tsr_wgpu_slot_ctx(tsr_wgpu_slot *slot);

/* Frees device memory when an allocation of `need` more bytes than fit
 * under the limit is asked for: moves idle chunks out of device memory and
 * returns how many bytes that freed (0: nothing could go). *busy_p gets the
 * bytes of device chunks that tasks or sends hold now: worth waiting for.
 * Called on the allocating thread, with no lock of the GPU held. */
typedef uint64_t (*tsr_wgpu_reclaim_fn)(void *arg, uint64_t need, uint64_t *busy_p);
/* Installs the hook (main thread, before tasks run; NULL removes it). */
void tsr_wgpu_set_reclaim(tsr_wgpu *gpu, tsr_wgpu_reclaim_fn fn, void *arg);
/* Wakes allocations waiting for memory: a task ended, so device chunks it
 * made or read may be movable now (nothing is freed, so nothing else would
 * wake them before their next poll). Any thread. */
void tsr_wgpu_wake(tsr_wgpu *gpu);

/* The pinned host tier (slabs.h): up to limit bytes of host memory,
 * pinned in 256 MiB slabs as chunks moved off the device need it (main
 * thread, before tasks run; 0 = none). Copies between it and the device
 * skip the staging blocks: tsr_wgpu_upload from, and tsr_wgpu_download to,
 * pinned memory are plain DMA. 0 or TSR_ENOMEM. */
int tsr_wgpu_set_pinned(tsr_wgpu *gpu, uint64_t limit, tsr_errbuf *err);
/* nbytes of pinned host memory, or NULL (no pinned tier, or full). */
void *tsr_wgpu_pinned_alloc(tsr_wgpu *gpu, size_t nbytes);
/* Frees it; any thread, ZeroMQ's I/O thread included (no CUDA call). The
 * signature of tsr_chunk_release_fn (arg = the tsr_wgpu). */
void tsr_wgpu_pinned_free(void *gpu, void *ptr, size_t nbytes);
/* Pinned bytes in use now, and pinned so far (slabs). */
uint64_t tsr_wgpu_pinned_used(tsr_wgpu *gpu, uint64_t *slabs_p);

/* Allocates nbytes of device memory, ordered on the slot's stream. `what`
 * names the chunk or input it is for (in the error message). transient:
 * freed before its task ends. May call the reclaim hook and wait (see
 * Memory above). 0, TSR_ELIMIT or TSR_ENOMEM. */
int tsr_wgpu_alloc(tsr_wgpu_slot *slot, size_t nbytes, const char *what, bool transient, void **ptr_p,
                   tsr_errbuf *err);
/* Frees on the slot's stream (after what is enqueued there). */
void tsr_wgpu_free(tsr_wgpu_slot *slot, void *ptr, size_t nbytes, bool transient);
/* A transient allocation of the slot's running task becomes a chunk's
 * (tsr_chunk_new_device with tsr_wgpu_release): its bytes stay used but no
 * longer count as given back when the task ends. */
void tsr_wgpu_keep(tsr_wgpu_slot *slot, size_t nbytes);
/* Frees a chunk's bytes from any thread, once no stream uses them any more.
 * The signature of tsr_chunk_release_fn (arg = the tsr_wgpu). */
void tsr_wgpu_release(void *gpu, void *ptr, size_t nbytes);
/* Ends a task on the slot (after a sync): frees the scratch a kernel left
 * allocated, and hands the task's output allocation over to its chunk
 * (until then, other slots waiting for memory count it as coming back). */
void tsr_wgpu_slot_reset(tsr_wgpu_slot *slot);

/* Device memory another process can map. UCX 1.13's cuda_ipc exports
 * memory with cuIpcGetMemHandle, which refuses the pool's stream-ordered
 * allocations (openucx/ucx#7110; UCX 1.17 exports pools).
 *
 * The arena: from here on every allocation (tsr_wgpu_alloc, ipc_alloc)
 * comes from cudaMalloc'd slabs of up to 1 GiB, made on demand up to the
 * limit (slabs.h) and kept until close, so a chunk can be sent and received
 * by cuda_ipc where it lives, and each peer maps each slab once (UCX caches
 * the mapping by the slab's base). Where the arena has no room an
 * allocation comes from the pool as before. Main thread, before tasks run.
 * 0 or TSR_ENOMEM. (What dask-cuda users know as an RMM pool with UCX.) */
int tsr_wgpu_use_arena(tsr_wgpu *gpu, tsr_errbuf *err);
bool tsr_wgpu_has_arena(const tsr_wgpu *gpu);
/* True when ptr lies in the arena: cuda_ipc can export it. */
bool tsr_wgpu_exportable(tsr_wgpu *gpu, const void *ptr);
/* Exportable memory outside the running tasks' accounting, for buffers
 * another process maps (share.h): from the arena when there is one, else
 * cudaMalloc'd. Counted against the limit but never waits: NULL when it
 * does not fit (or CUDA refuses). Without the arena, cudaFree synchronizes
 * the device: free rarely. Any thread but ZeroMQ's I/O thread. */
void *tsr_wgpu_ipc_alloc(tsr_wgpu *gpu, size_t nbytes);
void tsr_wgpu_ipc_free(tsr_wgpu *gpu, void *ptr, size_t nbytes);
/* Device -> device on the slot's stream; returns once dst holds the bytes.
 * Not a staging copy: the counters above do not see it. */
int tsr_wgpu_copy(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err);

/* Host -> device through the pinned staging blocks, on the slot's stream.
 * Returns once src may be reused. 0 or TSR_EINTERNAL. */
int tsr_wgpu_upload(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err);
/* Device -> host, after what is enqueued on the slot's stream; returns once
 * dst holds the bytes. 0 or TSR_EINTERNAL. */
int tsr_wgpu_download(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err);
/* Waits for the slot's stream (only it). 0, or TSR_EINTERNAL with the CUDA
 * error (and the gpu marked broken when the error is one that poisons the
 * context). */
int tsr_wgpu_sync(tsr_wgpu_slot *slot, tsr_errbuf *err);

#endif
