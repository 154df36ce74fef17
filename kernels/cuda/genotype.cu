/* kernels/cuda/genotype.cu — genotype data on the GPU: pack2bit and
 * unpack2bit (cpu/pack2bit.c has the format), and the fused products of a
 * u8 or 2-bit genotype matrix X with a thin float matrix B that read X once,
 * from device memory straight into tensor-core fragments, never making a
 * float copy of X:
 *   xb:  out [r, n] = X · B   (B [c, n]; matmul u8 @ f32, matmul_2bit "xb")
 *   btx: out [m, c] = Bᵀ · X  (B [r, m]; matmul f32ᵀ @ u8, matmul_2bit "btx")
 *
 * Numerics. Genotypes (0..255) are exact in f16. B is split per column
 * into two f16 parts, B·2^e ≈ hi + lo, with the power of two 2^e putting
 * the column's largest |B| just under 2^14; hi + lo holds B to about 2^-22
 * of that largest entry. Each product x·hi, x·lo is exact in the f32
 * accumulators of mma.sync m16n8k16, and the sums are f32: the result is
 * within f32 GEMM accuracy of the exact product (not the CPU's bytes, which
 * come from f64), and deterministic: a fixed order that depends on the
 * shapes only.
 *
 * xb kernel: a block of 8 warps owns 256 rows of X; each warp 32 rows (two
 * m16 tiles). X bytes come from global memory 16 a thread a row (rows g and
 * g+8 of each tile, bytes 16t..16t+15 of each 64-byte k-step: the MMA's k
 * order is permuted to match, and B is laid out in that same order), and
 * are converted in registers: u8 with PRMT into 1024+x halves minus 1024,
 * 2-bit with shift/mask into the same. B's parts stream through shared
 * memory in chunks of 256 k (cp.async, double-buffered, swizzled against
 * bank conflicts); up to 32 columns of B per pass over X.
 *
 * btx kernel: a block of 4 warps owns 256 columns of X; each warp 64 (8
 * n8 tiles). A thread reads 4 rows of 8 columns per k-step of 16 rows and
 * interleaves row pairs with PRMT into the B fragments; Bᵀ's parts come
 * from shared memory as the A fragments (up to 32 rows of the result per
 * pass). Rows are split across blocks when the columns alone do not fill
 * the GPU; partial results are summed in split order by a second kernel. */
#include <cuda_fp16.h>
#include <string.h>

#include "common.cuh"

/* ---------- pack2bit / unpack2bit ---------- */

static int64_t packed_len(int64_t c)
{
  return c / 4 + (c % 4 != 0);
}

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
  pack_kernel<<<row_grid(rows, packed_len(c)), 256, 0, tsr_stream(gpu)>>>((const uint8_t *)in[0].data,
                                                                          (uint8_t *)out->data, rows, c, packed_len(c));
  int rc = TSR_CUDA_LAUNCHED("pack_kernel", err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("pack2bit", rc, err);
}

TSR_CUDA_VARIANT(unpack2bit)
{
  (void)p, (void)n_in;
  int64_t rows, c;
  rows_cols(&out->meta, &rows, &c);
  if (rows == 0) return 0;
  unpack_kernel<<<row_grid(rows, packed_len(c)), 256, 0, tsr_stream(gpu)>>>((const uint8_t *)in[0].data,
                                                                            (uint8_t *)out->data, rows, c,
                                                                            packed_len(c));
  int rc = TSR_CUDA_LAUNCHED("unpack_kernel", err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("unpack2bit", rc, err);
}

/* ---------- fragments: conversions and the MMA ---------- */

#define HALF2_1024 0x64006400u  /* (1024, 1024) as f16x2 */

__device__ __forceinline__ uint32_t hsub2_1024(uint32_t x)
{
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(HALF2_1024));
  return d;
}

/* u8: bytes (sel picks two of w's bytes into the low bytes of each half,
 * 0x64 above them) as f16x2 of the two values. 0x4140: bytes 0,1; 0x4342:
 * bytes 2,3. */
__device__ __forceinline__ uint32_t u8_pair(uint32_t w, uint32_t sel)
{
  return hsub2_1024(__byte_perm(w, 0x64646464u, sel));
}

