/* tessera/zarr.h — Zarr arrays (format 2 and 3) in and out of Tessera
 * arrays, on a local or shared file system (docs/zarr.md).
 *
 * The client reads and writes only the metadata (.zarray or zarr.json);
 * the workers read, decode, encode and write the chunk files, one task per
 * chunk, so the array's directory must be visible to them at the same path.
 * Codecs: blosc (lz4, lz4hc, zstd, zlib, blosclz; no shuffle, byte shuffle,
 * bitshuffle), zstd, gzip, zlib (format 2), crc32c (format 3), none;
 * Zarr v3 sharding (`sharding_indexed`) for reading. Element types:
 * uint8, int32, int64, float32, float64, either byte order.
 *
 * Ownership and threading as in array.h: arrays belong to their context;
 * nothing here keeps a pointer to its arguments after returning.
 * Errors: negative TSR_E* codes; tsr_errmsg() names the file, the field or
 * key, and what is wrong ("from_zarr: /d/a.zarr/.zarray: dtype '<f2' is
 * not supported ..."). Problems only the workers see (a corrupt chunk)
 * surface when the array is computed, as TSR_ETASK with a message naming
 * the chunk file. */
#ifndef TESSERA_ZARR_H
#define TESSERA_ZARR_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens the Zarr array in the directory path (zarr.json when present,
 * else .zarray) and records one read task per chunk; nothing is read from
 * the chunks here. The array's chunks are the Zarr chunks (for a sharded
 * array, the inner chunks; edge chunks are cut to the array's shape).
 * Chunks whose files are missing read as fill_value. F order (format 2)
 * and v3 `transpose` codecs are read and returned in C order.
 * Errors: TSR_EIO (no metadata file, unreadable), TSR_EINVAL (malformed
 * JSON, a missing or wrong field, an unknown codec or chunk key
 * encoding), TSR_ESHAPE (an unsupported dtype, more than TSR_MAX_NDIM
 * axes, shards not a multiple of their inner chunks), TSR_ELIMIT (a chunk
 * over 2 GiB, too many chunks). */
int tsr_from_zarr(tsr_array_ctx *ctx, const char *path, tsr_array **out_p);

/* Codecs tsr_to_zarr can write (level: see tsr_zarr_write_opts). */
typedef enum tsr_zarr_codec {
  TSR_ZARR_ZSTD = 0,   /* zarr-python's default */
  TSR_ZARR_BLOSC = 1,
  TSR_ZARR_GZIP = 2,
  TSR_ZARR_ZLIB = 3,   /* format 2 only (format 3 has no zlib codec) */
  TSR_ZARR_NONE = 4,
} tsr_zarr_codec;

typedef enum tsr_zarr_shuffle {
  TSR_ZARR_NOSHUFFLE = 0,
  TSR_ZARR_SHUFFLE = 1,     /* byte shuffle */
  TSR_ZARR_BITSHUFFLE = 2,
} tsr_zarr_shuffle;

typedef struct tsr_zarr_write_opts {
  int zarr_format;               /* 2 or 3; default 3 */
  tsr_zarr_codec codec;          /* default TSR_ZARR_ZSTD */
  int level;                     /* -1 (default): the codec's default — zstd 0
                                  * (libzstd's own default), blosc 5, gzip and
                                  * zlib 5; else zstd -131072..22, blosc and
                                  * gzip/zlib 0..9 */
  const char *blosc_cname;       /* "lz4" (default when NULL), "lz4hc", "zstd",
                                  * "zlib", "blosclz" */
  tsr_zarr_shuffle blosc_shuffle;  /* default TSR_ZARR_SHUFFLE */
  char dimension_separator;      /* '.' or '/'; 0 (default): the format's
                                  * default, '.' for 2 and '/' for 3 */
  double fill_value;             /* default 0; edge chunks are padded with it
                                  * (converted to the array's dtype) */
} tsr_zarr_write_opts;

#define TSR_ZARR_WRITE_OPTS_DEFAULT {3, TSR_ZARR_ZSTD, -1, NULL, TSR_ZARR_SHUFFLE, 0, 0.0}

/* Computes a and writes it as a Zarr array in the directory path (created
 * if missing; chunk files already there are overwritten, and the other
 * format's metadata file is removed). The Zarr chunks are a's chunks;
 * chunks are stored C order, little-endian, edge chunks at full size padded
 * with fill_value. The workers write the chunk files (one task per chunk);
 * the metadata (.zarray and .zattrs, or zarr.json) is written here last,
 * once every chunk is written. opts may be NULL (defaults). Packed arrays
 * are decoded first. timeout_ms -1: forever.
 * Errors: TSR_EINVAL (bad options, zlib with format 3), TSR_EIO (cannot
 * create path or write the metadata), TSR_ETASK (a worker could not write a
 * chunk: the message names it), TSR_ETIMEDOUT. */
int tsr_to_zarr(tsr_array_ctx *ctx, const tsr_array *a, const char *path, const tsr_zarr_write_opts *opts,
                int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
