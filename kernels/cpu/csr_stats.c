/* kernels/cpu/csr_stats.c — per-row and per-column statistics of a CSR
 * chunk, and the helpers every sparse op shares (csr_ops.h).
 *
 * csr_sum: inputs [CSR] or [CSR, mu]; params `shape` [rows, cols], `axis`
 *   0 (one value per column: f64 [cols]) or 1 (per row: f64 [rows]),
 *   `stat` "sum" (default), "nnz" (stored values counted), "sumsq" (Σx²)
 *   or "sqdev" (axis 0 only: Σ_i (x_ij − mu_j)² over every row, the
 *   implicit zeros included, mu = input 1, f64 [cols]). The partial sums of
 *   row chunks add up to the whole matrix's (graphs tree-reduce them), and
 *   each is accumulated in f64 in index order: the same bytes every run.
 *   sqdev is the second pass of a two-pass variance, as scanpy's
 *   sparse_mean_variance_axis (more accurate than Σx² − n·mean²). */
#include <stdlib.h>

#include "csr_ops.h"

int tsr_k_csr_shape_param(const char *op, const tsr_params *p, const tsr_meta *in, int64_t *rows_p, int64_t *cols_p,
                          tsr_errbuf *err)
{
  int64_t shape[TSR_MAX_NDIM];
  int ndim = 0;
  if (in->dtype != TSR_U8 || in->ndim != 1)
    return tsr_fail(err, TSR_ESHAPE, "%s: input 0 must be a CSR chunk (1-D u8), got %s", op, tsr_k_str(in).s);
  int rc = tsr_k_shape_param(op, p, "shape", shape, &ndim, err);
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (rc == 0 && ndim != 2) rc = tsr_fail(err, TSR_EINVAL, "%s: shape must have 2 entries, got %d", op, ndim);
  if (rc == 0) *rows_p = shape[0], *cols_p = shape[1];
  return rc;
}

int tsr_k_csr_input(const char *op, const tsr_buf *b, int64_t rows, int64_t cols, tsr_k_csr *v, tsr_errbuf *err)
{
  tsr_errbuf why;
  int rc = tsr_k_csr_view(b, false, v, &why);
  if (rc != 0) return tsr_fail(err, rc, "%s: %s", op, why.text);
  if (v->rows != rows || v->cols != cols)
    return tsr_fail(err, TSR_ESHAPE, "%s: the CSR chunk is %lld x %lld, the task says %lld x %lld", op,
                    (long long)v->rows, (long long)v->cols, (long long)rows, (long long)cols);
  /* Bounds only (order is the producer's promise): what the loops index. */
  for (int64_t r = 0; r < v->rows; r++)
    if (v->indptr[r + 1] < v->indptr[r])
      return tsr_fail(err, TSR_EPROTO, "%s: CSR chunk: indptr decreases at row %lld", op, (long long)r);
  for (int64_t i = 0; i < v->nnz; i++)
    if (v->indices[i] < 0 || v->indices[i] >= v->cols)
      return tsr_fail(err, TSR_EPROTO, "%s: CSR chunk: column %d outside 0..%lld", op, v->indices[i], (long long)v->cols - 1);
  return 0;
}

int64_t tsr_k_csr_nnz_bound(int64_t bytes, int64_t rows, size_t es)
{
  int64_t rest = bytes - TSR_CSR_HEADER - 8 * (rows + 1);
  return rest > 0 ? rest / (4 + (int64_t)es) : 0;
}

/* ---------- csr_sum ---------- */

typedef enum { STAT_SUM, STAT_NNZ, STAT_SUMSQ, STAT_SQDEV } csr_stat;

typedef struct sum_args {
  int64_t rows, cols, axis;
  csr_stat stat;
} sum_args;

