/* graphs/zarr_meta.c — parses Zarr metadata with jansson (see zarr_meta.h).
 *
 * Format 2: `.zarray` (shape, chunks, dtype, compressor, filters,
 * fill_value, order, dimension_separator). Format 3: `zarr.json` (shape,
 * data_type, chunk_grid "regular", chunk_key_encoding "default"/"v2",
 * fill_value, codecs: transpose, bytes, sharding_indexed, blosc, zstd,
 * gzip, crc32c). Unknown keys are ignored; an unknown codec, dtype or
 * encoding is an error that names the file, the field and the value.
 * Every message starts "from_zarr: FILE: ". */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zarr_meta.h"

/* Fails with the metadata file's name in front. */
#define ZFAIL(m, rc, fmt, ...) client_fail(rc, "from_zarr: %s: " fmt, (m)->file, __VA_ARGS__)

static const char *json_kind(const json_t *v)
{
  static const char *const kinds[] = {"an object", "an array", "a string", "an integer", "a real", "true", "false",
                                      "null"};
  return v == NULL ? "missing" : kinds[json_typeof(v)];
}

/* An array of at most TSR_MAX_NDIM integers >= min. */
static int get_dims(const zmeta *m, const json_t *obj, const char *field, int64_t min, int64_t *out, int *n_p)
{
  const json_t *v = json_object_get(obj, field);
  if (!json_is_array(v)) return ZFAIL(m, TSR_EINVAL, "field '%s' is %s, not an array of integers", field, json_kind(v));
  size_t n = json_array_size(v);
  if (n > TSR_MAX_NDIM)
    return ZFAIL(m, TSR_ESHAPE, "field '%s' has %zu axes; Tessera arrays have at most %d", field, n, TSR_MAX_NDIM);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(v, i);
    if (!json_is_integer(e) || json_integer_value(e) < min)
      return ZFAIL(m, TSR_EINVAL, "field '%s' entry %zu is %s, not an integer >= %" PRId64, field, i, json_kind(e),
                   min);
    out[i] = json_integer_value(e);
  }
  *n_p = (int)n;
  return 0;
}

static const char *get_str(const json_t *obj, const char *field, const char *fallback)
{
  const json_t *v = json_object_get(obj, field);
  return json_is_string(v) ? json_string_value(v) : v == NULL || json_is_null(v) ? fallback : NULL;
}

/* ---------- dtypes and fill values ---------- */

static int parse_dtype_v2(zmeta *m, const json_t *root)
{
  static const struct { const char *code; tsr_dtype dt; } codes[] = {
    {"u1", TSR_U8}, {"i4", TSR_I32}, {"i8", TSR_I64}, {"f4", TSR_F32}, {"f8", TSR_F64}};
  const char *s = get_str(root, "dtype", NULL);
  if (s == NULL) {
    char *text = json_dumps(json_object_get(root, "dtype"), JSON_COMPACT | JSON_ENCODE_ANY);
    int rc = ZFAIL(m, TSR_ESHAPE, "dtype %s is not supported (Tessera reads |u1, <i4, <i8, <f4, <f8 and > forms)",
                   text ? text : "(missing)");
    free(text);
    return rc;
  }
  for (size_t i = 0; strlen(s) == 3 && i < sizeof codes / sizeof codes[0]; i++) {
    bool one = codes[i].dt == TSR_U8;
    if (strcmp(s + 1, codes[i].code) != 0 || !(s[0] == '<' || s[0] == '>' || (one && s[0] == '|'))) continue;
    m->dtype = codes[i].dt;
    m->pipe.big_endian = s[0] == '>' && !one;
    return 0;
  }
  return ZFAIL(m, TSR_ESHAPE, "dtype '%s' is not supported (Tessera reads |u1, <i4, <i8, <f4, <f8 and > forms)", s);
}

