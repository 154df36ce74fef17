/* Decoding the `tasks` and `wants` of the `submit` messages of one graph
 * (its parts) into task specs for sched_graph_add(), one part at a time,
 * as each arrives (sched_decode_part), so the last part costs no more
 * than any other. Specs borrow the strings of the part bytes the caller
 * keeps; params maps are re-encoded, once, into the decoded graph's own
 * buffer and copied into the graph's arena on admission. Every malformed
 * task is reported as EPROTO naming the task and its index in the graph. */
#include "sched.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool is_number(const msgpack_object *o)
{
  return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
         o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64;
}

/* The value types docs/protocol.md allows in params (what tsr_wire_params
 * decodes on the worker), checked without allocating. */
static int check_params(const msgpack_object *p, tsr_errbuf *err)
{
  if (p->type != MSGPACK_OBJECT_MAP) return tsr_fail(err, TSR_EPROTO, "field 'params' must be a map");
  for (uint32_t k = 0; k < p->via.map.size; k++) {
    const msgpack_object *key = &p->via.map.ptr[k].key, *v = &p->via.map.ptr[k].val;
    if (key->type != MSGPACK_OBJECT_STR || key->via.str.size == 0 || key->via.str.size > TSR_MAX_NAME_LEN)
      return tsr_fail(err, TSR_EPROTO, "params keys must be non-empty strings of at most %d bytes", TSR_MAX_NAME_LEN);
    bool ok = is_number(v) || v->type == MSGPACK_OBJECT_BOOLEAN || v->type == MSGPACK_OBJECT_STR;
    if (v->type == MSGPACK_OBJECT_ARRAY) {
      ok = true;
      for (uint32_t j = 0; ok && j < v->via.array.size; j++) ok = is_number(&v->via.array.ptr[j]);
    }
    if (!ok)
      return tsr_fail(err, TSR_EPROTO, "parameter '%.*s' must be a number, bool, string or array of numbers",
                      (int)key->via.str.size, key->via.str.ptr);
  }
  return 0;
}

static int decode_task(sched_state *st, sched_decoded *d, msgpack_packer *pk, const msgpack_object *obj,
                       tsr_errbuf *err)
{
  tsr_errbuf inner;
  uint32_t index = d->nspecs;
  sched_task_spec *s = &d->specs[index];
  memset(s, 0, sizeof *s);
  const msgpack_object *inputs = NULL, *params = tsr_wire_field(obj, "params");
  size_t n = 0, len = 0;
  int rc = obj->type == MSGPACK_OBJECT_MAP ? 0 : tsr_fail(&inner, TSR_EPROTO, "a task must be a map");
  if (rc == 0 && (rc = tsr_wire_str(obj, "key", TSR_MAX_KEY_LEN, &s->key.s, &len, &inner)) == 0)
    s->key.len = (uint32_t)len;
  if (rc == 0 && (rc = tsr_wire_str(obj, "op", TSR_MAX_NAME_LEN, &s->op.s, &len, &inner)) == 0) s->op.len = (uint32_t)len;
  if (rc == 0 && s->op.len == 0) rc = tsr_fail(&inner, TSR_EPROTO, "field 'op' must not be empty");
  if (rc == 0 && params != NULL && params->type != MSGPACK_OBJECT_NIL) rc = check_params(params, &inner);
  if (rc == 0) rc = tsr_wire_opt_array(obj, "inputs", TSR_MAX_INPUTS, &inputs, &n, &inner);
  s->inputs = (const sched_strref *)(uintptr_t)d->nrefs; /* an offset until refs stop moving */
  s->ninputs = (uint32_t)n;
  for (size_t j = 0; rc == 0 && j < n; j++) {
    const char *str;
    if (tsr_obj_str(&inputs[j], TSR_MAX_KEY_LEN, &str, &len, NULL) != 0)
      rc = tsr_fail(&inner, TSR_EPROTO, "input %zu must be a key string of at most %d bytes", j, TSR_MAX_KEY_LEN);
    else d->refs[d->nrefs++] = (sched_strref){str, (uint32_t)len};
  }
  if (rc != 0) {
    if (s->key.len == 0) return tsr_fail(err, TSR_EPROTO, "task %u: %s", index, inner.text);
    return tsr_fail(err, TSR_EPROTO, "task %u ('%.*s'): %s", index, (int)(s->key.len > 64 ? 64 : s->key.len),
                    s->key.s, inner.text);
  }
  s->params = (const void *)(uintptr_t)d->params.size;
  if (params != NULL && params->type == MSGPACK_OBJECT_MAP && params->via.map.size > 0) {
    size_t before = d->params.size;
    if (msgpack_pack_object(pk, *params) != 0) return tsr_fail(err, TSR_ENOMEM, "out of memory");
    s->params_len = (uint32_t)(d->params.size - before);
  }
  if (sched_limits_check_task(st, s->key.len, s->params_len, &inner) != 0)
    return tsr_fail(err, TSR_ELIMIT, "task %u ('%.*s'): %s", index, (int)(s->key.len > 64 ? 64 : s->key.len), s->key.s,
                    inner.text);
  d->nspecs++;
  return 0;
}

/* Room for one more part: its tasks, their inputs and its wants, so each
 * array grows at most once per part. */
