/* graphs/zarr_save.c — tsr_to_zarr: a Tessera array written as a Zarr
 * array, format 2 or 3. The workers encode and write the chunk files (one
 * `zarr_write` task per chunk, like save_npy in io.c); once every chunk is
 * written, the metadata is written here with jansson, through a temporary
 * file renamed into place, so a reader never finds metadata before its
 * chunks nor half a metadata file. The Zarr chunks are the array's
 * (regular) chunks, so edge chunks are padded to full size by the workers. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarr_meta.h"

#define TSR_API __attribute__((visibility("default")))

static const char *const codec_names[] = {"zstd", "blosc", "gzip", "zlib", "none"};

/* The options with defaults filled in, checked. */
static int resolve_opts(const tsr_zarr_write_opts *in, tsr_zarr_write_opts *o)
{
  static const tsr_zarr_write_opts defaults = TSR_ZARR_WRITE_OPTS_DEFAULT;
  static const char *const cnames[] = {"lz4", "lz4hc", "zstd", "zlib", "blosclz"};
  *o = in != NULL ? *in : defaults;
  if (o->zarr_format != 2 && o->zarr_format != 3)
    return client_fail(TSR_EINVAL, "to_zarr: zarr_format %d (2 or 3)", o->zarr_format);
  if ((unsigned)o->codec > TSR_ZARR_NONE) return client_fail(TSR_EINVAL, "to_zarr: unknown codec %d", (int)o->codec);
  if (o->codec == TSR_ZARR_ZLIB && o->zarr_format == 3)
    return client_fail(TSR_EINVAL, "to_zarr: Zarr format 3 has no zlib codec (use gzip, or zarr_format 2)");
  if (o->level == -1) o->level = o->codec == TSR_ZARR_ZSTD ? 0 : 5;
  bool zstd = o->codec == TSR_ZARR_ZSTD;
  if ((zstd && (o->level < -131072 || o->level > 22)) || (!zstd && (o->level < 0 || o->level > 9)))
    return client_fail(TSR_EINVAL, "to_zarr: level %d out of range for %s", o->level, codec_names[o->codec]);
  if (o->blosc_cname == NULL) o->blosc_cname = "lz4";
  bool known = false;
  for (size_t i = 0; i < sizeof cnames / sizeof cnames[0]; i++) known |= strcmp(o->blosc_cname, cnames[i]) == 0;
  if (!known)
    return client_fail(TSR_EINVAL, "to_zarr: blosc_cname '%s' (lz4, lz4hc, zstd, zlib, blosclz)", o->blosc_cname);
  if ((unsigned)o->blosc_shuffle > TSR_ZARR_BITSHUFFLE)
    return client_fail(TSR_EINVAL, "to_zarr: blosc_shuffle %d (0, 1 or 2)", (int)o->blosc_shuffle);
  if (o->dimension_separator == 0) o->dimension_separator = o->zarr_format == 2 ? '.' : '/';
  if (o->dimension_separator != '.' && o->dimension_separator != '/')
    return client_fail(TSR_EINVAL, "to_zarr: dimension_separator '%c' ('.' or '/')", o->dimension_separator);
  return 0;
}

/* ---------- chunks ---------- */

static int add_write(tsr_array_ctx *ctx, const tsr_array *a, const char *path, const tsr_zarr_write_opts *o,
                     uint64_t fill_bits, size_t b, char **key_p)
{
  int64_t idx[TSR_MAX_NDIM];
  char chunk_key[256], task_key[256];
  garray_index(a, b, idx);
  zmeta_chunk_key(o->zarr_format == 3, o->dimension_separator, a->ndim, idx, chunk_key, sizeof chunk_key);
  tsr_args *args = NULL;
  const char *in = a->keys[b];
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_str(args, "root", path);
  if (rc == 0) rc = tsr_args_str(args, "key", chunk_key);
  if (rc == 0) rc = gargs_shape(args, "chunk_shape", a->ndim, a->chunk);
  if (rc == 0 && fill_bits != 0) rc = tsr_args_int(args, "fill_bits", (int64_t)fill_bits);
  if (rc == 0) rc = tsr_args_str(args, "codec", codec_names[o->codec]);
  if (rc == 0) rc = tsr_args_int(args, "level", o->level);
  if (rc == 0 && o->codec == TSR_ZARR_BLOSC) rc = tsr_args_str(args, "cname", o->blosc_cname);
  if (rc == 0 && o->codec == TSR_ZARR_BLOSC) rc = tsr_args_int(args, "shuffle", o->blosc_shuffle);
  if (rc != 0) rc = client_fail(rc, "to_zarr: out of memory recording the write of %s", chunk_key);
  if (rc == 0) rc = gtask_add_tmp(ctx, "zarr-write", "zarr_write", args, &in, 1, task_key, sizeof task_key);
  tsr_args_destroy(&args);
  if (rc == 0 && (*key_p = strdup(task_key)) == NULL) rc = client_fail(TSR_ENOMEM, "to_zarr: out of memory");
  return rc;
}

