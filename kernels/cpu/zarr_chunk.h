/* kernels/cpu/zarr_chunk.h — one Zarr chunk as the zarr_read and
 * zarr_write ops describe it in their params, and the steps between a
 * chunk file's bytes and a Tessera chunk: the bytes-to-bytes codec
 * pipeline, byte order, the stored layout (C order, optionally transposed)
 * and the region of the chunk inside the array (edge chunks are stored at
 * full size, padded with the fill value).
 *
 * Params (docs/development.md, op table; docs/zarr.md):
 *   dtype str            the elements (u8, i32, i64, f32, f64)
 *   chunk_shape [int]    the stored chunk's shape, in the array's axis order
 *   shape [int]          the region [0, shape) of the chunk inside the array
 *   perm [int]           optional: stored bytes are the chunk transposed by
 *                        perm (numpy.transpose(chunk, perm)), C order;
 *                        absent: C order. F order is perm = reversed axes
 *   big_endian bool      optional (false): stored elements are big-endian
 *   fill_bits int        optional (0): the fill value's bytes, element byte
 *                        k in bits 8k..8k+7 (exact for every dtype)
 *   codecs str           optional (""): bytes-to-bytes codecs in encode
 *                        order, comma separated ("blosc", "zstd,crc32c");
 *                        at most one compressor
 * Invariant after tsr_zchunk_parse: ndim equal in chunk_shape, shape and
 * perm; 0 <= shape[d] <= chunk_shape[d]; perm a permutation; raw_bytes =
 * es * prod(chunk_shape) <= TSR_CODEC_MAX_BYTES. */
#ifndef TSR_KERNELS_CPU_ZARR_CHUNK_H
#define TSR_KERNELS_CPU_ZARR_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "codecs.h"
#include "ops.h"

#define TSR_ZCHUNK_MAX_CODECS 8

typedef struct tsr_zchunk {
  tsr_dtype dtype;
  size_t es;                          /* bytes per element */
  int ndim;
  int64_t chunk[TSR_MAX_NDIM];
  int64_t region[TSR_MAX_NDIM];
  int perm[TSR_MAX_NDIM];
  bool permuted;                      /* perm is not the identity */
  bool big_endian;
  uint64_t fill_bits;
  tsr_codec_id codecs[TSR_ZCHUNK_MAX_CODECS];
  int n_codecs;
  size_t raw_bytes;                   /* the decoded stored chunk */
} tsr_zchunk;

/* Reads and checks the params above. With input (zarr_write: the chunk to
 * write), dtype and the region come from it ('dtype', when present, must
 * match; 'shape' is not read). 0 or TSR_EINVAL / TSR_ESHAPE / TSR_ELIMIT,
 * message "op: ...". */
int tsr_zchunk_parse(const char *op, const tsr_params *p, const tsr_meta *input, tsr_zchunk *c, tsr_errbuf *err);

/* The most bytes an encoding of this chunk can take (raw bytes, an eighth
 * more, 64 KiB): a chunk file larger than that is corrupt, and is refused
 * before it is read. */
size_t tsr_zchunk_max_encoded(const tsr_zchunk *c);

/* Fills n elements at dst with the fill value. */
void tsr_zchunk_fill(const tsr_zchunk *c, void *dst, size_t n);

/* Undoes the codec pipeline in place of *buf_p (len bytes at *len_p,
 * malloc'ed, owned by the caller): crc32c checked and stripped, the
 * compressor's stream decoded into a new buffer that replaces *buf_p (the
 * old one is freed). On success *len_p == c->raw_bytes. Messages start with
 * what (the chunk file). */
int tsr_zchunk_decode(const tsr_zchunk *c, unsigned char **buf_p, size_t *len_p, const char *what, tsr_errbuf *err);

/* Checks the crc32c in the last 4 bytes (little-endian) of buf[0..*len_p)
 * against the bytes before it and drops it from *len_p. 0 or TSR_EIO with
 * a message that starts with what. */
int tsr_zchunk_crc_strip(const unsigned char *buf, size_t *len_p, const char *what, tsr_errbuf *err);

/* Stored bytes (raw_bytes, as decoded) -> the region, C order, native byte
 * order, into out. Swaps stored in place when big-endian. */
void tsr_zchunk_to_region(const tsr_zchunk *c, void *stored, void *out);

/* The region (C order, native) -> a stored chunk (C order, little-endian,
 * padded with the fill value) in stored (raw_bytes). */
void tsr_zchunk_from_region(const tsr_zchunk *c, const void *region, void *stored);

#endif