static int reserve_part(sched_decoded *d, const msgpack_object *tasks, size_t n, size_t nw, tsr_errbuf *err)
{
  uint64_t nrefs = 0;
  for (size_t i = 0; i < n; i++) {
    const msgpack_object *in = tsr_wire_field(&tasks[i], "inputs");
    if (in != NULL && in->type == MSGPACK_OBJECT_ARRAY) nrefs += in->via.array.size;
  }
  if ((uint64_t)d->nspecs + n > UINT32_MAX / 2 || (uint64_t)d->nrefs + nrefs > UINT32_MAX / 2 ||
      (uint64_t)d->nwants + nw > UINT32_MAX / 2)
    return tsr_fail(err, TSR_ELIMIT, "a graph of more than %u tasks or inputs is too large", UINT32_MAX / 2);
  if (sched_grow((void **)&d->specs, &d->cap_specs, d->nspecs + (uint32_t)n + 1, sizeof *d->specs) != 0 ||
      sched_grow((void **)&d->refs, &d->cap_refs, d->nrefs + (uint32_t)nrefs + 1, sizeof *d->refs) != 0 ||
      sched_grow((void **)&d->wants, &d->cap_wants, d->nwants + (uint32_t)nw + 1, sizeof *d->wants) != 0)
    return tsr_fail(err, TSR_ENOMEM, "out of memory decoding a graph of %u tasks", d->nspecs + (uint32_t)n);
  return 0;
}

static int decode_wants(sched_decoded *d, const msgpack_object *w, size_t nw, tsr_errbuf *err)
{
  size_t len;
  for (size_t i = 0; i < nw; i++) {
    const char *s;
    if (tsr_obj_str(&w[i], TSR_MAX_KEY_LEN, &s, &len, NULL) != 0)
      return tsr_fail(err, TSR_EPROTO, "field 'wants' must hold key strings of at most %d bytes", TSR_MAX_KEY_LEN);
    d->wants[d->nwants++] = (sched_strref){s, (uint32_t)len};
  }
  return 0;
}

/* The strings of the entries from spec s0, ref r0 and want w0 on point
 * into the frame the part arrived in: point them into the kept copy. */
static const char *moved(const char *p, const char *raw, const char *kept) { return kept + (p - raw); }

static void rebase(sched_decoded *d, uint32_t s0, uint32_t r0, uint32_t w0, const char *raw, const char *kept)
{
  for (uint32_t i = s0; i < d->nspecs; i++) {
    d->specs[i].key.s = moved(d->specs[i].key.s, raw, kept);
    d->specs[i].op.s = moved(d->specs[i].op.s, raw, kept);
  }
  for (uint32_t i = r0; i < d->nrefs; i++) d->refs[i].s = moved(d->refs[i].s, raw, kept);
  for (uint32_t i = w0; i < d->nwants; i++) d->wants[i].s = moved(d->wants[i].s, raw, kept);
}

int sched_decode_part(sched_state *st, sched_decoded *d, const msgpack_object *map, const char *raw, const char *kept,
                      tsr_errbuf *err)
{
  uint32_t s0 = d->nspecs, r0 = d->nrefs, w0 = d->nwants;
  const msgpack_object *tasks, *w;
  size_t n, nw;
  int rc = tsr_wire_array(map, "tasks", TSR_MAX_BATCH_TASKS, &tasks, &n, err);
  if (rc == 0) rc = tsr_wire_opt_array(map, "wants", TSR_MAX_BATCH_TASKS, &w, &nw, err);
  if (rc == 0) rc = reserve_part(d, tasks, n, nw, err);
  if (rc != 0) return rc;
  const msgpack_object *wf = tsr_wire_field(map, "wants");
  d->wants_given = d->wants_given || (wf != NULL && wf->type == MSGPACK_OBJECT_ARRAY);  /* nil means absent */
  msgpack_packer pk;
  msgpack_packer_init(&pk, &d->params, msgpack_sbuffer_write);
  for (size_t i = 0; rc == 0 && i < n; i++) rc = decode_task(st, d, &pk, &tasks[i], err);
  if (rc == 0) rc = decode_wants(d, w, nw, err);
  if (rc == 0 && kept != NULL) rebase(d, s0, r0, w0, raw, kept);
  return rc;
}

void sched_decoded_resolve(sched_decoded *d)
{
  for (uint32_t i = 0; i < d->nspecs; i++) {
    d->specs[i].inputs = d->refs + (uintptr_t)d->specs[i].inputs;
    d->specs[i].params = d->specs[i].params_len ? d->params.data + (uintptr_t)d->specs[i].params : NULL;
  }
}

void sched_decoded_free(sched_decoded *d)
{
  free(d->specs);
  free(d->refs);
  free(d->wants);
  msgpack_sbuffer_destroy(&d->params);
  memset(d, 0, sizeof *d);
}

void sched_pending_free(sched_pending *pd)
{
  for (uint32_t k = 0; k < pd->nparts; k++) free(pd->parts[k].bytes);
  free(pd->parts);
  free(pd->error);
  sched_decoded_free(&pd->dec);
  memset(pd, 0, sizeof *pd);
}

int sched_submit_maps(sched_state *st, uint32_t client, uint64_t graph_id, const msgpack_object *const *maps,
                      uint32_t nmaps, tsr_errbuf *err)
{
  sched_decoded d;
  memset(&d, 0, sizeof d);
  msgpack_sbuffer_init(&d.params);
  int rc = 0;
  for (uint32_t m = 0; rc == 0 && m < nmaps; m++) rc = sched_decode_part(st, &d, maps[m], NULL, NULL, err);
  if (rc == 0) rc = sched_limits_check_graph(st, client, graph_id, d.nspecs, err);
  if (rc == 0) {
    sched_decoded_resolve(&d);
    rc = sched_graph_add(st, client, graph_id, d.specs, d.nspecs, d.wants_given ? d.wants : NULL, d.nwants, err);
  }
  sched_decoded_free(&d);
  return rc;
}
