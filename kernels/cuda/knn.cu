/* kernels/cuda/knn.cu — knn_tile and knn_merge on the GPU (contract in
 * kernels/cpu/knn.c; docs/cluster.md).
 *
 * knn_tile of f32 rows with k ≤ 25 and d ≤ 62 takes the TF32 tensor-core
 * path (knn_tc.cu) after step 1; the rest (f64, larger k or d) goes, per
 * row block of at most SUB_ROWS rows and column sub-tiles of about
 * SUB_ELEMS keys (a few tens of MB, mostly L2-resident):
 *   1. a thread per row: |y|² as f32 keys (1 for cosine), for cosine a
 *      normalized copy of both blocks, and the first non-finite row;
 *   2. G = A·Bᵀ of the sub-tile by cuBLAS (SGEMM, or DGEMM for f64 whose
 *      keys are then rounded to f32, as on the CPU), into scratch;
 *   3. a warp per row scans its G row (key = |y|² − 2g, the self column
 *      skipped) against the row's K = m + MARGIN best so far: the list is
 *      spread over the lanes (slot lane + 32j), a 128-column stretch with
 *      nothing below the K-th key costs one vote, a hit is inserted by one
 *      ballot (its rank) and two shuffles (the shift). The lists live in
 *      scratch between sub-tiles;
 *   4. a warp per row recomputes the K kept candidates' distances exactly
 *      in f64 from the original rows (a lane per candidate, the CPU's
 *      summation order; --fmad=false), ranks them by (distance, global
 *      index) and writes the best m like the CPU op.
 * Step 4 makes the output the CPU op's bytes whenever both candidate sets
 * hold the true best m — what the margin is for. Only sub-tiles of the
 * distance matrix ever exist.
 * knn_merge: a warp per row keeps the best m (distance, index) pairs of all
 * tiles' rows in the same lane-spread list, ordered by distance then index
 * (indices across tiles are distinct, so this is the CPU's merge exactly),
 * up to MERGE_BATCH tiles a launch (their pointers are a kernel argument).
 * Lists of more than 64 entries (k > 57 for tiles, k > 65 for merges) are
 * left to the CPU variant (TSR_ENODEV). Non-finite inputs fail the tile
 * through the deferred check (kernels.h), naming the first bad row. */
#include <string.h>

#include "knn.cuh"

#define SUB_ROWS 8192   /* rows of a G sub-tile: a warp each, about one wave */
#define SUB_ELEMS ((int64_t)8 << 20)  /* keys of a G sub-tile (32 MB f32) */
#define MERGE_BATCH 64  /* tile pointers a merge launch takes */

/* ---------- knn_tile ---------- */

static int tile_parse(const tsr_params *p, const tsr_buf *in, tile_task *t, tsr_errbuf *err)
{
  const char *names[4] = {"k", "metric", "row0", "col0"};
  int64_t *vals[4] = {&t->k, &t->metric, &t->row0, &t->col0};
  for (int i = 0; i < 4; i++) {
    *vals[i] = 0;
    if (tsr_params_find(p, names[i]) == nullptr) continue;  /* infer() checked that k is there */
    int rc = tsr_params_get_int(p, names[i], vals[i], err);
    if (rc != 0) return tsr_k_param_fail("knn_tile", rc, err);
  }
  t->ri = in[0].meta.shape[0], t->rj = in[1].meta.shape[0], t->d = in[0].meta.shape[1];
  t->m = t->k > 1 ? t->k - 1 : 1;
  t->K = (int)(t->m + KNN_MARGIN);
  t->cosine = t->metric == 1;
  t->dtype = in[0].meta.dtype;
  return 0;
}

/* Row norms as f32 keys (1 for cosine; yn may be NULL), the normalized
 * copy for cosine (normed may be NULL), and the first non-finite row
 * (global: row0 + r) into *bad. Sums in the CPU's order. */
