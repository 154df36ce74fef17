/* The worker's /metrics (wmetrics.h): counters kept by the main thread,
 * the text written from them and the worker's state once a second while
 * polled. */
#include "wmetrics.h"

#include <stdlib.h>
#include <string.h>

#include "board.h"
#include "http.h"
#include "prom.h"
#include "worker_int.h"

typedef struct op_counts {
  char *name;
  uint64_t done, erred;
  tsr_hist duration;
} op_counts;

struct tsr_wmetrics {
  tsr_http *http;
  tsr_board *board;
  uint64_t next_publish_ms;
  tsr_strmap *op_index;     /* op name -> index in ops */
  op_counts *ops;
  size_t nops, cap_ops;
  uint64_t last_heard_ms;   /* last scheduler heartbeat, 0: none */
  tsr_hist heartbeat_gap;
};

static int serve(void *arg, const tsr_http_request *req, tsr_http_reply *reply)
{
  (void)req;
  reply->content_type = TSR_PROM_CONTENT_TYPE;
  return tsr_board_copy(arg, 0, 3 * WMETRICS_PERIOD_MS, 2000, &reply->body, &reply->len);
}

int tsr_wmetrics_open(const char *address, tsr_wmetrics **metrics_p, tsr_errbuf *err)
{
  tsr_wmetrics *m = calloc(1, sizeof *m);
  if (m == NULL || (m->board = tsr_board_new(1)) == NULL || (m->op_index = tsr_strmap_new(64)) == NULL) {
    if (m) tsr_board_destroy(&m->board);
    free(m);
    return tsr_fail(err, TSR_ENOMEM, "--metrics: out of memory");
  }
  tsr_http_route route = {"/metrics", serve, m->board};
  int rc = tsr_http_start(address, &route, 1, &m->http, err);
  if (rc != 0) {
    tsr_wmetrics_close(&m);
    return rc;
  }
  TSR_INFO("metrics on http://%s/metrics", tsr_http_address(m->http));
  *metrics_p = m;
  return 0;
}

void tsr_wmetrics_close(tsr_wmetrics **metrics_p)
{
  if (metrics_p == NULL || *metrics_p == NULL) return;
  tsr_wmetrics *m = *metrics_p;
  tsr_http_stop(&m->http);   /* first: no request reads the board after this */
  tsr_board_destroy(&m->board);
  tsr_strmap_destroy(&m->op_index);
  for (size_t i = 0; i < m->nops; i++) free(m->ops[i].name);
  free(m->ops);
  free(m);
  *metrics_p = NULL;
}

static op_counts *counts_for(tsr_wmetrics *m, const char *name)
{
  uint64_t i;
  size_t len = strlen(name);
  if (tsr_strmap_get(m->op_index, name, len, &i)) return &m->ops[i];
  if (m->nops == m->cap_ops) {
    size_t cap = m->cap_ops ? m->cap_ops * 2 : 32;
    op_counts *ops = realloc(m->ops, cap * sizeof *ops);
    if (ops == NULL) return NULL;
    m->ops = ops;
    m->cap_ops = cap;
  }
  op_counts *c = &m->ops[m->nops];
  memset(c, 0, sizeof *c);
  if ((c->name = strdup(name)) == NULL || tsr_strmap_put(m->op_index, name, len, m->nops) != 0) {
    free(c->name);
    return NULL;
  }
  m->nops++;
  return c;
}

void tsr_wmetrics_task(tsr_wmetrics *m, const tsr_wtask *task)
{
  if (m == NULL || (task->status != TSR_WTASK_DONE && task->status != TSR_WTASK_ERRED)) return;
  op_counts *c = counts_for(m, task->op_name ? task->op_name : "");
  if (c == NULL) return;
  if (task->status == TSR_WTASK_ERRED) {
    c->erred++;
    return;
  }
  c->done++;
  tsr_hist_add(&c->duration, (double)task->duration_us / 1e6);
}

void tsr_wmetrics_heard(tsr_wmetrics *m, uint64_t now_ms)
{
  if (m == NULL) return;
  if (m->last_heard_ms != 0) tsr_hist_add(&m->heartbeat_gap, (double)(now_ms - m->last_heard_ms) / 1e3);
  m->last_heard_ms = now_ms;
}

/* ---------- the text ---------- */

static void sample(tsr_text *t, const char *name, const char *type, const char *help, uint64_t v)
{
  tsr_prom_head(t, name, type, help);
  tsr_text_printf(t, "%s %llu\n", name, (unsigned long long)v);
}

