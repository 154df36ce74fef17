/* graphs/zarr_meta.h — a Zarr array's metadata (format 2 `.zarray`,
 * format 3 `zarr.json`) parsed into what the read tasks need, and the chunk
 * keys of both formats. Used by graphs/zarr.c (tsr_from_zarr) and
 * graphs/zarr_save.c (tsr_to_zarr); JSON stays on this side: the workers'
 * ops get flat params (kernels/cpu/zarr_chunk.h).
 *
 * Invariants after zmeta_read: dtype is one of Tessera's five; 0 <= ndim
 * <= TSR_MAX_NDIM; chunk[d] >= 1 (and, sharded, inner[d] >= 1 divides
 * chunk[d]); a (inner) chunk's bytes fit TSR_ZMETA_MAX_CHUNK_BYTES. */
#ifndef TSR_GRAPHS_ZARR_META_H
#define TSR_GRAPHS_ZARR_META_H

#include <stdbool.h>
#include <stdint.h>

#include "graphs.h"
#include "tessera/zarr.h"

/* Blosc 1's buffer limit, the most a worker decodes into one chunk. */
#define TSR_ZMETA_MAX_CHUNK_BYTES ((int64_t)2147483631)
/* Chunks (tasks) in one array, and inner chunks in one shard. */
#define TSR_ZMETA_MAX_CHUNKS ((int64_t)1 << 26)
#define TSR_ZMETA_MAX_SHARD_CHUNKS ((int64_t)1 << 24)

/* How an (inner) chunk's bytes are laid out and encoded. */
typedef struct zpipe {
  int64_t perm[TSR_MAX_NDIM];   /* stored = chunk transposed by perm */
  bool permuted;                /* perm is not the identity */
  bool big_endian;
  char codecs[128];             /* bytes-to-bytes, encode order, "a,b" */
  int n_compressors;
} zpipe;

typedef struct zmeta {
  char file[4200];              /* the metadata file, for messages */
  int format;                   /* 2 or 3 */
  tsr_dtype dtype;
  int ndim;
  int64_t shape[TSR_MAX_NDIM];
  int64_t chunk[TSR_MAX_NDIM];  /* the grid's chunks (sharded: the shards) */
  uint64_t fill_bits;           /* the fill value's bytes (zarr_chunk.h) */
  bool key_prefix_c;            /* v3 "default" keys: "c/0/1" */
  char sep;                     /* '.' or '/' */
  zpipe pipe;                   /* of a chunk, or of an inner chunk */
  bool sharded;
  int64_t inner[TSR_MAX_NDIM];  /* inner chunk shape */
  bool index_at_start, index_crc, index_big_endian;
} zmeta;

/* Reads dir/zarr.json, or dir/.zarray when there is no zarr.json, into m.
 * 0, or a TSR_E* code with tsr_errmsg() naming the file and field. */
int zmeta_read(const char *dir, zmeta *m);

/* The chunk key of grid index idx: "0.1" / "0/1" (format 2, v3 "v2"
 * encoding; "0" for a 0-d array) or "c/0/1" / "c.0.1" (v3 "default"; "c"
 * for 0-d). Returns false when it does not fit cap. */
bool zmeta_chunk_key(bool prefix_c, char sep, int ndim, const int64_t *idx, char *buf, size_t cap);

/* The bytes of value as an element of dtype (for fill_bits): false when
 * value is not representable (a fraction or out of range for an integer
 * dtype). */
bool zmeta_value_bits(tsr_dtype dtype, double value, uint64_t *bits_p);

#endif
