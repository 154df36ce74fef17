/* graphs/tiles_run.c — running a batch of slides as one graph
 * (tsr_tiles_compute) and per-tile maps of any op (tsr_tile_map, the hook
 * for plugin ops such as an embedding).
 *
 * tsr_tiles_compute submits every array's chunks in one graph, then
 * gathers array by array. A failed task fails only the arrays whose chunks
 * need it: their status gets the worker's message, every other array is
 * still filled. Progress is reported as arrays finish and, while a gather
 * waits, about once a second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graphs.h"
#include "tessera/tiles.h"
#include "tiles_int.h"

#define TSR_API __attribute__((visibility("default")))

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct batch_run {
  tsr_array_ctx *ctx;
  tsr_future *future;
  const tsr_tiles_progress *progress;
  size_t n_arrays, arrays_done;
  double last_report;
  int timeout_ms;
} batch_run;

static void report(batch_run *b, bool force)
{
  if (b->progress == NULL || b->progress->fn == NULL) return;
  double t = now_s();
  if (!force && t - b->last_report < b->progress->interval_s) return;
  size_t done = 0, total = 0;
  tsr_future_progress(b->future, &done, &total);
  b->progress->fn(b->progress->arg, b->arrays_done, b->n_arrays, done, total);
  b->last_report = t;
}

/* Gathers one chunk, waking every second to report progress. */
static int gather_chunk(batch_run *b, const char *key, tsr_chunk **chunk_p)
{
  double deadline = b->timeout_ms < 0 ? -1 : now_s() + b->timeout_ms / 1000.0;
  for (;;) {
    int rc = tsr_gather(b->ctx->client, key, 1000, chunk_p);
    if (rc != TSR_ETIMEDOUT) return rc;
    if (deadline >= 0 && now_s() > deadline) return client_fail(rc, "tiles: '%s' not computed in time", key);
    report(b, false);
  }
}

static int gather_array(batch_run *b, const tsr_array *a, char *dst)
{
  for (size_t k = 0; k < a->nblocks; k++) {
    tsr_chunk *chunk = NULL;
    int rc = gather_chunk(b, a->keys[k], &chunk);
    if (rc != 0) return rc;
    int64_t idx[TSR_MAX_NDIM], shape[TSR_MAX_NDIM];
    garray_index(a, k, idx);
    garray_block_shape(a, idx, shape);
    size_t expect = tsr_dtype_size(a->dtype);
    for (int d = 0; d < a->ndim; d++) expect *= (size_t)shape[d];
    if (chunk->dtype != a->dtype || chunk->nbytes != expect) {
      size_t got = chunk->nbytes;
      tsr_chunk_destroy(&chunk);
      return client_fail(TSR_ESHAPE, "tiles: chunk '%s' has %zu bytes, expected %zu", a->keys[k], got, expect);
    }
    grun_place_block(a, k, chunk->data, dst);
    tsr_chunk_destroy(&chunk);
    report(b, false);
  }
  return 0;
}

static char **batch_keys(const tsr_array *const *arrays, size_t n, size_t *count_p)
{
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += arrays[i]->nblocks;
  char **keys = malloc((count ? count : 1) * sizeof *keys);
  for (size_t i = 0, k = 0; keys != NULL && i < n; i++)
    for (size_t j = 0; j < arrays[i]->nblocks; j++) keys[k++] = arrays[i]->keys[j];
  *count_p = count;
  return keys;
}

TSR_API int tsr_tiles_compute(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, void *const *bufs,
                              const size_t *caps, const tsr_tiles_progress *progress, int timeout_ms,
                              tsr_tiles_status *status)
{
  if (ctx == NULL || arrays == NULL || bufs == NULL || caps == NULL || status == NULL)
    return client_fail(TSR_EINVAL, "tiles: NULL argument");
  for (size_t i = 0; i < n; i++) {
    if (arrays[i] == NULL || bufs[i] == NULL || arrays[i]->encoding != TSR_ENC_DENSE)
      return client_fail(TSR_EINVAL, "tiles: array %zu is NULL, encoded or has no buffer", i);
    if (caps[i] < (size_t)tsr_array_size(arrays[i]) * tsr_dtype_size(arrays[i]->dtype))
      return client_fail(TSR_ELIMIT, "tiles: buffer %zu is too small", i);
  }
  size_t count = 0;
  char **keys = batch_keys(arrays, n, &count);
  if (keys == NULL) return client_fail(TSR_ENOMEM, "tiles: out of memory");
  batch_run b = {ctx, NULL, progress, n, 0, 0, timeout_ms};
  int rc = grun_submit_nowait(ctx, keys, count, &b.future);
  free(keys);
  if (rc != 0) return rc;
  int failed = 0;
  for (size_t i = 0; i < n; i++) {
    status[i].rc = gather_array(&b, arrays[i], bufs[i]);
    snprintf(status[i].message, sizeof status[i].message, "%s", status[i].rc ? tsr_errmsg() : "");
    failed += status[i].rc != 0;
    b.arrays_done++;
    report(&b, true);
  }
  tsr_future_release(&b.future);
  return failed;
}

/* args = params (may be NULL) plus dim. */
static int map_args(const tsr_args *params, int64_t dim, tsr_args **args_p)
{
  tsr_args *args = NULL;
  size_t len = 0;
  const void *data = params != NULL ? tsr_args_data(params, &len) : NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0 && data != NULL) rc = gargs_merge(args, data, len);
  if (rc == 0) rc = tsr_args_int(args, "dim", dim);
  if (rc != 0) {
    tsr_args_destroy(&args);
    return client_fail(TSR_ENOMEM, "tile_map: out of memory");
  }
  *args_p = args;
  return 0;
}

TSR_API int tsr_tile_map(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *opts, const char *op,
                         const tsr_args *params, tsr_dtype dtype, int64_t dim, tsr_array **out_p)
{
  if (ctx == NULL || img == NULL || op == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "tile_map: NULL argument");
  if (dim < 1 || dim > (1 << 20)) return client_fail(TSR_EINVAL, "tile_map: dim %lld not in 1..2^20", (long long)dim);
  tsr_tile_opts o = opts != NULL ? *opts : (tsr_tile_opts)TSR_TILE_OPTS_DEFAULT;
  tsr_array *grid = NULL, *out = NULL;
  tsr_args *args = NULL;
  int rc = gtile_grid(ctx, img, &o, "tile_map", false, &grid);
  if (rc == 0) rc = map_args(params, dim, &args);
  if (rc == 0) {
    int64_t shape[3] = {grid->nchunks[0], grid->nchunks[1], dim}, chunks[3] = {1, 1, dim};
    rc = garray_new(ctx, "tilemap", dtype, 3, shape, chunks, &out);
  }
  for (size_t k = 0; rc == 0 && k < out->nblocks; k++)
    rc = gtask_add(ctx, out->keys[k], op, args, (const char *const *)&grid->keys[k], 1);
  tsr_args_destroy(&args);
  tsr_array_free(ctx, &grid);
  if (rc != 0) tsr_array_free(ctx, &out);
  if (rc == 0) *out_p = out;
  return rc;
}
