/* Transpose and reductions. Sums run per block, then the partial sums of
 * the blocks that share an output block are combined in a tree of n-ary
 * `add` tasks, split_every at a time (Dask's split_every). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

TSR_API int tsr_transpose(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p)
{
  int rc = garray_check_2d(a, "transpose");
  if (rc == 0) rc = garray_dense(ctx, a, &a);
  if (rc != 0) return rc;
  int64_t shape[2] = {a->shape[1], a->shape[0]}, chunks[2] = {a->chunk[1], a->chunk[0]};
  tsr_array *out = NULL;
  rc = garray_new(ctx, "transpose", a->dtype, 2, shape, chunks, &out);
  for (int64_t i = 0; rc == 0 && i < a->nchunks[0]; i++)
    for (int64_t j = 0; rc == 0 && j < a->nchunks[1]; j++) {
      int64_t src[2] = {i, j}, dst[2] = {j, i};
      const char *in = a->keys[garray_block(a, src)];
      rc = gtask_add(ctx, out->keys[garray_block(out, dst)], "transpose", NULL, &in, 1);
    }
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}

static tsr_dtype sum_dtype(tsr_dtype dtype) { return dtype == TSR_F32 || dtype == TSR_F64 ? dtype : TSR_I64; }

/* What a reduction skips and whether it counts (kernels/cpu/reduce.c). */
typedef enum { RED_SUM, RED_NANSUM, RED_COUNT } reduction;

/* The params that make `sum` skip a's missing values (and count). */
static int skip_args(tsr_args *args, const tsr_array *a, reduction red)
{
  int rc = 0;
  if (red == RED_SUM) return 0;
  if (a->missing >= 0) rc = tsr_args_int(args, "missing", a->missing);
  else if (a->dtype == TSR_F32 || a->dtype == TSR_F64) rc = tsr_args_bool(args, "skipna", true);
  if (rc == 0 && red == RED_COUNT) rc = tsr_args_bool(args, "count", true);
  return rc;
}

/* Partial sum of every block; axis -1 for the total. Keys to partial[].
 * Column sums of a 2-bit packed array read the packed chunks (`cols`). */
static int partial_sums(tsr_array_ctx *ctx, const tsr_array *a, int axis, reduction red, char **partial)
{
  int rc = 0;
  for (size_t b = 0; b < a->nblocks && rc == 0; b++) {
    tsr_args *args = NULL;
    char key[256];
    const char *in = a->keys[b];
    int64_t idx[TSR_MAX_NDIM];
    garray_index(a, b, idx);
    rc = tsr_args_new(&args);
    if (rc == 0) rc = tsr_args_int(args, "axis", axis);
    if (rc == 0 && a->encoding == TSR_ENC_PACKED2) rc = tsr_args_int(args, "cols", garray_chunk_len(a, 1, idx[1]));
    if (rc == 0) rc = skip_args(args, a, red);
    if (rc == 0) rc = gtask_add_tmp(ctx, "sum-chunk", "sum", args, &in, 1, key, sizeof key);
    tsr_args_destroy(&args);
    partial[b] = strdup(key);
  }
  return rc;
}

/* Reduces the partials of blocks sharing output block ob into out key. */
static int combine(tsr_array_ctx *ctx, const tsr_array *a, int axis, char **partial, tsr_array *out, size_t ob,
                   int split_every)
{
  int64_t oidx[TSR_MAX_NDIM], idx[TSR_MAX_NDIM];
  garray_index(out, ob, oidx);
  int64_t n = axis < 0 ? (int64_t)a->nblocks : a->nchunks[axis];
  char **group = calloc((size_t)n, sizeof *group);
  if (group == NULL) return client_fail(TSR_ENOMEM, "sum: out of memory");
  for (int64_t k = 0; k < n; k++) {
    if (axis < 0) {
      group[k] = partial[k];
      continue;
    }
    for (int d = 0, o = 0; d < a->ndim; d++) idx[d] = d == axis ? k : oidx[o++];
    group[k] = partial[garray_block(a, idx)];
  }
  char root[256];
  int rc = gtask_sum_tree(ctx, "sum-tree", group, (size_t)n, split_every, root, sizeof root);
  /* The output key must name a task: alias the root (no copy). */
  if (rc == 0) {
    free(out->keys[ob]);
    out->keys[ob] = strdup(root);
  }
  free(group);
  return rc;
}

