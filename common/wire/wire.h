/* common/wire — the message layer of docs/protocol.md: msgpack maps, each
 * with an "op" field, several of which may travel back to back in one frame
 * (a batch). Chunk bytes never travel inside msgpack: they follow as their
 * own frames (see tsr_chunk_header below).
 *
 * Reading is two steps: tsr_reader_init() first validates the whole frame
 * with a scanner that allocates nothing and checks every declared length
 * against the bytes that remain (msgpack-c would otherwise allocate by the
 * declared count), then tsr_reader_next() yields one map at a time. The
 * accessors below check type and limits and say which field was wrong.
 * Objects borrowed from a reader live until tsr_reader_done().
 *
 * Threading: a tsr_reader or tsr_wbuf belongs to one thread at a time. */
#ifndef TSR_COMMON_WIRE_H
#define TSR_COMMON_WIRE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define TSR_PROTOCOL_VERSION 1

/* Limits checked on every message from outside. */
#define TSR_MAX_KEY_LEN 1024          /* bytes in a task key */
#define TSR_MAX_NAME_LEN 256          /* op names, worker names, addresses */
#define TSR_MAX_TEXT_LEN 65536        /* error messages */
#define TSR_MAX_INPUTS 100000         /* inputs of one task */
#define TSR_MAX_BATCH_TASKS 1000000   /* tasks in one submit message */
#define TSR_MAX_FRAME_BYTES (1ull << 31) /* one control frame */
#define TSR_MAX_DEPTH 32              /* msgpack nesting */

/* ---------- writing ---------- */
typedef struct tsr_wbuf {
  msgpack_sbuffer sbuf;
  msgpack_packer pk;
  size_t nmsgs;      /* maps started with tsr_wbuf_begin */
} tsr_wbuf;

void tsr_wbuf_init(tsr_wbuf *wb);
void tsr_wbuf_reset(tsr_wbuf *wb);          /* empties, keeps the allocation */
void tsr_wbuf_free(tsr_wbuf *wb);
/* Starts one message: a map of nfields entries whose first is "op": op.
 * nfields counts "op" itself. The caller then packs nfields-1 pairs. */
void tsr_wbuf_begin(tsr_wbuf *wb, const char *op, uint32_t nfields);
/* Hands the bytes to the caller (who must free() them) and empties wb. */
char *tsr_wbuf_release(tsr_wbuf *wb, size_t *len_p);

/* Pair packers: pack a key then a value. */
void tsr_pack_str(msgpack_packer *pk, const char *s);
void tsr_pack_strn(msgpack_packer *pk, const char *s, size_t len);
void tsr_pack_kv_str(msgpack_packer *pk, const char *key, const char *value);
void tsr_pack_kv_strn(msgpack_packer *pk, const char *key, const char *value, size_t len);
void tsr_pack_kv_int(msgpack_packer *pk, const char *key, int64_t value);
void tsr_pack_kv_uint(msgpack_packer *pk, const char *key, uint64_t value);
void tsr_pack_kv_float(msgpack_packer *pk, const char *key, double value);
void tsr_pack_kv_bool(msgpack_packer *pk, const char *key, bool value);
/* Packs "dtype": int, "shape": [dims] (two pairs). */
void tsr_pack_meta(msgpack_packer *pk, const tsr_meta *meta);
/* Appends already-encoded msgpack bytes (one whole object) as a value. */
void tsr_pack_raw(msgpack_packer *pk, const void *bytes, size_t len);

/* ---------- validating ---------- */
/* Scans [data, data+len) as a sequence of complete msgpack objects without
 * allocating: every container's declared count must fit in the bytes left,
 * nesting must stay within TSR_MAX_DEPTH, ext types are refused. Returns the
 * number of top-level objects (>= 0), or TSR_EPROTO with a message. */
int tsr_wire_validate(const void *data, size_t len, tsr_errbuf *err);

/* ---------- reading ---------- */
typedef struct tsr_reader {
  msgpack_unpacked unpacked;
  const char *data;
  size_t len;
  size_t offset;
} tsr_reader;

/* Validates the frame; 0 or TSR_EPROTO. Call tsr_reader_done() either way. */
int tsr_reader_init(tsr_reader *rd, const void *data, size_t len, tsr_errbuf *err);
/* Yields the next message: 1 with *map_p and *op_p (NUL-terminated copy in
 * op_buf) set, 0 at the end, TSR_EPROTO when the object is not a map with a
 * string "op". The map lives until the next call or tsr_reader_done(). */
