/* kernels/cpu/kmeans.c — k-means as scikit-learn's KMeans(algorithm="lloyd")
 * (graphs/kmeans.c runs the loop; docs/cluster.md).
 *
 * A partial (f64 vector of KM_LEN(k, d)): sums[k·d], counts[k], inertia,
 * then the k points farthest from their centers (for relocating empty
 * clusters as sklearn does): (distance², global index, label) × k, then
 * their coordinates k·d. Unused far slots have index −1.
 *
 * kmeans_partial (input: a row chunk of x, f32/f64 [r, d]; params k,
 *   centers (k·d floats), row0, labels (bool)): the chunk's partial, or
 *   with labels = true its labels i32 [r]. Each point goes to the nearest
 *   center by the exact f64 squared distance, ties to the smaller index.
 * kmeans_combine (inputs: partials; params k, d): their sum (in input
 *   order) and the k farthest of all (ties: smaller index).
 * kmeans_pp (inputs: every row chunk of x in order; params k, seed): k
 *   initial centers f64 [k, d] by sklearn's greedy k-means++ (2 + ln k
 *   local trials per center), from a splitmix64 stream of the seed — one
 *   task: each center depends on all the previous. */
#include <stdlib.h>
#include <string.h>

#include "kmeans.h"

static double xval(const tsr_buf *b, int64_t i) { return b->meta.dtype == TSR_F32 ? ((const float *)b->data)[i] : ((const double *)b->data)[i]; }

/* The centers param (k·d floats); a single center of one value may come
 * as one float. */
static int get_centers(const tsr_params *p, const double **c, size_t *n, tsr_errbuf *err)
{
  const tsr_param *q = tsr_params_find(p, "centers");
  if (q != NULL && q->type == TSR_PARAM_FLOATS) *c = q->floats, *n = q->n;
  else if (q != NULL && q->type == TSR_PARAM_FLOAT) *c = &q->f, *n = 1;
  else return tsr_fail(err, TSR_EINVAL, "kmeans_partial: missing float array parameter 'centers'");
  return 0;
}

