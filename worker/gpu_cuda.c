/* The GPU of a CUDA build: pool, limit accounting, slots, staging copies.
 *
 * Accounting: `used` is what we handed out (bytes as asked, one lock);
 * cudaMemPool itself has no hard cap, so the limit lives here. The pool
 * keeps freed memory (release threshold = the limit) instead of giving it
 * back to the driver at every synchronization.
 *
 * Over the limit: the reclaim hook (the device tier) moves idle chunks out;
 * failing that, the allocation waits for running tasks to give memory back
 * (woken by frees and by tsr_wgpu_wake at the end of every task, polling
 * besides: a send that ends unpins a chunk silently), at most WAIT_MS.
 *
 * Staging: pinned blocks of STAGE_BLOCK bytes, two per slot, allocated once
 * at open. A copy goes through them piece by piece, double-buffered: the
 * host memcpy of one piece overlaps the DMA of the other.
 *
 * The arena (tsr_wgpu_use_arena): allocations come from cudaMalloc'd slabs
 * first (slabs.h), the pool only when the arena has no room. A free on a
 * slot's stream may precede kernels still queued there that use the bytes,
 * so arena frees from a slot wait in the slot's list until its stream has
 * been synchronized (tsr_wgpu_sync, slot_reset); a chunk's release comes
 * after every stream that used it was synchronized (gpu.h "Ordering") and
 * goes back at once. */
#include "gpu.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "nvml.h"
#include "slabs.h"

#define STAGE_BLOCK (8u << 20)
#define PINNED_SLAB ((size_t)256 << 20)
/* Arena slabs: few (every peer opens each slab's IPC handle once), but a
 * small limit still gets several; a larger chunk gets a slab of its own. */
#define ARENA_SLAB ((size_t)1 << 30)
#define ARENA_SLAB_MIN ((size_t)32 << 20)
#define WAIT_MS 30000
#define WAIT_POLL_MS 5
#define MAX_SCRATCH 64

struct tsr_wgpu {
  int device;
  char name[256];
  uint64_t total, limit;
  cudaMemPool_t pool;
  cudaStream_t release_stream;   /* frees from threads without a slot */
  pthread_mutex_t lock;
  pthread_cond_t freed;
  uint64_t used;                 /* under lock */
  uint64_t transient;            /* under lock: part of used that tasks give back */
  uint64_t outputs;              /* under lock: part of used that running tasks will hand to chunks */
  tsr_wgpu_reclaim_fn reclaim;   /* set before tasks run, then read-only */
  void *reclaim_arg;
  void **stage;                  /* 2 per slot */
  int n_stage, stage_next;       /* stage_next under lock */
  tsr_nvml *nvml;
  _Atomic bool broken;
  tsr_wgpu_stats stats;          /* under lock */
  tsr_slabs *pinned;             /* the pinned host tier, or NULL; set before tasks run */
  tsr_slabs *arena;              /* device memory IPC can map (tsr_wgpu_use_arena), or NULL; set before tasks run */
};

typedef struct deferred_free {
  void *ptr;
  size_t nbytes;
} deferred_free;

struct tsr_wgpu_slot {
  tsr_wgpu *gpu;
  cudaStream_t stream;
  cublasHandle_t cublas;
  cusolverDnHandle_t cusolver;
  tsr_gpu_ctx ctx;
  void *stage[2];
  cudaEvent_t stage_done[2];
  uint64_t transient;            /* this slot's share of gpu->transient */
  uint64_t outputs;              /* this slot's share of gpu->outputs: its task's output, until slot_reset */
  struct {
    void *ptr;
    size_t nbytes;
  } scratch[MAX_SCRATCH];
  int n_scratch;
  deferred_free *deferred;       /* arena frees waiting for the stream to pass them */
  size_t n_deferred, cap_deferred;
};

/* ---------- errors ---------- */

/* Errors after which the context cannot be used again (CUDA's "sticky"
 * errors): every later call would fail the same way. */
static bool poisons_context(cudaError_t e)
{
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorHardwareStackError:
  case cudaErrorAssert:
  case cudaErrorECCUncorrectable:
  case cudaErrorUnknown: return true;
  default: return false;
  }
}

static int cuda_check(cudaError_t e, const char *call, const char *file, int line, tsr_errbuf *err)
{
  if (e == cudaSuccess) return 0;
  cudaGetLastError();  /* clear a non-sticky error so the next call is judged alone */
  const char *base = strrchr(file, '/');
  return tsr_fail(err, TSR_EINTERNAL, "CUDA error in %s (%s:%d): %s", call, base ? base + 1 : file, line,
                  cudaGetErrorString(e));
}
#define CUDA_CHECK(call, err) cuda_check((call), #call, __FILE__, __LINE__, (err))

