/* kernels/cpu/zarr_chunk.c — a Zarr chunk's params, codec pipeline and
 * layout (see zarr_chunk.h for the params and invariants). Tessera chunks
 * are little-endian, like every host it runs on (its .npy files are '<'
 * too), so a big-endian store is the one that gets swapped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarr_chunk.h"

static int parse_dtype(const char *op, const tsr_params *p, const tsr_meta *input, tsr_zchunk *c, tsr_errbuf *err)
{
  tsr_dtype given = input != NULL ? input->dtype : TSR_DTYPE_NONE, dt = given;
  if (tsr_params_find(p, "dtype") != NULL || given == TSR_DTYPE_NONE) {
    int rc = tsr_k_dtype_param(op, p, TSR_DTYPE_NONE, &dt, err);
    if (rc != 0) return rc;
    if (dt == TSR_DTYPE_NONE) return tsr_fail(err, TSR_EINVAL, "%s: missing parameter 'dtype'", op);
    if (given != TSR_DTYPE_NONE && dt != given)
      return tsr_fail(err, TSR_ESHAPE, "%s: 'dtype' %s but the input is %s", op, tsr_dtype_name(dt),
                      tsr_dtype_name(given));
  }
  c->dtype = dt;
  c->es = tsr_dtype_size(dt);
  return 0;
}

static int parse_perm(const char *op, const tsr_params *p, tsr_zchunk *c, tsr_errbuf *err)
{
  for (int d = 0; d < c->ndim; d++) c->perm[d] = d;
  if (tsr_params_find(p, "perm") == NULL) return 0;
  const int64_t *v;
  size_t n;
  int rc = tsr_params_get_ints(p, "perm", &v, &n, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  bool seen[TSR_MAX_NDIM] = {false};
  if (n != (size_t)c->ndim) return tsr_fail(err, TSR_ESHAPE, "%s: 'perm' has %zu entries for %d axes", op, n, c->ndim);
  for (size_t i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= c->ndim || seen[v[i]])
      return tsr_fail(err, TSR_EINVAL, "%s: 'perm' %s is not a permutation of the axes", op,
                      tsr_k_dims_str(v, (int)n).s);
    seen[v[i]] = true;
    c->perm[i] = (int)v[i];
    c->permuted |= v[i] != (int64_t)i;
  }
  return 0;
}

static int parse_shapes(const char *op, const tsr_params *p, const tsr_meta *input, tsr_zchunk *c, tsr_errbuf *err)
{
  int nd_chunk = 0, nd_region = input != NULL ? input->ndim : 0;
  int rc = tsr_k_shape_param(op, p, "chunk_shape", c->chunk, &nd_chunk, err);
  if (rc == 0 && input != NULL) memcpy(c->region, input->shape, sizeof c->region);
  else if (rc == 0) rc = tsr_k_shape_param(op, p, "shape", c->region, &nd_region, err);
  if (rc != 0) return rc == TSR_ENOTFOUND ? TSR_EINVAL : rc;
  if (nd_chunk != nd_region)
    return tsr_fail(err, TSR_ESHAPE, "%s: 'chunk_shape' has %d axes, the chunk's shape %d", op, nd_chunk, nd_region);
  c->ndim = nd_chunk;
  size_t raw = c->es;
  for (int d = 0; d < c->ndim; d++) {
    if (c->region[d] > c->chunk[d])
      return tsr_fail(err, TSR_ESHAPE, "%s: region %s exceeds the chunk %s", op, tsr_k_dims_str(c->region, c->ndim).s,
                      tsr_k_dims_str(c->chunk, c->ndim).s);
    if (c->chunk[d] > 0 && raw > TSR_CODEC_MAX_BYTES / (size_t)c->chunk[d])
      return tsr_fail(err, TSR_ELIMIT, "%s: a chunk of %s %s exceeds the limit of %zu bytes", op,
                      tsr_dtype_name(c->dtype), tsr_k_dims_str(c->chunk, c->ndim).s, TSR_CODEC_MAX_BYTES);
    raw *= (size_t)c->chunk[d];
  }
  c->raw_bytes = raw;
  return parse_perm(op, p, c, err);
}

static int parse_codecs(const char *op, const tsr_params *p, tsr_zchunk *c, tsr_errbuf *err)
{
  const char *list = "";
  if (tsr_params_find(p, "codecs") != NULL) {
    int rc = tsr_params_get_str(p, "codecs", &list, err);
    if (rc != 0) return tsr_k_param_fail(op, rc, err);
  }
  int compressors = 0;
  for (const char *s = list; *s != '\0';) {
    size_t len = strcspn(s, ",");
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s);
    tsr_codec_id id;
    if (len >= sizeof name || tsr_codec_parse(name, &id) != 0)
      return tsr_fail(err, TSR_EINVAL, "%s: unknown codec '%.*s' in 'codecs' \"%s\"", op, (int)len, s, list);
    if (c->n_codecs == TSR_ZCHUNK_MAX_CODECS)
      return tsr_fail(err, TSR_ELIMIT, "%s: more than %d codecs in \"%s\"", op, TSR_ZCHUNK_MAX_CODECS, list);
    compressors += id != TSR_CODEC_NONE && id != TSR_CODEC_CRC32C;
    c->codecs[c->n_codecs++] = id;
    s += len + (s[len] == ',');
  }
  if (compressors > 1) return tsr_fail(err, TSR_EINVAL, "%s: codecs \"%s\" hold more than one compressor", op, list);
  return 0;
}

int tsr_zchunk_parse(const char *op, const tsr_params *p, const tsr_meta *input, tsr_zchunk *c, tsr_errbuf *err)
{
  memset(c, 0, sizeof *c);
  int64_t bits = 0;
  int rc = parse_dtype(op, p, input, c, err);
  if (rc == 0) rc = parse_shapes(op, p, input, c, err);
  if (rc == 0) rc = parse_codecs(op, p, c, err);
  if (rc == 0 && tsr_params_find(p, "big_endian") != NULL &&
      (rc = tsr_params_get_bool(p, "big_endian", &c->big_endian, err)) != 0)
    rc = tsr_k_param_fail(op, rc, err);
  if (rc == 0 && (rc = tsr_params_opt_int(p, "fill_bits", 0, &bits, err)) != 0) rc = tsr_k_param_fail(op, rc, err);
  c->fill_bits = (uint64_t)bits;
  return rc;
}

size_t tsr_zchunk_max_encoded(const tsr_zchunk *c)
{
  return c->raw_bytes + c->raw_bytes / 8 + 65536;
}

void tsr_zchunk_fill(const tsr_zchunk *c, void *dst, size_t n)
{
  unsigned char one[8];
  for (size_t k = 0; k < c->es; k++) one[k] = (unsigned char)(c->fill_bits >> (8 * k));
  unsigned char *d = dst;
  if (c->es == 1) {
    memset(d, one[0], n);
    return;
  }
  for (size_t i = 0; i < n; i++) memcpy(d + i * c->es, one, c->es);
}

/* ---------- decoding ---------- */

