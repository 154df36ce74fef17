/* scanpy-style preprocessing (tessera/singlecell.h) from the sparse
 * primitives (sparse.c) and the linear algebra (linalg.c).
 *
 * The matrix stays on the workers; what decides a shape or a threshold
 * (per-cell and per-gene counts, the HVG statistics, the median total) is
 * a vector computed there and brought here, as scanpy computes it in
 * NumPy/pandas. The HVG binning below follows scanpy 1.11's
 * _highly_variable_genes_single_batch and pandas.cut step by step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/singlecell.h"

#define TSR_API __attribute__((visibility("default")))

/* Computes a 1-D f64 array into a malloc'd buffer. */
static int fetch_vector(tsr_array_ctx *ctx, const tsr_array *v, int timeout_ms, double **out_p)
{
  size_t n = (size_t)v->shape[0];
  double *buf = malloc(sizeof *buf * (n + 1));
  if (buf == NULL) return client_fail(TSR_ENOMEM, "singlecell: out of memory");
  int rc = tsr_compute(ctx, v, buf, sizeof *buf * n, timeout_ms);
  if (rc != 0) return free(buf), rc;
  *out_p = buf;
  return 0;
}

/* Keeps rows (axis 1 counts) or columns (axis 0) with at least min stored values. */
static int filter_axis(tsr_array_ctx *ctx, const tsr_array *x, int axis, int64_t min, int timeout_ms, tsr_array **out_p,
                       tsr_sc_kept *kept_p, const char *what)
{
  if (ctx == NULL || x == NULL || out_p == NULL || kept_p == NULL) return client_fail(TSR_EINVAL, "%s: NULL argument", what);
  tsr_array *counts = NULL;
  double *c = NULL;
  int rc = tsr_sparse_reduce(ctx, x, axis == 0 ? 1 : 0, TSR_SPARSE_NNZ, &counts);
  if (rc == 0) rc = fetch_vector(ctx, counts, timeout_ms, &c);
  if (rc != 0) return rc;
  int64_t n = counts->shape[0], kept = 0;
  uint8_t *mask = malloc((size_t)n + 1);
  int64_t *index = malloc(sizeof *index * (size_t)(n + 1));
  if (mask == NULL || index == NULL) rc = client_fail(TSR_ENOMEM, "%s: out of memory", what);
  for (int64_t i = 0; rc == 0 && i < n; i++) {
    mask[i] = c[i] >= (double)min;
    if (mask[i]) index[kept++] = i;
  }
  if (rc == 0) rc = tsr_sparse_select(ctx, x, axis == 0 ? mask : NULL, axis == 0 ? NULL : mask, 0, out_p);
  free(mask), free(c);
  if (rc != 0) return free(index), rc;
  kept_p->index = index, kept_p->n = kept;
  return 0;
}

TSR_API int tsr_filter_cells(tsr_array_ctx *ctx, const tsr_array *x, int64_t min_genes, int timeout_ms, tsr_array **out_p,
                             tsr_sc_kept *kept_p)
{
  return filter_axis(ctx, x, 0, min_genes, timeout_ms, out_p, kept_p, "filter_cells");
}

TSR_API int tsr_filter_genes(tsr_array_ctx *ctx, const tsr_array *x, int64_t min_cells, int timeout_ms, tsr_array **out_p,
                             tsr_sc_kept *kept_p)
{
  return filter_axis(ctx, x, 1, min_cells, timeout_ms, out_p, kept_p, "filter_genes");
}

