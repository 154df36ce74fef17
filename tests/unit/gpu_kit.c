/* tests/unit/gpu_kit.c — see gpu_kit.h. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kit.h"

#define KIT_SKIP 77   /* as tests/kit.h: CTest shows the test skipped */

/* ---------- GPU context ---------- */

cudaStream_t g_stream;
tsr_gpu_ctx g_ctx;

static void *scratch_alloc(void *pool, size_t bytes)
{
  void *p = NULL;
  return cudaMallocAsync(&p, bytes, (cudaStream_t)pool) == cudaSuccess ? p : NULL;
}

static void scratch_free(void *pool, void *p)
{
  cudaFreeAsync(p, (cudaStream_t)pool);
}

/* 0, or 77 after printing the skip line when no GPU can run kernels. */
int gpu_open(void)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIPPED: no GPU (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA devices");
    return KIT_SKIP;
  }
  cublasHandle_t blas;
  cusolverDnHandle_t solver;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&g_stream) != cudaSuccess ||
      cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cusolverDnCreate(&solver) != CUSOLVER_STATUS_SUCCESS) {
    printf("SKIPPED: no GPU (cannot create a stream and library handles)\n");
    return KIT_SKIP;
  }
  cublasSetStream(blas, g_stream);
  cusolverDnSetStream(solver, g_stream);
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  fprintf(stderr, "GPU: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
          (double)prop.totalGlobalMem / (1 << 30));
  g_ctx = (tsr_gpu_ctx){0, g_stream, blas, solver, scratch_alloc, scratch_free, g_stream};
  return 0;
}

tsr_buf hbuf(tsr_dtype dt, int nd, const int64_t *shape)
{
  tsr_buf b;
  memset(&b, 0, sizeof b);
  b.meta.dtype = dt;
  b.meta.ndim = nd;
  for (int d = 0; d < nd; d++) b.meta.shape[d] = shape[d];
  b.nbytes = (size_t)tsr_meta_nbytes(&b.meta);
  b.data = malloc(b.nbytes ? b.nbytes : 1);
  return b;
}

int cpu_run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  const tsr_op_def *op = tsr_op_find(name);
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  return op == NULL ? tsr_fail(err, TSR_EUNKNOWNOP, "no op %s", name) : tsr_op_run_cpu(op, p, in, n_in, out, err);
}

void *dev_copy(const void *host, size_t n)
{
  void *d = NULL;
  if (cudaMalloc(&d, n ? n : 1) != cudaSuccess) return NULL;
  if (n) cudaMemcpy(d, host, n, cudaMemcpyHostToDevice);
  return d;
}

/* The CUDA variant of name on host inputs: copies them to the device,
 * poisons the output (0xA5 bytes, so unwritten elements show), runs on
 * the test stream, waits, and copies the output back into *out (malloc'd). */
int gpu_run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  static const tsr_params none = TSR_PARAMS_INIT;
  const tsr_op_def *op = tsr_op_find(name);
  tsr_meta metas[80];
  tsr_buf din[80];
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  if (op == NULL || op->cuda == NULL) return tsr_fail(err, TSR_EUNKNOWNOP, "no CUDA variant for %s", name);
  if (n_in > 80) return tsr_fail(err, TSR_EINVAL, "gpu_run: %d inputs, at most 80", n_in);
  if (p == NULL) p = &none;
  for (int i = 0; i < n_in; i++) metas[i] = in[i].meta;
  tsr_meta om;
  int rc = op->infer(p, metas, n_in, &om, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n_in; i++) din[i] = in[i], din[i].data = dev_copy(in[i].data, in[i].nbytes);
  size_t nb = (size_t)tsr_meta_nbytes(&om);
  tsr_buf o = {om, NULL, nb};
  cudaMalloc(&o.data, nb ? nb : 1);
  cudaMemset(o.data, 0xA5, nb);
  rc = op->cuda(p, din, n_in, &o, &g_ctx, err);
  cudaError_t e = cudaStreamSynchronize(g_stream);
  if (rc == 0 && e != cudaSuccess) rc = tsr_fail(err, TSR_EINTERNAL, "%s: %s", name, cudaGetErrorString(e));
  tsr_errbuf check_err;
  int check_rc = tsr_cuda_deferred_check(&check_err);  /* as the worker does after the stream finished */
  if (rc == 0 && check_rc != 0) rc = check_rc, *err = check_err;
  out->meta = om, out->nbytes = nb, out->data = malloc(nb ? nb : 1);
  cudaMemcpy(out->data, o.data, nb, cudaMemcpyDeviceToHost);
  for (int i = 0; i < n_in; i++) cudaFree(din[i].data);
  cudaFree(o.data);
  return rc;
}
