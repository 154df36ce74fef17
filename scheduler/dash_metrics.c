/* The scheduler's /metrics in Prometheus text format (docs/metrics.md
 * lists every metric). Built on the loop's thread with the snapshots
 * (dashboard.c); counters are the loop's plain integers. */
#include <stdlib.h>
#include <string.h>

#include "dash_int.h"
#include "sched.h"

/* `worker="NAME"` for the worker's samples. */
static void worker_label(tsr_text *t, const char *name)
{
  tsr_text_printf(t, "worker=\"");
  tsr_text_label(t, name);
  tsr_text_printf(t, "\"");
}

typedef uint64_t (*worker_value)(const sched_state *st, uint32_t w);

/* One metric with a sample per live worker. */
static void per_worker(tsr_text *t, const sched_state *st, const char *name, const char *type, const char *help,
                       worker_value value)
{
  tsr_prom_head(t, name, type, help);
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    if (!st->workers[w].alive) continue;
    tsr_text_printf(t, "%s{", name);
    worker_label(t, st->workers[w].name);
    tsr_text_printf(t, "} %llu\n", (unsigned long long)value(st, w));
  }
}

#define W(field) st->workers[w].field
static uint64_t v_threads(const sched_state *st, uint32_t w) { return W(threads); }
static uint64_t v_running(const sched_state *st, uint32_t w) { return W(nprocessing) > W(tasks_running) ? W(nprocessing) : W(tasks_running); }
static uint64_t v_done(const sched_state *st, uint32_t w) { return W(tasks_done); }
static uint64_t v_spilled(const sched_state *st, uint32_t w) { return W(bytes_spilled); }
static uint64_t v_dropped(const sched_state *st, uint32_t w) { return W(bytes_dropped); }
static uint64_t v_recomputed_b(const sched_state *st, uint32_t w) { return W(bytes_recomputed); }
static uint64_t v_recomputed_t(const sched_state *st, uint32_t w) { return W(tasks_recomputed); }
static uint64_t v_dev_moved(const sched_state *st, uint32_t w) { return W(device_bytes_moved); }
static uint64_t v_dev_dropped(const sched_state *st, uint32_t w) { return W(device_bytes_dropped); }
static uint64_t v_paused(const sched_state *st, uint32_t w) { return W(paused); }
static uint64_t v_chunks(const sched_state *st, uint32_t w) { return W(chunks); }

static void worker_counters(tsr_text *t, const sched_state *st)
{
  per_worker(t, st, "tessera_worker_threads", "gauge", "Executor threads (CUDA streams on a GPU worker).", v_threads);
  per_worker(t, st, "tessera_worker_tasks_running", "gauge", "Tasks in flight on the worker.", v_running);
  per_worker(t, st, "tessera_worker_tasks_done_total", "counter", "Tasks the worker finished since it started (its heartbeat).", v_done);
  per_worker(t, st, "tessera_worker_chunks", "gauge", "Chunks in the worker's store.", v_chunks);
  per_worker(t, st, "tessera_worker_spilled_bytes_total", "counter", "Bytes written to spill files since the worker started.", v_spilled);
  per_worker(t, st, "tessera_worker_dropped_bytes_total", "counter", "Bytes evicted by dropping (recomputed when needed).", v_dropped);
  per_worker(t, st, "tessera_worker_recomputed_bytes_total", "counter", "Output bytes of tasks the worker ran again (results made before).", v_recomputed_b);
  per_worker(t, st, "tessera_worker_recomputed_tasks_total", "counter", "Tasks the worker ran whose results had been made before.", v_recomputed_t);
  per_worker(t, st, "tessera_worker_device_moved_bytes_total", "counter", "Device chunks moved down to host memory (GPU workers).", v_dev_moved);
  per_worker(t, st, "tessera_worker_device_dropped_bytes_total", "counter", "Recomputable device chunks dropped (GPU workers).", v_dev_dropped);
  per_worker(t, st, "tessera_worker_paused", "gauge", "1 while the worker is over its memory pause threshold.", v_paused);
}