static int parse_dtype_v3(zmeta *m, const json_t *root)
{
  const json_t *v = json_object_get(root, "data_type");
  const char *s = json_is_string(v) ? json_string_value(v) : "";
  tsr_dtype dt = tsr_dtype_parse(s);
  if (strcmp(s, "uint8") != 0 && strcmp(s, "int32") != 0 && strcmp(s, "int64") != 0 && strcmp(s, "float32") != 0 &&
      strcmp(s, "float64") != 0)
    dt = TSR_DTYPE_NONE;
  if (dt != TSR_DTYPE_NONE) {
    m->dtype = dt;
    return 0;
  }
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  int rc = ZFAIL(m, TSR_ESHAPE, "data_type %s is not supported (Tessera reads uint8, int32, int64, float32, float64)",
                 text ? text : "(missing)");
  free(text);
  return rc;
}

bool zmeta_value_bits(tsr_dtype dt, double x, uint64_t *bits_p)
{
  if (dt == TSR_F64) {
    memcpy(bits_p, &x, sizeof x);
    return true;
  }
  if (dt == TSR_F32) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    *bits_p = u;
    return true;
  }
  double lo = dt == TSR_U8 ? 0 : dt == TSR_I32 ? INT32_MIN : -9223372036854775808.0;
  double hi = dt == TSR_U8 ? 255 : dt == TSR_I32 ? INT32_MAX : 9223372036854775807.0;
  if (!(x == floor(x) && x >= lo && x <= hi) || (dt == TSR_I64 && x >= 9223372036854775807.0)) return false;
  int64_t i = (int64_t)x;
  *bits_p = dt == TSR_U8 ? (uint64_t)i & 0xff : dt == TSR_I32 ? (uint64_t)(uint32_t)(int32_t)i : (uint64_t)i;
  return true;
}

/* "NaN", "Infinity", "-Infinity", or (format 3) "0x..." raw bits. */
static int fill_string(zmeta *m, const char *s, uint64_t *bits_p)
{
  bool is_float = m->dtype == TSR_F32 || m->dtype == TSR_F64;
  if (is_float && strcmp(s, "NaN") == 0) return zmeta_value_bits(m->dtype, NAN, bits_p) ? 0 : -1;
  if (is_float && strcmp(s, "Infinity") == 0) return zmeta_value_bits(m->dtype, INFINITY, bits_p) ? 0 : -1;
  if (is_float && strcmp(s, "-Infinity") == 0) return zmeta_value_bits(m->dtype, -INFINITY, bits_p) ? 0 : -1;
  size_t hex = strlen(s) - 2, want = 2 * tsr_dtype_size(m->dtype);
  bool is_hex = strncmp(s, "0x", 2) == 0 && hex == want && strspn(s + 2, "0123456789abcdefABCDEF") == hex;
  if (is_float && m->format == 3 && is_hex) {
    *bits_p = strtoull(s + 2, NULL, 16);
    return 0;
  }
  return -1;
}

static int parse_fill(zmeta *m, const json_t *root)
{
  const json_t *v = json_object_get(root, "fill_value");
  int ok = -1;
  m->fill_bits = 0;
  if (v == NULL || json_is_null(v)) ok = 0;  /* format 2's "no fill value": chunks read as zeros */
  else if (json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    if (m->dtype == TSR_I64) m->fill_bits = (uint64_t)i, ok = 0;
    else ok = zmeta_value_bits(m->dtype, (double)i, &m->fill_bits) ? 0 : -1;
  } else if (json_is_real(v)) ok = zmeta_value_bits(m->dtype, json_real_value(v), &m->fill_bits) ? 0 : -1;
  else if (json_is_string(v)) ok = fill_string(m, json_string_value(v), &m->fill_bits);
  if (ok == 0) return 0;
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  int rc = ZFAIL(m, TSR_EINVAL, "fill_value %s is not a %s value", text ? text : "?", tsr_dtype_name(m->dtype));
  free(text);
  return rc;
}

/* ---------- geometry ---------- */

static int parse_grid(zmeta *m, const json_t *shape_obj, const json_t *chunk_obj, const char *chunk_field)
{
  int nd = 0, nc = 0;
  int rc = get_dims(m, shape_obj, "shape", 0, m->shape, &nd);
  if (rc == 0) rc = get_dims(m, chunk_obj, chunk_field, 1, m->chunk, &nc);
  if (rc != 0) return rc;
  if (nd != nc) return ZFAIL(m, TSR_ESHAPE, "shape has %d axes but %s has %d", nd, chunk_field, nc);
  m->ndim = nd;
  return 0;
}

