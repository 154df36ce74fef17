/* The dashboard API's JSON (docs/dashboard.md), built with jansson from
 * the state and the dashboard's counters on the loop's thread, only when
 * a snapshot is due and wanted (dashboard.c). Names come from peers:
 * kept byte for byte (json_stringn_nocheck), jansson escapes them. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "dash_int.h"
#include "sched.h"

static json_t *str(const char *s) { return json_stringn_nocheck(s, strlen(s)); }
static json_t *u64(uint64_t v) { return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v); }

static char *dump(json_t *root, size_t *len_p)
{
  char *text = root != NULL ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (text != NULL) *len_p = strlen(text);
  return text;
}

static void add_gpu(json_t *o, const sched_worker *w, const dash_worker *dw)
{
  json_object_set_new(o, "gpu_name", str(w->gpu_name));
  json_object_set_new(o, "device_memory_used", u64(w->device_memory_used));
  json_object_set_new(o, "device_memory_limit", u64(w->device_memory_limit));
  json_object_set_new(o, "device_bytes_moved", u64(w->device_bytes_moved));
  json_object_set_new(o, "device_bytes_dropped", u64(w->device_bytes_dropped));
  json_object_set_new(o, "gpu_util", w->gpu_util >= 0 ? json_integer(w->gpu_util) : json_null());
  bool nvml = dw != NULL && dw->gpu_mem_total >= 0;
  json_object_set_new(o, "gpu_memory_used", nvml ? json_integer(dw->gpu_mem_used) : json_null());
  json_object_set_new(o, "gpu_memory_total", nvml ? json_integer(dw->gpu_mem_total) : json_null());
  bool power = dw != NULL && dw->gpu_power_mw >= 0;
  json_object_set_new(o, "gpu_power_watts", power ? json_real((double)dw->gpu_power_mw / 1e3) : json_null());
}

static json_t *worker_json(sched_state *st, uint32_t i, uint64_t now_ms)
{
  const sched_worker *w = &st->workers[i];
  const dash_worker *dw = sched_dash_worker(st, i);
  uint64_t held_disk = w->held_disk <= w->bytes_held ? w->held_disk : w->bytes_held;
  json_t *o = json_pack("{s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o, s:o}",
                        "name", str(w->name), "address", str(w->address), "device", str(w->device), "threads",
                        (json_int_t)w->threads, "memory_used", u64(w->memory_used), "memory_limit",
                        u64(w->memory_limit), "disk_bytes", u64(w->disk_bytes), "bytes_spilled",
                        u64(w->bytes_spilled), "bytes_dropped", u64(w->bytes_dropped), "bytes_recomputed",
                        u64(w->bytes_recomputed), "tasks_recomputed", u64(w->tasks_recomputed), "tasks_running",
                        u64(w->nprocessing > w->tasks_running ? w->nprocessing : w->tasks_running), "tasks_done",
                        u64(w->tasks_done), "chunks", u64(w->chunks), "paused", (int)w->paused, "memory_held",
                        u64(w->bytes_held - held_disk), "disk_held", u64(held_disk), "heartbeat_age_ms",
                        u64(now_ms - st->peers[w->peer].last_seen_ms));
  if (o != NULL) add_gpu(o, w, dw);
  return o;
}

char *sched_dash_workers_json(sched_state *st, uint64_t now_ms, size_t *len_p)
{
  json_t *workers = json_array();
  for (uint32_t i = 0; i < st->nworkers_slots; i++)
    if (st->workers[i].alive) json_array_append_new(workers, worker_json(st, i, now_ms));
  return dump(json_pack("{s:I, s:o}", "now_ms", (json_int_t)(sched_dash_wall_us() / 1000), "workers", workers),
              len_p);
}

/* Index of name in the names table, appended when new. */
static json_int_t name_index(json_t *names, const char *name)
{
  size_t i;
  json_t *v;
  json_array_foreach(names, i, v) if (strcmp(json_string_value(v), name) == 0) return (json_int_t)i;
  json_array_append_new(names, str(name));
  return (json_int_t)json_array_size(names) - 1;
}