static void tier_sample(tsr_text *t, const char *name, const char *worker, const char *tier, uint64_t v)
{
  tsr_text_printf(t, "%s{", name);
  worker_label(t, worker);
  tsr_text_printf(t, ",tier=\"%s\"} %llu\n", tier, (unsigned long long)v);
}

static void worker_tiers(tsr_text *t, const sched_state *st)
{
  tsr_prom_head(t, "tessera_worker_memory_bytes", "gauge", "Chunk bytes a worker holds, by tier (host, disk, device).");
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    const sched_worker *wk = &st->workers[w];
    if (!wk->alive) continue;
    tier_sample(t, "tessera_worker_memory_bytes", wk->name, "host", wk->memory_used);
    tier_sample(t, "tessera_worker_memory_bytes", wk->name, "disk", wk->disk_bytes);
    if (wk->gpu) tier_sample(t, "tessera_worker_memory_bytes", wk->name, "device", wk->device_memory_used);
  }
  tsr_prom_head(t, "tessera_worker_memory_limit_bytes", "gauge", "A worker's limit per tier (0: none).");
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    const sched_worker *wk = &st->workers[w];
    if (!wk->alive) continue;
    tier_sample(t, "tessera_worker_memory_limit_bytes", wk->name, "host", wk->memory_limit);
    if (wk->gpu) tier_sample(t, "tessera_worker_memory_limit_bytes", wk->name, "device", wk->device_memory_limit);
  }
}

/* GPU gauges: only workers that report them have samples. */
static void worker_gpus(tsr_text *t, sched_state *st, uint64_t now_ms)
{
  tsr_prom_head(t, "tessera_worker_gpu_utilization_ratio", "gauge", "Fraction of the last NVML sample period a kernel ran.");
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    if (!st->workers[w].alive || st->workers[w].gpu_util < 0) continue;
    tsr_text_printf(t, "tessera_worker_gpu_utilization_ratio{");
    worker_label(t, st->workers[w].name);
    tsr_text_printf(t, "} %.2f\n", st->workers[w].gpu_util / 100.0);
  }
  static const char *const names[3] = {"tessera_worker_gpu_memory_used_bytes", "tessera_worker_gpu_memory_total_bytes",
                                       "tessera_worker_gpu_power_watts"};
  static const char *const helps[3] = {"GPU memory in use on the device (NVML, every process).",
                                       "GPU memory of the device (NVML).", "GPU power draw (NVML)."};
  for (int m = 0; m < 3; m++) {
    tsr_prom_head(t, names[m], "gauge", helps[m]);
    for (uint32_t w = 0; w < st->nworkers_slots; w++) {
      if (!st->workers[w].alive) continue;
      const dash_worker *dw = sched_dash_worker(st, w);
      int64_t v = dw == NULL ? -1 : m == 0 ? dw->gpu_mem_used : m == 1 ? dw->gpu_mem_total : dw->gpu_power_mw;
      if (v < 0) continue;
      tsr_text_printf(t, "%s{", names[m]);
      worker_label(t, st->workers[w].name);
      if (m == 2) tsr_text_printf(t, "} %.3f\n", (double)v / 1e3);
      else tsr_text_printf(t, "} %lld\n", (long long)v);
    }
  }
  tsr_prom_head(t, "tessera_worker_heartbeat_age_seconds", "gauge", "Time since the scheduler last heard from the worker.");
  for (uint32_t w = 0; w < st->nworkers_slots; w++) {
    if (!st->workers[w].alive) continue;
    tsr_text_printf(t, "tessera_worker_heartbeat_age_seconds{");
    worker_label(t, st->workers[w].name);
    tsr_text_printf(t, "} %.3f\n", (double)(now_ms - st->peers[st->workers[w].peer].last_seen_ms) / 1e3);
  }
}

static void op_label(tsr_text *t, const sched_state *st, uint32_t op)
{
  tsr_text_printf(t, "op=\"");
  tsr_text_label(t, st->ops[op].name);
  tsr_text_printf(t, "\"");
}

