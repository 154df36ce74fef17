/* kernels/cpu/blosc.c — blosc_compress and blosc_decompress: a chunk held
 * compressed in worker memory (the array encoding TSR_ENC_BLOSC), the
 * library doing what the seed's map_blocks(compress).persist() did.
 *
 * blosc_compress: any chunk → a 1-D u8 chunk holding one c-blosc 1 frame
 * of the chunk's bytes (typesize = the dtype's size). Params: `cname`
 * "blosclz", "lz4", "lz4hc", "zstd" (default) or "zlib"; `clevel` 0..9
 * (default 5); `shuffle` "none", "byte" or "bit" (default). The output
 * shrinks to the frame's size (kernels.h, cpu()). One internal thread:
 * the executor's threads are the parallelism, and the _ctx calls keep
 * c-blosc 1's global state out of it. A chunk over blosc 1's 2 GB buffer
 * limit is refused with a message saying so.
 * blosc_decompress: the frame → the chunk, params `dtype` and `shape`
 * (what was compressed); a frame whose header disagrees with them, or
 * that fails to decode, fails the task naming both sizes. */
#include <blosc.h>
#include <string.h>

#include "ops.h"

static const char *const cnames[] = {"blosclz", "lz4", "lz4hc", "zstd", "zlib"};
static const char *const shuffles[] = {"none", "byte", "bit"};  /* BLOSC_NOSHUFFLE, _SHUFFLE, _BITSHUFFLE */

typedef struct codec {
  const char *cname;
  int clevel, shuffle;
} codec;

static int pick(const char *what, const char *value, const char *const *names, int n, tsr_errbuf *err)
{
  for (int i = 0; i < n; i++)
    if (strcmp(value, names[i]) == 0) return i;
  return tsr_fail(err, TSR_EINVAL, "blosc_compress: unknown %s '%s'", what, value);
}

static int parse_codec(const tsr_params *p, codec *c, tsr_errbuf *err)
{
  const char *cname = "zstd", *shuffle = "bit";
  int64_t clevel = 5;
  int rc = tsr_params_find(p, "cname") ? tsr_params_get_str(p, "cname", &cname, err) : 0;
  if (rc == 0 && tsr_params_find(p, "shuffle")) rc = tsr_params_get_str(p, "shuffle", &shuffle, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "clevel", 5, &clevel, err);
  if (rc != 0) return tsr_k_param_fail("blosc_compress", rc, err);
  int ci = pick("cname", cname, cnames, 5, err), si = ci < 0 ? ci : pick("shuffle", shuffle, shuffles, 3, err);
  if (si < 0) return si;
  if (clevel < 0 || clevel > 9) return tsr_fail(err, TSR_EINVAL, "blosc_compress: clevel %lld outside 0..9", (long long)clevel);
  *c = (codec){cnames[ci], (int)clevel, si};
  return 0;
}

static int compress_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  codec c;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "blosc_compress: takes 1 input, got %d", n);
  int rc = parse_codec(p, &c, err);
  if (rc != 0) return rc;
  int64_t nbytes = tsr_meta_nbytes(&in[0]);
  if (nbytes > BLOSC_MAX_BUFFERSIZE)
    return tsr_fail(err, TSR_ELIMIT, "blosc_compress: chunk %s is %lld bytes, over blosc's limit of %d (use smaller chunks)",
                    tsr_k_str(&in[0]).s, (long long)nbytes, BLOSC_MAX_BUFFERSIZE);
  int64_t bound = nbytes + BLOSC_MAX_OVERHEAD;
  tsr_k_meta_set(out, TSR_U8, 1, &bound);
  return 0;
}

static int compress_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  codec c;
  int rc = parse_codec(p, &c, err);
  if (rc != 0) return rc;
  size_t typesize = tsr_dtype_size(in[0].meta.dtype);
  int size = blosc_compress_ctx(c.clevel, c.shuffle, typesize, in[0].nbytes, in[0].data, out->data, out->nbytes,
                                c.cname, 0, 1);
  if (size <= 0)
    return tsr_fail(err, TSR_EINTERNAL, "blosc_compress: c-blosc failed (%d) on %zu bytes with %s", size, in[0].nbytes,
                    c.cname);
  out->meta.shape[0] = size;
  return 0;
}

/* ---------- decompress ---------- */

static int decompress_meta(const tsr_params *p, tsr_meta *meta, tsr_errbuf *err)
{
  tsr_dtype dt;
  int64_t shape[TSR_MAX_NDIM];
  int ndim;
  int rc = tsr_k_dtype_param("blosc_decompress", p, TSR_DTYPE_NONE, &dt, err);
  if (rc == 0 && dt == TSR_DTYPE_NONE) rc = tsr_fail(err, TSR_EINVAL, "blosc_decompress: missing parameter 'dtype'");
  if (rc == 0) rc = tsr_k_shape_param("blosc_decompress", p, "shape", shape, &ndim, err);
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (rc != 0) return rc;
  tsr_k_meta_set(meta, dt, ndim, shape);
  return 0;
}

static int decompress_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "blosc_decompress: takes 1 input, got %d", n);
  if (in[0].dtype != TSR_U8 || in[0].ndim != 1)
    return tsr_fail(err, TSR_ESHAPE, "blosc_decompress: input must be a 1-D u8 frame, got %s", tsr_k_str(&in[0]).s);
  return decompress_meta(p, out, err);
}

static int decompress_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n;
  size_t nbytes = 0, cbytes = 0, blocksize = 0;
  if (in[0].nbytes < BLOSC_MIN_HEADER_LENGTH)
    return tsr_fail(err, TSR_EIO, "blosc_decompress: a %zu-byte frame is shorter than a blosc header", in[0].nbytes);
  blosc_cbuffer_sizes(in[0].data, &nbytes, &cbytes, &blocksize);
  if (nbytes != out->nbytes || cbytes != in[0].nbytes)
    return tsr_fail(err, TSR_EIO, "blosc_decompress: the frame holds %zu bytes in %zu, expected %zu bytes of %s in %zu",
                    nbytes, cbytes, out->nbytes, tsr_k_str(&out->meta).s, in[0].nbytes);
  int got = blosc_decompress_ctx(in[0].data, out->data, out->nbytes, 1);
  if (got < 0 || (size_t)got != out->nbytes)
    return tsr_fail(err, TSR_EIO, "blosc_decompress: corrupt frame (c-blosc returned %d for %zu bytes)", got, out->nbytes);
  return 0;
}

const tsr_op_def tsr_op_blosc_compress = {"blosc_compress", 1, 1, compress_infer, compress_cpu, false, NULL};
const tsr_op_def tsr_op_blosc_decompress = {"blosc_decompress", 1, 1, decompress_infer, decompress_cpu, false, NULL};
