/* kernels/cpu/zarr_write.c — zarr_write: one Tessera chunk encoded and
 * written as one Zarr chunk file (format 2 and 3 store chunks alike; the
 * client writes the metadata that tells them apart).
 *
 * Params: `root` str (the array's directory, which must exist), `key` str
 * (the chunk key below it, "0.1" or "c/0/1": the directories on its way
 * are created), `chunk_shape` [int] and `fill_bits` (zarr_chunk.h), `codec`
 * "none"/"blosc"/"zstd"/"gzip"/"zlib" (default none), `level` int (default:
 * blosc 5, zstd 0, gzip/zlib 5), `cname` str (blosc: default "lz4"),
 * `shuffle` int (blosc: 0 none, 1 byte (default), 2 bit). Output: i64 0-d,
 * the bytes written.
 *
 * The chunk is stored at full chunk_shape, C order, little-endian, the part
 * past the array's edge filled with the fill value (what Zarr readers
 * expect of edge chunks). The file is written as KEY.tmp.PID.N and renamed
 * over KEY, so a reader never sees half a chunk and a recomputed write is
 * harmless. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zarr_chunk.h"

#define OP "zarr_write"

typedef struct write_spec {
  const char *root, *key;
  tsr_zchunk c;
  tsr_codec_enc enc;
} write_spec;

static int check_key(const char *key, tsr_errbuf *err)
{
  if (key[0] == '\0' || key[0] == '/')
    return tsr_fail(err, TSR_EINVAL, OP ": 'key' \"%s\" must be a relative chunk key", key);
  for (const char *s = key; *s != '\0';) {
    size_t len = strcspn(s, "/");
    if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
      return tsr_fail(err, TSR_EINVAL, OP ": 'key' \"%s\" has an empty, '.' or '..' part", key);
    s += len + (s[len] == '/');
  }
  return 0;
}

static int parse_codec(const tsr_params *p, write_spec *w, tsr_errbuf *err)
{
  const char *codec = "none";
  int64_t level = 0, shuffle = 1;
  int rc = tsr_params_find(p, "codec") ? tsr_params_get_str(p, "codec", &codec, err) : 0;
  if (rc != 0) return tsr_k_param_fail(OP, rc, err);
  if (tsr_codec_parse(codec, &w->enc.id) != 0 || w->enc.id == TSR_CODEC_CRC32C)
    return tsr_fail(err, TSR_EINVAL, OP ": unknown codec '%s' (none, blosc, zstd, gzip, zlib)", codec);
  int64_t fallback = w->enc.id == TSR_CODEC_ZSTD ? 0 : 5;
  w->enc.cname = "lz4";
  if ((rc = tsr_params_opt_int(p, "level", fallback, &level, err)) != 0 ||
      (rc = tsr_params_opt_int(p, "shuffle", 1, &shuffle, err)) != 0 ||
      (tsr_params_find(p, "cname") && (rc = tsr_params_get_str(p, "cname", &w->enc.cname, err)) != 0))
    return tsr_k_param_fail(OP, rc, err);
  if (level < -(1 << 20) || level > 1000 || shuffle < 0 || shuffle > 2)
    return tsr_fail(err, TSR_EINVAL, OP ": 'level' %lld or 'shuffle' %lld out of range", (long long)level,
                    (long long)shuffle);
  w->enc.level = (int)level;
  w->enc.shuffle = (int)shuffle;
  w->enc.typesize = w->c.es;
  return tsr_codec_enc_check(OP, &w->enc, err);
}

static int spec_parse(const tsr_params *p, const tsr_meta *in, write_spec *w, tsr_errbuf *err)
{
  memset(w, 0, sizeof *w);
  int rc = tsr_params_get_str(p, "root", &w->root, err);
  if (rc == 0) rc = tsr_params_get_str(p, "key", &w->key, err);
  if (rc != 0) return tsr_k_param_fail(OP, rc, err);
  if (w->root[0] == '\0') return tsr_fail(err, TSR_EINVAL, OP ": 'root' is empty");
  if ((rc = check_key(w->key, err)) != 0 || (rc = tsr_zchunk_parse(OP, p, in, &w->c, err)) != 0) return rc;
  if (w->c.permuted || w->c.big_endian || w->c.n_codecs > 0)
    return tsr_fail(err, TSR_EINVAL, OP ": writes C order, little-endian chunks with one 'codec' only");
  return parse_codec(p, w, err);
}

static int write_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  if (n != 1) return tsr_fail(err, TSR_EINVAL, OP ": takes 1 input, got %d", n);
  write_spec w;
  int rc = spec_parse(p, &in[0], &w, err);
  if (rc == 0) tsr_k_meta_set(out, TSR_I64, 0, NULL);
  return rc;
}

static int io_fail(const char *what, const char *path, tsr_errbuf *err)
{
  int code = errno == ENOSPC ? TSR_ENOSPC : TSR_EIO;
  return tsr_fail(err, code, OP ": %s %s: %s", what, path, strerror(errno));
}

/* Creates the directories of key's leading parts below root. */
static int make_dirs(const write_spec *w, char *path, size_t cap, tsr_errbuf *err)
{
  size_t root_len = strlen(w->root);
  if (snprintf(path, cap, "%s/%s", w->root, w->key) >= (int)cap)
    return tsr_fail(err, TSR_EINVAL, OP ": path is too long: %.200s/%.100s", w->root, w->key);
  for (char *s = path + root_len + 1; (s = strchr(s, '/')) != NULL; s++) {
    *s = '\0';
    int rc = mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : io_fail("cannot create directory", path, err);
    *s = '/';
    if (rc != 0) return rc;
  }
  return 0;
}