static void op_counters(tsr_text *t, const sched_state *st)
{
  const sched_dash *d = st->dash;
  uint32_t nops = d->nops < st->nops ? d->nops : st->nops;
  const char *names[2] = {"tessera_tasks_completed_total", "tessera_tasks_erred_total"};
  const char *helps[2] = {"Tasks reported done by workers (recomputations included), by op.", "Tasks that failed, by op."};
  for (int m = 0; m < 2; m++) {
    tsr_prom_head(t, names[m], "counter", helps[m]);
    for (uint32_t op = 0; op < nops; op++) {
      if (d->ops[op].done == 0 && d->ops[op].erred == 0) continue;
      tsr_text_printf(t, "%s{", names[m]);
      op_label(t, st, op);
      tsr_text_printf(t, "} %llu\n", (unsigned long long)(m == 0 ? d->ops[op].done : d->ops[op].erred));
    }
  }
  tsr_prom_head(t, "tessera_task_duration_seconds", "histogram", "Run time of finished tasks as workers report it, by op.");
  for (uint32_t op = 0; op < nops; op++) {
    if (d->ops[op].duration.count == 0) continue;
    tsr_text labels = {0};
    op_label(&labels, st, op);
    if (!labels.failed) tsr_prom_hist(t, "tessera_task_duration_seconds", labels.data, &d->ops[op].duration);
    tsr_text_free(&labels);
  }
}

/* Live task records by op and state, from the groups the graphs' snapshot
 * just counted (dash_json.c, scan_tasks). */
static void op_states(tsr_text *t, const sched_state *st)
{
  const sched_dash *d = st->dash;
  uint64_t *n = calloc((size_t)st->nops * TS_COUNT + 1, sizeof *n);
  if (n == NULL) return;
  for (uint32_t i = 0; i < d->cap_groups; i++) {
    const dash_group *g = &d->groups[i];
    if (g->graph_slot == SCHED_NONE || g->op >= st->nops) continue;
    for (int s = 0; s < TS_COUNT; s++) n[(size_t)g->op * TS_COUNT + s] += g->live[s];
  }
  tsr_prom_head(t, "tessera_op_tasks", "gauge", "Task records by op and state (fused tasks by their parts).");
  for (uint32_t op = 0; op < st->nops; op++)
    for (int s = TS_WAITING; s < TS_COUNT; s++) {
      if (n[(size_t)op * TS_COUNT + s] == 0) continue;
      tsr_text_printf(t, "tessera_op_tasks{");
      op_label(t, st, op);
      tsr_text_printf(t, ",state=\"%s\"} %llu\n", s == TS_LOST ? "recomputing" : sched_tstate_name(s),
                      (unsigned long long)n[(size_t)op * TS_COUNT + s]);
    }
  free(n);
}

/* Multi-part submits whose last part has not come: what a client that
 * died mid-submit leaves behind until it is dropped (issue 13). */
static void pending_submits(tsr_text *t, const sched_state *st)
{
  uint64_t npending = 0, pending_bytes = 0;
  for (uint32_t c = 0; c < st->nclients_slots; c++)
    for (uint32_t k = 0; st->clients[c].alive && k < st->clients[c].npending; k++) {
      npending++;
      pending_bytes += st->clients[c].pending[k].bytes;
    }
  tsr_prom_head(t, "tessera_submits_pending", "gauge", "Multi-part graphs whose last part has not come.");
  tsr_text_printf(t, "tessera_submits_pending %llu\n", (unsigned long long)npending);
  tsr_prom_head(t, "tessera_submit_pending_bytes", "gauge", "Bytes of the parts of those graphs, kept until the last.");
  tsr_text_printf(t, "tessera_submit_pending_bytes %llu\n", (unsigned long long)pending_bytes);
}

/* The event loop's own time per iteration (not its wait for messages):
 * a long iteration is a stall every peer sees (issue 13). */
