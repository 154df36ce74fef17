/* Message writing and typed reading over msgpack-c. */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

void tsr_wbuf_init(tsr_wbuf *wb)
{
  msgpack_sbuffer_init(&wb->sbuf);
  msgpack_packer_init(&wb->pk, &wb->sbuf, msgpack_sbuffer_write);
  wb->nmsgs = 0;
}

void tsr_wbuf_reset(tsr_wbuf *wb)
{
  wb->sbuf.size = 0;
  wb->nmsgs = 0;
}

void tsr_wbuf_free(tsr_wbuf *wb)
{
  msgpack_sbuffer_destroy(&wb->sbuf);
  memset(wb, 0, sizeof *wb);
}

void tsr_wbuf_begin(tsr_wbuf *wb, const char *op, uint32_t nfields)
{
  msgpack_pack_map(&wb->pk, nfields);
  tsr_pack_kv_str(&wb->pk, "op", op);
  wb->nmsgs++;
}

char *tsr_wbuf_release(tsr_wbuf *wb, size_t *len_p)
{
  *len_p = wb->sbuf.size;
  char *data = msgpack_sbuffer_release(&wb->sbuf);
  wb->nmsgs = 0;
  return data;
}

void tsr_pack_strn(msgpack_packer *pk, const char *s, size_t len)
{
  msgpack_pack_str(pk, len);
  msgpack_pack_str_body(pk, s, len);
}

void tsr_pack_str(msgpack_packer *pk, const char *s) { tsr_pack_strn(pk, s, strlen(s)); }

void tsr_pack_kv_str(msgpack_packer *pk, const char *key, const char *value)
{
  tsr_pack_str(pk, key);
  tsr_pack_str(pk, value);
}

void tsr_pack_kv_strn(msgpack_packer *pk, const char *key, const char *value, size_t len)
{
  tsr_pack_str(pk, key);
  tsr_pack_strn(pk, value, len);
}

void tsr_pack_kv_int(msgpack_packer *pk, const char *key, int64_t value)
{
  tsr_pack_str(pk, key);
  msgpack_pack_int64(pk, value);
}

void tsr_pack_kv_uint(msgpack_packer *pk, const char *key, uint64_t value)
{
  tsr_pack_str(pk, key);
  msgpack_pack_uint64(pk, value);
}

void tsr_pack_kv_float(msgpack_packer *pk, const char *key, double value)
{
  tsr_pack_str(pk, key);
  msgpack_pack_double(pk, value);
}

void tsr_pack_kv_bool(msgpack_packer *pk, const char *key, bool value)
{
  tsr_pack_str(pk, key);
  if (value)
    msgpack_pack_true(pk);
  else
    msgpack_pack_false(pk);
}

void tsr_pack_meta(msgpack_packer *pk, const tsr_meta *meta)
{
  tsr_pack_kv_int(pk, "dtype", meta->dtype);
  tsr_pack_str(pk, "shape");
  msgpack_pack_array(pk, (size_t)meta->ndim);
  for (int d = 0; d < meta->ndim; d++) msgpack_pack_int64(pk, meta->shape[d]);
}

void tsr_pack_raw(msgpack_packer *pk, const void *bytes, size_t len)
{
  /* The packer's callback appends bytes verbatim: a pre-encoded object. */
  pk->callback(pk->data, bytes, len);
}

int tsr_reader_init(tsr_reader *rd, const void *data, size_t len, tsr_errbuf *err)
{
  msgpack_unpacked_init(&rd->unpacked);
  rd->data = data;
  rd->len = len;
  rd->offset = 0;
  int rc = tsr_wire_validate(data, len, err);
  return rc < 0 ? rc : 0;
}

int tsr_reader_next(tsr_reader *rd, const msgpack_object **map_p, char op_buf[TSR_MAX_NAME_LEN + 1], tsr_errbuf *err)
{
  if (rd->offset >= rd->len) return 0;
  msgpack_unpack_return ret = msgpack_unpack_next(&rd->unpacked, rd->data, rd->len, &rd->offset);
  if (ret != MSGPACK_UNPACK_SUCCESS && ret != MSGPACK_UNPACK_EXTRA_BYTES)
    return tsr_fail(err, TSR_EPROTO, "undecodable msgpack (%d)", (int)ret);
  const msgpack_object *map = &rd->unpacked.data;
  if (map->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "message is not a msgpack map");
  int rc = tsr_wire_strcpy(map, "op", op_buf, TSR_MAX_NAME_LEN + 1, err);
  if (rc != 0) return rc;
  *map_p = map;
  return 1;
}

