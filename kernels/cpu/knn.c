/* kernels/cpu/knn.c — exact k nearest neighbours as tiles and merges
 * (graphs/knn.c builds the graph; docs/cluster.md).
 *
 * knn_tile (inputs: row block X_i [ri, d], column block X_j [rj, d], same
 *   float dtype; params k, metric (0 euclidean, 1 cosine), row0, col0: the
 *   blocks' first global rows; pair (default 0)). For every row of X_i,
 *   the m = k − 1 nearest rows of X_j other than itself. Candidates come
 *   from a GEMM: key = |y|² − 2 x·y (|x|² is the same along a row, so the
 *   order is the distance's), kept while below the row's current worst of
 *   its m + MARGIN best (f32 blocks: fused with the GEMM in registers,
 *   knn_fused.c; else OpenBLAS sub-tiles that stay in cache, then a
 *   scan). The kept candidates' distances are then recomputed exactly in
 *   f64 (squared euclidean, or 1 − cos) and the best m kept, ties by
 *   smaller index. The margin absorbs the GEMM's rounding: a true
 *   neighbour is lost only if MARGIN others rounded ahead of it. Output
 *   f64 [ri, 2m]: m global indices (as f64, exact below 2^53; −1 when X_j
 *   has fewer rows) then their m exact distances (+inf).
 *   pair = 1 (CONTRACT ADDITION; the builder uses it for every tile (i, j)
 *   with i < j, i.e. blocks that do not overlap): the same product also
 *   scanned the other way, and the output is f64 [ri + rj, 2m]: rows
 *   0..ri as above, then rows ri..ri+rj: for every row of X_j its m
 *   nearest rows of X_i (global indices from row0), same layout. pair = 0
 *   is the old contract unchanged (the builder uses it for tiles (i, i)).
 * knn_merge (inputs: the tiles holding one row block's rows, any number;
 *   params k, part (0 indices, 1 distances), metric, row0; diag (default
 *   −1)). Row r gets itself first at distance 0, then the best k − 1 of all
 *   tiles' candidates (ties by index): part 0 as i64 [ri, k], part 1 as
 *   f32 [ri, k] (sqrt for euclidean). diag = −1: every input is [ri, 2m]
 *   (the old contract). diag = t (CONTRACT ADDITION): input t is the
 *   block's own tile [ri, 2m] (ri is its row count); inputs before t are
 *   pair tiles where the block was X_j, read from their last ri rows
 *   (offset shape[0] − ri); inputs after t are pair tiles where it was
 *   X_i, read from row 0. The builder passes block i's tiles in j order,
 *   tile (min(i, j), max(i, j)), with diag = i. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "knn.h"
#include "ops.h"

#define KNN_MARGIN 8
#define KNN_RB 128   /* sub-tile rows */
#define KNN_CB 2048  /* sub-tile columns: RB x CB keys stay in L2 */
#define KNN_AHEAD 2  /* finish_row prefetches the candidates of the row this far ahead */

typedef struct knn_params {
  int64_t k, metric, row0, col0, part, pair, diag;
} knn_params;

static int get_int(const char *op, const tsr_params *p, const char *name, int64_t dflt, int64_t *v, tsr_errbuf *err)
{
  *v = dflt;
  if (tsr_params_find(p, name) == NULL) return dflt >= 0 ? 0 : tsr_fail(err, TSR_EINVAL, "%s: missing parameter '%s'", op, name);
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

static int parse(const char *op, const tsr_params *p, knn_params *kp, tsr_errbuf *err)
{
  int rc = get_int(op, p, "k", -1, &kp->k, err);
  if (rc == 0) rc = get_int(op, p, "metric", 0, &kp->metric, err);
  if (rc == 0) rc = get_int(op, p, "row0", 0, &kp->row0, err);
  if (rc == 0) rc = get_int(op, p, "col0", 0, &kp->col0, err);
  if (rc == 0) rc = get_int(op, p, "part", 0, &kp->part, err);
  if (rc == 0) rc = get_int(op, p, "pair", 0, &kp->pair, err);
  if (rc == 0) kp->diag = -1, rc = tsr_params_find(p, "diag") ? get_int(op, p, "diag", 0, &kp->diag, err) : 0;
  if (rc == 0 && (kp->k < 1 || kp->k > (1 << 20)))
    rc = tsr_fail(err, TSR_EINVAL, "%s: k = %lld outside 1..%d", op, (long long)kp->k, 1 << 20);
  if (rc == 0 && kp->metric != 0 && kp->metric != 1)
    rc = tsr_fail(err, TSR_EINVAL, "%s: metric %lld is neither 0 (euclidean) nor 1 (cosine)", op, (long long)kp->metric);
  if (rc == 0 && (kp->part < 0 || kp->part > 1)) rc = tsr_fail(err, TSR_EINVAL, "%s: part must be 0 or 1", op);
  if (rc == 0 && (kp->pair < 0 || kp->pair > 1)) rc = tsr_fail(err, TSR_EINVAL, "%s: pair must be 0 or 1", op);
  return rc;
}

static int64_t m_of(int64_t k) { return k > 1 ? k - 1 : 1; }

/* ---------- knn_tile ---------- */

static int tile_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  knn_params kp;
  int rc = parse("knn_tile", p, &kp, err);
  if (rc != 0) return rc;
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "knn_tile: takes 2 inputs, got %d", n);
  if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dtype != in[1].dtype || in[0].shape[1] != in[1].shape[1] ||
      (in[0].dtype != TSR_F32 && in[0].dtype != TSR_F64))
    return tsr_fail(err, TSR_ESHAPE, "knn_tile: needs two f32 or f64 blocks of equal width, got %s and %s",
                    tsr_k_str(&in[0]).s, tsr_k_str(&in[1]).s);
  if (in[0].shape[1] > INT32_MAX / 2 || in[0].shape[0] > INT32_MAX || in[1].shape[0] > INT32_MAX)
    return tsr_fail(err, TSR_ELIMIT, "knn_tile: blocks %s too large", tsr_k_str(&in[0]).s);
  int64_t shape[2] = {in[0].shape[0] + (kp.pair ? in[1].shape[0] : 0), 2 * m_of(kp.k)};
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

