/* Graph admission: decoding a submit's tasks, validating the whole graph,
 * and either admitting all of it or keeping nothing.
 *
 * The checks, in order, each rejecting the whole graph with a message that
 * names the key(s): a malformed task (EPROTO), a key defined twice in the
 * graph differently or defined differently from an existing task (EEXIST),
 * an op no connected worker advertises (EUNKNOWNOP, only while at least one
 * worker is connected), an input that is defined nowhere (EMISSING), a
 * cycle (ECYCLE), a wanted key that is not defined (ENOTFOUND).
 *
 * New tasks are created in state NEW while validating (their keys are put
 * in the key map so later tasks of the graph find them); a rejection
 * discards exactly those. Existing tasks are not touched until the graph
 * is accepted, so a rejected graph leaves no trace. Everything is linear
 * in tasks + inputs: Kahn's algorithm for cycles, one map lookup per key
 * and per input, one arena per graph for keys, params and edge lists. */
#include "progress.h"
#include "sched.h"

#include <stdlib.h>
#include <string.h>

static bool strref_eq(const char *a, size_t alen, const char *b, size_t blen)
{
  return alen == blen && memcmp(a, b, alen) == 0;
}

static bool same_spec(const sched_task_spec *a, const sched_task_spec *b)
{
  if (!strref_eq(a->op.s, a->op.len, b->op.s, b->op.len)) return false;
  if (a->params_len != b->params_len || (a->params_len && memcmp(a->params, b->params, a->params_len) != 0))
    return false;
  if (a->ninputs != b->ninputs) return false;
  for (uint32_t j = 0; j < a->ninputs; j++)
    if (!strref_eq(a->inputs[j].s, a->inputs[j].len, b->inputs[j].s, b->inputs[j].len)) return false;
  return true;
}

/* Returns NULL when the existing task matches the spec, else what differs. */
static const char *differs_from_task(const sched_state *st, uint32_t id, const sched_task_spec *s)
{
  const sched_task *t = &st->tasks[id];
  if (sched_task_fused_parts(t) > 0) return sched_fused_differs(st, id, s);
  const char *op = st->ops[t->op].name;
  if (!strref_eq(op, strlen(op), s->op.s, s->op.len)) return "op";
  if (t->params_len != s->params_len || (s->params_len && memcmp(t->params, s->params, s->params_len) != 0))
    return "params";
  if (t->ndeps != s->ninputs) return "inputs";
  for (uint32_t j = 0; j < s->ninputs; j++) {
    const sched_task *d = &st->tasks[t->deps[j]];
    if (!strref_eq(d->key, d->key_len, s->inputs[j].s, s->inputs[j].len)) return "inputs";
  }
  return NULL;
}

/* Validation context of one sched_graph_add call. */
typedef struct admit {
  sched_state *st;
  uint32_t g;
  uint64_t graph_id;
  const sched_task_spec *specs;
  uint32_t n;
  uint32_t *local;   /* spec index -> task id */
  uint32_t *fresh;   /* the NEW task ids, in spec order */
  uint32_t nfresh;
  uint32_t nparts;   /* new tasks as submitted (nfresh before fusion) */
  uint32_t *spec_of; /* position in fresh -> spec index */
  uint32_t *hashes;  /* sched_key_hash of each spec's key */
  tsr_errbuf *err;
} admit;

