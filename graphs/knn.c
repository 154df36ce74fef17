/* Exact kNN (tessera/cluster.h, tsr_knn): a knn_tile task for every pair
 * of row blocks i <= j — for i < j one "pair" tile that scans the product
 * both ways (X_i's rows among X_j's and X_j's among X_i's: half the GEMMs
 * of all (i, j)) — and a knn_merge task per row block and output
 * (indices, distances) over the nb tiles that hold its rows, "diag" saying
 * which part of each it reads (kernels/cpu/knn.c). The row blocks are x's
 * row chunks, at most KNN_MAX_BLOCK rows. */
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/cluster.h"

#define TSR_API __attribute__((visibility("default")))
#define KNN_MAX_BLOCK 32768

static int knn_check(const tsr_array *x, int k, tsr_metric metric)
{
  int rc = x == NULL ? client_fail(TSR_EINVAL, "knn: the array is NULL") : garray_check_2d(x, "knn");
  if (rc != 0) return rc;
  if (x->dtype != TSR_F32 && x->dtype != TSR_F64)
    return client_fail(TSR_EINVAL, "knn: needs an f32 or f64 array, got %s (astype first)", gdtype_name(x->dtype));
  if (k < 1 || (int64_t)k > x->shape[0])
    return client_fail(TSR_EINVAL, "knn: k = %d outside 1..%lld (the number of rows, each row counting itself)", k,
                       (long long)x->shape[0]);
  if (metric != TSR_METRIC_EUCLIDEAN && metric != TSR_METRIC_COSINE)
    return client_fail(TSR_EINVAL, "knn: unknown metric %d (euclidean or cosine)", (int)metric);
  return 0;
}

/* x dense, one column chunk, row chunks of at most KNN_MAX_BLOCK. */
static int knn_blocks(tsr_array_ctx *ctx, const tsr_array *x, const tsr_array **out_p)
{
  int rc = garray_dense(ctx, x, &x);
  if (rc != 0) return rc;
  if (x->nchunks[1] == 1 && x->chunk[0] <= KNN_MAX_BLOCK) {
    *out_p = x;
    return 0;
  }
  /* Equal blocks as large as allowed: a tile restarts its rows' candidate
   * lists, so fewer, larger tiles scan less (100k rows: 4 blocks, 10 tiles). */
  int64_t n = x->shape[0], nb = (n + KNN_MAX_BLOCK - 1) / KNN_MAX_BLOCK;
  int64_t chunks[2] = {x->chunk[0] <= KNN_MAX_BLOCK ? x->chunk[0] : (n + nb - 1) / nb, 0};
  tsr_array *r = NULL;
  rc = tsr_rechunk(ctx, x, chunks, &r);
  if (rc == 0) *out_p = r;
  return rc;
}

static int knn_args(int k, tsr_metric metric, int64_t row0, int64_t col0, int part, tsr_args **args_p)
{
  int rc = tsr_args_new(args_p);
  if (rc == 0) rc = tsr_args_int(*args_p, "k", k);
  if (rc == 0) rc = tsr_args_int(*args_p, "metric", (int64_t)metric);
  if (rc == 0) rc = tsr_args_int(*args_p, "row0", row0);
  if (rc == 0 && col0 >= 0) rc = tsr_args_int(*args_p, "col0", col0);
  if (rc == 0 && part >= 0) rc = tsr_args_int(*args_p, "part", part);
  return rc;
}

/* The tiles (i, j), j >= i, into keys[i·nb + j]. */
static int knn_row_tiles(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, int64_t i, char **keys)
{
  int rc = 0;
  int64_t nb = x->nchunks[0];
  for (int64_t j = i; rc == 0 && j < nb; j++) {
    tsr_args *args = NULL;
    const char *in[2] = {x->keys[i], x->keys[j]};
    rc = knn_args(k, metric, i * x->chunk[0], j * x->chunk[0], -1, &args);
    if (rc == 0 && j > i) rc = tsr_args_int(args, "pair", 1);
    if (rc == 0) rc = gtask_add_tmp(ctx, "knn-tile", "knn_tile", args, in, 2, keys[i * nb + j], 256);
    tsr_args_destroy(&args);
  }
  return rc;
}

/* Block i's merges over the tiles (min(i, j), max(i, j)) for every j. */
static int knn_merges(tsr_array_ctx *ctx, int k, tsr_metric metric, int64_t i, int64_t row0, char **keys, int64_t nb,
                      tsr_array *const *outs)
{
  const char **in = malloc((size_t)nb * sizeof *in);
  if (in == NULL) return client_fail(TSR_ENOMEM, "knn: out of memory for %lld blocks", (long long)nb);
  for (int64_t j = 0; j < nb; j++) in[j] = j < i ? keys[j * nb + i] : keys[i * nb + j];
  int rc = 0;
  for (int part = 0; rc == 0 && part < 2; part++) {
    tsr_args *args = NULL;
    rc = knn_args(k, metric, row0, -1, part, &args);
    if (rc == 0) rc = tsr_args_int(args, "diag", i);
    if (rc == 0) rc = gtask_add(ctx, outs[part]->keys[i], "knn_merge", args, in, (size_t)nb);
    tsr_args_destroy(&args);
  }
  free(in);
  return rc;
}

TSR_API int tsr_knn(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, tsr_array **indices_p,
                    tsr_array **distances_p)
{
  if (ctx == NULL || indices_p == NULL || distances_p == NULL) return client_fail(TSR_EINVAL, "knn: NULL argument");
  int rc = knn_check(x, k, metric);
  if (rc == 0) rc = knn_blocks(ctx, x, &x);
  if (rc != 0) return rc;
  int64_t nb = x->nchunks[0], shape[2] = {x->shape[0], k}, chunks[2] = {x->chunk[0], k};
  tsr_array *outs[2] = {NULL, NULL};
  char **keys = calloc((size_t)(nb * nb), sizeof *keys);
  char *store = malloc((size_t)(nb * nb) * 256);
  if (keys == NULL || store == NULL) rc = client_fail(TSR_ENOMEM, "knn: out of memory for %lld blocks", (long long)nb);
  for (int64_t j = 0; rc == 0 && j < nb * nb; j++) keys[j] = store + j * 256;
  if (rc == 0) rc = garray_new(ctx, "knn-indices", TSR_I64, 2, shape, chunks, &outs[0]);
  if (rc == 0) rc = garray_new(ctx, "knn-distances", TSR_F32, 2, shape, chunks, &outs[1]);
  for (int64_t i = 0; rc == 0 && i < nb; i++) rc = knn_row_tiles(ctx, x, k, metric, i, keys);
  for (int64_t i = 0; rc == 0 && i < nb; i++) rc = knn_merges(ctx, k, metric, i, i * x->chunk[0], keys, nb, outs);
  free(keys), free(store);
  if (rc != 0) {
    tsr_array_free(ctx, &outs[0]);
    tsr_array_free(ctx, &outs[1]);
    return rc;
  }
  *indices_p = outs[0];
  *distances_p = outs[1];
  return 0;
}
