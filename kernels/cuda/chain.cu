/* kernels/cuda/chain.cu — matmul_chain on the GPU (cpu/matmul_chain.c has
 * the op): a product with a u8 or 2-bit packed genotype block X read
 * through a chain of per-column steps (a standardization), on the int8
 * tensor-core kernels of geno_xb.cu / geno_btx.cu. X is never converted.
 *
 * Without steps the product is theirs as it is. With steps, each column's
 * chain is affine in the genotype where it is not missing — Z = a_j +
 * b_j·x — and a constant where it is: Z = a_j + d_j. So
 *   Z = X0·diag(b) + 1·aᵀ + M·diag(d),
 * X0 being X with missing values 0 and M the 0/1 mask of missing values,
 * both read from X by the kernels' modes (genotype.cuh, geno_mode):
 *   X·B-side:  Z B  = X0 (diag(b) B) + 1 (aᵀ B) + M (diag(d) B)
 *   Bᵀ·X-side: Bᵀ Z = (Bᵀ X0) diag(b) + (Bᵀ 1) aᵀ + (Bᵀ M) diag(d)
 * a, b and d come from evaluating the chain on the device at 0, 2 and a
 * missing value. Numerics: the int8 kernels' f64 bound (within 2^-31 of
 * each column's largest |B|, genotype.cuh) on each part; not the CPU's
 * bytes. A non-finite coefficient (the chain's own x/0 on a column without
 * variance, where that genotype never occurs) counts as 0.
 *
 * A float X (f32 or f64: the single-cell PCA's scaled matrix behind its
 * centering) takes the same algebra with cuBLAS DGEMMs for the two
 * products, X converted to f64 in scratch once per task; its chain must be
 * affine (no v/z, no fillnan: a float X has no missing value to fill).
 * Numerics: f64 GEMM, not the CPU's order of sums.
 *
 * What runs on the CPU variant instead (TSR_ENODEV): X of another dtype,
 * a float X whose chain is not affine, and a missing value the chain leaves
 * missing (no fillnan), whose NaN must reach the product. */
#include <string.h>

#include "genotype.cuh"

/* The chain's steps, by value for the coefficient kernel. */
struct chain_steps {
  int n;
  int codes[TSR_K_CHAIN_MAX];
  const double *vec[TSR_K_CHAIN_MAX];
  double values[2 * TSR_K_CHAIN_MAX];
};

__device__ double chain_value(const chain_steps &s, int64_t j, double z)
{
  for (int i = 0; i < s.n; i++)
    z = tsr_k_chain_step(s.codes[i], z, s.vec[i] != nullptr ? s.vec[i][j] : 0.0, s.values[2 * i], s.values[2 * i + 1]);
  return z;
}

__device__ __forceinline__ double finite_or_0(double x) { return isfinite(x) ? x : 0.0; }

__global__ void coef_kernel(chain_steps s, int64_t cols, bool has_missing, double *a, double *b, double *d)
{
  TSR_GRID_STRIDE(j, cols)
  {
    double t0 = chain_value(s, j, 0.0), t2 = chain_value(s, j, 2.0);
    double aj = finite_or_0(t0);
    a[j] = aj;
    b[j] = isfinite(t0) && isfinite(t2) ? (t2 - t0) * 0.5 : 0.0;
    d[j] = has_missing ? finite_or_0(chain_value(s, j, nan(""))) - aj : 0.0;
  }
}

/* out[k, n] = v[k] · B[k, n]. */
__global__ void scale_rows_kernel(const double *b, const double *v, int64_t k, int64_t n, double *out)
{
  TSR_GRID_STRIDE(i, k * n) out[i] = v[i / n] * b[i];
}

__global__ void ones_kernel(double *v, int64_t n)
{
  TSR_GRID_STRIDE(i, n) v[i] = 1.0;
}