/* 2-bit: the genotypes at bits 2q and 2q+16 of w as f16x2. */
__device__ __forceinline__ uint32_t g2_pair(uint32_t w, int q)
{
  return hsub2_1024(((w >> (2 * q)) & 0x00030003u) | HALF2_1024);
}

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word_of(const uint4 &v, int j)
{
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit()
{
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---------- B's parts: per-column scale, f16 hi/lo, the kernels' k order ---------- */

/* The chunk of k (elements) that shared memory holds at once. */
#define KC 256

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

/* e per column: largest·2^e in [2^13, 2^14); 0 for zero or non-finite. */
__global__ void exps_kernel(const unsigned *maxbits, int64_t cols, int *exps)
{
  TSR_GRID_STRIDE(j, cols)
  {
    float m = __uint_as_float(maxbits[j]);
    int e = 0;
    if (m > 0.0f && isfinite(m)) {
      frexpf(m, &e);
      e = 14 - e;
    } else {
      e = 0;
    }
    exps[j] = e;
  }
}

/* Storage position p of a 16-genotype word holds genotype perm16[p]: the
 * pairs (q, q+8) that g2_pair makes, in the order the 2-bit xb kernel uses. */
__device__ __forceinline__ int perm16(int p)
{
  return (p & 1) ? (p >> 1) + 8 : (p >> 1);
}

/* out[part][col][kk] (halves, cols_tot × kp per part) from B's element
 * (k, col), k = kk or its 2-bit permutation; zero outside B. */
template <class BT>
__global__ void split_kernel(const BT *b, int64_t nk, int64_t ncols, const int *exps, int64_t cols_tot, int64_t kp,
                             int perm, __half *out)
{
  TSR_GRID_STRIDE(i, cols_tot * kp)
  {
    int64_t col = i / kp, kk = i - col * kp;
    int64_t k = perm ? (kk & ~(int64_t)15) + perm16((int)(kk & 15)) : kk;
    double v = col < ncols && k < nk ? (double)b[k * ncols + col] : 0.0;
    double s = ldexp(v, exps[col]);
    __half hi = __double2half(s);
    __half lo = __double2half(s - (double)__half2float(hi));
    out[i] = hi;
    out[cols_tot * kp + i] = lo;
  }
}

/* The prepared B of one product, in scratch. */
struct bsplit {
  __half *parts;  /* [2][cols_tot][kp] */
  int *exps;      /* [cols_tot] */
  int64_t cols_tot, kp;
};

/* Splits B (nk × ncols, row-major, bdt) into cols_tot columns (zero past
 * ncols) of kp k each. */
static int split_b(const void *b, tsr_dtype bdt, int64_t nk, int64_t ncols, int64_t cols_tot, int64_t kp, bool perm,
                   tsr_scratch &scr, cudaStream_t s, bsplit *out, tsr_errbuf *err)
{
  unsigned *maxbits = nullptr;
  out->cols_tot = cols_tot, out->kp = kp;
  int rc = scr.get(cols_tot, &maxbits, "B's column maxima", err);
  if (rc == 0) rc = scr.get(cols_tot, &out->exps, "B's column scales", err);
  if (rc == 0) rc = scr.get(2 * cols_tot * kp, &out->parts, "B's f16 parts", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(maxbits, 0, (size_t)cols_tot * sizeof *maxbits, s), err);
  if (rc != 0) return rc;
  int64_t gy = (nk + 255) / 256;
  dim3 grid((unsigned)((ncols + 31) / 32), (unsigned)(gy > 1024 ? 1024 : gy < 1 ? 1 : gy));
  if (bdt == TSR_F64) colmax_kernel<double><<<grid, dim3(32, 8), 0, s>>>((const double *)b, nk, ncols, maxbits);
  else colmax_kernel<float><<<grid, dim3(32, 8), 0, s>>>((const float *)b, nk, ncols, maxbits);
  exps_kernel<<<tsr_grid(cols_tot, 256), 256, 0, s>>>(maxbits, cols_tot, out->exps);
  if (bdt == TSR_F64)
    split_kernel<double><<<tsr_grid(cols_tot * kp, 256), 256, 0, s>>>((const double *)b, nk, ncols, out->exps, cols_tot,
                                                                      kp, perm, out->parts);
  else
    split_kernel<float><<<tsr_grid(cols_tot * kp, 256), 256, 0, s>>>((const float *)b, nk, ncols, out->exps, cols_tot,
                                                                     kp, perm, out->parts);
  return TSR_CUDA_LAUNCHED("split_kernel", err);
}

/* out[i] = sum over s of part[s·stride + i], in split order. */
__global__ void splits_sum_kernel(const float *part, int splits, int64_t stride, float *out)
{
  TSR_GRID_STRIDE(i, stride)
  {
    float acc = part[i];
    for (int s = 1; s < splits; s++) acc += part[s * stride + i];
    out[i] = acc;
  }
}

/* Loads 16 bytes of a row at off (zero past cb), VEC bytes at a time; the
 * caller picked VEC so that every piece is wholly inside or outside. */
template <int VEC>
__device__ __forceinline__ uint4 load16(const uint8_t *row, int64_t off, int64_t cb)
{
  uint4 v = make_uint4(0, 0, 0, 0);
  if constexpr (VEC == 16) {
    if (off < cb) v = __ldcs((const uint4 *)(row + off));
  } else if constexpr (VEC == 8) {
    uint2 a = off < cb ? __ldcs((const uint2 *)(row + off)) : make_uint2(0, 0);
    uint2 b = off + 8 < cb ? __ldcs((const uint2 *)(row + off + 8)) : make_uint2(0, 0);
    v = make_uint4(a.x, a.y, b.x, b.y);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      w[k] = 0;
      if constexpr (VEC == 4) {
        if (off + 4 * k < cb) w[k] = __ldcs((const unsigned *)(row + off + 4 * k));
      } else {
        for (int e = 0; e < 4; e++)
          if (off + 4 * k + e < cb) w[k] |= (uint32_t)row[off + 4 * k + e] << (8 * e);
      }
    }
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return v;
}

/* ---------- xb: out [r, n] = X · B ---------- */

#define XB_ROWS 256   /* rows of X per block: 8 warps × 32 */
#define ROW_UNITS 33  /* 16-byte units per shared row: KC halves and a pad unit */

/* Unit u of a shared row is stored at swz(u): each group of 8 units is
 * rotated by 2·(u/8), so the four threads of a quad, whose units are 8
 * apart in the 2-bit kernel, hit different banks. */
__device__ __forceinline__ int swz(int u)
{
  return (u & ~7) | ((u + 2 * (u >> 3)) & 7);
}

struct xb_args {
  const uint8_t *x;
  int64_t r, cb;          /* rows; bytes per row (the row stride) */
  const uint4 *bparts;    /* B's parts [2][cols_tot][kp] halves */
  int64_t cols_tot, kp;
  const int *exps;
  int64_t n;              /* B's columns */
  float *out;             /* [splits][r][n] */
  int chunks, chunks_per_split;
};

/* One 64-byte k-step of a warp's two m16 tiles against NT n8 tiles of B
 * from the shared chunk buf (ks: the step within the chunk). */
template <int EPB, int NT>
__device__ __forceinline__ void xb_step(const uint4 (&cur)[2][2], const uint4 *buf, int ks, int g, int t,
                                        float (&acc)[2][NT][4])
{
  constexpr int NP = 8 * NT;
#pragma unroll
  for (int v = 0; v < 2 * EPB; v++) {
    uint32_t A[2][2][4];  /* [tile][substep][register] */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int sub = 0; sub < 2; sub++) {
        if constexpr (EPB == 1) {
          uint32_t w0 = word_of(cur[i][0], 2 * v + sub), w8 = word_of(cur[i][1], 2 * v + sub);
          A[i][sub][0] = u8_pair(w0, 0x4140), A[i][sub][2] = u8_pair(w0, 0x4342);
          A[i][sub][1] = u8_pair(w8, 0x4140), A[i][sub][3] = u8_pair(w8, 0x4342);
        } else {
          uint32_t w0 = word_of(cur[i][0], v >> 1), w8 = word_of(cur[i][1], v >> 1);
          int u = 2 * (v & 1) + sub;
          A[i][sub][0] = g2_pair(w0, 2 * u), A[i][sub][2] = g2_pair(w0, 2 * u + 1);
          A[i][sub][1] = g2_pair(w8, 2 * u), A[i][sub][3] = g2_pair(w8, 2 * u + 1);
        }
      }
    const int unit = swz(ks * 8 * EPB + 2 * EPB * t + v);
#pragma unroll
    for (int jn = 0; jn < NT; jn++) {
      const uint4 bh = buf[(8 * jn + g) * ROW_UNITS + unit];
      const uint4 bl = buf[(NP + 8 * jn + g) * ROW_UNITS + unit];
#pragma unroll
      for (int i = 0; i < 2; i++) {
        mma16816(acc[i][jn], A[i][0], bl.x, bl.y);
        mma16816(acc[i][jn], A[i][0], bh.x, bh.y);
        mma16816(acc[i][jn], A[i][1], bl.z, bl.w);
        mma16816(acc[i][jn], A[i][1], bh.z, bh.w);
      }
    }
  }
}

template <int EPB, int NT>
__device__ __forceinline__ void xb_load_chunk(const xb_args &a, int ch, int64_t col_base, uint4 *buf)
{
  constexpr int NP = 8 * NT;
  for (int u = threadIdx.x; u < 2 * NP * 32; u += 256) {
    int pr = u >> 5, un = u & 31, part = pr / NP, col = pr - part * NP;
    int64_t half = (part * a.cols_tot + col_base + col) * a.kp + (int64_t)ch * KC;
    cp_async16(buf + pr * ROW_UNITS + swz(un), a.bparts + half / 8 + un);
  }
}

template <int VEC>
__device__ __forceinline__ void xb_load_x(uint4 (&v)[2][2], const uint8_t *const (&xr)[2][2], int64_t s, int t,
                                          int64_t cb)
{
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) v[i][h] = load16<VEC>(xr[i][h], s * 64 + 16 * t, cb);
}