static int create_task(admit *a, uint32_t i)
{
  sched_state *st = a->st;
  const sched_task_spec *s = &a->specs[i];
  sched_arena *arena = &st->graphs[a->g]->arena;
  int op = sched_op_intern(st, s->op.s, s->op.len);
  if (op < 0) return tsr_fail(a->err, op, "too many distinct op names (limit %d)", SCHED_MAX_OPS);
  char *key = sched_arena_alloc(arena, s->key.len + 1u, 1);
  uint8_t *params = s->params_len ? sched_arena_alloc(arena, s->params_len, 1) : NULL;
  uint32_t id = key && (params || !s->params_len) ? sched_task_alloc(st) : SCHED_NONE;
  if (id == SCHED_NONE) return tsr_fail(a->err, TSR_ENOMEM, "out of memory admitting task '%.*s'", (int)s->key.len, s->key.s);
  memcpy(key, s->key.s, s->key.len);
  key[s->key.len] = '\0';
  if (params) memcpy(params, s->params, s->params_len);
  sched_task *t = &st->tasks[id];
  t->key = key;
  t->key_len = (uint16_t)s->key.len;
  t->params = params;
  t->params_len = s->params_len;
  t->op = (uint16_t)op;
  t->graph = a->g;
  /* nbytes is unused while NEW: it holds the position in fresh, so a
   * duplicate of this key in the graph finds its first definition. */
  t->nbytes = a->nfresh;
  a->spec_of[a->nfresh] = i;
  a->fresh[a->nfresh++] = id;
  a->local[i] = id;
  if (sched_task_index_hashed(st, id, a->hashes[i]) != 0) {
    t->key = NULL;  /* not mapped: the rollback must not unmap it */
    return tsr_fail(a->err, TSR_ENOMEM, "out of memory admitting task '%s'", key);
  }
  return 0;
}

/* Defines spec i: a new task, a duplicate within the graph, or a share of
 * an existing task with the same definition. */
static int define_task(admit *a, uint32_t i)
{
  sched_state *st = a->st;
  const sched_task_spec *s = &a->specs[i];
  if (s->key.len == 0) return tsr_fail(a->err, TSR_EPROTO, "task %u has an empty key", i);
  uint32_t id = sched_task_find_hashed(st, s->key.s, s->key.len, a->hashes[i]);
  if (id == SCHED_NONE) return create_task(a, i);
  a->local[i] = id;
  if (st->tasks[id].state == TS_NEW) {
    if (!same_spec(&a->specs[a->spec_of[st->tasks[id].nbytes]], s))
      return tsr_fail(a->err, TSR_EEXIST, "key '%.*s' is defined twice in graph %llu with different definitions",
                      (int)s->key.len, s->key.s, (unsigned long long)a->graph_id);
    return 0;
  }
  const char *what = differs_from_task(st, id, s);
  if (what != NULL)
    return tsr_fail(a->err, TSR_EEXIST, "key '%.*s' already exists with a different definition (%s differ%s)",
                    (int)s->key.len, s->key.s, what, what[strlen(what) - 1] == 's' ? "" : "s");
  return 0;
}

static int check_ops(admit *a)
{
  sched_state *st = a->st;
  if (st->nworkers_alive == 0) return 0;
  for (uint32_t k = 0; k < a->nfresh; k++) {
    const sched_task *t = &st->tasks[a->fresh[k]];
    if (st->ops[t->op].nworkers == 0)
      return tsr_fail(a->err, TSR_EUNKNOWNOP, "unknown op '%s' in task '%s': no connected worker advertises it",
                      st->ops[t->op].name, t->key);
  }
  return 0;
}

static int link_inputs(admit *a)
{
  sched_state *st = a->st;
  sched_arena *arena = &st->graphs[a->g]->arena;
  for (uint32_t k = 0; k < a->nfresh; k++) {
    uint32_t id = a->fresh[k];
    const sched_task_spec *s = &a->specs[a->spec_of[k]];
    uint32_t *deps = s->ninputs ? sched_arena_alloc(arena, (size_t)s->ninputs * sizeof *deps, sizeof *deps) : NULL;
    if (s->ninputs && deps == NULL) return tsr_fail(a->err, TSR_ENOMEM, "out of memory linking task '%s'", st->tasks[id].key);
    for (uint32_t j = 0; j < s->ninputs; j++) {
      uint32_t d = sched_task_find(st, s->inputs[j].s, s->inputs[j].len);
      if (d == SCHED_NONE)
        return tsr_fail(a->err, TSR_EMISSING, "task '%s' depends on '%.*s', which is not defined", st->tasks[id].key,
                        (int)s->inputs[j].len, s->inputs[j].s);
      if (d == id) return tsr_fail(a->err, TSR_ECYCLE, "the graph has a cycle: task '%s' depends on itself", st->tasks[id].key);
      deps[j] = d;
    }
    st->tasks[id].deps = deps;
    st->tasks[id].ndeps = s->ninputs;
  }
  return 0;
}

