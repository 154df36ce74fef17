/* `tessera status`: asks a scheduler for its workers and graphs in flight
 * and prints them as two tables. Column widths follow the content. */
#include <getopt.h>
#include <stdbool.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tessera/tessera.h"
#include "util/util.h"

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tessera status --scheduler ADDR [--timeout DUR] [--json]\n"
          "  --scheduler ADDR  tcp://HOST:PORT (default: $TESSERA_SCHEDULER, else $TESSERA_SCHEDULER_ADDRESS)\n"
          "  --timeout DUR     how long to wait for the scheduler (default 5s)\n"
          "  --json            one JSON object instead of the tables (docs/deploy.md)\n");
}

#define NCOLS_W 7
#define NCOLS_GPU 3
#define NCOLS_TIERS 2  /* ON DISK / SPILLED / DROPPED, RECOMPUTED */
#define CELL 96

typedef struct table {
  size_t rows, cols;
  char (*cells)[CELL];
  int width[NCOLS_W + NCOLS_GPU + NCOLS_TIERS];
} table;

static int table_init(table *t, size_t rows, size_t cols)
{
  memset(t, 0, sizeof *t);
  t->rows = rows;
  t->cols = cols;
  t->cells = calloc(rows * cols, CELL);
  return t->cells ? 0 : -1;
}

static void table_set(table *t, size_t r, size_t c, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void table_set(table *t, size_t r, size_t c, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->cells[r * t->cols + c], CELL, fmt, ap);
  va_end(ap);
  int len = (int)strlen(t->cells[r * t->cols + c]);
  if (len > t->width[c]) t->width[c] = len;
}

static void table_print(const table *t)
{
  for (size_t r = 0; r < t->rows; r++) {
    for (size_t c = 0; c < t->cols; c++)
      printf(c + 1 < t->cols ? "%-*s  " : "%-*s", c + 1 < t->cols ? t->width[c] : 0, t->cells[r * t->cols + c]);
    printf("\n");
  }
  free(t->cells);
}

/* A GPU worker's columns: device name, device memory, utilization. */
static void set_gpu_cells(table *t, size_t r, const tsr_worker_info *w)
{
  if (w->gpu_name[0] == '\0' && w->device_memory_limit == 0) {
    for (size_t c = NCOLS_W; c < NCOLS_W + NCOLS_GPU; c++) table_set(t, r, c, "-");
    return;
  }
  char used[32], limit[32], moved[32], dropped[32], tier[96] = "";
  table_set(t, r, NCOLS_W, "%s", w->gpu_name[0] ? w->gpu_name : "?");
  /* The device tier's moves, once there were any (docs/gpu.md). */
  if (w->device_bytes_moved || w->device_bytes_dropped)
    snprintf(tier, sizeof tier, " (%s to host, %s dropped)", tsr_format_bytes(w->device_bytes_moved, moved, sizeof moved),
             tsr_format_bytes(w->device_bytes_dropped, dropped, sizeof dropped));
  table_set(t, r, NCOLS_W + 1, "%s / %s%s", tsr_format_bytes(w->device_memory_used, used, sizeof used),
            tsr_format_bytes(w->device_memory_limit, limit, sizeof limit), tier);
  if (w->gpu_util >= 0) table_set(t, r, NCOLS_W + 2, "%d%%", w->gpu_util);
  else table_set(t, r, NCOLS_W + 2, "n/a");
}

/* A memory-limited worker's tiers: on disk now, spilled and dropped since
 * it started (docs/memory.md); then what the scheduler recomputed on it. */
static void set_tier_cells(table *t, size_t r, size_t c, const tsr_worker_info *w)
{
  char disk[32], spilled[32], dropped[32], recomputed[32];
  table_set(t, r, c, "%s / %s / %s%s", tsr_format_bytes(w->disk_bytes, disk, sizeof disk),
            tsr_format_bytes(w->bytes_spilled, spilled, sizeof spilled),
            tsr_format_bytes(w->bytes_dropped, dropped, sizeof dropped), w->paused ? " (paused)" : "");
  table_set(t, r, c + 1, "%" PRIu64 " / %s", w->tasks_recomputed,
            tsr_format_bytes(w->bytes_recomputed, recomputed, sizeof recomputed));
}