template <int EPB, int NT, int VEC>
__global__ void __launch_bounds__(256, 2) xb_kernel(xb_args a)
{
  extern __shared__ uint4 smem[];
  constexpr int NP = 8 * NT, SPC = KC / EPB / 64, BUF = 2 * NP * ROW_UNITS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t rbase = (int64_t)blockIdx.x * XB_ROWS + warp * 32, col_base = (int64_t)blockIdx.z * NP;
  const int ch0 = blockIdx.y * a.chunks_per_split, ch1 = min(ch0 + a.chunks_per_split, a.chunks);
  const uint8_t *xr[2][2];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int64_t row = rbase + 16 * i + 8 * h + g;
      xr[i][h] = a.x + (row < a.r ? row : a.r - 1) * a.cb;  /* rows past r: read, never stored */
    }
  float acc[2][NT][4] = {};
  const int64_t s_end = min((int64_t)ch1 * SPC, (a.cb + 63) / 64);
  if (ch0 < ch1) {
    xb_load_chunk<EPB, NT>(a, ch0, col_base, smem);
    cp_async_commit();
    uint4 cur[2][2];
    xb_load_x<VEC>(cur, xr, (int64_t)ch0 * SPC, t, a.cb);
    for (int ch = ch0; ch < ch1; ch++) {
      const uint4 *buf = smem + ((ch - ch0) & 1) * BUF;
      if (ch + 1 < ch1) xb_load_chunk<EPB, NT>(a, ch + 1, col_base, smem + ((ch + 1 - ch0) & 1) * BUF);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < SPC; ks++) {
        int64_t s = (int64_t)ch * SPC + ks;
        if (s < s_end) {
          uint4 nxt[2][2];
          bool more = s + 1 < s_end;
          if (more) xb_load_x<VEC>(nxt, xr, s + 1, t, a.cb);
          xb_step<EPB, NT>(cur, buf, ks, g, t, acc);
          if (more)
#pragma unroll
            for (int i = 0; i < 4; i++) cur[i / 2][i % 2] = nxt[i / 2][i % 2];
        }
      }
      __syncthreads();
    }
  }
  float *dst = a.out + (int64_t)blockIdx.y * a.r * a.n;
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int jn = 0; jn < NT; jn++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int64_t row = rbase + 16 * i + g + (e >= 2 ? 8 : 0), col = col_base + 8 * jn + 2 * t + (e & 1);
        if (row < a.r && col < a.n) dst[row * a.n + col] = ldexpf(acc[i][jn][e], -a.exps[col]);
      }
}

