/* `tessera status --json`: the same cluster information as the tables, as
 * one JSON object for scripts and health checks (docs/deploy.md shows it).
 * Every field of tsr_worker_info / tsr_graph_info appears under its C
 * name; sizes are bytes, counts plain integers. Written with jansson
 * (already a dependency for Zarr metadata), which does the escaping. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tessera/tessera.h"

/* Names come from peers: kept byte for byte, not rejected for bad UTF-8. */
static json_t *str(const char *s)
{
  return json_stringn_nocheck(s, strlen(s));
}

static json_t *u64(uint64_t v)
{
  return json_integer((json_int_t)v);
}

/* The usage fields (docs/report.md), added to a worker's object. */
static void add_usage(json_t *o, const tsr_worker_info *w)
{
  json_object_set_new(o, "has_usage", json_boolean(w->has_usage));
  json_object_set_new(o, "cpu_us", u64(w->cpu_us));
  json_object_set_new(o, "memory_peak", u64(w->memory_peak));
  json_object_set_new(o, "disk_peak", u64(w->disk_peak));
  json_object_set_new(o, "device_memory_peak", u64(w->device_memory_peak));
  json_object_set_new(o, "fetch_bytes", u64(w->fetch_bytes));
  json_object_set_new(o, "fetch_us", u64(w->fetch_us));
  json_object_set_new(o, "gpu_memory_used", json_integer(w->gpu_memory_used));
  json_object_set_new(o, "gpu_power_mw", json_integer(w->gpu_power_mw));
}

static json_t *worker_json(const tsr_worker_info *w)
{
  json_t *o = json_pack("{s:o, s:o, s:o, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:o, s:o, s:o, s:b, s:o, s:o, s:o, s:o, "
                   "s:o, s:o}",
                   "name", str(w->name), "address", str(w->address), "device", str(w->device), "threads", w->threads,
                   "memory_used", u64(w->memory_used), "memory_limit", u64(w->memory_limit), "tasks_running",
                   u64(w->tasks_running), "tasks_done", u64(w->tasks_done), "gpu_name", str(w->gpu_name),
                   "device_memory_used", u64(w->device_memory_used), "device_memory_limit",
                   u64(w->device_memory_limit), "gpu_util", w->gpu_util, "disk_bytes", u64(w->disk_bytes),
                   "bytes_spilled", u64(w->bytes_spilled), "bytes_dropped", u64(w->bytes_dropped), "paused",
                   (int)w->paused, "memory_held", u64(w->memory_held), "disk_held", u64(w->disk_held),
                   "tasks_recomputed", u64(w->tasks_recomputed), "bytes_recomputed", u64(w->bytes_recomputed),
                   "device_bytes_moved", u64(w->device_bytes_moved), "device_bytes_dropped",
                   u64(w->device_bytes_dropped));
  if (o != NULL) add_usage(o, w);
  return o;
}

static json_t *graph_json(const tsr_graph_info *g)
{
  json_t *groups = json_array();
  for (size_t i = 0; i < g->n_groups; i++) {
    const tsr_graph_group *x = &g->groups[i];
    json_array_append_new(groups, json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "op", str(x->op), "tasks_total",
                                            u64(x->tasks_total), "tasks_done", u64(x->tasks_done), "tasks_erred",
                                            u64(x->tasks_erred), "busy_us", u64(x->busy_us), "bytes_done",
                                            u64(x->bytes_done)));
  }
  return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "client", str(g->client), "graph", u64(g->graph),
                   "tasks_total", u64(g->tasks_total), "tasks_done", u64(g->tasks_done), "tasks_erred",
                   u64(g->tasks_erred), "fused_tasks", u64(g->fused_tasks), "fused_parts", u64(g->fused_parts),
                   "busy_us", u64(g->busy_us), "groups", groups);
}

void cli_status_json(FILE *out, const char *address, const tsr_cluster_info *info)
{
  json_t *workers = json_array(), *graphs = json_array();
  for (size_t i = 0; i < info->n_workers; i++) json_array_append_new(workers, worker_json(&info->workers[i]));
  for (size_t i = 0; i < info->n_graphs; i++) json_array_append_new(graphs, graph_json(&info->graphs[i]));
  json_t *all = json_pack("{s:o, s:o, s:o, s:o}", "scheduler", str(address), "tasks_total", u64(info->tasks_total),
                          "workers", workers, "graphs", graphs);
  if (all == NULL || json_dumpf(all, out, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0) fputs("{}", out);
  fputc('\n', out);
  json_decref(all);
}
