/* kernels/cuda/genotype.cu — genotype data on the GPU: pack2bit and
 * unpack2bit (cpu/pack2bit.c has the format), matmul_2bit, and the shared
 * parts of the fused products of a u8 or 2-bit genotype matrix X with a
 * thin float matrix B (geno_xb.cu: X·B, geno_btx.cu: Bᵀ·X): B's digits
 * and the sum of split partial products. genotype.cuh has the numerics. */
#include <string.h>

#include "genotype.cuh"

/* ---------- pack2bit / unpack2bit ---------- */

/* Byte j of each row: elements 4j..4j+3, saturated at 3. Rows over y. */
__global__ void pack_kernel(const uint8_t *x, uint8_t *y, int64_t rows, int64_t c, int64_t cb)
{
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint8_t *src = x + r * c;
    TSR_GRID_STRIDE(j, cb)
    {
      unsigned b = 0;
      for (int s = 0; s < 4 && 4 * j + s < c; s++) {
        unsigned v = src[4 * j + s];
        b |= (v > 3 ? 3u : v) << (2 * s);
      }
      y[r * cb + j] = (uint8_t)b;
    }
  }
}

__global__ void unpack_kernel(const uint8_t *x, uint8_t *y, int64_t rows, int64_t c, int64_t cb)
{
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    uint8_t *dst = y + r * c;
    TSR_GRID_STRIDE(j, cb)
    {
      unsigned b = x[r * cb + j];
      for (int s = 0; s < 4 && 4 * j + s < c; s++) dst[4 * j + s] = (uint8_t)((b >> (2 * s)) & 3u);
    }
  }
}

/* Rows and last-axis length of a packed (or unpacked) u8 array. */
static void rows_cols(const tsr_meta *m, int64_t *rows, int64_t *c)
{
  *c = m->shape[m->ndim - 1];
  *rows = *c == 0 ? 0 : tsr_meta_count(m) / *c;
}

static dim3 row_grid(int64_t rows, int64_t per_row)
{
  unsigned gy = (unsigned)(rows > 65535 ? 65535 : rows < 1 ? 1 : rows), gx = tsr_grid(per_row, 256);
  unsigned cap = 16384 / gy;
  return dim3(gx < cap ? gx : cap < 1 ? 1 : cap, gy);
}

