/* The scheduler's containers: task slots with a free list, graph arenas,
 * op interning, the uint32 id set, and the peer / worker / client tables
 * with their outboxes. No policy and no state transitions live here (those
 * are transitions.c and policy_*.c); this file only allocates, finds and
 * frees. */
#include "progress.h"
#include "sched.h"
#include "state.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sched_tstate_name(int state)
{
  static const char *names[TS_COUNT] = {"free",       "new",    "waiting",  "ready", "queued",
                                        "processing", "memory", "released", "erred", "lost"};
  return state >= 0 && state < TS_COUNT ? names[state] : "?";
}

int sched_grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
  if (need <= *cap) return 0;
  uint64_t new_cap = *cap ? *cap : 16;
  while (new_cap < need) new_cap *= 2;
  if (new_cap > UINT32_MAX) new_cap = UINT32_MAX;
  void *p = realloc(*arr, (size_t)new_cap * elem);
  if (p == NULL) return TSR_ENOMEM;
  *arr = p;
  *cap = (uint32_t)new_cap;
  return 0;
}

/* ---------- arena ---------- */

struct sched_arena_block {
  sched_arena_block *next;
  size_t used, cap;
  max_align_t data[];
};

#define ARENA_BLOCK (1u << 20)

void *sched_arena_alloc(sched_arena *arena, size_t size, size_t align)
{
  sched_arena_block *b = arena->head;
  size_t at = b ? (b->used + align - 1) & ~(align - 1) : 0;
  if (b == NULL || at + size > b->cap) {
    /* Small graphs get small blocks; big ones grow to 1 MiB blocks. */
    size_t cap = arena->used_total < ARENA_BLOCK ? 4096 : ARENA_BLOCK;
    while (cap < size) cap *= 2;
    b = malloc(sizeof *b + cap);
    if (b == NULL) return NULL;
    b->next = arena->head;
    b->used = 0;
    b->cap = cap;
    arena->head = b;
    at = 0;
  }
  b->used = at + size;
  arena->used_total += size;
  return (char *)b->data + at;
}

void sched_arena_free(sched_arena *arena)
{
  sched_arena_block *b = arena->head;
  while (b != NULL) {
    sched_arena_block *next = b->next;
    free(b);
    b = next;
  }
  arena->head = NULL;
  arena->used_total = 0;
}

static size_t arena_bytes(const sched_arena *arena)
{
  size_t n = 0;
  for (const sched_arena_block *b = arena->head; b; b = b->next) n += sizeof *b + b->cap;
  return n;
}

/* ---------- state ---------- */

sched_state *sched_state_new(const sched_config *cfg)
{
  sched_state *st = calloc(1, sizeof *st);
  if (st == NULL) return NULL;
  st->cfg = *cfg;
  sched_limits_defaults(&st->cfg.limits);
  st->free_head = SCHED_NONE;
  st->op_index = tsr_strmap_new(64);
  st->peer_index = tsr_strmap_new(64);
  st->gone = tsr_strmap_new(64);
  msgpack_sbuffer_init(&st->scratch);
  tsr_wbuf_init(&st->discard);
  if (st->op_index == NULL || st->peer_index == NULL || st->gone == NULL) {
    sched_state_destroy(&st);
    return NULL;
  }
  return st;
}

