/* kernels/cuda/knn_tc.cu — the knn_tile of f32 rows on tensor cores, for
 * k ≤ 25 and d ≤ 62 (knn_tc_fits); knn.cu takes the rest.
 *
 * Why: the cuBLAS path writes every distance of the tile to memory and
 * reads it back to select, and SGEMM runs on the FP32 units; at a million
 * rows that is seconds. Here the distances never leave registers:
 *   1. pack: each row becomes TF32 values laid out for MMA, the key folded
 *      into the product — a = [−2x, 1, 1, 0…], b = [y, hi, lo, 0…] with
 *      hi + lo = |y|² (two TF32 terms), so a·b = |y|² − 2x·y, the key the
 *      CPU ranks by (cosine: the normalized rows and |y|² = 1). Columns
 *      past the tile's end get hi = +inf: they never enter a list;
 *   2. sweep: a block of 4 warps owns TC_ROWS rows (32 a warp, their A
 *      fragments in registers for the whole sweep) and streams its split
 *      of the columns through shared memory, TC_COLS at a time
 *      (cp.async, double-buffered, one barrier a stage). Each warp
 *      computes 32 × 32 keys at a time with mma.sync m16n8k8 TF32 (B
 *      fragments by ldmatrix, each used by both m-tiles), compares their
 *      per-row minima with its rows' current 32nd best key, and inserts
 *      the rare hits into the rows' 32-entry lists in shared memory (a
 *      lane a slot: one ballot and one shuffle). The row's own column is
 *      not skipped (it is the smallest key and costs one slot; the
 *      re-rank drops it). Two splits of the columns give the GPU two
 *      blocks per row block; the re-rank merges their lists;
 *   3. re-rank (knn.cu's knn_finish): the candidates' exact f64 distances
 *      from the original rows, ranked by (distance, index) as on the CPU,
 *      and a certificate: a TF32 key is within E of the exact one
 *      (knn_certified states E), so when the m-th exact key lies more
 *      than E below each full list's last key, no column left out can
 *      be among the best m, and the row is exact;
 *   4. rows without the certificate (near-ties far from the origin, where
 *      TF32 cannot separate): the same kernel sweeps them again with a
 *      fixed threshold, their band (the candidates' m-th exact key + E,
 *      which bounds every column that may be among the best m), and
 *      collects the columns below it; knn_exact_rows ranks those by exact
 *      f64 distance (all columns when a band overflows BAND_CAP).
 * So every row is the exact best m by (f64 distance, index) — the CPU
 * op's bytes whenever the CPU's own f32 candidates hold the true best m. */
#include <string.h>

#include "knn.cuh"

#define TC_ROWS 128   /* rows of a sweep block: 4 warps of 32 */
#define TC_COLS 64    /* columns of a pipeline stage: 3 blocks fit a multiprocessor */
#define TC_LIST 32    /* a row's list in a split: a slot a lane */
#define TC_MAX_KS 8   /* k-steps of 8: d + 2 ≤ 64 */

/* ---------- 1. pack ---------- */

static __device__ uint32_t to_tf32(float f)
{
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}

/* Rows of a (n real, n_pad in all) into dp-wide TF32 rows, a warp a row
 * (coalesced reads and writes; dp ≤ 64). Row side (cols false): [−2x, 1,
 * 1, 0…]. Column side: [y, hi, lo, 0…] with hi + lo = |y|² as f32 (1 for
 * cosine), the pad rows [0…, +inf, 0…], and the largest |y| into *ymax
 * (as bits: positive floats order like their bits). |y|² only shapes the
 * approximate keys, whose error bound covers its rounding. */
__global__ void tc_pack(const float *a, int64_t n, int64_t n_pad, int64_t d, int dp, bool cols, bool cosine,
                        uint32_t *packed, unsigned *ymax)
{
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < n_pad; r += warps) {
    uint32_t *o = packed + r * dp;
    float v[2] = {0.0f, 0.0f};
    double s = 0;
    for (int h = 0; h < 2; h++) {
      int64_t c = lane + 32 * h;
      if (r < n && c < d) v[h] = a[r * d + c], s += (double)v[h] * (double)v[h];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(FULL, s, off);
    float yy = cosine ? 1.0f : (float)s;
    uint32_t hi = to_tf32(yy);
    for (int h = 0; h < 2; h++) {
      int64_t c = lane + 32 * h;
      if (c >= dp) continue;
      uint32_t word = 0;
      if (r >= n) word = cols && c == d ? __float_as_uint(INFINITY) : 0;
      else if (c < d) word = to_tf32(cols ? v[h] : -2.0f * v[h]);
      else if (c == d) word = cols ? hi : __float_as_uint(1.0f);
      else if (c == d + 1) word = cols ? to_tf32(yy - __uint_as_float(hi)) : __float_as_uint(1.0f);
      o[c] = word;
    }
    if (cols && r < n && lane == 0) atomicMax(ymax, __float_as_uint((float)sqrt(s)));
  }
}

