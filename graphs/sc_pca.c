/* scanpy's scale and PCA (tessera/singlecell.h).
 *
 * PCA centers x implicitly: Z = astype(x, f64) − mean is a lazy chain of
 * per-column steps, and for CSR x every product with Z reads the CSR
 * chunks (csr_matmul, graphs/chain.c), so the randomized SVD never makes
 * a dense cells x genes matrix. The exact solver decomposes Z's dense
 * blocks (TSQR). Variances follow scanpy: s² / (n − 1), ratio over the
 * total variance of x (the sum of the per-gene variances, ddof 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/singlecell.h"

#define TSR_API __attribute__((visibility("default")))

/* Column means and variances (ddof 1): sparse for CSR x, dense otherwise. */
static int column_stats(tsr_array_ctx *ctx, const tsr_array *x, tsr_array **mean_p, tsr_array **var_p)
{
  if (x->encoding == TSR_ENC_CSR) return tsr_sparse_mean_var(ctx, x, 1, mean_p, var_p);
  tsr_array *xf = NULL, *c = NULL, *sq = NULL, *ss = NULL;
  int rc = tsr_astype(ctx, x, TSR_F64, &xf);
  if (rc == 0) rc = tsr_mean(ctx, xf, 0, 0, mean_p);
  if (rc == 0) rc = tsr_sub(ctx, xf, *mean_p, &c);
  if (rc == 0) rc = tsr_ufunc(ctx, c, "square", &sq);
  if (rc == 0) rc = tsr_sum(ctx, sq, 0, 0, &ss);
  if (rc == 0) rc = tsr_scale(ctx, ss, 1.0 / (double)(x->shape[0] - 1), 0.0, var_p);
  return rc;
}

TSR_API int tsr_sc_scale(tsr_array_ctx *ctx, const tsr_array *x, bool zero_center, double max_value, int timeout_ms,
                         tsr_array **out_p)
{
  if (ctx == NULL || x == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "scale: NULL argument");
  int rc = garray_check_2d(x, "scale");
  if (rc == 0 && x->shape[0] < 2) rc = client_fail(TSR_ESHAPE, "scale: needs at least 2 rows");
  tsr_array *mean = NULL, *var = NULL, *sd = NULL, *xf = NULL, *c = NULL, *z = NULL, *cl = NULL;
  double *v = NULL;
  int64_t n = x->shape[1];
  if (rc == 0) rc = column_stats(ctx, x, &mean, &var);
  if (rc == 0 && (v = malloc(sizeof *v * (size_t)n)) == NULL) rc = client_fail(TSR_ENOMEM, "scale: out of memory");
  if (rc == 0) rc = tsr_compute(ctx, var, v, sizeof *v * (size_t)n, timeout_ms);
  for (int64_t j = 0; rc == 0 && j < n; j++) v[j] = sqrt(v[j]) == 0 ? 1.0 : sqrt(v[j]);  /* scanpy: std 0 → 1 */
  if (rc == 0) rc = tsr_from_values(ctx, v, n, &sd);
  free(v);
  if (rc == 0) rc = tsr_astype(ctx, x, TSR_F64, &xf);
  if (rc == 0) rc = zero_center ? tsr_sub(ctx, xf, mean, &c) : 0;
  if (rc == 0) rc = tsr_div(ctx, zero_center ? c : xf, sd, &z);
  if (rc == 0 && max_value > 0) rc = tsr_clip(ctx, z, zero_center ? -max_value : -INFINITY, max_value, &cl);
  if (rc == 0) rc = tsr_astype(ctx, cl ? cl : z, TSR_F32, out_p);
  return rc;
}

/* ---------- PCA ---------- */

static int first_columns(tsr_array_ctx *ctx, const tsr_array *a, int64_t k, tsr_array **out_p)
{
  int64_t start[2] = {0, 0}, stop[2] = {a->shape[0], k};
  return tsr_slice(ctx, a, start, stop, out_p);
}

/* Exact: the tall-skinny SVD of Z (cells >= genes) or of Zᵀ. u: n x k,
 * s: k, l (loadings): genes x k. */
static int pca_exact(tsr_array_ctx *ctx, const tsr_array *z, int64_t k, tsr_array **u, tsr_array **s, tsr_array **l)
{
  tsr_array *zt = NULL, *uu = NULL, *sall = NULL, *v = NULL, *vt = NULL;
  int64_t s0[1] = {0}, s1[1] = {k};
  bool tall = z->shape[0] >= z->shape[1];
  int rc = tall ? tsr_svd_tall_skinny(ctx, z, &uu, &sall, &v) : tsr_transpose(ctx, z, &zt);
  if (rc == 0 && !tall) rc = tsr_svd_tall_skinny(ctx, zt, &uu, &sall, &v);
  if (rc == 0) rc = tsr_transpose(ctx, v, &vt);
  if (rc == 0) rc = first_columns(ctx, tall ? uu : vt, k, u);
  if (rc == 0) rc = first_columns(ctx, tall ? vt : uu, k, l);
  if (rc == 0) rc = tsr_slice(ctx, sall, s0, s1, s);
  return rc;
}