static int km_int(const char *op, const tsr_params *p, const char *name, int64_t *v, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

/* ---------- kmeans_partial ---------- */

static int partial_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t k, row0;
  const double *c = NULL;
  size_t nc = 0;
  bool labels = false;
  int rc = km_int("kmeans_partial", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_partial", p, "row0", &row0, err);
  if (rc == 0) rc = get_centers(p, &c, &nc, err);
  if (rc == 0 && tsr_params_find(p, "labels") != NULL) rc = tsr_params_get_bool(p, "labels", &labels, err);
  if (rc != 0) return rc;
  if (n != 1 || in[0].ndim != 2 || !tsr_k_is_float(in[0].dtype))
    return tsr_fail(err, TSR_ESHAPE, "kmeans_partial: needs one f32/f64 2-D chunk");
  int64_t d = in[0].shape[1];
  if (k < 1 || (int64_t)nc != k * d)
    return tsr_fail(err, TSR_EINVAL, "kmeans_partial: %zu center values for k = %lld and %lld columns", nc, (long long)k, (long long)d);
  int64_t len = labels ? in[0].shape[0] : KM_LEN(k, d);
  tsr_k_meta_set(out, labels ? TSR_I32 : TSR_F64, 1, &len);
  return 0;
}

/* Keeps the k farthest (dist desc, index asc) in far (k slots of 3) and
 * their rows in fx. */
void tsr_km_far_insert(double *far, double *fx, int64_t k, int64_t d, double dist, int64_t idx, int64_t lab, const double *row)
{
  int64_t p = k - 1;
  if (far[3 * p + 1] >= 0 && (far[3 * p] > dist || (far[3 * p] == dist && far[3 * p + 1] < (double)idx))) return;
  while (p > 0 && (far[3 * (p - 1) + 1] < 0 || far[3 * (p - 1)] < dist || (far[3 * (p - 1)] == dist && far[3 * (p - 1) + 1] > (double)idx))) {
    memcpy(far + 3 * p, far + 3 * (p - 1), 3 * sizeof *far);
    memcpy(fx + p * d, fx + (p - 1) * d, (size_t)d * sizeof *fx);
    p--;
  }
  far[3 * p] = dist, far[3 * p + 1] = (double)idx, far[3 * p + 2] = (double)lab;
  memcpy(fx + p * d, row, (size_t)d * sizeof *fx);
}

/* dist[q] = Σ_j (row[j] − ct[j·kp + q])² for q < kp (kp a multiple of 8,
 * the padding columns zero), the terms added in order of j — one center
 * at a time gives the same bits — eight centers a vector. Cloned for
 * AVX-512 and AVX2 and picked at load time (the build targets no
 * particular CPU; -ffp-contract=off keeps it FMA-free). */
typedef double km_v8 __attribute__((vector_size(64)));

/* acc[v] += (x − c[v])² for the n (<= 4) vectors of centers at c: the
 * four sums are independent, so the adds overlap instead of waiting on
 * one another. */
#define KM_ACC(n)                                                                 \
  for (int64_t j = 0; j < d; j++) {                                               \
    km_v8 x = {row[j], row[j], row[j], row[j], row[j], row[j], row[j], row[j]};    \
    for (int v = 0; v < (n); v++) {                                               \
      km_v8 c, t;                                                                 \
      memcpy(&c, ct + j * kp + q0 + 8 * v, sizeof c);                             \
      t = x - c;                                                                  \
      acc[v] += t * t;                                                            \
    }                                                                             \
  }

/* Cloned per ISA under GCC. Not under clang (the fuzz build): clang 14
 * emits no symbol other translation units can call for a target_clones
 * function (kmeans_step.c calls this one). */
#if !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void tsr_km_row_dists(const double *row, const double *ct, int64_t d, int64_t kp, double *dist)
{
  for (int64_t q0 = 0; q0 < kp;) {
    km_v8 acc[4] = {{0}, {0}, {0}, {0}};
    int64_t left = (kp - q0) / 8;
    if (left >= 4) {
      KM_ACC(4)
    } else if (left == 3) {
      KM_ACC(3)
    } else if (left == 2) {
      KM_ACC(2)
    } else {
      KM_ACC(1)
    }
    int n = left >= 4 ? 4 : (int)left;
    memcpy(dist + q0, acc, (size_t)n * sizeof acc[0]);
    q0 += 8 * n;
  }
}

static int partial_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t k = 0, row0 = 0;
  const double *c = NULL;
  size_t nc = 0;
  bool want_labels = false;
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "row0", &row0, NULL);
  get_centers(p, &c, &nc, NULL);
  if (tsr_params_find(p, "labels") != NULL) tsr_params_get_bool(p, "labels", &want_labels, NULL);
  int64_t rows = in[0].meta.shape[0], d = in[0].meta.shape[1];
  /* Centers transposed (ct[j·kp + q]) so the distances to all k centers
   * advance together, one vector lane per center: each (row, center) sum
   * still adds its d terms in order j = 0.., the same value as one center
   * at a time, at several times the speed. */
  int64_t kp = (k + 7) / 8 * 8;
  double *row = malloc((size_t)(d + 1) * sizeof *row), *ct = calloc((size_t)(kp * d + 1), sizeof *ct);
  double *dist = malloc((size_t)kp * sizeof *dist);
  if (row == NULL || ct == NULL || dist == NULL) {
    free(row), free(ct), free(dist);
    return tsr_fail(err, TSR_ENOMEM, "kmeans_partial: out of memory");
  }
  for (int64_t q = 0; q < k; q++)
    for (int64_t j = 0; j < d; j++) ct[j * kp + q] = c[q * d + j];
  double *o = out->data, *sums = o, *counts = o + k * d, *inertia = counts + k, *far = inertia + 1, *fx = far + 3 * k;
  if (!want_labels) {
    memset(o, 0, (size_t)KM_LEN(k, d) * sizeof *o);
    for (int64_t j = 0; j < k; j++) far[3 * j + 1] = -1;
  }
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t j = 0; j < d; j++) row[j] = xval(&in[0], r * d + j);
    int64_t best = 0;
    double bd = INFINITY;
    tsr_km_row_dists(row, ct, d, kp, dist);
    for (int64_t q = 0; q < k; q++)
      if (dist[q] < bd) bd = dist[q], best = q;
    if (!isfinite(bd)) {
      free(row), free(ct), free(dist);
      return tsr_fail(err, TSR_EINVAL, "kmeans_partial: row %lld holds a NaN or infinity", (long long)(row0 + r));
    }
    if (want_labels) {
      ((int32_t *)out->data)[r] = (int32_t)best;
      continue;
    }
    for (int64_t j = 0; j < d; j++) sums[best * d + j] += row[j];
    counts[best] += 1, *inertia += bd;
    tsr_km_far_insert(far, fx, k, d, bd, row0 + r, best, row);
  }
  free(row), free(ct), free(dist);
  return 0;
}