/* X·B side: out[i, c] += bias[c] (+ m[i, c]). */
__global__ void xb_finish_kernel(double *out, const double *bias, const double *m, int64_t r, int64_t n)
{
  TSR_GRID_STRIDE(i, r * n) out[i] += bias[i % n] + (m != nullptr ? m[i] : 0.0);
}

/* Bᵀ·X side: out[i, j] = out[i, j]·b[j] + s[i]·a[j] (+ m[i, j]·d[j]). */
__global__ void btx_finish_kernel(double *out, const double *s, const double *a, const double *b, const double *d,
                                  const double *m, int64_t rows, int64_t cols)
{
  TSR_GRID_STRIDE(i, rows * cols)
  {
    int64_t j = i % cols;
    out[i] = out[i] * b[j] + s[i / cols] * a[j] + (m != nullptr ? m[i] * d[j] : 0.0);
  }
}

/* What one task works with. */
struct chain_job {
  const tsr_gpu_ctx *gpu;
  const tsr_k_chain *ch;
  const uint8_t *x;
  int epb;
  const double *a, *b, *d;  /* per column of X; NULL without steps */
  const double *xf;         /* a float X as f64 [rows, cols] (cuBLAS), else NULL */
};

static int geno(const chain_job &j, bool btx, int mode, const double *bm, int64_t w, double *out, tsr_errbuf *err)
{
  int64_t r = j.ch->rows, c = j.ch->cols;
  if (j.xf != nullptr && btx)  /* out [w, c] = bmᵀ · X, bm [r, w] */
    return tsr_cuda_gemm(j.gpu, TSR_F64, true, false, w, c, r, bm, w, j.xf, c, 0.0, out, c, false, err);
  if (j.xf != nullptr)  /* out [r, w] = X · bm, bm [c, w] */
    return tsr_cuda_gemm(j.gpu, TSR_F64, false, false, r, w, c, j.xf, c, bm, w, 0.0, out, w, false, err);
  int missing = j.ch->has_missing ? (int)j.ch->missing : 0;
  if (btx) return tsr_cuda_geno_btx_mode(j.gpu, j.x, j.epb, j.ch->rows, j.ch->cols, bm, TSR_F64, w, out, mode, missing, err);
  return tsr_cuda_geno_xb_mode(j.gpu, j.x, j.epb, j.ch->rows, j.ch->cols, bm, TSR_F64, w, out, mode, missing, err);
}

/* out [r, n] = Z · B, B [c, n]. */
static int chain_xb(const chain_job &j, const double *b, int64_t n, double *out, tsr_errbuf *err)
{
  if (j.a == nullptr) return geno(j, false, GENO_RAW, b, n, out, err);
  cudaStream_t s = tsr_stream(j.gpu);
  int64_t r = j.ch->rows, c = j.ch->cols;
  bool miss = j.ch->has_missing;
  tsr_scratch scr(j.gpu);
  double *b1 = nullptr, *bias = nullptr, *m = nullptr;
  int rc = scr.get(c * n, &b1, "diag(b) B", err);
  if (rc == 0) rc = scr.get(n, &bias, "aᵀ B", err);
  if (rc == 0 && miss) rc = scr.get(r * n, &m, "the missing values' product", err);
  if (rc != 0) return rc;
  scale_rows_kernel<<<tsr_grid(c * n, 256), 256, 0, s>>>(b, j.b, c, n, b1);
  rc = TSR_CUDA_LAUNCHED("scale_rows_kernel", err);
  if (rc == 0) rc = geno(j, false, miss ? GENO_ZERO_MISSING : GENO_RAW, b1, n, out, err);
  if (rc == 0) rc = tsr_cuda_gemm(j.gpu, TSR_F64, false, false, 1, n, c, j.a, c, b, n, 0.0, bias, n, false, err);
  if (rc == 0 && miss) {
    scale_rows_kernel<<<tsr_grid(c * n, 256), 256, 0, s>>>(b, j.d, c, n, b1);
    rc = TSR_CUDA_LAUNCHED("scale_rows_kernel", err);
    if (rc == 0) rc = geno(j, false, GENO_MISSING_MASK, b1, n, m, err);
  }
  if (rc != 0) return rc;
  xb_finish_kernel<<<tsr_grid(r * n, 256), 256, 0, s>>>(out, bias, m, r, n);
  return TSR_CUDA_LAUNCHED("xb_finish_kernel", err);
}