static int cmp_float(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* np.median of the float32 totals (scanpy's CSR path takes every cell):
 * the middle value, or the float32 mean of the two middle ones. */
static double median_f32(const double *t, int64_t n)
{
  float *f = malloc(sizeof *f * (size_t)(n + 1));
  if (f == NULL) return NAN;
  for (int64_t i = 0; i < n; i++) f[i] = (float)t[i];
  qsort(f, (size_t)n, sizeof *f, cmp_float);
  float m = n % 2 ? f[n / 2] : (f[n / 2 - 1] + f[n / 2]) / 2.0f;
  free(f);
  return m;
}

TSR_API int tsr_normalize_total(tsr_array_ctx *ctx, const tsr_array *x, double target_sum, int timeout_ms, tsr_array **out_p,
                                double *used_target_p)
{
  if (ctx == NULL || x == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "normalize_total: NULL argument");
  tsr_array *totals = NULL;
  double *t = NULL;
  int rc = tsr_sparse_reduce(ctx, x, 1, TSR_SPARSE_SUM, &totals);
  if (rc == 0 && !(target_sum > 0)) {
    rc = fetch_vector(ctx, totals, timeout_ms, &t);
    if (rc == 0) target_sum = median_f32(t, totals->shape[0]);
    free(t);
    if (rc == 0 && !(target_sum > 0))
      rc = client_fail(TSR_EINVAL, "normalize_total: the median of the cells' totals is %g; give target_sum", target_sum);
  }
  if (rc == 0) rc = tsr_sparse_normalize_rows(ctx, x, totals, target_sum, TSR_F32, out_p);
  if (rc == 0 && used_target_p != NULL) *used_target_p = target_sum;
  return rc;
}

TSR_API int tsr_log1p(tsr_array_ctx *ctx, const tsr_array *x, tsr_array **out_p)
{
  if (x != NULL && x->encoding != TSR_ENC_CSR) return tsr_ufunc(ctx, x, "log1p", out_p);
  return tsr_sparse_map(ctx, x, "log1p", 1.0, TSR_DTYPE_NONE, out_p);
}

/* ---------- highly variable genes (seurat flavor) ---------- */

TSR_API void tsr_hvg_result_free(tsr_hvg_result *r)
{
  if (r == NULL) return;
  free(r->means), free(r->dispersions), free(r->dispersions_norm), free(r->highly_variable);
  memset(r, 0, sizeof *r);
}

/* pandas.cut(means, n_bins) codes: equal-width edges from np.linspace,
 * the first lowered by 0.1% of the range, bins closed on the right. */
static void mean_bins(const double *m, int64_t n, int n_bins, int *code)
{
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) mn = m[i] < mn ? m[i] : mn, mx = m[i] > mx ? m[i] : mx;
  double edges[1025];
  if (mn == mx) {  /* pandas widens a zero range by 0.1% on each side */
    double adj = mn != 0 ? fabs(mn) * 0.001 : 0.001;
    mn -= adj, mx += adj;
  }
  double step = (mx - mn) / n_bins;
  for (int b = 0; b <= n_bins; b++) edges[b] = b * step + mn;
  edges[n_bins] = mx;
  edges[0] -= (mx - mn) * 0.001;
  for (int64_t i = 0; i < n; i++) {
    int b = 0;  /* searchsorted(edges, x, 'left'): the first edge >= x */
    while (b <= n_bins && edges[b] < m[i]) b++;
    code[i] = b - 1;
  }
}

/* Per-bin mean and std (ddof 1) of the non-NaN dispersions, with scanpy's
 * rule for a bin whose std is undefined (one gene): mean 0, std = mean. */
static void bin_stats(const double *disp, const int *code, int64_t n, int n_bins, double *avg, double *dev)
{
  for (int b = 0; b < n_bins; b++) {
    double sum = 0, ss = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
      if (code[i] == b && !isnan(disp[i])) sum += disp[i], count++;
    double mean = count > 0 ? sum / (double)count : NAN;
    for (int64_t i = 0; i < n; i++)
      if (code[i] == b && !isnan(disp[i])) ss += (disp[i] - mean) * (disp[i] - mean);
    double sd = count > 1 ? sqrt(ss / (double)(count - 1)) : NAN;
    if (isnan(sd)) sd = mean, mean = 0;
    avg[b] = mean, dev[b] = sd;
  }
}

static int cmp_desc(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

/* scanpy's _subset_genes for n_top_genes: the n-th highest non-NaN
 * normalized dispersion is the cutoff; NaN counts as -inf. */
static int64_t top_genes(const double *norm, int64_t n, int64_t n_top, uint8_t *flag)
{
  double *v = malloc(sizeof *v * (size_t)(n + 1));
  int64_t m = 0, kept = 0;
  if (v == NULL) return -1;
  for (int64_t i = 0; i < n; i++)
    if (!isnan(norm[i])) v[m++] = norm[i];
  if (n_top > m) n_top = m;
  qsort(v, (size_t)m, sizeof *v, cmp_desc);
  double cut = n_top > 0 ? v[n_top - 1] : INFINITY;
  for (int64_t i = 0; i < n; i++) {
    flag[i] = !isnan(norm[i]) && norm[i] >= cut;
    kept += flag[i];
  }
  free(v);
  return kept;
}

static int hvg_alloc(tsr_hvg_result *r, int64_t n)
{
  memset(r, 0, sizeof *r);
  r->n_genes = n;
  r->means = malloc(sizeof(double) * (size_t)(n + 1));
  r->dispersions = malloc(sizeof(double) * (size_t)(n + 1));
  r->dispersions_norm = malloc(sizeof(double) * (size_t)(n + 1));
  r->highly_variable = malloc((size_t)n + 1);
  if (r->means && r->dispersions && r->dispersions_norm && r->highly_variable) return 0;
  tsr_hvg_result_free(r);
  return client_fail(TSR_ENOMEM, "highly_variable_genes: out of memory");
}

/* Dispersions, bins and flags from the column mean and var of expm1(x). */
static int hvg_from_stats(const double *mean, const double *var, const tsr_hvg_opts *o, tsr_hvg_result *r)
{
  int64_t n = r->n_genes;
  int *code = malloc(sizeof *code * (size_t)(n + 1));
  double avg[1024], dev[1024];
  if (code == NULL) return client_fail(TSR_ENOMEM, "highly_variable_genes: out of memory");
  for (int64_t i = 0; i < n; i++) {
    double m = mean[i] == 0 ? 1e-12 : mean[i], d = var[i] / m;
    r->dispersions[i] = d == 0 ? NAN : log(d);
    r->means[i] = log1p(m);
  }
  mean_bins(r->means, n, o->n_bins, code);
  bin_stats(r->dispersions, code, n, o->n_bins, avg, dev);
  for (int64_t i = 0; i < n; i++)
    r->dispersions_norm[i] = code[i] < 0 ? NAN : (r->dispersions[i] - avg[code[i]]) / dev[code[i]];
  free(code);
  r->n_highly_variable = top_genes(r->dispersions_norm, n, o->n_top_genes, r->highly_variable);
  return r->n_highly_variable < 0 ? client_fail(TSR_ENOMEM, "highly_variable_genes: out of memory") : 0;
}

TSR_API int tsr_highly_variable_genes(tsr_array_ctx *ctx, const tsr_array *x, const tsr_hvg_opts *opts, int timeout_ms,
                                      tsr_hvg_result *result_p)
{
  tsr_hvg_opts o = TSR_HVG_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  if (ctx == NULL || x == NULL || result_p == NULL) return client_fail(TSR_EINVAL, "highly_variable_genes: NULL argument");
  if (o.n_bins < 1 || o.n_bins > 1000 || o.n_top_genes < 1)
    return client_fail(TSR_EINVAL, "highly_variable_genes: n_bins %d outside 1..1000 or n_top_genes %lld < 1", o.n_bins,
                       (long long)o.n_top_genes);
  tsr_array *e = NULL, *mean = NULL, *var = NULL;
  double *m = NULL, *v = NULL;
  tsr_hvg_result r;
  int rc = tsr_sparse_map(ctx, x, "expm1", 1.0, TSR_DTYPE_NONE, &e);  /* np.expm1 keeps float32 */
  if (rc == 0) rc = tsr_sparse_mean_var(ctx, e, 1, &mean, &var);
  if (rc == 0) rc = fetch_vector(ctx, mean, timeout_ms, &m);
  if (rc == 0) rc = fetch_vector(ctx, var, timeout_ms, &v);
  if (rc == 0) rc = hvg_alloc(&r, mean->shape[0]);
  if (rc == 0 && (rc = hvg_from_stats(m, v, &o, &r)) != 0) tsr_hvg_result_free(&r);
  free(m), free(v);
  if (rc == 0) *result_p = r;
  return rc;
}