template <int EPB, int NT, int VEC>
static int xb_launch(const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  int smem = 2 * 2 * 8 * NT * ROW_UNITS * 16;
  int rc = TSR_CUDA_CHECK(cudaFuncSetAttribute(xb_kernel<EPB, NT, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                          err);
  if (rc != 0) return rc;
  xb_kernel<EPB, NT, VEC><<<grid, 256, smem, s>>>(a);
  return TSR_CUDA_LAUNCHED("xb_kernel", err);
}

template <int EPB, int NT>
static int xb_by_vec(int vec, const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  switch (vec) {
  case 16: return xb_launch<EPB, NT, 16>(a, grid, s, err);
  case 8: return xb_launch<EPB, NT, 8>(a, grid, s, err);
  case 4: return xb_launch<EPB, NT, 4>(a, grid, s, err);
  default: return xb_launch<EPB, NT, 1>(a, grid, s, err);
  }
}

template <int EPB>
static int xb_by_nt(int nt, int vec, const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  switch (nt) {
  case 1: return xb_by_vec<EPB, 1>(vec, a, grid, s, err);
  case 2: return xb_by_vec<EPB, 2>(vec, a, grid, s, err);
  case 3: return xb_by_vec<EPB, 3>(vec, a, grid, s, err);
  default: return xb_by_vec<EPB, 4>(vec, a, grid, s, err);
  }
}

/* The widest load (16, 8, 4 or 1 bytes) that every row start and every
 * piece boundary allows. */
static int load_width(const void *x, int64_t cb, int widest)
{
  for (int v = widest; v > 1; v /= 2)
    if (cb % v == 0 && (uintptr_t)x % (uintptr_t)v == 0) return v;
  return 1;
}

/* Splits of the k chunks: enough blocks for any GPU, from the shape alone
 * (so the summation order never depends on the device). */
static int split_count(int64_t blocks, int64_t chunks, int64_t want_blocks, int *per_split)
{
  int64_t splits = blocks >= want_blocks ? 1 : (want_blocks + blocks - 1) / blocks;
  splits = splits > chunks ? chunks : splits < 1 ? 1 : splits;
  *per_split = (int)((chunks + splits - 1) / splits);
  return (int)((chunks + *per_split - 1) / *per_split);
}

int tsr_cuda_geno_xb(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                     tsr_dtype bdt, int64_t n, float *out, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  if (r == 0 || n == 0) return 0;
  if (c == 0) return TSR_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(r * n) * sizeof(float), s), err);
  int64_t cb = epb == 1 ? c : packed_len(c), chunks = (cb * epb + KC - 1) / KC, groups = (n + 31) / 32;
  int nt = groups > 1 ? 4 : (int)((n + 7) / 8), per_split = 1;
  int64_t row_blocks = (r + XB_ROWS - 1) / XB_ROWS;
  int splits = split_count(row_blocks, chunks, 528, &per_split);
  tsr_scratch scr(gpu);
  bsplit bs;
  float *part = nullptr;
  int rc = split_b(b, bdt, c, n, 8 * nt * groups, chunks * KC, epb == 4, scr, s, &bs, err);
  if (rc == 0 && splits > 1) rc = scr.get(splits * r * n, &part, "xb's partial products", err);
  if (rc != 0) return rc;
  xb_args a = {x, r, cb, (const uint4 *)bs.parts, bs.cols_tot, bs.kp, bs.exps, n, splits > 1 ? part : out,
               (int)chunks, per_split};
  dim3 grid((unsigned)row_blocks, (unsigned)splits, (unsigned)groups);
  int vec = load_width(x, cb, 16);
  rc = epb == 1 ? xb_by_nt<1>(nt, vec, a, grid, s, err) : xb_by_nt<4>(nt, vec, a, grid, s, err);
  if (rc != 0 || splits == 1) return rc;
  splits_sum_kernel<<<tsr_grid(r * n, 256), 256, 0, s>>>(part, splits, r * n, out);
  return TSR_CUDA_LAUNCHED("splits_sum_kernel", err);
}