int tsr_zchunk_crc_strip(const unsigned char *buf, size_t *len_p, const char *what, tsr_errbuf *err)
{
  if (*len_p < 4) return tsr_fail(err, TSR_EIO, "%s: %zu bytes are too short for a crc32c checksum", what, *len_p);
  size_t n = *len_p - 4;
  uint32_t want = 0;
  for (int i = 3; i >= 0; i--) want = want << 8 | buf[n + (size_t)i];
  uint32_t got = tsr_crc32c(buf, n);
  if (got != want)
    return tsr_fail(err, TSR_EIO, "%s: crc32c mismatch (stored %08x, computed %08x): corrupt data", what, want, got);
  *len_p = n;
  return 0;
}

/* The size the compressor at position i decodes to: the raw chunk plus a
 * checksum for each crc32c applied before it. */
static size_t stage_bytes(const tsr_zchunk *c, int i)
{
  size_t n = c->raw_bytes;
  for (int j = 0; j < i; j++) n += c->codecs[j] == TSR_CODEC_CRC32C ? 4 : 0;
  return n;
}

int tsr_zchunk_decode(const tsr_zchunk *c, unsigned char **buf_p, size_t *len_p, const char *what, tsr_errbuf *err)
{
  for (int i = c->n_codecs - 1; i >= 0; i--) {
    tsr_codec_id id = c->codecs[i];
    if (id == TSR_CODEC_NONE) continue;
    if (id == TSR_CODEC_CRC32C) {
      int rc = tsr_zchunk_crc_strip(*buf_p, len_p, what, err);
      if (rc != 0) return rc;
      continue;
    }
    size_t want = stage_bytes(c, i);
    unsigned char *out = malloc(want ? want : 1);
    if (out == NULL) return tsr_fail(err, TSR_ENOMEM, "%s: cannot allocate %zu bytes to decode", what, want);
    int rc = tsr_codec_decompress(id, *buf_p, *len_p, out, want, what, err);
    if (rc != 0) {
      free(out);
      return rc;
    }
    free(*buf_p);
    *buf_p = out;
    *len_p = want;
  }
  if (*len_p != c->raw_bytes)
    return tsr_fail(err, TSR_EIO, "%s: %zu bytes where the chunk (%s %s) needs %zu: corrupt or truncated chunk", what,
                    *len_p, tsr_dtype_name(c->dtype), tsr_k_dims_str(c->chunk, c->ndim).s, c->raw_bytes);
  return 0;
}