/* ---------- the device ---------- */

bool tsr_wgpu_built(void) { return true; }

int tsr_wgpu_list(FILE *out, tsr_errbuf *err)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return tsr_fail(err, TSR_ENODEV, "no GPU can be used: cudaGetDeviceCount: %s", cudaGetErrorString(e));
  }
  if (n == 0) return tsr_fail(err, TSR_ENODEV, "no GPU found (cudaGetDeviceCount is 0)");
  for (int i = 0; i < n; i++) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    fprintf(out, "%d\t%s\t%zu\n", i, prop.name, prop.totalGlobalMem);
  }
  return n;
}

static int make_pool(tsr_wgpu *gpu, tsr_errbuf *err)
{
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = gpu->device;
  int rc = CUDA_CHECK(cudaMemPoolCreate(&gpu->pool, &props), err);
  if (rc != 0) return rc;
  uint64_t keep = gpu->limit;
  return CUDA_CHECK(cudaMemPoolSetAttribute(gpu->pool, cudaMemPoolAttrReleaseThreshold, &keep), err);
}

static int make_staging(tsr_wgpu *gpu, int slots, tsr_errbuf *err)
{
  /* the executor's slots, the main thread's and the device tier's */
  gpu->n_stage = 2 * (slots + 2);
  gpu->stage = calloc((size_t)gpu->n_stage, sizeof *gpu->stage);
  if (gpu->stage == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  for (int i = 0; i < gpu->n_stage; i++) {
    int rc = CUDA_CHECK(cudaHostAlloc(&gpu->stage[i], STAGE_BLOCK, cudaHostAllocPortable), err);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Name, memory and the limit; the bus id for NVML. */
static int describe(tsr_wgpu *gpu, uint64_t limit, tsr_errbuf *err)
{
  struct cudaDeviceProp prop;
  int rc = CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu->device), err);
  if (rc != 0) return rc;
  snprintf(gpu->name, sizeof gpu->name, "%s", prop.name);
  gpu->total = prop.totalGlobalMem;
  gpu->limit = limit ? limit : gpu->total / 10 * 9;
  if (gpu->limit > gpu->total) {
    char want[32], have[32];
    TSR_WARN("--device-memory-limit %s is more than gpu:%d has (%s); using %s", tsr_format_bytes(limit, want, sizeof want),
             gpu->device, tsr_format_bytes(gpu->total, have, sizeof have), have);
    gpu->limit = gpu->total;
  }
  char bus[32] = "";
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, gpu->device) == cudaSuccess) gpu->nvml = tsr_nvml_open(bus);
  return 0;
}

int tsr_wgpu_open(int device, uint64_t limit, int slots, tsr_wgpu **gpu_p, tsr_errbuf *err)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return tsr_fail(err, TSR_ENODEV, "--gpu %d: no GPU can be used: %s", device, cudaGetErrorString(e));
  }
  if (device < 0 || device >= count)
    return tsr_fail(err, TSR_ENODEV, "--gpu %d: no such GPU (this machine has %d)", device, count);
  tsr_wgpu *gpu = calloc(1, sizeof *gpu);
  if (gpu == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  gpu->device = device;
  pthread_mutex_init(&gpu->lock, NULL);
  pthread_cond_init(&gpu->freed, NULL);
  int rc = CUDA_CHECK(cudaSetDevice(device), err);
  if (rc == 0) rc = describe(gpu, limit, err);
  if (rc == 0) rc = make_pool(gpu, err);
  if (rc == 0) rc = CUDA_CHECK(cudaStreamCreateWithFlags(&gpu->release_stream, cudaStreamNonBlocking), err);
  if (rc == 0) rc = make_staging(gpu, slots, err);
  if (rc != 0) {
    tsr_wgpu_close(&gpu);
    return rc;
  }
  *gpu_p = gpu;
  return 0;
}

void tsr_wgpu_close(tsr_wgpu **gpu_p)
{
  if (gpu_p == NULL || *gpu_p == NULL) return;
  tsr_wgpu *gpu = *gpu_p;
  cudaSetDevice(gpu->device);
  if (gpu->used != 0) {
    char held[32];
    TSR_ERROR("gpu:%d closed with %s still allocated", gpu->device, tsr_format_bytes(gpu->used, held, sizeof held));
  }
  for (int i = 0; gpu->stage != NULL && i < gpu->n_stage; i++)
    if (gpu->stage[i] != NULL) cudaFreeHost(gpu->stage[i]);
  free(gpu->stage);
  tsr_slabs_destroy(&gpu->pinned);
  tsr_slabs_destroy(&gpu->arena);
  if (gpu->release_stream) cudaStreamDestroy(gpu->release_stream);
  if (gpu->pool) cudaMemPoolDestroy(gpu->pool);
  tsr_nvml_close(&gpu->nvml);
  pthread_cond_destroy(&gpu->freed);
  pthread_mutex_destroy(&gpu->lock);
  free(gpu);
  *gpu_p = NULL;
}

