/* Arrays whose chunks are held encoded (tessera/array.h, tsr_compress):
 * a `pack2bit` or `blosc_compress` task per block (a random genotype
 * block: one `randint_packed` task). Decoding is
 * garray_dense's (context.c), which every builder calls. */
#include <string.h>

#include "graphs.h"
#include "cpu/csr.h"

#define TSR_API __attribute__((visibility("default")))

static int check_blosc(const tsr_compress_opts *o)
{
  static const char *const cnames[] = {"blosclz", "lz4", "lz4hc", "zstd", "zlib"}, *const shuffles[] = {"none", "byte", "bit"};
  bool cname_ok = false, shuffle_ok = false;
  for (int i = 0; i < 5; i++) cname_ok = cname_ok || (o->cname != NULL && strcmp(o->cname, cnames[i]) == 0);
  for (int i = 0; i < 3; i++) shuffle_ok = shuffle_ok || (o->shuffle != NULL && strcmp(o->shuffle, shuffles[i]) == 0);
  if (!cname_ok)
    return client_fail(TSR_EINVAL, "compress: unknown cname '%s' (blosclz, lz4, lz4hc, zstd, zlib)", o->cname ? o->cname : "(null)");
  if (!shuffle_ok)
    return client_fail(TSR_EINVAL, "compress: unknown shuffle '%s' (none, byte, bit)", o->shuffle ? o->shuffle : "(null)");
  if (o->clevel < 0 || o->clevel > 9) return client_fail(TSR_EINVAL, "compress: clevel %d outside 0..9", o->clevel);
  return 0;
}

static int check_opts(const tsr_array *a, const tsr_compress_opts *o)
{
  if (o->encoding == TSR_ENC_BLOSC) return check_blosc(o);
  if (o->encoding != TSR_ENC_PACKED2) return client_fail(TSR_EINVAL, "compress: unknown encoding %d", (int)o->encoding);
  if (a->dtype != TSR_U8 || a->ndim < 1)
    return client_fail(TSR_ESHAPE, "compress: 2-bit packing takes a u8 array of values 0..3, got %s", gdtype_name(a->dtype));
  if (a->missing >= 0 && a->missing != TSR_GENO_MISSING)
    return client_fail(TSR_EINVAL, "compress: 2-bit packing keeps values 0..3, but the missing value is %d", a->missing);
  return 0;
}

/* A block that is a random genotype chunk (randint of u8 values 0..3, not
 * persisted) is generated packed by one task instead of packed after. */
static bool packs_at_birth(const graph_task *t)
{
  if (t == NULL || strcmp(t->op, "randint") != 0 || t->n_inputs != 0) return false;
  tsr_params p = TSR_PARAMS_INIT;
  int64_t low = -1, high = 99;
  const char *dtype = "";
  bool ok = gtask_params(t, &p) == 0 && tsr_params_get_int(&p, "low", &low, NULL) == 0 &&
            tsr_params_get_int(&p, "high", &high, NULL) == 0 && tsr_params_get_str(&p, "dtype", &dtype, NULL) == 0 &&
            strcmp(dtype, "u8") == 0 && low >= 0 && high <= 4;
  tsr_params_clear(&p);
  return ok;
}

static int encode_block(tsr_array_ctx *ctx, const tsr_compress_opts *o, const tsr_args *args, const char *in,
                        const char *key)
{
  const graph_task *t = o->encoding == TSR_ENC_PACKED2 ? gtask_of(ctx, in) : NULL;
  if (packs_at_birth(t)) {
    tsr_args *rp = NULL;
    int rc = tsr_args_new(&rp);
    if (rc == 0) rc = gargs_merge(rp, t->params, t->params_len);
    if (rc == 0) rc = gtask_add(ctx, key, "randint_packed", rp, NULL, 0);
    tsr_args_destroy(&rp);
    return rc;
  }
  return gtask_add(ctx, key, o->encoding == TSR_ENC_BLOSC ? "blosc_compress" : "pack2bit", args, &in, 1);
}

static int codec_args(const tsr_compress_opts *o, tsr_args **args_p)
{
  *args_p = NULL;
  if (o->encoding != TSR_ENC_BLOSC) return 0;
  int rc = tsr_args_new(args_p);
  if (rc == 0) rc = tsr_args_str(*args_p, "cname", o->cname);
  if (rc == 0) rc = tsr_args_int(*args_p, "clevel", o->clevel);
  if (rc == 0) rc = tsr_args_str(*args_p, "shuffle", o->shuffle);
  return rc;
}