/* The (inner) chunk's bytes and the number of chunks against the limits. */
static int check_limits(zmeta *m)
{
  const int64_t *c = m->sharded ? m->inner : m->chunk;
  int64_t bytes = (int64_t)tsr_dtype_size(m->dtype), chunks = 1, per_shard = 1;
  for (int d = 0; d < m->ndim; d++) {
    if (m->sharded && m->chunk[d] % m->inner[d] != 0)
      return ZFAIL(m, TSR_ESHAPE, "shard shape axis %d (%" PRId64 ") is not a multiple of the inner chunk (%" PRId64
                   ")", d, m->chunk[d], m->inner[d]);
    if (c[d] > TSR_ZMETA_MAX_CHUNK_BYTES / bytes)
      return ZFAIL(m, TSR_ELIMIT, "a chunk is over %" PRId64 " bytes (axis %d: %" PRId64 ")", TSR_ZMETA_MAX_CHUNK_BYTES,
                   d, c[d]);
    bytes *= c[d];
    chunks *= m->shape[d] == 0 ? 1 : (m->shape[d] + c[d] - 1) / c[d];
    per_shard *= m->sharded ? m->chunk[d] / m->inner[d] : 1;
    if (chunks > TSR_ZMETA_MAX_CHUNKS || per_shard > TSR_ZMETA_MAX_SHARD_CHUNKS)
      return ZFAIL(m, TSR_ELIMIT, "more than %" PRId64 " chunks (or %" PRId64 " in a shard)", TSR_ZMETA_MAX_CHUNKS,
                   TSR_ZMETA_MAX_SHARD_CHUNKS);
  }
  return 0;
}

/* ---------- format 2 ---------- */

static int parse_compressor_v2(zmeta *m, const json_t *root)
{
  static const char *const known[] = {"blosc", "zstd", "gzip", "zlib"};
  const json_t *filters = json_object_get(root, "filters");
  if (filters != NULL && !json_is_null(filters) && !(json_is_array(filters) && json_array_size(filters) == 0)) {
    const char *id = get_str(json_array_get(filters, 0), "id", "?");
    return ZFAIL(m, TSR_EINVAL, "filters are not supported (the first is '%s')", id ? id : "?");
  }
  const json_t *comp = json_object_get(root, "compressor");
  if (comp == NULL || json_is_null(comp)) return 0;
  const char *id = get_str(comp, "id", NULL);
  for (size_t i = 0; id != NULL && i < sizeof known / sizeof known[0]; i++)
    if (strcmp(id, known[i]) == 0) {
      snprintf(m->pipe.codecs, sizeof m->pipe.codecs, "%s", id);
      return 0;
    }
  return ZFAIL(m, TSR_EINVAL, "unknown codec '%s' in field 'compressor' (Tessera reads blosc, zstd, gzip, zlib)",
               id ? id : "(no id)");
}

static int parse_v2(zmeta *m, const json_t *root)
{
  const json_t *fmt = json_object_get(root, "zarr_format");
  if (!json_is_integer(fmt) || json_integer_value(fmt) != 2)
    return ZFAIL(m, TSR_EINVAL, "field 'zarr_format' is %s, not 2", json_kind(fmt));
  int rc = parse_grid(m, root, root, "chunks");
  if (rc == 0) rc = parse_dtype_v2(m, root);
  if (rc == 0) rc = parse_fill(m, root);
  if (rc == 0) rc = parse_compressor_v2(m, root);
  if (rc != 0) return rc;
  const char *order = get_str(root, "order", "C"), *sep = get_str(root, "dimension_separator", ".");
  if (order == NULL || (strcmp(order, "C") != 0 && strcmp(order, "F") != 0))
    return ZFAIL(m, TSR_EINVAL, "field 'order' is %s, not \"C\" or \"F\"", order ? order : "not a string");
  if (sep == NULL || (strcmp(sep, ".") != 0 && strcmp(sep, "/") != 0))
    return ZFAIL(m, TSR_EINVAL, "field 'dimension_separator' is %s, not \".\" or \"/\"", sep ? sep : "not a string");
  for (int d = 0; d < m->ndim; d++) m->pipe.perm[d] = order[0] == 'F' ? m->ndim - 1 - d : d;
  m->pipe.permuted = order[0] == 'F' && m->ndim > 1;
  m->sep = sep[0];
  return check_limits(m);
}

