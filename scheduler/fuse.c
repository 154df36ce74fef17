/* scheduler/fuse.c — task fusion at admission, a policy of its own.
 *
 * At the last part of a submit, after validation and before the tasks enter
 * the state machine, linear chains and narrow fan-ins among the graph's new
 * tasks become one task each: the group's output task keeps its key, gets
 * op `fused` (a fused op, below) and params {parts: [...]} listing every
 * part in run order, and depends on the group's external inputs only. The
 * other parts are never admitted: they cost no round trip, no stored
 * intermediate and no scheduler record. docs/scheduler.md ("Fusion") and
 * docs/protocol.md (`compute` of a fused task) hold the contract.
 *
 * Which tasks join their consumer's group (a task is "absorbed"):
 *  - it is new in this graph, nobody wants it (wants list, or the default
 *    "no dependents"), and every dependent record it has is the same task
 *    (its only consumer); keys that already existed are never parts, they
 *    are external inputs;
 *  - neither it nor its consumer has op `fused` itself, and both are of the
 *    same worker kind: native to a live GPU worker or not (ngpu_native), so
 *    a group never crosses a GPU/CPU boundary and the placement policy's
 *    native preference keeps holding for the group;
 *  - the width rule, like Dask's optimization.fuse.ave-width: the width of
 *    a group is the number of independent branches it folds into one task
 *    (a chain: 1; a fan-in: the sum of its inputs' widths). A task with one
 *    absorbable input always takes it (the width does not grow); a task
 *    with several takes all of them when their widths sum to at most
 *    --fuse-width, else none. Width 1 therefore fuses chains only.
 *  - a group holds at most SCHED_FUSE_MAX_PARTS parts and TSR_MAX_INPUTS
 *    external input edges (the bound of a `compute`).
 *
 * Placement: a fused op is an entry of st->ops that no worker advertises
 * and op_index does not map (so no client op name can reach it). A worker
 * has it when it advertised `fused` and every op of the parts; natively
 * when every one is native to it. The per-op queues, slots and the
 * native-first rule of policy_place.c then apply unchanged.
 *
 * Everything is linear in tasks + edges (iterative, no recursion), and a
 * group that cannot be built (out of memory) is simply left unfused: the
 * graph was valid without fusion. */
#include "progress.h"
#include "sched.h"

#include <stdlib.h>
#include <string.h>

#define SCHED_FUSE_MAX_PARTS 100000

enum { F_WANTED = 1, F_ABSORBED = 2, F_MARK = 4, F_VISIT = 8 };

typedef struct ext_slot {
  uint32_t id, stamp, index;
} ext_slot;

typedef struct fuser {
  sched_state *st;
  uint32_t g;
  uint32_t *fresh;
  uint32_t n;
  uint32_t limit;        /* --fuse-width */
  int plain_fused;       /* op id of the advertised `fused`, or -1 */
  uint8_t *flags;        /* per position in fresh: F_* */
  uint32_t *consumer;    /* the one task using it, or SCHED_NONE */
  uint32_t *width;       /* branches of the group rooted here */
  uint32_t *nparts;      /* parts of that group */
  uint32_t *ext_edges;   /* external input edges of that group (a bound) */
  uint32_t *aux;         /* Kahn counters; then the part index in its group */
  uint32_t *rootof;      /* the group root of a part */
  uint32_t *cursor;      /* DFS cursor; then the edge de-duplication stamps */
  uint32_t *order;       /* topological order of positions */
  uint32_t *parts;       /* the current group, in run order (ids) */
  uint32_t *stack;
  uint16_t *ops;         /* the current group's distinct ops, sorted */
  ext_slot *ext;         /* external input id -> index, for the current group */
  uint32_t ext_cap, stamp;
  msgpack_sbuffer buf;
  uint32_t ngroups, nabsorbed;
  /* resumable (sched_fusion_step): the stage, its cursor, Kahn's tail,
   * the surviving tasks so far */
  const uint32_t *want_ids;
  uint32_t nwant;
  int stage;
  uint32_t cur, tail, kept;
  uint64_t work;         /* of this step: tasks + the edges visited */
} fuser;

enum { FS_WANTED, FS_CONSUMERS, FS_TOPO_INIT, FS_TOPO_RUN, FS_DECIDE, FS_ALLOC_EXT, FS_BUILD, FS_RELINK_INIT, FS_RELINK,
       FS_COMPACT, FS_DONE };