/* Same-graph dependents: counted, laid out in one arena block, filled. */
static int link_dependents(admit *a)
{
  sched_state *st = a->st;
  uint64_t edges = 0;
  for (uint32_t k = 0; k < a->nfresh; k++) {
    const sched_task *t = &st->tasks[a->fresh[k]];
    for (uint32_t j = 0; j < t->ndeps; j++)
      if (st->tasks[t->deps[j]].state == TS_NEW) {
        st->tasks[t->deps[j]].ndependents++;
        edges++;
      }
  }
  if (edges == 0) return 0;
  sched_edge *block = sched_arena_alloc(&st->graphs[a->g]->arena, edges * sizeof *block, 8);
  if (block == NULL) return tsr_fail(a->err, TSR_ENOMEM, "out of memory linking graph %llu", (unsigned long long)a->graph_id);
  for (uint32_t k = 0; k < a->nfresh; k++) {
    sched_task *t = &st->tasks[a->fresh[k]];
    t->dependents = block;
    block += t->ndependents;
  }
  for (uint32_t k = 0; k < a->nfresh; k++) {
    uint32_t id = a->fresh[k];
    const sched_task *t = &st->tasks[id];
    for (uint32_t j = 0; j < t->ndeps; j++) {
      sched_task *d = &st->tasks[t->deps[j]];
      if (d->state == TS_NEW) ((sched_edge *)d->dependents)[d->nlive_dependents++] = (sched_edge){id, t->gen};
    }
  }
  return 0;
}

/* Walks back along unfinished inputs from a task Kahn could not finish
 * until it is inside a cycle, then names the cycle's keys. */
static int name_cycle(admit *a, uint32_t start)
{
  sched_state *st = a->st;
  uint32_t x = start;
  for (uint32_t step = 0; step < a->nfresh; step++) {
    const sched_task *t = &st->tasks[x];
    for (uint32_t j = 0; j < t->ndeps; j++) {
      const sched_task *d = &st->tasks[t->deps[j]];
      if (d->state == TS_NEW && d->nwaiting_deps > 0) {
        x = t->deps[j];
        break;
      }
    }
  }
  char names[400];
  size_t len = 0;
  uint32_t y = x, count = 0;
  do {
    if (len < sizeof names - 64)
      len += (size_t)snprintf(names + len, sizeof names - len, "%s'%.40s'", count ? " <- " : "", st->tasks[y].key);
    count++;
    const sched_task *t = &st->tasks[y];
    for (uint32_t j = 0; j < t->ndeps; j++) {
      const sched_task *d = &st->tasks[t->deps[j]];
      if (d->state == TS_NEW && d->nwaiting_deps > 0) {
        y = t->deps[j];
        break;
      }
    }
  } while (y != x && count <= a->nfresh);
  return tsr_fail(a->err, TSR_ECYCLE, "the graph has a cycle of %u tasks: %s%s", count, names,
                  len >= sizeof names - 64 ? " ..." : "");
}

static int check_cycles(admit *a)
{
  sched_state *st = a->st;
  uint32_t *queue = malloc((size_t)(a->nfresh ? a->nfresh : 1) * sizeof *queue);
  if (queue == NULL) return tsr_fail(a->err, TSR_ENOMEM, "out of memory checking graph %llu", (unsigned long long)a->graph_id);
  uint32_t head = 0, tail = 0;
  /* nwaiting_deps is free while NEW: it holds the unfinished-input count. */
  for (uint32_t k = 0; k < a->nfresh; k++) {
    sched_task *t = &st->tasks[a->fresh[k]];
    t->nwaiting_deps = 0;
    for (uint32_t j = 0; j < t->ndeps; j++) t->nwaiting_deps += st->tasks[t->deps[j]].state == TS_NEW;
    if (t->nwaiting_deps == 0) queue[tail++] = a->fresh[k];
  }
  while (head < tail) {
    const sched_task *t = &st->tasks[queue[head++]];
    for (uint32_t e = 0; e < t->ndependents; e++)
      if (--st->tasks[t->dependents[e].id].nwaiting_deps == 0) queue[tail++] = t->dependents[e].id;
  }
  free(queue);
  if (tail == a->nfresh) return 0;
  for (uint32_t k = 0; k < a->nfresh; k++)
    if (st->tasks[a->fresh[k]].nwaiting_deps > 0) return name_cycle(a, a->fresh[k]);
  return tsr_fail(a->err, TSR_ECYCLE, "the graph has a cycle");
}