void tsr_reader_done(tsr_reader *rd) { msgpack_unpacked_destroy(&rd->unpacked); }

const msgpack_object *tsr_wire_field(const msgpack_object *map, const char *key)
{
  if (map == NULL || map->type != MSGPACK_OBJECT_MAP) return NULL;
  size_t key_len = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == key_len && memcmp(k->via.str.ptr, key, key_len) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

static int missing_field(const char *key, tsr_errbuf *err)
{
  return tsr_fail(err, TSR_EPROTO, "missing field '%s'", key);
}

int tsr_obj_str(const msgpack_object *obj, size_t max_len, const char **s_p, size_t *len_p, tsr_errbuf *err)
{
  if (obj->type != MSGPACK_OBJECT_STR) return tsr_fail(err, TSR_EPROTO, "expected a string");
  if (obj->via.str.size > max_len)
    return tsr_fail(err, TSR_EPROTO, "string of %u bytes exceeds the limit of %zu", obj->via.str.size, max_len);
  *s_p = obj->via.str.ptr;
  *len_p = obj->via.str.size;
  return 0;
}

int tsr_obj_uint(const msgpack_object *obj, uint64_t *value_p, tsr_errbuf *err)
{
  if (obj->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return tsr_fail(err, TSR_EPROTO, "expected an unsigned integer");
  *value_p = obj->via.u64;
  return 0;
}

int tsr_obj_int(const msgpack_object *obj, int64_t *value_p, tsr_errbuf *err)
{
  if (obj->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *value_p = obj->via.i64;
    return 0;
  }
  if (obj->type == MSGPACK_OBJECT_POSITIVE_INTEGER && obj->via.u64 <= (uint64_t)INT64_MAX) {
    *value_p = (int64_t)obj->via.u64;
    return 0;
  }
  return tsr_fail(err, TSR_EPROTO, "expected a 64-bit signed integer");
}

int tsr_wire_str(const msgpack_object *map, const char *key, size_t max_len, const char **s_p, size_t *len_p,
                 tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  if (v->type != MSGPACK_OBJECT_STR) return tsr_fail(err, TSR_EPROTO, "field '%s' must be a string", key);
  if (v->via.str.size > max_len)
    return tsr_fail(err, TSR_EPROTO, "field '%s' has %u bytes, more than the limit of %zu", key, v->via.str.size, max_len);
  *s_p = v->via.str.ptr;
  *len_p = v->via.str.size;
  return 0;
}

int tsr_wire_strcpy(const msgpack_object *map, const char *key, char *buf, size_t cap, tsr_errbuf *err)
{
  const char *s;
  size_t len;
  int rc = tsr_wire_str(map, key, cap - 1, &s, &len, err);
  if (rc != 0) return rc;
  memcpy(buf, s, len);
  buf[len] = '\0';
  return 0;
}

int tsr_wire_uint(const msgpack_object *map, const char *key, uint64_t *value_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return tsr_fail(err, TSR_EPROTO, "field '%s' must be an unsigned integer", key);
  *value_p = v->via.u64;
  return 0;
}

int tsr_wire_int(const msgpack_object *map, const char *key, int64_t *value_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  if (tsr_obj_int(v, value_p, NULL) != 0) return tsr_fail(err, TSR_EPROTO, "field '%s' must be an integer", key);
  return 0;
}

int tsr_wire_float(const msgpack_object *map, const char *key, double *value_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  switch (v->type) {
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: *value_p = v->via.f64; return 0;
  case MSGPACK_OBJECT_POSITIVE_INTEGER: *value_p = (double)v->via.u64; return 0;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: *value_p = (double)v->via.i64; return 0;
  default: return tsr_fail(err, TSR_EPROTO, "field '%s' must be a number", key);
  }
}

int tsr_wire_bool(const msgpack_object *map, const char *key, bool *value_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  if (v->type != MSGPACK_OBJECT_BOOLEAN) return tsr_fail(err, TSR_EPROTO, "field '%s' must be a boolean", key);
  *value_p = v->via.boolean;
  return 0;
}

int tsr_wire_array(const msgpack_object *map, const char *key, size_t max_n, const msgpack_object **items_p,
                   size_t *n_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  if (v->type != MSGPACK_OBJECT_ARRAY) return tsr_fail(err, TSR_EPROTO, "field '%s' must be an array", key);
  if (v->via.array.size > max_n)
    return tsr_fail(err, TSR_EPROTO, "field '%s' has %u elements, more than the limit of %zu", key, v->via.array.size,
                    max_n);
  *items_p = v->via.array.ptr;
  *n_p = v->via.array.size;
  return 0;
}

int tsr_wire_map(const msgpack_object *map, const char *key, const msgpack_object **obj_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return missing_field(key, err);
  if (v->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "field '%s' must be a map", key);
  *obj_p = v;
  return 0;
}

int tsr_wire_opt_uint(const msgpack_object *map, const char *key, uint64_t fallback, uint64_t *value_p,
                      tsr_errbuf *err)
{
  if (tsr_wire_field(map, key) == NULL) {
    *value_p = fallback;
    return 0;
  }
  return tsr_wire_uint(map, key, value_p, err);
}

int tsr_wire_opt_int(const msgpack_object *map, const char *key, int64_t fallback, int64_t *value_p, tsr_errbuf *err)
{
  if (tsr_wire_field(map, key) == NULL) {
    *value_p = fallback;
    return 0;
  }
  return tsr_wire_int(map, key, value_p, err);
}

int tsr_wire_opt_bool(const msgpack_object *map, const char *key, bool fallback, bool *value_p, tsr_errbuf *err)
{
  if (tsr_wire_field(map, key) == NULL) {
    *value_p = fallback;
    return 0;
  }
  return tsr_wire_bool(map, key, value_p, err);
}

int tsr_wire_opt_array(const msgpack_object *map, const char *key, size_t max_n, const msgpack_object **items_p,
                       size_t *n_p, tsr_errbuf *err)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL || v->type == MSGPACK_OBJECT_NIL) {
    *items_p = NULL;
    *n_p = 0;
    return 0;
  }
  return tsr_wire_array(map, key, max_n, items_p, n_p, err);
}