int tsr_wgpu_device(const tsr_wgpu *gpu) { return gpu->device; }
const char *tsr_wgpu_name(const tsr_wgpu *gpu) { return gpu->name; }
uint64_t tsr_wgpu_limit(const tsr_wgpu *gpu) { return gpu->limit; }
int tsr_wgpu_util(tsr_wgpu *gpu) { return tsr_nvml_util(gpu->nvml); }
/* NULL gpu (a CPU worker of a CUDA build): "unknown", as gpu_none.c */
void tsr_wgpu_nvml(tsr_wgpu *gpu, tsr_nvml_stats *out) { tsr_nvml_sample(gpu != NULL ? gpu->nvml : NULL, out); }
bool tsr_wgpu_broken(const tsr_wgpu *gpu) { return gpu->broken; }

uint64_t tsr_wgpu_used(const tsr_wgpu *gpu)
{
  tsr_wgpu *g = (tsr_wgpu *)gpu;
  pthread_mutex_lock(&g->lock);
  uint64_t used = g->used;
  pthread_mutex_unlock(&g->lock);
  return used;
}

int tsr_wgpu_bind(tsr_wgpu *gpu)
{
  return cudaSetDevice(gpu->device) == cudaSuccess ? 0 : TSR_EINTERNAL;
}

static void count_copy(tsr_wgpu *gpu, bool up, size_t nbytes, uint64_t t0);

/* ---------- the pinned host tier ---------- */

/* Anonymous memory the kernel may back with huge pages, registered with
 * CUDA: faulting 2 MiB pages in and pinning them is faster than 4 KiB ones
 * (cudaHostAlloc's). NULL when it cannot be registered. */
static void *map_and_register(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, bytes, MADV_HUGEPAGE);
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return p;
  cudaGetLastError();
  munmap(p, bytes);
  return NULL;
}

static void *pin_slab(void *arg, size_t bytes)
{
  tsr_wgpu *gpu = arg;
  uint64_t t0 = tsr_now_us();
  cudaSetDevice(gpu->device);
  void *p = map_and_register(bytes);
  if (p == NULL && cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    p = NULL;
    char size[32];
    TSR_WARN("gpu:%d: cannot pin %s of host memory; chunks moved off the device go to ordinary memory",
             gpu->device, tsr_format_bytes(bytes, size, sizeof size));
  }
  pthread_mutex_lock(&gpu->lock);
  if (p != NULL) gpu->stats.pinned_bytes += bytes;
  gpu->stats.pin_us += tsr_now_us() - t0;
  pthread_mutex_unlock(&gpu->lock);
  return p;
}

static void unpin_slab(void *arg, void *slab, size_t bytes)
{
  (void)arg;
  if (cudaHostUnregister(slab) == cudaSuccess) {
    munmap(slab, bytes);
    return;
  }
  cudaGetLastError();  /* not registered: it came from cudaHostAlloc */
  cudaFreeHost(slab);
}

int tsr_wgpu_set_pinned(tsr_wgpu *gpu, uint64_t limit, tsr_errbuf *err)
{
  if (limit == 0) return 0;
  gpu->pinned = tsr_slabs_new(limit, limit < PINNED_SLAB ? limit : PINNED_SLAB, pin_slab, unpin_slab, gpu);
  return gpu->pinned != NULL ? 0 : tsr_fail(err, TSR_ENOMEM, "out of memory");
}

void *tsr_wgpu_pinned_alloc(tsr_wgpu *gpu, size_t nbytes)
{
  return gpu->pinned != NULL ? tsr_slabs_alloc(gpu->pinned, nbytes) : NULL;
}

void tsr_wgpu_pinned_free(void *arg, void *ptr, size_t nbytes)
{
  tsr_wgpu *gpu = arg;
  tsr_slabs_free(gpu->pinned, ptr, nbytes);
}

uint64_t tsr_wgpu_pinned_used(tsr_wgpu *gpu, uint64_t *slabs_p)
{
  if (slabs_p != NULL) *slabs_p = gpu->pinned != NULL ? tsr_slabs_made(gpu->pinned) : 0;
  return gpu->pinned != NULL ? tsr_slabs_used(gpu->pinned) : 0;
}