/* ---------- format 3 ---------- */

static const char *codec_name(const json_t *c)
{
  return json_is_string(c) ? json_string_value(c) : get_str(c, "name", NULL);
}

static int add_bytes_codec(zmeta *m, zpipe *p, const char *name, bool after_bytes)
{
  static const char *const known[] = {"blosc", "zstd", "gzip", "crc32c"};
  bool ok = false;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= strcmp(name, known[i]) == 0;
  if (!ok)
    return ZFAIL(m, TSR_EINVAL, "unknown codec '%s' (Tessera reads transpose, bytes, sharding_indexed, blosc, zstd, "
                 "gzip, crc32c)", name);
  if (!after_bytes) return ZFAIL(m, TSR_EINVAL, "codec '%s' comes before the array-to-bytes codec 'bytes'", name);
  if (strcmp(name, "crc32c") != 0 && ++p->n_compressors > 1)
    return ZFAIL(m, TSR_EINVAL, "more than one compressor in 'codecs' ('%s' is the second)", name);
  size_t used = strlen(p->codecs);
  if (used + strlen(name) + 2 > sizeof p->codecs)
    return ZFAIL(m, TSR_ELIMIT, "too many codecs (%s,%s)", p->codecs, name);
  snprintf(p->codecs + used, sizeof p->codecs - used, "%s%s", used ? "," : "", name);
  return 0;
}

static int parse_transpose(zmeta *m, zpipe *p, const json_t *cfg)
{
  const char *legacy = get_str(cfg, "order", NULL);
  int64_t perm[TSR_MAX_NDIM];
  int n = m->ndim, rc = 0;
  bool seen[TSR_MAX_NDIM] = {false};
  if (legacy != NULL && (strcmp(legacy, "C") == 0 || strcmp(legacy, "F") == 0))
    for (int d = 0; d < n; d++) perm[d] = legacy[0] == 'F' ? n - 1 - d : d;
  else if ((rc = get_dims(m, cfg, "order", 0, perm, &n)) != 0)
    return rc;
  for (int d = 0; d < n && n == m->ndim; d++) {
    if (perm[d] >= n || seen[perm[d]]) n = -1;
    else seen[perm[d]] = true;
  }
  if (n != m->ndim) return ZFAIL(m, TSR_EINVAL, "transpose 'order' is not a permutation of the %d axes", m->ndim);
  for (int d = 0; d < n; d++) p->permuted |= perm[d] != d;
  memcpy(p->perm, perm, sizeof perm);
  return 0;
}

static int parse_endian(zmeta *m, const json_t *cfg, const char *what, bool *big_p)
{
  const char *endian = get_str(cfg, "endian", "little");
  if (endian == NULL || (strcmp(endian, "little") != 0 && strcmp(endian, "big") != 0))
    return ZFAIL(m, TSR_EINVAL, "%s 'endian' is %s, not \"little\" or \"big\"", what, endian ? endian : "not a string");
  *big_p = strcmp(endian, "big") == 0;
  return 0;
}

static int parse_index_codecs(zmeta *m, const json_t *list)
{
  size_t n = json_array_size(list);
  const char *first = codec_name(json_array_get(list, 0)), *second = codec_name(json_array_get(list, 1));
  if (!json_is_array(list) || n < 1 || n > 2 || first == NULL || strcmp(first, "bytes") != 0 ||
      (n == 2 && (second == NULL || strcmp(second, "crc32c") != 0)))
    return ZFAIL(m, TSR_EINVAL, "%s", "sharding 'index_codecs' must be [bytes] or [bytes, crc32c]");
  m->index_crc = n == 2;
  return parse_endian(m, json_object_get(json_array_get(list, 0), "configuration"), "index codec bytes",
                      &m->index_big_endian);
}