static inline uint32_t pos_of(const sched_state *st, uint32_t id) { return (uint32_t)st->tasks[id].nbytes; }
static inline bool is_new(const sched_state *st, uint32_t id) { return st->tasks[id].state == TS_NEW; }
static inline bool gpu_kind(const sched_state *st, uint16_t op) { return st->ops[op].ngpu_native > 0; }

static bool fusable(const fuser *f, uint16_t op)
{
  return (int)op != f->plain_fused && f->st->ops[op].fused_ops == NULL;
}

/* ---------- fused ops and the workers that can run them ---------- */

/* Grows w's op bitsets to cover every op id. 0 or TSR_ENOMEM. */
static int cover_ops(sched_state *st, sched_worker *w)
{
  size_t old = (w->nopbits + 63) / 64 + 1, words = (st->nops + 63) / 64 + 1;
  if (words > old) {
    uint64_t *bits = calloc(2 * words, sizeof *bits);
    if (bits == NULL) return TSR_ENOMEM;
    memcpy(bits, w->opbits, old * sizeof *bits);
    memcpy(bits + words, w->nativebits, old * sizeof *bits);
    free(w->opbits);
    w->opbits = bits;
    w->nativebits = bits + words;
  }
  w->nopbits = st->nops;
  return 0;
}

static void set_fused_bits(sched_state *st, sched_worker *w, uint32_t o)
{
  sched_op *op = &st->ops[o];
  int plain = sched_op_find(st, "fused", 5);
  if (plain < 0 || !sched_worker_has_op(w, (uint32_t)plain) || sched_worker_has_op(w, o)) return;
  bool native = true;
  for (uint32_t i = 0; i < op->nfused_ops; i++) {
    if (!sched_worker_has_op(w, op->fused_ops[i])) return;
    native = native && sched_worker_native(w, op->fused_ops[i]);
  }
  w->opbits[o / 64] |= 1ull << (o % 64);
  op->nworkers++;
  if (!w->gpu) op->ncpu++;
  else if (native) op->ngpu_native++;
  if (!w->gpu || native) w->nativebits[o / 64] |= 1ull << (o % 64);
}

int sched_fuse_worker_ops(sched_state *st, uint32_t w)
{
  sched_worker *wk = &st->workers[w];
  if (cover_ops(st, wk) != 0) return TSR_ENOMEM;
  for (uint32_t o = 0; o < st->nops; o++)
    if (st->ops[o].fused_ops != NULL) set_fused_bits(st, wk, o);
  return 0;
}

static bool same_ops(const sched_op *op, const uint16_t *ops, uint32_t n)
{
  return op->fused_ops != NULL && op->nfused_ops == n && memcmp(op->fused_ops, ops, n * sizeof *ops) == 0;
}

/* The fused op for the sorted distinct part ops; created (and given to
 * every live worker that can run it) when new. Op id or a negative TSR_E*. */
static int fused_op(sched_state *st, const uint16_t *ops, uint32_t n)
{
  for (uint32_t o = 0; o < st->nops; o++)
    if (same_ops(&st->ops[o], ops, n)) return (int)o;
  if (st->nops >= SCHED_MAX_OPS) return TSR_ELIMIT;
  if (sched_grow((void **)&st->ops, &st->cap_ops, st->nops + 1, sizeof *st->ops) != 0) return TSR_ENOMEM;
  sched_op *op = &st->ops[st->nops];
  memset(op, 0, sizeof *op);
  op->name = strdup("fused");
  op->fused_ops = malloc(n * sizeof *ops);
  if (op->name == NULL || op->fused_ops == NULL) {
    free(op->name);
    free(op->fused_ops);
    return TSR_ENOMEM;
  }
  memcpy(op->fused_ops, ops, n * sizeof *ops);
  op->nfused_ops = n;
  uint32_t o = st->nops++;
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    if (!st->workers[w].alive) continue;
    if (cover_ops(st, &st->workers[w]) != 0) TSR_ERROR("out of memory giving worker '%s' a fused op", st->workers[w].name);
    else set_fused_bits(st, &st->workers[w], o);
  }
  return (int)o;
}

/* ---------- deciding the groups ---------- */