static int check_finite(const tsr_buf *b, int64_t row0, tsr_errbuf *err)
{
  int64_t rows = b->meta.shape[0], d = b->meta.shape[1];
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < d; c++) {
      double v = b->meta.dtype == TSR_F32 ? ((const float *)b->data)[r * d + c] : ((const double *)b->data)[r * d + c];
      if (!isfinite(v))
        return tsr_fail(err, TSR_EINVAL, "knn_tile: row %lld column %lld of the input is %s (kNN needs finite values)",
                        (long long)(row0 + r), (long long)c, isnan(v) ? "NaN" : "infinite");
    }
  return 0;
}

/* The scan of one row of a sub-tile: keys yn[c] − 2 g[c]; a block of 16
 * with nothing below the threshold (nearly all of them) costs one vector
 * compare. skip: the column of the row itself (or −1). */
#define SCAN_BODY                                                                          \
  float thr = nextafterf(key[K - 1], INFINITY); /* equal keys may rank first by index */  \
  int64_t c = 0;                                                                           \
  for (; c + 16 <= nc; c += 16) {                                                          \
    int hit = 0;                                                                           \
    for (int j = 0; j < 16; j++) hit |= (yn[c + j] - 2.0f * g[c + j]) < thr;               \
    if (!hit) continue;                                                                    \
    for (int j = 0; j < 16; j++) {                                                         \
      float v = yn[c + j] - 2.0f * g[c + j];                                               \
      if (v < thr && c + j != skip && tsr_k_knn_before_last(key, idx, K, v, col0 + c + j))          \
        tsr_k_knn_insert(key, idx, K, v, col0 + c + j), thr = nextafterf(key[K - 1], INFINITY);    \
    }                                                                                      \
  }                                                                                        \
  for (; c < nc; c++) {                                                                    \
    float v = yn[c] - 2.0f * g[c];                                                         \
    if (v < thr && c != skip && tsr_k_knn_before_last(key, idx, K, v, col0 + c))                  \
      tsr_k_knn_insert(key, idx, K, v, col0 + c), thr = nextafterf(key[K - 1], INFINITY);          \
  }

__attribute__((target("avx512f"))) static void scan_avx512(const float *g, const float *yn, int64_t nc, int64_t skip,
                                                          int64_t col0, float *key, int64_t *idx, int K)
{
  SCAN_BODY
}
__attribute__((target("avx2"))) static void scan_avx2(const float *g, const float *yn, int64_t nc, int64_t skip,
                                                     int64_t col0, float *key, int64_t *idx, int K)
{
  SCAN_BODY
}
static void scan_plain(const float *g, const float *yn, int64_t nc, int64_t skip, int64_t col0, float *key,
                       int64_t *idx, int K)
{
  SCAN_BODY
}

typedef void (*scan_fn)(const float *, const float *, int64_t, int64_t, int64_t, float *, int64_t *, int);

static scan_fn pick_scan(void)
{
  tsr_k_isa isa = tsr_k_isa_resolve(TSR_K_ISA_BEST);
  return isa == TSR_K_ISA_AVX512 ? scan_avx512 : isa == TSR_K_ISA_AVX2 ? scan_avx2 : scan_plain;
}

