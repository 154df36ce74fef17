/* kernels/cpu/csr_map.c — sparse ops that keep or subset the pattern.
 *
 * csr_map: [CSR] → CSR, same pattern; params `shape`, `fn` "none" (default)
 *   / "log1p" / "expm1", `factor` (default 1, applied first: fn(x·factor)),
 *   `dtype` of the output values (default: the input's if float, else f32).
 *   f32 output computes in f32 (log1pf: NumPy's float32 ufunc), so the
 *   values are those of np.log1p(X.data) on a float32 matrix.
 *   Optional `in_dtype`: the input's value dtype (the array's, known to the
 *   builder). With it and `dtype` of the same width the output's size is
 *   exactly the input's (tsr_k_csr_same_width): infer() is exact, which
 *   is what lets these two ops have CUDA variants (kernels.h: an op that
 *   shrinks its output has none); a chunk holding another dtype fails.
 * csr_normalize_rows: [CSR, totals f64 [rows]] → CSR; params `shape`,
 *   `target` (> 0), `dtype` (as csr_map). Row r's values divided by
 *   d_r = totals_r / target, rounded to the output dtype first, rows with
 *   d_r = 0 left as they are: scanpy 1.11's normalize_total on CSR
 *   (counts_per_cell / target_sum in float32, then X.data / d).
 * csr_gather: [CSR pieces..., (col mask u8 [in_cols])] → CSR; params
 *   `dtype` (the pieces' value dtype), `piece_rows` [int] (rows of each
 *   piece), `in_cols` int, `runs` [int]: triples (piece, first row, count)
 *   whose rows, in order, make the output; `col_mask` bool (the last input
 *   keeps the columns where it is nonzero, in order). Selecting cells and
 *   genes (filter_cells, filter_genes, the HVG subset) and regular
 *   rechunking after a row filter are all one gather.
 * mask_from_runs: no inputs → u8 [n]; params `n`, `runs` [int] pairs
 *   (start, length) set to 1: a client-side mask sent compactly.
 * values_f64: no inputs → f64 [n]; param `values` [float]: a small
 *   client-side vector (per-gene scale factors) as a chunk.
 * clip: [dense float] → same; params `lo`, `hi` (either may be absent):
 *   scanpy's scale(max_value). NaN stays NaN. */
#include <math.h>
#include <stdlib.h>

#include "csr_ops.h"

static int out_value_dtype(const char *op, const tsr_params *p, tsr_dtype in, tsr_dtype *dt, tsr_errbuf *err)
{
  tsr_dtype fallback = tsr_k_is_float(in) ? in : TSR_F32;
  int rc = tsr_k_dtype_param(op, p, fallback, dt, err);
  if (rc == 0 && !tsr_k_is_float(*dt)) rc = tsr_fail(err, TSR_EINVAL, "%s: output dtype must be f32 or f64", op);
  return rc;
}

