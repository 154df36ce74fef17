/* kernels/cuda/geno_btx.cu — the fused product out [m, c] = Bᵀ · X of a
 * thin f32 or f64 B [r, m] and a u8 (EPB 1) or 2-bit packed (EPB 4)
 * genotype matrix X [r, c], out in B's dtype (genotype.cuh has the
 * numerics: B in D = 3 digits for f32, 4 for f64).
 *
 * The MMA computes (Xᵀ B) tiles: M is X's columns, N is B's columns (up to
 * 32 per pass, NT n8 tiles; more are more passes, grid z), K is X's rows.
 * A block of 8 warps owns 256 columns of X, a warp 32 (two m16 tiles);
 * thread (g, t) owns columns 4g..4g+3 of its warp (u8: one word a row;
 * 2-bit: one byte a row) and rows 8t..8t+7 of each 32-row k step. Its 8
 * row pieces stream into a ring of D steps per thread in shared memory
 * (cp.async; each thread reads back only its own copies), D-1 steps in
 * flight; a 4×4 byte transpose (PRMT) turns 4 rows of 4 columns into the
 * A fragments, one register a column. B's digits come through shared
 * memory in chunks of RC rows (double buffered, copied in the same groups
 * as the X steps) as the B fragments. Rows are split across blocks when
 * the columns alone do not fill the GPU (and so that int32 sums cannot
 * overflow); the partial products are summed in split order afterwards. */
#include "genotype.cuh"

#define BTX_WARPS 8
#define BTX_COLS (32 * BTX_WARPS)  /* columns of X per block */
#define RC 256                     /* rows of X per shared chunk of B */

template <int EPB, int NT, int DG = 3>
struct btx_cfg {
  static constexpr int NP = 8 * NT;                 /* B's columns per pass */
  static constexpr int ROWS = DG * NP;              /* shared rows of a chunk: (digit, column) */
  static constexpr int ROWB = RC + 32;              /* bytes per shared row: 32 pad bytes spread the banks */
  static constexpr int BUF = ROWS * ROWB;           /* bytes per chunk buffer */
  static constexpr int SPC = RC / 32;               /* 32-row steps per chunk */
  static constexpr int D = 8;                       /* ring depth: D - 1 <= SPC for two buffers */
  static constexpr int SMEM = 2 * BUF + D * 8 * BTX_WARPS * 32 * 4;
  /* Split k so that the int32 sums cannot overflow (255·128·65536 < 2^31). */
  static constexpr int64_t MAX_CHUNKS = EPB == 1 ? 65536 / RC : 1 << 30;
};

struct btx_args {
  const uint8_t *x;
  int64_t r, c, cb;      /* X is r × c, rows of cb bytes */
  const int8_t *digits;  /* B's digits [DG][cols_tot][kp] */
  int64_t cols_tot, kp;
  const int *exps;
  int64_t m;             /* B's columns = the result's rows */
  void *out;             /* [splits][m][c], B's dtype */
  int chunks, chunks_per_split;
  int mode;              /* GENO_RAW, _ZERO_MISSING or _MISSING_MASK */
  uint32_t miss4;        /* the missing value in each byte */
};

/* Row q (0..7) of step s for thread t, clamped: B's rows past r are 0. */
__device__ __forceinline__ const uint8_t *btx_row(const btx_args &a, int64_t s, int t, int q)
{
  int64_t row = s * 32 + 8 * t + q;
  return a.x + (row < a.r ? row : a.r - 1) * a.cb;
}

/* The 4-byte word holding this thread's columns: u8 the word itself (at
 * byte wcol), 2-bit the aligned word holding its byte. Zero past cb. */
template <int EPB>
__device__ __forceinline__ void btx_copy_x(const btx_args &a, uint32_t *ring, int64_t s, int t, int64_t wcol)
{
  typedef btx_cfg<EPB, 1> C;
  uint32_t *slot = ring + (int)(s % C::D) * 8 * 256 + threadIdx.x;  /* [D][8 rows][256 threads] */
  int64_t n = a.cb - wcol;
  int bytes = n <= 0 ? 0 : n > 4 ? 4 : (int)n;
#pragma unroll
  for (int q = 0; q < 8; q++) cp_async<4>(slot + q * 256, btx_row(a, s, t, q) + (bytes ? wcol : 0), bytes);
}