/* Row norms (|y|²; 1 for cosine, whose rows are normalized) as f32 keys
 * (when yn is not NULL),
 * and for cosine a normalized copy of the block. */
static void prepare(const tsr_buf *b, bool cosine, float *yn, void *normed)
{
  int64_t rows = b->meta.shape[0], d = b->meta.shape[1];
  bool f32 = b->meta.dtype == TSR_F32;
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < d; c++) {
      double v = f32 ? ((const float *)b->data)[r * d + c] : ((const double *)b->data)[r * d + c];
      s += v * v;
    }
    if (yn != NULL) yn[r] = cosine ? 1.0f : (float)s;
    if (!cosine) continue;
    double inv = s > 0 ? 1.0 / sqrt(s) : 0.0;  /* a zero row stays zero: distance 1 to all */
    for (int64_t c = 0; c < d; c++) {
      if (f32) ((float *)normed)[r * d + c] = (float)(((const float *)b->data)[r * d + c] * inv);
      else ((double *)normed)[r * d + c] = ((const double *)b->data)[r * d + c] * inv;
    }
  }
}

static double elem(const tsr_buf *b, int64_t r, int64_t c)
{
  int64_t d = b->meta.shape[1];
  return b->meta.dtype == TSR_F32 ? ((const float *)b->data)[r * d + c] : ((const double *)b->data)[r * d + c];
}

/* The exact distances (f64; squared euclidean or 1 − cos) of row a of x to
 * the n candidate rows at yr[0..n) (x's dtype). Each is the sum over
 * columns in increasing order (the brute force's sums); the candidates are
 * laid out column-major in cv [d, n] so the n independent sums run side by
 * side in vector lanes. */
static void exact_dists(const tsr_buf *x, int64_t a, const void *const *yr, int n, bool cosine, double *cv, double *dist)
{
  int64_t d = x->meta.shape[1];
  double xr[d];  /* the dtype test once, not per element */
  if (x->meta.dtype == TSR_F32)
    for (int i = 0; i < n; i++)
      for (int64_t c = 0; c < d; c++) cv[c * n + i] = ((const float *)yr[i])[c];
  else
    for (int i = 0; i < n; i++)
      for (int64_t c = 0; c < d; c++) cv[c * n + i] = ((const double *)yr[i])[c];
  for (int64_t c = 0; c < d; c++) xr[c] = elem(x, a, c);
  double s[n], yy[n], xx = 0;
  for (int i = 0; i < n; i++) s[i] = 0, yy[i] = 0;
  for (int64_t c = 0; c < d; c++) {
    double u = xr[c];
    const double *v = cv + c * n;
    if (!cosine)
      for (int i = 0; i < n; i++) s[i] += (u - v[i]) * (u - v[i]);
    else {
      xx += u * u;
      for (int i = 0; i < n; i++) s[i] += u * v[i], yy[i] += v[i] * v[i];
    }
  }
  for (int i = 0; i < n; i++)
    dist[i] = !cosine ? s[i] : xx > 0 && yy[i] > 0 ? 1.0 - s[i] / (sqrt(xx) * sqrt(yy[i])) : 1.0;
}

/* Sorts n (dist, idx) pairs by distance, then index (insertion: n is small). */
static void sort_pairs(double *dist, int64_t *idx, int64_t n)
{
  for (int64_t i = 1; i < n; i++) {
    double dv = dist[i];
    int64_t iv = idx[i], p = i;
    while (p > 0 && (dist[p - 1] > dv || (dist[p - 1] == dv && idx[p - 1] > iv))) {
      dist[p] = dist[p - 1], idx[p] = idx[p - 1];
      p--;
    }
    dist[p] = dv, idx[p] = iv;
  }
}

/* The row blocks a tile's candidates come from: block b holds the global
 * rows from first + b·chunk (one block: chunk INT64_MAX). */
typedef struct blocks {
  const tsr_buf *y;
  int n;
  int64_t chunk, first;  /* global row of block 0's row 0 */
} blocks;

static blocks one_block(const tsr_buf *y, int64_t col0) { return (blocks){y, 1, INT64_MAX, col0}; }

/* The address of global row g among the blocks. */
static const void *row_at(const blocks *bl, int64_t g)
{
  int64_t b = (g - bl->first) / bl->chunk, local = g - bl->first - b * bl->chunk;
  const tsr_buf *y = &bl->y[b];
  return (const char *)y->data + (size_t)(local * y->meta.shape[1]) * tsr_dtype_size(y->meta.dtype);
}