/* ---------- btx: out [m, c] = Bᵀ · X ---------- */

#define BTX_COLS 256        /* columns of X per block: 4 warps × 64 */
#define RC 256              /* rows of X per shared chunk of Bᵀ */
#define BT_ROW_H (RC + 16)  /* halves per shared row: 32 pad bytes spread the banks */

struct btx_args {
  const uint8_t *x;
  int64_t r, c, cb;       /* X is r × c, rows of cb bytes */
  const __half *bparts;   /* Bᵀ's parts [2][cols_tot][kp] halves */
  int64_t cols_tot, kp;
  const int *exps;
  int64_t m;              /* B's columns = the result's rows */
  float *out;             /* [splits][m][c] */
  int chunks, chunks_per_split;
};

/* This thread's 8 columns of 4 rows: u8 as uint2 (VEC 8 / 4 / 1 bytes at a
 * time), 2-bit as 2 bytes in the low half (VEC 2 / 1). Zero past cb. */
template <int EPB, int VEC>
__device__ __forceinline__ void btx_load_x(uint2 (&v)[4], const btx_args &a, int64_t row0, int64_t bcol)
{
#pragma unroll
  for (int q = 0; q < 4; q++) {
    int64_t row = row0 + q;
    const uint8_t *p = a.x + (row < a.r ? row : a.r - 1) * a.cb + bcol;  /* B's rows past r are 0 */
    constexpr int BYTES = EPB == 1 ? 8 : 2;
    uint32_t w[2] = {0, 0};
    if constexpr (VEC == 8) {
      if (bcol < a.cb) {
        uint2 u = __ldcs((const uint2 *)p);
        w[0] = u.x, w[1] = u.y;
      }
    } else if constexpr (VEC == 4) {
      if (bcol < a.cb) w[0] = __ldcs((const unsigned *)p);
      if (bcol + 4 < a.cb) w[1] = __ldcs((const unsigned *)(p + 4));
    } else if constexpr (VEC == 2) {
      if (bcol < a.cb) w[0] = __ldcs((const unsigned short *)p);
    } else {
      for (int e = 0; e < BYTES; e++)
        if (bcol + e < a.cb) w[e / 4] |= (uint32_t)p[e] << (8 * (e % 4));
    }
    v[q] = make_uint2(w[0], w[1]);
  }
}

