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
 * and per input, one arena per graph for keys, params and edge lists.
 *
 * Admission in slices (issue 13): a graph of millions of tasks would hold
 * the event loop for seconds (longer than the heartbeat timeout at 10^7),
 * so each step above is a phase with a cursor, and sched_admit_run() does
 * a few milliseconds of it per loop iteration, the graphs in arrival
 * order; heartbeats, completions and other clients are served in between.
 * What that interleaving must not break:
 * - the graph's NEW tasks are in the key index from the moment they are
 *   defined: another graph that meets one (defines it, uses it as an input
 *   or wants it) is rolled back and queued behind this one (a conflict);
 * - an existing task this graph shares or uses must keep its id until the
 *   graph links to it: while any admission runs, records that would be
 *   forgotten are kept and re-examined when the last one ends;
 * - tasks enter the state machine in slices, consumers first (the
 *   priority order backwards): a task is needed by its consumer from the
 *   moment it is admitted, so no task is released (or its result freed)
 *   because its consumer is not admitted yet, and a consumer counts its
 *   inputs that are still NEW as missing;
 * - a client that leaves mid-way: before acceptance its tasks are
 *   discarded (in slices), after it the graph is admitted for nobody and
 *   released by the usual rules. */
#include "progress.h"
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#include "journal.h"

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

/* Internal only, never sent: the graph met a task another admission has
 * not finished defining; it is rolled back and queued behind it. */
#define SCHED_ECONFLICT (-1000)
/* Work per step between two looks at the clock: a task counts 1 plus its
 * input edges (a fan-in of 100,000 inputs is a long step by itself). */
#define ADMIT_CHUNK 4096u

enum {
  PH_DECODE, PH_PREP, PH_HASH, PH_DEFINE, PH_OPS, PH_INPUTS, PH_DEPCOUNT, PH_DEPLAYOUT, PH_DEPFILL, PH_CYCINIT, PH_CYCRUN,
  PH_CYCEND, PH_WANTS, PH_USED, PH_SINKS, PH_FUSE, PH_LINKOLD, PH_ORDER, PH_CLEAR, PH_WANT, PH_ADMIT,
  PH_ROLLBACK, PH_DONE
};
static const char *const phase_names[] = {
  "decode parts", "prepare", "hash keys", "define tasks", "check ops", "link inputs", "count dependents", "lay out dependents",
  "link dependents", "cycle check", "cycle check", "cycle check", "wanted keys", "wanted keys", "wanted keys",
  "fusion", "link existing inputs", "order", "order", "register wants", "admit", "roll back", "done"};

/* One graph's admission: the validation context, the phase it is in and
 * the cursor in that phase, and (when queued by sched_admit_start) the
 * decoded parts it owns. */
typedef struct sched_admission {
  struct sched_admission *next;
  sched_state *st;
  uint32_t client;   /* SCHED_NONE once it left (or for the journal's graphs) */
  uint32_t g;
  uint64_t graph_id;
  const sched_task_spec *specs;
  uint32_t n;
  const sched_strref *wants;
  uint32_t nwants;
  bool wants_given;
  uint32_t *local;   /* spec index -> task id */
  uint32_t *fresh;   /* the NEW task ids, in spec order */
  uint32_t nfresh;
  uint32_t nparts;   /* new tasks as submitted (nfresh before fusion) */
  uint32_t *spec_of; /* position in fresh -> spec index */
  uint32_t *hashes;  /* sched_key_hash of each spec's key */
  uint32_t *want_ids, nwant;
  uint32_t *order;   /* Kahn's queue during the cycle check, then the admission order */
  uint32_t qhead, qtail;
  sched_idset used;  /* existing tasks the graph uses (the sinks without `wants`) */
  sched_edge *block; /* the same-graph dependents being laid out */
  sched_fusion *fusion; /* the fusion pass under way, or NULL */
  int phase;
  uint32_t cur;      /* position in the phase */
  uint64_t work;     /* of this step: tasks + the edges they visited */
  int rc;            /* the validation's result; SCHED_ECONFLICT */
  bool accepted;     /* past validation: only admission is left */
  bool queued;       /* owns pd and last; replies and journals itself */
  uint64_t t0_us;
  sched_pending pd;  /* the kept and decoded parts, the last one last */
  tsr_errbuf own_err;
  tsr_errbuf *err;
} sched_admission;