static int parse_sum(const tsr_params *p, const tsr_meta *in, int n, sum_args *s, tsr_errbuf *err)
{
  static const char *const names[] = {"sum", "nnz", "sumsq", "sqdev"};
  int rc = tsr_k_csr_shape_param("csr_sum", p, &in[0], &s->rows, &s->cols, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "axis", 0, &s->axis, err);
  if (rc != 0) return tsr_k_param_fail("csr_sum", rc, err);
  const tsr_param *q = tsr_params_find(p, "stat");
  const char *stat = q != NULL && q->type == TSR_PARAM_STR ? q->s : "sum";
  s->stat = (csr_stat)-1;
  for (int i = 0; i < 4; i++)
    if (strcmp(stat, names[i]) == 0) s->stat = (csr_stat)i;
  if ((int)s->stat < 0) return tsr_fail(err, TSR_EINVAL, "csr_sum: unknown stat '%s' (sum, nnz, sumsq, sqdev)", stat);
  if (s->axis != 0 && s->axis != 1) return tsr_fail(err, TSR_EINVAL, "csr_sum: axis %lld is not 0 or 1", (long long)s->axis);
  bool want_mu = s->stat == STAT_SQDEV;
  if (want_mu && s->axis != 0) return tsr_fail(err, TSR_EINVAL, "csr_sum: sqdev is per column (axis 0) only");
  if (n != (want_mu ? 2 : 1)) return tsr_fail(err, TSR_EINVAL, "csr_sum: stat '%s' takes %d inputs, got %d", stat, want_mu ? 2 : 1, n);
  if (want_mu && (in[1].dtype != TSR_F64 || in[1].ndim != 1 || in[1].shape[0] != s->cols))
    return tsr_fail(err, TSR_ESHAPE, "csr_sum: mu must be f64 [%lld], got %s", (long long)s->cols, tsr_k_str(&in[1]).s);
  return 0;
}

static int sum_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  sum_args s;
  int rc = parse_sum(p, in, n, &s, err);
  int64_t len = s.axis == 0 ? s.cols : s.rows;
  if (rc == 0) tsr_k_meta_set(out, TSR_F64, 1, &len);
  return rc;
}

static double stat_term(csr_stat stat, double x) { return stat == STAT_NNZ ? 1.0 : stat == STAT_SUM ? x : x * x; }

/* Σ (x − mu_j)² per column over all rows: stored values, then the
 * (rows − stored) implicit zeros, each contributing mu_j². */
static int sqdev_columns(const tsr_k_csr *v, const double *mu, double *out, tsr_errbuf *err)
{
  int64_t *count = calloc((size_t)v->cols + 1, sizeof *count);
  if (count == NULL) return tsr_fail(err, TSR_ENOMEM, "csr_sum: out of memory");
  for (int64_t i = 0; i < v->nnz; i++) {
    int32_t j = v->indices[i];
    double d = tsr_k_csr_value(v, i) - mu[j];
    out[j] += d * d;
    count[j]++;
  }
  for (int64_t j = 0; j < v->cols; j++) out[j] += (double)(v->rows - count[j]) * mu[j] * mu[j];
  free(count);
  return 0;
}

static int sum_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  sum_args s;
  tsr_meta metas[2] = {in[0].meta, n > 1 ? in[1].meta : in[0].meta};
  tsr_k_csr v;
  int rc = parse_sum(p, metas, n, &s, err);
  if (rc == 0) rc = tsr_k_csr_input("csr_sum", &in[0], s.rows, s.cols, &v, err);
  if (rc != 0) return rc;
  double *o = out->data;
  memset(o, 0, out->nbytes);
  if (s.stat == STAT_SQDEV) return sqdev_columns(&v, in[1].data, o, err);
  for (int64_t r = 0; r < v.rows; r++)
    for (int64_t i = v.indptr[r]; i < v.indptr[r + 1]; i++) {
      double t = stat_term(s.stat, tsr_k_csr_value(&v, i));
      o[s.axis == 0 ? v.indices[i] : r] += t;
    }
  return 0;
}

const tsr_op_def tsr_op_csr_sum = {"csr_sum", 1, 2, sum_infer, sum_cpu, false, NULL};