static int write_chunks(tsr_array_ctx *ctx, const tsr_array *a, const char *path, const tsr_zarr_write_opts *o,
                        uint64_t fill_bits, int timeout_ms)
{
  char **keys = calloc(a->nblocks ? a->nblocks : 1, sizeof *keys);
  int rc = keys != NULL ? 0 : client_fail(TSR_ENOMEM, "to_zarr: out of memory");
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) rc = add_write(ctx, a, path, o, fill_bits, b, &keys[b]);
  tsr_future *f = NULL;
  if (rc == 0) rc = grun_submit(ctx, keys, a->nblocks, timeout_ms, &f);
  tsr_future_release(&f);
  for (size_t b = 0; keys != NULL && b < a->nblocks; b++) free(keys[b]);
  free(keys);
  return rc;
}

/* ---------- metadata ---------- */

static json_t *dims_json(int n, const int64_t *v)
{
  json_t *a = json_array();
  for (int d = 0; a != NULL && d < n; d++) json_array_append_new(a, json_integer(v[d]));
  return a;
}

static json_t *fill_json(tsr_dtype dt, double v)
{
  if (dt != TSR_F32 && dt != TSR_F64) return json_integer((json_int_t)v);
  if (isnan(v)) return json_string("NaN");
  if (isinf(v)) return json_string(v > 0 ? "Infinity" : "-Infinity");
  return json_real(dt == TSR_F32 ? (double)(float)v : v);
}

static json_t *compressor_v2(const tsr_zarr_write_opts *o)
{
  switch (o->codec) {
  case TSR_ZARR_BLOSC:
    return json_pack("{s:s, s:s, s:i, s:i, s:i}", "id", "blosc", "cname", o->blosc_cname, "clevel", o->level,
                     "shuffle", (int)o->blosc_shuffle, "blocksize", 0);
  case TSR_ZARR_NONE: return json_null();
  default: return json_pack("{s:s, s:i}", "id", codec_names[o->codec], "level", o->level);
  }
}

static json_t *meta_v2(const tsr_array *a, const tsr_zarr_write_opts *o)
{
  static const char *const dtypes[] = {"", "|u1", "<i4", "<i8", "<f4", "<f8"};
  char sep[2] = {o->dimension_separator, '\0'};
  return json_pack("{s:i, s:o, s:o, s:s, s:o, s:o, s:s, s:n, s:s}", "zarr_format", 2, "shape",
                   dims_json(a->ndim, a->shape), "chunks", dims_json(a->ndim, a->chunk), "dtype", dtypes[a->dtype],
                   "compressor", compressor_v2(o), "fill_value", fill_json(a->dtype, o->fill_value), "order", "C",
                   "filters", "dimension_separator", sep);
}

static json_t *codecs_v3(const tsr_array *a, const tsr_zarr_write_opts *o)
{
  static const char *const shuffles[] = {"noshuffle", "shuffle", "bitshuffle"};
  /* zarr-python writes no endian for one-byte types. */
  json_t *bytes = tsr_dtype_size(a->dtype) == 1
                    ? json_pack("{s:s}", "name", "bytes")
                    : json_pack("{s:s, s:{s:s}}", "name", "bytes", "configuration", "endian", "little");
  json_t *comp = NULL;
  if (o->codec == TSR_ZARR_BLOSC)
    comp = json_pack("{s:s, s:{s:i, s:s, s:i, s:s, s:i}}", "name", "blosc", "configuration", "typesize",
                     (int)tsr_dtype_size(a->dtype), "cname", o->blosc_cname, "clevel", o->level, "shuffle",
                     shuffles[o->blosc_shuffle], "blocksize", 0);
  else if (o->codec == TSR_ZARR_ZSTD)
    comp = json_pack("{s:s, s:{s:i, s:b}}", "name", "zstd", "configuration", "level", o->level, "checksum", 0);
  else if (o->codec == TSR_ZARR_GZIP)
    comp = json_pack("{s:s, s:{s:i}}", "name", "gzip", "configuration", "level", o->level);
  return comp != NULL ? json_pack("[o, o]", bytes, comp) : json_pack("[o]", bytes);
}