static void sample_f(tsr_text *t, const char *name, const char *type, const char *help, double v)
{
  tsr_prom_head(t, name, type, help);
  tsr_text_printf(t, "%s %.6f\n", name, v);
}

static void op_metrics(tsr_text *t, const tsr_wmetrics *m)
{
  const char *names[2] = {"tessera_worker_tasks_completed_total", "tessera_worker_tasks_erred_total"};
  const char *helps[2] = {"Tasks this worker finished, by op.", "Tasks that failed on this worker, by op."};
  for (int k = 0; k < 2; k++) {
    tsr_prom_head(t, names[k], "counter", helps[k]);
    for (size_t i = 0; i < m->nops; i++) {
      tsr_text_printf(t, "%s{op=\"", names[k]);
      tsr_text_label(t, m->ops[i].name);
      tsr_text_printf(t, "\"} %llu\n", (unsigned long long)(k == 0 ? m->ops[i].done : m->ops[i].erred));
    }
  }
  tsr_prom_head(t, "tessera_worker_task_duration_seconds", "histogram", "Run time of this worker's tasks (fetches excluded), by op.");
  for (size_t i = 0; i < m->nops; i++) {
    if (m->ops[i].duration.count == 0) continue;
    tsr_text labels = {0};
    tsr_text_printf(&labels, "op=\"");
    tsr_text_label(&labels, m->ops[i].name);
    tsr_text_printf(&labels, "\"");
    if (!labels.failed) tsr_prom_hist(t, "tessera_worker_task_duration_seconds", labels.data, &m->ops[i].duration);
    tsr_text_free(&labels);
  }
}

static void tier_metrics(tsr_text *t, tsr_worker *w)
{
  tsr_tiers_stats tiers = {0};
  tsr_tiers *tr = tsr_wstore_tiers(w->store);
  if (tr != NULL) tsr_tiers_stats_get(tr, &tiers);
  tsr_prom_head(t, "tessera_worker_memory_bytes", "gauge", "Chunk bytes held, by tier.");
  tsr_text_printf(t, "tessera_worker_memory_bytes{tier=\"host\"} %llu\n", (unsigned long long)tsr_wstore_bytes(w->store));
  tsr_text_printf(t, "tessera_worker_memory_bytes{tier=\"disk\"} %llu\n", (unsigned long long)tiers.disk_bytes);
  if (w->gpu != NULL)
    tsr_text_printf(t, "tessera_worker_memory_bytes{tier=\"device\"} %llu\n", (unsigned long long)tsr_wgpu_used(w->gpu));
  tsr_prom_head(t, "tessera_worker_memory_limit_bytes", "gauge", "Limit per tier (0: none).");
  tsr_text_printf(t, "tessera_worker_memory_limit_bytes{tier=\"host\"} %llu\n", (unsigned long long)w->opts.memory_limit);
  tsr_text_printf(t, "tessera_worker_memory_limit_bytes{tier=\"disk\"} %llu\n", (unsigned long long)w->opts.tiers.disk_limit);
  if (w->gpu != NULL)
    tsr_text_printf(t, "tessera_worker_memory_limit_bytes{tier=\"device\"} %llu\n", (unsigned long long)tsr_wgpu_limit(w->gpu));
  sample(t, "tessera_worker_spilled_bytes_total", "counter", "Bytes written to spill files.", tiers.bytes_spilled);
  sample(t, "tessera_worker_loaded_bytes_total", "counter", "Bytes read back from spill files.", tiers.bytes_loaded);
  sample(t, "tessera_worker_dropped_bytes_total", "counter", "Bytes evicted by dropping (recomputed when needed).", tiers.bytes_dropped);
  sample_f(t, "tessera_worker_spill_write_seconds_total", "counter", "Time spent writing spill files.", tiers.write_us / 1e6);
  sample_f(t, "tessera_worker_spill_read_seconds_total", "counter", "Time spent loading spill files.", tiers.read_us / 1e6);
  sample(t, "tessera_worker_chunks", "gauge", "Chunks in the store.", tsr_wstore_count(w->store));
}