static void find_consumer(fuser *f, uint32_t p)
{
  const sched_task *t = &f->st->tasks[f->fresh[p]];
  uint32_t c = t->ndependents > 0 ? t->dependents[0].id : SCHED_NONE;
  for (uint32_t e = 1; e < t->ndependents && c != SCHED_NONE; e++)
    if (t->dependents[e].id != c) c = SCHED_NONE;
  f->consumer[p] = c;
}

/* Kahn's order over the new tasks (the graph is known to be acyclic):
 * the sources, then a pop at a time. */
static void topo_source(fuser *f, uint32_t p)
{
  sched_state *st = f->st;
  const sched_task *t = &st->tasks[f->fresh[p]];
  f->aux[p] = 0;
  for (uint32_t j = 0; j < t->ndeps; j++) f->aux[p] += is_new(st, t->deps[j]);
  if (f->aux[p] == 0) f->order[f->tail++] = p;
  f->work += t->ndeps;
}

static void topo_pop(fuser *f, uint32_t head)
{
  sched_state *st = f->st;
  const sched_task *t = &st->tasks[f->fresh[f->order[head]]];
  for (uint32_t e = 0; e < t->ndependents; e++) {
    uint32_t q = pos_of(st, t->dependents[e].id);
    if (--f->aux[q] == 0) f->order[f->tail++] = q;
  }
  f->work += t->ndependents;
}

static bool absorbable(const fuser *f, uint32_t d, uint32_t consumer)
{
  const sched_state *st = f->st;
  if (!is_new(st, d)) return false;
  uint32_t q = pos_of(st, d);
  uint16_t op = st->tasks[d].op, cop = st->tasks[consumer].op;
  return !(f->flags[q] & F_WANTED) && f->consumer[q] == consumer && fusable(f, op) &&
         gpu_kind(st, op) == gpu_kind(st, cop);
}

/* Task at position p takes its absorbable inputs' groups, or none. */
static void decide(fuser *f, uint32_t p)
{
  sched_state *st = f->st;
  uint32_t id = f->fresh[p];
  const sched_task *t = &st->tasks[id];
  bool can = fusable(f, t->op);
  uint64_t k = 0, width = 0, parts = 1, ext = 0;
  for (uint32_t j = 0; j < t->ndeps; j++) {
    uint32_t d = t->deps[j];
    if (!can || !absorbable(f, d, id)) {
      ext++;
      continue;
    }
    uint32_t q = pos_of(st, d);
    if (f->flags[q] & F_MARK) continue;  /* listed twice */
    f->flags[q] |= F_MARK;
    k++;
    width += f->width[q];
    parts += f->nparts[q];
    ext += f->ext_edges[q];
  }
  bool take = (k == 1 || (k > 1 && width <= f->limit)) && parts <= SCHED_FUSE_MAX_PARTS && ext <= TSR_MAX_INPUTS;
  for (uint32_t j = 0; j < t->ndeps && k > 0; j++) {
    uint32_t d = t->deps[j];
    if (!is_new(st, d)) continue;
    uint32_t q = pos_of(st, d);
    if ((f->flags[q] & F_MARK) && take) f->flags[q] |= F_ABSORBED;
    f->flags[q] &= (uint8_t)~F_MARK;
  }
  f->work += 2u * t->ndeps;
  f->width[p] = take ? (uint32_t)width : 1;
  f->nparts[p] = take ? (uint32_t)parts : 1;
  f->ext_edges[p] = take ? (uint32_t)ext : t->ndeps;
}

/* ---------- building one fused task ---------- */

/* The parts of the group rooted at root, inputs before their consumer,
 * one branch finished before the next (a depth-first post-order). */
static uint32_t collect(fuser *f, uint32_t root)
{
  sched_state *st = f->st;
  uint32_t np = 0, top = 0;
  f->stack[top++] = root;
  f->cursor[pos_of(st, root)] = 0;
  while (top > 0) {
    uint32_t x = f->stack[top - 1], px = pos_of(st, x);
    const sched_task *t = &st->tasks[x];
    bool pushed = false;
    while (f->cursor[px] < t->ndeps && !pushed) {
      uint32_t d = t->deps[f->cursor[px]++];
      if (!is_new(st, d)) continue;
      uint32_t q = pos_of(st, d);
      if (!(f->flags[q] & F_ABSORBED) || (f->flags[q] & F_VISIT)) continue;
      f->flags[q] |= F_VISIT;
      f->cursor[q] = 0;
      f->stack[top++] = d;
      pushed = true;
    }
    if (pushed) continue;
    top--;
    f->aux[px] = np;
    f->rootof[px] = root;
    f->parts[np++] = x;
  }
  return np;
}

