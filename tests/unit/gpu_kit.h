/* tests/unit/gpu_kit.h — what the CUDA variant tests share: one stream
 * and library handles on GPU 0 (the context a worker's executor slot
 * gives a variant, with cudaMallocAsync scratch), host buffers, and
 * running an op's CPU or CUDA variant on host inputs. */
#ifndef TSR_TESTS_GPU_KIT_H
#define TSR_TESTS_GPU_KIT_H

#include <cuda_runtime_api.h>

#include "kernels.h"

extern cudaStream_t g_stream;
extern tsr_gpu_ctx g_ctx;

/* 0, or 77 (KIT_SKIP) after printing "SKIPPED: no GPU (reason)". */
int gpu_open(void);
/* A host buffer of that dtype and shape (malloc'd, contents undefined). */
tsr_buf hbuf(tsr_dtype dt, int nd, const int64_t *shape);
/* The CPU variant of op name; *out malloc'd on success. */
int cpu_run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err);
/* A device copy of n host bytes (cudaMalloc'd). */
void *dev_copy(const void *host, size_t n);
/* The CUDA variant of name on host inputs: copies them to the device,
 * poisons the output, runs on g_stream, waits, checks deferred errors and
 * copies the output back into *out (malloc'd). */
int gpu_run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err);

#endif
