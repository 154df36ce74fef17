/* The dashboard's hooks, tick and HTTP routes (dashboard.h). The hooks
 * run on the loop's hot path: array increments and one ring slot, with
 * arrays grown only when a new op or worker slot appears. */
#include "dash_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assets.h"
#include "progress.h"
#include "sched.h"

uint64_t sched_dash_wall_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---------- HTTP side (its own thread: reads the board only) ---------- */

static int serve_slot(void *arg, const tsr_http_request *req, tsr_http_reply *reply, unsigned slot,
                      const char *type)
{
  (void)req;
  tsr_board *board = arg;
  /* stale after a quiet spell: wait for the loop's next publish */
  int rc = tsr_board_copy(board, slot, SCHED_DASH_IDLE_MS / 2, 2000, &reply->body, &reply->len);
  reply->content_type = type;
  return rc;
}

#define JSON_TYPE "application/json"
static int serve_workers(void *a, const tsr_http_request *r, tsr_http_reply *o) { return serve_slot(a, r, o, DASH_WORKERS, JSON_TYPE); }
static int serve_tasks(void *a, const tsr_http_request *r, tsr_http_reply *o) { return serve_slot(a, r, o, DASH_TASKS, JSON_TYPE); }
static int serve_graphs(void *a, const tsr_http_request *r, tsr_http_reply *o) { return serve_slot(a, r, o, DASH_GRAPHS, JSON_TYPE); }
static int serve_metrics(void *a, const tsr_http_request *r, tsr_http_reply *o)
{
  return serve_slot(a, r, o, DASH_METRICS, TSR_PROM_CONTENT_TYPE);
}

int sched_dash_open(sched_state *st, const char *address)
{
  sched_dash *d = calloc(1, sizeof *d);
  if (d == NULL || (d->board = tsr_board_new(DASH_NSLOTS)) == NULL ||
      (d->ring = calloc(DASH_RING, sizeof *d->ring)) == NULL) {
    if (d) tsr_board_destroy(&d->board);
    free(d);
    return TSR_ENOMEM;
  }
  tsr_http_route routes[16];
  size_t n = tsr_http_asset_routes(routes, 10);
  routes[n++] = (tsr_http_route){"/api/workers", serve_workers, d->board};
  routes[n++] = (tsr_http_route){"/api/tasks", serve_tasks, d->board};
  routes[n++] = (tsr_http_route){"/api/graphs", serve_graphs, d->board};
  routes[n++] = (tsr_http_route){"/metrics", serve_metrics, d->board};
  tsr_errbuf err = {{0}};
  if (tsr_http_start(address, routes, n, &d->http, &err) != 0) {
    TSR_WARN("no dashboard: %s (--dashboard HOST:PORT picks another, --no-dashboard turns it off)", err.text);
    tsr_board_destroy(&d->board);
    free(d->ring);
    free(d);
    return 0;
  }
  TSR_INFO("dashboard on http://%s/ (metrics at /metrics)", tsr_http_address(d->http));
  st->dash = d;
  return 0;
}

void sched_dash_close(sched_state *st)
{
  sched_dash *d = st->dash;
  if (d == NULL) return;
  tsr_http_stop(&d->http);   /* first: no request reads the board after this */
  tsr_board_destroy(&d->board);
  free(d->ops);
  free(d->workers);
  free(d->ring);
  free(d->groups);
  free(d);
  st->dash = NULL;
}

static void publish(sched_dash *d, unsigned slot, char *text, size_t len, uint64_t now_ms)
{
  if (text != NULL) tsr_board_publish(d->board, slot, text, len, now_ms);
}

void sched_dash_tick(sched_state *st, uint64_t now_ms)
{
  sched_dash *d = st->dash;
  if (d == NULL || now_ms < d->next_publish_ms) return;
  d->next_publish_ms = now_ms + SCHED_DASH_PERIOD_MS;
  if (!tsr_board_wanted(d->board, now_ms, SCHED_DASH_IDLE_MS)) return;
  uint64_t t0 = tsr_now_us();
  size_t len = 0;
  char *text = sched_dash_workers_json(st, now_ms, &len);
  publish(d, DASH_WORKERS, text, len, now_ms);
  text = sched_dash_tasks_json(st, &len);
  publish(d, DASH_TASKS, text, len, now_ms);
  text = sched_dash_graphs_json(st, &len);
  publish(d, DASH_GRAPHS, text, len, now_ms);
  d->snapshots++;
  d->build_us += tsr_now_us() - t0;   /* before the metrics: they report it */
  text = sched_dash_metrics_text(st, now_ms, &len);
  publish(d, DASH_METRICS, text, len, now_ms);
  /* A million tasks take tens of ms to count: space snapshots so that
   * building them stays under 1/SCHED_DASH_MAX_SHARE of the loop's time. */
  uint64_t spent_ms = (tsr_now_us() - t0) / 1000;
  if (spent_ms * SCHED_DASH_MAX_SHARE > SCHED_DASH_PERIOD_MS) d->next_publish_ms = now_ms + spent_ms * SCHED_DASH_MAX_SHARE;
}