static bool internal(const fuser *f, uint32_t d, uint32_t root)
{
  return is_new(f->st, d) && (f->flags[pos_of(f->st, d)] & F_ABSORBED) && f->rootof[pos_of(f->st, d)] == root;
}

/* Index of external input id in the group, adding it when new. */
static uint32_t ext_index(fuser *f, uint32_t id, uint32_t *count_p)
{
  uint32_t mask = f->ext_cap - 1, i = (id * 2654435761u) & mask;
  while (f->ext[i].stamp == f->stamp) {
    if (f->ext[i].id == id) return f->ext[i].index;
    i = (i + 1) & mask;
  }
  f->ext[i] = (ext_slot){id, f->stamp, *count_p};
  return (*count_p)++;
}

static void add_op(fuser *f, uint32_t *nops, uint16_t op)
{
  uint32_t i = 0;
  while (i < *nops && f->ops[i] < op) i++;
  if (i < *nops && f->ops[i] == op) return;
  memmove(f->ops + i + 1, f->ops + i, (*nops - i) * sizeof *f->ops);
  f->ops[i] = op;
  (*nops)++;
}

/* Packs {parts: [{key, op, params, inputs: [ref]}]} into f->buf; a ref is
 * an external input's index, or n_ext + the index of an earlier part. */