/* out [m, c] = Bᵀ · Z, B [r, m]. */
static int chain_btx(const chain_job &j, const double *b, int64_t mcols, double *out, tsr_errbuf *err)
{
  if (j.a == nullptr) return geno(j, true, GENO_RAW, b, mcols, out, err);
  cudaStream_t s = tsr_stream(j.gpu);
  int64_t r = j.ch->rows, c = j.ch->cols;
  bool miss = j.ch->has_missing;
  tsr_scratch scr(j.gpu);
  double *ones = nullptr, *sums = nullptr, *m = nullptr;
  int rc = scr.get(r, &ones, "a column of ones", err);
  if (rc == 0) rc = scr.get(mcols, &sums, "Bᵀ 1", err);
  if (rc == 0 && miss) rc = scr.get(mcols * c, &m, "the missing values' product", err);
  if (rc != 0) return rc;
  ones_kernel<<<tsr_grid(r, 256), 256, 0, s>>>(ones, r);
  rc = TSR_CUDA_LAUNCHED("ones_kernel", err);
  if (rc == 0) rc = tsr_cuda_gemm(j.gpu, TSR_F64, false, false, 1, mcols, r, ones, r, b, mcols, 0.0, sums, mcols, false, err);
  if (rc == 0) rc = geno(j, true, miss ? GENO_ZERO_MISSING : GENO_RAW, b, mcols, out, err);
  if (rc == 0 && miss) rc = geno(j, true, GENO_MISSING_MASK, b, mcols, m, err);
  if (rc != 0) return rc;
  btx_finish_kernel<<<tsr_grid(mcols * c, 256), 256, 0, s>>>(out, sums, j.a, j.b, j.d, m, mcols, c);
  return TSR_CUDA_LAUNCHED("btx_finish_kernel", err);
}

/* The four sides through the two forms: xtb is btx transposed, bx is btx
 * of Bᵀ. */
static int chain_side(const chain_job &j, const tsr_buf *bbuf, double *out, tsr_errbuf *err)
{
  const double *b = (const double *)bbuf->data;
  int64_t b0 = bbuf->meta.shape[0], b1 = bbuf->meta.shape[1];
  cudaStream_t s = tsr_stream(j.gpu);
  tsr_scratch scr(j.gpu);
  double *tmp = nullptr;
  int rc = 0;
  switch (j.ch->side) {
  case TSR_K_SIDE_XB: return chain_xb(j, b, b1, out, err);
  case TSR_K_SIDE_BTX: return chain_btx(j, b, b1, out, err);
  case TSR_K_SIDE_XTB:  /* B [r, n]: T [n, c] = Bᵀ Z, out = Tᵀ */
    rc = scr.get(b1 * j.ch->cols, &tmp, "Bᵀ Z", err);
    if (rc == 0) rc = chain_btx(j, b, b1, tmp, err);
    return rc == 0 ? tsr_cuda_transpose(tmp, out, b1, j.ch->cols, 8, s, err) : rc;
  default:  /* bx, B [m, r]: Bᵀ is [r, m] */
    rc = scr.get(b0 * b1, &tmp, "Bᵀ", err);
    if (rc == 0) rc = tsr_cuda_transpose(b, tmp, b0, b1, 8, s, err);
    return rc == 0 ? chain_btx(j, tmp, b0, out, err) : rc;
  }
}

