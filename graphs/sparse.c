/* Sparse primitives (tessera/singlecell.h): statistics, pattern-keeping
 * maps, selection, and the small helper arrays they need. Every builder
 * reads a CSR array with one column chunk (tsr_as_csr_rows makes one);
 * per-column results are the tree sum (gtask_sum_tree) of one partial
 * per row chunk, per-row results keep x's row chunks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/singlecell.h"

#define TSR_API __attribute__((visibility("default")))

TSR_API int tsr_as_csr_rows(tsr_array_ctx *ctx, const tsr_array *x, tsr_array **out_p)
{
  int rc = garray_check_2d(x, "sparse");
  if (rc != 0) return rc;
  if (x->encoding == TSR_ENC_CSR && x->nchunks[1] == 1) return garray_view(ctx, "csr", x, out_p);
  const tsr_array *d = x;
  tsr_array *re = NULL;
  int64_t want[2] = {-1, x->shape[1]};
  rc = garray_dense(ctx, x, &d);
  if (rc == 0 && d->nchunks[1] != 1) rc = tsr_rechunk(ctx, d, want, &re);
  return rc == 0 ? tsr_sparse(ctx, re ? re : d, out_p) : rc;
}

/* The CSR view of x that the builders below read (owned by ctx). */
static int csr_input(tsr_array_ctx *ctx, const tsr_array *x, const char *what, tsr_array **out_p)
{
  if (ctx == NULL || x == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "%s: NULL argument", what);
  return tsr_as_csr_rows(ctx, x, out_p);
}

/* params common to every sparse task over block b: its logical shape. */
static int block_args(const tsr_array *x, size_t b, tsr_args **args_p)
{
  int64_t idx[2] = {(int64_t)b, 0}, shape[2];
  garray_block_shape(x, idx, shape);
  int rc = tsr_args_new(args_p);
  if (rc == 0) rc = gargs_shape(*args_p, "shape", 2, shape);
  return rc;
}

/* csr_sum of every block (mu: the sqdev pass's mean key, or NULL); per
 * column the partials are tree-summed into out's one key. */
static int reduce_blocks(tsr_array_ctx *ctx, const tsr_array *x, int axis, const char *stat, const char *mu,
                         tsr_array **out_p)
{
  int64_t len = axis == 0 ? x->shape[1] : x->shape[0], chunk = axis == 0 ? 0 : x->chunk[0];
  tsr_array *out = NULL;
  char **partial = calloc(x->nblocks, sizeof *partial);
  int rc = partial ? garray_new(ctx, "csr-sum", TSR_F64, 1, &len, &chunk, &out) : client_fail(TSR_ENOMEM, "sparse: out of memory");
  for (size_t b = 0; rc == 0 && b < x->nblocks; b++) {
    tsr_args *args = NULL;
    const char *in[2] = {x->keys[b], mu};
    char key[256];
    rc = block_args(x, b, &args);
    if (rc == 0) rc = tsr_args_int(args, "axis", axis);
    if (rc == 0) rc = tsr_args_str(args, "stat", stat);
    if (rc == 0 && axis == 1) rc = gtask_add(ctx, out->keys[b], "csr_sum", args, in, mu ? 2 : 1);
    if (rc == 0 && axis == 0) rc = gtask_add_tmp(ctx, "csr-sum-chunk", "csr_sum", args, in, mu ? 2 : 1, key, sizeof key);
    if (rc == 0 && axis == 0) partial[b] = strdup(key);
    tsr_args_destroy(&args);
  }
  char root[256];
  if (rc == 0 && axis == 0) rc = gtask_sum_tree(ctx, "csr-sum-tree", partial, x->nblocks, 8, root, sizeof root);
  if (rc == 0 && axis == 0) {
    free(out->keys[0]);
    out->keys[0] = strdup(root);
  }
  for (size_t b = 0; partial && b < x->nblocks; b++) free(partial[b]);
  free(partial);
  if (rc != 0) tsr_array_free(ctx, &out);
  else *out_p = out;
  return rc;
}

TSR_API int tsr_sparse_reduce(tsr_array_ctx *ctx, const tsr_array *x, int axis, tsr_sparse_stat stat, tsr_array **out_p)
{
  static const char *const names[] = {"sum", "nnz", "sumsq"};
  tsr_array *xs = NULL;
  if ((int)stat < 0 || stat > TSR_SPARSE_SUMSQ) return client_fail(TSR_EINVAL, "sparse_reduce: unknown stat %d", (int)stat);
  if (axis != 0 && axis != 1) return client_fail(TSR_EINVAL, "sparse_reduce: axis %d is not 0 or 1", axis);
  int rc = csr_input(ctx, x, "sparse_reduce", &xs);
  return rc == 0 ? reduce_blocks(ctx, xs, axis, names[stat], NULL, out_p) : rc;
}