/* ---------- layout ---------- */

static void swap_bytes(size_t es, unsigned char *p, size_t n)
{
  for (size_t i = 0; i < n; i++, p += es)
    for (size_t a = 0, b = es - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* The element stride, in stored bytes, of each array axis. */
static void axis_strides(const tsr_zchunk *c, size_t *stride)
{
  size_t s = c->es;
  for (int i = c->ndim - 1; i >= 0; i--) {
    stride[c->perm[i]] = s;
    s *= (size_t)c->chunk[c->perm[i]];
  }
}

/* Gathers the region from a transposed store, one element at a time
 * along the innermost axis of the region. */
static void gather_permuted(const tsr_zchunk *c, const unsigned char *stored, unsigned char *out)
{
  size_t stride[TSR_MAX_NDIM], es = c->es, rows = 1;
  int nd = c->ndim;
  axis_strides(c, stride);
  for (int d = 0; d < nd; d++)
    if (c->region[d] == 0) return;
  for (int d = 0; d < nd - 1; d++) rows *= (size_t)c->region[d];
  int64_t idx[TSR_MAX_NDIM] = {0};
  size_t inner = (size_t)c->region[nd - 1], step = stride[nd - 1];
  for (size_t r = 0; r < rows; r++) {
    size_t at = 0;
    for (int d = 0; d < nd - 1; d++) at += (size_t)idx[d] * stride[d];
    for (size_t k = 0; k < inner; k++, out += es) memcpy(out, stored + at + k * step, es);
    for (int d = nd - 2; d >= 0; d--) {
      if (++idx[d] < c->region[d]) break;
      idx[d] = 0;
    }
  }
}

void tsr_zchunk_to_region(const tsr_zchunk *c, void *stored, void *out)
{
  static const int64_t zero[TSR_MAX_NDIM] = {0};
  if (c->big_endian && c->es > 1) swap_bytes(c->es, stored, c->raw_bytes / c->es);
  if (c->permuted) gather_permuted(c, stored, out);
  else tsr_k_copy_block(c->es, c->ndim, c->region, stored, c->chunk, zero, out, c->region, zero);
}

void tsr_zchunk_from_region(const tsr_zchunk *c, const void *region, void *stored)
{
  static const int64_t zero[TSR_MAX_NDIM] = {0};
  tsr_zchunk_fill(c, stored, c->raw_bytes / (c->es ? c->es : 1));
  tsr_k_copy_block(c->es, c->ndim, c->region, region, c->region, zero, stored, c->chunk, zero);
}