static void loop_iterations(tsr_text *t, const sched_state *st)
{
  static const char *const le[7] = {"0.001", "0.005", "0.01", "0.05", "0.1", "0.5", "1"};
  tsr_prom_head(t, "tessera_loop_iteration_seconds", "histogram",
                "Event-loop iterations by the time they took (messages, timers, admission, placement, flush).");
  uint64_t cum = 0;
  for (int b = 0; b < 7; b++) {
    cum += st->loop_hist[b];
    tsr_text_printf(t, "tessera_loop_iteration_seconds_bucket{le=\"%s\"} %llu\n", le[b], (unsigned long long)cum);
  }
  tsr_text_printf(t, "tessera_loop_iteration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)st->loop_iterations);
  tsr_text_printf(t, "tessera_loop_iteration_seconds_sum %.6f\n", (double)st->loop_busy_us / 1e6);
  tsr_text_printf(t, "tessera_loop_iteration_seconds_count %llu\n", (unsigned long long)st->loop_iterations);
  char what[sizeof st->loop_max_what];
  size_t n = 0;
  for (const char *c = st->loop_max_what; *c && n + 1 < sizeof what; c++) what[n++] = *c == '"' || *c == '\\' ? '\'' : *c;
  what[n] = '\0';
  tsr_prom_head(t, "tessera_loop_iteration_max_seconds", "gauge", "The longest event-loop iteration so far; `what` says where its time went.");
  tsr_text_printf(t, "tessera_loop_iteration_max_seconds{what=\"%s\"} %.6f\n", what, (double)st->loop_max_us / 1e6);
  uint32_t nadmitting = 0;
  for (const struct sched_admission *a = st->adm_first; a != NULL; a = sched_admission_next(a)) nadmitting++;
  tsr_prom_head(t, "tessera_graphs_admitting", "gauge", "Graphs being admitted a slice per loop iteration, or queued for it.");
  tsr_text_printf(t, "tessera_graphs_admitting %u\n", nadmitting);
}

static void scheduler_counters(tsr_text *t, const sched_state *st)
{
  const sched_dash *d = st->dash;
  uint32_t ngraphs = 0;
  for (uint32_t g = 0; g < st->ngraphs; g++) ngraphs += st->graphs[g] != NULL;
  tsr_prom_head(t, "tessera_workers", "gauge", "Workers connected.");
  tsr_text_printf(t, "tessera_workers %u\n", st->nworkers_alive);
  tsr_prom_head(t, "tessera_clients", "gauge", "Clients connected.");
  tsr_text_printf(t, "tessera_clients %u\n", st->nclients_alive);
  pending_submits(t, st);
  loop_iterations(t, st);
  tsr_prom_head(t, "tessera_graphs", "gauge", "Graphs the scheduler holds.");
  tsr_text_printf(t, "tessera_graphs %u\n", ngraphs);
  tsr_prom_head(t, "tessera_tasks", "gauge", "Task records by state.");
  for (int s = TS_WAITING; s < TS_COUNT; s++)
    tsr_text_printf(t, "tessera_tasks{state=\"%s\"} %u\n", sched_tstate_name(s), st->count_by_state[s]);
  tsr_prom_head(t, "tessera_tasks_dispatched_total", "counter", "compute messages sent to workers.");
  tsr_text_printf(t, "tessera_tasks_dispatched_total %llu\n", (unsigned long long)st->tasks_sent);
  tsr_prom_head(t, "tessera_heartbeat_interval_seconds", "histogram", "Time between consecutive heartbeats of a worker, as the scheduler receives them.");
  tsr_prom_hist(t, "tessera_heartbeat_interval_seconds", "", &d->heartbeat_gap);
  tsr_prom_head(t, "tessera_dashboard_snapshots_total", "counter", "Dashboard snapshots built (only while polled).");
  tsr_text_printf(t, "tessera_dashboard_snapshots_total %llu\n", (unsigned long long)d->snapshots);
  tsr_prom_head(t, "tessera_dashboard_build_seconds_total", "counter", "Event-loop time spent building dashboard snapshots.");
  tsr_text_printf(t, "tessera_dashboard_build_seconds_total %.6f\n", (double)d->build_us / 1e6);
}

char *sched_dash_metrics_text(sched_state *st, uint64_t now_ms, size_t *len_p)
{
  tsr_text t = {0};
  scheduler_counters(&t, st);
  op_states(&t, st);
  op_counters(&t, st);
  worker_counters(&t, st);
  worker_tiers(&t, st);
  worker_gpus(&t, st, now_ms);
  if (t.failed || t.data == NULL) {
    tsr_text_free(&t);
    return NULL;
  }
  *len_p = t.len;
  return t.data;
}
