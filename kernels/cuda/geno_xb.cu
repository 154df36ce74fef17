/* kernels/cuda/geno_xb.cu — the fused product out [r, n] = X · B of a u8
 * (EPB 1) or 2-bit packed (EPB 4) genotype matrix X [r, c] and a thin f32
 * or f64 B [c, n], out in B's dtype (genotype.cuh has the numerics: B in
 * D = 3 digits for f32, 4 for f64).
 *
 * A block of 8 warps owns 256 rows of X, a warp 32 (two m16 tiles), and up
 * to 32 columns of B (NT n8 tiles; more columns are more passes, grid z).
 * The k loop goes in steps of SB bytes of each row (256 for u8, 128 for
 * 2-bit), one chunk of B's digits each. Both are copied into shared memory
 * by the whole block with cp.async, double buffered: each warp instruction
 * copies whole 256- or 128-byte row segments, which DRAM serves far better
 * than the 64-byte pieces per row that the MMA layout would read directly
 * (2.36 -> 2.79 TB/s on an H200, docs/kernels-cuda.md). Thread (g, t) reads
 * bytes 16t..16t+15 of each 64 bytes of rows g and g+8 of both tiles; they
 * are the MMA's A fragments as they are (u8), or after (w >> 2j) &
 * 0x03030303 (2-bit); the MMA's k order is permuted to match, and B's
 * digits are laid out in that same order. */
#include "genotype.cuh"

#define XB_ROWS 256  /* rows of X per block: 8 warps × 32 */

/* WIDE: the steps above, for GPUs with 227 KB of shared memory a block
 * (Hopper); otherwise half as wide (an A100 has 163 KB). */
template <int EPB, int NT, bool WIDE = true, int D = 3>
struct xb_cfg {
  static constexpr int SB = (EPB == 1 ? 256 : 128) / (WIDE ? 1 : 2);  /* bytes of each row of X per step */
  static constexpr int KC = SB * EPB;               /* k per step = per chunk of B */
  static constexpr int XROW = (SB + 127) / 128 * 128 + 64;  /* X stage row stride: odd rows 64 bytes over (banks) */
  static constexpr int NP = 8 * NT;                 /* B's columns per pass */
  static constexpr int ROWS = D * NP;               /* shared rows of a B chunk: (digit, column) */
  static constexpr int BBUF = ROWS * KC;            /* bytes of a B chunk */
  static constexpr int XBUF = XB_ROWS * XROW;       /* bytes of an X stage */
  static constexpr int SMEM = 2 * (BBUF + XBUF);    /* D 3: wide 170..209 KB, else 84..110; D 4: to 224 KB */
};

struct xb_args {
  const uint8_t *x;
  int64_t r, cb;        /* rows; bytes per row (the row stride) */
  const uint4 *digits;  /* B's digits [D][cols_tot][kp] bytes */
  int64_t cols_tot, kp;
  const int *exps;
  int64_t n;            /* B's columns */
  void *out;            /* [splits][r][n], B's dtype */
  int chunks, chunks_per_split;
  int mode;             /* GENO_RAW, _ZERO_MISSING or _MISSING_MASK */
  uint32_t miss4;       /* the missing value in each byte */
};

/* Where unit u (16 bytes) of shared row `row` lives: the eight lanes of a
 * quarter-warp (rows g and g+1, t = 0..3) must hit eight different 16-byte
 * bank groups. u8: lane t reads unit 4ks + t, so odd rows move by 4 units.
 * 2-bit: lane t reads units 4t..4t+3, so units 8 apart are told apart by
 * bit 1 and odd rows by bit 0. */
template <int EPB>
__device__ __forceinline__ int swz(int u, int row)
{
  if constexpr (EPB == 1) return u ^ ((row & 1) << 2);
  else return u ^ (((u >> 3) & 1) << 1) ^ (row & 1);
}