/* Writes row r's m best of its K candidates, exact, into out. */
static void finish_row(const tsr_buf *x, int64_t r, const blocks *bl, const int64_t *cidx, int K, int64_t m,
                       bool cosine, double *cv, double *out)
{
  double dist[K];
  int64_t idx[K];
  int n = 0;
  const void *yr[K];
  for (int i = 0; i < K; i++)
    if (cidx[i] >= 0) idx[n] = cidx[i], yr[n] = row_at(bl, cidx[i]), n++;
  exact_dists(x, r, yr, n, cosine, cv, dist);
  sort_pairs(dist, idx, n);
  for (int64_t i = 0; i < m; i++) {
    out[i] = i < n ? (double)idx[i] : -1.0;
    out[m + i] = i < n ? dist[i] : INFINITY;
  }
}

/* Prefetches the rows of y a later finish_row reads (its candidates, at
 * random in a block larger than L2: the misses were half its time). */
static void prefetch_rows(const blocks *bl, const int64_t *cidx, int K)
{
  size_t rb = (size_t)bl->y[0].meta.shape[1] * tsr_dtype_size(bl->y[0].meta.dtype);
  for (int i = 0; i < K; i++)
    for (size_t o = 0; cidx[i] >= 0 && o < rb; o += 64) __builtin_prefetch((const char *)row_at(bl, cidx[i]) + o);
}

/* finish_row for rows [0, rows) of x, candidates cidx [rows, K], into out
 * [rows, 2m]. */
static void finish_rows(const tsr_buf *x, int64_t rows, const blocks *bl, const int64_t *cidx, int K, int64_t m,
                        bool cosine, double *cv, double *out)
{
  for (int64_t r = 0; r < rows; r++) {
    if (r + KNN_AHEAD < rows) prefetch_rows(bl, cidx + (r + KNN_AHEAD) * K, K);
    finish_row(x, r, bl, cidx + r * K, K, m, cosine, cv, out + r * 2 * m);
  }
}

/* G [nr, nc] = A rows [r0, r0+nr) · B rows [c0, c0+nc)ᵀ as f32 (an f64
 * GEMM is rounded to f32 keys; the exact pass decides anyway). */
static void tile_gemm(tsr_dtype dt, const void *a, const void *b, int64_t d, int64_t r0, int64_t nr, int64_t c0,
                      int64_t nc, float *g, double *g64)
{
  size_t es = tsr_dtype_size(dt);
  const char *pa = (const char *)a + (size_t)(r0 * d) * es, *pb = (const char *)b + (size_t)(c0 * d) * es;
  if (dt == TSR_F32) {
    tsr_k_gemm(TSR_F32, false, true, nr, nc, d, pa, d, pb, d, 0.0, g, nc);
    return;
  }
  tsr_k_gemm(TSR_F64, false, true, nr, nc, d, pa, d, pb, d, 0.0, g64, nc);
  for (int64_t i = 0; i < nr * nc; i++) g[i] = (float)g64[i];
}

typedef struct tile_scratch {
  float *yn, *xn, *g, *key;
  double *g64, *cv;
  int64_t *idx;
  void *na, *nb;
} tile_scratch;

static void scratch_free(tile_scratch *s)
{
  free(s->yn), free(s->xn), free(s->g), free(s->key), free(s->g64), free(s->cv), free(s->idx), free(s->na), free(s->nb);
}

/* Allocates s's buffers; on failure the caller frees what was allocated. */
static int scratch_alloc(const tsr_buf *x, const tsr_buf *y, int K, bool cosine, bool pair, tile_scratch *s,
                         tsr_errbuf *err)
{
  int64_t ri = x->meta.shape[0], rj = y->meta.shape[0], d = x->meta.shape[1], rows = ri + (pair ? rj : 0);
  size_t es = tsr_dtype_size(x->meta.dtype);
  memset(s, 0, sizeof *s);
  s->yn = malloc((size_t)(rj + 1) * sizeof(float));
  s->g = malloc((size_t)KNN_RB * KNN_CB * sizeof(float));
  s->xn = malloc((size_t)(ri + 1) * sizeof(float));
  s->cv = malloc((size_t)(K * d) * sizeof(double));
  s->key = malloc((size_t)(rows * K + 1) * sizeof(float));
  s->idx = malloc((size_t)(rows * K + 1) * sizeof(int64_t));
  s->g64 = x->meta.dtype == TSR_F64 ? malloc((size_t)KNN_RB * KNN_CB * sizeof(double)) : NULL;
  s->na = cosine ? malloc((size_t)(ri * d) * es + 1) : NULL;
  s->nb = cosine ? malloc((size_t)(rj * d) * es + 1) : NULL;
  if (!s->yn || !s->xn || !s->cv || !s->g || !s->key || !s->idx || (x->meta.dtype == TSR_F64 && !s->g64) || (cosine && (!s->na || !s->nb)))
    return tsr_fail(err, TSR_ENOMEM, "knn_tile: out of memory for a %lld x %lld tile", (long long)ri, (long long)rj);
  return 0;
}