/* The ring's events of the last SCHED_DASH_STREAM_S seconds, newest last,
 * as rows [worker, lane, op, start_ms (from `since_ms`), duration_ms]. */
char *sched_dash_tasks_json(sched_state *st, size_t *len_p)
{
  const sched_dash *d = st->dash;
  uint64_t now_us = sched_dash_wall_us(), since_us = now_us - SCHED_DASH_STREAM_S * 1000000ull;
  uint64_t avail = d->nevents < DASH_RING ? d->nevents : DASH_RING;
  uint64_t n = avail < SCHED_DASH_STREAM_MAX ? avail : SCHED_DASH_STREAM_MAX;
  json_t *workers = json_array(), *ops = json_array(), *rows = json_array();
  for (uint64_t k = d->nevents - n; k < d->nevents; k++) {
    const dash_event *e = &d->ring[k & (DASH_RING - 1)];
    if (e->start_us + e->duration_us < since_us) continue;
    const sched_worker *w = &st->workers[e->worker];
    const char *wname = w->alive && w->peer_id == e->worker_peer ? w->name : "(gone)";
    json_int_t wi = name_index(workers, wname), oi = name_index(ops, st->ops[e->op].name);
    double start_ms = e->start_us >= since_us ? (double)(e->start_us - since_us) / 1e3 : 0.0;
    json_array_append_new(rows, json_pack("[I, I, I, f, f]", wi, e->lane == UINT32_MAX ? (json_int_t)-1 : (json_int_t)e->lane,
                                          oi, start_ms, (double)e->duration_us / 1e3));
  }
  return dump(json_pack("{s:I, s:I, s:I, s:o, s:o, s:[sssss], s:o}", "since_ms", (json_int_t)(since_us / 1000),
                        "now_ms", (json_int_t)(now_us / 1000), "seconds", (json_int_t)SCHED_DASH_STREAM_S, "workers",
                        workers, "ops", ops, "columns", "worker", "lane", "op", "start_ms", "duration_ms", "tasks",
                        rows),
              len_p);
}

static void count_live(dash_group *g, uint32_t n, void *arg)
{
  g->live[*(const int *)arg] += n;
}

/* Counts every live task record into its groups' `live` by state (a
 * recomputation in progress under TS_LOST; a fused task as its parts,
 * sched_dash_count) and sums, per graph slot, the bytes of its results in
 * memory (bytes_out, ngraphs entries). */
static void scan_tasks(sched_state *st, uint64_t *bytes_out)
{
  sched_dash *d = st->dash;
  for (uint32_t i = 0; i < d->cap_groups; i++) memset(d->groups[i].live, 0, sizeof d->groups[i].live);
  dash_group *g = NULL;
  uint32_t last_graph = SCHED_NONE;
  uint16_t last_op = 0;
  for (uint32_t id = 0; id < st->ntasks; id++) {
    const sched_task *t = &st->tasks[id];
    if (t->state == TS_FREE || t->state == TS_NEW || t->graph >= st->ngraphs) continue;
    bool pending = t->state >= TS_WAITING && t->state <= TS_PROCESSING;
    int state = pending && (t->evict & SCHED_EV_RAN) ? TS_LOST : t->state;
    if (t->state == TS_MEMORY) bytes_out[t->graph] += t->nbytes;
    if (sched_task_fused_parts(t) > 0) {
      sched_dash_count(st, t, count_live, &state);
      g = NULL;   /* it may have grown the table */
      continue;
    }
    /* neighbours in the table mostly share graph and op: one lookup a run
     * (no group is created or moved between two hits of the same pair) */
    if (g == NULL || t->graph != last_graph || t->op != last_op) {
      g = sched_dash_group(st, t->graph, t->op);
      last_graph = t->graph;
      last_op = t->op;
    }
    if (g != NULL) g->live[state]++;
  }
}

