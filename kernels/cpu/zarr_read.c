/* kernels/cpu/zarr_read.c — zarr_read: one Zarr chunk file (or one inner
 * chunk of a Zarr v3 shard) read and decoded into a Tessera chunk.
 *
 * Params: `path` str, the chunk's own (zarr_chunk.h: dtype, chunk_shape,
 * shape, perm, big_endian, fill_bits, codecs) and, for an inner chunk of a
 * shard (`sharding_indexed`), `shard_chunks` int (inner chunks in the
 * shard), `shard_chunk` int (this one's position, C order over the shard's
 * inner grid), `index_location` "end"/"start", `index_codecs` ""/"crc32c",
 * `index_big_endian` bool.
 *
 * A missing chunk file (or shard, or an inner chunk the index marks empty)
 * is the fill value, as in Zarr. Every size read from a file is checked
 * before anything is allocated from it: a chunk file may be at most
 * tsr_zchunk_max_encoded bytes, a shard index entry must lie inside its
 * file, and the decoded stream must be exactly the chunk's size. Every
 * message names the file (and the inner chunk). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarr_chunk.h"

#define OP "zarr_read"
/* Inner chunks of one shard: bounds the index a worker reads whole. */
#define MAX_SHARD_CHUNKS ((int64_t)1 << 24)

typedef struct shard_ref {
  bool on;
  int64_t n, k;            /* inner chunks in the shard, this one */
  bool index_at_start, index_crc, index_big;
} shard_ref;

typedef struct read_spec {
  const char *path;
  tsr_zchunk c;
  shard_ref shard;
  char what[512];          /* the file (and inner chunk), for messages */
} read_spec;

static int get_opt_bool(const tsr_params *p, const char *name, bool *v, tsr_errbuf *err)
{
  int rc = tsr_params_find(p, name) ? tsr_params_get_bool(p, name, v, err) : 0;
  return rc ? tsr_k_param_fail(OP, rc, err) : 0;
}

static int get_opt_str(const tsr_params *p, const char *name, const char **v, tsr_errbuf *err)
{
  int rc = tsr_params_find(p, name) ? tsr_params_get_str(p, name, v, err) : 0;
  return rc ? tsr_k_param_fail(OP, rc, err) : 0;
}

static int parse_shard(const tsr_params *p, shard_ref *s, tsr_errbuf *err)
{
  memset(s, 0, sizeof *s);
  if (tsr_params_find(p, "shard_chunks") == NULL) return 0;
  s->on = true;
  const char *where = "end", *codecs = "";
  int rc = tsr_params_get_int(p, "shard_chunks", &s->n, err);
  if (rc == 0) rc = tsr_params_get_int(p, "shard_chunk", &s->k, err);
  if (rc != 0) return tsr_k_param_fail(OP, rc, err);
  if ((rc = get_opt_str(p, "index_location", &where, err)) != 0 ||
      (rc = get_opt_str(p, "index_codecs", &codecs, err)) != 0 ||
      (rc = get_opt_bool(p, "index_big_endian", &s->index_big, err)) != 0)
    return rc;
  if (s->n < 1 || s->n > MAX_SHARD_CHUNKS || s->k < 0 || s->k >= s->n)
    return tsr_fail(err, TSR_EINVAL, OP ": inner chunk %lld of a shard of %lld (at most %lld)", (long long)s->k,
                    (long long)s->n, (long long)MAX_SHARD_CHUNKS);
  if (strcmp(where, "end") != 0 && strcmp(where, "start") != 0)
    return tsr_fail(err, TSR_EINVAL, OP ": 'index_location' is \"%s\", not \"end\" or \"start\"", where);
  if (codecs[0] != '\0' && strcmp(codecs, "crc32c") != 0)
    return tsr_fail(err, TSR_EINVAL, OP ": 'index_codecs' \"%s\" is not \"\" or \"crc32c\"", codecs);
  s->index_at_start = strcmp(where, "start") == 0;
  s->index_crc = codecs[0] != '\0';
  return 0;
}

static int spec_parse(const tsr_params *p, read_spec *s, tsr_errbuf *err)
{
  memset(s, 0, sizeof *s);
  int rc = tsr_params_get_str(p, "path", &s->path, err);
  if (rc != 0) return tsr_k_param_fail(OP, rc, err);
  if (s->path[0] == '\0') return tsr_fail(err, TSR_EINVAL, OP ": 'path' is empty");
  if ((rc = tsr_zchunk_parse(OP, p, NULL, &s->c, err)) != 0) return rc;
  if ((rc = parse_shard(p, &s->shard, err)) != 0) return rc;
  if (s->shard.on) snprintf(s->what, sizeof s->what, OP ": %.400s (inner chunk %lld)", s->path, (long long)s->shard.k);
  else snprintf(s->what, sizeof s->what, OP ": %.480s", s->path);
  return 0;
}

static int read_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  read_spec s;
  int rc = spec_parse(p, &s, err);
  if (rc == 0) tsr_k_meta_set(out, s.c.dtype, s.c.ndim, s.c.region);
  return rc;
}

/* ---------- the encoded bytes ---------- */