/* ---------- kmeans_combine ---------- */

static int combine_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t k, d;
  int rc = km_int("kmeans_combine", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_combine", p, "d", &d, err);
  if (rc != 0) return rc;
  int64_t len = KM_LEN(k, d);
  for (int i = 0; i < n; i++)
    if (in[i].ndim != 1 || in[i].dtype != TSR_F64 || in[i].shape[0] != len)
      return tsr_fail(err, TSR_ESHAPE, "kmeans_combine: input %d is %s, not a partial of %lld", i, tsr_k_str(&in[i]).s, (long long)len);
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

static int combine_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)err;
  int64_t k = 0, d = 0;
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "d", &d, NULL);
  double *o = out->data, *far = o + k * d + k + 1, *fx = far + 3 * k;
  memset(o, 0, (size_t)KM_LEN(k, d) * sizeof *o);
  for (int64_t j = 0; j < k; j++) far[3 * j + 1] = -1;
  for (int i = 0; i < n; i++) {
    const double *s = in[i].data, *sf = s + k * d + k + 1, *sx = sf + 3 * k;
    for (int64_t j = 0; j < k * d + k + 1; j++) o[j] += s[j];
    for (int64_t j = 0; j < k && sf[3 * j + 1] >= 0; j++)
      tsr_km_far_insert(far, fx, k, d, sf[3 * j], (int64_t)sf[3 * j + 1], (int64_t)sf[3 * j + 2], sx + j * d);
  }
  return 0;
}

/* ---------- kmeans_pp ---------- */

static int pp_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t k, seed, rows = 0;
  int rc = km_int("kmeans_pp", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_pp", p, "seed", &seed, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n; i++) {
    if (in[i].ndim != 2 || !tsr_k_is_float(in[i].dtype) || in[i].shape[1] != in[0].shape[1] || in[i].dtype != in[0].dtype)
      return tsr_fail(err, TSR_ESHAPE, "kmeans_pp: chunk %d is %s", i, tsr_k_str(&in[i]).s);
    rows += in[i].shape[0];
  }
  if (k < 1 || k > rows) return tsr_fail(err, TSR_EINVAL, "kmeans_pp: k = %lld outside 1..%lld", (long long)k, (long long)rows);
  int64_t shape[2] = {k, in[0].shape[1]};
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