/* ---------- 2. sweep ---------- */

static __device__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ void cp_async16(void *smem, const void *gmem)
{
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}

/* B fragments of one n-tile for k-steps ks and ks + 1 (x4) or ks alone
 * (x2): a tf32 8 × 4 block is an 8 × 8 b16 matrix to ldmatrix, which hands
 * lane 4g + t word t of row g — the fragment's (n = g, k = t). Lane L
 * addresses row L % 8 of matrix L / 8: (ks, k 0-3), (ks, k 4-7), (ks + 1,
 * k 0-3), (ks + 1, k 4-7). */
static __device__ void ldsm_x4(uint32_t (&r)[4], const uint32_t *p)
{
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
static __device__ void ldsm_x2(uint32_t (&r)[4], const uint32_t *p)
{
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

/* Inserts (v, col), which beats the list's last key, into a row's sorted
 * 32-entry list (lane = slot; after equal keys); returns the new last key
 * to every lane. Not inlined: the hit loops call it from 32 unrolled
 * places, and one copy keeps the sweep's code in the instruction cache. */
static __device__ __noinline__ float list_insert(float *key, int *idx, float v, int col, int lane)
{
  float k = key[lane];
  int i = idx[lane];
  int p = __popc(__ballot_sync(FULL, k <= v));
  float uk = __shfl_up_sync(FULL, k, 1);
  int ui = __shfl_up_sync(FULL, i, 1);
  float nk = lane == p ? v : lane > p ? uk : k;
  int ni = lane == p ? col : lane > p ? ui : i;
  __syncwarp();
  key[lane] = nk, idx[lane] = ni;
  __syncwarp();
  return __shfl_sync(FULL, nk, 31);
}

/* A warp's tile: 32 rows (two m-tiles, their A fragments in registers for
 * the whole sweep) by 32 columns (four n-tiles) a step. Two m-tiles use
 * each B fragment twice: B fragments from shared memory, not the tensor
 * cores, bound this kernel (one m-tile ran at half the speed). */
#define TC_MT 2
#define TC_NT 4
#define TC_WARP_ROWS (16 * TC_MT)
#define TC_WARPS (TC_ROWS / TC_WARP_ROWS)

/* The smallest of a lane's keys in row g + 8h of m-tile i, as a tree (a
 * chain of dependent compares would stall). */
static __device__ float row_min(const float (&acc)[TC_NT][TC_MT][4], int i, int h)
{
  float m[TC_NT];
#pragma unroll
  for (int j = 0; j < TC_NT; j++) m[j] = fminf(acc[j][i][2 * h], acc[j][i][2 * h + 1]);
#pragma unroll
  for (int w = TC_NT / 2; w >= 1; w >>= 1)
#pragma unroll
    for (int j = 0; j < w; j++) m[j] = fminf(m[j], m[j + w]);
  return m[0];
}

/* One warp's keys: its 32 rows against 32 columns of the stage (bt: their
 * packed rows, stride st). acc[j][i] holds (row 16i + g, col 8j + 2t),
 * (16i + g, +1), (16i + g + 8, 8j + 2t), (16i + g + 8, +1) for lane =
 * 4g + t. The B fragments of a k-step pair are loaded for all n-tiles
 * before their MMAs, so no MMA waits on the one before it. */
template <int KS>
static __device__ void tile32(const uint32_t (&a)[TC_MT][KS][4], const uint32_t *bt, int st,
                              float (&acc)[TC_NT][TC_MT][4], int lane)
{
#pragma unroll
  for (int j = 0; j < TC_NT; j++)
#pragma unroll
    for (int i = 0; i < TC_MT; i++) acc[j][i][0] = acc[j][i][1] = acc[j][i][2] = acc[j][i][3] = 0.0f;
  const uint32_t *rowp = bt + (lane & 7) * st + 4 * ((lane >> 3) & 1) + 8 * (lane >> 4);
#pragma unroll
  for (int ks = 0; ks < KS; ks += 2) {
    uint32_t b[TC_NT][4];
#pragma unroll
    for (int j = 0; j < TC_NT; j++) {
      if (ks + 1 < KS) ldsm_x4(b[j], rowp + 8 * j * st + 8 * ks);
      else ldsm_x2(b[j], rowp + 8 * j * st + 8 * ks);
    }
#pragma unroll
    for (int j = 0; j < TC_NT; j++)
#pragma unroll
      for (int i = 0; i < TC_MT; i++) mma_tf32(acc[j][i], a[i][ks], b[j][0], b[j][1]);
    if (ks + 1 < KS)
#pragma unroll
      for (int j = 0; j < TC_NT; j++)
#pragma unroll
        for (int i = 0; i < TC_MT; i++) mma_tf32(acc[j][i], a[i][ks + 1], b[j][2], b[j][3]);
  }
}

/* Whether any of the warp's keys is below its row's threshold. */
static __device__ bool any_below(const float (&acc)[TC_NT][TC_MT][4], const float (&thr)[TC_MT][2])
{
  bool any = false;
#pragma unroll
  for (int i = 0; i < TC_MT; i++) any = any || row_min(acc, i, 0) < thr[i][0] || row_min(acc, i, 1) < thr[i][1];
  return __any_sync(FULL, any);
}

/* The sweep's step: tile32's keys against the warp's lists (lk/li; col:
 * the first column's tile index; thr: the lane's rows' last keys, kept
 * current). */
template <int KS>
static __device__ void sweep32(const uint32_t (&a)[TC_MT][KS][4], const uint32_t *bt, int st, int col, float *lk,
                               int *li, float (&thr)[TC_MT][2], int lane)
{
  int g = lane >> 2;
  float acc[TC_NT][TC_MT][4];
  tile32<KS>(a, bt, st, acc, lane);
  if (!any_below(acc, thr)) return;
#pragma unroll
  for (int j = 0; j < TC_NT; j++)
#pragma unroll
    for (int i = 0; i < TC_MT; i++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        unsigned hits = __ballot_sync(FULL, acc[j][i][e] < thr[i][e >> 1]);
        while (hits != 0) {
          int src = __ffs(hits) - 1;
          hits &= hits - 1;
          float v = __shfl_sync(FULL, acc[j][i][e], src);
          int row = 16 * i + (src >> 2) + 8 * (e >> 1);
          if (!(v < lk[row * TC_LIST + TC_LIST - 1])) continue;  /* the list moved meanwhile */
          float tail =
              list_insert(lk + row * TC_LIST, li + row * TC_LIST, v, col + 8 * j + 2 * (src & 3) + (e & 1), lane);
          if (g == (src >> 2)) thr[i][e >> 1] = tail;
        }
      }
}

/* What a sweep reads and writes. Lists (step 2): the rows [0, ri) and
 * their lists skey/sidx[row][kall], a split's 32 at 32·split. Band
 * (step 4): the *nrows flagged rows rows[f], each collecting into
 * bcol[f][BAND_CAP] (count bcnt[f]) every column whose key is below
 * band[f]. */
struct sweep_args {
  const uint32_t *xa, *ya;
  int64_t ri, cps, rj_pad;
  float *skey;
  int *sidx, kall;
  const int *nrows, *rows;
  const float *band;
  int *bcnt, *bcol;
};

#define BAND_CAP 512  /* columns a flagged row collects; more: knn_exact_rows scans them all */

/* Band step: every key below its row's band appended to the row's
 * columns (f0: the warp's first flagged row). */
static __device__ void band32(const float (&acc)[TC_NT][TC_MT][4], const float (&thr)[TC_MT][2], int64_t f0, int col,
                              const sweep_args &w, int lane)
{
  if (!any_below(acc, thr)) return;
  int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < TC_NT; j++)
#pragma unroll
    for (int i = 0; i < TC_MT; i++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (acc[j][i][e] < thr[i][e >> 1]) {
          int64_t f = f0 + 16 * i + g + 8 * (e >> 1);
          int p = atomicAdd(w.bcnt + f, 1);
          if (p < BAND_CAP) w.bcol[f * BAND_CAP + p] = col + 8 * j + 2 * t + (e & 1);
        }
}

/* The A fragments of rows r(16i + g) and r(16i + g + 8), i < TC_MT. */
template <int KS, class R>
static __device__ void load_a(const uint32_t *xa, R r, int g, int t, uint32_t (&a)[TC_MT][KS][4])
{
  constexpr int DP = 8 * KS;
#pragma unroll
  for (int i = 0; i < TC_MT; i++) {
    const uint32_t *lo = xa + r(16 * i + g) * DP, *hi = xa + r(16 * i + g + 8) * DP;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
      a[i][ks][0] = lo[8 * ks + t], a[i][ks][1] = hi[8 * ks + t];
      a[i][ks][2] = lo[8 * ks + t + 4], a[i][ks][3] = hi[8 * ks + t + 4];
    }
  }
}

/* Block (x: TC_ROWS rows, y: a split of cps columns), lists or band.
 * Double buffering with one barrier a stage: after it, every warp is done
 * with the stage the next load overwrites. */
template <int KS, bool BAND>
__global__ void __launch_bounds__(32 * TC_WARPS, 3) tc_sweep(sweep_args w)
{
  constexpr int DP = 8 * KS, ST = DP + 4;  /* stride ≡ 4 mod 8 words: fragment loads hit distinct banks */
  extern __shared__ __align__(16) unsigned char smem[];
  uint32_t *bs = (uint32_t *)smem;
  float *lk = (float *)(bs + 2 * TC_COLS * ST);
  int *li = (int *)(lk + TC_ROWS * TC_LIST);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int64_t row0 = (int64_t)blockIdx.x * TC_ROWS + TC_WARP_ROWS * warp, c0 = (int64_t)blockIdx.y * w.cps;
  int64_t c1 = c0 + w.cps < w.rj_pad ? c0 + w.cps : w.rj_pad;
  uint32_t a[TC_MT][KS][4];
  float thr[TC_MT][2];
  if (BAND) {
    int64_t n = *w.nrows;
    if ((int64_t)blockIdx.x * TC_ROWS >= n) return;  /* block-uniform, before any barrier */
    load_a<KS>(w.xa, [&](int r) { return (int64_t)w.rows[row0 + r < n ? row0 + r : n - 1]; }, g, t, a);
#pragma unroll
    for (int i = 0; i < TC_MT; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        int64_t f = row0 + 16 * i + g + 8 * h;
        thr[i][h] = f < n ? w.band[f] : -INFINITY;
      }
  } else {
    for (int i = threadIdx.x; i < TC_ROWS * TC_LIST; i += blockDim.x) lk[i] = INFINITY, li[i] = -1;
    load_a<KS>(w.xa, [&](int r) { return row0 + r; }, g, t, a);
#pragma unroll
    for (int i = 0; i < TC_MT; i++) thr[i][0] = thr[i][1] = INFINITY;
  }
  /* A stage: TC_COLS packed rows, spread over the threads in 16-byte pieces. */
  constexpr int PIECES = TC_COLS * DP / 4, PER_ROW = DP / 4;
  auto load = [&](int stage, int64_t c) {
    uint32_t *dst = bs + stage * TC_COLS * ST;
    const uint32_t *src = w.ya + c * DP;
#pragma unroll
    for (int q = threadIdx.x; q < PIECES; q += 32 * TC_WARPS)
      cp_async16(dst + (q / PER_ROW) * ST + 4 * (q % PER_ROW), src + 4 * q);
    asm volatile("cp.async.commit_group;");
  };
  if (c0 < c1) load(0, c0);
  float *wk = lk + TC_WARP_ROWS * warp * TC_LIST;
  int *wi = li + TC_WARP_ROWS * warp * TC_LIST;
  int stage = 0;
  for (int64_t c = c0; c < c1; c += TC_COLS, stage ^= 1) {
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();  /* this stage (and the first time the empty lists) for all; the other stage free */
    if (c + TC_COLS < c1) load(stage ^ 1, c + TC_COLS);
    const uint32_t *bt = bs + stage * TC_COLS * ST;
#pragma unroll 1
    for (int q = 0; q < TC_COLS; q += 8 * TC_NT) {
      if (BAND) {
        float acc[TC_NT][TC_MT][4];
        tile32<KS>(a, bt + q * ST, ST, acc, lane);
        band32(acc, thr, row0, (int)(c + q), w, lane);
      } else {
        sweep32<KS>(a, bt + q * ST, ST, (int)(c + q), wk, wi, thr, lane);
      }
    }
  }
  if (BAND) return;
  __syncwarp();
  for (int r = 0; r < TC_WARP_ROWS; r++) {
    int64_t row = row0 + r;
    if (row >= w.ri) break;
    w.skey[row * w.kall + TC_LIST * blockIdx.y + lane] = wk[r * TC_LIST + lane];
    w.sidx[row * w.kall + TC_LIST * blockIdx.y + lane] = wi[r * TC_LIST + lane];
  }
}

template <int KS, bool BAND>
static int sweep_launch(const sweep_args &w, int64_t rows, int splits, cudaStream_t s, tsr_errbuf *err)
{
  size_t smem = (size_t)2 * TC_COLS * (8 * KS + 4) * 4 + (BAND ? 0 : (size_t)TC_ROWS * TC_LIST * 8);
  int rc = TSR_CUDA_CHECK(
      cudaFuncSetAttribute(tc_sweep<KS, BAND>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), err);
  if (rc != 0) return rc;
  dim3 grid((unsigned)((rows + TC_ROWS - 1) / TC_ROWS), (unsigned)splits);
  tc_sweep<KS, BAND><<<grid, 32 * TC_WARPS, smem, s>>>(w);
  return TSR_CUDA_LAUNCHED("tc_sweep", err);
}

/* The sweep for ks k-steps; rows: the most rows it covers. */
template <bool BAND>
static int sweep(int ks, const sweep_args &w, int64_t rows, int splits, cudaStream_t s, tsr_errbuf *err)
{
  switch (ks) {
  case 1: return sweep_launch<1, BAND>(w, rows, splits, s, err);
  case 2: return sweep_launch<2, BAND>(w, rows, splits, s, err);
  case 3: return sweep_launch<3, BAND>(w, rows, splits, s, err);
  case 4: return sweep_launch<4, BAND>(w, rows, splits, s, err);
  case 5: return sweep_launch<5, BAND>(w, rows, splits, s, err);
  case 6: return sweep_launch<6, BAND>(w, rows, splits, s, err);
  case 7: return sweep_launch<7, BAND>(w, rows, splits, s, err);
  default: return sweep_launch<8, BAND>(w, rows, splits, s, err);
  }
}

/* ---------- 4. the rows without a certificate ---------- */

/* A warp per flagged row f (grid-stride over *nflag): the exact distance
 * of each column in its band (bcol[f], bcnt[f] of them), or of every
 * column when the band overflowed; the best m by (distance, global
 * index), written as knn_finish writes a row. */
template <class T>
__global__ void knn_exact_rows(const T *x, const T *y, int64_t d, int64_t rj, int m, int64_t col0, int64_t self0,
                               bool cosine, const int *nflag, const int *flagged, const int *bcnt, const int *bcol,
                               double *out)
{
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * WARPS;
  for (int64_t f = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5); f < *nflag; f += warps) {
    int64_t w = flagged[f], nb = bcnt[f];
    bool all = nb > BAND_CAP;
    int64_t n = all ? rj : nb;
    wlist<double, int64_t, 1, true> list;
    list.init();
    double tk;
    int64_t ti;
    list.tail(m, &tk, &ti);
    for (int64_t base = 0; base < n; base += 32) {
      int64_t s = base + lane;
      int64_t c = s >= n ? -1 : all ? s : bcol[f * BAND_CAP + s];
      bool valid = c >= 0 && c != self0 + w;
      double dv = valid ? exact_dist(x + w * d, y + c * d, d, cosine) : INFINITY;
      int64_t iv = valid ? col0 + c : -1;
      list.offer(dv, iv, valid, m, &tk, &ti, lane);
    }
    double *o = out + w * 2 * m;
    if (lane < m) {
      o[lane] = list.idx[0] >= 0 ? (double)list.idx[0] : -1.0;
      o[m + lane] = list.idx[0] >= 0 ? list.key[0] : INFINITY;
    }
  }
}