/* ---------- counters (the loop's thread) ---------- */

static dash_op *op_counters(sched_dash *d, uint16_t op)
{
  if (op >= d->nops) {
    uint32_t n = d->nops ? d->nops : 16;
    while (n <= op) n *= 2;
    dash_op *ops = realloc(d->ops, n * sizeof *ops);
    if (ops == NULL) return NULL;
    memset(ops + d->nops, 0, (n - d->nops) * sizeof *ops);
    d->ops = ops;
    d->nops = n;
  }
  return &d->ops[op];
}

dash_worker *sched_dash_worker(sched_state *st, uint32_t w)
{
  sched_dash *d = st->dash;
  if (w >= d->nworkers) {
    uint32_t n = d->nworkers ? d->nworkers : 16;
    while (n <= w) n *= 2;
    dash_worker *ws = realloc(d->workers, n * sizeof *ws);
    if (ws == NULL) return NULL;
    memset(ws + d->nworkers, 0, (n - d->nworkers) * sizeof *ws);
    d->workers = ws;
    d->nworkers = n;
  }
  dash_worker *dw = &d->workers[w];
  if (dw->peer_id != st->workers[w].peer_id) {
    memset(dw, 0, sizeof *dw);
    dw->peer_id = st->workers[w].peer_id;
    dw->gpu_mem_used = dw->gpu_mem_total = dw->gpu_power_mw = -1;
  }
  return dw;
}