static bool is_pinned(tsr_wgpu *gpu, const void *ptr) { return gpu->pinned != NULL && tsr_slabs_owns(gpu->pinned, ptr); }

/* One DMA between pinned host memory and the device, waited for. */
static int direct_copy(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, enum cudaMemcpyKind kind,
                       tsr_errbuf *err)
{
  uint64_t t0 = tsr_now_us();
  int rc = CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, slot->stream), err);
  if (rc == 0) rc = tsr_wgpu_sync(slot, err);
  count_copy(slot->gpu, kind == cudaMemcpyHostToDevice, nbytes, t0);
  return rc;
}

/* ---------- accounting ---------- */

void tsr_wgpu_set_reclaim(tsr_wgpu *gpu, tsr_wgpu_reclaim_fn fn, void *arg)
{
  gpu->reclaim = fn;
  gpu->reclaim_arg = arg;
}

void tsr_wgpu_stats_get(tsr_wgpu *gpu, tsr_wgpu_stats *stats)
{
  pthread_mutex_lock(&gpu->lock);
  *stats = gpu->stats;
  pthread_mutex_unlock(&gpu->lock);
}

/* Adds one staged copy to the counters. */
static void count_copy(tsr_wgpu *gpu, bool up, size_t nbytes, uint64_t t0)
{
  uint64_t us = tsr_now_us() - t0;
  pthread_mutex_lock(&gpu->lock);
  if (up) gpu->stats.upload_bytes += nbytes, gpu->stats.upload_us += us;
  else gpu->stats.download_bytes += nbytes, gpu->stats.download_us += us;
  pthread_mutex_unlock(&gpu->lock);
}

void tsr_wgpu_wake(tsr_wgpu *gpu)
{
  pthread_mutex_lock(&gpu->lock);
  pthread_cond_broadcast(&gpu->freed);
  pthread_mutex_unlock(&gpu->lock);
}