void sched_state_destroy(sched_state **st_p)
{
  if (st_p == NULL || *st_p == NULL) return;
  sched_state *st = *st_p;
  sched_admit_destroy_all(st);
  for (uint32_t i = 0; i < st->ntasks; i++) {
    sched_task_ext *ext = st->tasks[i].ext;
    if (st->tasks[i].state == TS_FREE || ext == NULL) continue;
    free(ext->xdeps);
    sched_error_unref(ext->error);
    free(ext);
  }
  free(st->tasks);
  for (uint32_t g = 0; g < st->ngraphs; g++)
    if (st->graphs[g] != NULL) {
      sched_arena_free(&st->graphs[g]->arena);
      sched_progress_free(st->graphs[g]->progress);
      free(st->graphs[g]);
    }
  free(st->graphs);
  for (uint32_t o = 0; o < st->nops; o++) {
    free(st->ops[o].name);
    free(st->ops[o].fused_ops);
    free(st->ops[o].queue.ids);
  }
  free(st->ops);
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    free(st->workers[w].opbits);
    free(st->workers[w].placed);
    msgpack_sbuffer_destroy(&st->workers[w].freebuf);
  }
  free(st->workers);
  free(st->by_load[0].ids);
  free(st->by_load[1].ids);
  free(st->walk);
  for (uint32_t c = 0; c < st->nclients_slots; c++) {
    sched_idset_free(&st->clients[c].wants);
    for (uint32_t p = 0; p < st->clients[c].npending; p++) sched_pending_free(&st->clients[c].pending[p]);
    free(st->clients[c].pending);
  }
  free(st->clients);
  for (uint32_t p = 0; p < st->npeers_slots; p++)
    if (st->peers[p].in_use) tsr_wbuf_free(&st->peers[p].out);
  free(st->peers);
  free(st->dirty);
  free(st->work);
  free(st->ready);
  free(st->stack);
  free(st->loc_bytes);
  free(st->loc_touched);
  msgpack_sbuffer_destroy(&st->scratch);
  tsr_wbuf_free(&st->discard);
  sched_keyidx_free(&st->keyidx);
  tsr_strmap_destroy(&st->op_index);
  tsr_strmap_destroy(&st->peer_index);
  tsr_strmap_destroy(&st->gone);
  free(st);
  *st_p = NULL;
}

size_t sched_state_bytes(const sched_state *st)
{
  size_t n = sizeof *st + (size_t)st->cap_tasks * sizeof(sched_task) + (size_t)st->keyidx.cap * 8;
  for (uint32_t g = 0; g < st->ngraphs; g++)
    if (st->graphs[g] != NULL) n += sizeof(sched_graph) + arena_bytes(&st->graphs[g]->arena);
  for (uint32_t o = 0; o < st->nops; o++) n += st->ops[o].queue.cap * sizeof(uint32_t);
  n += (size_t)st->cap_work * 4 + (size_t)st->cap_ready * 4;
  for (uint32_t w = 0; w < st->nworkers_slots; w++) n += (size_t)st->workers[w].cap_placed * 4;
  return n;
}

bool sched_state_shrink(sched_state *st)
{
  if (st->nlive != 0 || st->nwork != 0 || st->nready != 0 || st->nstack != 0 || st->adm_first != NULL) return false;
  free(st->tasks);
  st->tasks = NULL;
  st->ntasks = st->cap_tasks = 0;
  st->free_head = SCHED_NONE;
  sched_keyidx_free(&st->keyidx);
  for (uint32_t o = 0; o < st->nops; o++) {
    free(st->ops[o].queue.ids);
    memset(&st->ops[o].queue, 0, sizeof st->ops[o].queue);
  }
  free(st->work);
  free(st->ready);
  free(st->stack);
  st->work = st->ready = st->stack = NULL;
  st->cap_work = st->cap_ready = st->cap_stack = 0;
  /* every id in the workers' placed lists is stale now (ids restart at 0) */
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    sched_worker *wk = &st->workers[w];
    free(wk->placed);
    wk->placed = NULL;
    wk->nplaced = wk->cap_placed = 0;
    wk->placed_lossy = false;
  }
  return true;
}

/* ---------- tasks ---------- */

uint32_t sched_task_alloc(sched_state *st)
{
  uint32_t id;
  if (st->free_head != SCHED_NONE) {
    id = st->free_head;
    st->free_head = st->tasks[id].heap_pos;
  } else {
    if (st->ntasks >= SCHED_NONE - 1) return SCHED_NONE;
    if (sched_grow((void **)&st->tasks, &st->cap_tasks, st->ntasks + 1, sizeof *st->tasks) != 0) return SCHED_NONE;
    id = st->ntasks++;
    st->tasks[id].gen = 0;
  }
  sched_task *t = &st->tasks[id];
  uint32_t gen = t->gen;
  memset(t, 0, sizeof *t);
  t->gen = gen;
  t->state = TS_NEW;
  t->heap_pos = SCHED_NONE;
  t->graph = SCHED_NONE;
  t->who_has = SCHED_NO_WORKER;
  t->processing_on = SCHED_NO_WORKER;
  st->count_by_state[TS_NEW]++;
  st->nlive++;
  return id;
}