template <class T>
__global__ void knn_prepare(const T *b, int64_t rows, int64_t d, bool cosine, float *yn, T *normed,
                            unsigned long long *bad, int64_t row0)
{
  TSR_GRID_STRIDE(r, rows)
  {
    const T *x = b + r * d;
    double s = 0;
    bool finite = true;
    for (int64_t c = 0; c < d; c++) {
      double v = (double)x[c];
      finite = finite && isfinite(v);
      s += v * v;
    }
    if (!finite) atomicMin(bad, (unsigned long long)(row0 + r));
    if (yn != nullptr) yn[r] = cosine ? 1.0f : (float)s;
    if (normed == nullptr) continue;
    double inv = s > 0 ? 1.0 / sqrt(s) : 0.0;  /* a zero row stays zero */
    for (int64_t c = 0; c < d; c++) normed[r * d + c] = (T)((double)x[c] * inv);
  }
}

/* Lists of no candidates: (+inf, -1). */
__global__ void knn_empty_lists(float *key, int *idx, int64_t n)
{
  TSR_GRID_STRIDE(i, n) key[i] = INFINITY, idx[i] = -1;
}

/* Step 3 for nr rows of a sub-tile: g [nr, nc] (row stride nc), yn the
 * sub-tile's column keys, self0 the sub-tile column of row 0's own row
 * (row w's is self0 + w), c0 the sub-tile's first column in the block;
 * skey/sidx the rows' lists (K each; sidx: columns of the block). */
template <class G, int J>
__global__ void knn_select(const G *g, int nr, int nc, const float *yn, int64_t self0, int c0, float *skey, int *sidx,
                           int K)
{
  int lane = threadIdx.x & 31;
  int64_t w = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (w >= nr) return;  /* warp-uniform */
  wlist<float, int, J, false> list;
  list.load(skey + w * K, sidx + w * K, K, lane);
  float tk;
  int ti;
  list.tail(K, &tk, &ti);
  int64_t self = self0 + w;
  const G *row = g + w * (int64_t)nc;
  for (int base = 0; base < nc; base += 128) {
    float v[4];
    bool any = false;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      int c = base + 32 * q + lane;
      v[q] = c < nc && c != self ? yn[c] - 2.0f * (float)row[c] : INFINITY;
      any = any || v[q] < tk;
    }
    if (!__any_sync(FULL, any)) continue;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      unsigned hits = __ballot_sync(FULL, v[q] < tk);
      while (hits != 0) {  /* in lane order: increasing columns */
        int b = __ffs(hits) - 1;
        hits &= hits - 1;
        float vb = __shfl_sync(FULL, v[q], b);
        if (!(vb < tk)) continue;  /* the threshold fell meanwhile */
        list.insert(vb, c0 + base + 32 * q + b, K, lane);
        list.tail(K, &tk, &ti);
      }
    }
  }
  list.store(skey + w * K, sidx + w * K, K, lane);
}

/* Whether row w's exact best m (m-th distance dm; have: the row has m
 * candidates) are certainly among its TF32 candidates (knn.cuh's
 * knn_cert). E bounds |approximate − exact key|: the inputs' rounding to
 * TF32 (2^-11 each, so 2^-9 |x||y| for the doubled product), the |y|²
 * split into two TF32 terms (2^-22 |y|²) and the f32 accumulation of
 * ksteps MMAs (2^-21 each, relative to the terms' sum), doubled for
 * safety. Fewer than m candidates means no list filled up: every column
 * was kept. *band: for a row that fails, the approximate key at or below
 * which every column that may be among its best m lies (the m-th exact
 * key among the candidates bounds the true m-th from above; plus E). */
__device__ bool knn_certified(const knn_cert &c, int64_t w, int K, double xx, double dm, bool have, bool cosine,
                              double *band)
{
  if (!have) return true;
  double xn = cosine ? 1.0 : sqrt(xx), ym = (double)*c.ymax;
  double e = 2.0 * (xn * ym * (0x1p-9 + c.ksteps * 0x1p-20) + ym * ym * (c.ksteps * 0x1p-21 + 0x1p-22) + 0x1p-20);
  double kx = cosine ? 2.0 * dm - 1.0 : dm - xx;  /* the exact key: |y|² − 2x·y, or 1 − 2cos */
  *band = kx + e;
  for (int s = 0; s < c.splits; s++) {
    float tk = c.skey[w * K + s * 32 + 31];
    if (isfinite(tk) && !((double)tk - e > kx)) return false;
  }
  return true;
}

