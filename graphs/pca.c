/* Standardizing genotype columns and PCA, as PLINK's --pca and flashpca
 * define them, from the ordinary builders.
 *
 * Standardization (per column j of a samples x variants X, over the
 * values that are not missing): μ_j = nanmean(X_j) (= 2p_j for dosages),
 *   binom2: Z = fillnan((X − μ) / sqrt(μ (1 − μ/2)), 0)   (2p(1−p) = μ(1 − μ/2))
 *   center: Z = fillnan(X − μ, 0)
 *   none:   Z = X, missing values imputed by μ.
 * A column without variance (monomorphic) divides 0 by 0 and is filled
 * with 0, so it adds nothing. Z is a lazy chain over X: products fold it
 * (graphs/chain.c), so Z is never stored.
 *
 * PCA: the top k of Z's SVD, Z = U S Vᵀ. Eigenvectors are U's columns
 * (the GRM's eigenvectors), eigenvalues s²/m (those of the GRM Z Zᵀ / m,
 * m = variants: PLINK's meaning), loadings V's columns. Signs follow
 * svd_flip on Z: each loading column sums to >= 0, whichever method. */
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

/* sqrt(μ (1 − μ/2)) per column. */
static int binom_sd(tsr_array_ctx *ctx, const tsr_array *mu, tsr_array **sd_p)
{
  tsr_array *half = NULL, *prod = NULL;
  int rc = tsr_scale(ctx, mu, -0.5, 1.0, &half);
  if (rc == 0) rc = tsr_mul(ctx, mu, half, &prod);
  if (rc == 0) rc = tsr_ufunc(ctx, prod, "sqrt", sd_p);
  return rc;
}

TSR_API int tsr_standardize(tsr_array_ctx *ctx, const tsr_array *x, tsr_standardize_mode mode, tsr_array **z_p)
{
  int rc = garray_check_2d(x, "standardize");
  if (rc != 0) return rc;
  if (mode != TSR_STANDARDIZE_NONE && mode != TSR_STANDARDIZE_CENTER && mode != TSR_STANDARDIZE_BINOM2)
    return client_fail(TSR_EINVAL, "standardize: unknown mode %d", (int)mode);
  bool has_missing = x->missing >= 0 || gdtype_is_float(x->dtype);
  if (mode == TSR_STANDARDIZE_NONE && !has_missing) return tsr_astype(ctx, x, TSR_F64, z_p);
  tsr_array *mu = NULL, *c = NULL, *sd = NULL, *z = NULL, *filled = NULL;
  rc = tsr_nanmean(ctx, x, 0, 0, &mu);
  if (rc == 0) rc = tsr_sub(ctx, x, mu, &c);
  if (rc == 0 && mode == TSR_STANDARDIZE_BINOM2) rc = binom_sd(ctx, mu, &sd);
  if (rc == 0) rc = sd != NULL ? tsr_div(ctx, c, sd, &z) : 0;
  if (rc == 0) rc = tsr_fillnan(ctx, z != NULL ? z : c, 0.0, &filled);
  if (rc == 0 && mode == TSR_STANDARDIZE_NONE) return tsr_add(ctx, filled, mu, z_p);
  if (rc == 0) *z_p = filled;
  return rc;
}

/* ---------- PCA ---------- */

/* Flips columns of e (n x k) and l (m x k) so that each column of l sums
 * to >= 0 (svd_flip on Z's v, whose rows are l's columns). */
static int flip_by_loadings(tsr_array_ctx *ctx, tsr_array **e, tsr_array **l)
{
  tsr_array *sums = NULL, *signs = NULL, *e2 = NULL, *l2 = NULL;
  int rc = tsr_sum(ctx, *l, 0, 0, &sums);
  if (rc == 0) rc = tsr_map_blocks(ctx, "signs", NULL, sums, sums->dtype, &signs);
  if (rc == 0) rc = tsr_mul(ctx, *e, signs, &e2);
  if (rc == 0) rc = tsr_mul(ctx, *l, signs, &l2);
  if (rc == 0) *e = e2, *l = l2;
  return rc;
}