/* The GEMM + scan path (f64 blocks, or a CPU without the fused kernel):
 * rows of a [ri, d] (global row0) against rows of b [rj, d] (global col0)
 * into the lists key/idx [ri, K], in RB x CB sub-tiles. */
static void scan_gemm(tsr_dtype dt, const void *a, int64_t ri, const void *b, int64_t rj, int64_t d, const float *yn,
                      int64_t row0, int64_t col0, tile_scratch *s, float *key, int64_t *idx, int K)
{
  scan_fn scan = pick_scan();
  for (int64_t r0 = 0; r0 < ri; r0 += KNN_RB) {
    int64_t nr = ri - r0 < KNN_RB ? ri - r0 : KNN_RB;
    for (int64_t c0 = 0; c0 < rj; c0 += KNN_CB) {
      int64_t nc = rj - c0 < KNN_CB ? rj - c0 : KNN_CB;
      tile_gemm(dt, a, b, d, r0, nr, c0, nc, s->g, s->g64);
      for (int64_t r = 0; r < nr; r++) {
        int64_t self = row0 + r0 + r - (col0 + c0);  /* the row's own column in this sub-tile */
        scan(s->g + r * nc, yn + c0, nc, self >= 0 && self < nc ? self : -1, col0 + c0, key + (r0 + r) * K,
             idx + (r0 + r) * K, K);
      }
    }
  }
}

static void lists_empty(tile_scratch *s, int64_t rows, int K)
{
  for (int64_t i = 0; i < rows * K; i++) s->key[i] = INFINITY, s->idx[i] = -1;
}

/* Fills s.key/s.idx (the lists, started by the caller): x's rows against y's, and with pair y's against x's. */
static int tile_scan(const knn_params *kp, const tsr_buf *x, const tsr_buf *y, tile_scratch *s, int K)
{
  bool cosine = kp->metric == 1, pair = kp->pair == 1;
  int64_t ri = x->meta.shape[0], rj = y->meta.shape[0], d = x->meta.shape[1];
  prepare(y, cosine, s->yn, s->nb);
  prepare(x, cosine, s->xn, s->na);
  const void *a = cosine ? s->na : x->data, *b = cosine ? s->nb : y->data;
  if (x->meta.dtype == TSR_F32) {
    tsr_k_knn_tile t = {a, b, ri, rj, d, kp->row0, kp->col0, s->yn, pair ? s->xn : NULL, s->key, s->idx, K};
    int rc = tsr_k_knn_fused_f32(&t);
    if (rc != 1) return rc;
  }
  scan_gemm(x->meta.dtype, a, ri, b, rj, d, s->yn, kp->row0, kp->col0, s, s->key, s->idx, K);
  if (pair) scan_gemm(x->meta.dtype, b, rj, a, ri, d, s->xn, kp->col0, kp->row0, s, s->key + ri * K, s->idx + ri * K, K);
  return 0;
}

static int tile_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  knn_params kp;
  parse("knn_tile", p, &kp, err);
  const tsr_buf *x = &in[0], *y = &in[1];
  int64_t ri = x->meta.shape[0], rj = y->meta.shape[0], m = m_of(kp.k);
  int K = (int)(m + KNN_MARGIN);
  bool cosine = kp.metric == 1;
  int rc = check_finite(x, kp.row0, err);
  if (rc == 0 && kp.col0 != kp.row0) rc = check_finite(y, kp.col0, err);
  if (rc != 0) return rc;
  tile_scratch s;
  if ((rc = scratch_alloc(x, y, K, cosine, kp.pair == 1, &s, err)) == 0) lists_empty(&s, ri + (kp.pair ? rj : 0), K);
  if (rc != 0 || (rc = tile_scan(&kp, x, y, &s, K)) != 0) {
    scratch_free(&s);  /* what was allocated */
    return rc == TSR_ENOMEM ? tsr_fail(err, TSR_ENOMEM, "knn_tile: out of memory for a %lld x %lld tile", (long long)ri,
                                       (long long)rj)
                            : rc;
  }
  double *o = out->data;
  blocks by = one_block(y, kp.col0), bx = one_block(x, kp.row0);
  finish_rows(x, ri, &by, s.idx, K, m, cosine, s.cv, o);
  if (kp.pair == 1) finish_rows(y, rj, &bx, s.idx + ri * K, K, m, cosine, s.cv, o + ri * 2 * m);
  scratch_free(&s);
  return 0;
}