/* Step 4: row w's K candidates (sidx: columns of the tile, -1 unused; the
 * row's own column, self0 + w, skipped) → out row [m indices as f64 (−1
 * missing), m distances (+inf)], by (distance, index). Each slot's rank is
 * the number of slots before it: valid ones first by (distance, global
 * index), unused ones by slot, so ranks are a permutation. With a
 * certificate, rows that fail it are flagged for knn_tc.cu's exact scan. */
template <class T, int J>
__global__ void knn_finish(const T *x, const T *y, int64_t d, int64_t ri, const int *sidx, int K, int m, int64_t col0,
                           int64_t self0, bool cosine, knn_cert cert, double *out)
{
  int lane = threadIdx.x & 31;
  int64_t w = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (w >= ri) return;  /* warp-uniform */
  double dist[J];
  int64_t gid[J];
  int rank[J];
#pragma unroll
  for (int j = 0; j < J; j++) {
    int s = lane + 32 * j;
    int c = s < K ? sidx[w * K + s] : -1;
    if (c == self0 + w) c = -1;
    gid[j] = c >= 0 ? col0 + c : -1;
    dist[j] = c >= 0 ? exact_dist(x + w * d, y + (int64_t)c * d, d, cosine) : INFINITY;
    rank[j] = 0;
  }
  for (int t = 0; t < K; t++) {
    int jt = t >> 5;
    double dt = dist[0];
    int64_t it = gid[0];
#pragma unroll
    for (int j = 1; j < J; j++)
      if (j == jt) dt = dist[j], it = gid[j];
    dt = __shfl_sync(FULL, dt, t & 31);
    it = __shfl_sync(FULL, it, t & 31);
#pragma unroll
    for (int j = 0; j < J; j++) {
      int s = lane + 32 * j;
      bool before = it >= 0 ? gid[j] < 0 || dt < dist[j] || (dt == dist[j] && it < gid[j]) : gid[j] < 0 && t < s;
      rank[j] += t != s && before;
    }
  }
  double *o = out + w * 2 * m;
  double dm = 0;
  bool have = false;
#pragma unroll
  for (int j = 0; j < J; j++) {
    int s = lane + 32 * j;
    if (s >= K || rank[j] >= m) continue;
    o[rank[j]] = gid[j] >= 0 ? (double)gid[j] : -1.0;
    o[m + rank[j]] = gid[j] >= 0 ? dist[j] : INFINITY;
    if (rank[j] == m - 1 && gid[j] >= 0) dm = dist[j], have = true;
  }
  if (cert.skey == nullptr) return;
  unsigned src = __ballot_sync(FULL, have);
  if (src != 0) dm = __shfl_sync(FULL, dm, __ffs(src) - 1);
  double xx = 0;
  for (int64_t c = 0; c < d; c++) xx += (double)x[w * d + c] * (double)x[w * d + c];
  double band = 0;
  if (lane == 0 && !knn_certified(cert, w, K, xx, dm, src != 0, cosine, &band)) {
    int f = atomicAdd(cert.nflag, 1);
    cert.flagged[f] = (int)w;
    cert.band[f] = nextafterf(__double2float_ru(band), INFINITY);  /* the sweep keeps keys below it */
  }
}

int knn_finish_launch(const tile_task *t, const void *x, const void *y, const int *sidx, int K, knn_cert cert,
                      double *out, cudaStream_t s, tsr_errbuf *err)
{
  unsigned blocks = (unsigned)((t->ri + WARPS - 1) / WARPS);
  int64_t self0 = t->row0 - t->col0;
  bool f64 = t->dtype == TSR_F64;
  if (K <= 32 && f64)
    knn_finish<double, 1><<<blocks, 32 * WARPS, 0, s>>>((const double *)x, (const double *)y, t->d, t->ri, sidx, K,
                                                        (int)t->m, t->col0, self0, t->cosine, cert, out);
  else if (K <= 32)
    knn_finish<float, 1><<<blocks, 32 * WARPS, 0, s>>>((const float *)x, (const float *)y, t->d, t->ri, sidx, K,
                                                       (int)t->m, t->col0, self0, t->cosine, cert, out);
  else if (f64)
    knn_finish<double, 2><<<blocks, 32 * WARPS, 0, s>>>((const double *)x, (const double *)y, t->d, t->ri, sidx, K,
                                                        (int)t->m, t->col0, self0, t->cosine, cert, out);
  else
    knn_finish<float, 2><<<blocks, 32 * WARPS, 0, s>>>((const float *)x, (const float *)y, t->d, t->ri, sidx, K,
                                                       (int)t->m, t->col0, self0, t->cosine, cert, out);
  return TSR_CUDA_LAUNCHED("knn_finish", err);
}

