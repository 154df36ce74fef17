/* kernels/cpu/knn_graph.c — scanpy's neighbors graph from a kNN result
 * (graphs/knn_graph.c builds it; docs/cluster.md).
 *
 * umap_membership (inputs: indices i64 [r, k], distances f32 [r, k] of
 *   one row block, the mean of all distances as a one-element float
 *   array; params n, row0): the block's rows of umap-learn's membership
 *   matrix P as a CSR chunk r x n f32 — smooth_knn_dist (rho, sigma by
 *   bisection) and compute_membership_strengths, in umap-learn's f32/f64
 *   arithmetic so the values match its bits nearly always; the self entry
 *   and zeros dropped as eliminate_zeros does.
 * umap_union (inputs: every row block's P chunk, in order; params row0,
 *   rows): rows [row0, row0 + rows) of P + Pᵀ − P∘Pᵀ (fuzzy union,
 *   set_op_mix_ratio 1), in f32 as scipy computes it.
 * knn_distances_csr (inputs: indices, distances of a row block; params n):
 *   the distances without the self column as CSR rows (scanpy's
 *   obsp['distances']; a distance 0 to a duplicate is kept). */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "csr.h"
#include "ops.h"

#define SMOOTH_K_TOLERANCE 1e-5
#define MIN_K_DIST_SCALE 1e-3
#define SMOOTH_N_ITER 64

static int get_req(const char *op, const tsr_params *p, const char *name, int64_t *v, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

static int knn_pair_check(const char *op, const tsr_meta *in, tsr_errbuf *err)
{
  if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dtype != TSR_I64 || in[1].dtype != TSR_F32 ||
      in[0].shape[0] != in[1].shape[0] || in[0].shape[1] != in[1].shape[1] || in[0].shape[1] < 1)
    return tsr_fail(err, TSR_ESHAPE, "%s: needs indices i64 [r, k] and distances f32 [r, k], got %s and %s", op,
                    tsr_k_str(&in[0]).s, tsr_k_str(&in[1]).s);
  return 0;
}

/* A CSR bound of r rows with at most per_row entries each. */
static int csr_bound(const char *op, int64_t rows, int64_t per_row, int64_t n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t bytes = tsr_k_csr_bytes(rows, rows * per_row, TSR_F32);
  if (bytes < 0 || n < 1 || n > INT32_MAX)
    return tsr_fail(err, TSR_ELIMIT, "%s: %lld rows x %lld columns is too large for a CSR chunk", op, (long long)rows,
                    (long long)n);
  tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return 0;
}

/* ---------- umap_membership ---------- */

static int memb_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  int64_t n, row0;
  int rc = get_req("umap_membership", p, "n", &n, err);
  if (rc == 0) rc = get_req("umap_membership", p, "row0", &row0, err);
  if (rc != 0) return rc;
  if (n_in != 3) return tsr_fail(err, TSR_EINVAL, "umap_membership: takes 3 inputs, got %d", n_in);
  if ((rc = knn_pair_check("umap_membership", in, err)) != 0) return rc;
  if (tsr_meta_count(&in[2]) != 1 || !tsr_k_is_float(in[2].dtype))
    return tsr_fail(err, TSR_ESHAPE, "umap_membership: input 2 must be one float (the mean distance), got %s",
                    tsr_k_str(&in[2]).s);
  return csr_bound("umap_membership", in[0].shape[0], in[0].shape[1], n, out, err);
}

/* rho: the first nonzero distance (local_connectivity 1, so no
 * interpolation), 0 when all are 0. */
static float row_rho(const float *d, int64_t k)
{
  for (int64_t j = 0; j < k; j++)
    if (d[j] > 0.0f) return d[j];
  return 0.0f;
}

/* umap-learn's smooth_knn_dist for one row: sigma by bisection so that
 * Σ_j>0 exp(−max(d_j − rho, 0)/sigma) = log2(k), then the floor. */
static float row_sigma(const float *d, int64_t k, float rho, double mean_all)
{
  double target = log2((double)k), lo = 0.0, hi = DBL_MAX, mid = 1.0;
  for (int it = 0; it < SMOOTH_N_ITER; it++) {
    double psum = 0.0;
    for (int64_t j = 1; j < k; j++) {
      float dd = d[j] - rho;  /* f32, as numba computes it */
      psum += dd > 0 ? exp(-((double)dd / mid)) : 1.0;
    }
    if (fabs(psum - target) < SMOOTH_K_TOLERANCE) break;
    if (psum > target) hi = mid, mid = (lo + hi) / 2.0;
    else {
      lo = mid;
      mid = hi >= DBL_MAX ? mid * 2 : (lo + hi) / 2.0;
    }
  }
  float sigma = (float)mid;
  double mean_row = 0;
  for (int64_t j = 0; j < k; j++) mean_row += d[j];
  mean_row /= (double)k;
  double floor = MIN_K_DIST_SCALE * (rho > 0.0f ? mean_row : mean_all);
  return sigma < floor ? (float)floor : sigma;
}