static uint32_t group_hash(uint32_t graph_slot, uint16_t op, uint32_t cap)
{
  return (uint32_t)((((uint64_t)graph_slot << 16 | op) * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static bool group_alive(const sched_state *st, const dash_group *g)
{
  const sched_graph *gr = g->graph_slot < st->ngraphs ? st->graphs[g->graph_slot] : NULL;
  return gr != NULL && gr->graph_id == g->graph_id;
}

/* Rehashes into cap entries, keeping live groups only when st is given. */
static int rehash_groups(sched_dash *d, uint32_t cap, const sched_state *st)
{
  dash_group *g = malloc(cap * sizeof *g);
  if (g == NULL) return TSR_ENOMEM;
  for (uint32_t i = 0; i < cap; i++) g[i].graph_slot = SCHED_NONE;
  d->ngroups = 0;
  for (uint32_t i = 0; i < d->cap_groups; i++) {
    if (d->groups[i].graph_slot == SCHED_NONE || (st != NULL && !group_alive(st, &d->groups[i]))) continue;
    d->ngroups++;
    uint32_t h = group_hash(d->groups[i].graph_slot, d->groups[i].op, cap);
    while (g[h].graph_slot != SCHED_NONE) h = (h + 1) & (cap - 1);
    g[h] = d->groups[i];
  }
  free(d->groups);
  d->groups = g;
  d->cap_groups = cap;
  return 0;
}

static int grow_groups(sched_dash *d) { return rehash_groups(d, d->cap_groups ? d->cap_groups * 2 : 256, NULL); }

void sched_dash_prune_groups(sched_state *st)
{
  if (st->dash->cap_groups > 0) rehash_groups(st->dash, st->dash->cap_groups, st);
}

dash_group *sched_dash_group(sched_state *st, uint32_t graph_slot, uint16_t op)
{
  sched_dash *d = st->dash;
  const sched_graph *gr = graph_slot < st->ngraphs ? st->graphs[graph_slot] : NULL;
  if (gr == NULL) return NULL;
  if ((d->ngroups + 1) * 2 > d->cap_groups && grow_groups(d) != 0) return NULL;
  uint32_t h = group_hash(graph_slot, op, d->cap_groups);
  for (;; h = (h + 1) & (d->cap_groups - 1)) {
    dash_group *g = &d->groups[h];
    if (g->graph_slot == SCHED_NONE) {
      *g = (dash_group){.graph_id = gr->graph_id, .graph_slot = graph_slot, .op = op};
      d->ngroups++;
      return g;
    }
    if (g->graph_slot != graph_slot || g->op != op) continue;
    if (g->graph_id != gr->graph_id) *g = (dash_group){.graph_id = gr->graph_id, .graph_slot = graph_slot, .op = op};  /* slot reused */
    return g;
  }
}

void sched_dash_count(sched_state *st, const sched_task *t, dash_count_fn *count, void *arg)
{
  const sched_graph *gr = t->graph < st->ngraphs ? st->graphs[t->graph] : NULL;
  const sched_progress *p = gr != NULL ? gr->progress : NULL;
  uint32_t comp = t->pgroup & SCHED_PGROUP_MAX;
  if (p != NULL && sched_task_fused_parts(t) > 0 && (t->pgroup & SCHED_PGROUP_COMPOSITE) && comp < p->ncomps) {
    const sched_pcomposite *k = &p->comps[comp];
    for (uint32_t i = 0; i < k->n; i++) {
      const sched_pitem *item = &p->items[k->first + i];
      dash_group *g = item->group < p->ngroups ? sched_dash_group(st, t->graph, p->groups[item->group].op) : NULL;
      if (g != NULL) count(g, item->parts, arg);
    }
    return;
  }
  dash_group *g = sched_dash_group(st, t->graph, t->op);
  if (g != NULL) count(g, sched_task_weight(t), arg);
}

static void count_done(dash_group *g, uint32_t n, void *arg)
{
  (void)arg;
  g->done += n;
}

static void count_erred(dash_group *g, uint32_t n, void *arg)
{
  (void)arg;
  g->erred += n;
}

void sched_dash_task_done(sched_state *st, uint32_t id, uint32_t w, uint64_t duration_us, uint64_t start_us,
                          uint32_t lane)
{
  sched_dash *d = st->dash;
  if (d == NULL) return;
  const sched_task *t = &st->tasks[id];
  double seconds = (double)duration_us / 1e6;
  dash_op *op = op_counters(d, t->op);
  if (op != NULL) {
    op->done++;
    tsr_hist_add(&op->duration, seconds);
  }
  dash_worker *dw = sched_dash_worker(st, w);
  if (dw != NULL) dw->done++;
  d->tasks_done++;
  /* a recomputation is not progress: the group counted it the first time */
  if (!(t->evict & SCHED_EV_RAN)) sched_dash_count(st, t, count_done, NULL);
  if (start_us == 0) start_us = sched_dash_wall_us() - duration_us;
  d->ring[d->nevents++ & (DASH_RING - 1)] =
    (dash_event){start_us, duration_us > UINT32_MAX ? UINT32_MAX : (uint32_t)duration_us, (uint16_t)w, t->op, lane,
                 st->workers[w].peer_id};
}

void sched_dash_task_erred(sched_state *st, uint32_t id)
{
  sched_dash *d = st->dash;
  if (d == NULL) return;
  const sched_task *t = &st->tasks[id];
  dash_op *op = op_counters(d, t->op);
  if (op != NULL) op->erred++;
  d->tasks_erred++;
  sched_dash_count(st, t, count_erred, NULL);
}

/* An optional uint field as a gauge: -1 when absent (UINT64_MAX). */
static int64_t as_gauge(uint64_t v)
{
  return v == UINT64_MAX ? -1 : v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

void sched_dash_heartbeat(sched_state *st, uint32_t w, const msgpack_object *map)
{
  if (st->dash == NULL) return;
  dash_worker *dw = sched_dash_worker(st, w);
  if (dw == NULL) return;
  uint64_t now = tsr_now_ms();
  if (dw->last_beat_ms != 0) tsr_hist_add(&st->dash->heartbeat_gap, (double)(now - dw->last_beat_ms) / 1e3);
  dw->last_beat_ms = now;
  uint64_t used, total, power;
  tsr_errbuf err = {{0}};
  int rc = tsr_wire_opt_uint(map, "gpu_memory_used", UINT64_MAX, &used, &err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "gpu_memory_total", UINT64_MAX, &total, &err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "gpu_power_mw", UINT64_MAX, &power, &err);
  if (rc != 0) {
    TSR_WARN("worker '%s': heartbeat's NVML fields ignored: %s", st->workers[w].name, err.text);
    return;
  }
  dw->gpu_mem_used = as_gauge(used);
  dw->gpu_mem_total = as_gauge(total);
  dw->gpu_power_mw = as_gauge(power);
}