static int pca_randomized(tsr_array_ctx *ctx, const tsr_array *z, int64_t k, const tsr_sc_pca_opts *o, tsr_array **u,
                          tsr_array **s, tsr_array **l)
{
  tsr_svd_opts so = {o->n_oversamples, o->n_power_iter, TSR_SVD_QR, o->seed, true};
  tsr_array *v = NULL;
  int rc = tsr_svd_compressed(ctx, z, (int)k, &so, u, s, &v);
  if (rc == 0) rc = tsr_transpose(ctx, v, l);
  return rc;
}

/* svd_flip on the loadings: each column of l sums to >= 0, u with it. */
static int flip(tsr_array_ctx *ctx, tsr_array **u, tsr_array **l)
{
  tsr_array *sums = NULL, *signs = NULL, *u2 = NULL, *l2 = NULL;
  int rc = tsr_sum(ctx, *l, 0, 0, &sums);
  if (rc == 0) rc = tsr_map_blocks(ctx, "signs", NULL, sums, sums->dtype, &signs);
  if (rc == 0) rc = tsr_mul(ctx, *u, signs, &u2);
  if (rc == 0) rc = tsr_mul(ctx, *l, signs, &l2);
  if (rc == 0) *u = u2, *l = l2;
  return rc;
}

/* Z = x − mean (f64; CSR x stays CSR underneath) and x's total variance. */
static int centered(tsr_array_ctx *ctx, const tsr_array *x, bool center, tsr_array **z_p, tsr_array **total_p)
{
  tsr_array *mean = NULL, *var = NULL, *xf = NULL;
  int rc = column_stats(ctx, x, &mean, &var);
  if (rc == 0) rc = tsr_sum(ctx, var, -1, 0, total_p);
  if (rc == 0) rc = tsr_astype(ctx, x, TSR_F64, &xf);
  if (rc == 0) rc = center ? tsr_sub(ctx, xf, mean, z_p) : (*z_p = xf, 0);
  return rc;
}

static int check_pca(const tsr_array *x, tsr_sc_pca_opts *o)
{
  int rc = garray_check_2d(x, "sc_pca");
  if (rc != 0) return rc;
  int64_t mn = x->shape[0] < x->shape[1] ? x->shape[0] : x->shape[1];
  if (mn < 2) return client_fail(TSR_ESHAPE, "sc_pca: needs at least 2 cells and 2 genes");
  if (o->n_comps > mn - 1) o->n_comps = (int)(mn - 1);  /* scanpy: min(n_obs, n_vars) - 1 at most */
  if (o->n_comps < 1) return client_fail(TSR_EINVAL, "sc_pca: n_comps %d < 1", o->n_comps);
  if (o->solver != TSR_SC_PCA_RANDOMIZED && o->solver != TSR_SC_PCA_EXACT)
    return client_fail(TSR_EINVAL, "sc_pca: unknown solver %d", (int)o->solver);
  return 0;
}

TSR_API int tsr_sc_pca(tsr_array_ctx *ctx, const tsr_array *x, const tsr_sc_pca_opts *opts, tsr_sc_pca_result *result_p)
{
  tsr_sc_pca_opts o = TSR_SC_PCA_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  if (ctx == NULL || x == NULL || result_p == NULL) return client_fail(TSR_EINVAL, "sc_pca: NULL argument");
  int rc = check_pca(x, &o);
  tsr_array *xs = NULL, *z = NULL, *total = NULL, *u = NULL, *s = NULL, *l = NULL, *us = NULL, *s2 = NULL;
  tsr_sc_pca_result r = {0};
  if (rc == 0 && x->encoding == TSR_ENC_CSR) rc = tsr_as_csr_rows(ctx, x, &xs);
  if (rc == 0) rc = centered(ctx, xs ? xs : x, o.zero_center, &z, &total);
  if (rc == 0)
    rc = o.solver == TSR_SC_PCA_EXACT ? pca_exact(ctx, z, o.n_comps, &u, &s, &l) : pca_randomized(ctx, z, o.n_comps, &o, &u, &s, &l);
  if (rc == 0) rc = flip(ctx, &u, &l);
  if (rc == 0) rc = tsr_mul(ctx, u, s, &us);
  if (rc == 0) rc = tsr_astype(ctx, us, TSR_F32, &r.scores);
  if (rc == 0) rc = tsr_ufunc(ctx, s, "square", &s2);
  if (rc == 0) rc = tsr_scale(ctx, s2, 1.0 / (double)(x->shape[0] - 1), 0.0, &r.variance);
  if (rc == 0) rc = tsr_div(ctx, r.variance, total, &r.variance_ratio);
  if (rc != 0) return rc;
  r.loadings = l;
  *result_p = r;
  return 0;
}