void sched_task_free(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  uint32_t parts = sched_task_fused_parts(t);
  if (parts > 0) st->nfused_extra -= parts - 1;
  if (t->ext != NULL) {
    free(t->ext->xdeps);
    sched_error_unref(t->ext->error);
    free(t->ext);
    t->ext = NULL;
  }
  st->count_by_state[t->state]--;
  st->nlive--;
  t->state = TS_FREE;
  t->gen++;
  t->key = NULL;
  t->heap_pos = st->free_head;
  st->free_head = id;
}

sched_task_ext *sched_task_ext_get(sched_state *st, uint32_t id)
{
  sched_task *t = &st->tasks[id];
  if (t->ext == NULL) t->ext = calloc(1, sizeof *t->ext);
  return t->ext;
}

int sched_task_add_dependent(sched_state *st, uint32_t id, uint32_t dependent)
{
  sched_task_ext *ext = sched_task_ext_get(st, id);
  if (ext == NULL) return TSR_ENOMEM;
  if (ext->nx == ext->capx) {
    /* Compact dead entries before growing: a long-lived input shared by
     * many short-lived graphs must not accumulate stale edges forever. */
    uint32_t k = 0;
    for (uint32_t i = 0; i < ext->nx; i++)
      if (sched_edge_live(st, ext->xdeps[i])) ext->xdeps[k++] = ext->xdeps[i];
    ext->nx = k;
  }
  if (sched_grow((void **)&ext->xdeps, &ext->capx, ext->nx + 1, sizeof *ext->xdeps) != 0) return TSR_ENOMEM;
  ext->xdeps[ext->nx++] = (sched_edge){dependent, st->tasks[dependent].gen};
  st->tasks[id].nlive_dependents++;
  return 0;
}

/* ---------- errors ---------- */

sched_error *sched_error_new(const char *key, size_t key_len, const char *message, size_t msg_len)
{
  sched_error *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  e->key = strndup(key, key_len);
  e->message = strndup(message, msg_len);
  if (e->key == NULL || e->message == NULL) {
    free(e->key);
    free(e->message);
    free(e);
    return NULL;
  }
  e->key_len = (uint32_t)key_len;
  e->refs = 1;
  return e;
}

void sched_error_unref(sched_error *e)
{
  if (e == NULL || --e->refs > 0) return;
  free(e->key);
  free(e->message);
  free(e);
}

/* ---------- ops ---------- */

int sched_op_find(const sched_state *st, const char *name, size_t len)
{
  uint64_t v;
  return tsr_strmap_get(st->op_index, name, len, &v) ? (int)v : -1;
}

int sched_op_intern(sched_state *st, const char *name, size_t len)
{
  int found = sched_op_find(st, name, len);
  if (found >= 0) return found;
  if (st->nops >= SCHED_MAX_OPS) return TSR_ELIMIT;
  if (sched_grow((void **)&st->ops, &st->cap_ops, st->nops + 1, sizeof *st->ops) != 0) return TSR_ENOMEM;
  sched_op *op = &st->ops[st->nops];
  memset(op, 0, sizeof *op);
  op->name = strndup(name, len);
  if (op->name == NULL || tsr_strmap_put(st->op_index, name, len, st->nops) != 0) {
    free(op->name);
    return TSR_ENOMEM;
  }
  return (int)st->nops++;
}

/* ---------- graphs ---------- */

uint32_t sched_graph_new(sched_state *st, uint32_t client, uint64_t graph_id, const char *client_name)
{
  uint32_t g = 0;
  while (g < st->ngraphs && st->graphs[g] != NULL) g++;
  if (g == st->ngraphs) {
    if (sched_grow((void **)&st->graphs, &st->cap_graphs, st->ngraphs + 1, sizeof *st->graphs) != 0)
      return SCHED_NONE;
    st->graphs[st->ngraphs++] = NULL;
  }
  sched_graph *gr = calloc(1, sizeof *gr);
  if (gr == NULL) return SCHED_NONE;
  gr->graph_id = graph_id;
  gr->client = client;
  snprintf(gr->client_name, sizeof gr->client_name, "%s", client_name);
  st->graphs[g] = gr;
  return g;
}