/* Copies chunk ch of B's digits (this block's NP columns) into buf. */
template <int EPB, int NT, bool WIDE, int D>
__device__ __forceinline__ void xb_copy_b(const xb_args &a, int64_t ch, int64_t col_base, uint4 *buf)
{
  typedef xb_cfg<EPB, NT, WIDE, D> C;
  constexpr int UPR = C::KC / 16;  /* units per row */
  for (int u = threadIdx.x; u < C::ROWS * UPR; u += 256) {
    int row = u / UPR, un = u % UPR, d = row / C::NP, col = row - d * C::NP;
    int64_t byte = (d * a.cols_tot + col_base + col) * a.kp + ch * C::KC;
    cp_async<16>(buf + row * UPR + swz<EPB>(un, row), a.digits + byte / 16 + un, 16);
  }
}

/* Copies step s of the block's 256 rows (bytes s·SB ..) into the stage xs,
 * VEC bytes a copy, zero past the row; VEC 1 (rows not 4-byte aligned)
 * loads and stores byte by byte. Rows past r repeat the last row (never
 * stored). */
template <int EPB, int NT, bool WIDE, int VEC>
__device__ __forceinline__ void xb_copy_x(const xb_args &a, int64_t s, int64_t rbase, char *xs)
{
  typedef xb_cfg<EPB, NT, WIDE> C;
  constexpr int PER_ROW = C::SB / VEC;
  for (int p = threadIdx.x; p < XB_ROWS * PER_ROW; p += 256) {
    int row = p / PER_ROW, k = p % PER_ROW;
    int64_t grow = rbase + row, off = s * C::SB + k * VEC;
    const uint8_t *src = a.x + (grow < a.r ? grow : a.r - 1) * a.cb;
    char *dst = xs + row * C::XROW + k * VEC;
    if constexpr (VEC > 1) cp_async<VEC>(dst, src + (off < a.cb ? off : 0), off < a.cb ? VEC : 0);
    else *dst = off < a.cb ? (char)src[off] : 0;
  }
}

/* One 64-byte step of the warp's two m16 tiles against NT n8 tiles of B
 * from the chunk in buf (ks: the step within the chunk). u8: the thread's
 * word pair (2h, 2h+1) of a row is one k32 MMA. 2-bit: word j of a row is
 * 16 genotypes, four registers (w >> 2q) & 0x03030303, two MMAs. */
template <int EPB, int NT, bool WIDE, int D>
__device__ __forceinline__ void xb_step(const uint4 (&cur)[4], const uint4 *buf, int ks, int g, int t,
                                        int (&acc)[2][NT][D][4], int mode, uint32_t miss4)
{
  typedef xb_cfg<EPB, NT, WIDE, D> C;
  constexpr int UPR = C::KC / 16;
#pragma unroll
  for (int j = 0; j < (EPB == 1 ? 1 : 4); j++) {  /* 16 bytes of B's digits per (digit, column): 2 MMAs */
    uint32_t A[2][2][4];  /* [tile][MMA][register] */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if constexpr (EPB == 1) {
          A[i][h][0] = word_of(cur[2 * i], 2 * h), A[i][h][2] = word_of(cur[2 * i], 2 * h + 1);
          A[i][h][1] = word_of(cur[2 * i + 1], 2 * h), A[i][h][3] = word_of(cur[2 * i + 1], 2 * h + 1);
        } else {
          uint32_t w0 = word_of(cur[2 * i], j), w8 = word_of(cur[2 * i + 1], j);
          A[i][h][0] = (w0 >> (4 * h)) & 0x03030303u, A[i][h][2] = (w0 >> (4 * h + 2)) & 0x03030303u;
          A[i][h][1] = (w8 >> (4 * h)) & 0x03030303u, A[i][h][3] = (w8 >> (4 * h + 2)) & 0x03030303u;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) A[i][h][q] = geno_mode(A[i][h][q], mode, miss4);
      }
    const int unit = ks * 4 * EPB + EPB * t + j;
#pragma unroll
    for (int jn = 0; jn < NT; jn++)
#pragma unroll
      for (int d = 0; d < D; d++) {
        const int row = d * C::NP + 8 * jn + g;
        const uint4 b = buf[row * UPR + swz<EPB>(unit, row)];
#pragma unroll
        for (int i = 0; i < 2; i++) {
          imma16832(acc[i][jn][d], A[i][0], b.x, b.y);
          imma16832(acc[i][jn][d], A[i][1], b.z, b.w);
        }
      }
  }
}