/* X's fragments: column jn of the thread's 8, rows (0,1) and (2,3). */
template <int EPB>
__device__ __forceinline__ void btx_frags(const uint2 (&v)[4], uint32_t (&bf)[8][2])
{
  if constexpr (EPB == 1) {
#pragma unroll
    for (int w = 0; w < 2; w++) {
      uint32_t x0 = w ? v[0].y : v[0].x, x1 = w ? v[1].y : v[1].x, x2 = w ? v[2].y : v[2].x, x3 = w ? v[3].y : v[3].x;
      uint32_t p01 = __byte_perm(x0, x1, 0x5140), q01 = __byte_perm(x0, x1, 0x7362);
      uint32_t p23 = __byte_perm(x2, x3, 0x5140), q23 = __byte_perm(x2, x3, 0x7362);
      bf[4 * w + 0][0] = u8_pair(p01, 0x4140), bf[4 * w + 1][0] = u8_pair(p01, 0x4342);
      bf[4 * w + 2][0] = u8_pair(q01, 0x4140), bf[4 * w + 3][0] = u8_pair(q01, 0x4342);
      bf[4 * w + 0][1] = u8_pair(p23, 0x4140), bf[4 * w + 1][1] = u8_pair(p23, 0x4342);
      bf[4 * w + 2][1] = u8_pair(q23, 0x4140), bf[4 * w + 3][1] = u8_pair(q23, 0x4342);
    }
  } else {
    uint32_t p01 = __byte_perm(v[0].x, v[1].x, 0x5410), p23 = __byte_perm(v[2].x, v[3].x, 0x5410);
#pragma unroll
    for (int jn = 0; jn < 8; jn++) bf[jn][0] = g2_pair(p01, jn), bf[jn][1] = g2_pair(p23, jn);
  }
}