/* ---------- the path ---------- */

bool knn_tc_fits(const tile_task *t, tsr_dtype dt)
{
  return dt == TSR_F32 && t->m + KNN_MARGIN <= TC_LIST && t->d + 2 <= 8 * TC_MAX_KS && t->rj > TC_LIST;
}

struct tc_bufs {
  uint32_t *xa, *ya;
  float *skey, *band;
  int *sidx, *flag, *bcnt, *bcol;  /* flag: [0] the count, then the flagged rows */
  unsigned *ymax;
};

static int tc_alloc(const tile_task *t, int64_t ri_pad, int64_t rj_pad, int dp, int kall, tsr_scratch *sc,
                    cudaStream_t s, tc_bufs *bf, tsr_errbuf *err)
{
  int rc = sc->get(ri_pad * dp, &bf->xa, "knn_tile packed rows", err);
  if (rc == 0) rc = sc->get(rj_pad * dp, &bf->ya, "knn_tile packed columns", err);
  if (rc == 0) rc = sc->get(t->ri * kall, &bf->skey, "knn_tile candidate keys", err);
  if (rc == 0) rc = sc->get(t->ri * kall, &bf->sidx, "knn_tile candidate columns", err);
  if (rc == 0) rc = sc->get(t->ri + 1, &bf->flag, "knn_tile flagged rows", err);
  if (rc == 0) rc = sc->get(t->ri, &bf->band, "knn_tile flagged rows' bands", err);
  if (rc == 0) rc = sc->get(t->ri, &bf->bcnt, "knn_tile band counts", err);
  if (rc == 0) rc = sc->get(t->ri * BAND_CAP, &bf->bcol, "knn_tile band columns", err);
  if (rc == 0) rc = sc->get(1, &bf->ymax, "knn_tile largest column norm", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(bf->flag, 0, sizeof(int), s), err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(bf->bcnt, 0, (size_t)t->ri * sizeof(int), s), err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(bf->ymax, 0, sizeof(unsigned), s), err);
  return rc;
}

