/* kernels/cpu/kmeans_update.c — the model of the bounded k-means ops
 * (kmeans_step.c describes its layout and the states'; docs/cluster.md,
 * "k-means"): kmeans_init makes the first, kmeans_update the next from
 * the steps' states (tsr_km_update_model, which kmeans_loop calls too);
 * kmeans_labels reads a state's labels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans.h"

static int km_int(const char *op, const tsr_params *p, const char *name, int64_t *v, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

/* half[c] = a lower bound of half the distance from c to its nearest
 * other center (infinite for k = 1). */
static void half_dists(const double *centers, int64_t k, int64_t d, double *half)
{
  for (int64_t c = 0; c < k; c++) half[c] = INFINITY;
  for (int64_t c = 0; c < k; c++)
    for (int64_t o = c + 1; o < k; o++) {
      double h = KM_DOWN(sqrt(exact_d2(centers + c * d, centers + o * d, d)) / 2);
      if (h < half[c]) half[c] = h;
      if (h < half[o]) half[o] = h;
    }
}

/* ---------- kmeans_init: the first model ---------- */

static int init_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  int64_t k, max_iter;
  double tol = 0;
  const tsr_param *v = tsr_params_find(p, "values");
  int rc = km_int("kmeans_init", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_init", p, "max_iter", &max_iter, err);
  if (rc == 0) rc = tsr_params_get_float(p, "tol", &tol, err);
  if (rc != 0) return tsr_k_param_fail("kmeans_init", rc, err);
  if (v == NULL || v->type != TSR_PARAM_FLOATS || k < 1 || v->n % (size_t)k != 0)
    return tsr_fail(err, TSR_EINVAL, "kmeans_init: needs 'values', k = %lld rows of floats", (long long)k);
  if (max_iter < 1 || !(tol >= 0))
    return tsr_fail(err, TSR_EINVAL, "kmeans_init: max_iter %lld must be >= 1 and tol %g >= 0", (long long)max_iter, tol);
  int64_t len = KM_MODEL_LEN(k, (int64_t)v->n / k);
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

static int init_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n, (void)err;
  int64_t k = 0, max_iter = 0;
  double tol = 0, *m = out->data;
  const tsr_param *v = tsr_params_find(p, "values");
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "max_iter", &max_iter, NULL);
  tsr_params_get_float(p, "tol", &tol, NULL);
  int64_t d = (int64_t)v->n / k;
  memset(m, 0, out->nbytes);
  m[M_TOL] = tol, m[M_TOL_ABS] = -1, m[M_MAX_ITER] = (double)max_iter;
  memcpy(m + KM_HDR, v->floats, v->n * sizeof *m);
  half_dists(m + KM_HDR, k, d, m + KM_HDR + k * d + k);
  return 0;
}

/* ---------- kmeans_update: new centers from every chunk's state ---------- */

