/* kernels/cuda/geno_btx.cu — the fused product out [m, c] = Bᵀ · X of a
 * thin f32 or f64 B [r, m] and a u8 (EPB 1) or 2-bit packed (EPB 4)
 * genotype matrix X [r, c] (genotype.cuh has the numerics).
 *
 * The MMA's M is B's columns (up to 32 per pass: two m16 tiles; more are
 * more passes, grid z), N is X's columns, K is X's rows. A block of 4 warps
 * owns 256 columns of X, a warp 64 (8 n8 tiles); the k loop goes in steps
 * of 16 rows, thread (g, t) taking rows 4t..4t+3 of the warp's 8 columns
 * 8g..8g+7 (u8: 8 bytes a row; 2-bit: the aligned word holding its 2
 * bytes). Those pieces stream through a ring of D steps per thread in
 * shared memory (cp.async; each thread reads back only its own copies),
 * D-1 steps in flight; PRMT interleaves row pairs into the B fragments.
 * Bᵀ's f16 parts come through shared memory in chunks of RC rows (double
 * buffered, copied in the same groups as the X steps) as the A fragments.
 * Rows are split across blocks when the columns alone do not fill the GPU;
 * the partial products are summed in split order afterwards. */
#include "genotype.cuh"

#define BTX_COLS 256        /* columns of X per block: 4 warps × 64 */
#define RC 256              /* rows of X per shared chunk of Bᵀ */
#define BT_ROW_H (RC + 16)  /* halves per shared row: 32 pad bytes spread the banks */

template <int EPB, int MTB>
struct btx_cfg {
  static constexpr int MP = 16 * MTB;              /* B's columns per pass */
  static constexpr int BUF = 2 * MP * BT_ROW_H;    /* halves per chunk buffer (hi and lo) */
  static constexpr int SPC = RC / 16;              /* steps per chunk */
  static constexpr int PIECE = EPB == 1 ? 8 : 4;   /* ring bytes per row and step */
  static constexpr int D = 8;                      /* ring depth: D - 1 <= SPC for two buffers */
  static constexpr int SMEM = 2 * BUF * 2 + D * 4 * 128 * PIECE;
};

struct btx_args {
  const uint8_t *x;
  int64_t r, c, cb;      /* X is r × c, rows of cb bytes */
  const __half *bparts;  /* Bᵀ's parts [2][cols_tot][kp] halves */
  int64_t cols_tot, kp;
  const int *exps;
  int64_t m;             /* B's columns = the result's rows */
  float *out;            /* [splits][m][c] */
  int chunks, chunks_per_split;
};

/* Row q (0..3) of step s for thread t, clamped: B's rows past r are 0. */
__device__ __forceinline__ const uint8_t *btx_row(const btx_args &a, int64_t s, int t, int q)
{
  int64_t row = s * 16 + 4 * t + q;
  return a.x + (row < a.r ? row : a.r - 1) * a.cb;
}

/* This thread's pieces of step s into its ring slot (zero past the row). */
template <int EPB, int MTB, int VEC>
__device__ __forceinline__ void btx_copy_x(const btx_args &a, char *ring, int64_t s, int t, int64_t bcol)
{
  typedef btx_cfg<EPB, MTB> C;
  char *slot = ring + ((int)(s % C::D) * 4 * 128 + threadIdx.x) * C::PIECE;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const uint8_t *row = btx_row(a, s, t, q);
    char *dst = slot + q * 128 * C::PIECE;
    if constexpr (EPB == 4) {  /* the aligned word around the thread's 2 bytes */
      int64_t w = bcol & ~(int64_t)3, n = a.cb - w;
      cp_async<4>(dst, row + (n > 0 ? w : 0), n <= 0 ? 0 : n > 4 ? 4 : (int)n);
    } else {
#pragma unroll
      for (int k = 0; k < 8 / VEC; k++) {
        bool in = bcol + k * VEC < a.cb;
        cp_async<VEC>(dst + k * VEC, row + (in ? bcol + k * VEC : 0), in ? VEC : 0);
      }
    }
  }
}

