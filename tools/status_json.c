/* `tessera status --json`: the same cluster information as the tables, as
 * one JSON object for scripts and health checks (docs/deploy.md shows it).
 * Every field of tsr_worker_info / tsr_graph_info appears under its C
 * name; sizes are bytes, counts plain integers. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "tessera/tessera.h"

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_str(FILE *out, const char *s)
{
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else if (*p < 0x20) fprintf(out, "\\u%04x", *p);
    else fputc(*p, out);
  }
  fputc('"', out);
}

static void put_key_str(FILE *out, const char *key, const char *value, const char *sep)
{
  fprintf(out, "\"%s\": ", key);
  put_str(out, value);
  fputs(sep, out);
}

static void put_key_u64(FILE *out, const char *key, uint64_t value, const char *sep)
{
  fprintf(out, "\"%s\": %" PRIu64 "%s", key, value, sep);
}

static void put_worker(FILE *out, const tsr_worker_info *w)
{
  fputs("{", out);
  put_key_str(out, "name", w->name, ", ");
  put_key_str(out, "address", w->address, ", ");
  put_key_str(out, "device", w->device, ", ");
  fprintf(out, "\"threads\": %d, ", w->threads);
  put_key_u64(out, "memory_used", w->memory_used, ", ");
  put_key_u64(out, "memory_limit", w->memory_limit, ", ");
  put_key_u64(out, "tasks_running", w->tasks_running, ", ");
  put_key_u64(out, "tasks_done", w->tasks_done, ", ");
  put_key_str(out, "gpu_name", w->gpu_name, ", ");
  put_key_u64(out, "device_memory_used", w->device_memory_used, ", ");
  put_key_u64(out, "device_memory_limit", w->device_memory_limit, ", ");
  fprintf(out, "\"gpu_util\": %d, ", w->gpu_util);
  put_key_u64(out, "disk_bytes", w->disk_bytes, ", ");
  put_key_u64(out, "bytes_spilled", w->bytes_spilled, ", ");
  put_key_u64(out, "bytes_dropped", w->bytes_dropped, ", ");
  fprintf(out, "\"paused\": %s, ", w->paused ? "true" : "false");
  put_key_u64(out, "memory_held", w->memory_held, ", ");
  put_key_u64(out, "disk_held", w->disk_held, ", ");
  put_key_u64(out, "tasks_recomputed", w->tasks_recomputed, ", ");
  put_key_u64(out, "bytes_recomputed", w->bytes_recomputed, ", ");
  put_key_u64(out, "device_bytes_moved", w->device_bytes_moved, ", ");
  put_key_u64(out, "device_bytes_dropped", w->device_bytes_dropped, "}");
}

static void put_graph(FILE *out, const tsr_graph_info *g)
{
  fputs("{", out);
  put_key_str(out, "client", g->client, ", ");
  put_key_u64(out, "graph", g->graph, ", ");
  put_key_u64(out, "tasks_total", g->tasks_total, ", ");
  put_key_u64(out, "tasks_done", g->tasks_done, ", ");
  put_key_u64(out, "tasks_erred", g->tasks_erred, ", ");
  put_key_u64(out, "fused_tasks", g->fused_tasks, ", ");
  put_key_u64(out, "fused_parts", g->fused_parts, "}");
}

void cli_status_json(FILE *out, const char *address, const tsr_cluster_info *info)
{
  fputs("{", out);
  put_key_str(out, "scheduler", address, ", ");
  put_key_u64(out, "tasks_total", info->tasks_total, ", ");
  fputs("\"workers\": [", out);
  for (size_t i = 0; i < info->n_workers; i++) {
    fputs(i ? ",\n  " : "\n  ", out);
    put_worker(out, &info->workers[i]);
  }
  fputs("],\n\"graphs\": [", out);
  for (size_t i = 0; i < info->n_graphs; i++) {
    fputs(i ? ",\n  " : "\n  ", out);
    put_graph(out, &info->graphs[i]);
  }
  fputs("]}\n", out);
}
