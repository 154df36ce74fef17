/* Exact kNN (tessera/cluster.h, tsr_knn) as knn_tile tasks and a
 * knn_merge task per row block and output (indices, distances)
 * (kernels/cpu/knn.c), laid out for the workers there are:
 * - CPU clusters: a knn_chain tile for every pair of row blocks i <= j
 *   (i < j: the product scanned both ways, half the GEMMs), in rounds of
 *   disjoint pairs, each continuing its blocks' candidate lists from their
 *   last tile (knn_cpu_graph); then a knn_finish (exact re-rank) and two
 *   knn_merge tasks (one input) per block. Row blocks are equal, at most
 *   KNN_MAX_BLOCK rows.
 * - clusters with GPU workers: a plain tile for every row block i (at most
 *   KNN_GPU_ROWS rows) and column block j of up to KNN_GPU_COL_BYTES (all
 *   rows, below 5M rows of 50 f32), because a tile restarts its rows'
 *   candidate lists: the GPU's selection work grows with the number of
 *   column blocks (kernels/cuda/knn_tc.cu), while a 16,384-row tile
 *   against a million columns still takes only tens of milliseconds. The
 *   CUDA variants keep only registers or sub-tiles of the distances on
 *   the device and take the plain contract only (no pair tiles). */
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/cluster.h"
#include "tessera/tessera.h"

#define TSR_API __attribute__((visibility("default")))
#define KNN_MAX_BLOCK 32768
#define KNN_GPU_ROWS 24576
#define KNN_GPU_COL_BYTES ((int64_t)1 << 30)

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

/* x dense, one column chunk, row chunks of at most max_block. */
static int knn_blocks(tsr_array_ctx *ctx, const tsr_array *x, int64_t max_block, const tsr_array **out_p)
{
  int rc = garray_dense(ctx, x, &x);
  if (rc != 0) return rc;
  if (x->nchunks[1] == 1 && x->chunk[0] <= max_block) {
    *out_p = x;
    return 0;
  }
  /* Equal blocks as large as allowed: a tile restarts its rows' candidate
   * lists, so fewer, larger tiles scan less (100k rows: 4 blocks, 10 tiles). */
  int64_t n = x->shape[0], nb = (n + max_block - 1) / max_block;
  int64_t chunks[2] = {x->chunk[0] <= max_block ? x->chunk[0] : (n + nb - 1) / nb, 0};
  tsr_array *r = NULL;
  rc = tsr_rechunk(ctx, x, chunks, &r);
  if (rc == 0) *out_p = r;
  return rc;
}

/* Whether the cluster has a GPU worker now (false when the scheduler
 * cannot say: the CPU blocks then). */
static bool knn_cluster_has_gpu(tsr_array_ctx *ctx)
{
  tsr_cluster_info *info = NULL;
  if (ctx->client == NULL || tsr_cluster_info_get(ctx->client, 10000, &info) != 0) return false;
  bool gpu = false;
  for (size_t i = 0; i < info->n_workers; i++) gpu = gpu || strncmp(info->workers[i].device, "gpu", 3) == 0;
  tsr_cluster_info_destroy(&info);
  return gpu;
}

/* The GPU column blocks: x in row chunks of KNN_GPU_COL_BYTES (one chunk
 * when x is smaller), or x itself when its chunks are that large. */