template <int EPB, int NT, int DG>
__device__ __forceinline__ void btx_copy_b(const btx_args &a, int64_t ch, int64_t nbase, char *buf)
{
  typedef btx_cfg<EPB, NT, DG> C;
  for (int u = threadIdx.x; u < C::ROWS * (RC / 16); u += 256) {
    int row = u / (RC / 16), un = u % (RC / 16), d = row / C::NP, col = row - d * C::NP;
    const int8_t *src = a.digits + (d * a.cols_tot + nbase + col) * a.kp + ch * RC + 16 * un;
    cp_async<16>(buf + row * C::ROWB + 16 * un, src, 16);
  }
}

/* The group of step s: its X words, and B's chunk when s starts one. */
template <int EPB, int NT, int DG, bool ASYNC>
__device__ __forceinline__ void btx_issue(const btx_args &a, char *smem, int64_t s, int64_t s_end, int ch0, int ch1,
                                          int64_t nbase, int t, int64_t wcol)
{
  typedef btx_cfg<EPB, NT, DG> C;
  if (s < s_end) {
    int64_t ch = s / C::SPC;
    if (s % C::SPC == 0 && ch < ch1) btx_copy_b<EPB, NT, DG>(a, ch, nbase, smem + (int)((ch - ch0) & 1) * C::BUF);
    if constexpr (ASYNC) btx_copy_x<EPB>(a, (uint32_t *)(smem + 2 * C::BUF), s, t, wcol);
  }
  cp_async_commit();
}

/* The words synchronously, byte by byte (rows not 4-byte aligned). */
__device__ __forceinline__ void btx_load_x(uint32_t (&w)[8], const btx_args &a, int64_t s, int t, int64_t wcol)
{
#pragma unroll
  for (int q = 0; q < 8; q++) {
    const uint8_t *p = btx_row(a, s, t, q);
    w[q] = 0;
    for (int e = 0; e < 4; e++)
      if (wcol + e < a.cb) w[q] |= (uint32_t)p[wcol + e] << (8 * e);
  }
}

/* Rows 4h..4h+3 of the thread's 4 columns, one register a column (byte q
 * = row 4h+q). u8: a 4×4 byte transpose; 2-bit: the thread's byte of each
 * word gathered, then (x >> 2j) & 0x03030303 per genotype j. */
template <int EPB>
__device__ __forceinline__ void btx_columns(const uint32_t (&w)[8], int h, int g, uint32_t (&col)[4])
{
  const uint32_t r0 = w[4 * h], r1 = w[4 * h + 1], r2 = w[4 * h + 2], r3 = w[4 * h + 3];
  if constexpr (EPB == 1) {
    uint32_t t0 = __byte_perm(r0, r1, 0x5140), t1 = __byte_perm(r2, r3, 0x5140);
    uint32_t t2 = __byte_perm(r0, r1, 0x7362), t3 = __byte_perm(r2, r3, 0x7362);
    col[0] = __byte_perm(t0, t1, 0x5410), col[1] = __byte_perm(t0, t1, 0x7632);
    col[2] = __byte_perm(t2, t3, 0x5410), col[3] = __byte_perm(t2, t3, 0x7632);
  } else {
    uint32_t b = g & 3, sel = b | (b + 4) << 4;
    uint32_t x = __byte_perm(__byte_perm(r0, r1, sel), __byte_perm(r2, r3, sel), 0x5410);
#pragma unroll
    for (int j = 0; j < 4; j++) col[j] = (x >> (2 * j)) & 0x03030303u;
  }
}

template <int EPB, int NT, int DG>
__device__ __forceinline__ void btx_step(const uint32_t (&w)[8], const char *buf, int ks, int g, int t,
                                         int (&acc)[2][NT][DG][4], int mode, uint32_t miss4)
{
  typedef btx_cfg<EPB, NT, DG> C;
  uint32_t lo[4], hi[4];  /* columns 4g..4g+3: rows 8t..8t+3 and 8t+4..8t+7 */
  btx_columns<EPB>(w, 0, g, lo);
  btx_columns<EPB>(w, 1, g, hi);
#pragma unroll
  for (int q = 0; q < 4; q++) lo[q] = geno_mode(lo[q], mode, miss4), hi[q] = geno_mode(hi[q], mode, miss4);
  /* tile i: MMA row g = column 4g+2i, row g+8 = column 4g+2i+1 */
  const uint32_t A[2][4] = {{lo[0], lo[1], hi[0], hi[1]}, {lo[2], lo[3], hi[2], hi[3]}};
#pragma unroll
  for (int jn = 0; jn < NT; jn++)
#pragma unroll
    for (int d = 0; d < DG; d++) {
      const uint2 b = *(const uint2 *)(buf + (d * C::NP + 8 * jn + g) * C::ROWB + 32 * ks + 8 * t);
#pragma unroll
      for (int i = 0; i < 2; i++) imma16832(acc[i][jn][d], A[i], b.x, b.y);
    }
}