int tsr_wire_meta(const msgpack_object *map, tsr_meta *meta, tsr_errbuf *err)
{
  uint64_t dtype;
  const msgpack_object *dims;
  size_t ndim;
  int rc = tsr_wire_uint(map, "dtype", &dtype, err);
  if (rc == 0) rc = tsr_wire_array(map, "shape", TSR_MAX_NDIM, &dims, &ndim, err);
  if (rc != 0) return rc;
  memset(meta, 0, sizeof *meta);
  meta->dtype = dtype <= TSR_F64 ? (tsr_dtype)dtype : TSR_DTYPE_NONE;
  meta->ndim = (int)ndim;
  for (size_t d = 0; d < ndim; d++)
    if (tsr_obj_int(&dims[d], &meta->shape[d], NULL) != 0)
      return tsr_fail(err, TSR_EPROTO, "field 'shape' must hold integers");
  return tsr_meta_check(meta, err);
}

/* Decodes an array of numbers into ints when all are integers, else floats. */
static int param_array(tsr_params *params, const char *name, const msgpack_object *arr, tsr_errbuf *err)
{
  uint32_t n = arr->via.array.size;
  bool all_int = true;
  for (uint32_t i = 0; i < n; i++) {
    msgpack_object_type t = arr->via.array.ptr[i].type;
    if (t == MSGPACK_OBJECT_FLOAT32 || t == MSGPACK_OBJECT_FLOAT64) all_int = false;
    else if (t != MSGPACK_OBJECT_POSITIVE_INTEGER && t != MSGPACK_OBJECT_NEGATIVE_INTEGER)
      return tsr_fail(err, TSR_EPROTO, "parameter '%s' must be an array of numbers", name);
  }
  int64_t *ints = all_int ? malloc((n ? n : 1) * sizeof *ints) : NULL;
  double *floats = all_int ? NULL : malloc((n ? n : 1) * sizeof *floats);
  if (ints == NULL && floats == NULL) return TSR_ENOMEM;
  for (uint32_t i = 0; i < n; i++) {
    const msgpack_object *o = &arr->via.array.ptr[i];
    if (all_int && tsr_obj_int(o, &ints[i], NULL) != 0) {
      free(ints);
      return tsr_fail(err, TSR_EPROTO, "parameter '%s' holds an integer beyond int64", name);
    }
    if (!all_int)
      floats[i] = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER   ? (double)o->via.u64
                  : o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)o->via.i64
                                                               : o->via.f64;
  }
  int rc = all_int ? tsr_params_add_ints(params, name, ints, n) : tsr_params_add_floats(params, name, floats, n);
  free(ints);
  free(floats);
  return rc;
}