TSR_API int tsr_sparse_mean_var(tsr_array_ctx *ctx, const tsr_array *x, int ddof, tsr_array **mean_p, tsr_array **var_p)
{
  tsr_array *xs = NULL, *sum = NULL, *mean = NULL, *sqdev = NULL;
  int rc = csr_input(ctx, x, "sparse_mean_var", &xs);
  if (rc != 0) return rc;
  double n = (double)xs->shape[0];
  if (ddof < 0 || n - ddof <= 0)
    return client_fail(TSR_EINVAL, "sparse_mean_var: ddof %d with %lld rows", ddof, (long long)xs->shape[0]);
  rc = reduce_blocks(ctx, xs, 0, "sum", NULL, &sum);
  if (rc == 0) rc = tsr_scale(ctx, sum, 1.0 / n, 0.0, &mean);
  if (rc == 0 && var_p != NULL) rc = reduce_blocks(ctx, xs, 0, "sqdev", mean->keys[0], &sqdev);
  if (rc == 0 && var_p != NULL) rc = tsr_scale(ctx, sqdev, 1.0 / (n - ddof), 0.0, var_p);
  if (rc == 0 && mean_p != NULL) *mean_p = mean;
  return rc;
}

/* What a pattern-keeping op takes besides the block: csr_map's fn and
 * factor, or csr_normalize_rows's target (fn NULL). */
typedef struct map_params {
  const char *fn;
  double factor, target;
} map_params;

/* A CSR array of x's geometry whose block b is op(x_b [, vec_b]). */
static int map_blocks(tsr_array_ctx *ctx, const tsr_array *x, const char *op, const map_params *mp, const tsr_array *vec,
                      tsr_dtype dtype, tsr_array **out_p)
{
  tsr_array *out = NULL;
  int rc = garray_new(ctx, op, dtype, 2, x->shape, x->chunk, &out);
  for (size_t b = 0; rc == 0 && b < x->nblocks; b++) {
    tsr_args *args = NULL;
    const char *in[2] = {x->keys[b], vec ? vec->keys[b] : NULL};
    rc = block_args(x, b, &args);
    if (rc == 0 && mp->fn != NULL) rc = tsr_args_str(args, "fn", mp->fn);
    if (rc == 0 && mp->fn != NULL) rc = tsr_args_float(args, "factor", mp->factor);
    if (rc == 0 && mp->fn == NULL) rc = tsr_args_float(args, "target", mp->target);
    if (rc == 0) rc = tsr_args_str(args, "dtype", gdtype_name(dtype));
    /* The input's value dtype makes infer() exact (csr_map.c): the op can
     * then run on a GPU worker's device. */
    if (rc == 0) rc = tsr_args_str(args, "in_dtype", gdtype_name(x->dtype));
    if (rc == 0) rc = gtask_add(ctx, out->keys[b], op, args, in, vec ? 2 : 1);
    tsr_args_destroy(&args);
  }
  if (rc != 0) return tsr_array_free(ctx, &out), rc;
  out->encoding = TSR_ENC_CSR;
  *out_p = out;
  return 0;
}

static tsr_dtype value_dtype(tsr_dtype want, tsr_dtype have)
{
  if (want == TSR_F32 || want == TSR_F64) return want;
  return gdtype_is_float(have) ? have : TSR_F32;
}

TSR_API int tsr_sparse_map(tsr_array_ctx *ctx, const tsr_array *x, const char *fn, double factor, tsr_dtype dtype,
                           tsr_array **out_p)
{
  tsr_array *xs = NULL;
  map_params mp = {fn, factor, 0};
  if (fn == NULL || (strcmp(fn, "none") != 0 && strcmp(fn, "log1p") != 0 && strcmp(fn, "expm1") != 0))
    return client_fail(TSR_EINVAL, "sparse_map: unknown fn '%s' (none, log1p, expm1)", fn ? fn : "(null)");
  int rc = csr_input(ctx, x, "sparse_map", &xs);
  return rc == 0 ? map_blocks(ctx, xs, "csr_map", &mp, NULL, value_dtype(dtype, xs->dtype), out_p) : rc;
}