int tsr_reader_next(tsr_reader *rd, const msgpack_object **map_p, char op_buf[TSR_MAX_NAME_LEN + 1], tsr_errbuf *err);
void tsr_reader_done(tsr_reader *rd);

/* Field lookup in a map object; NULL when absent (or map is not a map). */
const msgpack_object *tsr_wire_field(const msgpack_object *map, const char *key);

/* Required fields: 0, or TSR_EPROTO naming the field ("missing field 'key'",
 * "field 'nbytes' must be an unsigned integer"). Strings are borrowed (not
 * NUL-terminated) and must be at most max_len bytes. */
int tsr_wire_str(const msgpack_object *map, const char *key, size_t max_len, const char **s_p, size_t *len_p, tsr_errbuf *err);
int tsr_wire_uint(const msgpack_object *map, const char *key, uint64_t *value_p, tsr_errbuf *err);
int tsr_wire_int(const msgpack_object *map, const char *key, int64_t *value_p, tsr_errbuf *err);
int tsr_wire_float(const msgpack_object *map, const char *key, double *value_p, tsr_errbuf *err);
int tsr_wire_bool(const msgpack_object *map, const char *key, bool *value_p, tsr_errbuf *err);
int tsr_wire_array(const msgpack_object *map, const char *key, size_t max_n, const msgpack_object **items_p, size_t *n_p, tsr_errbuf *err);
int tsr_wire_map(const msgpack_object *map, const char *key, const msgpack_object **obj_p, tsr_errbuf *err);
/* Copies a required string field into buf (NUL-terminated, cap bytes incl. NUL). */
int tsr_wire_strcpy(const msgpack_object *map, const char *key, char *buf, size_t cap, tsr_errbuf *err);
/* Optional variants: absent gives the fallback; present but wrong is an error. */
int tsr_wire_opt_uint(const msgpack_object *map, const char *key, uint64_t fallback, uint64_t *value_p, tsr_errbuf *err);
int tsr_wire_opt_int(const msgpack_object *map, const char *key, int64_t fallback, int64_t *value_p, tsr_errbuf *err);
int tsr_wire_opt_bool(const msgpack_object *map, const char *key, bool fallback, bool *value_p, tsr_errbuf *err);
/* Optional array: absent gives n = 0. */
int tsr_wire_opt_array(const msgpack_object *map, const char *key, size_t max_n, const msgpack_object **items_p, size_t *n_p, tsr_errbuf *err);

/* Plain-object accessors (array elements). 0 or TSR_EPROTO. */
int tsr_obj_str(const msgpack_object *obj, size_t max_len, const char **s_p, size_t *len_p, tsr_errbuf *err);
int tsr_obj_uint(const msgpack_object *obj, uint64_t *value_p, tsr_errbuf *err);
int tsr_obj_int(const msgpack_object *obj, int64_t *value_p, tsr_errbuf *err);

/* Decodes "dtype" and "shape" fields of map into meta and checks it. */
int tsr_wire_meta(const msgpack_object *map, tsr_meta *meta, tsr_errbuf *err);
/* Decodes a params map (string keys; values int, float, bool, str, or
 * arrays of numbers) into params (appended). Anything else is TSR_EPROTO
 * naming the parameter. */
int tsr_wire_params(const msgpack_object *map, tsr_params *params, tsr_errbuf *err);
/* Re-encodes one object into a malloc'd buffer (*bytes_p, *len_p). */
int tsr_wire_encode_object(const msgpack_object *obj, char **bytes_p, size_t *len_p);

/* ---------- chunk headers (data plane) ----------
 * A chunk on the wire: frame 1 is this header as a msgpack map
 * {"op": "chunk", "key", "dtype", "shape", "nbytes", "codec": "raw"},
 * frame 2 the nbytes raw bytes, C order. */
typedef struct tsr_chunk_header {
  char key[TSR_MAX_KEY_LEN + 1];
  tsr_meta meta;
  uint64_t nbytes;
  char codec[16];
} tsr_chunk_header;

/* Packs header as one message into wb. */
void tsr_chunk_header_pack(tsr_wbuf *wb, const tsr_chunk_header *hdr);
/* Decodes a "chunk" message map; checks that nbytes matches the shape
 * (for codec "raw"). 0 or TSR_EPROTO/TSR_ESHAPE. */
int tsr_chunk_header_decode(const msgpack_object *map, tsr_chunk_header *hdr, tsr_errbuf *err);

#endif