static int reduce(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, reduction red, tsr_array **out_p)
{
  static const char *const names[] = {"sum", "nansum", "count_valid"};
  if (a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "%s: array is NULL", names[red]);
  if (axis < -1 || axis >= a->ndim)
    return client_fail(TSR_EINVAL, "%s: axis %d outside -1..%d", names[red], axis, a->ndim - 1);
  bool packed_columns = a->encoding == TSR_ENC_PACKED2 && a->ndim == 2 && axis == 0;
  int rc0 = packed_columns ? 0 : garray_dense(ctx, a, &a);
  if (rc0 != 0) return rc0;
  int64_t shape[TSR_MAX_NDIM], chunks[TSR_MAX_NDIM];
  int ndim = 0;
  for (int d = 0; axis >= 0 && d < a->ndim; d++)
    if (d != axis) {
      shape[ndim] = a->shape[d];
      chunks[ndim++] = a->chunk[d];
    }
  tsr_array *out = NULL;
  char **partial = calloc(a->nblocks, sizeof *partial);
  if (partial == NULL) return client_fail(TSR_ENOMEM, "sum: out of memory");
  tsr_dtype dtype = red == RED_COUNT ? TSR_I64 : sum_dtype(a->dtype);
  int rc = garray_new(ctx, names[red], dtype, ndim, shape, chunks, &out);
  if (rc == 0) rc = partial_sums(ctx, a, axis, red, partial);
  for (size_t ob = 0; rc == 0 && ob < out->nblocks; ob++) rc = combine(ctx, a, axis, partial, out, ob, split_every);
  for (size_t b = 0; b < a->nblocks; b++) free(partial[b]);
  free(partial);
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}

TSR_API int tsr_sum(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p)
{
  return reduce(ctx, a, axis, split_every, RED_SUM, out_p);
}

TSR_API int tsr_nansum(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p)
{
  return reduce(ctx, a, axis, split_every, RED_NANSUM, out_p);
}

TSR_API int tsr_count_valid(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p)
{
  return reduce(ctx, a, axis, split_every, RED_COUNT, out_p);
}

/* nansum / count, both as f64 (NaN where nothing was counted). */
TSR_API int tsr_nanmean(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p)
{
  tsr_array *sum = NULL, *count = NULL, *fsum = NULL, *fcount = NULL;
  int rc = tsr_nansum(ctx, a, axis, split_every, &sum);
  if (rc == 0) rc = tsr_count_valid(ctx, a, axis, split_every, &count);
  if (rc == 0) rc = tsr_astype(ctx, sum, sum->dtype == TSR_F32 ? TSR_F32 : TSR_F64, &fsum);
  if (rc == 0) rc = tsr_astype(ctx, count, fsum->dtype, &fcount);
  if (rc == 0) rc = tsr_div(ctx, fsum, fcount, out_p);
  return rc;
}

TSR_API int tsr_mean(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p)
{
  tsr_array *sum = NULL, *fsum = NULL;
  int rc = tsr_sum(ctx, a, axis, split_every, &sum);
  if (rc != 0) return rc;
  double count = axis < 0 ? (double)tsr_array_size(a) : (double)a->shape[axis];
  const tsr_array *base = sum;
  if (sum->dtype != TSR_F32 && sum->dtype != TSR_F64) {
    rc = tsr_astype(ctx, sum, TSR_F64, &fsum);
    base = fsum;
  }
  if (rc == 0) rc = tsr_scale(ctx, base, count > 0 ? 1.0 / count : 0.0, 0.0, out_p);
  return rc;
}