template <int MTB>
__device__ __forceinline__ void btx_load_chunk(const btx_args &a, int ch, int64_t mbase, __half *buf)
{
  constexpr int MP = 16 * MTB;
  for (int u = threadIdx.x; u < 2 * MP * (RC / 8); u += 128) {
    int pr = u / (RC / 8), un = u % (RC / 8), part = pr / MP, mrow = pr - part * MP;
    const __half *src = a.bparts + (part * a.cols_tot + mbase + mrow) * a.kp + (int64_t)ch * RC + 8 * un;
    cp_async16(buf + pr * BT_ROW_H + 8 * un, src);
  }
}

/* One k-step (16 rows of X) of the warp's 64 columns. */
template <int MTB>
__device__ __forceinline__ void btx_step(const uint32_t (&bf)[8][2], const __half *buf, int ks, int g, int t,
                                         float (&acc)[MTB][8][4])
{
  constexpr int MP = 16 * MTB;
#pragma unroll
  for (int i = 0; i < MTB; i++)
#pragma unroll
    for (int part = 1; part >= 0; part--) {
      const __half *row = buf + (part * MP + 16 * i + g) * BT_ROW_H + 16 * ks + 4 * t;
      uint2 top = *(const uint2 *)row, bot = *(const uint2 *)(row + 8 * BT_ROW_H);
      uint32_t A[4] = {top.x, bot.x, top.y, bot.y};
#pragma unroll
      for (int jn = 0; jn < 8; jn++) mma16816(acc[i][jn], A, bf[jn][0], bf[jn][1]);
    }
}