/* The top-k columns of a 2-D array. */
static int first_columns(tsr_array_ctx *ctx, const tsr_array *a, int64_t k, tsr_array **out_p)
{
  int64_t start[2] = {0, 0}, stop[2] = {a->shape[0], k};
  return tsr_slice(ctx, a, start, stop, out_p);
}

/* Exact: the tall-skinny SVD of Zᵀ (variants x samples): Zᵀ = U' S V'ᵀ,
 * so Z's U is V' and its V is U'. */
static int pca_exact(tsr_array_ctx *ctx, const tsr_array *z, int64_t k, tsr_array **e, tsr_array **s, tsr_array **l)
{
  tsr_array *zt = NULL, *u = NULL, *v = NULL, *vt = NULL, *sall = NULL;
  int64_t s0[1] = {0}, s1[1] = {k};
  int rc = tsr_transpose(ctx, z, &zt);
  if (rc == 0) rc = tsr_svd_tall_skinny(ctx, zt, &u, &sall, &v);
  if (rc == 0) rc = tsr_transpose(ctx, v, &vt);
  if (rc == 0) rc = first_columns(ctx, vt, k, e);
  if (rc == 0) rc = first_columns(ctx, u, k, l);
  if (rc == 0) rc = tsr_slice(ctx, sall, s0, s1, s);
  return rc;
}

static int pca_compressed(tsr_array_ctx *ctx, const tsr_array *z, int64_t k, const tsr_svd_opts *svd, tsr_array **e,
                          tsr_array **s, tsr_array **l)
{
  tsr_array *v = NULL;
  int rc = tsr_svd_compressed(ctx, z, (int)k, svd, e, s, &v);
  if (rc == 0) rc = tsr_transpose(ctx, v, l);
  return rc;
}

static int check_pca(const tsr_array *x, const tsr_pca_opts *o)
{
  int rc = garray_check_2d(x, "pca");
  if (rc != 0) return rc;
  int64_t n = x->shape[0], m = x->shape[1], mn = n < m ? n : m;
  if (o->k < 1 || o->k > mn)
    return client_fail(TSR_EINVAL, "pca: k = %d outside 1..%lld (%lld samples x %lld variants)", o->k, (long long)mn,
                       (long long)n, (long long)m);
  if (o->method != TSR_PCA_COMPRESSED && o->method != TSR_PCA_EXACT)
    return client_fail(TSR_EINVAL, "pca: unknown method %d", (int)o->method);
  if (o->method == TSR_PCA_EXACT && n > m)
    return client_fail(TSR_ESHAPE, "pca: the exact method needs no more samples than variants, got %lld x %lld (use the compressed method)",
                       (long long)n, (long long)m);
  return 0;
}

TSR_API int tsr_pca(tsr_array_ctx *ctx, const tsr_array *x, const tsr_pca_opts *opts, tsr_array **eigvec_p,
                    tsr_array **eigval_p, tsr_array **loadings_p)
{
  tsr_pca_opts o = TSR_PCA_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  int rc = x == NULL ? client_fail(TSR_EINVAL, "pca: array is NULL") : check_pca(x, &o);
  if (rc != 0) return rc;
  tsr_array *z = NULL, *e = NULL, *s = NULL, *l = NULL, *s2 = NULL, *ev = NULL;
  rc = tsr_standardize(ctx, x, o.standardize, &z);
  if (rc == 0)
    rc = o.method == TSR_PCA_EXACT ? pca_exact(ctx, z, o.k, &e, &s, &l) : pca_compressed(ctx, z, o.k, &o.svd, &e, &s, &l);
  if (rc == 0) rc = flip_by_loadings(ctx, &e, &l);
  if (rc == 0) rc = tsr_ufunc(ctx, s, "square", &s2);
  if (rc == 0) rc = tsr_scale(ctx, s2, 1.0 / (double)x->shape[1], 0.0, &ev);
  if (rc != 0) return rc;
  *eigvec_p = e;
  *eigval_p = ev;
  *loadings_p = l;
  return 0;
}