template <class OutT, int EPB, int NT, bool WIDE, int VEC>
__global__ void __launch_bounds__(256, 1) xb_kernel(xb_args a)
{
  constexpr int D = geno_digits<OutT>::D;
  typedef xb_cfg<EPB, NT, WIDE, D> C;
  extern __shared__ uint4 smem4[];
  char *smem = (char *)smem4;  /* two of: a B chunk, then an X stage */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t rbase = (int64_t)blockIdx.x * XB_ROWS, col_base = (int64_t)blockIdx.z * C::NP;
  const int64_t ch0 = (int64_t)blockIdx.y * a.chunks_per_split, ch1 = min(ch0 + a.chunks_per_split, (int64_t)a.chunks);
  int acc[2][NT][D][4] = {};
  if (ch0 < ch1) {
    xb_copy_b<EPB, NT, WIDE, D>(a, ch0, col_base, (uint4 *)smem);
    xb_copy_x<EPB, NT, WIDE, VEC>(a, ch0, rbase, smem + C::BBUF);
    cp_async_commit();
  }
  for (int64_t s = ch0; s < ch1; s++) {
    cp_async_wait<0>();
    __syncthreads();  /* step s is in for everyone, and everyone is done with step s-1's buffers */
    if (s + 1 < ch1) {
      char *next = smem + (int)((s + 1 - ch0) & 1) * (C::BBUF + C::XBUF);
      xb_copy_b<EPB, NT, WIDE, D>(a, s + 1, col_base, (uint4 *)next);
      xb_copy_x<EPB, NT, WIDE, VEC>(a, s + 1, rbase, next + C::BBUF);
    }
    cp_async_commit();
    const char *buf = smem + (int)((s - ch0) & 1) * (C::BBUF + C::XBUF), *xs = buf + C::BBUF;
#pragma unroll
    for (int ss = 0; ss < C::SB / 64; ss++) {
      uint4 cur[4];  /* rows g, g+8 of tile 0, then of tile 1: bytes 64ss + 16t .. */
#pragma unroll
      for (int p = 0; p < 4; p++)
        cur[p] = *(const uint4 *)(xs + (warp * 32 + 16 * (p / 2) + 8 * (p % 2) + g) * C::XROW + 64 * ss + 16 * t);
      xb_step<EPB, NT, WIDE, D>(cur, (const uint4 *)buf, ss, g, t, acc, a.mode, a.miss4);
    }
  }
  OutT *dst = (OutT *)a.out + (int64_t)blockIdx.y * a.r * a.n;
  const int64_t row0 = rbase + warp * 32;
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int jn = 0; jn < NT; jn++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int64_t row = row0 + 16 * i + g + (e >= 2 ? 8 : 0), col = col_base + 8 * jn + 2 * t + (e & 1);
        if (row < a.r && col < a.n) {
          int sums[D];
#pragma unroll
          for (int d = 0; d < D; d++) sums[d] = acc[i][jn][d][e];
          dst[row * a.n + col] = digits_value<OutT, D>(sums, a.exps[col]);
        }
      }
}

