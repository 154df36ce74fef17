/* worker/spill — one chunk in one spill file, compressed with c-blosc.
 *
 * File layout (little-endian, the host's; spill files never leave the
 * machine that wrote them):
 *   header  "TSRSPIL1" magic, u32 version (1), u32 segments,
 *           u64 nbytes (uncompressed), u32 crc32 of the uncompressed bytes,
 *           u32 crc32 of the header fields before it
 *   segments, each: u32 compressed size, u32 crc32 of the compressed bytes,
 *           then the blosc buffer of up to TSR_SPILL_SEGMENT bytes
 * A chunk is cut into segments because one blosc buffer holds < 2 GiB.
 * Every size is checked against the file and the expected size before
 * anything is allocated or decompressed, and the compressed bytes are
 * checked by their CRC before blosc sees them, so a truncated or corrupted
 * file is reported (TSR_EIO) and never returns wrong bytes.
 *
 * Threading: the functions keep no state; any thread may call them (they
 * use blosc's _ctx functions, which hold no global lock). */
#ifndef TSR_WORKER_SPILL_H
#define TSR_WORKER_SPILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define TSR_SPILL_SEGMENT ((size_t)64 << 20)

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): pass 0 to start, the
 * previous result to continue. */
uint32_t tsr_crc32(uint32_t crc, const void *data, size_t len);

/* True for the codecs spill files may use: blosclz, lz4, zstd, zlib. */
bool tsr_spill_codec_ok(const char *codec);

/* Writes nbytes at data to path (created, 0600; replaced if present) with
 * codec at level (0-9; 0 stores uncompressed inside blosc), shuffling
 * elements of typesize bytes. Sets *file_bytes_p to the file's size.
 * 0, TSR_EIO (with the path and errno text), TSR_ENOSPC or TSR_ENOMEM; a
 * failed write removes the partial file. */
int tsr_spill_write(const char *path, const char *codec, int level, size_t typesize, const void *data,
                    size_t nbytes, uint64_t *file_bytes_p, tsr_errbuf *err);

/* Reads path back. The file must hold exactly nbytes (the size the writer
 * recorded beside it). On success *data_p is malloc'd (the caller frees);
 * TSR_EIO for a missing, truncated or corrupted file (the message says
 * which check failed), TSR_ENOMEM. */
int tsr_spill_read(const char *path, size_t nbytes, void **data_p, tsr_errbuf *err);

#endif
