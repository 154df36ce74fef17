/* kernels/cuda/blas.cu — matmul and matmul_random on the GPU, through
 * cuBLAS (row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ,
 * so no operand is ever transposed in memory).
 *
 * Numerics: f64 products are DGEMM; f32 products are full-precision SGEMM
 * unless the task sets allow_tf32 (then TF32 tensor cores, about 1e-3
 * relative). The handle's math and pointer modes are restored after each
 * call, so the variant never depends on, or changes, how the worker left
 * them. cuBLAS gives the same bytes run to run on one GPU model; against
 * OpenBLAS the results differ in the last bits (f64 ~1e-15, f32 ~1e-6).
 *
 * Integer operands: the genotype shapes — u8 X times a thin f32 B (X @ B
 * with at most 64 columns, or Bᵀ @ X with at most 64 rows of the result)
 * go to the fused kernels of genotype.cu, which read X once and never make
 * a float copy. Everything else converts the integer operand a k-panel at
 * a time into scratch (about PANEL_BYTES) and accumulates panel products,
 * like the CPU op. The param `fused` (bool, default true) can turn the
 * fused path off, for measurements. */
#include <string.h>

#include "common.cuh"

#define PANEL_BYTES ((size_t)256 << 20)
/* The widest thin side the fused genotype kernels take (they re-read X
 * once per 32 columns). */
#define FUSED_MAX_COLS 64

/* ---------- cuBLAS ---------- */

/* Puts the handle in host pointer mode and the wanted math mode for one
 * call, and back afterwards. */
struct blas_modes {
  cublasHandle_t h;
  cublasMath_t math;
  cublasPointerMode_t ptr;
  bool saved;
  blas_modes(cublasHandle_t handle, bool tf32) : h(handle), saved(false)
  {
    if (cublasGetMathMode(h, &math) != CUBLAS_STATUS_SUCCESS || cublasGetPointerMode(h, &ptr) != CUBLAS_STATUS_SUCCESS)
      return;
    saved = true;
    cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
  }
  ~blas_modes()
  {
    if (!saved) return;
    cublasSetMathMode(h, math);
    cublasSetPointerMode(h, ptr);
  }
};

int tsr_cuda_gemm(const tsr_gpu_ctx *gpu, tsr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc, bool tf32,
                  tsr_errbuf *err)
{
  cublasHandle_t h = (cublasHandle_t)gpu->cublas;
  blas_modes modes(h, tf32 && dt == TSR_F32);
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dt == TSR_F64) {
    double one = 1.0;
    return TSR_CUDA_CHECK(cublasGemmEx(h, opa, opb, (int)n, (int)m, (int)k, &one, b, CUDA_R_64F, (int)ldb, a,
                                       CUDA_R_64F, (int)lda, &beta, c, CUDA_R_64F, (int)ldc, CUBLAS_COMPUTE_64F,
                                       CUBLAS_GEMM_DEFAULT),
                          err);
  }
  float one = 1.0f, fbeta = (float)beta;
  cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  return TSR_CUDA_CHECK(cublasGemmEx(h, opa, opb, (int)n, (int)m, (int)k, &one, b, CUDA_R_32F, (int)ldb, a, CUDA_R_32F,
                                     (int)lda, &fbeta, c, CUDA_R_32F, (int)ldc, ct, CUBLAS_GEMM_DEFAULT),
                        err);
}

/* ---------- matmul ---------- */

struct mm_task {
  bool ta, tb, tf32, fused;
  int64_t m, n, k;
  tsr_dtype dt;  /* of C */
};