/* The ids the client wants: the listed keys, or every task of the graph
 * that no other task of the graph uses as an input. */
static int resolve_wants(admit *a, const sched_strref *wants, uint32_t nwants, uint32_t **ids_p, uint32_t *n_p)
{
  sched_state *st = a->st;
  uint32_t cap = wants ? nwants : a->n;
  uint32_t *ids = malloc((size_t)(cap ? cap : 1) * sizeof *ids);
  if (ids == NULL) return tsr_fail(a->err, TSR_ENOMEM, "out of memory");
  uint32_t n = 0;
  if (wants != NULL) {
    for (uint32_t i = 0; i < nwants; i++) {
      uint32_t id = sched_task_find(st, wants[i].s, wants[i].len);
      if (id == SCHED_NONE) {
        free(ids);
        return tsr_fail(a->err, TSR_ENOTFOUND, "wanted key '%.*s' is not defined", (int)wants[i].len, wants[i].s);
      }
      ids[n++] = id;
    }
  } else {
    sched_idset used = {0};
    for (uint32_t i = 0; i < a->n; i++) {
      const sched_task *t = &st->tasks[a->local[i]];
      for (uint32_t j = 0; j < t->ndeps; j++)
        if (st->tasks[t->deps[j]].state != TS_NEW && sched_idset_add(&used, t->deps[j]) < 0) {
          sched_idset_free(&used);
          free(ids);
          return tsr_fail(a->err, TSR_ENOMEM, "out of memory");
        }
    }
    for (uint32_t i = 0; i < a->n; i++) {
      uint32_t id = a->local[i];
      const sched_task *t = &st->tasks[id];
      bool sink = t->state == TS_NEW ? t->ndependents == 0 : !sched_idset_has(&used, id);
      if (sink) ids[n++] = id;
    }
    sched_idset_free(&used);
  }
  *ids_p = ids;
  *n_p = n;
  return 0;
}

/* Everything validated: reply `submitted`, link to existing inputs,
 * order, want, admit. */
static void commit(admit *a, uint32_t client, const uint32_t *want_ids, uint32_t nwant, uint32_t *order)
{
  sched_state *st = a->st;
  sched_graph *gr = st->graphs[a->g];
  gr->ntasks = a->nparts;  /* fused tasks count by their parts */
  for (uint32_t k = 0; k < a->nfresh; k++) {
    uint32_t id = a->fresh[k];
    const sched_task *t = &st->tasks[id];
    for (uint32_t j = 0; j < t->ndeps; j++)
      if (st->tasks[t->deps[j]].state != TS_NEW && sched_task_add_dependent(st, t->deps[j], id) != 0)
        TSR_ERROR("out of memory linking task '%s' to its input", t->key);
  }
  /* The client hears `submitted` before any key_done of this graph. */
  if (client != SCHED_NONE) {
    tsr_wbuf *wb = sched_out(st, st->clients[client].peer);
    tsr_wbuf_begin(wb, "submitted", 3);
    tsr_pack_kv_uint(&wb->pk, "graph", a->graph_id);
    tsr_pack_kv_uint(&wb->pk, "tasks", a->nparts);
  }
  sched_policy_order(st, a->fresh, a->nfresh, st->next_priority, order);
  st->next_priority += a->nfresh;
  for (uint32_t k = 0; k < a->nfresh; k++) st->tasks[a->fresh[k]].nbytes = 0;
  for (uint32_t i = 0; i < nwant; i++) {
    uint32_t id = want_ids[i];
    if (client == SCHED_NONE) break;
    sched_tr_want(st, client, id);
    /* Already done before this graph: tell this client now (later state
     * changes notify every wanting client by themselves). */
    if (st->tasks[id].state == TS_MEMORY) sched_notify_done(st, id, client);
    else if (st->tasks[id].state == TS_ERRED) sched_notify_erred(st, id, client);
  }
  sched_progress_admit(st, a->g, a->fresh, a->nfresh);
  for (uint32_t k = 0; k < a->nfresh; k++) sched_tr_admit(st, order[k]);
  sched_settle(st);
  sched_progress_admitted(st, a->g);
}