int tsr_k_csr_same_width(const char *op, const tsr_params *p, tsr_dtype *in_p, tsr_errbuf *err)
{
  const char *name;
  tsr_dtype out;
  *in_p = TSR_DTYPE_NONE;
  if (tsr_params_find(p, "in_dtype") == NULL || tsr_params_find(p, "dtype") == NULL) return 0;
  int rc = tsr_params_get_str(p, "in_dtype", &name, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  tsr_dtype in = tsr_dtype_parse(name);
  if (in == TSR_DTYPE_NONE) return tsr_fail(err, TSR_EINVAL, "%s: unknown in_dtype '%s'", op, name);
  rc = out_value_dtype(op, p, TSR_F32, &out, err);
  if (rc == 0 && tsr_dtype_size(in) == tsr_dtype_size(out)) *in_p = in;
  return rc;
}

/* The chunk's value dtype against the task's `in_dtype` (when given). */
static int check_in_dtype(const char *op, const tsr_params *p, const tsr_k_csr *v, tsr_errbuf *err)
{
  const char *name;
  if (tsr_params_find(p, "in_dtype") == NULL || tsr_params_get_str(p, "in_dtype", &name, NULL) != 0) return 0;
  if (tsr_dtype_parse(name) != v->dtype)
    return tsr_fail(err, TSR_ESHAPE, "%s: the CSR chunk holds %s values, the task says in_dtype %s", op,
                    tsr_dtype_name(v->dtype) ? tsr_dtype_name(v->dtype) : "(unknown)", name);
  return 0;
}

/* Size of a same-pattern output of in (bytes) with values of dt: exact
 * with a same-width in_dtype, else a bound. */
static int same_pattern_infer(const char *op, const tsr_params *p, const tsr_meta *in, tsr_meta *out, tsr_errbuf *err)
{
  int64_t rows, cols;
  tsr_dtype dt, in_dt;
  int rc = tsr_k_csr_shape_param(op, p, in, &rows, &cols, err);
  if (rc == 0) rc = tsr_k_csr_same_width(op, p, &in_dt, err);
  if (rc != 0) return rc;
  if (in_dt != TSR_DTYPE_NONE) {
    *out = *in;
    return 0;
  }
  /* The input's value dtype is only in its header: bound nnz by the
   * smallest value size, the output by the largest. */
  int64_t nnz = tsr_k_csr_nnz_bound(in->shape[0], rows, 1);
  rc = out_value_dtype(op, p, TSR_F32, &dt, err);
  int64_t bytes = tsr_k_csr_bytes(rows, nnz, TSR_F64);
  if (rc == 0) tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return rc;
}

/* Copies v's pattern into out (nnz values of dt) and returns its view. */
static void copy_pattern(tsr_buf *out, const tsr_k_csr *v, tsr_dtype dt, tsr_k_csr *o)
{
  tsr_k_csr_init(out->data, v->rows, v->cols, v->nnz, dt, o);
  memcpy(o->indptr, v->indptr, 8 * (size_t)(v->rows + 1));
  memcpy(o->indices, v->indices, 4 * (size_t)v->nnz);
  out->meta.shape[0] = tsr_k_csr_bytes(v->rows, v->nnz, dt);
}

/* ---------- csr_map ---------- */

static int map_fn(const tsr_params *p, int *fn_p, tsr_errbuf *err)
{
  const tsr_param *q = tsr_params_find(p, "fn");
  const char *fn = q != NULL && q->type == TSR_PARAM_STR ? q->s : "none";
  *fn_p = strcmp(fn, "none") == 0 ? 0 : strcmp(fn, "log1p") == 0 ? 1 : strcmp(fn, "expm1") == 0 ? 2 : -1;
  if (*fn_p < 0) return tsr_fail(err, TSR_EINVAL, "csr_map: unknown fn '%s' (none, log1p, expm1)", fn);
  return 0;
}

static int map_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int fn;
  (void)n;
  int rc = map_fn(p, &fn, err);
  return rc == 0 ? same_pattern_infer("csr_map", p, &in[0], out, err) : rc;
}

static int map_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t rows, cols;
  int fn;
  double factor = 1.0;
  tsr_dtype dt;
  tsr_k_csr v, o;
  int rc = tsr_k_csr_shape_param("csr_map", p, &in[0].meta, &rows, &cols, err);
  if (rc == 0) rc = map_fn(p, &fn, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "factor", 1.0, &factor, err);
  if (rc == 0) rc = tsr_k_csr_input("csr_map", &in[0], rows, cols, &v, err);
  if (rc == 0) rc = check_in_dtype("csr_map", p, &v, err);
  if (rc == 0) rc = out_value_dtype("csr_map", p, v.dtype, &dt, err);
  if (rc != 0) return rc;
  copy_pattern(out, &v, dt, &o);
  for (int64_t i = 0; i < v.nnz; i++) {
    double x = tsr_k_csr_value(&v, i) * factor;
    if (dt == TSR_F32) {
      float f = (float)x;
      ((float *)o.values)[i] = fn == 1 ? log1pf(f) : fn == 2 ? expm1f(f) : f;
    } else
      ((double *)o.values)[i] = fn == 1 ? log1p(x) : fn == 2 ? expm1(x) : x;
  }
  return 0;
}

/* ---------- csr_normalize_rows ---------- */

static int norm_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  double target = 0;
  int rc = tsr_params_get_float(p, "target", &target, err);
  if (rc != 0) return tsr_k_param_fail("csr_normalize_rows", rc, err);
  if (!(target > 0)) return tsr_fail(err, TSR_EINVAL, "csr_normalize_rows: target %g must be > 0", target);
  rc = same_pattern_infer("csr_normalize_rows", p, &in[0], out, err);
  int64_t rows = 0, cols = 0;
  if (rc == 0) rc = tsr_k_csr_shape_param("csr_normalize_rows", p, &in[0], &rows, &cols, err);
  if (rc == 0 && n == 2 && (in[1].dtype != TSR_F64 || in[1].ndim != 1 || in[1].shape[0] != rows))
    rc = tsr_fail(err, TSR_ESHAPE, "csr_normalize_rows: totals must be f64 [%lld], got %s", (long long)rows, tsr_k_str(&in[1]).s);
  return rc;
}