static json_t *group_json(const sched_state *st, const dash_group *g)
{
  const uint32_t *n = g->live;
  uint64_t pending = (uint64_t)n[TS_WAITING] + n[TS_READY] + n[TS_QUEUED] + n[TS_PROCESSING];
  return json_pack("{s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "op", str(st->ops[g->op].name),
                   "done", u64(g->done), "erred", u64(g->erred), "total", u64(g->done + g->erred + pending),
                   "waiting", (json_int_t)n[TS_WAITING], "ready", (json_int_t)n[TS_READY], "queued",
                   (json_int_t)n[TS_QUEUED], "processing", (json_int_t)n[TS_PROCESSING], "memory",
                   (json_int_t)n[TS_MEMORY], "released", (json_int_t)n[TS_RELEASED], "recomputing",
                   (json_int_t)n[TS_LOST]);
}

/* Adds src's counts into dst (same graph). */
static void group_merge(dash_group *dst, const dash_group *src)
{
  dst->done += src->done;
  dst->erred += src->erred;
  for (int s = 0; s < TS_COUNT; s++) dst->live[s] += src->live[s];
}

/* The graph's groups, one per op name: fused tasks count in their parts'
 * groups (sched_dash_count); one whose parts were not recorded (out of
 * memory at admission) keeps its own op id (fuse.c), named "fused", and
 * those are merged into one group. */
static json_t *graph_groups(const sched_state *st, uint32_t slot)
{
  const sched_dash *d = st->dash;
  dash_group *merged = NULL;
  size_t n = 0, cap = 0;
  for (uint32_t i = 0; i < d->cap_groups; i++) {
    const dash_group *g = &d->groups[i];
    if (g->graph_slot != slot) continue;
    size_t k = 0;
    while (k < n && strcmp(st->ops[merged[k].op].name, st->ops[g->op].name) != 0) k++;
    if (k == n) {
      if (n == cap) {
        dash_group *grown = realloc(merged, (cap = cap ? 2 * cap : 16) * sizeof *grown);
        if (grown == NULL) break;
        merged = grown;
      }
      merged[n++] = (dash_group){.graph_slot = slot, .op = g->op};
    }
    group_merge(&merged[k], g);
  }
  json_t *groups = json_array();
  for (size_t k = 0; k < n; k++) json_array_append_new(groups, group_json(st, &merged[k]));
  free(merged);
  return groups;
}

static json_t *graph_json(const sched_state *st, uint32_t slot, uint64_t bytes)
{
  const sched_graph *gr = st->graphs[slot];
  json_t *groups = graph_groups(st, slot);
  double progress = gr->ntasks ? (double)gr->ndone / (double)gr->ntasks : 0.0;
  return json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:o, s:f, s:o}", "client", str(gr->client_name), "graph",
                   u64(gr->graph_id), "tasks_total", (json_int_t)gr->ntasks, "tasks_done", (json_int_t)gr->ndone,
                   "tasks_erred", (json_int_t)gr->nerred, "fused_tasks", (json_int_t)gr->nfused, "fused_parts",
                   (json_int_t)gr->nfused_parts, "bytes", u64(bytes), "progress", progress, "groups", groups);
}

char *sched_dash_graphs_json(sched_state *st, size_t *len_p)
{
  sched_dash_prune_groups(st);
  uint64_t *bytes = calloc(st->ngraphs ? st->ngraphs : 1, sizeof *bytes);
  if (bytes == NULL) return NULL;
  scan_tasks(st, bytes);
  json_t *graphs = json_array();
  for (uint32_t g = 0; g < st->ngraphs; g++)
    if (st->graphs[g] != NULL) json_array_append_new(graphs, graph_json(st, g, bytes[g]));
  free(bytes);
  json_t *counts = json_object();
  for (int s = TS_WAITING; s < TS_COUNT; s++) json_object_set_new(counts, sched_tstate_name(s), u64(st->count_by_state[s]));
  return dump(json_pack("{s:I, s:I, s:o, s:o}", "now_ms", (json_int_t)(sched_dash_wall_us() / 1000), "tasks_total",
                        (json_int_t)((uint64_t)st->nlive + st->nfused_extra), "tasks_by_state", counts, "graphs",
                        graphs),
              len_p);
}
