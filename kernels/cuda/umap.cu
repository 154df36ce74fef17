/* kernels/cuda/umap.cu — umap_layout's CUDA variant: the synchronous
 * scheme (kernels/cpu/umap.h), one thread per vertex and one launch per
 * epoch, reading the epoch's positions from one buffer and writing the
 * next into the other. No atomics: each thread writes only its own vertex,
 * and the negative samples are Philox draws of (seed, epoch, edge, p), so
 * the result is the same bytes on every run on a given GPU model (it may
 * differ in the last bits from the CPU variant: powf's rounding differs,
 * and the SGD amplifies it). The sequential scheme is CPU-only: for it
 * this returns TSR_ENODEV before enqueuing anything and the worker runs
 * the CPU variant. */
#include "common.cuh"

extern "C" {
#include "cpu/umap.h"
}

/* nnz of a plan of n vertices from its size (umap.h's layout: the
 * indices' padding makes 12 nnz or 12 nnz + 4 bytes of edges). */
static int64_t plan_nnz(size_t bytes, int64_t n)
{
  int64_t rem = (int64_t)bytes - tsr_k_umap_plan_bytes(n, 0);
  if (rem >= 0 && rem % 12 == 0 && (rem / 12) % 2 == 0) return rem / 12;
  if (rem >= 4 && (rem - 4) % 12 == 0 && ((rem - 4) / 12) % 2 == 1) return (rem - 4) / 12;
  return -1;
}

__global__ void umap_epoch(tsr_k_umap_sgd s, tsr_k_umap_plan pl, const float *y, float *next, int t, float alpha)
{
  TSR_GRID_STRIDE(j, s.n) tsr_k_umap_vertex_sync(&s, &pl, y, t, alpha, j, next + 2 * j);
}

extern "C" int tsr_cuda_umap_layout(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                                    tsr_errbuf *err)
{
  (void)n_in;
  tsr_k_umap_sgd s;
  bool seq;
  int rc = tsr_k_umap_sgd_params(p, &s, &seq, err);
  if (rc != 0) return rc;
  if (seq) return tsr_fail(err, TSR_ENODEV, "umap_layout: the sequential scheme runs on the CPU");
  int64_t nnz = plan_nnz(in[0].nbytes, s.n);
  if (nnz < 0)
    return tsr_fail(err, TSR_EPROTO, "umap_layout: %zu bytes are no plan of %lld vertices", in[0].nbytes, (long long)s.n);
  tsr_k_umap_plan pl;
  tsr_k_umap_plan_parts(in[0].data, s.n, nnz, &pl);
  tsr_scratch scratch(gpu);
  float *other = nullptr;
  rc = scratch.get(2 * s.n, &other, "umap_layout: the second embedding buffer", err);
  cudaStream_t st = tsr_stream(gpu);
  float *cur = (float *)out->data, *next = other;
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemcpyAsync(cur, pl.y0, (size_t)s.n * 2 * sizeof(float), cudaMemcpyDeviceToDevice, st), err);
  const int threads = 128;
  for (int t = 0; rc == 0 && t < s.n_epochs; t++) {
    umap_epoch<<<tsr_grid(s.n, threads), threads, 0, st>>>(s, pl, cur, next, t, tsr_k_umap_alpha(&s, t));
    rc = TSR_CUDA_LAUNCHED("umap_epoch", err);
    float *sw = cur;
    cur = next, next = sw;
  }
  if (rc == 0 && cur != (float *)out->data)
    rc = TSR_CUDA_CHECK(cudaMemcpyAsync(out->data, cur, (size_t)s.n * 2 * sizeof(float), cudaMemcpyDeviceToDevice, st), err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("umap_layout", rc, err);
}