static int update_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t k, d;
  int rc = km_int("kmeans_update", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_update", p, "d", &d, err);
  if (rc != 0) return rc;
  int64_t len = KM_MODEL_LEN(k, d), head = KM_STATE_HEAD(k, d);
  if (in[0].ndim != 1 || in[0].dtype != TSR_F64 || in[0].shape[0] != len)
    return tsr_fail(err, TSR_ESHAPE, "kmeans_update: input 0 is %s, not a model of k = %lld x %lld", tsr_k_str(&in[0]).s,
                    (long long)k, (long long)d);
  for (int i = 1; i < n; i++)
    if (in[i].ndim != 1 || in[i].dtype != TSR_F64 || in[i].shape[0] < head || KM_STATE_LEN(k, d, KM_STATE_ROWS(k, d, in[i].shape[0])) != in[i].shape[0])
      return tsr_fail(err, TSR_ESHAPE, "kmeans_update: input %d is %s, not a chunk's state", i, tsr_k_str(&in[i]).s);
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

/* sklearn's tol: tol × the mean of the columns' variances, Σ_j (E[x_j²] −
 * E[x_j]²) / d. A state carries the column sums and the squares' total
 * alone (in its first square slot, the rest 0: kmeans_step's first_cols),
 * which is all this sum needs. */
static void update_tol(double *m, const tsr_buf *in, int n, int64_t k, int64_t d)
{
  double rows = 0, v = 0;
  for (int i = 1; i < n; i++) rows += (double)KM_STATE_ROWS(k, d, in[i].meta.shape[0]);
  for (int64_t j = 0; j < d; j++) {
    double s = 0, sq = 0;
    for (int i = 1; i < n; i++) {
      const double *c = (const double *)in[i].data + KM_LEN(k, d);
      s += c[j], sq += c[d + j];
    }
    v += sq / rows - (s / rows) * (s / rows);
  }
  m[M_TOL_ABS] = m[M_TOL] * v / (double)d, m[M_ROWS] = rows;
}

/* Moves empty clusters to the farthest points (sklearn's
 * _relocate_empty_clusters_dense) in part; false when a state lacks the
 * farthest points (not a full pass): the step must then be redone. */
static bool relocate(double *part, const tsr_buf *in, int n, int64_t k, int64_t d)
{
  double *sums = part, *counts = part + k * d, *far = counts + k + 1, *fx = far + 3 * k;
  for (int64_t j = 0; j < k; j++) far[3 * j + 1] = -1;
  for (int i = 1; i < n; i++) {
    const double *sf = (const double *)in[i].data + k * d + k + 1, *sx = sf + 3 * k;
    if (sf[1] < 0) return false;
    for (int64_t j = 0; j < k && sf[3 * j + 1] >= 0; j++)
      tsr_km_far_insert(far, fx, k, d, sf[3 * j], (int64_t)sf[3 * j + 1], (int64_t)sf[3 * j + 2], sx + j * d);
  }
  int64_t next_far = 0;
  for (int64_t c = 0; c < k; c++) {
    if (counts[c] > 0 || next_far >= k || far[3 * next_far + 1] < 0) continue;
    int64_t from = (int64_t)far[3 * next_far + 2];
    const double *p = fx + next_far * d;
    for (int64_t j = 0; j < d; j++) sums[from * d + j] -= p[j], sums[c * d + j] = p[j];
    counts[from] -= 1, counts[c] = 1;
    next_far++;
  }
  return true;
}

/* The centers from part (sums, counts); returns Σ |new − old|² and
 * writes each center's move (rounded up) to shift. */
static double new_centers(const double *part, int64_t k, int64_t d, double *centers, double *shift)
{
  const double *sums = part, *counts = part + k * d;
  double total = 0;
  for (int64_t c = 0; c < k; c++) {
    double moved = 0;
    for (int64_t j = 0; j < d; j++) {
      double old = centers[c * d + j], now = counts[c] > 0 ? sums[c * d + j] / counts[c] : old;
      moved += (now - old) * (now - old);
      centers[c * d + j] = now;
    }
    total += moved, shift[c] = KM_UP(sqrt(moved));
  }
  return total;
}

static int update_step(double *m, const tsr_buf *in, int n, int64_t k, int64_t d, tsr_errbuf *err)
{
  double *part = calloc((size_t)KM_LEN(k, d), sizeof *part), *counts = part ? part + k * d : NULL;
  if (part == NULL) return tsr_fail(err, TSR_ENOMEM, "kmeans_update: out of memory");
  for (int i = 1; i < n; i++)
    for (int64_t j = 0; j < k * d + k; j++) part[j] += ((const double *)in[i].data)[j];
  bool empty = false;
  for (int64_t c = 0; c < k; c++) empty |= counts[c] == 0;
  double *centers = m + KM_HDR, *shift = centers + k * d;
  if (empty && !relocate(part, in, n, k, d)) {
    m[M_NEED_FAR] = 1;  /* the same centers again, with a full pass that finds the farthest points */
    memset(shift, 0, (size_t)k * sizeof *shift);
    free(part);
    return 0;
  }
  double total = new_centers(part, k, d, centers, shift);
  half_dists(centers, k, d, shift + k);
  /* the cumulative drifts of the new epoch */
  int64_t t = (int64_t)m[M_IT];
  double *drift = shift + 2 * k, *mdrift = drift + KM_EPOCHS * k, *now = drift + ((t + 1) % KM_EPOCHS) * k, top = 0;
  const double *was = drift + (t % KM_EPOCHS) * k;
  for (int64_t c = 0; c < k; c++) now[c] = was[c] + shift[c], top = shift[c] > top ? shift[c] : top;
  mdrift[(t + 1) % KM_EPOCHS] = mdrift[t % KM_EPOCHS] + top;
  m[M_NEED_FAR] = 0, m[M_IT] += 1;
  if (total <= m[M_TOL_ABS] || m[M_IT] >= m[M_MAX_ITER]) m[M_PHASE] = PH_CONVERGED;
  free(part);
  return 0;
}

/* The model m (a copy of the last) after the steps whose states are
 * in[1..n): the next centers, or done with the inertia after the final
 * E-step. */
int tsr_km_update_model(double *m, const tsr_buf *in, int n, int64_t k, int64_t d, tsr_errbuf *err)
{
  if (m[M_PHASE] == PH_DONE) return 0;
  if (m[M_PHASE] == PH_CONVERGED) {  /* the steps computed the final labels and inertia */
    double inertia = 0;
    for (int i = 1; i < n; i++) inertia += ((const double *)in[i].data)[k * d + k];
    m[M_INERTIA] = inertia, m[M_PHASE] = PH_DONE;
    return 0;
  }
  if (m[M_TOL_ABS] < 0) update_tol(m, in, n, k, d);
  return update_step(m, in, n, k, d, err);
}

static int update_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  int64_t k = 0, d = 0;
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "d", &d, NULL);
  double *m = out->data;
  memcpy(m, in[0].data, out->nbytes);
  return tsr_km_update_model(m, in, n, k, d, err);
}