template <int EPB, int MTB>
__device__ __forceinline__ void btx_copy_b(const btx_args &a, int64_t ch, int64_t mbase, __half *buf)
{
  typedef btx_cfg<EPB, MTB> C;
  for (int u = threadIdx.x; u < 2 * C::MP * (RC / 8); u += 128) {
    int pr = u / (RC / 8), un = u % (RC / 8), part = pr / C::MP, mrow = pr - part * C::MP;
    const __half *src = a.bparts + (part * a.cols_tot + mbase + mrow) * a.kp + ch * RC + 8 * un;
    cp_async<16>(buf + pr * BT_ROW_H + 8 * un, src, 16);
  }
}

/* The group of step s: its X pieces, and Bᵀ's chunk when s starts one. */
template <int EPB, int MTB, int VEC>
__device__ __forceinline__ void btx_issue(const btx_args &a, __half *smem, int64_t s, int64_t s_end, int ch0, int ch1,
                                          int64_t mbase, int t, int64_t bcol)
{
  typedef btx_cfg<EPB, MTB> C;
  if (s < s_end) {
    int64_t ch = s / C::SPC;
    if (s % C::SPC == 0 && ch < ch1) btx_copy_b<EPB, MTB>(a, ch, mbase, smem + (int)((ch - ch0) & 1) * C::BUF);
    if constexpr (VEC >= 4) btx_copy_x<EPB, MTB, VEC>(a, (char *)(smem + 2 * C::BUF), s, t, bcol);
  }
  cp_async_commit();
}

/* This thread's 4 rows of step s, synchronously (rows not aligned for
 * cp.async): u8 8 bytes, 2-bit 2 bytes in the low half; zero past cb. */
