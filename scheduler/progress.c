/* scheduler/progress.c — per-graph and per-group counts and the `progress`
 * messages (contract in progress.h, protocol in docs/protocol.md).
 *
 * The counts move only in sched_progress_on_state, which set_state calls
 * for every state change: one category down, one up, by the task's weight
 * (its parts). Groups and composites are built at admission, the only
 * place that allocates; the hot path only adds and subtracts. */
#include "progress.h"
#include "sched.h"

#include <stdlib.h>
#include <string.h>

void sched_progress_free(sched_progress *p)
{
  if (p == NULL) return;
  free(p->groups);
  free(p->items);
  free(p->comps);
  free(p);
}

/* The graph's record, created on first use (fusion or admission). */
static sched_progress *progress_of(sched_state *st, uint32_t g)
{
  sched_graph *gr = st->graphs[g];
  if (gr->progress == NULL) gr->progress = calloc(1, sizeof *gr->progress);
  return gr->progress;
}

/* The group of op in p, added when new. SCHED_PGROUP_MAX on ENOMEM or
 * when the graph has that many groups already. Linear: a graph has a
 * handful of ops, and this runs at admission only. */
static uint16_t group_of(sched_progress *p, uint16_t op)
{
  for (uint32_t i = p->ngroups; i-- > 0;)
    if (p->groups[i].op == op) return (uint16_t)i;
  if (p->ngroups >= SCHED_PGROUP_MAX ||
      sched_grow((void **)&p->groups, &p->cap_groups, p->ngroups + 1, sizeof *p->groups) != 0)
    return SCHED_PGROUP_MAX;
  p->groups[p->ngroups] = (sched_pgroup){.op = op};
  return (uint16_t)p->ngroups++;
}

/* Adds parts to the item of group among items[first, nitems). */
static void item_add(sched_progress *p, uint32_t first, uint16_t group, uint32_t parts)
{
  for (uint32_t i = first; i < p->nitems; i++)
    if (p->items[i].group == group) {
      p->items[i].parts += parts;
      return;
    }
  p->items[p->nitems++] = (sched_pitem){group, parts};
}

/* An earlier composite with the same items, so a graph of a million fused
 * chains of one shape holds one composite; else SCHED_NONE. */
static uint32_t same_composite(const sched_progress *p, uint32_t first, uint32_t n)
{
  for (uint32_t c = p->ncomps; c-- > 0 && p->ncomps - c <= 8;) {
    const sched_pcomposite *k = &p->comps[c];
    if (k->n == n && memcmp(&p->items[k->first], &p->items[first], n * sizeof *p->items) == 0) return c;
  }
  return SCHED_NONE;
}

int sched_progress_fused(sched_state *st, uint32_t g, uint32_t root, const uint32_t *parts, uint32_t np)
{
  sched_progress *p = progress_of(st, g);
  if (p == NULL || sched_grow((void **)&p->items, &p->cap_items, p->nitems + np, sizeof *p->items) != 0 ||
      sched_grow((void **)&p->comps, &p->cap_comps, p->ncomps + 1, sizeof *p->comps) != 0)
    return TSR_ENOMEM;
  uint32_t first = p->nitems;
  /* the output part (root's old op is parts[np-1]'s) first: its bytes go there */
  for (uint32_t k = np; k-- > 0;) {
    uint16_t grp = group_of(p, st->tasks[parts[k]].op);
    if (grp == SCHED_PGROUP_MAX) {
      p->nitems = first;
      return TSR_ENOMEM;
    }
    item_add(p, first, grp, 1);
  }
  uint32_t c = same_composite(p, first, p->nitems - first);
  if (c != SCHED_NONE) p->nitems = first;
  else if (p->ncomps >= SCHED_PGROUP_MAX) {
    p->nitems = first;
    return TSR_ENOMEM;
  } else {
    c = p->ncomps++;
    p->comps[c] = (sched_pcomposite){first, p->nitems - first};
  }
  st->tasks[root].pgroup = (uint16_t)(SCHED_PGROUP_COMPOSITE | c);
  return 0;
}

/* Adds parts to the totals of the groups a task counts in. */
static void count_total(sched_progress *p, uint16_t pgroup, uint32_t weight)
{
  p->n.total += weight;
  if (pgroup & SCHED_PGROUP_COMPOSITE) {
    const sched_pcomposite *k = &p->comps[pgroup & SCHED_PGROUP_MAX];
    for (uint32_t i = 0; i < k->n; i++) p->groups[p->items[k->first + i].group].n.total += p->items[k->first + i].parts;
  } else if (pgroup < p->ngroups) {
    p->groups[pgroup].n.total += weight;
  }
}