static void pack_parts(fuser *f, uint32_t root, uint32_t np, uint32_t n_ext)
{
  sched_state *st = f->st;
  msgpack_packer pk;
  f->buf.size = 0;
  msgpack_packer_init(&pk, &f->buf, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  tsr_pack_str(&pk, "parts");
  msgpack_pack_array(&pk, np);
  for (uint32_t k = 0; k < np; k++) {
    const sched_task *t = &st->tasks[f->parts[k]];
    msgpack_pack_map(&pk, 4);
    tsr_pack_kv_strn(&pk, "key", t->key, t->key_len);
    tsr_pack_kv_str(&pk, "op", st->ops[t->op].name);
    tsr_pack_str(&pk, "params");
    if (t->params_len > 0) tsr_pack_raw(&pk, t->params, t->params_len);
    else msgpack_pack_map(&pk, 0);
    tsr_pack_str(&pk, "inputs");
    msgpack_pack_array(&pk, t->ndeps);
    for (uint32_t j = 0; j < t->ndeps; j++) {
      uint32_t d = t->deps[j];
      /* every external input is in the map already (fuse_group's first pass) */
      uint32_t ref = internal(f, d, root) ? n_ext + f->aux[pos_of(st, d)] : ext_index(f, d, &(uint32_t){0});
      msgpack_pack_uint32(&pk, ref);
    }
  }
}

/* Replaces the root's op, params and inputs by the group's. 0, or a
 * negative TSR_E* with nothing changed (parts f->parts[0..*np_p)). */
static int fuse_group(fuser *f, uint32_t root, uint32_t *np_p)
{
  sched_state *st = f->st;
  uint32_t np = *np_p = collect(f, root), n_ext = 0, nops = 0;
  f->stamp++;
  for (uint32_t k = 0; k < np; k++) {
    const sched_task *t = &st->tasks[f->parts[k]];
    add_op(f, &nops, t->op);
    for (uint32_t j = 0; j < t->ndeps; j++)
      if (!internal(f, t->deps[j], root)) ext_index(f, t->deps[j], &n_ext);
  }
  sched_arena *arena = &st->graphs[f->g]->arena;
  uint32_t *deps = n_ext ? sched_arena_alloc(arena, n_ext * sizeof *deps, sizeof *deps) : NULL;
  int op = fused_op(st, f->ops, nops);
  if ((n_ext && deps == NULL) || op < 0) return op < 0 ? op : TSR_ENOMEM;
  for (uint32_t i = 0; i < f->ext_cap; i++)
    if (f->ext[i].stamp == f->stamp) deps[f->ext[i].index] = f->ext[i].id;
  pack_parts(f, root, np, n_ext);
  /* before root's op changes: the parts' ops name its progress groups */
  if (sched_progress_fused(st, f->g, root, f->parts, np) != 0)
    TSR_WARN("fused task '%s' counts in its output's progress group only: out of memory", st->tasks[root].key);
  uint8_t *params = sched_arena_alloc(arena, f->buf.size, 1);
  sched_task_ext *ext = sched_task_ext_get(st, root);  /* holds the part count */
  if (params == NULL || ext == NULL || f->buf.size > UINT32_MAX) return TSR_ENOMEM;
  memcpy(params, f->buf.data, f->buf.size);
  sched_task *t = &st->tasks[root];
  t->op = (uint16_t)op;
  t->params = params;
  t->params_len = (uint32_t)f->buf.size;
  t->deps = deps;
  t->ndeps = n_ext;
  ext->fused_parts = np;
  st->nfused_extra += np - 1;
  st->graphs[f->g]->nfused++;
  st->graphs[f->g]->nfused_parts += np;
  f->ngroups++;
  f->nabsorbed += np - 1;
  return 0;
}

/* Fuses the group rooted at root, or leaves its parts plain tasks. */
static void build_group(fuser *f, uint32_t root)
{
  uint32_t np = 0;
  int rc = fuse_group(f, root, &np);
  if (rc == 0) return;
  TSR_WARN("task '%s' left unfused: %s", f->st->tasks[root].key, tsr_strerror(rc));
  for (uint32_t k = 0; k < np; k++) f->flags[pos_of(f->st, f->parts[k])] &= (uint8_t)~F_ABSORBED;
}

/* Dependents edges of the surviving new tasks: an edge to a part now
 * points at its group's root, once per fused root (whose inputs are
 * listed once each). */
static void relink_dependents(fuser *f, uint32_t p)
{
  sched_state *st = f->st;
  if (f->flags[p] & F_ABSORBED) return;
  sched_task *t = &st->tasks[f->fresh[p]];
  sched_edge *edges = (sched_edge *)t->dependents;
  uint32_t out = 0;
  for (uint32_t e = 0; e < t->ndependents; e++) {
    uint32_t q = pos_of(st, edges[e].id);
    uint32_t target = (f->flags[q] & F_ABSORBED) ? f->rootof[q] : edges[e].id;
    if (sched_task_fused_parts(&st->tasks[target]) > 0) {
      uint32_t tq = pos_of(st, target);
      if (f->cursor[tq] == p + 1) continue;
      f->cursor[tq] = p + 1;
    }
    edges[out++] = (sched_edge){target, st->tasks[target].gen};
  }
  f->work += t->ndependents;
  t->ndependents = t->nlive_dependents = out;
}

/* ---------- the pass ---------- */

static int fuser_init(fuser *f, sched_state *st, uint32_t g, uint32_t *fresh, uint32_t n)
{
  memset(f, 0, sizeof *f);
  f->st = st;
  f->g = g;
  f->fresh = fresh;
  f->n = n;
  f->limit = st->cfg.fuse_width;
  f->plain_fused = sched_op_find(st, "fused", 5);
  size_t sz = (size_t)n * sizeof(uint32_t);
  f->flags = calloc(n, 1);
  uint32_t **arrays[] = {&f->consumer, &f->width, &f->nparts, &f->ext_edges, &f->aux,
                         &f->rootof, &f->cursor, &f->order, &f->parts, &f->stack};
  bool ok = f->flags != NULL;
  for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) ok = (*arrays[i] = malloc(sz)) != NULL && ok;
  f->ops = malloc((st->nops + 1) * sizeof *f->ops);
  msgpack_sbuffer_init(&f->buf);
  return ok && f->ops ? 0 : TSR_ENOMEM;
}

static void fuser_free(fuser *f)
{
  uint32_t *arrays[] = {f->consumer, f->width, f->nparts, f->ext_edges, f->aux, f->rootof, f->cursor, f->order, f->parts, f->stack};
  for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) free(arrays[i]);
  free(f->flags);
  free(f->ops);
  free(f->ext);
  msgpack_sbuffer_destroy(&f->buf);
}

