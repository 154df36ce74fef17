/* kernels/cpu/codecs.c — Zarr's bytes-to-bytes codecs over c-blosc 1,
 * libzstd, zlib and ISA-L (see codecs.h for the contracts).
 *
 * Invariant of every decoder: it writes at most `want` bytes to dst and
 * succeeds only when the stream decodes to exactly `want` bytes; it never
 * allocates from a size found in the stream. Blosc uses the _ctx functions
 * with one internal thread: the worker's executor already runs one task
 * per thread, and the _ctx calls take no global lock. */
#include <blosc.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "codecs.h"

static const char *const codec_names[] = {"none", "blosc", "zstd", "gzip", "zlib", "crc32c"};

int tsr_codec_parse(const char *name, tsr_codec_id *id_p)
{
  for (size_t i = 0; name != NULL && i < sizeof codec_names / sizeof codec_names[0]; i++)
    if (strcmp(name, codec_names[i]) == 0) {
      *id_p = (tsr_codec_id)i;
      return 0;
    }
  return TSR_EINVAL;
}

const char *tsr_codec_name(tsr_codec_id id)
{
  return (unsigned)id < sizeof codec_names / sizeof codec_names[0] ? codec_names[id] : "unknown";
}

uint32_t tsr_crc32c(const void *data, size_t len)
{
  /* ISA-L keeps the register un-inverted between calls: start from all
   * ones and invert once at the end (the standard CRC32C). */
  unsigned int crc = 0xFFFFFFFFu;
  unsigned char *p = (unsigned char *)(uintptr_t)data;  /* ISA-L only reads it */
  while (len > 0) {
    int n = len > (1u << 30) ? (1 << 30) : (int)len;
    crc = crc32_iscsi(p, n, crc);
    p += n, len -= (size_t)n;
  }
  return ~crc;
}

/* ---------- encoders ---------- */

int tsr_codec_enc_check(const char *op, const tsr_codec_enc *e, tsr_errbuf *err)
{
  switch (e->id) {
  case TSR_CODEC_NONE:
    return 0;
  case TSR_CODEC_BLOSC:
    if (e->cname == NULL || blosc_compname_to_compcode(e->cname) < 0)
      return tsr_fail(err, TSR_EINVAL, "%s: blosc compressor '%s' is unknown (this blosc has %s)", op,
                      e->cname ? e->cname : "(none)", blosc_list_compressors());
    if (e->level < 0 || e->level > 9 || e->shuffle < 0 || e->shuffle > 2 || e->typesize < 1 || e->typesize > 255)
      return tsr_fail(err, TSR_EINVAL, "%s: blosc clevel %d (0..9), shuffle %d (0..2) or typesize %zu out of range",
                      op, e->level, e->shuffle, e->typesize);
    return 0;
  case TSR_CODEC_ZSTD:
    if (e->level < ZSTD_minCLevel() || e->level > ZSTD_maxCLevel())
      return tsr_fail(err, TSR_EINVAL, "%s: zstd level %d outside %d..%d", op, e->level, ZSTD_minCLevel(),
                      ZSTD_maxCLevel());
    return 0;
  case TSR_CODEC_GZIP:
  case TSR_CODEC_ZLIB:
    if (e->level < -1 || e->level > 9)
      return tsr_fail(err, TSR_EINVAL, "%s: %s level %d outside -1..9", op, tsr_codec_name(e->id), e->level);
    return 0;
  default:
    return tsr_fail(err, TSR_EINVAL, "%s: codec '%s' cannot encode a chunk", op, tsr_codec_name(e->id));
  }
}

size_t tsr_codec_bound(const tsr_codec_enc *e, size_t n)
{
  if (n > TSR_CODEC_MAX_BYTES) return 0;
  switch (e->id) {
  case TSR_CODEC_BLOSC: return n + BLOSC_MAX_OVERHEAD;
  case TSR_CODEC_ZSTD: return ZSTD_compressBound(n);
  case TSR_CODEC_GZIP:
  case TSR_CODEC_ZLIB: return (size_t)compressBound((uLong)n) + 32;  /* + the gzip header and trailer */
  default: return n;
  }
}