TSR_API int tsr_sparse_normalize_rows(tsr_array_ctx *ctx, const tsr_array *x, const tsr_array *totals, double target,
                                      tsr_dtype dtype, tsr_array **out_p)
{
  tsr_array *xs = NULL, *tot = NULL;
  map_params mp = {NULL, 1.0, target};
  if (!(target > 0)) return client_fail(TSR_EINVAL, "normalize_rows: target %g must be > 0", target);
  int rc = csr_input(ctx, x, "normalize_rows", &xs);
  if (rc == 0 && (totals == NULL || totals->ndim != 1 || totals->shape[0] != xs->shape[0] || totals->dtype != TSR_F64))
    rc = client_fail(TSR_ESHAPE, "normalize_rows: totals must be f64 with one value per row (%lld)", (long long)xs->shape[0]);
  int64_t want[1] = {xs->chunk[0]};
  if (rc == 0) rc = tsr_rechunk(ctx, totals, want, &tot);
  if (rc == 0) rc = map_blocks(ctx, xs, "csr_normalize_rows", &mp, tot, value_dtype(dtype, xs->dtype), out_p);
  return rc;
}

/* ---------- selection ---------- */

/* Runs of mask as (start, length) pairs; NULL mask: everything. */
static int mask_runs(const uint8_t *mask, int64_t n, int64_t **runs_p, size_t *nr_p, int64_t *kept_p)
{
  int64_t *runs = malloc(sizeof *runs * (size_t)(n + 2)), kept = 0;
  size_t nr = 0;
  if (runs == NULL) return client_fail(TSR_ENOMEM, "select: out of memory");
  for (int64_t i = 0; i < n; i++) {
    if (mask != NULL && !mask[i]) continue;
    if (nr > 0 && runs[nr - 2] + runs[nr - 1] == i) runs[nr - 1]++;
    else runs[nr++] = i, runs[nr++] = 1;
    kept++;
  }
  *runs_p = runs, *nr_p = nr, *kept_p = kept;
  return 0;
}

/* The mask_from_runs task of the column mask; its key to key (cap). */
static int column_mask_task(tsr_array_ctx *ctx, const uint8_t *mask, int64_t n, int64_t *kept_p, char *key, size_t cap)
{
  int64_t *runs = NULL;
  size_t nr = 0;
  tsr_args *args = NULL;
  int rc = mask_runs(mask, n, &runs, &nr, kept_p);
  if (rc == 0) rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_int(args, "n", n);
  if (rc == 0) rc = tsr_args_ints(args, "runs", runs, nr);
  if (rc == 0) rc = gtask_add_tmp(ctx, "col-mask", "mask_from_runs", args, NULL, 0, key, cap);
  tsr_args_destroy(&args);
  free(runs);
  return rc;
}

/* One output block: kept rows [lo, hi) of the kept list `rows` (global
 * indices, ascending), gathered from x's blocks. */
static int gather_block(tsr_array_ctx *ctx, const tsr_array *x, const int64_t *rows, int64_t lo, int64_t hi,
                        const char *col_mask, const char *key)
{
  int64_t c = x->chunk[0], first_block = rows[lo] / c, last_block = rows[hi - 1] / c;
  size_t np = (size_t)(last_block - first_block + 1), n_runs = 0;
  const char **in = calloc(np + 1, sizeof *in);
  int64_t *piece_rows = calloc(np, sizeof *piece_rows), *runs = calloc(3 * (size_t)(hi - lo), sizeof *runs);
  tsr_args *args = NULL;
  int rc = in && piece_rows && runs ? tsr_args_new(&args) : client_fail(TSR_ENOMEM, "select: out of memory");
  for (size_t p = 0; rc == 0 && p < np; p++) {
    in[p] = x->keys[first_block + (int64_t)p];
    piece_rows[p] = garray_chunk_len(x, 0, first_block + (int64_t)p);
  }
  for (int64_t k = lo; rc == 0 && k < hi; k++) {
    int64_t p = rows[k] / c - first_block, local = rows[k] % c;
    if (n_runs > 0 && runs[3 * n_runs - 3] == p && runs[3 * n_runs - 2] + runs[3 * n_runs - 1] == local) runs[3 * n_runs - 1]++;
    else runs[3 * n_runs] = p, runs[3 * n_runs + 1] = local, runs[3 * n_runs + 2] = 1, n_runs++;
  }
  if (rc == 0 && col_mask) in[np] = col_mask;
  if (rc == 0) rc = tsr_args_str(args, "dtype", gdtype_name(x->dtype));
  if (rc == 0) rc = tsr_args_ints(args, "piece_rows", piece_rows, np);
  if (rc == 0) rc = tsr_args_ints(args, "runs", runs, 3 * n_runs);
  if (rc == 0) rc = tsr_args_int(args, "in_cols", x->shape[1]);
  if (rc == 0 && col_mask) rc = tsr_args_bool(args, "col_mask", true);
  if (rc == 0) rc = gtask_add(ctx, key, "csr_gather", args, in, np + (col_mask != NULL));
  tsr_args_destroy(&args);
  free(in), free(piece_rows), free(runs);
  return rc;
}