/* ---------- knn_merge ---------- */

static int merge_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  knn_params kp;
  int rc = parse("knn_merge", p, &kp, err);
  if (rc != 0) return rc;
  if (n < 1) return tsr_fail(err, TSR_EINVAL, "knn_merge: takes at least 1 input");
  int64_t m = m_of(kp.k);
  if (kp.diag >= n) return tsr_fail(err, TSR_EINVAL, "knn_merge: diag %lld but %d inputs", (long long)kp.diag, n);
  int64_t rows = in[kp.diag >= 0 ? kp.diag : 0].shape[0];
  for (int i = 0; i < n; i++)
    if (in[i].ndim != 2 || in[i].dtype != TSR_F64 || in[i].shape[1] != 2 * m ||
        (kp.diag < 0 || i == kp.diag ? in[i].shape[0] != rows : in[i].shape[0] <= rows))
      return tsr_fail(err, TSR_ESHAPE, "knn_merge: input %d is %s, not a knn_tile output f64 [%s%lld, %lld]", i,
                      tsr_k_str(&in[i]).s, kp.diag < 0 || i == kp.diag ? "" : "more than ", (long long)rows,
                      (long long)(2 * m));
  int64_t shape[2] = {rows, kp.k};
  tsr_k_meta_set(out, kp.part == 0 ? TSR_I64 : TSR_F32, 2, shape);
  return 0;
}

/* The best m of n sorted lists (a tile's row): each step takes the
 * smallest head, ties by index. O(n·m) a row. */
static int64_t merge_row(const tsr_buf *in, int n, const int64_t *off, int64_t r, int64_t m, int *head, double *dist,
                         int64_t *idx)
{
  for (int t = 0; t < n; t++) head[t] = 0;
  int64_t c = 0;
  for (; c < m; c++) {
    int best = -1;
    double bd = 0;
    int64_t bi = 0;
    for (int t = 0; t < n; t++) {
      const double *row = (const double *)in[t].data + (off[t] + r) * 2 * m;
      if (head[t] >= m || row[head[t]] < 0) continue;
      double dv = row[m + head[t]];
      int64_t iv = (int64_t)row[head[t]];
      if (best < 0 || dv < bd || (dv == bd && iv < bi)) best = t, bd = dv, bi = iv;
    }
    if (best < 0) break;
    head[best]++;
    dist[c] = bd, idx[c] = bi;
  }
  return c;
}

static int merge_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  knn_params kp;
  parse("knn_merge", p, &kp, err);
  int64_t rows = in[kp.diag >= 0 ? kp.diag : 0].meta.shape[0], k = kp.k, m = m_of(k);
  double *dist = malloc((size_t)m * sizeof *dist);
  int64_t *idx = malloc((size_t)m * sizeof *idx), *off = malloc((size_t)n * sizeof *off);
  int *head = malloc((size_t)n * sizeof *head);
  if (dist == NULL || idx == NULL || head == NULL || off == NULL) {
    free(dist), free(idx), free(head), free(off);
    return tsr_fail(err, TSR_ENOMEM, "knn_merge: out of memory");
  }
  for (int t = 0; t < n; t++) off[t] = t < kp.diag ? in[t].meta.shape[0] - rows : 0;  /* (pair tiles) */
  for (int64_t r = 0; r < rows; r++) {
    int64_t c = merge_row(in, n, off, r, m, head, dist, idx);
    for (int64_t i = 0; i < k; i++) {
      int64_t j = i == 0 ? kp.row0 + r : i - 1 < c ? idx[i - 1] : -1;
      double v = i == 0 ? 0.0 : i - 1 < c ? dist[i - 1] : INFINITY;
      if (kp.part == 0) ((int64_t *)out->data)[r * k + i] = j;
      else ((float *)out->data)[r * k + i] = (float)(kp.metric == 0 ? sqrt(v) : v);
    }
  }
  free(dist), free(idx), free(head), free(off);
  return 0;
}

/* ---------- knn_chain, knn_finish ---------- */

typedef struct chain_params {
  int64_t sym, si, sj, off, block, chunk;
} chain_params;