static void transfer_metrics(tsr_text *t, tsr_worker *w)
{
  tsr_wexec_fetch_stats f = {0};
  if (w->exec != NULL) tsr_wexec_fetch_stats_get(w->exec, &f);
  sample(t, "tessera_worker_fetches_total", "counter", "Inputs fetched from peers.", f.fetches);
  sample(t, "tessera_worker_fetch_failures_total", "counter", "Fetches that failed (missing, timed out, peer gone).", f.failures);
  sample(t, "tessera_worker_fetch_bytes_total", "counter", "Bytes of inputs fetched from peers.", f.bytes);
  sample_f(t, "tessera_worker_fetch_seconds_total", "counter", "Time spent fetching inputs from peers.", f.us / 1e6);
}

static void gpu_metrics(tsr_text *t, const tsr_worker *w)
{
  if (w->gpu == NULL) return;
  tsr_prom_head(t, "tessera_worker_device_memory_used_bytes", "gauge", "Bytes allocated from the device pool.");
  tsr_text_printf(t, "tessera_worker_device_memory_used_bytes %llu\n", (unsigned long long)tsr_wgpu_used(w->gpu));
  const tsr_nvml_stats *n = &w->nvml;
  if (n->util >= 0) sample_f(t, "tessera_worker_gpu_utilization_ratio", "gauge", "Fraction of the last NVML sample period a kernel ran.", n->util / 100.0);
  if (n->mem_total >= 0) {
    sample(t, "tessera_worker_gpu_memory_used_bytes", "gauge", "GPU memory in use on the device (NVML, every process).", (uint64_t)n->mem_used);
    sample(t, "tessera_worker_gpu_memory_total_bytes", "gauge", "GPU memory of the device (NVML).", (uint64_t)n->mem_total);
  }
  if (n->power_mw >= 0) sample_f(t, "tessera_worker_gpu_power_watts", "gauge", "GPU power draw (NVML).", n->power_mw / 1e3);
}

static void link_metrics(tsr_text *t, const tsr_worker *w, const tsr_wmetrics *m, uint64_t now_ms)
{
  sample(t, "tessera_worker_connected", "gauge", "1 while the worker is registered with the scheduler.", w->link == TSR_LINK_READY);
  sample_f(t, "tessera_worker_scheduler_silence_seconds", "gauge", "Time since the last message from the scheduler.",
           (double)(now_ms - w->last_heard_ms) / 1e3);
  tsr_prom_head(t, "tessera_worker_heartbeat_interval_seconds", "histogram", "Time between consecutive heartbeats from the scheduler.");
  tsr_prom_hist(t, "tessera_worker_heartbeat_interval_seconds", "", &m->heartbeat_gap);
}

static char *metrics_text(tsr_worker *w, uint64_t now_ms, size_t *len_p)
{
  tsr_wmetrics *m = w->metrics;
  tsr_text t = {0};
  tsr_prom_head(&t, "tessera_worker_info", "gauge", "Always 1; labels name the worker and its device.");
  tsr_text_printf(&t, "tessera_worker_info{worker=\"");
  tsr_text_label(&t, w->opts.name);
  tsr_text_printf(&t, "\",device=\"%s\"} 1\n", w->gpu ? "gpu" : "cpu");
  sample(&t, "tessera_worker_threads", "gauge", "Executor threads (CUDA streams on a GPU worker).", (uint64_t)w->opts.threads);
  sample(&t, "tessera_worker_tasks_running", "gauge", "Tasks running on the executor now.", w->exec ? tsr_wexec_running(w->exec) : 0);
  sample(&t, "tessera_worker_tasks_pending", "gauge", "Tasks received and not yet reported.", tsr_strmap_count(w->pending));
  sample(&t, "tessera_worker_tasks_done_total", "counter", "Tasks finished since start (heartbeat tasks_done).", w->tasks_done);
  op_metrics(&t, m);
  tier_metrics(&t, w);
  transfer_metrics(&t, w);
  gpu_metrics(&t, w);
  link_metrics(&t, w, m, now_ms);
  if (t.failed || t.data == NULL) {
    tsr_text_free(&t);
    return NULL;
  }
  *len_p = t.len;
  return t.data;
}

void tsr_wmetrics_tick(tsr_worker *w, uint64_t now_ms)
{
  tsr_wmetrics *m = w->metrics;
  if (m == NULL || now_ms < m->next_publish_ms) return;
  m->next_publish_ms = now_ms + WMETRICS_PERIOD_MS;
  if (!tsr_board_wanted(m->board, now_ms, WMETRICS_IDLE_MS)) return;
  size_t len = 0;
  char *text = metrics_text(w, now_ms, &len);
  if (text != NULL) tsr_board_publish(m->board, 0, text, len, now_ms);
}