static int memb_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)n_in, (void)err;
  int64_t n = 0, row0 = 0;
  tsr_params_get_int(p, "n", &n, NULL);
  tsr_params_get_int(p, "row0", &row0, NULL);
  int64_t rows = in[0].meta.shape[0], k = in[0].meta.shape[1];
  const int64_t *idx = in[0].data;
  const float *dist = in[1].data;
  double mean_all = in[2].meta.dtype == TSR_F32 ? *(const float *)in[2].data : *(const double *)in[2].data;
  tsr_k_csr v;
  tsr_k_csr_init(out->data, rows, n, rows * k, TSR_F32, &v);
  float *vals = v.values;
  int64_t nnz = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *d = dist + r * k;
    const int64_t *ix = idx + r * k;
    float rho = row_rho(d, k), sigma = row_sigma(d, k, rho, mean_all);
    v.indptr[r] = nnz;
    int64_t start = nnz;
    for (int64_t j = 0; j < k; j++) {
      if (ix[j] < 0 || ix[j] >= n || ix[j] == row0 + r) continue;  /* self: 0, eliminated */
      float val = (d[j] - rho <= 0.0f || sigma == 0.0f) ? 1.0f : expf(-((d[j] - rho) / sigma));
      if (val == 0.0f) continue;
      /* insert sorted by column (k is small) */
      int64_t q = nnz++;
      while (q > start && v.indices[q - 1] > ix[j]) v.indices[q] = v.indices[q - 1], vals[q] = vals[q - 1], q--;
      v.indices[q] = (int32_t)ix[j], vals[q] = val;
    }
  }
  v.indptr[rows] = nnz;
  tsr_k_csr_shrink(out, &v, nnz);
  return 0;
}

/* ---------- umap_union ---------- */

static int union_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  int64_t row0, rows;
  int rc = get_req("umap_union", p, "row0", &row0, err);
  if (rc == 0) rc = get_req("umap_union", p, "rows", &rows, err);
  if (rc != 0) return rc;
  if (n_in < 1) return tsr_fail(err, TSR_EINVAL, "umap_union: takes the P chunks of all row blocks");
  int64_t total = 0;
  for (int i = 0; i < n_in; i++) {
    if (in[i].dtype != TSR_U8 || in[i].ndim != 1)
      return tsr_fail(err, TSR_ESHAPE, "umap_union: input %d is %s, not a CSR chunk", i, tsr_k_str(&in[i]).s);
    total += in[i].shape[0];
  }
  /* nnz of the union rows <= P's rows' nnz + all of P's entries */
  int64_t bytes = tsr_k_csr_bytes(rows, total / 4 + 1, TSR_F32);
  if (bytes < 0) return tsr_fail(err, TSR_ELIMIT, "umap_union: too large");
  tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return 0;
}

typedef struct union_ctx {
  int64_t row0, rows;
  int64_t *tptr;   /* Pᵀ rows of the block: counts, then starts */
  int32_t *tcol;
  float *tval;
} union_ctx;

/* Pᵀ's rows [row0, row0 + rows): every P entry (r, j) with j in the
 * block, as (j, r), columns increasing because blocks come in order. */
static int transpose_block(const tsr_k_csr *ch, int n_ch, const int64_t *ch_row0, union_ctx *u, tsr_errbuf *err)
{
  u->tptr = calloc((size_t)u->rows + 1, sizeof *u->tptr);
  if (u->tptr == NULL) return tsr_fail(err, TSR_ENOMEM, "umap_union: out of memory");
  for (int c = 0; c < n_ch; c++)
    for (int64_t i = 0; i < ch[c].nnz; i++) {
      int64_t j = ch[c].indices[i] - u->row0;
      if (j >= 0 && j < u->rows) u->tptr[j + 1]++;
    }
  for (int64_t j = 0; j < u->rows; j++) u->tptr[j + 1] += u->tptr[j];
  u->tcol = malloc((size_t)u->tptr[u->rows] * sizeof *u->tcol + 4);
  u->tval = malloc((size_t)u->tptr[u->rows] * sizeof *u->tval + 4);
  int64_t *fill = malloc((size_t)u->rows * sizeof *fill + 8);
  if (u->tcol == NULL || u->tval == NULL || fill == NULL) {
    free(fill);
    return tsr_fail(err, TSR_ENOMEM, "umap_union: out of memory");
  }
  memcpy(fill, u->tptr, (size_t)u->rows * sizeof *fill);
  for (int c = 0; c < n_ch; c++)
    for (int64_t r = 0; r < ch[c].rows; r++)
      for (int64_t i = ch[c].indptr[r]; i < ch[c].indptr[r + 1]; i++) {
        int64_t j = ch[c].indices[i] - u->row0;
        if (j < 0 || j >= u->rows) continue;
        u->tcol[fill[j]] = (int32_t)(ch_row0[c] + r);
        u->tval[fill[j]++] = ((const float *)ch[c].values)[i];
      }
  free(fill);
  return 0;
}