struct tile_bufs {
  float *yn, *skey;
  int *sidx;
  void *na, *nb, *g;
  unsigned long long *bad;
};

/* The scratch of a tile: the status words and the normalized copies
 * (cosine) always; the norms, lists and the G sub-tile for the cuBLAS
 * path only (tc: the TF32 path keeps its own). */
static int tile_alloc(const tile_task *t, tsr_dtype dt, int64_t sub_elems, bool tc, tsr_scratch *sc, tile_bufs *b,
                      tsr_errbuf *err)
{
  size_t es = tsr_dtype_size(dt);
  memset(b, 0, sizeof *b);
  int rc = sc->get(2, &b->bad, "knn_tile status words", err);
  if (rc == 0 && t->cosine) rc = sc->get((size_t)(t->ri * t->d) * es, &b->na, "knn_tile normalized rows", err);
  if (rc == 0 && t->cosine) rc = sc->get((size_t)(t->rj * t->d) * es, &b->nb, "knn_tile normalized columns", err);
  if (tc) return rc;
  if (rc == 0) rc = sc->get(t->rj, &b->yn, "knn_tile column norms", err);
  if (rc == 0) rc = sc->get(t->ri * t->K, &b->skey, "knn_tile candidate keys", err);
  if (rc == 0) rc = sc->get(t->ri * t->K, &b->sidx, "knn_tile candidate columns", err);
  if (rc == 0) rc = sc->get((size_t)sub_elems * es, &b->g, "a knn_tile sub-tile", err);
  return rc;
}

static unsigned warp_blocks(int64_t rows)
{
  return (unsigned)((rows + WARPS - 1) / WARPS);
}

/* Steps 2-3 over all sub-tiles. */
template <class T>
static int tile_scan(const tile_task *t, const T *a, const T *bm, const tile_bufs *b, int64_t rb, int64_t cb,
                     const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  tsr_dtype dt = sizeof(T) == 4 ? TSR_F32 : TSR_F64;
  int rc = 0;
  for (int64_t r0 = 0; r0 < t->ri && rc == 0; r0 += rb) {
    int64_t nr = t->ri - r0 < rb ? t->ri - r0 : rb;
    for (int64_t c0 = 0; c0 < t->rj && rc == 0; c0 += cb) {
      int64_t nc = t->rj - c0 < cb ? t->rj - c0 : cb;
      if (t->d == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(b->g, 0, (size_t)(nr * nc) * sizeof(T), s), err);
      else
        rc = tsr_cuda_gemm(gpu, dt, false, true, nr, nc, t->d, a + r0 * t->d, t->d, bm + c0 * t->d, t->d, 0.0, b->g,
                           nc, false, err);
      if (rc != 0) break;
      int64_t self0 = t->row0 + r0 - (t->col0 + c0);
      float *sk = b->skey + r0 * t->K;
      int *si = b->sidx + r0 * t->K;
      if (t->K <= 32)
        knn_select<T, 1><<<warp_blocks(nr), 32 * WARPS, 0, s>>>((const T *)b->g, (int)nr, (int)nc, b->yn + c0, self0,
                                                                  (int)c0, sk, si, t->K);
      else
        knn_select<T, 2><<<warp_blocks(nr), 32 * WARPS, 0, s>>>((const T *)b->g, (int)nr, (int)nc, b->yn + c0, self0,
                                                                  (int)c0, sk, si, t->K);
      rc = TSR_CUDA_LAUNCHED("knn_select", err);
    }
  }
  return rc;
}