void sched_graph_free(sched_state *st, uint32_t g)
{
  if (g >= st->ngraphs || st->graphs[g] == NULL) return;
  sched_arena_free(&st->graphs[g]->arena);
  sched_progress_free(st->graphs[g]->progress);   /* a finished graph's counts go with it */
  free(st->graphs[g]);
  st->graphs[g] = NULL;
  st->trim_wanted = true;
  while (st->ngraphs > 0 && st->graphs[st->ngraphs - 1] == NULL) st->ngraphs--;
}

uint32_t sched_graph_find(const sched_state *st, uint32_t client, uint64_t graph_id)
{
  for (uint32_t g = 0; g < st->ngraphs; g++) {
    const sched_graph *gr = st->graphs[g];
    if (gr != NULL && gr->client == client && gr->graph_id == graph_id) return g;
  }
  return SCHED_NONE;
}

/* ---------- id set ---------- */

#define IDSET_EMPTY SCHED_NONE
#define IDSET_TOMB (SCHED_NONE - 1)

static uint32_t idset_hash(uint32_t id) { return id * 2654435761u; }

static int idset_rehash(sched_idset *set, uint32_t cap)
{
  uint32_t *slots = malloc((size_t)cap * sizeof *slots);
  if (slots == NULL) return TSR_ENOMEM;
  memset(slots, 0xff, (size_t)cap * sizeof *slots);
  for (uint32_t i = 0; i < set->cap; i++) {
    uint32_t id = set->slots[i];
    if (id == IDSET_EMPTY || id == IDSET_TOMB) continue;
    uint32_t j = idset_hash(id) & (cap - 1);
    while (slots[j] != IDSET_EMPTY) j = (j + 1) & (cap - 1);
    slots[j] = id;
  }
  free(set->slots);
  set->slots = slots;
  set->cap = cap;
  set->tombs = 0;
  return 0;
}

bool sched_idset_has(const sched_idset *set, uint32_t id)
{
  if (set->cap == 0) return false;
  for (uint32_t j = idset_hash(id) & (set->cap - 1);; j = (j + 1) & (set->cap - 1)) {
    if (set->slots[j] == id) return true;
    if (set->slots[j] == IDSET_EMPTY) return false;
  }
}

int sched_idset_add(sched_idset *set, uint32_t id)
{
  if (sched_idset_has(set, id)) return 0;
  if ((uint64_t)(set->count + set->tombs + 1) * 4 > (uint64_t)set->cap * 3) {
    uint32_t cap = 16;
    while ((uint64_t)cap * 3 < (uint64_t)(set->count + 1) * 8) cap *= 2;
    if (idset_rehash(set, cap) != 0) return TSR_ENOMEM;
  }
  uint32_t j = idset_hash(id) & (set->cap - 1);
  while (set->slots[j] != IDSET_EMPTY && set->slots[j] != IDSET_TOMB) j = (j + 1) & (set->cap - 1);
  if (set->slots[j] == IDSET_TOMB) set->tombs--;
  set->slots[j] = id;
  set->count++;
  return 1;
}

bool sched_idset_del(sched_idset *set, uint32_t id)
{
  if (set->cap == 0) return false;
  for (uint32_t j = idset_hash(id) & (set->cap - 1);; j = (j + 1) & (set->cap - 1)) {
    if (set->slots[j] == IDSET_EMPTY) return false;
    if (set->slots[j] == id) {
      set->slots[j] = IDSET_TOMB;
      set->count--;
      set->tombs++;
      if (set->count == 0) {
        /* An emptied set gives its memory back (a client that held a
         * million keys and released them). */
        free(set->slots);
        memset(set, 0, sizeof *set);
      }
      return true;
    }
  }
}

void sched_idset_free(sched_idset *set)
{
  free(set->slots);
  memset(set, 0, sizeof *set);
}

/* ---------- peers ---------- */

uint32_t sched_peer_find(const sched_state *st, const void *identity, size_t len)
{
  uint64_t v;
  return tsr_strmap_get(st->peer_index, identity, len, &v) ? (uint32_t)v : SCHED_NONE;
}