static int chain_parse(const tsr_params *p, knn_params *kp, chain_params *cp, tsr_errbuf *err)
{
  int rc = parse("knn_chain", p, kp, err);
  if (rc == 0) rc = get_int("knn_chain", p, "sym", 0, &cp->sym, err);
  if (rc == 0) rc = get_int("knn_chain", p, "si", 0, &cp->si, err), cp->si = tsr_params_find(p, "si") ? cp->si : -1;
  if (rc == 0) rc = get_int("knn_chain", p, "sj", 0, &cp->sj, err), cp->sj = tsr_params_find(p, "sj") ? cp->sj : -1;
  if (rc == 0 && (cp->sym < 0 || cp->sym > 1)) rc = tsr_fail(err, TSR_EINVAL, "knn_chain: sym must be 0 or 1");
  if (rc == 0 && cp->sym && cp->sj >= 0) rc = tsr_fail(err, TSR_EINVAL, "knn_chain: a sym tile takes no 'sj'");
  return rc;
}

/* Checks that state input in (rows from off) holds rows lists of K. */
static int state_check(const char *op, const tsr_meta *in, int at, int64_t off, int64_t rows, int K, tsr_errbuf *err)
{
  if (in[at].ndim != 2 || in[at].dtype != TSR_F64 || in[at].shape[1] != 2 * K || off < 0 || off + rows > in[at].shape[0])
    return tsr_fail(err, TSR_ESHAPE, "%s: input %d is %s, not a knn_chain state f64 [>= %lld, %d] (rows from %lld)", op,
                    at, tsr_k_str(&in[at]).s, (long long)(off + rows), 2 * K, (long long)off);
  return 0;
}

static int chain_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  knn_params kp;
  chain_params cp;
  int rc = chain_parse(p, &kp, &cp, err);
  if (rc != 0) return rc;
  int want = 2 + (cp.si >= 0) + (cp.sj >= 0);
  if (n != want) return tsr_fail(err, TSR_EINVAL, "knn_chain: takes %d inputs (blocks, then states), got %d", want, n);
  if ((rc = tile_infer(p, in, 2, out, err)) != 0) return rc;
  if (cp.sym && (kp.row0 != kp.col0 || in[0].shape[0] != in[1].shape[0]))
    return tsr_fail(err, TSR_EINVAL, "knn_chain: a sym tile takes one block twice (row0 = col0)");
  int K = (int)(m_of(kp.k) + KNN_MARGIN);
  if (kp.row0 + in[0].shape[0] > INT32_MAX || kp.col0 + in[1].shape[0] > INT32_MAX)
    return tsr_fail(err, TSR_ELIMIT, "knn_chain: global rows past 2^31");
  if (cp.si >= 0 && (rc = state_check("knn_chain", in, 2, cp.si, in[0].shape[0], K, err)) != 0) return rc;
  if (cp.sj >= 0 && (rc = state_check("knn_chain", in, 2 + (cp.si >= 0), cp.sj, in[1].shape[0], K, err)) != 0) return rc;
  int64_t shape[2] = {in[0].shape[0] + (cp.sym ? 0 : in[1].shape[0]), 2 * K};
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

/* Copies rows [off, off + rows) of a state into lists key/idx (sorted by
 * (key, index), as the scan path wants them). */
static void state_load(const tsr_buf *st, int64_t off, int64_t rows, int K, float *key, int64_t *idx)
{
  const double *sv = st->data;
  for (int64_t r = 0; r < rows; r++) {
    const double *row = sv + (off + r) * 2 * K;
    for (int i = 0; i < K; i++) {
      bool used = row[i] >= 0;
      key[r * K + i] = used ? (float)row[K + i] : INFINITY, idx[r * K + i] = used ? (int64_t)row[i] : -1;
    }
    for (int i = 1; i < K; i++) {  /* insertion by (key, index): K is small */
      float kv = key[r * K + i];
      int64_t iv = idx[r * K + i];
      int q = i;
      while (q > 0 && tsr_k_knn_before_last(key + r * K, idx + r * K, q, kv, iv)) key[r * K + q] = key[r * K + q - 1], idx[r * K + q] = idx[r * K + q - 1], q--;
      key[r * K + q] = kv, idx[r * K + q] = iv;
    }
  }
}

static int chain_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  knn_params kp;
  chain_params cp;
  chain_parse(p, &kp, &cp, err);
  kp.pair = !cp.sym;
  const tsr_buf *x = &in[0], *y = &in[1];
  int64_t ri = x->meta.shape[0], rj = y->meta.shape[0], rows = ri + (cp.sym ? 0 : rj);
  int K = (int)(m_of(kp.k) + KNN_MARGIN);
  tile_scratch s = {0};
  int rc = check_finite(x, kp.row0, err);
  if (rc == 0 && !cp.sym) rc = check_finite(y, kp.col0, err);
  if (rc == 0 && (rc = scratch_alloc(x, y, K, kp.metric == 1, !cp.sym, &s, err)) == 0) {
    lists_empty(&s, rows, K);
    if (cp.si >= 0) state_load(&in[2], cp.si, ri, K, s.key, s.idx);
    if (cp.sj >= 0) state_load(&in[2 + (cp.si >= 0)], cp.sj, rj, K, s.key + ri * K, s.idx + ri * K);
    rc = tile_scan(&kp, x, y, &s, K);
  }
  for (int64_t r = 0; rc == 0 && r < rows; r++)
    for (int i = 0; i < K; i++) {
      double *o = (double *)out->data + r * 2 * K;
      o[i] = (double)s.idx[r * K + i], o[K + i] = s.idx[r * K + i] >= 0 ? (double)s.key[r * K + i] : INFINITY;
    }
  scratch_free(&s);
  return rc == TSR_ENOMEM ? tsr_fail(err, TSR_ENOMEM, "knn_chain: out of memory for a %lld x %lld tile", (long long)ri, (long long)rj) : rc;
}