/* Whether this task runs here (see the top); a message says why not. */
static int chain_runs_here(const tsr_k_chain *ch, tsr_dtype xdt, tsr_errbuf *err)
{
  if (xdt == TSR_F32 || xdt == TSR_F64) {
    bool affine = !ch->has_missing && !ch->packed;
    for (int i = 0; i < ch->n_steps; i++)
      affine = affine && ch->codes[i] != TSR_K_STEP_RDIV && ch->codes[i] != TSR_K_STEP_FILLNAN;
    return affine ? 0 : tsr_fail(err, TSR_ENODEV, "matmul_chain: a float X whose chain is not affine runs on the CPU variant");
  }
  if (xdt != TSR_U8)
    return tsr_fail(err, TSR_ENODEV, "matmul_chain: a %s X runs on the CPU variant", tsr_dtype_name(xdt));
  bool filled = ch->n_steps > 0 && ch->codes[ch->n_steps - 1] == TSR_K_STEP_FILLNAN;
  if (ch->has_missing && (!filled || ch->missing < 0 || ch->missing > 255))
    return tsr_fail(err, TSR_ENODEV, "matmul_chain: missing values that stay NaN run on the CPU variant");
  return 0;
}

TSR_CUDA_VARIANT(matmul_chain)
{
  tsr_k_chain ch;
  tsr_meta metas[2 + TSR_K_CHAIN_MAX];
  if (n_in > 2 + TSR_K_CHAIN_MAX) return tsr_fail(err, TSR_EINVAL, "matmul_chain: at most %d vector inputs", TSR_K_CHAIN_MAX);
  for (int i = 0; i < n_in; i++) metas[i] = in[i].meta;
  int rc = tsr_k_chain_parse(p, metas, n_in, &ch, err);
  if (rc == 0) rc = chain_runs_here(&ch, in[0].meta.dtype, err);
  if (rc != 0 || out->nbytes == 0) return rc;
  cudaStream_t s = tsr_stream(gpu);
  if (ch.rows == 0 || ch.cols == 0 || ch.outer == 0)
    return TSR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, out->nbytes, s), err);
  chain_job j = {gpu, &ch, (const uint8_t *)in[0].data, ch.packed ? 4 : 1, nullptr, nullptr, nullptr, nullptr};
  tsr_scratch scr(gpu);
  double *coef = nullptr, *xf = nullptr;
  if (in[0].meta.dtype == TSR_F64) j.xf = (const double *)in[0].data;
  if (in[0].meta.dtype == TSR_F32) {
    rc = scr.get(ch.rows * ch.cols, &xf, "X as f64", err);
    if (rc == 0) rc = tsr_cuda_convert(TSR_F64, TSR_F32, in[0].data, xf, ch.rows * ch.cols, s, err);
    if (rc != 0) return tsr_cuda_fail_op("matmul_chain", rc, err);
    j.xf = xf;
  }
  if (ch.n_steps > 0) {
    chain_steps st = {ch.n_steps, {}, {}, {}};
    for (int i = 0; i < ch.n_steps; i++) {
      st.codes[i] = ch.codes[i];
      st.vec[i] = ch.vec_input[i] >= 2 ? (const double *)in[ch.vec_input[i]].data : nullptr;
      st.values[2 * i] = ch.values[2 * i], st.values[2 * i + 1] = ch.values[2 * i + 1];
    }
    rc = scr.get(3 * ch.cols, &coef, "the chain's coefficients", err);
    if (rc == 0) {
      coef_kernel<<<tsr_grid(ch.cols, 256), 256, 0, s>>>(st, ch.cols, ch.has_missing, coef, coef + ch.cols,
                                                         coef + 2 * ch.cols);
      rc = TSR_CUDA_LAUNCHED("coef_kernel", err);
    }
    j.a = coef, j.b = coef + ch.cols, j.d = coef + 2 * ch.cols;
  }
  if (rc == 0) rc = chain_side(j, &in[1], (double *)out->data, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("matmul_chain", rc, err);
}