uint32_t sched_peer_add(sched_state *st, const void *identity, size_t len, uint64_t now_ms)
{
  if (len == 0 || len > SCHED_MAX_IDENTITY) return SCHED_NONE;
  uint32_t p = 0;
  while (p < st->npeers_slots && st->peers[p].in_use) p++;
  if (p == st->npeers_slots) {
    sched_peer *before = st->peers;
    if (sched_grow((void **)&st->peers, &st->cap_peers, p + 1, sizeof *st->peers) != 0) return SCHED_NONE;
    st->npeers_slots++;
    /* Each peer's packer points at its own sbuffer: when the array moved,
     * point them at the new place (found by fuzz_sched after the 17th peer,
     * and by bench/scale with 100 workers: writes to earlier peers went to
     * freed memory). */
    for (uint32_t q = 0; st->peers != before && q < p; q++)
      if (st->peers[q].in_use) st->peers[q].out.pk.data = &st->peers[q].out.sbuf;
  }
  if (tsr_strmap_put(st->peer_index, identity, len, p) != 0) return SCHED_NONE;
  sched_peer *peer = &st->peers[p];
  memset(peer, 0, sizeof *peer);
  peer->in_use = true;
  peer->role = PEER_NONE;
  peer->id_len = (uint8_t)len;
  peer->last_seen_ms = now_ms;
  memcpy(peer->identity, identity, len);
  tsr_wbuf_init(&peer->out);
  peer->was_gone = st->gone != NULL && tsr_strmap_del(st->gone, identity, len);
  return p;
}

void sched_peer_remove(sched_state *st, uint32_t p, bool remember)
{
  sched_peer *peer = &st->peers[p];
  if (!peer->in_use) return;
  /* Remember the identity: if it speaks again it is told "unknown peer" and
   * says hello again. Bounded, so a flood of identities cannot grow it. */
  if (remember) {
    if (st->gone == NULL || tsr_strmap_count(st->gone) > 65536) {
      tsr_strmap_destroy(&st->gone);
      st->gone = tsr_strmap_new(64);
    }
    if (st->gone != NULL) tsr_strmap_put(st->gone, (const char *)peer->identity, peer->id_len, 1);
  }
  tsr_strmap_del(st->peer_index, (const char *)peer->identity, peer->id_len);
  tsr_wbuf_free(&peer->out);
  peer->in_use = false;
  peer->dirty = false;
}

tsr_wbuf *sched_out(sched_state *st, uint32_t p)
{
  if (p == SCHED_NONE) {
    tsr_wbuf_reset(&st->discard);
    return &st->discard;
  }
  sched_peer *peer = &st->peers[p];
  if (!peer->dirty && sched_grow((void **)&st->dirty, &st->cap_dirty, st->ndirty + 1, sizeof *st->dirty) == 0) {
    peer->dirty = true;
    st->dirty[st->ndirty++] = p;
  }
  return &peer->out;
}

void sched_send_error(sched_state *st, uint32_t p, int code, const char *ref, const char *fmt, ...)
{
  char msg[TSR_ERRMSG_LEN + 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  tsr_wbuf *wb = sched_out(st, p);
  tsr_wbuf_begin(wb, "error", ref ? 4 : 3);
  tsr_pack_kv_int(&wb->pk, "code", code);
  tsr_pack_kv_str(&wb->pk, "message", msg);
  if (ref) tsr_pack_kv_str(&wb->pk, "ref", ref);
}

const char *sched_peer_label(const sched_state *st, uint32_t p, char *buf, size_t cap)
{
  const sched_peer *peer = &st->peers[p];
  if (peer->role == PEER_WORKER) snprintf(buf, cap, "worker '%s'", st->workers[peer->index].name);
  else if (peer->role == PEER_CLIENT) snprintf(buf, cap, "client '%s'", st->clients[peer->index].name);
  else {
    size_t n = snprintf(buf, cap, "peer 0x");
    for (uint32_t i = 0; i < peer->id_len && n + 3 < cap; i++) n += snprintf(buf + n, cap - n, "%02x", peer->identity[i]);
  }
  return buf;
}

/* ---------- frees ---------- */

void sched_queue_free(sched_state *st, uint16_t w, const char *key, size_t len)
{
  sched_worker *wk = &st->workers[w];
  if (!wk->alive) return;
  msgpack_packer pk;
  msgpack_packer_init(&pk, &wk->freebuf, msgpack_sbuffer_write);
  tsr_pack_strn(&pk, key, len);
  wk->nfree++;
}

void sched_flush_frees(sched_state *st)
{
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    sched_worker *wk = &st->workers[w];
    if (wk->nfree == 0) continue;
    if (wk->alive) {
      tsr_wbuf *wb = sched_out(st, wk->peer);
      tsr_wbuf_begin(wb, "free", 2);
      tsr_pack_str(&wb->pk, "keys");
      msgpack_pack_array(&wb->pk, wk->nfree);
      tsr_pack_raw(&wb->pk, wk->freebuf.data, wk->freebuf.size);
    }
    wk->freebuf.size = 0;
    wk->nfree = 0;
    if (wk->freebuf.alloc > (1u << 20)) {
      msgpack_sbuffer_destroy(&wk->freebuf);
      msgpack_sbuffer_init(&wk->freebuf);
    }
  }
}