void sched_progress_admit(sched_state *st, uint32_t g, const uint32_t *fresh, uint32_t nfresh)
{
  sched_progress *p = progress_of(st, g);
  if (p == NULL) {
    TSR_WARN("out of memory for the progress of graph %llu: it reports none", (unsigned long long)st->graphs[g]->graph_id);
    return;
  }
  for (uint32_t k = 0; k < nfresh; k++) {
    sched_task *t = &st->tasks[fresh[k]];
    bool composite = sched_task_fused_parts(t) > 0 && (t->pgroup & SCHED_PGROUP_COMPOSITE);
    if (!composite) t->pgroup = group_of(p, t->op);  /* SCHED_PGROUP_MAX: counted in the graph only */
    count_total(p, t->pgroup, sched_task_weight(t));
  }
  p->dirty = true;
}

/* The counter of state s, NULL for states that count nowhere (NEW, FREE). */
static uint32_t *slot(sched_pcounts *n, int s)
{
  switch (s) {
  case TS_WAITING: case TS_READY: case TS_LOST: return &n->waiting;
  case TS_QUEUED: case TS_PROCESSING: return &n->processing;
  case TS_MEMORY: case TS_RELEASED: return &n->done;
  case TS_ERRED: return &n->erred;
  default: return NULL;
  }
}

static void move(sched_pcounts *n, int from, int to, uint32_t weight, uint64_t bytes)
{
  uint32_t *a = slot(n, from), *b = slot(n, to);
  if (a != NULL) *a -= weight;
  if (b != NULL) *b += weight;
  n->bytes_done += bytes;
}

void sched_progress_busy(sched_state *st, uint32_t id, uint64_t duration_us)
{
  const sched_task *t = &st->tasks[id];
  if (t->graph == SCHED_NONE || st->graphs[t->graph]->progress == NULL) return;
  sched_progress *p = st->graphs[t->graph]->progress;
  p->n.busy_us += duration_us;
  if (t->pgroup & SCHED_PGROUP_COMPOSITE) {
    const sched_pcomposite *k = &p->comps[t->pgroup & SCHED_PGROUP_MAX];
    uint32_t weight = sched_task_weight(t) ? sched_task_weight(t) : 1;
    for (uint32_t i = 0; i < k->n; i++) {
      const sched_pitem *it = &p->items[k->first + i];
      p->groups[it->group].n.busy_us += duration_us * it->parts / weight;
    }
  } else if (t->pgroup < p->ngroups) {
    p->groups[t->pgroup].n.busy_us += duration_us;
  }
}

static bool complete(const sched_progress *p) { return p->n.done + p->n.erred >= p->n.total; }

static void emit(sched_state *st, uint32_t g);

void sched_progress_on_state(sched_state *st, uint32_t id, int from, int to)
{
  const sched_task *t = &st->tasks[id];
  if (t->graph == SCHED_NONE) return;
  sched_progress *p = st->graphs[t->graph]->progress;
  if (p == NULL) return;
  uint64_t bytes = to == TS_MEMORY ? t->nbytes : 0;
  move(&p->n, from, to, sched_task_weight(t), bytes);
  if (t->pgroup & SCHED_PGROUP_COMPOSITE) {
    const sched_pcomposite *k = &p->comps[t->pgroup & SCHED_PGROUP_MAX];
    for (uint32_t i = 0; i < k->n; i++) {
      const sched_pitem *it = &p->items[k->first + i];
      move(&p->groups[it->group].n, from, to, it->parts, i == 0 ? bytes : 0);
    }
  } else if (t->pgroup < p->ngroups) {
    move(&p->groups[t->pgroup].n, from, to, sched_task_weight(t), bytes);
  }
  p->dirty = true;
  if (!complete(p)) p->final_sent = false;
  else if (!p->final_sent && from != TS_NEW) emit(st, t->graph);  /* before this transition's key_done */
}

void sched_progress_admitted(sched_state *st, uint32_t g)
{
  sched_progress *p = st->graphs[g]->progress;
  if (p != NULL && complete(p) && !p->final_sent) emit(st, g);
}

/* The subscribed client of graph g's peer, or SCHED_NONE. */
static uint32_t subscriber(const sched_state *st, uint32_t g)
{
  uint32_t c = st->graphs[g]->client;
  if (c == SCHED_NONE || c >= st->nclients_slots) return SCHED_NONE;
  const sched_client *cl = &st->clients[c];
  return cl->alive && cl->progress ? cl->peer : SCHED_NONE;
}