/* D's (row g or g+8 of tile i, column 2t+e1 of n-tile jn) is out[8jn+2t+e1]
 * [col0 + 4g + 2i + h]: the four (i, h) of one (jn, e1) are 4 adjacent
 * columns. */
template <class OutT, int NT, int DG>
__device__ __forceinline__ void btx_store(const btx_args &a, const int (&acc)[2][NT][DG][4], int64_t nbase,
                                          int64_t col0, int g, int t)
{
  OutT *dst = (OutT *)a.out + (int64_t)blockIdx.y * a.m * a.c;
  const int64_t c = col0 + 4 * g;
#pragma unroll
  for (int jn = 0; jn < NT; jn++)
#pragma unroll
    for (int e1 = 0; e1 < 2; e1++) {
      int64_t m = nbase + 8 * jn + 2 * t + e1;
      if (m >= a.m) continue;
      int e = a.exps[m];
      OutT v[4];
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int i = q / 2, k = 2 * (q % 2) + e1;
        int sums[DG];
#pragma unroll
        for (int d = 0; d < DG; d++) sums[d] = acc[i][jn][d][k];
        v[q] = digits_value<OutT, DG>(sums, e);
      }
      OutT *p = dst + m * a.c + c;
      if (c + 4 <= a.c && a.c % 4 == 0) {
        if constexpr (sizeof(OutT) == 4) {
          *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
        } else {
          ((double2 *)p)[0] = make_double2(v[0], v[1]);
          ((double2 *)p)[1] = make_double2(v[2], v[3]);
        }
      } else {
        for (int q = 0; q < 4; q++)
          if (c + q < a.c) p[q] = v[q];
      }
    }
}

/* Two blocks an SM where their registers allow (8 warps each are few for
 * the ring's latency); the widest tiles, and f64's four digits of three
 * tiles, need more than 128 registers a thread. */
template <class OutT, int NT>
struct btx_blocks {
  static constexpr int N = NT * geno_digits<OutT>::D > 9 ? 1 : 2;
};

template <class OutT, int EPB, int NT, bool ASYNC>
__global__ void __launch_bounds__(256, btx_blocks<OutT, NT>::N) btx_kernel(btx_args a)
{
  constexpr int DG = geno_digits<OutT>::D;
  typedef btx_cfg<EPB, NT, DG> C;
  extern __shared__ uint4 smem4[];
  char *smem = (char *)smem4;
  const uint32_t *ring = (const uint32_t *)(smem + 2 * C::BUF);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t col0 = (int64_t)blockIdx.x * BTX_COLS + warp * 32, nbase = (int64_t)blockIdx.z * C::NP;
  const int64_t wcol = EPB == 1 ? col0 + 4 * g : (col0 / 4 + g) & ~(int64_t)3;
  const int ch0 = blockIdx.y * a.chunks_per_split, ch1 = min(ch0 + a.chunks_per_split, a.chunks);
  const int64_t s0 = (int64_t)ch0 * C::SPC, s_end = min((int64_t)ch1 * C::SPC, (a.r + 31) / 32);
  int acc[2][NT][DG][4] = {};
  for (int d = 0; d < C::D - 1; d++) btx_issue<EPB, NT, DG, ASYNC>(a, smem, s0 + d, s_end, ch0, ch1, nbase, t, wcol);
  for (int64_t s = s0; s < s_end; s++) {
    btx_issue<EPB, NT, DG, ASYNC>(a, smem, s + C::D - 1, s_end, ch0, ch1, nbase, t, wcol);
    cp_async_wait<C::D - 1>();
    const int ks = (int)(s % C::SPC);
    if (ks == 0) __syncthreads();  /* this chunk of B is in for everyone; the other buffer is free */
    uint32_t w[8];
    if constexpr (ASYNC) {
#pragma unroll
      for (int q = 0; q < 8; q++) w[q] = ring[(int)(s % C::D) * 8 * 256 + q * 256 + threadIdx.x];
    } else {
      btx_load_x(w, a, s, t, wcol);
    }
    btx_step<EPB, NT, DG>(w, smem + (int)((s / C::SPC - ch0) & 1) * C::BUF, ks, g, t, acc, a.mode, a.miss4);
  }
  btx_store<OutT, NT, DG>(a, acc, nbase, col0, g, t);
}