static int deflate_all(const tsr_codec_enc *e, const void *src, size_t n, void *dst, size_t cap, size_t *len_p,
                       const char *what, tsr_errbuf *err)
{
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  /* windowBits 31 writes a gzip wrapper with no name and time stamp 0. */
  if (deflateInit2(&zs, e->level, Z_DEFLATED, e->id == TSR_CODEC_GZIP ? 31 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return tsr_fail(err, TSR_EIO, "%s: cannot start %s (level %d)", what, tsr_codec_name(e->id), e->level);
  zs.next_in = (Bytef *)(uintptr_t)src;
  zs.avail_in = (uInt)n;
  zs.next_out = dst;
  zs.avail_out = (uInt)cap;
  int zrc = deflate(&zs, Z_FINISH);
  size_t out = zs.total_out;
  deflateEnd(&zs);
  if (zrc != Z_STREAM_END) return tsr_fail(err, TSR_EIO, "%s: %s failed (%d)", what, tsr_codec_name(e->id), zrc);
  *len_p = out;
  return 0;
}

int tsr_codec_encode(const tsr_codec_enc *e, const void *src, size_t n, void *dst, size_t cap, size_t *len_p,
                     const char *what, tsr_errbuf *err)
{
  if (n > TSR_CODEC_MAX_BYTES || cap < tsr_codec_bound(e, n))
    return tsr_fail(err, TSR_EINVAL, "%s: %zu bytes do not fit the %s encoder's limits", what, n,
                    tsr_codec_name(e->id));
  if (e->id == TSR_CODEC_NONE) {
    memcpy(dst, src, n);
    *len_p = n;
    return 0;
  }
  if (e->id == TSR_CODEC_BLOSC) {
    int c = blosc_compress_ctx(e->level, e->shuffle, e->typesize, n, src, dst, cap, e->cname, 0, 1);
    if (c <= 0) return tsr_fail(err, TSR_EIO, "%s: blosc (%s) cannot compress %zu bytes (%d)", what, e->cname, n, c);
    *len_p = (size_t)c;
    return 0;
  }
  if (e->id == TSR_CODEC_ZSTD) {
    size_t c = ZSTD_compress(dst, cap, src, n, e->level);
    if (ZSTD_isError(c)) return tsr_fail(err, TSR_EIO, "%s: zstd: %s", what, ZSTD_getErrorName(c));
    *len_p = c;
    return 0;
  }
  if (e->id == TSR_CODEC_GZIP || e->id == TSR_CODEC_ZLIB) return deflate_all(e, src, n, dst, cap, len_p, what, err);
  return tsr_fail(err, TSR_EINVAL, "%s: codec '%s' cannot encode a chunk", what, tsr_codec_name(e->id));
}

/* ---------- decoders ---------- */

static int blosc_decode(const void *src, size_t len, void *dst, size_t want, const char *what, tsr_errbuf *err)
{
  size_t nbytes = 0, cbytes = 0, blocksize = 0;
  if (len < BLOSC_MIN_HEADER_LENGTH)
    return tsr_fail(err, TSR_EIO, "%s: %zu bytes are too short for a blosc stream (corrupt chunk)", what, len);
  blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
  if (blosc_cbuffer_validate(src, len, &nbytes) != 0 || cbytes > len)
    return tsr_fail(err, TSR_EIO, "%s: not a valid blosc stream (header says %zu bytes compressed, the chunk has %zu)",
                    what, cbytes, len);
  if (nbytes != want)
    return tsr_fail(err, TSR_EIO, "%s: the blosc stream holds %zu bytes, the chunk needs %zu", what, nbytes, want);
  int got = blosc_decompress_ctx(src, dst, want, 1);
  if (got < 0 || (size_t)got != want)
    return tsr_fail(err, TSR_EIO, "%s: corrupt blosc stream (decompression returned %d)", what, got);
  return 0;
}

static int zstd_decode(const void *src, size_t len, void *dst, size_t want, const char *what, tsr_errbuf *err)
{
  unsigned long long size = ZSTD_getFrameContentSize(src, len);
  if (size == ZSTD_CONTENTSIZE_ERROR)
    return tsr_fail(err, TSR_EIO, "%s: not a zstd frame (corrupt chunk)", what);
  if (size != ZSTD_CONTENTSIZE_UNKNOWN && size != want)
    return tsr_fail(err, TSR_EIO, "%s: the zstd frame holds %llu bytes, the chunk needs %zu", what, size, want);
  size_t got = ZSTD_decompress(dst, want, src, len);
  if (ZSTD_isError(got)) return tsr_fail(err, TSR_EIO, "%s: corrupt zstd stream: %s", what, ZSTD_getErrorName(got));
  if (got != want)
    return tsr_fail(err, TSR_EIO, "%s: the zstd stream holds %zu bytes, the chunk needs %zu", what, got, want);
  return 0;
}

/* After the output is full: the stream must end without another byte. */
static int inflate_tail(z_stream *zs, int zrc)
{
  if (zrc == Z_STREAM_END || zs->avail_out != 0) return zrc;
  unsigned char extra;
  zs->next_out = &extra;
  zs->avail_out = 1;
  zrc = inflate(zs, Z_FINISH);
  return zs->avail_out == 1 ? zrc : Z_BUF_ERROR;
}

static int zlib_decode(tsr_codec_id id, const void *src, size_t len, void *dst, size_t want, const char *what,
                       tsr_errbuf *err)
{
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (len > UINT32_MAX || inflateInit2(&zs, 15 + 32) != Z_OK)  /* 15 + 32: a gzip or a zlib wrapper */
    return tsr_fail(err, TSR_EIO, "%s: cannot start the %s decoder for %zu bytes", what, tsr_codec_name(id), len);
  zs.next_in = (Bytef *)(uintptr_t)src;
  zs.avail_in = (uInt)len;
  zs.next_out = dst;
  zs.avail_out = (uInt)want;
  int zrc = inflate_tail(&zs, inflate(&zs, Z_FINISH));
  size_t out = zs.total_out, left = zs.avail_in;
  const char *msg = zs.msg;
  char why[128];
  snprintf(why, sizeof why, "%s", msg ? msg : "truncated or too long");
  inflateEnd(&zs);
  if (zrc != Z_STREAM_END)
    return tsr_fail(err, TSR_EIO, "%s: corrupt %s stream (%s; %zu bytes decoded, the chunk needs %zu)", what,
                    tsr_codec_name(id), why, out, want);
  if (out != want || left != 0)
    return tsr_fail(err, TSR_EIO, "%s: the %s stream holds %zu bytes and %zu trailing ones, the chunk needs %zu", what,
                    tsr_codec_name(id), out, left, want);
  return 0;
}

int tsr_codec_decompress(tsr_codec_id id, const void *src, size_t len, void *dst, size_t want, const char *what,
                         tsr_errbuf *err)
{
  if (want > TSR_CODEC_MAX_BYTES)
    return tsr_fail(err, TSR_ELIMIT, "%s: a chunk of %zu bytes exceeds the limit of %zu", what, want,
                    TSR_CODEC_MAX_BYTES);
  switch (id) {
  case TSR_CODEC_BLOSC: return blosc_decode(src, len, dst, want, what, err);
  case TSR_CODEC_ZSTD: return zstd_decode(src, len, dst, want, what, err);
  case TSR_CODEC_GZIP:
  case TSR_CODEC_ZLIB: return zlib_decode(id, src, len, dst, want, what, err);
  default: return tsr_fail(err, TSR_EINVAL, "%s: '%s' is not a compressor", what, tsr_codec_name(id));
  }
}