static void rollback(admit *a)
{
  for (uint32_t k = a->nfresh; k-- > 0;) sched_tr_discard_new(a->st, a->fresh[k]);
  sched_graph_free(a->st, a->g);
}

int sched_graph_add(sched_state *st, uint32_t client, uint64_t graph_id, const sched_task_spec *specs, uint32_t n,
                    const sched_strref *wants, uint32_t nwants, tsr_errbuf *err)
{
  if (client != SCHED_NONE && sched_graph_find(st, client, graph_id) != SCHED_NONE)
    return tsr_fail(err, TSR_EEXIST, "graph %llu was already submitted by this client", (unsigned long long)graph_id);
  admit a = {.st = st, .graph_id = graph_id, .specs = specs, .n = n, .err = err};
  a.g = sched_graph_new(st, client, graph_id, client != SCHED_NONE ? st->clients[client].name : "");
  if (a.g == SCHED_NONE) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  st->graphs[a.g]->pinned = true;
  size_t sz = (size_t)(n ? n : 1) * sizeof(uint32_t);
  a.local = malloc(sz);
  a.fresh = malloc(sz);
  a.spec_of = malloc(sz);
  a.hashes = malloc(sz);
  uint32_t *want_ids = NULL, nwant = 0;
  int rc = a.local && a.fresh && a.spec_of && a.hashes ? 0 : tsr_fail(err, TSR_ENOMEM, "out of memory");
  if (rc == 0) rc = sched_keyidx_reserve(st, (uint64_t)st->keyidx.count + n);
  if (rc == 0 && sched_grow((void **)&st->tasks, &st->cap_tasks, st->ntasks + n, sizeof *st->tasks) != 0)
    rc = tsr_fail(err, TSR_ENOMEM, "out of memory for %u tasks", n);
  for (uint32_t i = 0; rc == 0 && i < n; i++) a.hashes[i] = sched_key_hash(specs[i].key.s, specs[i].key.len);
  /* An index slot is a cache miss per key at 10^6 tasks: fetch ahead. */
  for (uint32_t i = 0; rc == 0 && i < n; i++) {
    if (i + 16 < n) sched_key_prefetch(st, a.hashes[i + 16]);
    rc = define_task(&a, i);
  }
  if (rc == 0) rc = check_ops(&a);
  if (rc == 0) rc = link_inputs(&a);
  if (rc == 0) rc = link_dependents(&a);
  if (rc == 0) rc = check_cycles(&a);
  if (rc == 0) rc = resolve_wants(&a, wants, nwants, &want_ids, &nwant);
  a.nparts = a.nfresh;
  if (rc == 0) a.nfresh = (uint32_t)sched_fuse_graph(st, a.g, a.fresh, a.nfresh, want_ids, nwant);
  if (rc == 0) {
    uint32_t *order = malloc(sz);
    if (order == NULL) rc = tsr_fail(err, TSR_ENOMEM, "out of memory");
    else commit(&a, client, want_ids, nwant, order);
    free(order);
  }
  if (rc != 0) rollback(&a);
  else {
    st->graphs[a.g]->pinned = false;
    if (st->graphs[a.g]->ntasks == 0) sched_graph_free(st, a.g);
    rc = (int)a.nparts;
  }
  free(want_ids);
  free(a.local);
  free(a.fresh);
  free(a.spec_of);
  free(a.hashes);
  return rc;
}