TSR_API int tsr_sparse_select(tsr_array_ctx *ctx, const tsr_array *x, const uint8_t *row_mask, const uint8_t *col_mask,
                              int64_t row_chunk, tsr_array **out_p)
{
  tsr_array *xs = NULL, *out = NULL;
  int rc = csr_input(ctx, x, "sparse_select", &xs);
  if (rc != 0) return rc;
  int64_t n = xs->shape[0], kept_cols = xs->shape[1], kept_rows = 0;
  int64_t *rows = malloc(sizeof *rows * (size_t)(n + 1));
  if (rows == NULL) return client_fail(TSR_ENOMEM, "select: out of memory");
  for (int64_t i = 0; i < n; i++)
    if (row_mask == NULL || row_mask[i]) rows[kept_rows++] = i;
  char mask_key[256];
  if (col_mask != NULL) rc = column_mask_task(ctx, col_mask, xs->shape[1], &kept_cols, mask_key, sizeof mask_key);
  if (rc == 0 && (kept_rows == 0 || kept_cols == 0))
    rc = client_fail(TSR_ESHAPE, "sparse_select: keeps %lld rows x %lld columns of %lld x %lld (nothing left)",
                     (long long)kept_rows, (long long)kept_cols, (long long)n, (long long)xs->shape[1]);
  int64_t shape[2] = {kept_rows, kept_cols}, chunks[2] = {row_chunk > 0 ? row_chunk : xs->chunk[0], 0};
  if (rc == 0) rc = garray_new(ctx, "select", xs->dtype, 2, shape, chunks, &out);
  for (int64_t b = 0; rc == 0 && b < out->nchunks[0]; b++) {
    int64_t lo = b * out->chunk[0], hi = lo + garray_chunk_len(out, 0, b);
    rc = gather_block(ctx, xs, rows, lo, hi, col_mask ? mask_key : NULL, out->keys[b]);
  }
  free(rows);
  if (rc != 0) return tsr_array_free(ctx, &out), rc;
  out->encoding = TSR_ENC_CSR;
  *out_p = out;
  return 0;
}

/* ---------- small helpers ---------- */

TSR_API int tsr_clip(tsr_array_ctx *ctx, const tsr_array *a, double lo, double hi, tsr_array **out_p)
{
  tsr_args *args = NULL;
  if (ctx == NULL || a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "clip: NULL argument");
  if (!gdtype_is_float(a->dtype)) return client_fail(TSR_ESHAPE, "clip: needs a float array, got %s", gdtype_name(a->dtype));
  int rc = tsr_args_new(&args);
  if (rc == 0 && isfinite(lo)) rc = tsr_args_float(args, "lo", lo);
  if (rc == 0 && isfinite(hi)) rc = tsr_args_float(args, "hi", hi);
  if (rc == 0) rc = tsr_map_blocks(ctx, "clip", args, a, a->dtype, out_p);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_from_values(tsr_array_ctx *ctx, const double *values, int64_t n, tsr_array **out_p)
{
  tsr_args *args = NULL;
  tsr_array *out = NULL;
  if (ctx == NULL || values == NULL || out_p == NULL || n < 1) return client_fail(TSR_EINVAL, "from_values: NULL or empty");
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_floats(args, "values", values, (size_t)n);
  if (rc == 0) rc = garray_new(ctx, "values", TSR_F64, 1, &n, NULL, &out);
  if (rc == 0) rc = gtask_add(ctx, out->keys[0], "values_f64", args, NULL, 0);
  tsr_args_destroy(&args);
  if (rc != 0) return tsr_array_free(ctx, &out), rc;
  *out_p = out;
  return 0;
}