/* ---------- workers and clients ---------- */

static int cmp_u32(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Keeps the ids still placed on w, once each. Run when the list is full,
 * so its cost is amortized over the appends since the last run. */
static void compact_placed(sched_state *st, uint16_t w)
{
  sched_worker *wk = &st->workers[w];
  if (wk->nplaced == 0) return;
  qsort(wk->placed, wk->nplaced, sizeof *wk->placed, cmp_u32);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < wk->nplaced; i++) {
    uint32_t id = wk->placed[i];
    if ((kept == 0 || wk->placed[kept - 1] != id) && sched_task_placed_on(st, id, w)) wk->placed[kept++] = id;
  }
  wk->nplaced = kept;
}

void sched_worker_note_placed(sched_state *st, uint16_t w, uint32_t id)
{
  sched_worker *wk = &st->workers[w];
  if (wk->nplaced == wk->cap_placed) {
    compact_placed(st, w);
    /* grow unless compaction left at least half free: appends stay O(1) amortized */
    if (wk->nplaced >= wk->cap_placed / 2 &&
        sched_grow((void **)&wk->placed, &wk->cap_placed, wk->nplaced + 1, sizeof *wk->placed) != 0) {
      wk->placed_lossy = true;
      return;
    }
  }
  wk->placed[wk->nplaced++] = id;
}

uint32_t sched_worker_alloc(sched_state *st, uint32_t peer)
{
  uint32_t w = 0;
  while (w < st->nworkers_slots && st->workers[w].alive) w++;
  if (w >= SCHED_MAX_WORKERS) return SCHED_NONE;
  if (w == st->nworkers_slots) {
    if (sched_grow((void **)&st->workers, &st->cap_workers, w + 1, sizeof *st->workers) != 0) return SCHED_NONE;
    uint32_t cap = st->cap_workers;
    void *lb = realloc(st->loc_bytes, cap * sizeof *st->loc_bytes);
    if (lb == NULL) return SCHED_NONE;
    st->loc_bytes = lb;
    memset(st->loc_bytes, 0, cap * sizeof *st->loc_bytes);
    void *lt = realloc(st->loc_touched, cap * sizeof *st->loc_touched);
    if (lt == NULL) return SCHED_NONE;
    st->loc_touched = lt;
    memset(&st->workers[w], 0, sizeof st->workers[w]);
    msgpack_sbuffer_init(&st->workers[w].freebuf);
    st->nworkers_slots++;
  }
  sched_worker *wk = &st->workers[w];
  msgpack_sbuffer keep = wk->freebuf;
  free(wk->opbits);
  free(wk->placed);
  memset(wk, 0, sizeof *wk);
  wk->freebuf = keep;
  wk->freebuf.size = 0;
  wk->load_pos = SCHED_NONE;   /* in by_load once its hello is read (sched_place_worker_joined) */
  wk->alive = true;
  wk->peer = peer;
  st->nworkers_alive++;
  return w;
}

uint32_t sched_client_alloc(sched_state *st, uint32_t peer)
{
  uint32_t c = 0;
  while (c < st->nclients_slots && st->clients[c].alive) c++;
  if (c == st->nclients_slots) {
    if (sched_grow((void **)&st->clients, &st->cap_clients, c + 1, sizeof *st->clients) != 0) return SCHED_NONE;
    memset(&st->clients[c], 0, sizeof st->clients[c]);
    st->nclients_slots++;
  }
  sched_client *cl = &st->clients[c];
  sched_idset_free(&cl->wants);
  free(cl->pending);
  memset(cl, 0, sizeof *cl);
  cl->alive = true;
  cl->peer = peer;
  st->nclients_alive++;
  return c;
}