/* The external-input map, sized for the group with the most input edges. */
static int alloc_ext(fuser *f)
{
  uint64_t most = 1;
  for (uint32_t p = 0; p < f->n; p++)
    if (!(f->flags[p] & F_ABSORBED) && f->nparts[p] > 1 && f->ext_edges[p] > most) most = f->ext_edges[p];
  f->ext_cap = 4;
  while (f->ext_cap < 2 * most) f->ext_cap *= 2;
  f->ext = calloc(f->ext_cap, sizeof *f->ext);
  return f->ext ? 0 : TSR_ENOMEM;
}

static bool fusion_possible(const sched_state *st, uint32_t n)
{
  if (st->cfg.fuse_width == 0 || n < 2) return false;
  if (st->nworkers_alive == 0) return true;
  int plain = sched_op_find(st, "fused", 5);
  return plain >= 0 && st->ops[plain].nworkers > 0;  /* some live worker runs fused tasks */
}

struct sched_fusion {
  fuser f;
};

int sched_fusion_start(sched_state *st, uint32_t g, uint32_t *fresh, uint32_t n, const uint32_t *want_ids, uint32_t nwant,
                       sched_fusion **fusion_p)
{
  *fusion_p = NULL;
  if (!fusion_possible(st, n)) return 0;
  sched_fusion *fu = malloc(sizeof *fu);
  if (fu == NULL || fuser_init(&fu->f, st, g, fresh, n) != 0) {
    if (fu != NULL) fuser_free(&fu->f);
    free(fu);
    TSR_WARN("out of memory fusing graph %llu; admitted unfused", (unsigned long long)st->graphs[g]->graph_id);
    return TSR_ENOMEM;
  }
  fu->f.want_ids = want_ids;
  fu->f.nwant = nwant;
  fu->f.stage = FS_WANTED;
  *fusion_p = fu;
  return 0;
}

/* Whether this step may take one more task: within the range and the
 * step's budget of tasks + edges. */
static bool more(fuser *f, uint32_t end, uint32_t budget) { return f->cur < end && f->work++ < budget; }

static void next_stage(fuser *f, uint32_t end, int next)
{
  if (f->cur < end) return;
  f->stage = next;
  f->cur = 0;
}

/* One building step: groups whose parts add up to about budget. */
static void build_some(fuser *f, uint32_t budget)
{
  for (; more(f, f->n, budget); f->cur++) {
    uint32_t p = f->cur;
    if ((f->flags[p] & F_ABSORBED) || f->nparts[p] < 2) continue;
    build_group(f, f->fresh[p]);
    f->work += f->nparts[p] + f->ext_edges[p];
  }
  next_stage(f, f->n, FS_RELINK_INIT);
}

static void compact_some(fuser *f, uint32_t budget)
{
  for (; more(f, f->n, budget); f->cur++) {
    uint32_t p = f->cur;
    if (f->flags[p] & F_ABSORBED) sched_tr_discard_new(f->st, f->fresh[p]);
    else f->fresh[f->kept++] = f->fresh[p];
  }
}

bool sched_fusion_step(sched_fusion *fu, uint32_t budget)
{
  fuser *f = &fu->f;
  sched_state *st = f->st;
  f->work = 0;
  switch (f->stage) {
  case FS_WANTED:
    for (uint32_t i = 0; i < f->nwant; i++)
      if (is_new(st, f->want_ids[i])) f->flags[pos_of(st, f->want_ids[i])] |= F_WANTED;
    f->stage = FS_CONSUMERS;
    break;
  case FS_CONSUMERS:
    for (; more(f, f->n, budget); f->cur++) find_consumer(f, f->cur);
    next_stage(f, f->n, FS_TOPO_INIT);
    break;
  case FS_TOPO_INIT:
    for (; more(f, f->n, budget); f->cur++) topo_source(f, f->cur);
    next_stage(f, f->n, FS_TOPO_RUN);
    break;
  case FS_TOPO_RUN:
    while (more(f, f->tail, budget)) topo_pop(f, f->cur++);
    if (f->cur == f->tail) next_stage(f, 0, FS_DECIDE);
    break;
  case FS_DECIDE:
    for (; more(f, f->n, budget); f->cur++) decide(f, f->order[f->cur]);
    next_stage(f, f->n, FS_ALLOC_EXT);
    break;
  case FS_ALLOC_EXT:
    if (alloc_ext(f) == 0) f->stage = FS_BUILD;
    else {
      memset(f->flags, 0, f->n);  /* nothing fused */
      f->stage = FS_RELINK_INIT;
    }
    break;
  case FS_BUILD: build_some(f, budget); break;
  case FS_RELINK_INIT:
    memset(f->cursor, 0, f->n * sizeof *f->cursor);
    f->stage = FS_RELINK;
    break;
  case FS_RELINK:
    for (; more(f, f->n, budget); f->cur++) relink_dependents(f, f->cur);
    next_stage(f, f->n, FS_COMPACT);
    break;
  case FS_COMPACT:
    compact_some(f, budget);
    next_stage(f, f->n, FS_DONE);
    break;
  default: break;
  }
  return f->stage == FS_DONE;
}