/* Step 1, then the TF32 path (knn_tc.cu) where it fits, else steps 2-4. */
template <class T>
static int tile_run(const tile_task *t, const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  cudaStream_t s = tsr_stream(gpu);
  tsr_dtype dt = sizeof(T) == 4 ? TSR_F32 : TSR_F64;
  bool tc = knn_tc_fits(t, dt);
  int64_t rb = t->ri < SUB_ROWS ? t->ri : SUB_ROWS;
  int64_t sub = sizeof(T) == 4 ? SUB_ELEMS : SUB_ELEMS / 2;  /* an f64 G in as many bytes */
  int64_t cb = sub / rb / 128 * 128;
  cb = cb < 128 ? 128 : cb > t->rj ? t->rj : cb;
  tsr_scratch sc(gpu);
  tile_bufs b;
  int rc = tile_alloc(t, dt, rb * (cb > 0 ? cb : 1), tc, &sc, &b, err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(b.bad, 0xff, 2 * sizeof(unsigned long long), s), err);
  if (rc != 0) return rc;
  const T *x = (const T *)in[0].data, *y = (const T *)in[1].data;
  knn_prepare<T><<<tsr_grid(t->ri, 128), 128, 0, s>>>(x, t->ri, t->d, t->cosine, nullptr, (T *)b.na, b.bad, t->row0);
  knn_prepare<T><<<tsr_grid(t->rj, 128), 128, 0, s>>>(y, t->rj, t->d, t->cosine, b.yn, (T *)b.nb, b.bad + 1,
                                                        t->col0);
  rc = TSR_CUDA_LAUNCHED("knn_prepare", err);
  if (rc == 0) rc = tsr_cuda_defer_rows("knn_tile", (const int64_t *)b.bad, 2, "is not finite (kNN needs finite values)",
                                        s, err);
  if (rc != 0) return rc;
  const T *a = t->cosine ? (const T *)b.na : x, *bm = t->cosine ? (const T *)b.nb : y;
  if (tc)
    return knn_tc_run(t, (const float *)x, (const float *)y, (const float *)a, (const float *)bm, (double *)out->data,
                      gpu, err);
  knn_empty_lists<<<tsr_grid(t->ri * t->K, 256), 256, 0, s>>>(b.skey, b.sidx, t->ri * t->K);
  rc = TSR_CUDA_LAUNCHED("knn_empty_lists", err);
  if (rc == 0 && t->rj > 0) rc = tile_scan<T>(t, a, bm, &b, rb, cb, gpu, err);
  knn_cert none;
  memset(&none, 0, sizeof none);
  if (rc == 0) rc = knn_finish_launch(t, x, y, b.sidx, t->K, none, (double *)out->data, s, err);
  return rc;
}