TSR_API int tsr_compress(tsr_array_ctx *ctx, const tsr_array *a, const tsr_compress_opts *opts, tsr_array **out_p)
{
  tsr_compress_opts o = TSR_COMPRESS_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  if (ctx == NULL || a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "compress: NULL argument");
  int rc = check_opts(a, &o);
  if (rc == 0) rc = garray_dense(ctx, a, &a);
  if (rc != 0) return rc;
  tsr_args *args = NULL;
  tsr_array *out = NULL;
  rc = codec_args(&o, &args);
  if (rc == 0) rc = garray_new(ctx, o.encoding == TSR_ENC_BLOSC ? "blosc" : "packed", a->dtype, a->ndim, a->shape, a->chunk, &out);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) rc = encode_block(ctx, &o, args, a->keys[b], out->keys[b]);
  tsr_args_destroy(&args);
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  out->encoding = o.encoding;
  out->missing = a->missing;
  *out_p = out;
  return 0;
}

TSR_API int tsr_decompress(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p)
{
  if (ctx == NULL || a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "decompress: NULL argument");
  int rc = garray_dense(ctx, a, &a);
  return rc == 0 ? garray_view(ctx, "decompress", a, out_p) : rc;
}

TSR_API int tsr_sparse(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p)
{
  if (ctx == NULL || a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "sparse: NULL argument");
  int rc = garray_check_2d(a, "sparse");
  if (rc == 0) rc = garray_dense(ctx, a, &a);
  tsr_array *out = NULL;
  if (rc == 0) rc = garray_new(ctx, "csr", a->dtype, 2, a->shape, a->chunk, &out);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    const char *in = a->keys[b];
    rc = gtask_add(ctx, out->keys[b], "csr_from_dense", NULL, &in, 1);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  out->encoding = TSR_ENC_CSR;
  *out_p = out;
  return 0;
}

/* Checks a gathered chunk fully (bytes from a worker are data from
 * outside this process) with csr.h's layout helpers. */
TSR_API int tsr_csr_chunk_parts(const void *bytes, size_t nbytes, tsr_csr_parts *parts_p)
{
  const unsigned char *p = bytes;
  if (p == NULL || parts_p == NULL) return client_fail(TSR_EINVAL, "csr_chunk_parts: NULL argument");
  if (nbytes < TSR_CSR_HEADER || memcmp(p, "TCSR", 4) != 0 || p[4] != 1 || p[6] != 4)
    return client_fail(TSR_EPROTO, "not a CSR chunk (version 1, 32-bit indices) of %zu bytes", nbytes);
  tsr_k_csr v;
  memcpy(&v.rows, p + 8, 8), memcpy(&v.cols, p + 16, 8), memcpy(&v.nnz, p + 24, 8);
  v.dtype = (tsr_dtype)p[5];
  int64_t want = tsr_k_csr_bytes(v.rows, v.nnz, v.dtype);
  if (want < 0 || (size_t)want != nbytes || v.cols < 0 || v.cols > INT32_MAX)
    return client_fail(TSR_EPROTO, "CSR chunk of %lld x %lld with %lld values does not fit its %zu bytes",
                       (long long)v.rows, (long long)v.cols, (long long)v.nnz, nbytes);
  tsr_k_csr_parts((void *)p, v.rows, v.nnz, &v);
  for (int64_t r = 0; r < v.rows; r++) {
    bool ok = v.indptr[r] >= 0 && v.indptr[r + 1] >= v.indptr[r] && v.indptr[r + 1] <= v.nnz;
    for (int64_t i = ok ? v.indptr[r] : 0; ok && i < v.indptr[r + 1]; i++)
      ok = v.indices[i] >= 0 && v.indices[i] < v.cols && (i == v.indptr[r] || v.indices[i] > v.indices[i - 1]);
    if (!ok) return client_fail(TSR_EPROTO, "CSR chunk: row %lld has bad row pointers or columns", (long long)r);
  }
  if (v.indptr[0] != 0 || v.indptr[v.rows] != v.nnz)
    return client_fail(TSR_EPROTO, "CSR chunk: row pointers run from %lld to %lld, not 0 to %lld",
                       (long long)v.indptr[0], (long long)v.indptr[v.rows], (long long)v.nnz);
  *parts_p = (tsr_csr_parts){v.rows, v.cols, v.nnz, v.dtype, v.indptr, v.indices, v.values};
  return 0;
}
