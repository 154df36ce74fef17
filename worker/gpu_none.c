/* The GPU of a build without CUDA: there is none. `--gpu` and
 * `--list-gpus` fail with a message that says so; nothing else is ever
 * called, because no tsr_wgpu can exist. */
#include "gpu.h"
#include "nvml.h"

#define NO_CUDA "this build of tessera-worker has no CUDA (configure with a CUDA compiler and toolkit to get GPU workers)"

bool tsr_wgpu_built(void) { return false; }

int tsr_wgpu_list(FILE *out, tsr_errbuf *err)
{
  (void)out;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

int tsr_wgpu_open(int device, uint64_t limit, int slots, tsr_wgpu **gpu_p, tsr_errbuf *err)
{
  (void)device, (void)limit, (void)slots, (void)gpu_p;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

void tsr_wgpu_close(tsr_wgpu **gpu_p) { (void)gpu_p; }
int tsr_wgpu_device(const tsr_wgpu *gpu) { (void)gpu; return -1; }
const char *tsr_wgpu_name(const tsr_wgpu *gpu) { (void)gpu; return ""; }
uint64_t tsr_wgpu_limit(const tsr_wgpu *gpu) { (void)gpu; return 0; }
uint64_t tsr_wgpu_used(const tsr_wgpu *gpu) { (void)gpu; return 0; }
int tsr_wgpu_util(tsr_wgpu *gpu) { (void)gpu; return -1; }
void tsr_wgpu_nvml(tsr_wgpu *gpu, struct tsr_nvml_stats *out)
{
  (void)gpu;
  tsr_nvml_sample(NULL, out);
}
bool tsr_wgpu_broken(const tsr_wgpu *gpu) { (void)gpu; return false; }

int tsr_wgpu_slot_new(tsr_wgpu *gpu, tsr_wgpu_slot **slot_p, tsr_errbuf *err)
{
  (void)gpu, (void)slot_p;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

void tsr_wgpu_slot_destroy(tsr_wgpu_slot **slot_p) { (void)slot_p; }
int tsr_wgpu_bind(tsr_wgpu *gpu) { (void)gpu; return TSR_ENODEV; }
tsr_wgpu *tsr_wgpu_slot_gpu(tsr_wgpu_slot *slot) { (void)slot; return NULL; }
const tsr_gpu_ctx *tsr_wgpu_slot_ctx(tsr_wgpu_slot *slot) { (void)slot; return NULL; }

int tsr_wgpu_alloc(tsr_wgpu_slot *slot, size_t nbytes, const char *what, bool transient, void **ptr_p,
                   tsr_errbuf *err)
{
  (void)slot, (void)nbytes, (void)what, (void)transient, (void)ptr_p;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

void tsr_wgpu_set_reclaim(tsr_wgpu *gpu, tsr_wgpu_reclaim_fn fn, void *arg) { (void)gpu, (void)fn, (void)arg; }

void tsr_wgpu_wake(tsr_wgpu *gpu) { (void)gpu; }

int tsr_wgpu_set_pinned(tsr_wgpu *gpu, uint64_t limit, tsr_errbuf *err)
{
  (void)gpu, (void)limit;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

void *tsr_wgpu_pinned_alloc(tsr_wgpu *gpu, size_t nbytes) { (void)gpu, (void)nbytes; return NULL; }
void tsr_wgpu_pinned_free(void *gpu, void *ptr, size_t nbytes) { (void)gpu, (void)ptr, (void)nbytes; }

uint64_t tsr_wgpu_pinned_used(tsr_wgpu *gpu, uint64_t *slabs_p)
{
  (void)gpu;
  if (slabs_p != NULL) *slabs_p = 0;
  return 0;
}
void tsr_wgpu_stats_get(tsr_wgpu *gpu, tsr_wgpu_stats *stats) { (void)gpu, (void)stats; }

void tsr_wgpu_keep(tsr_wgpu_slot *slot, size_t nbytes) { (void)slot, (void)nbytes; }
void tsr_wgpu_free(tsr_wgpu_slot *slot, void *ptr, size_t nbytes, bool transient)
{
  (void)slot, (void)ptr, (void)nbytes, (void)transient;
}

void tsr_wgpu_release(void *gpu, void *ptr, size_t nbytes) { (void)gpu, (void)ptr, (void)nbytes; }
void tsr_wgpu_slot_reset(tsr_wgpu_slot *slot) { (void)slot; }

int tsr_wgpu_upload(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  (void)slot, (void)dst, (void)src, (void)nbytes;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

int tsr_wgpu_download(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  (void)slot, (void)dst, (void)src, (void)nbytes;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

int tsr_wgpu_sync(tsr_wgpu_slot *slot, tsr_errbuf *err)
{
  (void)slot;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}

int tsr_wgpu_use_arena(tsr_wgpu *gpu, tsr_errbuf *err)
{
  (void)gpu;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}
bool tsr_wgpu_has_arena(const tsr_wgpu *gpu) { (void)gpu; return false; }
bool tsr_wgpu_exportable(tsr_wgpu *gpu, const void *ptr) { (void)gpu, (void)ptr; return false; }
void *tsr_wgpu_ipc_alloc(tsr_wgpu *gpu, size_t nbytes) { (void)gpu, (void)nbytes; return NULL; }
void tsr_wgpu_ipc_free(tsr_wgpu *gpu, void *ptr, size_t nbytes) { (void)gpu, (void)ptr, (void)nbytes; }

int tsr_wgpu_copy(tsr_wgpu_slot *slot, void *dst, const void *src, size_t nbytes, tsr_errbuf *err)
{
  (void)slot, (void)dst, (void)src, (void)nbytes;
  return tsr_fail(err, TSR_ENODEV, NO_CUDA);
}