TSR_CUDA_VARIANT(knn_tile)
{
  (void)n_in;
  tile_task t;
  int rc = tile_parse(p, in, &t, err);
  if (rc != 0) return rc;
  if (t.K > MAX_LIST) return TSR_ENODEV;  /* before anything is enqueued: the CPU variant runs */
  /* The CPU graph's two-way "pair" tiles (graphs/knn.c builds plain ones
   * for GPU clusters): the CPU variant. */
  int64_t pair = 0;
  if ((rc = tsr_params_opt_int(p, "pair", 0, &pair, err)) != 0) return tsr_k_param_fail("knn_tile", rc, err);
  if (pair != 0) return TSR_ENODEV;
  if (t.ri == 0) return 0;
  rc = in[0].meta.dtype == TSR_F32 ? tile_run<float>(&t, in, out, gpu, err) : tile_run<double>(&t, in, out, gpu, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("knn_tile", rc, err);
}

/* ---------- knn_merge ---------- */

struct merge_ptrs {
  const double *p[MERGE_BATCH];
};

/* A batch of nt tiles into rows' lists (sd/si, m each; first: start
 * empty); last: write the output instead of the lists — row0 + w first at
 * distance 0, then the list, k entries in all. */
template <int J>
__global__ void knn_merge_rows(merge_ptrs t, int nt, int64_t rows, int m, double *sd, int64_t *si, bool first,
                               bool last, int k, int part, int metric, int64_t row0, void *out)
{
  int lane = threadIdx.x & 31;
  int64_t w = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (w >= rows) return;  /* warp-uniform */
  wlist<double, int64_t, J, true> list;
  if (first) list.init();
  else list.load(sd + w * m, si + w * m, m, lane);
  double tk;
  int64_t ti;
  list.tail(m, &tk, &ti);
  for (int i = 0; i < nt; i++) {
    const double *row = t.p[i] + w * 2 * m;
    for (int base = 0; base < m; base += 32) {
      int s = base + lane;
      bool valid = s < m && row[s] >= 0;
      double dv = valid ? row[m + s] : INFINITY;
      int64_t iv = valid ? (int64_t)row[s] : -1;
      list.offer(dv, iv, valid, m, &tk, &ti, lane);
    }
  }
  if (!last) {
    list.store(sd + w * m, si + w * m, m, lane);
    return;
  }
#pragma unroll
  for (int j = 0; j < J; j++) {
    int s = lane + 32 * j, pos = s + 1;  /* slot s is output column s + 1 */
    if (s >= m || pos >= k) continue;
    if (part == 0) ((int64_t *)out)[w * k + pos] = list.idx[j];
    else ((float *)out)[w * k + pos] = (float)(metric == 0 ? sqrt(list.key[j]) : list.key[j]);
  }
  if (lane == 0) {
    if (part == 0) ((int64_t *)out)[w * k] = row0 + w;
    else ((float *)out)[w * k] = 0.0f;
  }
}

static int merge_param(const tsr_params *p, const char *name, int64_t *v, tsr_errbuf *err)
{
  *v = 0;
  if (tsr_params_find(p, name) == nullptr) return 0;
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail("knn_merge", rc, err);
}

TSR_CUDA_VARIANT(knn_merge)
{
  int64_t k, part, metric, row0;
  int rc = merge_param(p, "k", &k, err);
  if (rc == 0) rc = merge_param(p, "part", &part, err);
  if (rc == 0) rc = merge_param(p, "metric", &metric, err);
  if (rc == 0) rc = merge_param(p, "row0", &row0, err);
  if (rc != 0) return rc;
  int64_t m = k > 1 ? k - 1 : 1, rows = in[0].meta.shape[0];
  if (m > MAX_LIST) return TSR_ENODEV;
  int64_t diag = -1;
  if ((rc = tsr_params_opt_int(p, "diag", -1, &diag, err)) != 0) return tsr_k_param_fail("knn_merge", rc, err);
  if (diag >= 0) return TSR_ENODEV;  /* merges of pair tiles (CPU graphs): the CPU variant */
  if (rows == 0) return 0;
  cudaStream_t s = tsr_stream(gpu);
  tsr_scratch sc(gpu);
  double *sd = nullptr;
  int64_t *si = nullptr;
  if (n_in > MERGE_BATCH) {
    rc = sc.get(rows * m, &sd, "knn_merge lists", err);
    if (rc == 0) rc = sc.get(rows * m, &si, "knn_merge lists", err);
  }
  for (int i0 = 0; i0 < n_in && rc == 0; i0 += MERGE_BATCH) {
    int nt = n_in - i0 < MERGE_BATCH ? n_in - i0 : MERGE_BATCH;
    merge_ptrs t;
    memset(&t, 0, sizeof t);
    for (int i = 0; i < nt; i++) t.p[i] = (const double *)in[i0 + i].data;
    bool first = i0 == 0, last = i0 + nt == n_in;
    if (m <= 32)
      knn_merge_rows<1><<<warp_blocks(rows), 32 * WARPS, 0, s>>>(t, nt, rows, (int)m, sd, si, first, last, (int)k,
                                                                 (int)part, (int)metric, row0, out->data);
    else
      knn_merge_rows<2><<<warp_blocks(rows), 32 * WARPS, 0, s>>>(t, nt, rows, (int)m, sd, si, first, last, (int)k,
                                                                 (int)part, (int)metric, row0, out->data);
    rc = TSR_CUDA_LAUNCHED("knn_merge_rows", err);
  }
  return rc == 0 ? 0 : tsr_cuda_fail_op("knn_merge", rc, err);
}