int knn_tc_run(const tile_task *t, const float *x, const float *y, const float *a, const float *b, double *out,
               const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  int ks = (int)((t->d + 2 + 7) / 8), dp = 8 * ks;
  int64_t ri_pad = (t->ri + TC_ROWS - 1) / TC_ROWS * TC_ROWS, rj_pad = (t->rj + TC_COLS - 1) / TC_COLS * TC_COLS;
  int splits = rj_pad >= 2 * TC_COLS ? 2 : 1;
  int64_t cps = (rj_pad / TC_COLS + splits - 1) / splits * TC_COLS;
  int kall = TC_LIST * splits;
  tsr_scratch sc(gpu);
  tc_bufs bf;
  int rc = tc_alloc(t, ri_pad, rj_pad, dp, kall, &sc, s, &bf, err);
  if (rc != 0) return rc;
  tc_pack<<<tsr_grid(ri_pad * 32, 256), 256, 0, s>>>(a, t->ri, ri_pad, t->d, dp, false, t->cosine, bf.xa, nullptr);
  tc_pack<<<tsr_grid(rj_pad * 32, 256), 256, 0, s>>>(b, t->rj, rj_pad, t->d, dp, true, t->cosine, bf.ya, bf.ymax);
  rc = TSR_CUDA_LAUNCHED("tc_pack", err);
  sweep_args w = {bf.xa, bf.ya, t->ri, cps, rj_pad, bf.skey, bf.sidx, kall, bf.flag, bf.flag + 1, bf.band, bf.bcnt,
                  bf.bcol};
  if (rc == 0) rc = sweep<false>(ks, w, t->ri, splits, s, err);
  knn_cert cert = {bf.skey, (const float *)bf.ymax, splits, ks, bf.flag, bf.flag + 1, bf.band};
  if (rc == 0) rc = knn_finish_launch(t, x, y, bf.sidx, kall, cert, out, s, err);
  /* step 4: the flagged rows' bands (blocks past the count return at once), then their exact best m */
  if (rc == 0) rc = sweep<true>(ks, w, t->ri, splits, s, err);
  if (rc != 0) return rc;
  unsigned blocks = (unsigned)((t->ri + WARPS - 1) / WARPS);
  knn_exact_rows<float><<<blocks < 1024 ? blocks : 1024, 32 * WARPS, 0, s>>>(
      x, y, t->d, t->rj, (int)t->m, t->col0, t->row0 - t->col0, t->cosine, bf.flag, bf.flag + 1, bf.bcnt, bf.bcol,
      out);
  return TSR_CUDA_LAUNCHED("knn_exact_rows", err);
}