/* Merges P's row (a) and Pᵀ's row (b), both sorted, into v at nnz. */
static int64_t union_row(const tsr_k_csr *pr, int64_t r, const union_ctx *u, int64_t j, tsr_k_csr *v, int64_t nnz)
{
  int64_t ia = pr->indptr[r], ea = pr->indptr[r + 1], ib = u->tptr[j], eb = u->tptr[j + 1];
  const float *av = pr->values;
  float *ov = v->values;
  while (ia < ea || ib < eb) {
    int64_t ca = ia < ea ? pr->indices[ia] : INT64_MAX, cb = ib < eb ? u->tcol[ib] : INT64_MAX;
    float a = ca <= cb ? av[ia] : 0.0f, b = cb <= ca ? u->tval[ib] : 0.0f;
    int64_t col = ca <= cb ? ca : cb;
    if (ca <= cb) ia++;
    if (cb <= ca) ib++;
    float sum = a + b, prod = a * b, val = sum - prod;  /* f32, as scipy */
    if (val != 0.0f) v->indices[nnz] = (int32_t)col, ov[nnz++] = val;
  }
  return nnz;
}

static int union_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  union_ctx u = {0};
  tsr_params_get_int(p, "row0", &u.row0, NULL);
  tsr_params_get_int(p, "rows", &u.rows, NULL);
  tsr_k_csr *ch = malloc((size_t)n_in * sizeof *ch);
  int64_t *ch_row0 = malloc((size_t)n_in * sizeof *ch_row0);
  int rc = ch && ch_row0 ? 0 : tsr_fail(err, TSR_ENOMEM, "umap_union: out of memory");
  int self = -1;
  int64_t r0 = 0;
  for (int c = 0; rc == 0 && c < n_in; c++) {
    tsr_errbuf why;
    if ((rc = tsr_k_csr_view(&in[c], false, &ch[c], &why)) != 0) rc = tsr_fail(err, rc, "umap_union: input %d: %s", c, why.text);
    ch_row0[c] = r0;
    if (rc == 0 && r0 == u.row0 && ch[c].rows == u.rows) self = c;
    if (rc == 0) r0 += ch[c].rows;
  }
  if (rc == 0 && self < 0) rc = tsr_fail(err, TSR_EINVAL, "umap_union: no input holds rows %lld..", (long long)u.row0);
  if (rc == 0) rc = transpose_block(ch, n_in, ch_row0, &u, err);
  if (rc == 0) {
    tsr_k_csr v;
    int64_t bound = ch[self].nnz + u.tptr[u.rows];  /* within infer's bound: all entries twice */
    tsr_k_csr_init(out->data, u.rows, ch[self].cols, bound, TSR_F32, &v);
    int64_t nnz = 0;
    for (int64_t r = 0; r < u.rows; r++) v.indptr[r] = nnz, nnz = union_row(&ch[self], r, &u, r, &v, nnz);
    v.indptr[u.rows] = nnz;
    tsr_k_csr_shrink(out, &v, nnz);
  }
  free(u.tptr), free(u.tcol), free(u.tval), free(ch), free(ch_row0);
  return rc;
}

/* ---------- knn_distances_csr ---------- */

static int dist_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  int64_t n;
  int rc = get_req("knn_distances_csr", p, "n", &n, err);
  if (rc != 0) return rc;
  if (n_in != 2) return tsr_fail(err, TSR_EINVAL, "knn_distances_csr: takes 2 inputs, got %d", n_in);
  if ((rc = knn_pair_check("knn_distances_csr", in, err)) != 0) return rc;
  return csr_bound("knn_distances_csr", in[0].shape[0], in[0].shape[1], n, out, err);
}

static int dist_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)n_in;
  int64_t n = 0;
  tsr_params_get_int(p, "n", &n, NULL);
  int64_t rows = in[0].meta.shape[0], k = in[0].meta.shape[1];
  const int64_t *idx = in[0].data;
  const float *dist = in[1].data;
  tsr_k_csr v;
  tsr_k_csr_init(out->data, rows, n, rows * k, TSR_F32, &v);
  float *vals = v.values;
  int64_t nnz = 0;
  for (int64_t r = 0; r < rows; r++) {
    v.indptr[r] = nnz;
    int64_t start = nnz;
    for (int64_t j = 1; j < k; j++) {  /* column 0 is the row itself (tsr_knn) */
      if (idx[r * k + j] < 0) continue;
      if (idx[r * k + j] >= n) return tsr_fail(err, TSR_EINVAL, "knn_distances_csr: index %lld >= n %lld", (long long)idx[r * k + j], (long long)n);
      int64_t q = nnz++;
      while (q > start && v.indices[q - 1] > idx[r * k + j]) v.indices[q] = v.indices[q - 1], vals[q] = vals[q - 1], q--;
      v.indices[q] = (int32_t)idx[r * k + j], vals[q] = dist[r * k + j];
    }
  }
  v.indptr[rows] = nnz;
  tsr_k_csr_shrink(out, &v, nnz);
  return 0;
}

const tsr_op_def tsr_op_umap_membership = {"umap_membership", 3, 3, memb_infer, memb_cpu, false, NULL};
const tsr_op_def tsr_op_umap_union = {"umap_union", 1, -1, union_infer, union_cpu, false, NULL};
const tsr_op_def tsr_op_knn_distances_csr = {"knn_distances_csr", 2, 2, dist_infer, dist_cpu, false, NULL};
