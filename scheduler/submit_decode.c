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

/* Checks a part's arrays and makes room for them; *tasks_p, *n_p: its tasks. */
static int part_begin(sched_decoded *d, const msgpack_object *map, const msgpack_object **tasks_p, size_t *n_p,
                      tsr_errbuf *err)
{
  const msgpack_object *w;
  size_t nw;
  int rc = tsr_wire_array(map, "tasks", TSR_MAX_BATCH_TASKS, tasks_p, n_p, err);
  if (rc == 0) rc = tsr_wire_opt_array(map, "wants", TSR_MAX_BATCH_TASKS, &w, &nw, err);
  if (rc == 0) rc = reserve_part(d, *tasks_p, *n_p, nw, err);
  const msgpack_object *wf = tsr_wire_field(map, "wants");
  d->wants_given = d->wants_given || (wf != NULL && wf->type == MSGPACK_OBJECT_ARRAY);  /* nil means absent */
  return rc;
}

static int part_end(sched_decoded *d, const msgpack_object *map, tsr_errbuf *err)
{
  const msgpack_object *w;
  size_t nw;
  int rc = tsr_wire_opt_array(map, "wants", TSR_MAX_BATCH_TASKS, &w, &nw, err);
  return rc == 0 ? decode_wants(d, w, nw, err) : rc;
}

int sched_decode_part(sched_state *st, sched_decoded *d, const msgpack_object *map, tsr_errbuf *err)
{
  const msgpack_object *tasks;
  size_t n;
  int rc = part_begin(d, map, &tasks, &n, err);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &d->params, msgpack_sbuffer_write);
  for (size_t i = 0; rc == 0 && i < n; i++) rc = decode_task(st, d, &pk, &tasks[i], err);
  return rc == 0 ? part_end(d, map, err) : rc;
}

/* Opens kept part k of pd for decoding: unpacked from its bytes (which its
 * strings then borrow), its arrays checked and room made. */
static int open_part(sched_pending *pd, uint32_t k, tsr_errbuf *err)
{
  size_t off = 0;
  msgpack_unpacked_init(&pd->unp);
  pd->unp_live = true;
  /* these bytes passed tsr_wire_validate when they arrived */
  if (msgpack_unpack_next(&pd->unp, pd->parts[k].bytes, pd->parts[k].len, &off) != MSGPACK_UNPACK_SUCCESS)
    return tsr_fail(err, TSR_EINTERNAL, "part %u of graph %llu cannot be decoded again", k, (unsigned long long)pd->graph_id);
  size_t n = 0;
  int rc = part_begin(&pd->dec, &pd->unp.data, &pd->cur_tasks, &n, err);
  pd->cur_n = (uint32_t)n;
  pd->cur_next = 0;
  return rc;
}

static void close_part(sched_pending *pd)
{
  if (pd->unp_live) msgpack_unpacked_destroy(&pd->unp);
  pd->unp_live = false;
}

int sched_pending_decode(sched_state *st, sched_pending *pd, uint32_t client, uint32_t budget, tsr_errbuf *err)
{
  msgpack_packer pk;
  msgpack_packer_init(&pk, &pd->dec.params, msgpack_sbuffer_write);
  uint32_t done = 0;
  int rc = 0;
  while (rc == 0 && pd->ndecoded < pd->nparts && done < budget) {
    if (!pd->unp_live && (rc = open_part(pd, pd->ndecoded, err)) != 0) break;
    uint32_t stop = pd->cur_n - pd->cur_next > budget - done ? pd->cur_next + (budget - done) : pd->cur_n;
    /* a task costs 1 + its inputs (a fan-in's 100,000 are the bulk) */
    for (; rc == 0 && pd->cur_next < stop && done < budget; pd->cur_next++) {
      rc = decode_task(st, &pd->dec, &pk, &pd->cur_tasks[pd->cur_next], err);
      done += 1 + (rc == 0 ? pd->dec.specs[pd->dec.nspecs - 1].ninputs : 0);
    }
    if (rc != 0 || pd->cur_next < pd->cur_n) break;
    rc = part_end(&pd->dec, &pd->unp.data, err);
    if (rc == 0) rc = sched_limits_check_graph(st, client, pd->graph_id, pd->dec.nspecs, err);
    close_part(pd);
    pd->ndecoded++;
    done++;  /* an empty part still counts */
  }
  if (rc != 0) close_part(pd);
  return rc;
}

void sched_decoded_resolve(sched_decoded *d)
{
  if (d->resolved) return;
  d->resolved = true;
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

void sched_pending_fail(sched_pending *pd, int rc, const char *text)
{
  close_part(pd);
  for (uint32_t k = 0; k < pd->nparts; k++) free(pd->parts[k].bytes);
  pd->nparts = pd->ndecoded = 0;
  sched_decoded_free(&pd->dec);
  free(pd->error);
  pd->failed = rc;
  pd->error = strdup(text);
}

void sched_pending_free(sched_pending *pd)
{
  close_part(pd);
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
  for (uint32_t m = 0; rc == 0 && m < nmaps; m++) rc = sched_decode_part(st, &d, maps[m], err);
  if (rc == 0) rc = sched_limits_check_graph(st, client, graph_id, d.nspecs, err);
  if (rc == 0) {
    sched_decoded_resolve(&d);
    rc = sched_graph_add(st, client, graph_id, d.specs, d.nspecs, d.wants_given ? d.wants : NULL, d.nwants, err);
  }
  sched_decoded_free(&d);
  return rc;
}