static void deadline_in(struct timespec *ts, int ms)
{
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static int limit_error(tsr_wgpu *gpu, size_t nbytes, const char *what, uint64_t used, tsr_errbuf *err)
{
  char need[32], lim[32], held[32];
  tsr_format_bytes(nbytes, need, sizeof need);
  tsr_format_bytes(gpu->limit, lim, sizeof lim);
  if (nbytes > gpu->limit)
    return tsr_fail(err, TSR_ELIMIT, "device memory limit: %s needs %s, more than the %s limit of gpu:%d", what, need,
                    lim, gpu->device);
  return tsr_fail(err, TSR_ELIMIT, "device memory limit: %s needs %s, but %s of the %s limit of gpu:%d is in use",
                  what, need, tsr_format_bytes(used, held, sizeof held), lim, gpu->device);
}

/* Takes nbytes under the limit when they fit (under lock). */
static bool take(tsr_wgpu_slot *slot, size_t nbytes, bool transient)
{
  tsr_wgpu *gpu = slot->gpu;
  if (gpu->used + nbytes > gpu->limit) return false;
  gpu->used += nbytes;
  if (transient) gpu->transient += nbytes, slot->transient += nbytes;
  else gpu->outputs += nbytes, slot->outputs += nbytes;
  return true;
}

/* Asks the reclaim hook for `need` bytes. True when it freed some; then
 * the frees (stream-ordered on the release stream) are completed, so the
 * pool can hand their memory to any stream at once. */
static bool reclaim(tsr_wgpu *gpu, uint64_t need, uint64_t *busy_p)
{
  *busy_p = 0;
  if (gpu->reclaim == NULL || gpu->reclaim(gpu->reclaim_arg, need, busy_p) == 0) return false;
  cudaStreamSynchronize(gpu->release_stream);
  return true;
}

static bool past(const struct timespec *t)
{
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* One round of waiting for memory (under lock). False when the request
 * should fail now: past the deadline, or nothing to wait for twice in a
 * row, a poll apart (a task that just ended may be between handing its
 * output over and storing it as a chunk, when neither count shows it). */
static bool wait_round(tsr_wgpu *gpu, bool hope, int *hopeless, const struct timespec *deadline)
{
  *hopeless = hope ? 0 : *hopeless + 1;
  if (past(deadline) || *hopeless > 1) return false;
  struct timespec poll;
  deadline_in(&poll, WAIT_POLL_MS);
  uint64_t t0 = tsr_now_us();
  pthread_cond_timedwait(&gpu->freed, &gpu->lock, &poll);
  gpu->stats.waits++;
  gpu->stats.wait_us += tsr_now_us() - t0;
  return true;
}

/* Reserves nbytes under the limit. Over it: the reclaim hook moves idle
 * chunks out; when nothing could be moved, waits (at most WAIT_MS) while
 * other tasks hold memory that will come back or become movable — other
 * slots' transient bytes, their outputs (chunks soon), device chunks in
 * use — and fails when none do. */
static int reserve(tsr_wgpu_slot *slot, size_t nbytes, const char *what, bool transient, tsr_errbuf *err)
{
  tsr_wgpu *gpu = slot->gpu;
  if (nbytes > gpu->limit) return limit_error(gpu, nbytes, what, tsr_wgpu_used(gpu), err);
  struct timespec deadline;
  deadline_in(&deadline, WAIT_MS);
  int hopeless = 0;
  for (;;) {
    pthread_mutex_lock(&gpu->lock);
    bool ok = take(slot, nbytes, transient);
    uint64_t need = ok ? 0 : gpu->used + nbytes - gpu->limit;
    uint64_t others = gpu->transient - slot->transient + gpu->outputs - slot->outputs;
    pthread_mutex_unlock(&gpu->lock);
    if (ok) return 0;
    uint64_t busy;
    if (reclaim(gpu, need, &busy)) continue;
    int rc = 0;
    pthread_mutex_lock(&gpu->lock);
    ok = take(slot, nbytes, transient);
    if (!ok && !wait_round(gpu, others > 0 || busy > 0, &hopeless, &deadline))
      rc = limit_error(gpu, nbytes, what, gpu->used, err);
    pthread_mutex_unlock(&gpu->lock);
    if (ok || rc != 0) return rc;
  }
}

static void unreserve(tsr_wgpu *gpu, tsr_wgpu_slot *slot, size_t nbytes, bool transient)
{
  pthread_mutex_lock(&gpu->lock);
  gpu->used -= nbytes;
  if (transient) {
    gpu->transient -= nbytes;
    slot->transient -= nbytes;
  } else if (slot != NULL && slot->outputs >= nbytes) {
    /* a failed task's output, freed before the task ended */
    gpu->outputs -= nbytes;
    slot->outputs -= nbytes;
  }
  pthread_cond_broadcast(&gpu->freed);
  pthread_mutex_unlock(&gpu->lock);
}

int tsr_wgpu_alloc(tsr_wgpu_slot *slot, size_t nbytes, const char *what, bool transient, void **ptr_p,
                   tsr_errbuf *err)
{
  int rc = reserve(slot, nbytes, what, transient, err);
  if (rc != 0) return rc;
  void *ptr = slot->gpu->arena != NULL ? tsr_slabs_alloc(slot->gpu->arena, nbytes) : NULL;
  /* Never 0 bytes: a chunk's data is always a real pointer. */
  cudaError_t e = ptr != NULL ? cudaSuccess
                              : cudaMallocFromPoolAsync(&ptr, nbytes ? nbytes : 256, slot->gpu->pool, slot->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    unreserve(slot->gpu, slot, nbytes, transient);
    char need[32];
    return tsr_fail(err, TSR_ENOMEM, "gpu:%d cannot allocate %s for %s: %s", slot->gpu->device,
                    tsr_format_bytes(nbytes, need, sizeof need), what, cudaGetErrorString(e));
  }
  *ptr_p = ptr;
  return 0;
}

static bool in_arena(tsr_wgpu *gpu, const void *ptr) { return gpu->arena != NULL && tsr_slabs_owns(gpu->arena, ptr); }

/* Gives the slot's arena frees back: its stream has passed them. */
static void flush_deferred(tsr_wgpu_slot *slot)
{
  for (size_t i = 0; i < slot->n_deferred; i++)
    tsr_slabs_free(slot->gpu->arena, slot->deferred[i].ptr, slot->deferred[i].nbytes);
  slot->n_deferred = 0;
}

/* An arena free ordered after what is queued on the slot's stream. */
static void defer_free(tsr_wgpu_slot *slot, void *ptr, size_t nbytes)
{
  if (slot->n_deferred == slot->cap_deferred) {
    size_t cap = slot->cap_deferred ? 2 * slot->cap_deferred : 16;
    deferred_free *grown = realloc(slot->deferred, cap * sizeof *grown);
    if (grown == NULL) {   /* no list: wait for the stream instead */
      cudaStreamSynchronize(slot->stream);
      tsr_slabs_free(slot->gpu->arena, ptr, nbytes);
      return;
    }
    slot->deferred = grown;
    slot->cap_deferred = cap;
  }
  slot->deferred[slot->n_deferred++] = (deferred_free){ptr, nbytes};
}

void tsr_wgpu_free(tsr_wgpu_slot *slot, void *ptr, size_t nbytes, bool transient)
{
  if (ptr == NULL) return;
  if (in_arena(slot->gpu, ptr)) defer_free(slot, ptr, nbytes);
  else cudaFreeAsync(ptr, slot->stream);
  unreserve(slot->gpu, slot, nbytes, transient);
}

void tsr_wgpu_keep(tsr_wgpu_slot *slot, size_t nbytes)
{
  pthread_mutex_lock(&slot->gpu->lock);
  slot->gpu->transient -= nbytes;
  slot->transient -= nbytes;
  pthread_mutex_unlock(&slot->gpu->lock);
}

void tsr_wgpu_release(void *arg, void *ptr, size_t nbytes)
{
  tsr_wgpu *gpu = arg;
  if (ptr == NULL) return;
  if (in_arena(gpu, ptr)) {
    tsr_slabs_free(gpu->arena, ptr, nbytes);
  } else {
    cudaSetDevice(gpu->device);
    cudaFreeAsync(ptr, gpu->release_stream);
  }
  unreserve(gpu, NULL, nbytes, false);
}

/* ---------- slots ---------- */

static void *scratch_alloc(void *pool, size_t bytes)
{
  tsr_wgpu_slot *slot = pool;
  if (slot->n_scratch == MAX_SCRATCH) return NULL;
  void *ptr;
  tsr_errbuf err;
  if (tsr_wgpu_alloc(slot, bytes, "kernel scratch", true, &ptr, &err) != 0) {
    TSR_DEBUG("scratch of %zu bytes refused: %s", bytes, err.text);
    return NULL;
  }
  slot->scratch[slot->n_scratch].ptr = ptr;
  slot->scratch[slot->n_scratch].nbytes = bytes;
  slot->n_scratch++;
  return ptr;
}

static void scratch_free(void *pool, void *ptr)
{
  tsr_wgpu_slot *slot = pool;
  for (int i = slot->n_scratch - 1; i >= 0; i--) {
    if (slot->scratch[i].ptr != ptr) continue;
    tsr_wgpu_free(slot, ptr, slot->scratch[i].nbytes, true);
    slot->scratch[i] = slot->scratch[--slot->n_scratch];
    return;
  }
}

void tsr_wgpu_slot_reset(tsr_wgpu_slot *slot)
{
  while (slot->n_scratch > 0) scratch_free(slot, slot->scratch[slot->n_scratch - 1].ptr);
  /* The task's output now belongs to a chunk (or is freed): the chunk's
   * accounting, not the slot's. */
  pthread_mutex_lock(&slot->gpu->lock);
  slot->gpu->outputs -= slot->outputs;
  slot->outputs = 0;
  pthread_mutex_unlock(&slot->gpu->lock);
  if (slot->n_deferred > 0) {
    cudaStreamSynchronize(slot->stream);   /* normally idle already: the task ended with a sync */
    flush_deferred(slot);
  }
}

static int take_staging(tsr_wgpu_slot *slot, tsr_errbuf *err)
{
  tsr_wgpu *gpu = slot->gpu;
  pthread_mutex_lock(&gpu->lock);
  bool ok = gpu->stage_next + 2 <= gpu->n_stage;
  if (ok) {
    slot->stage[0] = gpu->stage[gpu->stage_next++];
    slot->stage[1] = gpu->stage[gpu->stage_next++];
  }
  pthread_mutex_unlock(&gpu->lock);
  return ok ? 0 : tsr_fail(err, TSR_EINTERNAL, "more GPU slots than staging buffers");
}

static int make_handles(tsr_wgpu_slot *slot, tsr_errbuf *err)
{
  if (cublasCreate(&slot->cublas) != CUBLAS_STATUS_SUCCESS) return tsr_fail(err, TSR_EINTERNAL, "cublasCreate failed");
  if (cublasSetStream(slot->cublas, slot->stream) != CUBLAS_STATUS_SUCCESS)
    return tsr_fail(err, TSR_EINTERNAL, "cublasSetStream failed");
  if (cusolverDnCreate(&slot->cusolver) != CUSOLVER_STATUS_SUCCESS)
    return tsr_fail(err, TSR_EINTERNAL, "cusolverDnCreate failed");
  if (cusolverDnSetStream(slot->cusolver, slot->stream) != CUSOLVER_STATUS_SUCCESS)
    return tsr_fail(err, TSR_EINTERNAL, "cusolverDnSetStream failed");
  return 0;
}

int tsr_wgpu_slot_new(tsr_wgpu *gpu, tsr_wgpu_slot **slot_p, tsr_errbuf *err)
{
  tsr_wgpu_slot *slot = calloc(1, sizeof *slot);
  if (slot == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  slot->gpu = gpu;
  int rc = CUDA_CHECK(cudaSetDevice(gpu->device), err);
  if (rc == 0) rc = CUDA_CHECK(cudaStreamCreateWithFlags(&slot->stream, cudaStreamNonBlocking), err);
  for (int i = 0; rc == 0 && i < 2; i++)
    rc = CUDA_CHECK(cudaEventCreateWithFlags(&slot->stage_done[i], cudaEventDisableTiming), err);
  if (rc == 0) rc = take_staging(slot, err);
  if (rc == 0) rc = make_handles(slot, err);
  if (rc != 0) {
    tsr_wgpu_slot_destroy(&slot);
    return rc;
  }
  slot->ctx = (tsr_gpu_ctx){
    .device = gpu->device,
    .stream = slot->stream,
    .cublas = slot->cublas,
    .cusolver = slot->cusolver,
    .scratch_alloc = scratch_alloc,
    .scratch_free = scratch_free,
    .pool = slot,
  };
  *slot_p = slot;
  return 0;
}

void tsr_wgpu_slot_destroy(tsr_wgpu_slot **slot_p)
{
  if (slot_p == NULL || *slot_p == NULL) return;
  tsr_wgpu_slot *slot = *slot_p;
  cudaSetDevice(slot->gpu->device);
  if (slot->stream) cudaStreamSynchronize(slot->stream);
  tsr_wgpu_slot_reset(slot);
  if (slot->cusolver) cusolverDnDestroy(slot->cusolver);
  if (slot->cublas) cublasDestroy(slot->cublas);
  for (int i = 0; i < 2; i++)
    if (slot->stage_done[i]) cudaEventDestroy(slot->stage_done[i]);
  if (slot->stream) {
    cudaStreamSynchronize(slot->stream);
    cudaStreamDestroy(slot->stream);
  }
  free(slot->deferred);
  free(slot);
  *slot_p = NULL;
}

tsr_wgpu *tsr_wgpu_slot_gpu(tsr_wgpu_slot *slot) { return slot->gpu; }
const tsr_gpu_ctx *tsr_wgpu_slot_ctx(tsr_wgpu_slot *slot) { return &slot->ctx; }

/* ---------- copies ---------- */

int tsr_wgpu_sync(tsr_wgpu_slot *slot, tsr_errbuf *err)
{
  cudaError_t e = cudaStreamSynchronize(slot->stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e == cudaSuccess) {
    flush_deferred(slot);
    return 0;
  }
  if (poisons_context(e)) slot->gpu->broken = true;
  return tsr_fail(err, TSR_EINTERNAL, "CUDA error on gpu:%d: %s", slot->gpu->device, cudaGetErrorString(e));
}

int tsr_wgpu_upload(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  if (is_pinned(slot->gpu, src)) return direct_copy(slot, dst, src, nbytes, cudaMemcpyHostToDevice, err);
  uint64_t t0 = tsr_now_us();
  int rc = 0;
  bool used[2] = {false, false};
  for (size_t off = 0, i = 0; rc == 0 && off < nbytes; off += STAGE_BLOCK, i++) {
    int k = (int)(i % 2);
    size_t len = nbytes - off < STAGE_BLOCK ? nbytes - off : STAGE_BLOCK;
    /* The block's previous DMA must be done before we overwrite it. */
    if (used[k]) rc = CUDA_CHECK(cudaEventSynchronize(slot->stage_done[k]), err);
    if (rc != 0) break;
    memcpy(slot->stage[k], (const char *)src + off, len);
    rc = CUDA_CHECK(cudaMemcpyAsync((char *)dst + off, slot->stage[k], len, cudaMemcpyHostToDevice, slot->stream), err);
    if (rc == 0) rc = CUDA_CHECK(cudaEventRecord(slot->stage_done[k], slot->stream), err);
    used[k] = true;
  }
  /* The blocks are ours again only once their last DMA is done. */
  for (int k = 0; k < 2; k++)
    if (used[k] && cudaEventSynchronize(slot->stage_done[k]) != cudaSuccess && rc == 0)
      rc = tsr_wgpu_sync(slot, err);
  count_copy(slot->gpu, true, nbytes, t0);
  return rc;
}

int tsr_wgpu_download(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  if (is_pinned(slot->gpu, dst)) return direct_copy(slot, dst, src, nbytes, cudaMemcpyDeviceToHost, err);
  uint64_t t0 = tsr_now_us();
  size_t pieces = (nbytes + STAGE_BLOCK - 1) / STAGE_BLOCK;
  int rc = 0;
  /* Piece i+1's DMA runs while the host copies piece i out of its block. */
  for (size_t i = 0; rc == 0 && i <= pieces; i++) {
    if (i < pieces) {
      int k = (int)(i % 2);
      size_t off = i * STAGE_BLOCK, len = nbytes - off < STAGE_BLOCK ? nbytes - off : STAGE_BLOCK;
      rc = CUDA_CHECK(cudaMemcpyAsync(slot->stage[k], (const char *)src + off, len, cudaMemcpyDeviceToHost, slot->stream),
                      err);
      if (rc == 0) rc = CUDA_CHECK(cudaEventRecord(slot->stage_done[k], slot->stream), err);
    }
    if (rc == 0 && i > 0) {
      size_t j = i - 1, off = j * STAGE_BLOCK, len = nbytes - off < STAGE_BLOCK ? nbytes - off : STAGE_BLOCK;
      if (cudaEventSynchronize(slot->stage_done[j % 2]) != cudaSuccess) rc = tsr_wgpu_sync(slot, err);
      if (rc == 0) memcpy((char *)dst + off, slot->stage[j % 2], len);
    }
  }
  if (rc != 0) tsr_wgpu_sync(slot, NULL);
  count_copy(slot->gpu, false, nbytes, t0);
  return rc;
}

/* ---------- memory another process maps ---------- */

void *tsr_wgpu_ipc_alloc(tsr_wgpu *gpu, size_t nbytes)
{
  pthread_mutex_lock(&gpu->lock);
  bool fits = gpu->used + nbytes <= gpu->limit;
  if (fits) gpu->used += nbytes;
  pthread_mutex_unlock(&gpu->lock);
  if (!fits) return NULL;
  void *ptr = NULL;
  if (gpu->arena != NULL) {
    ptr = tsr_slabs_alloc(gpu->arena, nbytes);
  } else {
    cudaSetDevice(gpu->device);
    if (cudaMalloc(&ptr, nbytes ? nbytes : 256) != cudaSuccess) cudaGetLastError(), ptr = NULL;
  }
  if (ptr == NULL) unreserve(gpu, NULL, nbytes, false);
  return ptr;
}

void tsr_wgpu_ipc_free(tsr_wgpu *gpu, void *ptr, size_t nbytes)
{
  if (ptr == NULL) return;
  if (in_arena(gpu, ptr)) {
    tsr_slabs_free(gpu->arena, ptr, nbytes);
  } else {
    cudaSetDevice(gpu->device);
    cudaFree(ptr);
  }
  unreserve(gpu, NULL, nbytes, false);
}

static void *arena_slab(void *arg, size_t bytes)
{
  tsr_wgpu *gpu = arg;
  void *ptr = NULL;
  cudaSetDevice(gpu->device);
  if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
    cudaGetLastError();
    char size[32];
    TSR_DEBUG("gpu:%d: no arena slab of %s: allocations go to the pool", gpu->device,
              tsr_format_bytes(bytes, size, sizeof size));
    return NULL;
  }
  pthread_mutex_lock(&gpu->lock);
  gpu->stats.arena_bytes += bytes;
  pthread_mutex_unlock(&gpu->lock);
  return ptr;
}

static void arena_unslab(void *arg, void *slab, size_t bytes)
{
  (void)bytes;
  tsr_wgpu *gpu = arg;
  cudaSetDevice(gpu->device);
  cudaFree(slab);
}

int tsr_wgpu_use_arena(tsr_wgpu *gpu, tsr_errbuf *err)
{
  if (gpu->arena != NULL) return 0;
  size_t slab = gpu->limit / 4 < ARENA_SLAB ? (size_t)gpu->limit / 4 : ARENA_SLAB;
  slab = slab < ARENA_SLAB_MIN ? ARENA_SLAB_MIN : slab / ARENA_SLAB_MIN * ARENA_SLAB_MIN;
  gpu->arena = tsr_slabs_new(gpu->limit, slab, arena_slab, arena_unslab, gpu);
  return gpu->arena != NULL ? 0 : tsr_fail(err, TSR_ENOMEM, "out of memory");
}

bool tsr_wgpu_has_arena(const tsr_wgpu *gpu) { return gpu->arena != NULL; }
bool tsr_wgpu_exportable(tsr_wgpu *gpu, const void *ptr) { return in_arena(gpu, ptr); }

int tsr_wgpu_copy(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  int rc = CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, slot->stream), err);
  return rc == 0 ? tsr_wgpu_sync(slot, err) : rc;
}