static int read_at(int fd, const read_spec *s, unsigned char *dst, size_t len, uint64_t off, tsr_errbuf *err)
{
  while (len > 0) {
    ssize_t got = pread(fd, dst, len, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return tsr_fail(err, TSR_EIO, "%s: reading: %s", s->what, got < 0 ? strerror(errno) : "unexpected end of file");
    dst += got, len -= (size_t)got, off += (uint64_t)got;
  }
  return 0;
}

/* Allocates len bytes and reads them at off into *buf_p. */
static int read_range(int fd, const read_spec *s, uint64_t off, size_t len, unsigned char **buf_p, tsr_errbuf *err)
{
  unsigned char *buf = malloc(len ? len : 1);
  if (buf == NULL) return tsr_fail(err, TSR_ENOMEM, "%s: cannot allocate %zu bytes", s->what, len);
  int rc = read_at(fd, s, buf, len, off, err);
  if (rc != 0) {
    free(buf);
    return rc;
  }
  *buf_p = buf;
  return 0;
}

static uint64_t load_u64(const unsigned char *b, bool big)
{
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[big ? 7 - i : i] << (8 * i);
  return v;
}

/* Finds the inner chunk's byte range through the shard index. 1 when the
 * index marks it empty (fill value), 0 with *off_p / *len_p set, or an
 * error. */
static int shard_lookup(int fd, uint64_t file_size, const read_spec *s, uint64_t *off_p, uint64_t *len_p,
                        tsr_errbuf *err)
{
  const shard_ref *sh = &s->shard;
  uint64_t index_len = 16 * (uint64_t)sh->n + (sh->index_crc ? 4 : 0);
  if (file_size < index_len)
    return tsr_fail(err, TSR_EIO, "%s: the shard has %llu bytes, too few for its index of %lld chunks (%llu bytes)",
                    s->what, (unsigned long long)file_size, (long long)sh->n, (unsigned long long)index_len);
  uint64_t at = sh->index_at_start ? 0 : file_size - index_len;
  unsigned char *index = NULL, entry[16];
  int rc = 0;
  if (sh->index_crc) {
    size_t len = (size_t)index_len;
    char what[600];
    snprintf(what, sizeof what, "%s: shard index", s->what);
    if ((rc = read_range(fd, s, at, len, &index, err)) == 0 && (rc = tsr_zchunk_crc_strip(index, &len, what, err)) == 0)
      memcpy(entry, index + 16 * sh->k, 16);
    free(index);
  } else {
    rc = read_at(fd, s, entry, 16, at + 16 * (uint64_t)sh->k, err);
  }
  if (rc != 0) return rc;
  uint64_t off = load_u64(entry, sh->index_big), len = load_u64(entry + 8, sh->index_big);
  if (off == UINT64_MAX && len == UINT64_MAX) return 1;
  if (off > file_size || len > file_size - off)
    return tsr_fail(err, TSR_EIO, "%s: the shard index puts the chunk at bytes [%llu, +%llu) of a %llu-byte file",
                    s->what, (unsigned long long)off, (unsigned long long)len, (unsigned long long)file_size);
  *off_p = off;
  *len_p = len;
  return 0;
}

/* The chunk's encoded bytes into *buf_p / *len_p: 1 when there are none
 * (missing file or empty inner chunk: the fill value), 0, or an error. */
static int fetch_encoded(const read_spec *s, unsigned char **buf_p, size_t *len_p, tsr_errbuf *err)
{
  int fd = open(s->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return 1;
  if (fd < 0) return tsr_fail(err, TSR_EIO, "%s: cannot open: %s", s->what, strerror(errno));
  struct stat st;
  uint64_t off = 0, len = 0;
  int rc = fstat(fd, &st) == 0 ? 0 : tsr_fail(err, TSR_EIO, "%s: cannot stat: %s", s->what, strerror(errno));
  if (rc == 0 && s->shard.on) rc = shard_lookup(fd, (uint64_t)st.st_size, s, &off, &len, err);
  else if (rc == 0) len = (uint64_t)st.st_size;
  if (rc == 0 && len > tsr_zchunk_max_encoded(&s->c))
    rc = tsr_fail(err, TSR_EIO, "%s: %llu encoded bytes, more than any encoding of this %zu-byte chunk takes: "
                  "corrupt chunk", s->what, (unsigned long long)len, s->c.raw_bytes);
  if (rc == 0) rc = read_range(fd, s, off, (size_t)len, buf_p, err);
  if (rc == 0) *len_p = (size_t)len;
  close(fd);
  return rc;
}

static int read_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  read_spec s;
  int rc = spec_parse(p, &s, err);
  if (rc != 0) return rc;
  unsigned char *buf = NULL;
  size_t len = 0;
  rc = fetch_encoded(&s, &buf, &len, err);
  if (rc == 1) {
    tsr_zchunk_fill(&s.c, out->data, out->nbytes / s.c.es);
    return 0;
  }
  if (rc == 0) rc = tsr_zchunk_decode(&s.c, &buf, &len, s.what, err);
  if (rc == 0) tsr_zchunk_to_region(&s.c, buf, out->data);
  free(buf);
  return rc;
}

const tsr_op_def tsr_op_zarr_read = {OP, 0, 0, read_infer, read_cpu, false, NULL};
