/* The client's table of wanted keys: key → key_entry, shared by every
 * future that wants the key (refs). All functions here run under the
 * client's mutex.
 *
 * States: PENDING (submitted, or lost and being recomputed) → DONE (in
 * memory at `where`) or ERRED (message kept). A `key_lost` moves DONE back
 * to PENDING; a new `key_done` follows. `gen` changes on every update so a
 * gather that failed against old addresses can wait for new ones. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void keys_free_entry(key_entry *e)
{
  if (e == NULL) return;
  for (size_t i = 0; i < e->n_where; i++) free(e->where[i]);
  free(e->where);
  free(e->error);
  free(e);   /* the key lives in the same block */
}

static void clear_result(key_entry *e)
{
  for (size_t i = 0; i < e->n_where; i++) free(e->where[i]);
  free(e->where);
  e->where = NULL;
  e->n_where = 0;
  free(e->error);
  e->error = NULL;
}

key_entry *keys_acquire_locked(tsr_client *c, const char *key)
{
  uint64_t value;
  size_t len = strlen(key);
  if (tsr_strmap_get(c->keys, key, len, &value)) {
    key_entry *e = (key_entry *)(uintptr_t)value;
    /* A submission asks again: an old failure or a result of a lost session
     * no longer stands; the scheduler answers every wanted key anew. */
    if (e->epoch != c->epoch || e->state == KEY_ERRED) {
      clear_result(e);
      e->state = KEY_PENDING;
      e->epoch = c->epoch;
      e->gen++;
      c->resets++;
    }
    e->refs++;
    return e;
  }
  /* One allocation for the entry and its key (the map borrows the key). */
  key_entry *e = malloc(sizeof *e + len + 1);
  if (e == NULL) return NULL;
  memset(e, 0, sizeof *e);
  e->key = (char *)(e + 1);
  memcpy(e->key, key, len + 1);
  if (tsr_strmap_put(c->keys, e->key, len, (uint64_t)(uintptr_t)e) != 0) {
    keys_free_entry(e);
    return NULL;
  }
  e->epoch = c->epoch;
  e->refs = 1;
  return e;
}

void keys_release_locked(tsr_client *c, key_entry *e, key_entry ***wire, size_t *n_wire, size_t *cap_wire)
{
  if (e == NULL || --e->refs > 0) return;
  tsr_strmap_del(c->keys, e->key, strlen(e->key));
  if (wire != NULL && *n_wire == *cap_wire) {
    size_t cap = *cap_wire ? *cap_wire * 2 : 64;
    key_entry **grown = realloc(*wire, cap * sizeof *grown);
    if (grown != NULL) *wire = grown, *cap_wire = cap;
  }
  if (wire != NULL && *n_wire < *cap_wire) {
    (*wire)[(*n_wire)++] = e;   /* the list takes the entry; it is freed once the key is sent */
    return;
  }
  keys_free_entry(e);
}

void keys_send_release_locked(tsr_client *c, key_entry **entries, size_t n)
{
  for (size_t first = 0; first < n; first += CLIENT_RELEASE_PART_KEYS) {
    size_t count = n - first < CLIENT_RELEASE_PART_KEYS ? n - first : CLIENT_RELEASE_PART_KEYS;
    tsr_wbuf wb;
    tsr_wbuf_init(&wb);
    tsr_wbuf_begin(&wb, "release", 2);
    tsr_pack_str(&wb.pk, "keys");
    msgpack_pack_array(&wb.pk, count);
    for (size_t i = first; i < first + count; i++) tsr_pack_str(&wb.pk, entries[i]->key);
    client_enqueue_locked(c, client_frame_from(&wb));
    tsr_wbuf_free(&wb);
  }
  for (size_t i = 0; i < n; i++) keys_free_entry(entries[i]);
  free(entries);
}

void keys_send_missing_locked(tsr_client *c, const char *key, const char *from)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "key_missing", 3);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "from", from);
  client_enqueue_locked(c, client_frame_from(&wb));
  tsr_wbuf_free(&wb);
}

/* The entry for a message's "key", or NULL when this client no longer
 * wants it (a release crossed the message: not an error). */
static int lookup(tsr_client *c, const msgpack_object *map, key_entry **e_p, tsr_errbuf *err)
{
  const char *key;
  size_t len;
  uint64_t value;
  int rc = tsr_wire_str(map, "key", TSR_MAX_KEY_LEN, &key, &len, err);
  if (rc != 0) return rc;
  *e_p = tsr_strmap_get(c->keys, key, len, &value) ? (key_entry *)(uintptr_t)value : NULL;
  return 0;
}

/* Decodes `where` into a fresh array of strings. */
static int decode_where(const msgpack_object *map, char ***where_p, size_t *n_p, tsr_errbuf *err)
{
  const msgpack_object *items;
  size_t n;
  int rc = tsr_wire_array(map, "where", CLIENT_MAX_WHERE, &items, &n, err);
  if (rc != 0) return rc;
  char **where = calloc(n ? n : 1, sizeof *where);
  if (where == NULL) return TSR_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const char *s;
    size_t len;
    rc = tsr_obj_str(&items[i], TSR_MAX_ADDR_LEN - 1, &s, &len, err);
    if (rc == 0 && (where[i] = strndup(s, len)) == NULL) rc = TSR_ENOMEM;
    if (rc != 0) {
      for (size_t j = 0; j < i; j++) free(where[j]);
      free(where);
      return rc;
    }
  }
  *where_p = where;
  *n_p = n;
  return 0;
}

int keys_on_done_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  key_entry *e;
  tsr_meta meta;
  uint64_t nbytes;
  char **where = NULL;
  size_t n_where = 0;
  int rc = lookup(c, map, &e, err);
  if (rc == 0) rc = tsr_wire_uint(map, "nbytes", &nbytes, err);
  if (rc == 0) rc = tsr_wire_meta(map, &meta, err);
  if (rc == 0) rc = decode_where(map, &where, &n_where, err);
  if (rc != 0) return rc;
  if (e == NULL) {
    for (size_t i = 0; i < n_where; i++) free(where[i]);
    free(where);
    return 0;
  }
  clear_result(e);
  e->where = where;
  e->n_where = n_where;
  e->meta = meta;
  e->nbytes = nbytes;
  e->state = KEY_DONE;
  e->gen++;
  return 0;
}

int keys_on_erred_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  key_entry *e;
  const char *text;
  size_t len;
  int rc = lookup(c, map, &e, err);
  if (rc == 0) rc = tsr_wire_str(map, "message", TSR_MAX_TEXT_LEN, &text, &len, err);
  if (rc != 0 || e == NULL) return rc;
  clear_result(e);
  e->error = strndup(text, len);
  e->state = KEY_ERRED;
  e->gen++;
  c->errors++;
  return 0;
}

int keys_on_lost_locked(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  key_entry *e;
  int rc = lookup(c, map, &e, err);
  if (rc != 0 || e == NULL) return rc;
  if (e->state == KEY_DONE) c->resets++;
  clear_result(e);
  e->state = KEY_PENDING;
  e->gen++;
  client_log(c, TSR_LOG_INFO, "key '%s' was lost with its worker; the scheduler recomputes it", e->key);
  return 0;
}