static int write_file(const char *path, const void *data, size_t len, tsr_errbuf *err)
{
  static atomic_ulong serial;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), atomic_fetch_add(&serial, 1));
  FILE *f = fopen(tmp, "wbx");
  if (f == NULL) return io_fail("cannot create", tmp, err);
  int rc = fwrite(data, 1, len, f) == len ? 0 : io_fail("writing", tmp, err);
  if (fclose(f) != 0 && rc == 0) rc = io_fail("writing", tmp, err);
  if (rc == 0 && rename(tmp, path) != 0) rc = io_fail("cannot rename the temporary file to", path, err);
  if (rc != 0) unlink(tmp);
  return rc;
}

static int write_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  write_spec w;
  char path[4096];
  int rc = spec_parse(p, &in[0].meta, &w, err);
  if (rc == 0) rc = make_dirs(&w, path, sizeof path, err);
  if (rc != 0) return rc;
  const void *stored = in[0].data;
  unsigned char *padded = NULL, *enc = NULL;
  size_t cap = tsr_codec_bound(&w.enc, w.c.raw_bytes), len = 0;
  if (w.c.raw_bytes != in[0].nbytes) {
    stored = padded = malloc(w.c.raw_bytes ? w.c.raw_bytes : 1);
    if (padded != NULL) tsr_zchunk_from_region(&w.c, in[0].data, padded);
  }
  enc = malloc(cap ? cap : 1);
  if (stored == NULL || enc == NULL) rc = tsr_fail(err, TSR_ENOMEM, OP ": %s: cannot allocate %zu bytes", path, cap);
  char what[4200];
  snprintf(what, sizeof what, OP ": %s", path);
  if (rc == 0) rc = tsr_codec_encode(&w.enc, stored, w.c.raw_bytes, enc, cap, &len, what, err);
  if (rc == 0) rc = write_file(path, enc, len, err);
  if (rc == 0) *(int64_t *)out->data = (int64_t)len;
  free(padded);
  free(enc);
  return rc;
}

const tsr_op_def tsr_op_zarr_write = {OP, 1, 1, write_infer, write_cpu, false, NULL};