/* A task found by key that another admission is still defining. */
static bool foreign_new(const sched_admission *a, uint32_t id)
{
  return a->st->tasks[id].state == TS_NEW && a->st->tasks[id].graph != a->g;
}

static int create_task(sched_admission *a, uint32_t i)
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
static int define_task(sched_admission *a, uint32_t i)
{
  sched_state *st = a->st;
  const sched_task_spec *s = &a->specs[i];
  if (s->key.len == 0) return tsr_fail(a->err, TSR_EPROTO, "task %u has an empty key", i);
  uint32_t id = sched_task_find_hashed(st, s->key.s, s->key.len, a->hashes[i]);
  if (id == SCHED_NONE) return create_task(a, i);
  if (foreign_new(a, id)) return SCHED_ECONFLICT;
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

static int check_op(sched_admission *a, uint32_t k)
{
  sched_state *st = a->st;
  const sched_task *t = &st->tasks[a->fresh[k]];
  if (st->nworkers_alive == 0 || st->ops[t->op].nworkers > 0) return 0;
  return tsr_fail(a->err, TSR_EUNKNOWNOP, "unknown op '%s' in task '%s': no connected worker advertises it",
                  st->ops[t->op].name, t->key);
}

static int link_inputs(sched_admission *a, uint32_t k)
{
  sched_state *st = a->st;
  uint32_t id = a->fresh[k];
  const sched_task_spec *s = &a->specs[a->spec_of[k]];
  uint32_t *deps = s->ninputs ? sched_arena_alloc(&st->graphs[a->g]->arena, (size_t)s->ninputs * sizeof *deps, sizeof *deps) : NULL;
  if (s->ninputs && deps == NULL) return tsr_fail(a->err, TSR_ENOMEM, "out of memory linking task '%s'", st->tasks[id].key);
  for (uint32_t j = 0; j < s->ninputs; j++) {
    uint32_t d = sched_task_find(st, s->inputs[j].s, s->inputs[j].len);
    if (d == SCHED_NONE)
      return tsr_fail(a->err, TSR_EMISSING, "task '%s' depends on '%.*s', which is not defined", st->tasks[id].key,
                      (int)s->inputs[j].len, s->inputs[j].s);
    if (foreign_new(a, d)) return SCHED_ECONFLICT;
    if (d == id) return tsr_fail(a->err, TSR_ECYCLE, "the graph has a cycle: task '%s' depends on itself", st->tasks[id].key);
    deps[j] = d;
  }
  st->tasks[id].deps = deps;
  st->tasks[id].ndeps = s->ninputs;
  a->work += s->ninputs;
  return 0;
}

/* Same-graph dependents: counted, laid out in one arena block, filled. */
static void count_dependents(sched_admission *a, uint32_t k)
{
  sched_state *st = a->st;
  const sched_task *t = &st->tasks[a->fresh[k]];
  for (uint32_t j = 0; j < t->ndeps; j++)
    if (st->tasks[t->deps[j]].state == TS_NEW) st->tasks[t->deps[j]].ndependents++;
  a->work += t->ndeps;
}

static int alloc_dependents(sched_admission *a)
{
  sched_state *st = a->st;
  uint64_t edges = 0;
  for (uint32_t k = 0; k < a->nfresh; k++) edges += st->tasks[a->fresh[k]].ndependents;
  if (edges == 0) return 0;
  a->block = sched_arena_alloc(&st->graphs[a->g]->arena, edges * sizeof *a->block, 8);
  if (a->block == NULL) return tsr_fail(a->err, TSR_ENOMEM, "out of memory linking graph %llu", (unsigned long long)a->graph_id);
  for (uint32_t k = 0; k < a->nfresh; k++) {
    sched_task *t = &st->tasks[a->fresh[k]];
    t->dependents = a->block;
    a->block += t->ndependents;
  }
  return 0;
}

static void fill_dependents(sched_admission *a, uint32_t k)
{
  sched_state *st = a->st;
  uint32_t id = a->fresh[k];
  const sched_task *t = &st->tasks[id];
  for (uint32_t j = 0; j < t->ndeps; j++) {
    sched_task *d = &st->tasks[t->deps[j]];
    if (d->state == TS_NEW) ((sched_edge *)d->dependents)[d->nlive_dependents++] = (sched_edge){id, t->gen};
  }
  a->work += t->ndeps;
}

/* Walks back along unfinished inputs from a task Kahn could not finish
 * until it is inside a cycle, then names the cycle's keys. */
static const sched_task *unfinished_input(const sched_state *st, uint32_t *x)
{
  const sched_task *t = &st->tasks[*x];
  for (uint32_t j = 0; j < t->ndeps; j++) {
    const sched_task *d = &st->tasks[t->deps[j]];
    if (d->state == TS_NEW && d->nwaiting_deps > 0) {
      *x = t->deps[j];
      return d;
    }
  }
  return NULL;
}

static int name_cycle(sched_admission *a, uint32_t start)
{
  sched_state *st = a->st;
  uint32_t x = start;
  for (uint32_t step = 0; step < a->nfresh; step++) unfinished_input(st, &x);
  char names[400];
  size_t len = 0;
  uint32_t y = x, count = 0;
  do {
    if (len < sizeof names - 64)
      len += (size_t)snprintf(names + len, sizeof names - len, "%s'%.40s'", count ? " <- " : "", st->tasks[y].key);
    count++;
    unfinished_input(st, &y);
  } while (y != x && count <= a->nfresh);
  return tsr_fail(a->err, TSR_ECYCLE, "the graph has a cycle of %u tasks: %s%s", count, names,
                  len >= sizeof names - 64 ? " ..." : "");
}

/* Kahn's algorithm; nwaiting_deps is free while NEW: it holds the
 * unfinished-input count. */
static void cycle_init(sched_admission *a, uint32_t k)
{
  sched_state *st = a->st;
  sched_task *t = &st->tasks[a->fresh[k]];
  t->nwaiting_deps = 0;
  for (uint32_t j = 0; j < t->ndeps; j++) t->nwaiting_deps += st->tasks[t->deps[j]].state == TS_NEW;
  if (t->nwaiting_deps == 0) a->order[a->qtail++] = a->fresh[k];
  a->work += t->ndeps;
}

static void cycle_pop(sched_admission *a)
{
  sched_state *st = a->st;
  const sched_task *t = &st->tasks[a->order[a->qhead++]];
  for (uint32_t e = 0; e < t->ndependents; e++)
    if (--st->tasks[t->dependents[e].id].nwaiting_deps == 0) a->order[a->qtail++] = t->dependents[e].id;
  a->work += 1 + t->ndependents;
}

static int cycle_end(sched_admission *a)
{
  if (a->qtail == a->nfresh) return 0;
  for (uint32_t k = 0; k < a->nfresh; k++)
    if (a->st->tasks[a->fresh[k]].nwaiting_deps > 0) return name_cycle(a, a->fresh[k]);
  return tsr_fail(a->err, TSR_ECYCLE, "the graph has a cycle");
}

/* The ids the client wants: the listed keys, or every task of the graph
 * that no other task of the graph uses as an input. */
static int want_listed(sched_admission *a, uint32_t i)
{
  uint32_t id = sched_task_find(a->st, a->wants[i].s, a->wants[i].len);
  if (id == SCHED_NONE)
    return tsr_fail(a->err, TSR_ENOTFOUND, "wanted key '%.*s' is not defined", (int)a->wants[i].len, a->wants[i].s);
  if (foreign_new(a, id)) return SCHED_ECONFLICT;
  a->want_ids[a->nwant++] = id;
  return 0;
}

static int note_used(sched_admission *a, uint32_t i)
{
  const sched_task *t = &a->st->tasks[a->local[i]];
  for (uint32_t j = 0; j < t->ndeps; j++)
    if (a->st->tasks[t->deps[j]].state != TS_NEW && sched_idset_add(&a->used, t->deps[j]) < 0)
      return tsr_fail(a->err, TSR_ENOMEM, "out of memory");
  a->work += t->ndeps;
  return 0;
}

static void want_sink(sched_admission *a, uint32_t i)
{
  uint32_t id = a->local[i];
  const sched_task *t = &a->st->tasks[id];
  bool sink = t->state == TS_NEW ? t->ndependents == 0 : !sched_idset_has(&a->used, id);
  if (sink) a->want_ids[a->nwant++] = id;
}

/* Accepted: link the new tasks to the existing inputs (whose records they
 * keep from now on). */
static void link_existing(sched_admission *a, uint32_t k)
{
  sched_state *st = a->st;
  uint32_t id = a->fresh[k];
  const sched_task *t = &st->tasks[id];
  for (uint32_t j = 0; j < t->ndeps; j++)
    if (st->tasks[t->deps[j]].state != TS_NEW && sched_task_add_dependent(st, t->deps[j], id) != 0)
      TSR_ERROR("out of memory linking task '%s' to its input", t->key);
  a->work += t->ndeps;
}

/* The client hears `submitted` before any key_done of this graph. */
static void reply_submitted(sched_admission *a)
{
  sched_state *st = a->st;
  st->graphs[a->g]->ntasks = a->nparts;  /* fused tasks count by their parts */
  if (a->client == SCHED_NONE) return;
  /* write-ahead: the graph is in the journal before its first task runs
   * (a graph admitted at once is journaled by its caller, after) */
  if (a->queued) sched_journal_pending(st, a->client, &a->pd);
  tsr_wbuf *wb = sched_out(st, st->clients[a->client].peer);
  tsr_wbuf_begin(wb, "submitted", 3);
  tsr_pack_kv_uint(&wb->pk, "graph", a->graph_id);
  tsr_pack_kv_uint(&wb->pk, "tasks", a->nparts);
}

static void register_want(sched_admission *a, uint32_t i)
{
  sched_state *st = a->st;
  uint32_t id = a->want_ids[i];
  if (a->client == SCHED_NONE) return;
  sched_tr_want(st, a->client, id);
  /* Already done before this graph: tell this client now (later state
   * changes notify every wanting client by themselves). */
  if (st->tasks[id].state == TS_MEMORY) sched_notify_done(st, id, a->client);
  else if (st->tasks[id].state == TS_ERRED) sched_notify_erred(st, id, a->client);
}

static int prepare(sched_admission *a)
{
  sched_state *st = a->st;
  size_t sz = (size_t)(a->n ? a->n : 1) * sizeof(uint32_t);
  a->local = malloc(sz);
  a->fresh = malloc(sz);
  a->spec_of = malloc(sz);
  a->hashes = malloc(sz);
  a->order = malloc(sz);
  a->want_ids = malloc((size_t)((a->wants_given ? a->nwants : a->n) + 1) * sizeof(uint32_t));
  if (!a->local || !a->fresh || !a->spec_of || !a->hashes || !a->order || !a->want_ids)
    return tsr_fail(a->err, TSR_ENOMEM, "out of memory");
  int rc = sched_keyidx_reserve(st, (uint64_t)st->keyidx.count + a->n);
  if (rc == 0 && sched_grow((void **)&st->tasks, &st->cap_tasks, st->ntasks + a->n, sizeof *st->tasks) != 0)
    rc = tsr_fail(a->err, TSR_ENOMEM, "out of memory for %u tasks", a->n);
  return rc;
}

/* Runs fn over the next chunk of [cur, end), stopping at an error. When
 * the range is done, moves to phase next. */
typedef int (*item_fn)(sched_admission *a, uint32_t i);

static int over_range(sched_admission *a, uint32_t end, item_fn fn, int next)
{
  int rc = 0;
  for (a->work = 0; rc == 0 && a->cur < end && a->work < ADMIT_CHUNK; a->cur++, a->work++) rc = fn(a, a->cur);
  if (rc == 0 && a->cur == end) {
    a->phase = next;
    a->cur = 0;
  }
  return rc;
}

static int hash_key(sched_admission *a, uint32_t i)
{
  a->hashes[i] = sched_key_hash(a->specs[i].key.s, a->specs[i].key.len);
  return 0;
}

static int define_prefetched(sched_admission *a, uint32_t i)
{
  /* An index slot is a cache miss per key at 10^6 tasks: fetch ahead. */
  if (i + 16 < a->n) sched_key_prefetch(a->st, a->hashes[i + 16]);
  return define_task(a, i);
}

static int count_dependents_fn(sched_admission *a, uint32_t k) { count_dependents(a, k); return 0; }
static int fill_dependents_fn(sched_admission *a, uint32_t k) { fill_dependents(a, k); return 0; }
static int cycle_init_fn(sched_admission *a, uint32_t k) { cycle_init(a, k); return 0; }
static int want_sink_fn(sched_admission *a, uint32_t i) { want_sink(a, i); return 0; }
static int link_existing_fn(sched_admission *a, uint32_t k) { link_existing(a, k); return 0; }
static int register_want_fn(sched_admission *a, uint32_t i) { register_want(a, i); return 0; }

/* nbytes held the position in fresh while NEW. */
static int clear_new(sched_admission *a, uint32_t k)
{
  a->st->tasks[a->fresh[k]].nbytes = 0;
  return 0;
}

/* Consumers first (the admission order backwards): a task admitted counts
 * as needed by its NEW inputs at once, so no input is released for want
 * of a consumer that is not admitted yet; a task whose input is still NEW
 * counts it as missing. */
static int admit_one(sched_admission *a, uint32_t k)
{
  uint32_t id = a->order[a->nfresh - 1 - k];
  sched_tr_admit(a->st, id);
  a->work += a->st->tasks[id].ndeps;
  return 0;
}

static int discard_new(sched_admission *a, uint32_t k)
{
  /* newest first, as the ids were taken */
  sched_tr_discard_new(a->st, a->fresh[a->nfresh - 1 - k]);
  return 0;
}

/* Validation is over: the graph is accepted, fusion runs a step at a
 * time, and nothing is rolled back from here. */
static void fuse_some(sched_admission *a)
{
  if (!a->accepted) {
    a->nparts = a->nfresh;
    a->accepted = true;
    sched_fusion_start(a->st, a->g, a->fresh, a->nfresh, a->want_ids, a->nwant, &a->fusion);
    if (a->fusion != NULL) return;
  } else if (!sched_fusion_step(a->fusion, ADMIT_CHUNK)) {
    return;
  } else {
    a->nfresh = sched_fusion_end(&a->fusion);
  }
  a->phase = PH_LINKOLD;
  a->cur = 0;
}

/* The phases that are one step each (linear too, but short or not
 * divisible here: fusion and ordering walk the graph as a whole). */
static int single_step(sched_admission *a)
{
  sched_state *st = a->st;
  int rc = 0;
  switch (a->phase) {
  case PH_PREP: rc = prepare(a); a->phase = PH_HASH; break;
  case PH_DEPLAYOUT: rc = alloc_dependents(a); a->phase = PH_DEPFILL; break;
  case PH_CYCEND: rc = cycle_end(a); a->phase = a->wants_given ? PH_WANTS : PH_USED; break;
  case PH_ORDER:
    reply_submitted(a);
    sched_policy_order(st, a->fresh, a->nfresh, st->next_priority, a->order);
    st->next_priority += a->nfresh;
    a->phase = PH_CLEAR;
    break;
  default: break;
  }
  return rc;
}

/* The parts not decoded when the last one came, a slice at a time; then
 * the specs are final. */
static int decode_some(sched_admission *a)
{
  sched_decoded *d = &a->pd.dec;
  int rc = sched_pending_decode(a->st, &a->pd, a->client, ADMIT_CHUNK, a->err);
  if (rc != 0 || a->pd.ndecoded < a->pd.nparts) return rc;
  sched_decoded_resolve(d);
  a->specs = d->specs;
  a->n = d->nspecs;
  a->wants_given = d->wants_given;
  a->wants = d->wants_given ? d->wants : NULL;
  a->nwants = d->nwants;
  a->phase = PH_PREP;
  return 0;
}

static int step(sched_admission *a)
{
  switch (a->phase) {
  case PH_DECODE: return decode_some(a);
  case PH_HASH: return over_range(a, a->n, hash_key, PH_DEFINE);
  case PH_DEFINE: return over_range(a, a->n, define_prefetched, PH_OPS);
  case PH_OPS: return over_range(a, a->nfresh, check_op, PH_INPUTS);
  case PH_INPUTS: return over_range(a, a->nfresh, link_inputs, PH_DEPCOUNT);
  case PH_DEPCOUNT: return over_range(a, a->nfresh, count_dependents_fn, PH_DEPLAYOUT);
  case PH_DEPFILL: return over_range(a, a->nfresh, fill_dependents_fn, PH_CYCINIT);
  case PH_CYCINIT: return over_range(a, a->nfresh, cycle_init_fn, PH_CYCRUN);
  case PH_CYCRUN:
    for (a->work = 0; a->work < ADMIT_CHUNK && a->qhead < a->qtail;) cycle_pop(a);
    if (a->qhead == a->qtail) a->phase = PH_CYCEND;
    return 0;
  case PH_WANTS: return over_range(a, a->nwants, want_listed, PH_FUSE);
  case PH_USED: return over_range(a, a->n, note_used, PH_SINKS);
  case PH_SINKS: return over_range(a, a->n, want_sink_fn, PH_FUSE);
  case PH_FUSE: fuse_some(a); return 0;
  case PH_LINKOLD: return over_range(a, a->nfresh, link_existing_fn, PH_ORDER);
  case PH_CLEAR: return over_range(a, a->nfresh, clear_new, PH_WANT);
  case PH_WANT: return over_range(a, a->nwant, register_want_fn, PH_ADMIT);
  case PH_ADMIT: {
    if (a->cur == 0) sched_progress_admit(a->st, a->g, a->fresh, a->nfresh);
    int rc = over_range(a, a->nfresh, admit_one, PH_DONE);
    sched_settle(a->st);
    return rc;
  }
  case PH_ROLLBACK: return over_range(a, a->nfresh, discard_new, PH_DONE);
  default: return single_step(a);
  }
}

/* An error during validation: undo what was defined, a slice at a time. */
static void fail(sched_admission *a, int rc)
{
  a->rc = rc;
  a->phase = PH_ROLLBACK;
  a->cur = 0;
}

/* Works on a until it is done or the clock passes deadline_us (0: none). */
static void advance(sched_admission *a, uint64_t deadline_us)
{
  sched_state *st = a->st;
  uint64_t t = tsr_now_us();
  while (a->phase != PH_DONE) {
    int phase = a->phase;
    int rc = step(a);
    if (rc != 0 && !a->accepted) fail(a, rc);
    uint64_t after = tsr_now_us();
    if (after - t > st->adm_slowest_us) {
      st->adm_slowest_us = after - t;
      st->adm_slowest_phase = phase_names[phase];
    }
    t = after;
    if (deadline_us != 0 && after >= deadline_us) return;
  }
}

static int admission_new(sched_state *st, uint32_t client, uint64_t graph_id, tsr_errbuf *err, sched_admission **a_p)
{
  if (client != SCHED_NONE && sched_graph_find(st, client, graph_id) != SCHED_NONE)
    return tsr_fail(err, TSR_EEXIST, "graph %llu was already submitted by this client", (unsigned long long)graph_id);
  sched_admission *a = calloc(1, sizeof *a);
  uint32_t g = a ? sched_graph_new(st, client, graph_id, client != SCHED_NONE ? st->clients[client].name : "") : SCHED_NONE;
  if (g == SCHED_NONE) {
    free(a);
    return tsr_fail(err, TSR_ENOMEM, "out of memory");
  }
  st->graphs[g]->pinned = true;
  a->st = st;
  a->client = client;
  a->g = g;
  a->graph_id = graph_id;
  a->err = err;
  a->t0_us = tsr_now_us();
  *a_p = a;
  return 0;
}

/* The graph's final count (the new tasks) or its error; frees a. */
static int admission_end(sched_admission *a)
{
  sched_state *st = a->st;
  int rc = a->rc;
  if (rc == 0) {
    st->graphs[a->g]->pinned = false;
    if (st->graphs[a->g]->ntasks == 0) sched_graph_free(st, a->g);
    else sched_progress_admitted(st, a->g);
    rc = (int)a->nparts;
  } else {
    sched_graph_free(st, a->g);
  }
  if (a->fusion != NULL) sched_fusion_end(&a->fusion);
  free(a->want_ids);
  free(a->local);
  free(a->fresh);
  free(a->spec_of);
  free(a->hashes);
  free(a->order);
  sched_idset_free(&a->used);
  if (a->queued) sched_pending_free(&a->pd);
  free(a);
  return rc;
}

int sched_graph_add(sched_state *st, uint32_t client, uint64_t graph_id, const sched_task_spec *specs, uint32_t n,
                    const sched_strref *wants, uint32_t nwants, tsr_errbuf *err)
{
  sched_admission *a = NULL;
  int rc = admission_new(st, client, graph_id, err, &a);
  if (rc != 0) return rc;
  a->specs = specs;
  a->n = n;
  a->wants = wants;
  a->nwants = nwants;
  a->wants_given = wants != NULL;
  a->phase = PH_PREP;
  advance(a, 0);
  return admission_end(a);
}

/* ---------- admissions queued across loop iterations ---------- */

static void reply_error(sched_admission *a)
{
  sched_state *st = a->st;
  if (a->client == SCHED_NONE) return;
  TSR_WARN("rejected graph %llu from client '%s': %s: %s", (unsigned long long)a->graph_id, st->clients[a->client].name,
           tsr_err_name(a->rc), a->err->text);
  tsr_wbuf *wb = sched_out(st, st->clients[a->client].peer);
  tsr_wbuf_begin(wb, "submit_error", 4);
  tsr_pack_kv_uint(&wb->pk, "graph", a->graph_id);
  tsr_pack_kv_int(&wb->pk, "code", a->rc);
  tsr_pack_kv_str(&wb->pk, "message", a->err->text);
}

/* The first admission is done: reply or journal it, log, free it; when it
 * was the last, re-examine the records kept while admissions ran. */
static void finish_first(sched_state *st)
{
  sched_admission *a = st->adm_first;
  st->adm_first = a->next;
  if (st->adm_first == NULL) st->adm_last = NULL;
  if (a->rc != 0) reply_error(a);
  uint32_t client = a->client;
  uint64_t graph = a->graph_id, t0 = a->t0_us;
  bool ok = a->rc == 0;
  int rc = admission_end(a);
  if (ok && client != SCHED_NONE)
    TSR_INFO("client '%s' submitted graph %llu: %d new tasks, admitted in %.3f s in slices (%u tasks in the scheduler)",
             st->clients[client].name, (unsigned long long)graph, rc, (double)(tsr_now_us() - t0) / 1e6, st->nlive);
  if (st->adm_first != NULL) return;
  for (uint32_t i = 0; i < st->nforget_later; i++)
    if (st->forget_later[i] < st->ntasks) sched_recheck(st, st->forget_later[i]);
  st->nforget_later = 0;
  sched_settle(st);
}

static void enqueue(sched_state *st, sched_admission *a)
{
  if (st->adm_last != NULL) st->adm_last->next = a;
  else st->adm_first = a;
  st->adm_last = a;
}

void sched_journal_pending(sched_state *st, uint32_t client, const sched_pending *pd)
{
  if (pd->nparts == 0) return;
  sched_pending head = *pd;
  head.nparts--;
  const sched_pending_part *last = &pd->parts[pd->nparts - 1];
  sched_journal_submit(st, client, pd->graph_id, &head, last->bytes, last->len);
}

int sched_admit_start(sched_state *st, uint32_t client, sched_pending *pd, uint32_t last_tasks, bool *queued_p,
                      tsr_errbuf *err)
{
  sched_decoded *d = &pd->dec;
  *queued_p = false;
  if (pd->nparts - pd->ndecoded <= 1 && (uint64_t)d->nspecs + last_tasks <= SCHED_ADMIT_NOW) {
    /* small: at once, unless it meets a graph still being admitted */
    int rc = sched_pending_decode(st, pd, client, UINT32_MAX, err);
    if (rc != 0) return rc;
    sched_decoded_resolve(d);
    rc = sched_graph_add(st, client, pd->graph_id, d->specs, d->nspecs, d->wants_given ? d->wants : NULL, d->nwants, err);
    if (rc != SCHED_ECONFLICT) return rc;
  }
  sched_admission *a = NULL;
  int rc = admission_new(st, client, pd->graph_id, err, &a);
  if (rc != 0) return rc;
  a->queued = true;
  a->pd = *pd;
  memset(pd, 0, sizeof *pd);
  a->err = &a->own_err;
  a->phase = PH_DECODE;
  enqueue(st, a);
  *queued_p = true;
  return 0;
}

const char *sched_admit_phase(const sched_state *st)
{
  return st->adm_slowest_phase != NULL ? st->adm_slowest_phase : "idle";
}

/* Decodes the kept parts of graphs whose last part has not come, so that
 * little is left when it does; returns true when time ran out first. */
static bool decode_pending(sched_state *st, uint64_t deadline)
{
  if (!st->decode_wanted) return false;
  for (uint32_t c = 0; c < st->nclients_slots; c++) {
    sched_client *cl = &st->clients[c];
    for (uint32_t k = 0; cl->alive && k < cl->npending; k++) {
      sched_pending *pd = &cl->pending[k];
      while (!pd->failed && pd->ndecoded < pd->nparts) {
        tsr_errbuf err;
        uint64_t t = tsr_now_us();
        int rc = sched_pending_decode(st, pd, c, ADMIT_CHUNK, &err);
        if (rc != 0) sched_pending_fail(pd, rc, err.text);
        uint64_t after = tsr_now_us();
        if (after - t > st->adm_slowest_us) {
          st->adm_slowest_us = after - t;
          st->adm_slowest_phase = "decode parts";
        }
        if (after >= deadline) return true;
      }
    }
  }
  st->decode_wanted = false;
  return false;
}

bool sched_admit_run(sched_state *st, uint64_t budget_us)
{
  uint64_t deadline = tsr_now_us() + budget_us;
  st->adm_slowest_us = 0;
  st->adm_slowest_phase = NULL;
  if (decode_pending(st, deadline)) return true;
  while (st->adm_first != NULL) {
    sched_admission *a = st->adm_first;
    advance(a, deadline);
    if (a->phase == PH_DONE) {
      if (a->rc == SCHED_ECONFLICT) {
        /* only graphs admitted at once conflict: the first one never does */
        a->rc = tsr_fail(a->err, TSR_EINTERNAL, "graph %llu conflicted with itself", (unsigned long long)a->graph_id);
      }
      finish_first(st);
    }
    if (tsr_now_us() >= deadline) break;
  }
  return st->adm_first != NULL;
}

void sched_admit_client_gone(sched_state *st, uint32_t client)
{
  for (sched_admission *a = st->adm_first; a != NULL; a = a->next) {
    if (a->client != client) continue;
    a->client = SCHED_NONE;
    /* not accepted yet: nothing of it is kept */
    if (!a->accepted && a->phase != PH_ROLLBACK && a->phase != PH_DONE)
      fail(a, tsr_fail(a->err, TSR_ECANCELED, "client left"));
  }
}

void sched_admit_destroy_all(sched_state *st)
{
  while (st->adm_first != NULL) {
    sched_admission *a = st->adm_first;
    st->adm_first = a->next;
    a->rc = TSR_ECANCELED;
    admission_end(a);
  }
  st->adm_last = NULL;
  free(st->forget_later);
  st->forget_later = NULL;
  st->nforget_later = st->cap_forget_later = 0;
}

bool sched_admit_may_forget(sched_state *st, uint32_t id)
{
  if (st->adm_first == NULL) return true;
  if (sched_grow((void **)&st->forget_later, &st->cap_forget_later, st->nforget_later + 1, sizeof *st->forget_later) == 0)
    st->forget_later[st->nforget_later++] = id;
  else TSR_ERROR("out of memory keeping task %u while a graph is admitted", id);
  return false;
}

const struct sched_admission *sched_admission_next(const struct sched_admission *a) { return a->next; }