static void pack_counts(msgpack_packer *pk, const sched_pcounts *n)
{
  msgpack_pack_uint32(pk, n->total);
  msgpack_pack_uint32(pk, n->waiting);
  msgpack_pack_uint32(pk, n->processing);
  msgpack_pack_uint32(pk, n->done);
  msgpack_pack_uint32(pk, n->erred);
  msgpack_pack_uint64(pk, n->bytes_done);
}

/* progress {graph, tasks_total, tasks_waiting, tasks_processing,
 * tasks_done, tasks_erred, bytes_done, groups: [[op, the same six]],
 * busy_us, groups_busy_us: [uint] (one per group, in groups' order)}.
 * Busy time rides in its own fields so clients that check a group's
 * seven entries keep working. */
static void emit(sched_state *st, uint32_t g)
{
  sched_progress *p = st->graphs[g]->progress;
  p->dirty = false;
  if (complete(p)) p->final_sent = true;
  uint32_t peer = subscriber(st, g);
  if (peer == SCHED_NONE) return;
  tsr_wbuf *wb = sched_out(st, peer);
  msgpack_packer *pk = &wb->pk;
  tsr_wbuf_begin(wb, "progress", 11);
  tsr_pack_kv_uint(pk, "graph", st->graphs[g]->graph_id);
  tsr_pack_kv_uint(pk, "tasks_total", p->n.total);
  tsr_pack_kv_uint(pk, "tasks_waiting", p->n.waiting);
  tsr_pack_kv_uint(pk, "tasks_processing", p->n.processing);
  tsr_pack_kv_uint(pk, "tasks_done", p->n.done);
  tsr_pack_kv_uint(pk, "tasks_erred", p->n.erred);
  tsr_pack_kv_uint(pk, "bytes_done", p->n.bytes_done);
  tsr_pack_str(pk, "groups");
  msgpack_pack_array(pk, p->ngroups);
  for (uint32_t i = 0; i < p->ngroups; i++) {
    msgpack_pack_array(pk, 7);
    tsr_pack_str(pk, st->ops[p->groups[i].op].name);
    pack_counts(pk, &p->groups[i].n);
  }
  tsr_pack_kv_uint(pk, "busy_us", p->n.busy_us);
  tsr_pack_str(pk, "groups_busy_us");
  msgpack_pack_array(pk, p->ngroups);
  for (uint32_t i = 0; i < p->ngroups; i++) msgpack_pack_uint64(pk, p->groups[i].n.busy_us);
}

uint32_t sched_progress_status_fields(const sched_graph *gr) { return gr->progress != NULL ? 2 : 0; }

void sched_progress_pack_status(const sched_state *st, msgpack_packer *pk, const sched_graph *gr)
{
  const sched_progress *p = gr->progress;
  if (p == NULL) return;
  tsr_pack_kv_uint(pk, "busy_us", p->n.busy_us);
  tsr_pack_str(pk, "groups");
  msgpack_pack_array(pk, p->ngroups);
  for (uint32_t i = 0; i < p->ngroups; i++) {
    const sched_pcounts *n = &p->groups[i].n;
    msgpack_pack_array(pk, 6);
    tsr_pack_str(pk, st->ops[p->groups[i].op].name);
    msgpack_pack_uint32(pk, n->total);
    msgpack_pack_uint32(pk, n->done);
    msgpack_pack_uint32(pk, n->erred);
    msgpack_pack_uint64(pk, n->busy_us);
    msgpack_pack_uint64(pk, n->bytes_done);
  }
}

void sched_progress_subscribe(sched_state *st, uint32_t c, bool on)
{
  st->clients[c].progress = on;
  if (!on) return;
  for (uint32_t g = 0; g < st->ngraphs; g++)
    if (st->graphs[g] != NULL && st->graphs[g]->client == c && st->graphs[g]->progress != NULL)
      st->graphs[g]->progress->dirty = true;
}

void sched_progress_tick(sched_state *st)
{
  for (uint32_t g = 0; g < st->ngraphs; g++) {
    const sched_graph *gr = st->graphs[g];
    if (gr == NULL || gr->pinned || gr->progress == NULL || !gr->progress->dirty) continue;
    if (subscriber(st, g) == SCHED_NONE) gr->progress->dirty = false;  /* nobody listens: nothing to send */
    else emit(st, g);
  }
}