template <int MTB>
__device__ __forceinline__ void btx_store(const btx_args &a, const float (&acc)[MTB][8][4], int64_t mbase,
                                          int64_t col0, int g, int t)
{
  float *dst = a.out + (int64_t)blockIdx.y * a.m * a.c;
#pragma unroll
  for (int i = 0; i < MTB; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int64_t m = mbase + 16 * i + g + 8 * h;
      if (m >= a.m) continue;
      int e = a.exps[m];
#pragma unroll
      for (int e1 = 0; e1 < 2; e1++) {
        int64_t cb0 = col0 + 16 * t + 8 * e1;  /* D's column 2t+e1 holds columns cb0 .. cb0+7 */
        float v[8];
#pragma unroll
        for (int jn = 0; jn < 8; jn++) v[jn] = ldexpf(acc[i][jn][2 * h + e1], -e);
        float *d = dst + m * a.c + cb0;
        if (cb0 + 8 <= a.c && a.c % 4 == 0) {
          ((float4 *)d)[0] = make_float4(v[0], v[1], v[2], v[3]);
          ((float4 *)d)[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
          for (int jn = 0; jn < 8; jn++)
            if (cb0 + jn < a.c) d[jn] = v[jn];
        }
      }
    }
}

template <int EPB, int MTB, int VEC>
__global__ void __launch_bounds__(128, 3) btx_kernel(btx_args a)
{
  extern __shared__ uint4 smem4[];
  __half *smem = (__half *)smem4;
  constexpr int BUF = 2 * 16 * MTB * BT_ROW_H, SPC = RC / 16;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t col0 = (int64_t)blockIdx.x * BTX_COLS + warp * 64, mbase = (int64_t)blockIdx.z * 16 * MTB;
  const int64_t bcol = EPB == 1 ? col0 + 8 * g : col0 / 4 + 2 * g;
  const int ch0 = blockIdx.y * a.chunks_per_split, ch1 = min(ch0 + a.chunks_per_split, a.chunks);
  const int64_t s_end = min((int64_t)ch1 * SPC, (a.r + 15) / 16);
  float acc[MTB][8][4] = {};
  if (ch0 < ch1) {
    btx_load_chunk<MTB>(a, ch0, mbase, smem);
    cp_async_commit();
    uint2 cur[4];
    btx_load_x<EPB, VEC>(cur, a, (int64_t)ch0 * RC + 4 * t, bcol);
    for (int ch = ch0; ch < ch1; ch++) {
      const __half *buf = smem + ((ch - ch0) & 1) * BUF;
      if (ch + 1 < ch1) btx_load_chunk<MTB>(a, ch + 1, mbase, smem + ((ch + 1 - ch0) & 1) * BUF);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
#pragma unroll 2
      for (int ks = 0; ks < SPC; ks++) {
        int64_t s = (int64_t)ch * SPC + ks;
        if (s >= s_end) break;
        uint2 nxt[4];
        bool more = s + 1 < s_end;
        if (more) btx_load_x<EPB, VEC>(nxt, a, (s + 1) * 16 + 4 * t, bcol);
        uint32_t bf[8][2];
        btx_frags<EPB>(cur, bf);
        btx_step<MTB>(bf, buf, ks, g, t, acc);
        if (more)
#pragma unroll
          for (int q = 0; q < 4; q++) cur[q] = nxt[q];
      }
      __syncthreads();
    }
  }
  btx_store<MTB>(a, acc, mbase, col0, g, t);
}

template <int EPB, int MTB, int VEC>
static int btx_launch(const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  int smem = 2 * 2 * 16 * MTB * BT_ROW_H * 2;
  int rc = TSR_CUDA_CHECK(
      cudaFuncSetAttribute(btx_kernel<EPB, MTB, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err);
  if (rc != 0) return rc;
  btx_kernel<EPB, MTB, VEC><<<grid, 128, smem, s>>>(a);
  return TSR_CUDA_LAUNCHED("btx_kernel", err);
}

template <int EPB, int MTB>
static int btx_by_vec(int vec, const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  if constexpr (EPB == 1) {
    if (vec == 8) return btx_launch<1, MTB, 8>(a, grid, s, err);
    if (vec == 4) return btx_launch<1, MTB, 4>(a, grid, s, err);
    return btx_launch<1, MTB, 1>(a, grid, s, err);
  } else {
    if (vec >= 2) return btx_launch<4, MTB, 2>(a, grid, s, err);
    return btx_launch<4, MTB, 1>(a, grid, s, err);
  }
}

int tsr_cuda_geno_btx(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                      tsr_dtype bdt, int64_t m, float *out, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  if (c == 0 || m == 0) return 0;
  if (r == 0) return TSR_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(m * c) * sizeof(float), s), err);
  int64_t cb = epb == 1 ? c : packed_len(c), chunks = (r + RC - 1) / RC, groups = (m + 31) / 32;
  int mtb = groups > 1 ? 2 : (int)((m + 15) / 16), per_split = 1;
  int64_t col_blocks = (c + BTX_COLS - 1) / BTX_COLS;
  int splits = split_count(col_blocks, chunks, 1188, &per_split);
  tsr_scratch scr(gpu);
  bsplit bs;
  float *part = nullptr;
  int rc = split_b(b, bdt, r, m, 16 * mtb * groups, chunks * RC, false, scr, s, &bs, err);
  if (rc == 0 && splits > 1) rc = scr.get(splits * m * c, &part, "btx's partial products", err);
  if (rc != 0) return rc;
  btx_args a = {x, r, c, cb, bs.parts, bs.cols_tot, bs.kp, bs.exps, m, splits > 1 ? part : out, (int)chunks,
                per_split};
  dim3 grid((unsigned)col_blocks, (unsigned)splits, (unsigned)groups);
  int vec = load_width(x, cb, epb == 1 ? 8 : 2);
  if (epb == 1) rc = mtb == 1 ? btx_by_vec<1, 1>(vec, a, grid, s, err) : btx_by_vec<1, 2>(vec, a, grid, s, err);
  else rc = mtb == 1 ? btx_by_vec<4, 1>(vec, a, grid, s, err) : btx_by_vec<4, 2>(vec, a, grid, s, err);
  if (rc != 0 || splits == 1) return rc;
  splits_sum_kernel<<<tsr_grid(m * c, 256), 256, 0, s>>>(part, splits, m * c, out);
  return TSR_CUDA_LAUNCHED("splits_sum_kernel", err);
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
  if (strcmp(side, "btx") == 0) rc = tsr_cuda_geno_btx(gpu, x, 4, r, cols, in[1].data, in[1].meta.dtype, k, (float *)out->data, err);
  else rc = tsr_cuda_geno_xb(gpu, x, 4, r, cols, in[1].data, in[1].meta.dtype, k, (float *)out->data, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("matmul_2bit", rc, err);
}
