/* Spill files: see spill.h for the layout. Writing goes segment by
 * segment through one compression buffer, so spilling a chunk needs at
 * most one segment (plus blosc's overhead) of extra memory. */
#include "spill.h"

#include <blosc.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPILL_MAGIC "TSRSPIL1"
#define SPILL_VERSION 1u

typedef struct spill_header {
  char magic[8];
  uint32_t version;
  uint32_t segments;
  uint64_t nbytes;
  uint32_t data_crc;
  uint32_t header_crc;  /* of the fields above */
} spill_header;

typedef struct seg_header {
  uint32_t csize;
  uint32_t crc;
} seg_header;

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t tsr_crc32(uint32_t crc, const void *data, size_t len)
{
  pthread_once(&crc_once, crc_init);
  const unsigned char *p = data;
  crc = ~crc;
  /* Slicing by 8: eight table lookups per 8 bytes instead of one per byte. */
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
          crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
          crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

bool tsr_spill_codec_ok(const char *codec)
{
  static const char *const codecs[] = {"blosclz", "lz4", "zstd", "zlib"};
  for (size_t i = 0; i < sizeof codecs / sizeof *codecs; i++)
    if (strcmp(codec, codecs[i]) == 0) return true;
  return false;
}

static int io_fail(tsr_errbuf *err, const char *what, const char *path)
{
  int e = errno;
  return tsr_fail(err, e == ENOSPC ? TSR_ENOSPC : TSR_EIO, "%s spill file %s: %s", what, path, strerror(e));
}

static uint32_t header_crc(const spill_header *h) { return tsr_crc32(0, h, offsetof(spill_header, header_crc)); }

static int write_segments(FILE *f, const char *path, const char *codec, int level, size_t typesize,
                          const unsigned char *data, size_t nbytes, tsr_errbuf *err)
{
  size_t cap = (nbytes < TSR_SPILL_SEGMENT ? nbytes : TSR_SPILL_SEGMENT) + BLOSC_MAX_OVERHEAD;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory spilling %zu bytes", nbytes);
  int rc = 0;
  for (size_t off = 0; off < nbytes && rc == 0; off += TSR_SPILL_SEGMENT) {
    size_t n = nbytes - off < TSR_SPILL_SEGMENT ? nbytes - off : TSR_SPILL_SEGMENT;
    int c = blosc_compress_ctx(level, typesize > 1 ? BLOSC_SHUFFLE : BLOSC_NOSHUFFLE, typesize, n, data + off, buf,
                               cap, codec, 0, 1);
    if (c <= 0) {
      rc = tsr_fail(err, TSR_EIO, "blosc (%s) cannot compress a segment of %zu bytes (%d)", codec, n, c);
      break;
    }
    seg_header sh = {(uint32_t)c, tsr_crc32(0, buf, (size_t)c)};
    if (fwrite(&sh, sizeof sh, 1, f) != 1 || fwrite(buf, (size_t)c, 1, f) != 1) rc = io_fail(err, "writing", path);
  }
  free(buf);
  return rc;
}

int tsr_spill_write(const char *path, const char *codec, int level, size_t typesize, const void *data,
                    size_t nbytes, uint64_t *file_bytes_p, tsr_errbuf *err)
{
  if (!tsr_spill_codec_ok(codec)) return tsr_fail(err, TSR_EINVAL, "unknown spill codec '%s'", codec);
  if (typesize == 0 || typesize > 255) typesize = 1;
  spill_header h = {.version = SPILL_VERSION, .nbytes = nbytes};
  memcpy(h.magic, SPILL_MAGIC, 8);
  h.segments = (uint32_t)((nbytes + TSR_SPILL_SEGMENT - 1) / TSR_SPILL_SEGMENT);
  h.data_crc = tsr_crc32(0, data, nbytes);
  h.header_crc = header_crc(&h);
  FILE *f = fopen(path, "wb");
  if (f == NULL) return io_fail(err, "creating", path);
  int rc = fwrite(&h, sizeof h, 1, f) == 1 ? 0 : io_fail(err, "writing", path);
  if (rc == 0) rc = write_segments(f, path, codec, level, typesize, data, nbytes, err);
  long size = rc == 0 ? ftell(f) : -1;
  if (fclose(f) != 0 && rc == 0) rc = io_fail(err, "closing", path);
  if (rc != 0) {
    remove(path);
    return rc;
  }
  *file_bytes_p = (uint64_t)size;
  return 0;
}

static int bad_file(tsr_errbuf *err, const char *path, const char *why)
{
  return tsr_fail(err, TSR_EIO, "spill file %s is corrupted or truncated: %s", path, why);
}

/* Reads, checks and decompresses segment after segment into out. */
static int read_segments(FILE *f, const char *path, const spill_header *h, unsigned char *out, tsr_errbuf *err)
{
  size_t cap = (h->nbytes < TSR_SPILL_SEGMENT ? h->nbytes : TSR_SPILL_SEGMENT) + BLOSC_MAX_OVERHEAD;
  unsigned char *buf = malloc(cap);
  if (buf == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory reading spill file %s", path);
  int rc = 0;
  size_t off = 0;
  for (uint32_t s = 0; s < h->segments && rc == 0; s++) {
    size_t n = h->nbytes - off < TSR_SPILL_SEGMENT ? h->nbytes - off : TSR_SPILL_SEGMENT;
    seg_header sh;
    size_t nb = 0, cb = 0, bs = 0;
    if (fread(&sh, sizeof sh, 1, f) != 1 || sh.csize > cap || sh.csize < BLOSC_MIN_HEADER_LENGTH)
      rc = bad_file(err, path, "bad segment header");
    else if (fread(buf, sh.csize, 1, f) != 1)
      rc = bad_file(err, path, "short segment");
    else if (tsr_crc32(0, buf, sh.csize) != sh.crc)
      rc = bad_file(err, path, "segment checksum mismatch");
    else if ((blosc_cbuffer_sizes(buf, &nb, &cb, &bs), nb != n || cb != sh.csize))
      rc = bad_file(err, path, "segment sizes disagree");
    else if (blosc_decompress_ctx(buf, out + off, n, 1) != (int)n)
      rc = bad_file(err, path, "cannot decompress a segment");
    off += n;
  }
  free(buf);
  if (rc == 0 && tsr_crc32(0, out, h->nbytes) != h->data_crc) rc = bad_file(err, path, "data checksum mismatch");
  return rc;
}

int tsr_spill_read(const char *path, size_t nbytes, void **data_p, tsr_errbuf *err)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return io_fail(err, "opening", path);
  spill_header h;
  int rc = 0;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, SPILL_MAGIC, 8) != 0 || h.header_crc != header_crc(&h))
    rc = bad_file(err, path, "bad header");
  else if (h.version != SPILL_VERSION || h.nbytes != nbytes ||
           h.segments != (nbytes + TSR_SPILL_SEGMENT - 1) / TSR_SPILL_SEGMENT)
    rc = bad_file(err, path, "header does not match the chunk");
  unsigned char *out = rc == 0 ? malloc(nbytes ? nbytes : 1) : NULL;
  if (rc == 0 && out == NULL) rc = tsr_fail(err, TSR_ENOMEM, "out of memory loading %zu spilled bytes", nbytes);
  if (rc == 0) rc = read_segments(f, path, &h, out, err);
  if (rc == 0 && fgetc(f) != EOF) rc = bad_file(err, path, "trailing bytes");
  fclose(f);
  if (rc != 0) {
    free(out);
    return rc;
  }
  *data_p = out;
  return 0;
}
