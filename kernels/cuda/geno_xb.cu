/* kernels/cuda/geno_xb.cu — the fused product out [r, n] = X · B of a u8
 * (EPB 1) or 2-bit packed (EPB 4) genotype matrix X [r, c] and a thin f32
 * or f64 B [c, n] (genotype.cuh has the numerics).
 *
 * A block of 8 warps owns 256 rows of X, a warp 32 (two m16 tiles), and up
 * to 32 columns of B (NT n8 tiles; more columns are more passes, grid z).
 * The k loop goes in 64-byte steps of X per row: thread (g, t) of a warp
 * takes bytes 16t..16t+15 of rows g and g+8 of both tiles. These 16-byte
 * pieces stream into a ring of D steps per thread in shared memory with
 * cp.async (each thread reads back only what it copied, so the ring needs
 * no barrier) — D-1 steps in flight, enough bytes to cover the memory
 * latency. They are the MMA's A fragments as they are (u8), or after
 * (w >> 2j) & 0x03030303 (2-bit); the MMA's k order is permuted to match,
 * and B's digits are laid out in that same order. B streams through
 * shared memory in chunks of KC k, three buffers deep, copied in the same
 * groups as the X steps, with a barrier at each chunk's first step. */
#include "genotype.cuh"

#define XB_ROWS 256  /* rows of X per block: 8 warps × 32 */

template <int EPB, int NT>
struct xb_cfg {
  static constexpr int KC = 256;                    /* k per shared chunk of B */
  static constexpr int SPC = KC / EPB / 64;         /* 64-byte steps of X per chunk: 4 (u8) or 1 */
  static constexpr int NP = 8 * NT;                 /* B's columns per pass */
  static constexpr int ROWS = TSR_GENO_DIGITS * NP; /* shared rows of a chunk: (digit, column) */
  static constexpr int BUF = ROWS * KC / 16;        /* 16-byte units per chunk buffer */
  static constexpr int NBUF = 3;                    /* chunk buffers: D - 1 <= (NBUF - 1)·SPC */
  static constexpr int D = EPB == 1 ? 8 : 3;        /* ring depth: 7 (u8) or 2 steps in flight */
  static constexpr int SMEM = (NBUF * BUF + D * 4 * 256) * 16;  /* 104..205 KB: one block per SM */
  /* Split k so that the int32 sums cannot overflow (255·128·65536 < 2^31). */
  static constexpr int64_t MAX_CHUNKS = EPB == 1 ? 65536 / KC : 1 << 30;
};

