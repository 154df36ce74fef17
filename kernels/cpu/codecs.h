/* kernels/cpu/codecs.h — the bytes-to-bytes codecs of Zarr chunks, over
 * the libraries that implement them: c-blosc 1 (its _ctx functions, safe
 * on any number of threads), libzstd, zlib (gzip and zlib streams) and
 * ISA-L's CRC32C.
 *
 * Every decoder writes into a buffer of exactly the size the caller
 * expects (known from the array's metadata, checked against
 * TSR_CODEC_MAX_BYTES before it was allocated) and fails when the stream
 * decodes to more or fewer bytes, so a corrupt or hostile stream can
 * neither make the worker allocate what its header claims nor write past
 * the buffer. Encoders are deterministic: the same bytes and settings give
 * the same stream (gzip headers carry no time stamp). */
#ifndef TSR_KERNELS_CPU_CODECS_H
#define TSR_KERNELS_CPU_CODECS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* The largest decoded chunk (blosc 1's limit, BLOSC_MAX_BUFFERSIZE). */
#define TSR_CODEC_MAX_BYTES ((size_t)2147483631)

typedef enum tsr_codec_id {
  TSR_CODEC_NONE = 0,
  TSR_CODEC_BLOSC,
  TSR_CODEC_ZSTD,
  TSR_CODEC_GZIP,    /* RFC 1952 stream (numcodecs GZip, Zarr v3 gzip) */
  TSR_CODEC_ZLIB,    /* RFC 1950 stream (numcodecs Zlib) */
  TSR_CODEC_CRC32C,  /* 4-byte little-endian CRC32C appended */
} tsr_codec_id;

/* "none", "blosc", "zstd", "gzip", "zlib", "crc32c" -> id; 0 or
 * TSR_EINVAL (no message: callers name where the name came from). */
int tsr_codec_parse(const char *name, tsr_codec_id *id_p);
const char *tsr_codec_name(tsr_codec_id id);  /* static, never NULL */

/* What an encoder needs. level: blosc 0..9, zstd -131072..22 (0: libzstd's
 * default), gzip/zlib 0..9 (-1: zlib's default). cname and shuffle (0 none,
 * 1 byte, 2 bit) only for blosc; typesize is the element size. */
typedef struct tsr_codec_enc {
  tsr_codec_id id;
  int level;
  const char *cname;
  int shuffle;
  size_t typesize;
} tsr_codec_enc;

/* Checks an encoder's settings (cname known to this blosc, level and
 * shuffle in range). 0 or TSR_EINVAL with a message starting with op. */
int tsr_codec_enc_check(const char *op, const tsr_codec_enc *enc, tsr_errbuf *err);
/* An upper bound of the encoded size of n bytes, or 0 when n is over
 * TSR_CODEC_MAX_BYTES. */
size_t tsr_codec_bound(const tsr_codec_enc *enc, size_t n);
/* Encodes src[0..n) into dst (cap >= tsr_codec_bound) and sets *len_p.
 * 0 or TSR_EIO / TSR_EINVAL with a message that starts with what. */
int tsr_codec_encode(const tsr_codec_enc *enc, const void *src, size_t n, void *dst, size_t cap, size_t *len_p,
                     const char *what, tsr_errbuf *err);

/* Decodes the len bytes at src with a compressor (blosc, zstd, gzip,
 * zlib) into dst, which holds exactly want bytes. 0 when the stream is
 * valid and decodes to exactly want bytes; otherwise TSR_EIO with a
 * message that starts with what (the chunk file) and says what is wrong. */
int tsr_codec_decompress(tsr_codec_id id, const void *src, size_t len, void *dst, size_t want, const char *what,
                         tsr_errbuf *err);

/* The CRC32C (Castagnoli) of data, as Zarr v3's crc32c codec and the shard
 * index use it: crc32c("123456789") = 0xE3069283. */
uint32_t tsr_crc32c(const void *data, size_t len);

#endif