static int norm_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t rows, cols;
  double target = 1;
  tsr_dtype dt;
  tsr_k_csr v, o;
  int rc = tsr_k_csr_shape_param("csr_normalize_rows", p, &in[0].meta, &rows, &cols, err);
  if (rc == 0) rc = tsr_params_get_float(p, "target", &target, err);
  if (rc == 0) rc = tsr_k_csr_input("csr_normalize_rows", &in[0], rows, cols, &v, err);
  if (rc == 0) rc = check_in_dtype("csr_normalize_rows", p, &v, err);
  if (rc == 0) rc = out_value_dtype("csr_normalize_rows", p, v.dtype, &dt, err);
  if (rc != 0) return rc;
  copy_pattern(out, &v, dt, &o);
  const double *tot = in[1].data;
  for (int64_t r = 0; r < rows; r++) {
    float df = (float)tot[r] / (float)target;
    double dd = tot[r] / target;
    for (int64_t i = v.indptr[r]; i < v.indptr[r + 1]; i++) {
      double x = tsr_k_csr_value(&v, i);
      if (dt == TSR_F32) ((float *)o.values)[i] = df == 0.0f ? (float)x : (float)x / df;
      else ((double *)o.values)[i] = dd == 0.0 ? x : x / dd;
    }
  }
  return 0;
}

/* ---------- csr_gather ---------- */

typedef struct gather_args {
  tsr_dtype dtype;
  const int64_t *piece_rows, *runs;
  size_t n_pieces, n_runs;
  int64_t in_cols, rows;
  bool col_mask;
} gather_args;

static int parse_gather(const tsr_params *p, const tsr_meta *in, int n, gather_args *g, tsr_errbuf *err)
{
  size_t nr = 0;
  int rc = tsr_k_dtype_param("csr_gather", p, TSR_DTYPE_NONE, &g->dtype, err);
  if (rc == 0 && g->dtype == TSR_DTYPE_NONE) rc = tsr_fail(err, TSR_EINVAL, "csr_gather: missing parameter 'dtype'");
  if (rc == 0) rc = tsr_params_get_ints(p, "piece_rows", &g->piece_rows, &g->n_pieces, err);
  if (rc == 0) rc = tsr_params_get_ints(p, "runs", &g->runs, &nr, err);
  if (rc == 0) rc = tsr_params_get_int(p, "in_cols", &g->in_cols, err);
  g->col_mask = false;
  if (rc == 0 && tsr_params_find(p, "col_mask")) rc = tsr_params_get_bool(p, "col_mask", &g->col_mask, err);
  if (rc != 0) return tsr_k_param_fail("csr_gather", rc, err);
  g->n_runs = nr / 3;
  if (nr % 3 != 0 || (int64_t)g->n_pieces + g->col_mask != n)
    return tsr_fail(err, TSR_EINVAL, "csr_gather: %zu runs values (triples) and %zu pieces for %d inputs", nr, g->n_pieces, n);
  for (int i = 0; i < (int)g->n_pieces; i++)
    if (in[i].dtype != TSR_U8 || in[i].ndim != 1)
      return tsr_fail(err, TSR_ESHAPE, "csr_gather: input %d must be a CSR chunk, got %s", i, tsr_k_str(&in[i]).s);
  if (g->col_mask && (in[n - 1].dtype != TSR_U8 || in[n - 1].ndim != 1 || in[n - 1].shape[0] != g->in_cols))
    return tsr_fail(err, TSR_ESHAPE, "csr_gather: the column mask must be u8 [%lld], got %s", (long long)g->in_cols, tsr_k_str(&in[n - 1]).s);
  g->rows = 0;
  for (size_t k = 0; k < g->n_runs; k++) {
    int64_t piece = g->runs[3 * k], first = g->runs[3 * k + 1], count = g->runs[3 * k + 2];
    if (piece < 0 || piece >= (int64_t)g->n_pieces || first < 0 || count < 0 || first + count > g->piece_rows[piece])
      return tsr_fail(err, TSR_EINVAL, "csr_gather: run %zu (piece %lld, rows %lld+%lld) is outside the pieces", k,
                      (long long)piece, (long long)first, (long long)count);
    g->rows += count;
  }
  return 0;
}

