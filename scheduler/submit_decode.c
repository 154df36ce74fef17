/* Decoding the `tasks` and `wants` of one or more `submit` messages (the
 * parts of one graph) into task specs for sched_graph_add(). Specs borrow
 * the strings of the decoded messages; params maps are re-encoded, once,
 * into st->scratch and copied into the graph's arena on admission. Every
 * malformed task is reported as EPROTO naming the task. */
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

typedef struct decode {
  sched_state *st;
  sched_task_spec *specs;
  uint32_t nspecs;
  sched_strref *refs;    /* inputs of all tasks, then wants */
  uint64_t nrefs;
  msgpack_packer pk;     /* params, into st->scratch */
  tsr_errbuf *err;
} decode;

static int decode_task(decode *d, const msgpack_object *obj, uint32_t index)
{
  tsr_errbuf inner;
  sched_task_spec *s = &d->specs[d->nspecs];
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
    if (s->key.len == 0) return tsr_fail(d->err, TSR_EPROTO, "task %u: %s", index, inner.text);
    return tsr_fail(d->err, TSR_EPROTO, "task %u ('%.*s'): %s", index, (int)(s->key.len > 64 ? 64 : s->key.len),
                    s->key.s, inner.text);
  }
  s->params = (const void *)(uintptr_t)d->st->scratch.size;
  if (params != NULL && params->type == MSGPACK_OBJECT_MAP && params->via.map.size > 0) {
    size_t before = d->st->scratch.size;
    if (msgpack_pack_object(&d->pk, *params) != 0) return tsr_fail(d->err, TSR_ENOMEM, "out of memory");
    s->params_len = (uint32_t)(d->st->scratch.size - before);
  }
  if (sched_limits_check_task(d->st, s->key.len, s->params_len, &inner) != 0)
    return tsr_fail(d->err, TSR_ELIMIT, "task %u ('%.*s'): %s", index, (int)(s->key.len > 64 ? 64 : s->key.len), s->key.s,
                    inner.text);
  d->nspecs++;
  return 0;
}

/* Counts tasks and strings over all parts, so each array is allocated once. */
static int count_parts(const msgpack_object *const *maps, uint32_t nmaps, uint64_t *ntasks_p, uint64_t *nrefs_p,
                       bool *wants_p, tsr_errbuf *err)
{
  uint64_t ntasks = 0, nrefs = 0;
  bool wants = false;
  for (uint32_t m = 0; m < nmaps; m++) {
    const msgpack_object *tasks, *w;
    size_t n, nw;
    int rc = tsr_wire_array(maps[m], "tasks", TSR_MAX_BATCH_TASKS, &tasks, &n, err);
    if (rc == 0) rc = tsr_wire_opt_array(maps[m], "wants", TSR_MAX_BATCH_TASKS, &w, &nw, err);
    if (rc != 0) return rc;
    const msgpack_object *wf = tsr_wire_field(maps[m], "wants");
    wants = wants || (wf != NULL && wf->type == MSGPACK_OBJECT_ARRAY);  /* nil means absent */
    ntasks += n;
    nrefs += nw;
    for (size_t i = 0; i < n; i++) {
      const msgpack_object *in = tsr_wire_field(&tasks[i], "inputs");
      if (in != NULL && in->type == MSGPACK_OBJECT_ARRAY) nrefs += in->via.array.size;
    }
  }
  if (ntasks > UINT32_MAX / 2) return tsr_fail(err, TSR_ELIMIT, "a graph of %llu tasks is too large", (unsigned long long)ntasks);
  *ntasks_p = ntasks;
  *nrefs_p = nrefs;
  *wants_p = wants;
  return 0;
}

static int decode_wants(decode *d, const msgpack_object *map)
{
  const msgpack_object *w;
  size_t nw, len;
  int rc = tsr_wire_opt_array(map, "wants", TSR_MAX_BATCH_TASKS, &w, &nw, d->err);
  for (size_t i = 0; rc == 0 && i < nw; i++) {
    const char *s;
    if (tsr_obj_str(&w[i], TSR_MAX_KEY_LEN, &s, &len, NULL) != 0)
      return tsr_fail(d->err, TSR_EPROTO, "field 'wants' must hold key strings of at most %d bytes", TSR_MAX_KEY_LEN);
    d->refs[d->nrefs++] = (sched_strref){s, (uint32_t)len};
  }
  return rc;
}

int sched_submit_maps(sched_state *st, uint32_t client, uint64_t graph_id, const msgpack_object *const *maps,
                      uint32_t nmaps, tsr_errbuf *err)
{
  uint64_t ntasks = 0, nrefs = 0;
  bool wants_given = false;
  int rc = count_parts(maps, nmaps, &ntasks, &nrefs, &wants_given, err);
  if (rc == 0) rc = sched_limits_check_graph(st, client, graph_id, ntasks, err);
  if (rc != 0) return rc;
  decode d = {.st = st, .err = err};
  d.specs = malloc((size_t)(ntasks ? ntasks : 1) * sizeof *d.specs);
  d.refs = malloc((size_t)(nrefs ? nrefs : 1) * sizeof *d.refs);
  st->scratch.size = 0;
  msgpack_packer_init(&d.pk, &st->scratch, msgpack_sbuffer_write);
  if (d.specs == NULL || d.refs == NULL) rc = tsr_fail(err, TSR_ENOMEM, "out of memory decoding graph %llu", (unsigned long long)graph_id);
  for (uint32_t m = 0; rc == 0 && m < nmaps; m++) {
    const msgpack_object *tasks;
    size_t n;
    tsr_wire_array(maps[m], "tasks", TSR_MAX_BATCH_TASKS, &tasks, &n, NULL);
    for (size_t i = 0; rc == 0 && i < n; i++) rc = decode_task(&d, &tasks[i], d.nspecs);
  }
  uint64_t want_start = d.nrefs;
  for (uint32_t m = 0; rc == 0 && m < nmaps; m++) rc = decode_wants(&d, maps[m]);
  if (rc == 0) {
    /* scratch and refs are complete: turn offsets into pointers */
    for (uint32_t i = 0; i < d.nspecs; i++) {
      d.specs[i].inputs = d.refs + (uintptr_t)d.specs[i].inputs;
      d.specs[i].params = d.specs[i].params_len ? st->scratch.data + (uintptr_t)d.specs[i].params : NULL;
    }
    rc = sched_graph_add(st, client, graph_id, d.specs, d.nspecs, wants_given ? d.refs + want_start : NULL,
                         (uint32_t)(d.nrefs - want_start), err);
  }
  free(d.specs);
  free(d.refs);
  if (st->scratch.alloc > (64u << 20)) {
    /* a huge graph's params: give the memory back */
    msgpack_sbuffer_destroy(&st->scratch);
    msgpack_sbuffer_init(&st->scratch);
  }
  return rc;
}