static int parse_pipeline(zmeta *m, zpipe *p, const json_t *codecs, bool inner);

static int parse_sharding(zmeta *m, const json_t *cfg)
{
  int n = 0;
  int rc = get_dims(m, cfg, "chunk_shape", 1, m->inner, &n);
  if (rc != 0) return rc;
  if (n != m->ndim) return ZFAIL(m, TSR_ESHAPE, "sharding chunk_shape has %d axes, the array %d", n, m->ndim);
  const char *where = get_str(cfg, "index_location", "end");
  if (where == NULL || (strcmp(where, "end") != 0 && strcmp(where, "start") != 0))
    return ZFAIL(m, TSR_EINVAL, "sharding 'index_location' is %s, not \"end\" or \"start\"", where ? where : "?");
  m->index_at_start = strcmp(where, "start") == 0;
  m->sharded = true;
  rc = parse_index_codecs(m, json_object_get(cfg, "index_codecs"));
  return rc == 0 ? parse_pipeline(m, &m->pipe, json_object_get(cfg, "codecs"), true) : rc;
}

/* One codec of a pipeline; *stage_p: 0 before the array-to-bytes codec,
 * 1 after it, 2 when the pipeline was a shard's (nothing may follow). */
static int parse_codec(zmeta *m, zpipe *p, const json_t *c, bool inner, bool only, int *stage_p)
{
  const char *name = codec_name(c);
  const json_t *cfg = json_object_get(c, "configuration");
  if (name == NULL) return ZFAIL(m, TSR_EINVAL, "a codec in 'codecs' is %s without a name", json_kind(c));
  if (strcmp(name, "transpose") == 0) {
    if (*stage_p != 0 || p->permuted) return ZFAIL(m, TSR_EINVAL, "%s", "transpose after 'bytes', or twice");
    return parse_transpose(m, p, cfg);
  }
  if (strcmp(name, "bytes") == 0 || strcmp(name, "sharding_indexed") == 0) {
    if (*stage_p != 0) return ZFAIL(m, TSR_EINVAL, "a second array-to-bytes codec '%s'", name);
    *stage_p = 1;
    if (name[0] == 'b') return parse_endian(m, cfg, "codec bytes", &p->big_endian);
    if (inner) return ZFAIL(m, TSR_EINVAL, "%s", "nested sharding_indexed is not supported");
    if (!only) return ZFAIL(m, TSR_EINVAL, "%s", "sharding_indexed must be the only codec (none before or after it)");
    *stage_p = 2;
    return parse_sharding(m, cfg);
  }
  return add_bytes_codec(m, p, name, *stage_p == 1);
}

static int parse_pipeline(zmeta *m, zpipe *p, const json_t *codecs, bool inner)
{
  if (!json_is_array(codecs))
    return ZFAIL(m, TSR_EINVAL, "%s'codecs' is %s, not an array", inner ? "sharding " : "", json_kind(codecs));
  int stage = 0, rc = 0;
  for (int d = 0; d < m->ndim; d++) p->perm[d] = d;
  size_t n = json_array_size(codecs);
  for (size_t i = 0; rc == 0 && i < n; i++) rc = parse_codec(m, p, json_array_get(codecs, i), inner, n == 1, &stage);
  if (rc == 0 && stage == 0)
    return ZFAIL(m, TSR_EINVAL, "%s'codecs' has no array-to-bytes codec ('bytes')", inner ? "sharding " : "");
  if (tsr_dtype_size(m->dtype) == 1) p->big_endian = false;
  return rc;
}