static uint64_t sm64(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double d2(const double *a, const double *b, int64_t d)
{
  double s = 0;
  for (int64_t j = 0; j < d; j++) s += (a[j] - b[j]) * (a[j] - b[j]);
  return s;
}

/* The first index whose running sum of w exceeds v (np.searchsorted on
 * the cumulative sum), clipped to n − 1. */
static int64_t pick(const double *cum, int64_t n, double v)
{
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (cum[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int pp_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  int64_t k = 0, seed = 0, n = 0, d = in[0].meta.shape[1];
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "seed", &seed, NULL);
  for (int i = 0; i < n_in; i++) n += in[i].meta.shape[0];
  int trials = 2 + (int)log((double)k);
  double *x = malloc((size_t)(n * d) * sizeof *x), *closest = malloc((size_t)n * sizeof *closest);
  double *cand = malloc((size_t)(trials * n) * sizeof *cand), *cum = malloc((size_t)n * sizeof *cum);
  if (!x || !closest || !cand || !cum) {
    free(x), free(closest), free(cand), free(cum);
    return tsr_fail(err, TSR_ENOMEM, "kmeans_pp: out of memory for %lld x %lld", (long long)n, (long long)d);
  }
  for (int i = 0, at = 0; i < n_in; i++) {
    tsr_k_load_f64(in[i].meta.dtype, in[i].data, (size_t)(in[i].meta.shape[0] * d), x + at * d);
    at += (int)in[i].meta.shape[0];
  }
  uint64_t s = (uint64_t)seed ^ 0x6b6d65616e732b2bull;
  double *centers = out->data, pot = 0;
  int64_t first = (int64_t)(((unsigned __int128)sm64(&s) * (uint64_t)n) >> 64);
  memcpy(centers, x + first * d, (size_t)d * sizeof *x);
  for (int64_t i = 0; i < n; i++) closest[i] = d2(x + i * d, centers, d), pot += closest[i];
  for (int64_t c = 1; c < k; c++) {
    double run = 0, best_pot = INFINITY;
    int best = 0;
    int64_t ids[64];
    for (int64_t i = 0; i < n; i++) run += closest[i], cum[i] = run;
    for (int t = 0; t < trials && t < 64; t++) {
      ids[t] = pick(cum, n, (double)(sm64(&s) >> 11) * 0x1.0p-53 * pot);
      double tp = 0;
      for (int64_t i = 0; i < n; i++) {
        double v = d2(x + i * d, x + ids[t] * d, d);
        cand[t * n + i] = v < closest[i] ? v : closest[i];
        tp += cand[t * n + i];
      }
      if (tp < best_pot) best_pot = tp, best = t;
    }
    pot = best_pot;
    memcpy(closest, cand + best * n, (size_t)n * sizeof *closest);
    memcpy(centers + c * d, x + ids[best] * d, (size_t)d * sizeof *x);
  }
  free(x), free(closest), free(cand), free(cum);
  return 0;
}

/* ---------- kmeans_centers ---------- */

/* No inputs; params values (k·d floats), k: f64 [k, d] of the values. */
static int centers_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  int64_t k;
  const tsr_param *v = tsr_params_find(p, "values");
  int rc = km_int("kmeans_centers", p, "k", &k, err);
  if (rc != 0) return rc;
  if (v == NULL || v->type != TSR_PARAM_FLOATS || k < 1 || v->n % (size_t)k != 0)
    return tsr_fail(err, TSR_EINVAL, "kmeans_centers: needs 'values', k rows of floats");
  int64_t shape[2] = {k, (int64_t)v->n / k};
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

static int centers_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n, (void)err;
  memcpy(out->data, tsr_params_find(p, "values")->floats, out->nbytes);
  return 0;
}

const tsr_op_def tsr_op_kmeans_centers = {"kmeans_centers", 0, 0, centers_infer, centers_cpu, false, NULL};
const tsr_op_def tsr_op_kmeans_partial = {"kmeans_partial", 1, 1, partial_infer, partial_cpu, false, NULL};
const tsr_op_def tsr_op_kmeans_combine = {"kmeans_combine", 1, -1, combine_infer, combine_cpu, false, NULL};
const tsr_op_def tsr_op_kmeans_pp = {"kmeans_pp", 1, -1, pp_infer, pp_cpu, false, NULL};