static int gather_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  gather_args g;
  int rc = parse_gather(p, in, n, &g, err);
  if (rc != 0) return rc;
  int64_t nnz = 0;
  for (size_t i = 0; i < g.n_pieces; i++) nnz += tsr_k_csr_nnz_bound(in[i].shape[0], g.piece_rows[i], tsr_dtype_size(g.dtype));
  int64_t bytes = tsr_k_csr_bytes(g.rows, nnz, g.dtype);
  if (bytes < 0) return tsr_fail(err, TSR_ELIMIT, "csr_gather: the output is too large for a CSR chunk");
  tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return 0;
}

/* Old column → new column (or -1), from the mask; NULL map: identity. */
static int32_t *column_map(const gather_args *g, const uint8_t *mask, int64_t *cols_p, tsr_errbuf *err)
{
  int32_t *map = malloc(sizeof *map * (size_t)(g->in_cols + 1));
  if (map == NULL) return tsr_fail(err, TSR_ENOMEM, "csr_gather: out of memory"), NULL;
  int32_t next = 0;
  for (int64_t j = 0; j < g->in_cols; j++) map[j] = mask[j] ? next++ : -1;
  *cols_p = next;
  return map;
}

static int gather_rows(const gather_args *gp, const tsr_buf *in, int n, tsr_k_csr *pieces, tsr_buf *out, tsr_errbuf *err);

static int gather_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  gather_args g;
  tsr_meta *metas = malloc(sizeof *metas * (size_t)n);
  tsr_k_csr *pieces = malloc(sizeof *pieces * (size_t)n);
  if (metas == NULL || pieces == NULL) {
    free(metas), free(pieces);
    return tsr_fail(err, TSR_ENOMEM, "csr_gather: out of memory");
  }
  for (int i = 0; i < n; i++) metas[i] = in[i].meta;
  int rc = parse_gather(p, metas, n, &g, err);
  free(metas);
  if (rc == 0) rc = gather_rows(&g, in, n, pieces, out, err);
  free(pieces);
  return rc;
}

/* The gather itself, pieces: scratch for n views. */
static int gather_rows(const gather_args *gp, const tsr_buf *in, int n, tsr_k_csr *pieces, tsr_buf *out, tsr_errbuf *err)
{
  const gather_args g = *gp;
  tsr_k_csr o;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < g.n_pieces; i++) rc = tsr_k_csr_input("csr_gather", &in[i], g.piece_rows[i], g.in_cols, &pieces[i], err);
  for (size_t i = 0; rc == 0 && i < g.n_pieces; i++)
    if (pieces[i].dtype != g.dtype) rc = tsr_fail(err, TSR_ESHAPE, "csr_gather: piece %zu holds dtype %d, not %s", i, (int)pieces[i].dtype, tsr_dtype_name(g.dtype));
  if (rc != 0) return rc;
  int64_t cols = g.in_cols;
  int32_t *map = g.col_mask ? column_map(&g, in[n - 1].data, &cols, err) : NULL;
  if (g.col_mask && map == NULL) return TSR_ENOMEM;
  int64_t bound = 0;
  for (size_t i = 0; i < g.n_pieces; i++) bound += pieces[i].nnz;
  size_t es = tsr_dtype_size(g.dtype);
  tsr_k_csr_init(out->data, g.rows, cols, bound, g.dtype, &o);
  int64_t nnz = 0, r = 0;
  for (size_t k = 0; k < g.n_runs; k++) {
    const tsr_k_csr *v = &pieces[g.runs[3 * k]];
    for (int64_t s = g.runs[3 * k + 1]; s < g.runs[3 * k + 1] + g.runs[3 * k + 2]; s++, r++) {
      o.indptr[r] = nnz;
      for (int64_t i = v->indptr[s]; i < v->indptr[s + 1]; i++) {
        int32_t c = map ? map[v->indices[i]] : v->indices[i];
        if (c < 0) continue;
        o.indices[nnz] = c;
        memcpy((char *)o.values + (size_t)nnz * es, (const char *)v->values + (size_t)i * es, es);
        nnz++;
      }
    }
  }
  o.indptr[g.rows] = nnz;
  free(map);
  tsr_k_csr_shrink(out, &o, nnz);
  return 0;
}