static int finish_parse(const tsr_params *p, knn_params *kp, chain_params *cp, tsr_errbuf *err)
{
  int rc = parse("knn_finish", p, kp, err);
  if (rc == 0) rc = get_int("knn_finish", p, "off", 0, &cp->off, err);
  if (rc == 0) rc = get_int("knn_finish", p, "block", -1, &cp->block, err);
  if (rc == 0) rc = get_int("knn_finish", p, "chunk", -1, &cp->chunk, err);
  if (rc == 0 && cp->chunk < 1) rc = tsr_fail(err, TSR_EINVAL, "knn_finish: chunk must be >= 1");
  return rc;
}

static int finish_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  knn_params kp;
  chain_params cp;
  int rc = finish_parse(p, &kp, &cp, err);
  if (rc != 0) return rc;
  if (n < 2 || cp.block >= n - 1) return tsr_fail(err, TSR_EINVAL, "knn_finish: block %lld but %d row blocks", (long long)cp.block, n - 1);
  for (int b = 1; b < n; b++)
    if (in[b].ndim != 2 || in[b].dtype != in[1].dtype || in[b].shape[1] != in[1].shape[1] ||
        (in[b].dtype != TSR_F32 && in[b].dtype != TSR_F64) || (b < n - 1 && in[b].shape[0] != cp.chunk))
      return tsr_fail(err, TSR_ESHAPE, "knn_finish: row block %d is %s, not f32/f64 like block 0 with %lld rows", b - 1,
                      tsr_k_str(&in[b]).s, (long long)cp.chunk);
  int64_t rows = in[1 + cp.block].shape[0], m = m_of(kp.k);
  if ((rc = state_check("knn_finish", in, 0, cp.off, rows, (int)(m + KNN_MARGIN), err)) != 0) return rc;
  int64_t shape[2] = {rows, 2 * m};
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

static int finish_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  knn_params kp;
  chain_params cp;
  finish_parse(p, &kp, &cp, err);
  const tsr_buf *x = &in[1 + cp.block];
  int64_t rows = x->meta.shape[0], m = m_of(kp.k), d = x->meta.shape[1];
  int K = (int)(m + KNN_MARGIN);
  double *cv = malloc((size_t)(K * d) * sizeof *cv + 8);
  int64_t *idx = malloc((size_t)(rows * K) * sizeof *idx + 8);
  if (cv == NULL || idx == NULL) {
    free(cv), free(idx);
    return tsr_fail(err, TSR_ENOMEM, "knn_finish: out of memory for %lld rows", (long long)rows);
  }
  const double *st = (const double *)in[0].data + cp.off * 2 * K;
  int64_t total = cp.chunk * (n - 2) + in[n - 1].meta.shape[0];
  int rc = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int i = 0; i < K; i++) {
      idx[r * K + i] = (int64_t)st[r * 2 * K + i];
      if (idx[r * K + i] >= total) rc = tsr_fail(err, TSR_EINVAL, "knn_finish: row %lld's candidate %lld is past the %lld rows", (long long)r, (long long)idx[r * K + i], (long long)total);
    }
  blocks bl = {&in[1], n - 1, cp.chunk, 0};
  if (rc == 0) finish_rows(x, rows, &bl, idx, K, m, kp.metric == 1, cv, out->data);
  free(cv), free(idx);
  return rc;
}

const tsr_op_def tsr_op_knn_chain = {"knn_chain", 2, 4, chain_infer, chain_cpu, false, NULL};
const tsr_op_def tsr_op_knn_finish = {"knn_finish", 2, -1, finish_infer, finish_cpu, false, NULL};
const tsr_op_def tsr_op_knn_tile = {"knn_tile", 2, 2, tile_infer, tile_cpu, false, NULL};
const tsr_op_def tsr_op_knn_merge = {"knn_merge", 1, -1, merge_infer, merge_cpu, false, NULL};