template <class OutT, int EPB, int NT, bool ASYNC>
static int btx_launch(const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  const int smem = btx_cfg<EPB, NT, geno_digits<OutT>::D>::SMEM;
  int rc = TSR_CUDA_CHECK(
      cudaFuncSetAttribute(btx_kernel<OutT, EPB, NT, ASYNC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err);
  if (rc != 0) return rc;
  btx_kernel<OutT, EPB, NT, ASYNC><<<grid, 256, smem, s>>>(a);
  return TSR_CUDA_LAUNCHED("btx_kernel", err);
}

template <class OutT, int EPB>
static int btx_by_nt(int nt, bool async, const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  switch (nt * 2 + async) {
  case 2: return btx_launch<OutT, EPB, 1, false>(a, grid, s, err);
  case 3: return btx_launch<OutT, EPB, 1, true>(a, grid, s, err);
  case 4: return btx_launch<OutT, EPB, 2, false>(a, grid, s, err);
  case 5: return btx_launch<OutT, EPB, 2, true>(a, grid, s, err);
  case 6: return btx_launch<OutT, EPB, 3, false>(a, grid, s, err);
  case 7: return btx_launch<OutT, EPB, 3, true>(a, grid, s, err);
  case 8: return btx_launch<OutT, EPB, 4, false>(a, grid, s, err);
  default: return btx_launch<OutT, EPB, 4, true>(a, grid, s, err);
  }
}

template <class OutT>
static int btx_dispatch(int epb, int nt, bool async, const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  return epb == 1 ? btx_by_nt<OutT, 1>(nt, async, a, grid, s, err) : btx_by_nt<OutT, 4>(nt, async, a, grid, s, err);
}

int tsr_cuda_geno_btx(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                      tsr_dtype bdt, int64_t m, void *out, tsr_errbuf *err)
{
  return tsr_cuda_geno_btx_mode(gpu, x, epb, r, c, b, bdt, m, out, GENO_RAW, 0, err);
}

int tsr_cuda_geno_btx_mode(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                           tsr_dtype bdt, int64_t m, void *out, int mode, int missing, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  const size_t es = bdt == TSR_F64 ? 8 : 4;
  if (c == 0 || m == 0) return 0;
  if (r == 0) return TSR_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(m * c) * es, s), err);
  int64_t cb = epb == 1 ? c : tsr_packed_len(c), chunks = (r + RC - 1) / RC, groups = (m + 31) / 32;
  int nt = groups > 1 ? 4 : (int)((m + 7) / 8), per_split = 1;
  int64_t col_blocks = (c + BTX_COLS - 1) / BTX_COLS;
  int64_t max_chunks = epb == 1 ? btx_cfg<1, 1>::MAX_CHUNKS : btx_cfg<4, 1>::MAX_CHUNKS;
  int splits = tsr_geno_split_count(col_blocks, chunks, 1056, max_chunks, &per_split);
  tsr_scratch scr(gpu);
  bdigits bs;
  void *part = nullptr;
  int rc = tsr_geno_digits(b, bdt, r, m, 8 * nt * groups, chunks * RC, false, scr, s, &bs, err);
  if (rc == 0 && splits > 1) rc = scr.get((size_t)(splits * m * c) * es, &part, "btx's partial products", err);
  if (rc != 0) return rc;
  btx_args a = {x, r, c, cb, bs.digits, bs.cols_tot, bs.kp, bs.exps, m, splits > 1 ? part : out, (int)chunks,
                per_split, mode, 0x01010101u * (uint32_t)(missing & 255)};
  dim3 grid((unsigned)col_blocks, (unsigned)splits, (unsigned)groups);
  bool async = tsr_geno_load_width(x, cb, 4) == 4;  /* cp.async needs 4-byte aligned rows */
  rc = bdt == TSR_F64 ? btx_dispatch<double>(epb, nt, async, a, grid, s, err)
                      : btx_dispatch<float>(epb, nt, async, a, grid, s, err);
  return rc != 0 || splits == 1 ? rc : tsr_geno_sum_splits(part, splits, m * c, out, bdt, s, err);
}