static json_t *meta_v3(const tsr_array *a, const tsr_zarr_write_opts *o)
{
  static const char *const dtypes[] = {"", "uint8", "int32", "int64", "float32", "float64"};
  char sep[2] = {o->dimension_separator, '\0'};
  return json_pack("{s:i, s:s, s:o, s:s, s:{s:s, s:{s:o}}, s:{s:s, s:{s:s}}, s:o, s:o, s:{}, s:[]}", "zarr_format", 3,
                   "node_type", "array", "shape", dims_json(a->ndim, a->shape), "data_type", dtypes[a->dtype],
                   "chunk_grid", "name", "regular", "configuration", "chunk_shape", dims_json(a->ndim, a->chunk),
                   "chunk_key_encoding", "name", "default", "configuration", "separator", sep, "fill_value",
                   fill_json(a->dtype, o->fill_value), "codecs", codecs_v3(a, o), "attributes",
                   "storage_transformers");
}

/* Writes json to dir/name through dir/name.tmp; takes the reference. */
static int dump_file(json_t *json, const char *dir, const char *name)
{
  char path[4400], tmp[4500];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int rc = json == NULL ? client_fail(TSR_ENOMEM, "to_zarr: cannot build %s", path) : 0;
  if (rc == 0 && json_dump_file(json, tmp, JSON_INDENT(2)) != 0)
    rc = client_fail(TSR_EIO, "to_zarr: cannot write %s: %s", tmp, strerror(errno));
  if (rc == 0 && rename(tmp, path) != 0)
    rc = client_fail(TSR_EIO, "to_zarr: cannot write %s: %s", path, strerror(errno));
  if (rc != 0) unlink(tmp);
  json_decref(json);
  return rc;
}

static int write_meta(const tsr_array *a, const char *path, const tsr_zarr_write_opts *o)
{
  char other[4400];
  const char *stale[2] = {o->zarr_format == 2 ? "zarr.json" : ".zarray", o->zarr_format == 2 ? NULL : ".zattrs"};
  for (int i = 0; i < 2 && stale[i] != NULL; i++) {
    snprintf(other, sizeof other, "%s/%s", path, stale[i]);
    if (unlink(other) != 0 && errno != ENOENT)
      return client_fail(TSR_EIO, "to_zarr: cannot remove the stale %s: %s", other, strerror(errno));
  }
  if (o->zarr_format == 3) return dump_file(meta_v3(a, o), path, "zarr.json");
  int rc = dump_file(meta_v2(a, o), path, ".zarray");
  return rc == 0 ? dump_file(json_object(), path, ".zattrs") : rc;
}

TSR_API int tsr_to_zarr(tsr_array_ctx *ctx, const tsr_array *a, const char *path, const tsr_zarr_write_opts *opts,
                        int timeout_ms)
{
  if (ctx == NULL || a == NULL || path == NULL || path[0] == '\0')
    return client_fail(TSR_EINVAL, "to_zarr: NULL argument or empty path");
  if (strlen(path) > 4000) return client_fail(TSR_EINVAL, "to_zarr: path is too long: %.100s...", path);
  tsr_zarr_write_opts o;
  uint64_t fill_bits = 0;
  int rc = resolve_opts(opts, &o);
  if (rc == 0 && !zmeta_value_bits(a->dtype, o.fill_value, &fill_bits))
    rc = client_fail(TSR_EINVAL, "to_zarr: fill_value %g is not a %s value", o.fill_value, gdtype_name(a->dtype));
  const tsr_array *dense = NULL;
  if (rc == 0) rc = garray_dense(ctx, a, &dense);
  struct stat st;
  if (rc == 0 && mkdir(path, 0755) != 0 && (errno != EEXIST || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)))
    rc = client_fail(TSR_EIO, "to_zarr: cannot create the directory %s: %s", path,
                     errno == EEXIST ? "a file is in the way" : strerror(errno));
  if (rc == 0) rc = write_chunks(ctx, dense, path, &o, fill_bits, timeout_ms);
  return rc == 0 ? write_meta(dense, path, &o) : rc;
}