struct xb_args {
  const uint8_t *x;
  int64_t r, cb;        /* rows; bytes per row (the row stride) */
  const uint4 *digits;  /* B's digits [3][cols_tot][kp] bytes */
  int64_t cols_tot, kp;
  const int *exps;
  int64_t n;            /* B's columns */
  float *out;           /* [splits][r][n] */
  int chunks, chunks_per_split;
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
template <int EPB, int NT>
__device__ __forceinline__ void xb_copy_b(const xb_args &a, int64_t ch, int64_t col_base, uint4 *buf)
{
  typedef xb_cfg<EPB, NT> C;
  constexpr int UPR = C::KC / 16;  /* units per row */
  for (int u = threadIdx.x; u < C::ROWS * UPR; u += 256) {
    int row = u / UPR, un = u % UPR, d = row / C::NP, col = row - d * C::NP;
    int64_t byte = (d * a.cols_tot + col_base + col) * a.kp + ch * C::KC;
    cp_async<16>(buf + row * UPR + swz<EPB>(un, row), a.digits + byte / 16 + un, 16);
  }
}

/* This thread's four pieces of step s into ring slot s % D (zero past the
 * row), VEC bytes per copy. */
template <int EPB, int NT, int VEC>
__device__ __forceinline__ void xb_copy_x(uint4 *ring, const uint8_t *const (&xr)[4], int64_t s, int t, int64_t cb)
{
  typedef xb_cfg<EPB, NT> C;
  uint4 *slot = ring + (int)(s % C::D) * 4 * 256 + threadIdx.x;
#pragma unroll
  for (int p = 0; p < 4; p++)
#pragma unroll
    for (int k = 0; k < 16 / VEC; k++) {
      int64_t off = s * 64 + 16 * t + k * VEC;
      bool in = off < cb;
      cp_async<VEC>((char *)(slot + p * 256) + k * VEC, xr[p] + (in ? off : 0), in ? VEC : 0);
    }
}

/* The group of step s: its X pieces, and B's chunk when s starts one. */
template <int EPB, int NT, int VEC>
__device__ __forceinline__ void xb_issue(const xb_args &a, uint4 *smem, const uint8_t *const (&xr)[4], int64_t s,
                                         int64_t s_end, int ch0, int ch1, int64_t col_base, int t)
{
  typedef xb_cfg<EPB, NT> C;
  if (s < s_end) {
    int64_t ch = s / C::SPC;
    if (s % C::SPC == 0 && ch < ch1) xb_copy_b<EPB, NT>(a, ch, col_base, smem + (int)((ch - ch0) % C::NBUF) * C::BUF);
    if constexpr (VEC > 1) xb_copy_x<EPB, NT, VEC>(smem + C::NBUF * C::BUF, xr, s, t, a.cb);
  }
  cp_async_commit();
}

/* One 64-byte step of the warp's two m16 tiles against NT n8 tiles of B
 * from the chunk in buf (ks: the step within the chunk). u8: the thread's
 * word pair (2h, 2h+1) of a row is one k32 MMA. 2-bit: word j of a row is
 * 16 genotypes, four registers (w >> 2q) & 0x03030303, two MMAs. */
template <int EPB, int NT>
__device__ __forceinline__ void xb_step(const uint4 (&cur)[4], const uint4 *buf, int ks, int g, int t,
                                        int (&acc)[2][NT][TSR_GENO_DIGITS][4])
{
  typedef xb_cfg<EPB, NT> C;
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
      }
    const int unit = ks * 4 * EPB + EPB * t + j;
#pragma unroll
    for (int jn = 0; jn < NT; jn++)
#pragma unroll
      for (int d = 0; d < TSR_GENO_DIGITS; d++) {
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

template <int EPB, int NT, int VEC>
__global__ void __launch_bounds__(256, 1) xb_kernel(xb_args a)
{
  typedef xb_cfg<EPB, NT> C;
  extern __shared__ uint4 smem[];
  const uint4 *ring = smem + C::NBUF * C::BUF;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t rbase = (int64_t)blockIdx.x * XB_ROWS + warp * 32, col_base = (int64_t)blockIdx.z * C::NP;
  const int ch0 = blockIdx.y * a.chunks_per_split, ch1 = min(ch0 + a.chunks_per_split, a.chunks);
  const uint8_t *xr[4];  /* rows g, g+8 of tile 0, then of tile 1 */
#pragma unroll
  for (int p = 0; p < 4; p++) {
    int64_t row = rbase + 16 * (p / 2) + 8 * (p % 2) + g;
    xr[p] = a.x + (row < a.r ? row : a.r - 1) * a.cb;  /* rows past r: read, never stored */
  }
  int acc[2][NT][TSR_GENO_DIGITS][4] = {};
  const int64_t s0 = (int64_t)ch0 * C::SPC, s_end = min((int64_t)ch1 * C::SPC, (a.cb + 63) / 64);
  for (int d = 0; d < C::D - 1; d++) xb_issue<EPB, NT, VEC>(a, smem, xr, s0 + d, s_end, ch0, ch1, col_base, t);
  for (int64_t s = s0; s < s_end; s++) {
    xb_issue<EPB, NT, VEC>(a, smem, xr, s + C::D - 1, s_end, ch0, ch1, col_base, t);
    cp_async_wait<C::D - 1>();
    const int ks = (int)(s % C::SPC);
    if (ks == 0) __syncthreads();  /* this chunk of B is in for everyone; the oldest buffer is free */
    uint4 cur[4];
#pragma unroll
    for (int p = 0; p < 4; p++) {
      if constexpr (VEC > 1) cur[p] = ring[((int)(s % C::D) * 4 + p) * 256 + threadIdx.x];
      else cur[p] = tsr_geno_load16<1>(xr[p], s * 64 + 16 * t, a.cb);
    }
    xb_step<EPB, NT>(cur, smem + (int)((s / C::SPC - ch0) % C::NBUF) * C::BUF, ks, g, t, acc);
  }
  float *dst = a.out + (int64_t)blockIdx.y * a.r * a.n;
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int jn = 0; jn < NT; jn++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int64_t row = rbase + 16 * i + g + (e >= 2 ? 8 : 0), col = col_base + 8 * jn + 2 * t + (e & 1);
        if (row < a.r && col < a.n)
          dst[row * a.n + col] = digits_value(acc[i][jn][0][e], acc[i][jn][1][e], acc[i][jn][2][e], a.exps[col]);
      }
}

template <int EPB, int NT, int VEC>
static int xb_launch(const xb_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  const int smem = xb_cfg<EPB, NT>::SMEM;
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

int tsr_cuda_geno_xb(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                     tsr_dtype bdt, int64_t n, float *out, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  if (r == 0 || n == 0) return 0;
  if (c == 0) return TSR_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(r * n) * sizeof(float), s), err);
  const int kc = xb_cfg<1, 1>::KC;
  int64_t cb = epb == 1 ? c : tsr_packed_len(c), chunks = (cb * epb + kc - 1) / kc, groups = (n + 31) / 32;
  int nt = groups > 1 ? 4 : (int)((n + 7) / 8), per_split = 1;
  int64_t row_blocks = (r + XB_ROWS - 1) / XB_ROWS;
  int64_t max_chunks = epb == 1 ? xb_cfg<1, 1>::MAX_CHUNKS : xb_cfg<4, 1>::MAX_CHUNKS;
  int splits = tsr_geno_split_count(row_blocks, chunks, 528, max_chunks, &per_split);
  tsr_scratch scr(gpu);
  bdigits bs;
  float *part = nullptr;
  int rc = tsr_geno_digits(b, bdt, c, n, 8 * nt * groups, chunks * kc, epb == 4, scr, s, &bs, err);
  if (rc == 0 && splits > 1) rc = scr.get(splits * r * n, &part, "xb's partial products", err);
  if (rc != 0) return rc;
  xb_args a = {x, r, cb, (const uint4 *)bs.digits, bs.cols_tot, bs.kp, bs.exps, n, splits > 1 ? part : out,
               (int)chunks, per_split};
  dim3 grid((unsigned)row_blocks, (unsigned)splits, (unsigned)groups);
  int vec = tsr_geno_load_width(x, cb, 16);
  rc = epb == 1 ? xb_by_nt<1>(nt, vec, a, grid, s, err) : xb_by_nt<4>(nt, vec, a, grid, s, err);
  return rc != 0 || splits == 1 ? rc : tsr_geno_sum_splits(part, splits, r * n, out, s, err);
}