static void print_workers(const tsr_cluster_info *info)
{
  table t;
  bool gpus = false;
  for (size_t i = 0; i < info->n_workers; i++)
    gpus |= info->workers[i].gpu_name[0] != '\0' || info->workers[i].device_memory_limit != 0;
  bool tiers = false;
  for (size_t i = 0; i < info->n_workers; i++) tiers |= info->workers[i].memory_limit != 0;
  size_t cols = NCOLS_W + (gpus ? NCOLS_GPU : 0) + (tiers ? NCOLS_TIERS : 0);
  if (table_init(&t, info->n_workers + 1, cols) != 0) return;
  const char *head[NCOLS_W + NCOLS_GPU] = {"WORKER", "ADDRESS", "DEVICE", "THREADS", "MEMORY USED / LIMIT", "RUNNING",
                                           "DONE", "GPU", "DEVICE MEMORY USED / LIMIT", "GPU UTIL"};
  for (size_t c = 0; c < cols - (tiers ? NCOLS_TIERS : 0); c++) table_set(&t, 0, c, "%s", head[c]);
  if (tiers) table_set(&t, 0, cols - 2, "ON DISK / SPILLED / DROPPED");
  if (tiers) table_set(&t, 0, cols - 1, "RECOMPUTED TASKS / BYTES");
  for (size_t i = 0; i < info->n_workers; i++) {
    const tsr_worker_info *w = &info->workers[i];
    char used[32], limit[32];
    tsr_format_bytes(w->memory_used, used, sizeof used);
    if (w->memory_limit) tsr_format_bytes(w->memory_limit, limit, sizeof limit);
    else snprintf(limit, sizeof limit, "none");
    table_set(&t, i + 1, 0, "%s", w->name);
    table_set(&t, i + 1, 1, "%s", w->address);
    table_set(&t, i + 1, 2, "%s", w->device);
    table_set(&t, i + 1, 3, "%d", w->threads);
    table_set(&t, i + 1, 4, "%s / %s", used, limit);
    table_set(&t, i + 1, 5, "%" PRIu64, w->tasks_running);
    table_set(&t, i + 1, 6, "%" PRIu64, w->tasks_done);
    if (gpus) set_gpu_cells(&t, i + 1, w);
    if (tiers) set_tier_cells(&t, i + 1, cols - 2, w);
  }
  table_print(&t);
}

static void print_graphs(const tsr_cluster_info *info)
{
  table t;
  if (table_init(&t, info->n_graphs + 1, 5) != 0) return;
  const char *head[5] = {"CLIENT", "GRAPH", "DONE / TOTAL", "ERRED", "FUSED"};
  for (size_t c = 0; c < 5; c++) table_set(&t, 0, c, "%s", head[c]);
  for (size_t i = 0; i < info->n_graphs; i++) {
    const tsr_graph_info *g = &info->graphs[i];
    table_set(&t, i + 1, 0, "%s", g->client);
    table_set(&t, i + 1, 1, "%" PRIu64, g->graph);
    table_set(&t, i + 1, 2, "%" PRIu64 " / %" PRIu64, g->tasks_done, g->tasks_total);
    table_set(&t, i + 1, 3, "%" PRIu64, g->tasks_erred);
    /* the tasks counted by their parts above ran as this many tasks */
    if (g->fused_tasks > 0)
      table_set(&t, i + 1, 4, "%" PRIu64 " task%s of %" PRIu64 " parts", g->fused_tasks, g->fused_tasks == 1 ? "" : "s",
                g->fused_parts);
    else
      table_set(&t, i + 1, 4, "-");
  }
  table_print(&t);
}

static void print_info(const char *address, const tsr_cluster_info *info)
{
  printf("scheduler %s: %zu worker%s, %zu graph%s in flight, %" PRIu64 " tasks held\n\n", address, info->n_workers,
         info->n_workers == 1 ? "" : "s", info->n_graphs, info->n_graphs == 1 ? "" : "s", info->tasks_total);
  if (info->n_workers > 0) print_workers(info);
  else printf("(no workers connected)\n");
  printf("\n");
  if (info->n_graphs > 0) print_graphs(info);
  else printf("(no graphs in flight)\n");
}

/* Parses the flags; returns -1 to go on, or an exit code. */
static int parse(int argc, char **argv, const char **address_p, uint64_t *timeout_p, bool *json_p)
{
  static const struct option longs[] = {
    {"scheduler", required_argument, NULL, 's'},
    {"timeout", required_argument, NULL, 't'},
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  int opt;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
    if (opt == 's') *address_p = optarg;
    else if (opt == 'j') *json_p = true;
    else if (opt == 't' && tsr_parse_duration_ms(optarg, timeout_p) != 0)
      return cli_error(CLI_EXIT_USAGE, "status: --timeout '%s' is not a duration (e.g. 500ms, 5s)", optarg);
    else if (opt == 'h') {
      usage(stdout);
      return 0;
    } else if (opt == '?') {
      cli_error(CLI_EXIT_USAGE, "status: bad flag '%s'", argv[optind - 1]);
      usage(stderr);
      return CLI_EXIT_USAGE;
    }
  }
  if (optind < argc) return cli_error(CLI_EXIT_USAGE, "status: unexpected argument '%s'", argv[optind]);
  if (*address_p == NULL || (*address_p)[0] == '\0')
    return cli_error(CLI_EXIT_USAGE, "status: --scheduler ADDR is required (or set TESSERA_SCHEDULER)");
  if (*timeout_p == 0 || *timeout_p > 3600000) *timeout_p = 5000;
  return -1;
}

int cli_status(int argc, char **argv)
{
  const char *address = cli_default_scheduler(NULL);
  uint64_t timeout = 5000;
  bool json = false;
  int code = parse(argc, argv, &address, &timeout, &json);
  if (code >= 0) return code;
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.name = "tessera-status";
  opts.connect_timeout_ms = (int)timeout;
  tsr_client *client = NULL;
  tsr_cluster_info *info = NULL;
  int rc = tsr_client_open(&client, address, &opts);
  if (rc == 0) rc = tsr_cluster_info_get(client, (int)timeout, &info);
  if (rc != 0) {
    cli_error(CLI_EXIT_FAIL, "status: %s", tsr_errmsg());
    tsr_client_close(client);
    return CLI_EXIT_FAIL;
  }
  if (json) cli_status_json(stdout, address, info);
  else print_info(address, info);
  tsr_cluster_info_destroy(&info);
  tsr_client_close(client);
  return 0;
}
