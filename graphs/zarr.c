/* graphs/zarr.c — tsr_from_zarr: a Zarr array (format 2 or 3) as a Tessera
 * array whose chunks are `zarr_read` tasks, one per Zarr chunk (per inner
 * chunk of a shard). Only the metadata is read here (zarr_meta.c); each
 * task carries everything its worker needs as flat params (the chunk
 * file, the stored chunk shape, the region inside the array, byte order,
 * layout, fill value and codec names: kernels/cpu/zarr_chunk.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "zarr_meta.h"

#define TSR_API __attribute__((visibility("default")))

/* Where Tessera block idx lives: the file's key (the chunk's, or its
 * shard's) and, sharded, its position among the shard's inner chunks. */
static void locate(const zmeta *m, const int64_t *idx, int64_t *file_idx, int64_t *inner_k, int64_t *inner_n)
{
  *inner_k = 0, *inner_n = 1;
  for (int d = 0; d < m->ndim; d++) {
    int64_t per = m->sharded ? m->chunk[d] / m->inner[d] : 1;
    file_idx[d] = idx[d] / per;
    *inner_k = *inner_k * per + idx[d] % per;
    *inner_n *= per;
  }
}

static int add_shard_args(tsr_args *args, const zmeta *m, int64_t k, int64_t n)
{
  int rc = tsr_args_int(args, "shard_chunks", n);
  if (rc == 0) rc = tsr_args_int(args, "shard_chunk", k);
  if (rc == 0) rc = tsr_args_str(args, "index_location", m->index_at_start ? "start" : "end");
  if (rc == 0) rc = tsr_args_str(args, "index_codecs", m->index_crc ? "crc32c" : "");
  if (rc == 0 && m->index_big_endian) rc = tsr_args_bool(args, "index_big_endian", true);
  return rc;
}

static int add_chunk_args(tsr_args *args, const zmeta *m, const int64_t *region)
{
  const zpipe *p = &m->pipe;
  int rc = tsr_args_str(args, "dtype", gdtype_name(m->dtype));
  if (rc == 0) rc = gargs_shape(args, "chunk_shape", m->ndim, m->sharded ? m->inner : m->chunk);
  if (rc == 0) rc = gargs_shape(args, "shape", m->ndim, region);
  if (rc == 0 && p->permuted) rc = tsr_args_ints(args, "perm", p->perm, (size_t)m->ndim);
  if (rc == 0 && p->big_endian) rc = tsr_args_bool(args, "big_endian", true);
  if (rc == 0 && m->fill_bits != 0) rc = tsr_args_int(args, "fill_bits", (int64_t)m->fill_bits);
  if (rc == 0 && p->codecs[0] != '\0') rc = tsr_args_str(args, "codecs", p->codecs);
  return rc;
}

/* Records the read task of block b. */
static int add_read(tsr_array_ctx *ctx, const tsr_array *a, const zmeta *m, const char *dir, size_t b)
{
  int64_t idx[TSR_MAX_NDIM], region[TSR_MAX_NDIM], file_idx[TSR_MAX_NDIM], k, n;
  char key[256], path[4400];
  garray_index(a, b, idx);
  garray_block_shape(a, idx, region);
  locate(m, idx, file_idx, &k, &n);
  if (!zmeta_chunk_key(m->key_prefix_c, m->sep, m->ndim, file_idx, key, sizeof key) ||
      snprintf(path, sizeof path, "%s/%s", dir, key) >= (int)sizeof path)
    return client_fail(TSR_EINVAL, "from_zarr: %s: chunk path too long", m->file);
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_str(args, "path", path);
  if (rc == 0) rc = add_chunk_args(args, m, region);
  if (rc == 0 && m->sharded) rc = add_shard_args(args, m, k, n);
  if (rc != 0) rc = client_fail(rc, "from_zarr: out of memory recording the read of %s", path);
  if (rc == 0) rc = gtask_add(ctx, a->keys[b], "zarr_read", args, NULL, 0);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_from_zarr(tsr_array_ctx *ctx, const char *path, tsr_array **out_p)
{
  if (ctx == NULL || path == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "from_zarr: NULL argument");
  zmeta m;
  int rc = zmeta_read(path, &m);
  if (rc != 0) return rc;
  tsr_array *a = NULL;
  rc = garray_new(ctx, "zarr", m.dtype, m.ndim, m.shape, m.sharded ? m.inner : m.chunk, &a);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) rc = add_read(ctx, a, &m, path, b);
  if (rc != 0) {
    tsr_array_free(ctx, &a);
    return rc;
  }
  *out_p = a;
  return 0;
}