template <class OutT, int EPB, int NT, bool WIDE, int VEC>
static int xb_launch(const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  const int smem = xb_cfg<EPB, NT, WIDE, geno_digits<OutT>::D>::SMEM;
  int rc = TSR_CUDA_CHECK(
      cudaFuncSetAttribute(xb_kernel<OutT, EPB, NT, WIDE, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err);
  if (rc != 0) return rc;
  xb_kernel<OutT, EPB, NT, WIDE, VEC><<<grid, 256, smem, s>>>(a);
  return TSR_CUDA_LAUNCHED("xb_kernel", err);
}

template <class OutT, int EPB, int NT, bool WIDE>
static int xb_by_vec(int vec, const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  switch (vec) {
  case 16: return xb_launch<OutT, EPB, NT, WIDE, 16>(a, grid, s, err);
  case 8: return xb_launch<OutT, EPB, NT, WIDE, 8>(a, grid, s, err);
  case 4: return xb_launch<OutT, EPB, NT, WIDE, 4>(a, grid, s, err);
  default: return xb_launch<OutT, EPB, NT, WIDE, 1>(a, grid, s, err);
  }
}

template <class OutT, int EPB, bool WIDE>
static int xb_by_nt(int nt, int vec, const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  switch (nt) {
  case 1: return xb_by_vec<OutT, EPB, 1, WIDE>(vec, a, grid, s, err);
  case 2: return xb_by_vec<OutT, EPB, 2, WIDE>(vec, a, grid, s, err);
  case 3: return xb_by_vec<OutT, EPB, 3, WIDE>(vec, a, grid, s, err);
  default: return xb_by_vec<OutT, EPB, 4, WIDE>(vec, a, grid, s, err);
  }
}

/* The launch for this output type, width and bytes per genotype. */
template <class OutT>
static int xb_dispatch(bool wide, int epb, int nt, int vec, const xb_args &a, dim3 grid, cudaStream_t s,
                       tsr_errbuf *err)
{
  if (wide)
    return epb == 1 ? xb_by_nt<OutT, 1, true>(nt, vec, a, grid, s, err) : xb_by_nt<OutT, 4, true>(nt, vec, a, grid, s, err);
  return epb == 1 ? xb_by_nt<OutT, 1, false>(nt, vec, a, grid, s, err) : xb_by_nt<OutT, 4, false>(nt, vec, a, grid, s, err);
}

static bool force_narrow = false;

void tsr_cuda_geno_test_narrow(bool on)
{
  force_narrow = on;
}

/* Whether the wide steps fit this device's shared memory (the largest
 * configuration, NT 4, decides, so the choice depends on the device only). */
static bool xb_wide(void)
{
  int dev = 0, optin = 0;
  if (force_narrow || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return false;
  return optin >= xb_cfg<1, 4, true, 4>::SMEM && optin >= xb_cfg<4, 4, true, 4>::SMEM;
}

int tsr_cuda_geno_xb(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                     tsr_dtype bdt, int64_t n, void *out, tsr_errbuf *err)
{
  return tsr_cuda_geno_xb_mode(gpu, x, epb, r, c, b, bdt, n, out, GENO_RAW, 0, err);
}

int tsr_cuda_geno_xb_mode(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                          tsr_dtype bdt, int64_t n, void *out, int mode, int missing, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  const size_t es = bdt == TSR_F64 ? 8 : 4;
  if (r == 0 || n == 0) return 0;
  if (c == 0) return TSR_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(r * n) * es, s), err);
  const bool wide = xb_wide();
  const int kc = epb == 1 ? (wide ? xb_cfg<1, 1, true>::KC : xb_cfg<1, 1, false>::KC)
                          : (wide ? xb_cfg<4, 1, true>::KC : xb_cfg<4, 1, false>::KC);
  int64_t cb = epb == 1 ? c : tsr_packed_len(c), chunks = (cb * epb + kc - 1) / kc, groups = (n + 31) / 32;
  int nt = groups > 1 ? 4 : (int)((n + 7) / 8), per_split = 1;
  int64_t row_blocks = (r + XB_ROWS - 1) / XB_ROWS;
  int64_t max_chunks = epb == 1 ? 65536 / kc : (int64_t)1 << 30;  /* int32 sums cannot overflow */
  int splits = tsr_geno_split_count(row_blocks, chunks, 528, max_chunks, &per_split);
  tsr_scratch scr(gpu);
  bdigits bs;
  void *part = nullptr;
  int rc = tsr_geno_digits(b, bdt, c, n, 8 * nt * groups, chunks * kc, epb == 4, scr, s, &bs, err);
  if (rc == 0 && splits > 1) rc = scr.get((size_t)(splits * r * n) * es, &part, "xb's partial products", err);
  if (rc != 0) return rc;
  xb_args a = {x, r, cb, (const uint4 *)bs.digits, bs.cols_tot, bs.kp, bs.exps, n, splits > 1 ? part : out,
               (int)chunks, per_split, mode, 0x01010101u * (uint32_t)(missing & 255)};
  dim3 grid((unsigned)row_blocks, (unsigned)splits, (unsigned)groups);
  int vec = tsr_geno_load_width(x, cb, 16);
  rc = bdt == TSR_F64 ? xb_dispatch<double>(wide, epb, nt, vec, a, grid, s, err)
                      : xb_dispatch<float>(wide, epb, nt, vec, a, grid, s, err);
  return rc != 0 || splits == 1 ? rc : tsr_geno_sum_splits(part, splits, r * n, out, bdt, s, err);
}