static int opt_bool(const tsr_params *p, const char *name, bool fallback, bool *v, tsr_errbuf *err)
{
  *v = fallback;
  if (tsr_params_find(p, name) == nullptr) return 0;
  int rc = tsr_params_get_bool(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail("matmul", rc, err);
}

static int mm_parse(const tsr_params *p, const tsr_buf *in, const tsr_buf *out, mm_task *t, tsr_errbuf *err)
{
  int rc = opt_bool(p, "trans_a", false, &t->ta, err);
  if (rc == 0) rc = opt_bool(p, "trans_b", false, &t->tb, err);
  if (rc == 0) rc = opt_bool(p, "allow_tf32", false, &t->tf32, err);
  if (rc == 0) rc = opt_bool(p, "fused", true, &t->fused, err);
  if (rc != 0) return rc;
  t->m = out->meta.shape[0];
  t->n = out->meta.shape[1];
  t->k = t->ta ? in[0].meta.shape[0] : in[0].meta.shape[1];
  t->dt = out->meta.dtype;
  return 0;
}

/* An operand's k-panel [k0, k0+kp) in C's dtype: the operand itself when
 * it has that dtype, else converted into buf. k_is_rows: stored [k, x]. */
static int mm_panel(const tsr_buf *in, tsr_dtype dt, bool k_is_rows, int64_t k0, int64_t kp, void *buf,
                    const void **p_out, int64_t *ld_p, cudaStream_t s, tsr_errbuf *err)
{
  int64_t rows = in->meta.shape[0], cols = in->meta.shape[1];
  size_t es = tsr_dtype_size(in->meta.dtype);
  const char *src = (const char *)in->data;
  if (in->meta.dtype == dt) {
    *ld_p = cols;
    *p_out = src + (size_t)(k_is_rows ? k0 * cols : k0) * es;
    return 0;
  }
  *p_out = buf;
  if (k_is_rows) {
    *ld_p = cols;
    return tsr_cuda_convert(dt, in->meta.dtype, src + (size_t)(k0 * cols) * es, buf, kp * cols, s, err);
  }
  *ld_p = kp;
  return tsr_cuda_convert_2d(dt, in->meta.dtype, src + (size_t)k0 * es, cols, rows, kp, buf, s, err);
}

/* The general path: k-panels of converted integer operands (or the float
 * operands whole) through cuBLAS, accumulating in C. */
static int mm_panels(const mm_task *t, const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  bool conv_a = in[0].meta.dtype != t->dt, conv_b = in[1].meta.dtype != t->dt;
  size_t os = tsr_dtype_size(t->dt), per_k = (size_t)((conv_a ? t->m : 0) + (conv_b ? t->n : 0)) * os;
  int64_t kp = per_k == 0 ? t->k : (int64_t)(PANEL_BYTES / per_k);
  kp = kp < 1 ? 1 : kp > t->k ? t->k : kp;
  tsr_scratch scratch(gpu);
  void *buf_a = nullptr, *buf_b = nullptr;
  int rc = conv_a ? scratch.get((size_t)(kp * t->m) * os, &buf_a, "a matmul panel of A", err) : 0;
  if (rc == 0 && conv_b) rc = scratch.get((size_t)(kp * t->n) * os, &buf_b, "a matmul panel of B", err);
  cudaStream_t s = tsr_stream(gpu);
  for (int64_t k0 = 0; k0 < t->k && rc == 0; k0 += kp) {
    int64_t w = t->k - k0 < kp ? t->k - k0 : kp, lda = 0, ldb = 0;
    const void *pa = nullptr, *pb = nullptr;
    rc = mm_panel(&in[0], t->dt, t->ta, k0, w, buf_a, &pa, &lda, s, err);
    if (rc == 0) rc = mm_panel(&in[1], t->dt, !t->tb, k0, w, buf_b, &pb, &ldb, s, err);
    if (rc == 0)
      rc = tsr_cuda_gemm(gpu, t->dt, t->ta, t->tb, t->m, t->n, w, pa, lda, pb, ldb, k0 == 0 ? 0.0 : 1.0, out->data,
                         t->n, t->tf32, err);
  }
  return rc;
}

/* Runs the fused genotype kernel when the shapes are theirs: true with
 * its status in *rc_p; false (nothing done) when they are not. */
static bool mm_fused(const mm_task *t, const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu, int *rc_p,
                     tsr_errbuf *err)
{
  tsr_dtype da = in[0].meta.dtype, db = in[1].meta.dtype;
  if (!t->fused || t->dt != TSR_F32 || t->tb) return false;
  if (da == TSR_U8 && db == TSR_F32 && !t->ta && t->n <= FUSED_MAX_COLS) {  /* X @ B */
    *rc_p = tsr_cuda_geno_xb(gpu, (const uint8_t *)in[0].data, 1, t->m, t->k, in[1].data, db, t->n,
                             (float *)out->data, err);
    return true;
  }
  if (da == TSR_F32 && db == TSR_U8 && t->ta && t->m <= FUSED_MAX_COLS) {  /* Bᵀ @ X */
    *rc_p = tsr_cuda_geno_btx(gpu, (const uint8_t *)in[1].data, 1, t->k, t->n, in[0].data, da, t->m,
                              (float *)out->data, err);
    return true;
  }
  return false;
}

TSR_CUDA_VARIANT(matmul)
{
  (void)n_in;
  mm_task t;
  int rc = mm_parse(p, in, out, &t, err);
  if (rc != 0 || t.m == 0 || t.n == 0) return rc;
  if (t.k == 0) {
    rc = TSR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, out->nbytes, tsr_stream(gpu)), err);
    return rc == 0 ? 0 : tsr_cuda_fail_op("matmul", rc, err);
  }
  if (!mm_fused(&t, in, out, gpu, &rc, err)) rc = mm_panels(&t, in, out, gpu, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("matmul", rc, err);
}

/* ---------- matmul_random ---------- */