static int knn_columns(tsr_array_ctx *ctx, const tsr_array *x, const tsr_array **cols_p)
{
  int64_t row_bytes = x->shape[1] * (int64_t)tsr_dtype_size(x->dtype);
  int64_t rows = KNN_GPU_COL_BYTES / (row_bytes > 0 ? row_bytes : 1);
  rows = rows < KNN_GPU_ROWS ? KNN_GPU_ROWS : rows;
  *cols_p = x;
  if (x->chunk[0] >= rows || x->nchunks[0] == 1) return 0;
  int64_t chunks[2] = {x->shape[0] < rows ? x->shape[0] : rows, 0};
  tsr_array *r = NULL;
  int rc = tsr_rechunk(ctx, x, chunks, &r);
  if (rc == 0) *cols_p = r;
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

/* The tiles of row block i of x against the column blocks of xc into
 * keys[0..xc->nchunks[0]). */
static int knn_gpu_row_tiles(tsr_array_ctx *ctx, const tsr_array *x, const tsr_array *xc, int k, tsr_metric metric,
                         int64_t i, char **keys)
{
  int rc = 0;
  for (int64_t j = 0; rc == 0 && j < xc->nchunks[0]; j++) {
    tsr_args *args = NULL;
    const char *in[2] = {x->keys[i], xc->keys[j]};
    rc = knn_args(k, metric, i * x->chunk[0], j * xc->chunk[0], -1, &args);
    if (rc == 0) rc = gtask_add_tmp(ctx, "knn-tile", "knn_tile", args, in, 2, keys[j], 256);
    tsr_args_destroy(&args);
  }
  return rc;
}

/* Block i's merges over its row of plain tiles. */
static int knn_gpu_merges(tsr_array_ctx *ctx, int k, tsr_metric metric, int64_t i, int64_t row0, char **keys, int64_t nb,
                      tsr_array *const *outs)
{
  int rc = 0;
  for (int part = 0; rc == 0 && part < 2; part++) {
    tsr_args *args = NULL;
    rc = knn_args(k, metric, row0, -1, part, &args);
    if (rc == 0) rc = gtask_add(ctx, outs[part]->keys[i], "knn_merge", args, (const char *const *)keys, (size_t)nb);
    tsr_args_destroy(&args);
  }
  return rc;
}

/* Keys of nt tile outputs (256 bytes each). */
static int knn_keys(int64_t nt, char ***keys_p, char **store_p)
{
  char **keys = calloc((size_t)nt, sizeof *keys);
  char *store = malloc((size_t)nt * 256);
  if (keys == NULL || store == NULL) {
    free(keys), free(store);
    return client_fail(TSR_ENOMEM, "knn: out of memory for %lld tiles", (long long)nt);
  }
  for (int64_t j = 0; j < nt; j++) keys[j] = store + j * 256;
  *keys_p = keys, *store_p = store;
  return 0;
}

/* One knn_chain tile (i, j) into key: block i's rows (and, i < j, block
 * j's) continue the candidate lists they hold in state[b] (a tile's key,
 * rows from off[b]); then state[i], state[j] point into this tile. */
static int knn_chain_tile(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, int64_t i, int64_t j,
                          char **state, int64_t *off, char *key)
{
  tsr_args *args = NULL;
  const char *in[4] = {x->keys[i], x->keys[j]};
  int n = 2;
  int rc = knn_args(k, metric, i * x->chunk[0], j * x->chunk[0], -1, &args);
  if (rc == 0 && i == j) rc = tsr_args_int(args, "sym", 1);
  if (rc == 0 && state[i] != NULL) rc = tsr_args_int(args, "si", off[i]), in[n++] = state[i];
  if (rc == 0 && i != j && state[j] != NULL) rc = tsr_args_int(args, "sj", off[j]), in[n++] = state[j];
  if (rc == 0) rc = gtask_add_tmp(ctx, "knn-tile", "knn_chain", args, in, (size_t)n, key, 256);
  tsr_args_destroy(&args);
  state[i] = key, off[i] = 0;
  if (i != j) state[j] = key, off[j] = x->shape[0] - i * x->chunk[0] < x->chunk[0] ? x->shape[0] - i * x->chunk[0] : x->chunk[0];
  return rc;
}

/* Block i's finish (its candidates' exact distances, from every block's
 * rows) and its two merges (self first, the outputs' chunks). */
static int knn_chain_finish(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, int64_t i,
                            const char *state, int64_t off, char *key, tsr_array *const *outs)
{
  int64_t nb = x->nchunks[0];
  const char **in = malloc((size_t)(nb + 1) * sizeof *in);
  tsr_args *args = NULL;
  int rc = in != NULL ? knn_args(k, metric, i * x->chunk[0], -1, -1, &args) : client_fail(TSR_ENOMEM, "knn: out of memory");
  if (rc == 0) rc = tsr_args_int(args, "off", off);
  if (rc == 0) rc = tsr_args_int(args, "block", i);
  if (rc == 0) rc = tsr_args_int(args, "chunk", x->chunk[0]);
  for (int64_t b = 0; rc == 0 && b < nb; b++) in[b + 1] = x->keys[b];
  if (rc == 0) in[0] = state, rc = gtask_add_tmp(ctx, "knn-finish", "knn_finish", args, in, (size_t)nb + 1, key, 256);
  tsr_args_destroy(&args);
  for (int part = 0; rc == 0 && part < 2; part++) {
    rc = knn_args(k, metric, i * x->chunk[0], -1, part, &args);
    if (rc == 0) rc = gtask_add(ctx, outs[part]->keys[i], "knn_merge", args, (const char *const *)&key, 1);
    tsr_args_destroy(&args);
  }
  free(in);
  return rc;
}

/* CPU workers: every block first against itself, then the pairs of blocks
 * in rounds of disjoint pairs (the circle method: a block meets each other
 * once), each tile continuing its blocks' candidate lists from their last
 * tile — so a row keeps one list over all of x instead of restarting it in
 * every tile (a list takes ~K·ln(N/K) hits, most while it fills), and a
 * round's tiles run side by side. */
static int knn_cpu_graph(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, tsr_array *const *outs)
{
  int64_t nb = x->nchunks[0], np = nb + (nb & 1);  /* odd: a bye each round */
  char **keys = NULL, *store = NULL, **state = calloc((size_t)nb, sizeof *state);
  int64_t *off = calloc((size_t)nb, sizeof *off), t = 0;
  int rc = state && off ? knn_keys(nb * (nb + 1) / 2 + nb, &keys, &store) : client_fail(TSR_ENOMEM, "knn: out of memory");
  for (int64_t i = 0; rc == 0 && i < nb; i++) rc = knn_chain_tile(ctx, x, k, metric, i, i, state, off, keys[t++]);
  for (int64_t r = 0; rc == 0 && r < np - 1; r++)
    for (int64_t q = 0; rc == 0 && q < np / 2; q++) {
      int64_t a = q == 0 ? np - 1 : (r + q) % (np - 1), b = (r - q + np - 1) % (np - 1);
      if (q == 0) b = r;
      int64_t lo = a < b ? a : b, hi = a < b ? b : a;
      if (hi < nb) rc = knn_chain_tile(ctx, x, k, metric, lo, hi, state, off, keys[t++]);
    }
  for (int64_t i = 0; rc == 0 && i < nb; i++) rc = knn_chain_finish(ctx, x, k, metric, i, state[i], off[i], keys[t++], outs);
  free(keys), free(store), free(state), free(off);
  return rc;
}

static int knn_gpu_graph(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, tsr_array *const *outs)
{
  const tsr_array *xc = NULL;
  int rc = knn_columns(ctx, x, &xc);
  if (rc != 0) return rc;
  int64_t nb = xc->nchunks[0];
  char **keys = NULL, *store = NULL;
  rc = knn_keys(nb, &keys, &store);
  for (int64_t i = 0; rc == 0 && i < x->nchunks[0]; i++) {
    rc = knn_gpu_row_tiles(ctx, x, xc, k, metric, i, keys);
    if (rc == 0) rc = knn_gpu_merges(ctx, k, metric, i, i * x->chunk[0], keys, nb, outs);
  }
  free(keys), free(store);
  return rc;
}

TSR_API int tsr_knn(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, tsr_array **indices_p,
                    tsr_array **distances_p)
{
  if (ctx == NULL || indices_p == NULL || distances_p == NULL) return client_fail(TSR_EINVAL, "knn: NULL argument");
  int rc = knn_check(x, k, metric);
  bool gpu = rc == 0 && knn_cluster_has_gpu(ctx);
  if (rc == 0) rc = knn_blocks(ctx, x, gpu ? KNN_GPU_ROWS : KNN_MAX_BLOCK, &x);
  if (rc != 0) return rc;
  int64_t shape[2] = {x->shape[0], k}, chunks[2] = {x->chunk[0], k};
  tsr_array *outs[2] = {NULL, NULL};
  rc = garray_new(ctx, "knn-indices", TSR_I64, 2, shape, chunks, &outs[0]);
  if (rc == 0) rc = garray_new(ctx, "knn-distances", TSR_F32, 2, shape, chunks, &outs[1]);
  if (rc == 0) rc = gpu ? knn_gpu_graph(ctx, x, k, metric, outs) : knn_cpu_graph(ctx, x, k, metric, outs);
  if (rc != 0) {
    tsr_array_free(ctx, &outs[0]);
    tsr_array_free(ctx, &outs[1]);
    return rc;
  }
  *indices_p = outs[0];
  *distances_p = outs[1];
  return 0;
}