static int parse_keys_v3(zmeta *m, const json_t *root)
{
  const json_t *enc = json_object_get(root, "chunk_key_encoding");
  const char *name = json_is_string(enc) ? json_string_value(enc) : get_str(enc, "name", NULL);
  if (name == NULL || (strcmp(name, "default") != 0 && strcmp(name, "v2") != 0))
    return ZFAIL(m, TSR_EINVAL, "chunk_key_encoding '%s' is unknown (default, v2)", name ? name : "(none)");
  m->key_prefix_c = name[0] == 'd';
  const char *sep = get_str(json_object_get(enc, "configuration"), "separator", m->key_prefix_c ? "/" : ".");
  if (sep == NULL || (strcmp(sep, ".") != 0 && strcmp(sep, "/") != 0))
    return ZFAIL(m, TSR_EINVAL, "chunk_key_encoding 'separator' is %s, not \".\" or \"/\"", sep ? sep : "?");
  m->sep = sep[0];
  return 0;
}

static int parse_v3(zmeta *m, const json_t *root)
{
  const json_t *fmt = json_object_get(root, "zarr_format");
  const char *node = get_str(root, "node_type", NULL);
  if (!json_is_integer(fmt) || json_integer_value(fmt) != 3)
    return ZFAIL(m, TSR_EINVAL, "field 'zarr_format' is %s, not 3", json_kind(fmt));
  if (node == NULL || strcmp(node, "array") != 0)
    return ZFAIL(m, TSR_EINVAL, "node_type is '%s', not 'array'%s", node ? node : "?",
                 node && strcmp(node, "group") == 0 ? ": this is a Zarr group" : "");
  const json_t *grid = json_object_get(root, "chunk_grid"), *st = json_object_get(root, "storage_transformers");
  const char *grid_name = get_str(grid, "name", NULL);
  if (grid_name == NULL || strcmp(grid_name, "regular") != 0)
    return ZFAIL(m, TSR_EINVAL, "chunk_grid '%s' is not supported (regular)", grid_name ? grid_name : "?");
  if (st != NULL && !(json_is_array(st) && json_array_size(st) == 0))
    return ZFAIL(m, TSR_EINVAL, "%s", "storage_transformers are not supported");
  int rc = parse_grid(m, root, json_object_get(grid, "configuration"), "chunk_shape");
  if (rc == 0) rc = parse_dtype_v3(m, root);
  if (rc == 0) rc = parse_fill(m, root);
  if (rc == 0) rc = parse_keys_v3(m, root);
  if (rc == 0) rc = parse_pipeline(m, &m->pipe, json_object_get(root, "codecs"), false);
  return rc == 0 ? check_limits(m) : rc;
}

/* ---------- reading ---------- */

static int load_json(zmeta *m, json_t **root_p)
{
  json_error_t jerr;
  json_t *root = json_load_file(m->file, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL)
    return ZFAIL(m, TSR_EINVAL, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return ZFAIL(m, TSR_EINVAL, "%s", "the metadata is not a JSON object");
  }
  *root_p = root;
  return 0;
}

int zmeta_read(const char *dir, zmeta *m)
{
  memset(m, 0, sizeof *m);
  struct stat st;
  if (dir == NULL || dir[0] == '\0') return client_fail(TSR_EINVAL, "from_zarr: path is NULL or empty");
  if (strlen(dir) > 4000) return client_fail(TSR_EINVAL, "from_zarr: path is too long: %.100s...", dir);
  snprintf(m->file, sizeof m->file, "%s/zarr.json", dir);
  m->format = 3;
  if (stat(m->file, &st) != 0) {
    snprintf(m->file, sizeof m->file, "%s/.zarray", dir);
    m->format = 2;
    if (stat(m->file, &st) != 0)
      return client_fail(TSR_EIO, "from_zarr: %s: no zarr.json or .zarray there (%s): not a Zarr array", dir,
                         strerror(errno));
  }
  json_t *root = NULL;
  int rc = load_json(m, &root);
  if (rc == 0) rc = m->format == 3 ? parse_v3(m, root) : parse_v2(m, root);
  json_decref(root);
  return rc;
}

bool zmeta_chunk_key(bool prefix_c, char sep, int ndim, const int64_t *idx, char *buf, size_t cap)
{
  size_t used = (size_t)snprintf(buf, cap, "%s", prefix_c ? "c" : ndim == 0 ? "0" : "");
  for (int d = 0; d < ndim && used < cap; d++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, d > 0 || prefix_c ? (sep == '/' ? "/" : ".") : "",
                             idx[d]);
  return used < cap;
}