TSR_CUDA_VARIANT(pack2bit)
{
  (void)p, (void)n_in;
  int64_t rows, c;
  rows_cols(&in[0].meta, &rows, &c);
  if (rows == 0) return 0;
  pack_kernel<<<row_grid(rows, tsr_packed_len(c)), 256, 0, tsr_stream(gpu)>>>((const uint8_t *)in[0].data,
                                                                          (uint8_t *)out->data, rows, c, tsr_packed_len(c));
  int rc = TSR_CUDA_LAUNCHED("pack_kernel", err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("pack2bit", rc, err);
}

TSR_CUDA_VARIANT(unpack2bit)
{
  (void)p, (void)n_in;
  int64_t rows, c;
  rows_cols(&out->meta, &rows, &c);
  if (rows == 0) return 0;
  unpack_kernel<<<row_grid(rows, tsr_packed_len(c)), 256, 0, tsr_stream(gpu)>>>((const uint8_t *)in[0].data,
                                                                            (uint8_t *)out->data, rows, c,
                                                                            tsr_packed_len(c));
  int rc = TSR_CUDA_LAUNCHED("unpack_kernel", err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("unpack2bit", rc, err);
}

/* ---------- B's digits: per-column scale, base-256 digits, the kernels' k order ---------- */

/* Largest |B[k, col]| per column as float bits (non-negative floats order
 * like their bits; max is order-free, so atomics keep this deterministic). */
template <class BT>
__global__ void colmax_kernel(const BT *b, int64_t rows, int64_t cols, unsigned *maxbits)
{
  __shared__ unsigned part[8][32];
  int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
  unsigned m = 0;
  if (col < cols)
    for (int64_t k = (int64_t)blockIdx.y * 8 + threadIdx.y; k < rows; k += (int64_t)gridDim.y * 8) {
      float v = fabsf((float)b[k * cols + col]);
      m = max(m, __float_as_uint(v));
    }
  part[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  for (int y = 1; y < 8; y++) m = max(m, part[y][threadIdx.x]);
  atomicMax(&maxbits[col], m);
}

/* e per column: largest·2^e in [2^(8D-3), 2^(8D-2)) (a float rounded up
 * to the next power of two only lowers it: still D digits); 0 for zero or
 * non-finite columns. */
__global__ void exps_kernel(const unsigned *maxbits, int64_t cols, int bits, int *exps)
{
  TSR_GRID_STRIDE(j, cols)
  {
    float m = __uint_as_float(maxbits[j]);
    int e = 0;
    if (m > 0.0f && isfinite(m)) {
      frexpf(m, &e);
      e = bits - e;
    }
    exps[j] = e;
  }
}

/* Storage position p of a 16-genotype word holds genotype 4·(p%4) + p/4:
 * the bytes (w >> 2j) & 0x03030303 that the 2-bit xb kernel makes. */
__device__ __forceinline__ int perm16(int p)
{
  return 4 * (p & 3) + (p >> 2);
}

/* out[d][col][kk] from B's element (k, col), k = kk or its 2-bit
 * permutation: the balanced base-256 digits of q = round(B·2^e), all but
 * the last in [-128, 127] and the last the rest (|q| <= 2^(8D-2), so it is
 * at most 65 in magnitude). */
template <class BT, int D>
__global__ void digits_kernel(const BT *b, int64_t nk, int64_t ncols, const int *exps, int64_t cols_tot, int64_t kp,
                              int perm, int8_t *out)
{
  TSR_GRID_STRIDE(i, cols_tot * kp)
  {
    int64_t col = i / kp, kk = i - col * kp;
    int64_t k = perm ? (kk & ~(int64_t)15) + perm16((int)(kk & 15)) : kk;
    double v = col < ncols && k < nk ? (double)b[k * ncols + col] : 0.0;
    long long q = isfinite(v) ? llrint(ldexp(v, exps[col])) : 0;
#pragma unroll
    for (int d = 0; d < D - 1; d++) {
      long long dd = ((q + 128) & 255) - 128;
      out[d * cols_tot * kp + i] = (int8_t)dd;
      q = (q - dd) / 256;
    }
    out[(D - 1) * cols_tot * kp + i] = (int8_t)q;
  }
}

int tsr_geno_digits(const void *b, tsr_dtype bdt, int64_t nk, int64_t ncols, int64_t cols_tot, int64_t kp, bool perm,
                    tsr_scratch &scr, cudaStream_t s, bdigits *out, tsr_errbuf *err)
{
  const bool f64 = bdt == TSR_F64;
  const int D = f64 ? geno_digits<double>::D : geno_digits<float>::D;
  unsigned *maxbits = nullptr;
  out->cols_tot = cols_tot, out->kp = kp;
  int rc = scr.get(cols_tot, &maxbits, "B's column maxima", err);
  if (rc == 0) rc = scr.get(cols_tot, &out->exps, "B's column scales", err);
  if (rc == 0) rc = scr.get(D * cols_tot * kp, &out->digits, "B's digits", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(maxbits, 0, (size_t)cols_tot * sizeof *maxbits, s), err);
  if (rc != 0) return rc;
  int64_t gy = (nk + 255) / 256;
  dim3 grid((unsigned)((ncols + 31) / 32), (unsigned)(gy > 1024 ? 1024 : gy < 1 ? 1 : gy));
  if (f64) colmax_kernel<double><<<grid, dim3(32, 8), 0, s>>>((const double *)b, nk, ncols, maxbits);
  else colmax_kernel<float><<<grid, dim3(32, 8), 0, s>>>((const float *)b, nk, ncols, maxbits);
  exps_kernel<<<tsr_grid(cols_tot, 256), 256, 0, s>>>(maxbits, cols_tot, 8 * D - 2, out->exps);
  if (f64)
    digits_kernel<double, geno_digits<double>::D><<<tsr_grid(cols_tot * kp, 256), 256, 0, s>>>(
        (const double *)b, nk, ncols, out->exps, cols_tot, kp, perm, out->digits);
  else
    digits_kernel<float, geno_digits<float>::D><<<tsr_grid(cols_tot * kp, 256), 256, 0, s>>>(
        (const float *)b, nk, ncols, out->exps, cols_tot, kp, perm, out->digits);
  return TSR_CUDA_LAUNCHED("digits_kernel", err);
}

template <class T>
__global__ void splits_sum_kernel(const T *part, int splits, int64_t stride, T *out)
{
  TSR_GRID_STRIDE(i, stride)
  {
    T acc = part[i];
    for (int s = 1; s < splits; s++) acc += part[s * stride + i];
    out[i] = acc;
  }
}

int tsr_geno_sum_splits(const void *part, int splits, int64_t stride, void *out, tsr_dtype dt, cudaStream_t s,
                        tsr_errbuf *err)
{
  if (dt == TSR_F64)
    splits_sum_kernel<double><<<tsr_grid(stride, 256), 256, 0, s>>>((const double *)part, splits, stride, (double *)out);
  else
    splits_sum_kernel<float><<<tsr_grid(stride, 256), 256, 0, s>>>((const float *)part, splits, stride, (float *)out);
  return TSR_CUDA_LAUNCHED("splits_sum_kernel", err);
}

int tsr_geno_load_width(const void *x, int64_t cb, int widest)
{
  for (int v = widest; v > 1; v /= 2)
    if (cb % v == 0 && (uintptr_t)x % (uintptr_t)v == 0) return v;
  return 1;
}

int tsr_geno_split_count(int64_t blocks, int64_t chunks, int64_t want_blocks, int64_t max_per_split, int *per_split)
{
  int64_t splits = blocks >= want_blocks ? 1 : (want_blocks + blocks - 1) / blocks;
  splits = splits > chunks ? chunks : splits < 1 ? 1 : splits;
  if ((chunks + splits - 1) / splits > max_per_split) splits = (chunks + max_per_split - 1) / max_per_split;
  *per_split = (int)((chunks + splits - 1) / splits);
  return (int)((chunks + *per_split - 1) / *per_split);
}

/* ---------- matmul_2bit ---------- */

TSR_CUDA_VARIANT(matmul_2bit)
{
  (void)n_in;
  int64_t cols;
  const char *side = "xb";
  int rc = tsr_params_get_int(p, "cols", &cols, err);
  if (rc == 0 && tsr_params_find(p, "side") != nullptr) rc = tsr_params_get_str(p, "side", &side, err);
  if (rc != 0) return tsr_k_param_fail("matmul_2bit", rc, err);
  const uint8_t *x = (const uint8_t *)in[0].data;
  int64_t r = in[0].meta.shape[0], k = in[1].meta.shape[1];
  if (strcmp(side, "btx") == 0) rc = tsr_cuda_geno_btx(gpu, x, 4, r, cols, in[1].data, in[1].meta.dtype, k, out->data, err);
  else rc = tsr_cuda_geno_xb(gpu, x, 4, r, cols, in[1].data, in[1].meta.dtype, k, out->data, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("matmul_2bit", rc, err);
}