template <int EPB>
__device__ __forceinline__ void btx_load_x(uint2 (&v)[4], const btx_args &a, int64_t s, int t, int64_t bcol)
{
  constexpr int BYTES = EPB == 1 ? 8 : 2;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const uint8_t *p = btx_row(a, s, t, q) + bcol;
    uint32_t w[2] = {0, 0};
    for (int e = 0; e < BYTES; e++)
      if (bcol + e < a.cb) w[e / 4] |= (uint32_t)p[e] << (8 * (e % 4));
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

/* One step (16 rows of X) of the warp's 64 columns. */
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
__device__ __forceinline__ void btx_store(const btx_args &a, const float (&tot)[MTB][8][4], int64_t mbase,
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
        for (int jn = 0; jn < 8; jn++) v[jn] = ldexpf(tot[i][jn][2 * h + e1], -e);
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
__global__ void __launch_bounds__(128, 2) btx_kernel(btx_args a)
{
  typedef btx_cfg<EPB, MTB> C;
  extern __shared__ uint4 smem4[];
  __half *smem = (__half *)smem4;
  const char *ring = (const char *)(smem + 2 * C::BUF);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t col0 = (int64_t)blockIdx.x * BTX_COLS + warp * 64, mbase = (int64_t)blockIdx.z * C::MP;
  const int64_t bcol = EPB == 1 ? col0 + 8 * g : col0 / 4 + 2 * g;
  const int ch0 = blockIdx.y * a.chunks_per_split, ch1 = min(ch0 + a.chunks_per_split, a.chunks);
  const int64_t s0 = (int64_t)ch0 * C::SPC, s_end = min((int64_t)ch1 * C::SPC, (a.r + 15) / 16);
  float acc[MTB][8][4] = {}, tot[MTB][8][4] = {};
  for (int d = 0; d < C::D - 1; d++) btx_issue<EPB, MTB, VEC>(a, smem, s0 + d, s_end, ch0, ch1, mbase, t, bcol);
  for (int64_t s = s0; s < s_end; s++) {
    btx_issue<EPB, MTB, VEC>(a, smem, s + C::D - 1, s_end, ch0, ch1, mbase, t, bcol);
    cp_async_wait<C::D - 1>();
    const int ks = (int)(s % C::SPC);
    if (ks == 0) __syncthreads();  /* this chunk of Bᵀ is in for everyone; the other buffer is free */
    uint2 cur[4];
    if constexpr (VEC >= 4) {
      const char *slot = ring + ((int)(s % C::D) * 4 * 128 + threadIdx.x) * C::PIECE;
#pragma unroll
      for (int q = 0; q < 4; q++) {
        if constexpr (EPB == 1) {
          cur[q] = *(const uint2 *)(slot + q * 128 * C::PIECE);
        } else {
          uint32_t w = *(const uint32_t *)(slot + q * 128 * C::PIECE);
          cur[q] = make_uint2((bcol & 2) ? w >> 16 : w & 0xffffu, 0);
        }
      }
    } else {
      btx_load_x<EPB>(cur, a, s, t, bcol);
    }
    uint32_t bf[8][2];
    btx_frags<EPB>(cur, bf);
    btx_step<MTB>(bf, smem + (int)((s / C::SPC - ch0) & 1) * C::BUF, ks, g, t, acc);
    if (ks == C::SPC - 1 || s + 1 == s_end)
#pragma unroll
      for (int i = 0; i < MTB; i++)
#pragma unroll
        for (int jn = 0; jn < 8; jn++)
#pragma unroll
          for (int e = 0; e < 4; e++) tot[i][jn][e] += acc[i][jn][e], acc[i][jn][e] = 0.0f;
  }
  btx_store<MTB>(a, tot, mbase, col0, g, t);
}

template <int EPB, int MTB, int VEC>
static int btx_launch(const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  const int smem = btx_cfg<EPB, MTB>::SMEM;
  int rc = TSR_CUDA_CHECK(
      cudaFuncSetAttribute(btx_kernel<EPB, MTB, VEC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), err);
  if (rc != 0) return rc;
  btx_kernel<EPB, MTB, VEC><<<grid, 128, smem, s>>>(a);
  return TSR_CUDA_LAUNCHED("btx_kernel", err);
}

/* Loads: u8 rows in 8- or 4-byte copies, 2-bit rows in aligned words;
 * anything else byte by byte (VEC 1). */
template <int EPB, int MTB>
static int btx_by_vec(int vec, const btx_args &a, dim3 grid, cudaStream_t s, tsr_errbuf *err)
{
  if (vec >= 8 && EPB == 1) return btx_launch<EPB, MTB, 8>(a, grid, s, err);
  if (vec >= 4) return btx_launch<EPB, MTB, 4>(a, grid, s, err);
  return btx_launch<EPB, MTB, 1>(a, grid, s, err);
}

int tsr_cuda_geno_btx(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                      tsr_dtype bdt, int64_t m, float *out, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  if (c == 0 || m == 0) return 0;
  if (r == 0) return TSR_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(m * c) * sizeof(float), s), err);
  int64_t cb = epb == 1 ? c : tsr_packed_len(c), chunks = (r + RC - 1) / RC, groups = (m + 31) / 32;
  int mtb = groups > 1 ? 2 : (int)((m + 15) / 16), per_split = 1;
  int64_t col_blocks = (c + BTX_COLS - 1) / BTX_COLS;
  int splits = tsr_geno_split_count(col_blocks, chunks, 1056, &per_split);
  tsr_scratch scr(gpu);
  bsplit bs;
  float *part = nullptr;
  int rc = tsr_geno_split_b(b, bdt, r, m, 16 * mtb * groups, chunks * RC, false, scr, s, &bs, err);
  if (rc == 0 && splits > 1) rc = scr.get(splits * m * c, &part, "btx's partial products", err);
  if (rc != 0) return rc;
  btx_args a = {x, r, c, cb, bs.parts, bs.cols_tot, bs.kp, bs.exps, m, splits > 1 ? part : out, (int)chunks,
                per_split};
  dim3 grid((unsigned)col_blocks, (unsigned)splits, (unsigned)groups);
  int vec = tsr_geno_load_width(x, cb, epb == 1 ? 8 : 4);
  if (epb == 1) rc = mtb == 1 ? btx_by_vec<1, 1>(vec, a, grid, s, err) : btx_by_vec<1, 2>(vec, a, grid, s, err);
  else rc = mtb == 1 ? btx_by_vec<4, 1>(vec, a, grid, s, err) : btx_by_vec<4, 2>(vec, a, grid, s, err);
  return rc != 0 || splits == 1 ? rc : tsr_geno_sum_splits(part, splits, m * c, out, s, err);
}
