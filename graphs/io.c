/* Arrays to and from a directory of chunk files. The layout is deliberately
 * plain: one .npy per chunk, named by its grid index, plus a small text
 * file with the array's dtype, shape and chunk sizes, so other tools (NumPy)
 * can read the pieces. Saving runs `save_npy` on the workers; loading is a
 * `load_npy` task per chunk. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))
#define META_NAME "tessera-chunks.txt"

TSR_API int tsr_zeros(tsr_array_ctx *ctx, tsr_dtype dtype, int ndim, const int64_t *shape, const int64_t *chunks,
                      tsr_array **out_p)
{
  return tsr_full(ctx, 0.0, dtype, ndim, shape, chunks, out_p);
}

TSR_API int tsr_ones(tsr_array_ctx *ctx, tsr_dtype dtype, int ndim, const int64_t *shape, const int64_t *chunks,
                     tsr_array **out_p)
{
  return tsr_full(ctx, 1.0, dtype, ndim, shape, chunks, out_p);
}

static void chunk_path(const char *dir, const tsr_array *a, size_t block, char *path, size_t cap)
{
  int64_t idx[TSR_MAX_NDIM];
  garray_index(a, block, idx);
  size_t used = (size_t)snprintf(path, cap, "%s/c", dir);
  for (int d = 0; d < a->ndim && used < cap; d++) used += (size_t)snprintf(path + used, cap - used, "_%" PRId64, idx[d]);
  if (used < cap) snprintf(path + used, cap - used, ".npy");
}

static int write_meta(const char *dir, const tsr_array *a)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/" META_NAME, dir);
  FILE *f = fopen(path, "w");
  if (f == NULL) return client_fail(TSR_EIO, "to_chunk_dir: cannot create %s: %s", path, strerror(errno));
  fprintf(f, "tessera-chunks 1\ndtype %s\nshape", gdtype_name(a->dtype));
  for (int d = 0; d < a->ndim; d++) fprintf(f, " %" PRId64, a->shape[d]);
  fprintf(f, "\nchunks");
  for (int d = 0; d < a->ndim; d++) fprintf(f, " %" PRId64, a->chunk[d]);
  fprintf(f, "\n");
  if (fclose(f) != 0) return client_fail(TSR_EIO, "to_chunk_dir: cannot write %s", path);
  return 0;
}

TSR_API int tsr_to_chunk_dir(tsr_array_ctx *ctx, const tsr_array *a, const char *dir, int timeout_ms)
{
  if (ctx == NULL || a == NULL || dir == NULL) return client_fail(TSR_EINVAL, "to_chunk_dir: NULL argument");
  int rc0 = garray_dense(ctx, a, &a);
  if (rc0 != 0) return rc0;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return client_fail(TSR_EIO, "to_chunk_dir: cannot create %s: %s", dir, strerror(errno));
  char **keys = calloc(a->nblocks, sizeof *keys);
  int rc = keys != NULL ? 0 : client_fail(TSR_ENOMEM, "to_chunk_dir: out of memory");
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    char path[4096], key[256];
    tsr_args *args = NULL;
    const char *in = a->keys[b];
    chunk_path(dir, a, b, path, sizeof path);
    rc = tsr_args_new(&args);
    if (rc == 0) rc = tsr_args_str(args, "path", path);
    if (rc == 0) rc = gtask_add_tmp(ctx, "save-chunk", "save_npy", args, &in, 1, key, sizeof key);
    tsr_args_destroy(&args);
    keys[b] = strdup(key);
  }
  tsr_future *f = NULL;
  if (rc == 0) rc = grun_submit(ctx, keys, a->nblocks, timeout_ms, &f);
  tsr_future_release(&f);
  for (size_t b = 0; keys != NULL && b < a->nblocks; b++) free(keys[b]);
  free(keys);
  return rc == 0 ? write_meta(dir, a) : rc;
}

/* Reads "<word> v1 v2 ..." into values; returns the count or -1. */
static int read_ints(FILE *f, const char *word, int64_t *values, int cap)
{
  char line[512], name[32];
  if (fgets(line, sizeof line, f) == NULL || sscanf(line, "%31s", name) != 1 || strcmp(name, word) != 0) return -1;
  int n = 0, used = 0, consumed = 0;
  sscanf(line, "%*s%n", &used);
  long long v;
  while (n < cap && sscanf(line + used, "%lld%n", &v, &consumed) == 1) {
    values[n++] = v;
    used += consumed;
  }
  return n;
}

TSR_API int tsr_from_chunk_dir(tsr_array_ctx *ctx, const char *dir, tsr_array **out_p)
{
  if (ctx == NULL || dir == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "from_chunk_dir: NULL argument");
  char path[4096], line[256], dtype_name[32] = "";
  snprintf(path, sizeof path, "%s/" META_NAME, dir);
  FILE *f = fopen(path, "r");
  if (f == NULL) return client_fail(TSR_EIO, "from_chunk_dir: cannot open %s: %s", path, strerror(errno));
  int64_t shape[TSR_MAX_NDIM] = {0}, chunks[TSR_MAX_NDIM] = {0};
  bool ok = fgets(line, sizeof line, f) != NULL && strncmp(line, "tessera-chunks 1", 16) == 0 &&
            fgets(line, sizeof line, f) != NULL && sscanf(line, "dtype %31s", dtype_name) == 1;
  int ndim = ok ? read_ints(f, "shape", shape, TSR_MAX_NDIM) : -1;
  int nchunk = ndim >= 0 ? read_ints(f, "chunks", chunks, TSR_MAX_NDIM) : -1;
  fclose(f);
  tsr_dtype dtype = tsr_dtype_parse(dtype_name);
  if (!ok || ndim < 0 || nchunk != ndim || dtype == TSR_DTYPE_NONE)
    return client_fail(TSR_EINVAL, "from_chunk_dir: %s is not a tessera-chunks file", path);
  tsr_array *a = NULL;
  int rc = garray_new(ctx, "load_chunk_dir", dtype, ndim, shape, chunks, &a);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    int64_t idx[TSR_MAX_NDIM], bshape[TSR_MAX_NDIM];
    tsr_args *args = NULL;
    garray_index(a, b, idx);
    garray_block_shape(a, idx, bshape);
    chunk_path(dir, a, b, path, sizeof path);
    rc = tsr_args_new(&args);
    if (rc == 0) rc = tsr_args_str(args, "path", path);
    if (rc == 0) rc = gargs_shape(args, "shape", ndim, bshape);
    if (rc == 0) rc = tsr_args_str(args, "dtype", gdtype_name(dtype));
    if (rc == 0) rc = gtask_add(ctx, a->keys[b], "load_npy", args, NULL, 0);
    tsr_args_destroy(&args);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &a);
    return rc;
  }
  *out_p = a;
  return 0;
}