uint32_t sched_fusion_end(sched_fusion **fusion_p)
{
  sched_fusion *fu = *fusion_p;
  fuser *f = &fu->f;
  if (f->ngroups > 0)
    TSR_DEBUG("graph %llu: %u tasks fused into %u", (unsigned long long)f->st->graphs[f->g]->graph_id,
              f->nabsorbed + f->ngroups, f->ngroups);
  uint32_t kept = f->kept;
  fuser_free(f);
  free(fu);
  *fusion_p = NULL;
  return kept;
}

int sched_fuse_graph(sched_state *st, uint32_t g, uint32_t *fresh, uint32_t n, const uint32_t *want_ids, uint32_t nwant)
{
  sched_fusion *fu = NULL;
  sched_fusion_start(st, g, fresh, n, want_ids, nwant, &fu);
  if (fu == NULL) return (int)n;
  while (!sched_fusion_step(fu, UINT32_MAX)) {}
  return (int)sched_fusion_end(&fu);
}

/* ---------- a fused task against a new definition of its key ---------- */

static bool str_is(const msgpack_object *o, const char *s, size_t len)
{
  return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == len && memcmp(o->via.str.ptr, s, len) == 0;
}

/* The key a ref of the last part names: an external input's, or a part's. */
static bool ref_is(const sched_state *st, const sched_task *t, const msgpack_object *parts, uint64_t ref,
                   const sched_strref *want)
{
  if (ref < t->ndeps) {
    const sched_task *d = &st->tasks[t->deps[ref]];
    return d->key_len == want->len && memcmp(d->key, want->s, want->len) == 0;
  }
  ref -= t->ndeps;
  return ref < parts->via.array.size && str_is(tsr_wire_field(&parts->via.array.ptr[ref], "key"), want->s, want->len);
}

static const char *last_part_differs(const sched_state *st, const sched_task *t, const msgpack_object *parts,
                                     const sched_task_spec *s)
{
  const msgpack_object *last = &parts->via.array.ptr[parts->via.array.size - 1];
  if (!str_is(tsr_wire_field(last, "op"), s->op.s, s->op.len)) return "op";
  const msgpack_object *params = tsr_wire_field(last, "params");
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  if (params != NULL && !(params->type == MSGPACK_OBJECT_MAP && params->via.map.size == 0)) msgpack_pack_object(&pk, *params);
  bool same = sb.size == s->params_len && (sb.size == 0 || memcmp(sb.data, s->params, sb.size) == 0);
  msgpack_sbuffer_destroy(&sb);
  if (!same) return "params";
  const msgpack_object *inputs = tsr_wire_field(last, "inputs");
  if (inputs == NULL || inputs->type != MSGPACK_OBJECT_ARRAY || inputs->via.array.size != s->ninputs) return "inputs";
  for (uint32_t j = 0; j < s->ninputs; j++) {
    uint64_t ref;
    if (tsr_obj_uint(&inputs->via.array.ptr[j], &ref, NULL) != 0 || !ref_is(st, t, parts, ref, &s->inputs[j]))
      return "inputs";
  }
  return NULL;
}

const char *sched_fused_differs(const sched_state *st, uint32_t id, const sched_task_spec *s)
{
  const sched_task *t = &st->tasks[id];
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  const char *what = "op";
  if (msgpack_unpack_next(&u, (const char *)t->params, t->params_len, &off) == MSGPACK_UNPACK_SUCCESS) {
    const msgpack_object *parts = tsr_wire_field(&u.data, "parts");
    if (parts != NULL && parts->type == MSGPACK_OBJECT_ARRAY && parts->via.array.size > 0)
      what = last_part_differs(st, t, parts, s);
  }
  msgpack_unpacked_destroy(&u);
  return what;
}