/* ---------- mask_from_runs ---------- */

static int runs_parse(const tsr_params *p, int64_t *n_p, const int64_t **runs, size_t *nr, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, "n", n_p, err);
  if (rc == 0) rc = tsr_params_get_ints(p, "runs", runs, nr, err);
  if (rc != 0) return tsr_k_param_fail("mask_from_runs", rc, err);
  if (*n_p < 0 || *nr % 2 != 0) return tsr_fail(err, TSR_EINVAL, "mask_from_runs: n < 0 or an odd number of runs values");
  for (size_t k = 0; k < *nr; k += 2)
    if ((*runs)[k] < 0 || (*runs)[k + 1] < 0 || (*runs)[k] + (*runs)[k + 1] > *n_p)
      return tsr_fail(err, TSR_EINVAL, "mask_from_runs: run %zu is outside 0..%lld", k / 2, (long long)*n_p);
  return 0;
}

static int mask_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  int64_t len;
  const int64_t *runs;
  size_t nr;
  int rc = runs_parse(p, &len, &runs, &nr, err);
  if (rc == 0) tsr_k_meta_set(out, TSR_U8, 1, &len);
  return rc;
}

static int mask_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  int64_t len;
  const int64_t *runs;
  size_t nr;
  int rc = runs_parse(p, &len, &runs, &nr, err);
  if (rc != 0) return rc;
  memset(out->data, 0, out->nbytes);
  for (size_t k = 0; k < nr; k += 2) memset((char *)out->data + runs[k], 1, (size_t)runs[k + 1]);
  return 0;
}

/* ---------- values_f64 ---------- */

static int values_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  const tsr_param *q = tsr_params_find(p, "values");
  if (q == NULL || (q->type != TSR_PARAM_FLOATS && q->type != TSR_PARAM_INTS))
    return tsr_fail(err, TSR_EINVAL, "values_f64: missing parameter 'values' (a list of numbers)");
  int64_t len = (int64_t)q->n;
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

static int values_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n, (void)err;
  const tsr_param *q = tsr_params_find(p, "values");
  double *o = out->data;
  for (size_t i = 0; i < q->n; i++) o[i] = q->type == TSR_PARAM_FLOATS ? q->floats[i] : (double)q->ints[i];
  return 0;
}

/* ---------- clip ---------- */

static int clip_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p, (void)n;
  if (!tsr_k_is_float(in[0].dtype)) return tsr_fail(err, TSR_ESHAPE, "clip: needs a float chunk, got %s", tsr_k_str(&in[0]).s);
  *out = in[0];
  return 0;
}

static int clip_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  double lo = -INFINITY, hi = INFINITY;
  int rc = tsr_params_opt_float(p, "lo", -INFINITY, &lo, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "hi", INFINITY, &hi, err);
  if (rc != 0) return tsr_k_param_fail("clip", rc, err);
  size_t count = in[0].nbytes / tsr_dtype_size(in[0].meta.dtype);
  for (size_t i = 0; i < count; i++) {
    double x = in[0].meta.dtype == TSR_F32 ? ((const float *)in[0].data)[i] : ((const double *)in[0].data)[i];
    x = x < lo ? lo : x > hi ? hi : x;
    if (in[0].meta.dtype == TSR_F32) ((float *)out->data)[i] = (float)x;
    else ((double *)out->data)[i] = x;
  }
  return 0;
}

const tsr_op_def tsr_op_csr_map = {"csr_map", 1, 1, map_infer, map_cpu, false, NULL};
const tsr_op_def tsr_op_csr_normalize_rows = {"csr_normalize_rows", 2, 2, norm_infer, norm_cpu, false, NULL};
const tsr_op_def tsr_op_csr_gather = {"csr_gather", 1, -1, gather_infer, gather_cpu, false, NULL};
const tsr_op_def tsr_op_mask_from_runs = {"mask_from_runs", 0, 0, mask_infer, mask_cpu, false, NULL};
const tsr_op_def tsr_op_values_f64 = {"values_f64", 0, 0, values_infer, values_cpu, false, NULL};
const tsr_op_def tsr_op_clip = {"clip", 1, 1, clip_infer, clip_cpu, false, NULL};