/* ---------- kmeans_labels: a state's labels ---------- */

/* Rows [start, start + rows) of the state (params start, rows; default
 * all of them) that begins `offset` values into the input (default 0; a
 * kmeans_loop output: its model's length). */
static int labels_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)n;
  int64_t k, d, start = 0, rows = -1, offset = 0;
  int rc = km_int("kmeans_labels", p, "k", &k, err);
  if (rc == 0) rc = km_int("kmeans_labels", p, "d", &d, err);
  if (rc == 0 && tsr_params_find(p, "start") != NULL) rc = km_int("kmeans_labels", p, "start", &start, err);
  if (rc == 0 && tsr_params_find(p, "rows") != NULL) rc = km_int("kmeans_labels", p, "rows", &rows, err);
  if (rc == 0 && tsr_params_find(p, "offset") != NULL) rc = km_int("kmeans_labels", p, "offset", &offset, err);
  if (rc != 0) return rc;
  int64_t head = KM_STATE_HEAD(k, d), len = in[0].shape[0] - offset;
  if (in[0].ndim != 1 || in[0].dtype != TSR_F64 || offset < 0 || len < head || KM_STATE_LEN(k, d, KM_STATE_ROWS(k, d, len)) != len)
    return tsr_fail(err, TSR_ESHAPE, "kmeans_labels: input is %s, not a chunk's state %lld values in", tsr_k_str(&in[0]).s,
                    (long long)offset);
  int64_t all = KM_STATE_ROWS(k, d, len);
  if (rows < 0) rows = all - start;
  if (start < 0 || rows < 0 || start + rows > all)
    return tsr_fail(err, TSR_EINVAL, "kmeans_labels: rows [%lld, %lld) outside the state's %lld", (long long)start,
                    (long long)(start + rows), (long long)all);
  tsr_k_meta_set(out, TSR_I32, 1, &rows);
  return 0;
}

static int labels_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n, (void)err;
  int64_t k = 0, d = 0, start = 0, offset = 0;
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "d", &d, NULL);
  if (tsr_params_find(p, "start") != NULL) tsr_params_get_int(p, "start", &start, NULL);
  if (tsr_params_find(p, "offset") != NULL) tsr_params_get_int(p, "offset", &offset, NULL);
  const km_row *st = (const km_row *)((const double *)in[0].data + offset + KM_STATE_HEAD(k, d)) + start;
  for (int64_t r = 0; r < out->meta.shape[0]; r++) ((int32_t *)out->data)[r] = st[r].label;
  return 0;
}

const tsr_op_def tsr_op_kmeans_init = {"kmeans_init", 0, 0, init_infer, init_cpu, false, NULL};
const tsr_op_def tsr_op_kmeans_update = {"kmeans_update", 2, -1, update_infer, update_cpu, false, NULL};
const tsr_op_def tsr_op_kmeans_labels = {"kmeans_labels", 1, 1, labels_infer, labels_cpu, false, NULL};