typedef enum { SIDE_XB, SIDE_XTB, SIDE_BX, SIDE_BTX } mr_side;

static int mr_parse(const tsr_params *p, mr_side *side_p, tsr_k_gen *x, tsr_errbuf *err)
{
  static const char *names[] = {"xb", "xtb", "bx", "btx"};
  const char *side, *dist;
  int rc = tsr_params_get_str(p, "side", &side, err);
  if (rc == 0) rc = tsr_params_get_str(p, "dist", &dist, err);
  if (rc != 0) return tsr_k_param_fail("matmul_random", rc, err);
  rc = tsr_k_gen_parse(dist, p, x, err);
  if (rc != 0) return tsr_k_param_fail("matmul_random", rc, err);
  for (int i = 0; i < 4; i++)
    if (strcmp(side, names[i]) == 0) {
      *side_p = (mr_side)i;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "matmul_random: side '%s' is not one of xb, xtb, bx, btx", side);
}

/* One panel (X rows [r0, r0+w), generated into xp) times B into C, as
 * cpu/matmul_random.c's mr_gemm: xb writes C's rows, the others
 * accumulate (beta 0 on the first panel). */
static int mr_gemm(const tsr_gpu_ctx *gpu, mr_side side, tsr_dtype dt, int64_t xc, int64_t m, int64_t n,
                   const tsr_meta *bm, const char *b, const void *xp, int64_t r0, int64_t w, char *c, tsr_errbuf *err)
{
  int64_t bc = bm->shape[1];
  size_t es = tsr_dtype_size(dt);
  double beta = r0 == 0 ? 0.0 : 1.0;
  switch (side) {
  case SIDE_XB:
    return tsr_cuda_gemm(gpu, dt, false, false, w, n, xc, xp, xc, b, bc, 0.0, c + (size_t)(r0 * n) * es, n, false, err);
  case SIDE_XTB:
    return tsr_cuda_gemm(gpu, dt, true, false, m, n, w, xp, xc, b + (size_t)(r0 * bc) * es, bc, beta, c, n, false, err);
  case SIDE_BX:
    return tsr_cuda_gemm(gpu, dt, false, false, m, n, w, b + (size_t)r0 * es, bc, xp, xc, beta, c, n, false, err);
  default:
    return tsr_cuda_gemm(gpu, dt, true, false, m, n, w, b + (size_t)(r0 * bc) * es, bc, xp, xc, beta, c, n, false, err);
  }
}

TSR_CUDA_VARIANT(matmul_random)
{
  (void)n_in;
  mr_side side = SIDE_XB;
  tsr_k_gen x;
  int rc = mr_parse(p, &side, &x, err);
  if (rc != 0) return rc;
  tsr_dtype dt = out->meta.dtype;
  int64_t xr = x.grid.shape[0], xc = x.grid.shape[1], m = out->meta.shape[0], n = out->meta.shape[1];
  size_t es = tsr_dtype_size(dt);
  cudaStream_t s = tsr_stream(gpu);
  if (out->nbytes == 0) return 0;
  if (xr == 0 || xc == 0 || tsr_meta_count(&in[0].meta) == 0) {
    rc = TSR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, out->nbytes, s), err);  /* an empty inner dimension sums to 0 */
    return rc == 0 ? 0 : tsr_cuda_fail_op("matmul_random", rc, err);
  }
  int64_t rows = (int64_t)((PANEL_BYTES / 4) / ((size_t)xc * es));
  rows = rows < 1 ? 1 : rows > xr ? xr : rows;
  tsr_scratch scratch(gpu);
  void *xp = nullptr, *bconv = nullptr;
  rc = scratch.get((size_t)(rows * xc) * es, &xp, "a matmul_random panel", err);
  if (rc == 0 && in[0].meta.dtype != dt) {
    rc = scratch.get((size_t)tsr_meta_count(&in[0].meta) * es, &bconv, "matmul_random's converted B", err);
    if (rc == 0) rc = tsr_cuda_convert(dt, in[0].meta.dtype, in[0].data, bconv, tsr_meta_count(&in[0].meta), s, err);
  }
  const char *b = bconv != nullptr ? (const char *)bconv : (const char *)in[0].data;
  for (int64_t r0 = 0; r0 < xr && rc == 0; r0 += rows) {
    tsr_k_gen g = x;
    g.grid.offset[0] += r0;
    g.grid.shape[0] = xr - r0 < rows ? xr - r0 : rows;
    rc = tsr_cuda_gen_fill(&g, dt, xp, s, err);
    if (rc == 0) rc = mr_gemm(gpu, side, dt, xc, m, n, &in[0].meta, b, xp, r0, g.grid.shape[0], (char *)out->data, err);
  }
  return rc == 0 ? 0 : tsr_cuda_fail_op("matmul_random", rc, err);
}