static int param_value(tsr_params *params, const char *name, const msgpack_object *v, tsr_errbuf *err)
{
  int64_t i;
  switch (v->type) {
  case MSGPACK_OBJECT_BOOLEAN: return tsr_params_add_bool(params, name, v->via.boolean);
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    if (tsr_obj_int(v, &i, NULL) != 0)
      return tsr_fail(err, TSR_EPROTO, "parameter '%s' is an integer beyond int64", name);
    return tsr_params_add_int(params, name, i);
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: return tsr_params_add_float(params, name, v->via.f64);
  case MSGPACK_OBJECT_STR: return tsr_params_add_str(params, name, v->via.str.ptr, v->via.str.size);
  case MSGPACK_OBJECT_ARRAY: return param_array(params, name, v, err);
  default: return tsr_fail(err, TSR_EPROTO, "parameter '%s' has an unsupported type", name);
  }
}

int tsr_wire_params(const msgpack_object *map, tsr_params *params, tsr_errbuf *err)
{
  if (map == NULL || map->type == MSGPACK_OBJECT_NIL) return 0;
  if (map->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "params must be a map");
  for (uint32_t k = 0; k < map->via.map.size; k++) {
    const msgpack_object *key = &map->via.map.ptr[k].key;
    char name[TSR_MAX_NAME_LEN + 1];
    if (key->type != MSGPACK_OBJECT_STR || key->via.str.size == 0 || key->via.str.size > TSR_MAX_NAME_LEN)
      return tsr_fail(err, TSR_EPROTO, "params keys must be non-empty strings of at most %d bytes", TSR_MAX_NAME_LEN);
    memcpy(name, key->via.str.ptr, key->via.str.size);
    name[key->via.str.size] = '\0';
    int rc = param_value(params, name, &map->via.map.ptr[k].val, err);
    if (rc != 0) return rc;
  }
  return 0;
}

int tsr_wire_encode_object(const msgpack_object *obj, char **bytes_p, size_t *len_p)
{
  msgpack_sbuffer sbuf;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sbuf);
  msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
  if (msgpack_pack_object(&pk, *obj) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    return TSR_ENOMEM;
  }
  *len_p = sbuf.size;
  *bytes_p = msgpack_sbuffer_release(&sbuf);
  return 0;
}

void tsr_chunk_header_pack(tsr_wbuf *wb, const tsr_chunk_header *hdr)
{
  tsr_wbuf_begin(wb, "chunk", 6);
  tsr_pack_kv_str(&wb->pk, "key", hdr->key);
  tsr_pack_meta(&wb->pk, &hdr->meta);
  tsr_pack_kv_uint(&wb->pk, "nbytes", hdr->nbytes);
  tsr_pack_kv_str(&wb->pk, "codec", hdr->codec[0] ? hdr->codec : "raw");
}

int tsr_chunk_header_decode(const msgpack_object *map, tsr_chunk_header *hdr, tsr_errbuf *err)
{
  memset(hdr, 0, sizeof *hdr);
  int rc = tsr_wire_strcpy(map, "key", hdr->key, sizeof hdr->key, err);
  if (rc == 0) rc = tsr_wire_meta(map, &hdr->meta, err);
  if (rc == 0) rc = tsr_wire_uint(map, "nbytes", &hdr->nbytes, err);
  if (rc == 0) rc = tsr_wire_strcpy(map, "codec", hdr->codec, sizeof hdr->codec, err);
  if (rc != 0) return rc;
  if (strcmp(hdr->codec, "raw") != 0) return tsr_fail(err, TSR_EPROTO, "unknown chunk codec '%s'", hdr->codec);
  if ((int64_t)hdr->nbytes != tsr_meta_nbytes(&hdr->meta))
    return tsr_fail(err, TSR_ESHAPE, "chunk '%s': nbytes %llu does not match its shape", hdr->key,
                    (unsigned long long)hdr->nbytes);
  return 0;
}
