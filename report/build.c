/* report/build.c — the JSON document of a finished recording (the schema
 * is in docs/report.md), with the "bounded by" verdict.
 *
 * Workers report counters since they started, so the job's share is the
 * difference between the first and the last sample; a peak reported
 * since start counts only when it grew during the job (else the largest
 * sampled value stands in). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report_int.h"

static uint64_t delta(uint64_t last, uint64_t first) { return last > first ? last - first : 0; }

/* A peak since the worker started that grew during the job, else the most seen in a sample. */
static uint64_t job_peak(uint64_t first_peak, uint64_t last_peak, uint64_t sampled)
{
  return last_peak > first_peak && last_peak > sampled ? last_peak : sampled;
}

static json_t *ratio_or_null(double num, double den)
{
  if (!(den > 0)) return json_null();
  double v = num / den;
  return json_real(v > 1 ? 1 : v);
}

/* ---------- time per op ---------- */

static json_t *find_op(json_t *ops, const char *op)
{
  size_t i;
  json_t *o;
  json_array_foreach(ops, i, o) if (strcmp(json_string_value(json_object_get(o, "op")), op) == 0) return o;
  return NULL;
}

static void add_to(json_t *o, const char *key, double v) { json_object_set_new(o, key, json_real(json_number_value(json_object_get(o, key)) + v)); }
static void add_int(json_t *o, const char *key, uint64_t v)
{
  json_object_set_new(o, key, json_integer(json_integer_value(json_object_get(o, key)) + (json_int_t)v));
}

static int by_busy_desc(const void *a, const void *b)
{
  double x = json_number_value(json_object_get(*(json_t *const *)a, "busy_s"));
  double y = json_number_value(json_object_get(*(json_t *const *)b, "busy_s"));
  return x < y ? 1 : x > y ? -1 : 0;
}

/* ops: [{op, tasks, done, erred, bytes, busy_s}] summed over graphs, most busy first. */
static json_t *build_ops(const tsr_report *r)
{
  json_t *ops = json_array();
  for (size_t g = 0; g < r->ngraphs; g++)
    for (size_t i = 0; i < r->graphs[g].ngroups; i++) {
      const rep_group *s = &r->graphs[g].groups[i];
      json_t *o = find_op(ops, s->op);
      if (o == NULL) {
        o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:f}", "op", s->op, "tasks", 0, "done", 0, "erred", 0, "bytes", 0,
                      "busy_s", 0.0);
        json_array_append_new(ops, o);
      }
      add_int(o, "tasks", s->total), add_int(o, "done", s->done), add_int(o, "erred", s->erred);
      add_int(o, "bytes", s->bytes), add_to(o, "busy_s", (double)s->busy_us / 1e6);
    }
  size_t n = json_array_size(ops);
  json_t **v = malloc((n ? n : 1) * sizeof *v);
  json_t *sorted = json_array();
  for (size_t i = 0; v != NULL && i < n; i++) v[i] = json_array_get(ops, i);
  if (v != NULL) qsort(v, n, sizeof *v, by_busy_desc);
  for (size_t i = 0; v != NULL && i < n; i++) json_array_append(sorted, v[i]);
  free(v);
  json_decref(ops);
  return sorted;
}

/* ---------- workers and tiers ---------- */

typedef struct totals {
  double threads, cpu_s, fetch_s, fetched, spilled, dropped, recomputed;
  double host_peak, host_limit, disk_peak, dev_peak, dev_limit;
  bool usage, host_limited;
} totals;

static json_t *build_worker(const rep_worker *w, double wall, totals *t)
{
  const tsr_worker_info *a = &w->first, *b = &w->last;
  double cpu_s = (double)delta(b->cpu_us, a->cpu_us) / 1e6, fetch_s = (double)delta(b->fetch_us, a->fetch_us) / 1e6;
  uint64_t host = job_peak(a->memory_peak, b->memory_peak, w->memory_max);
  uint64_t disk = job_peak(a->disk_peak, b->disk_peak, w->disk_max);
  uint64_t dev = job_peak(a->device_memory_peak, b->device_memory_peak, w->device_max);
  json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:I, s:I}", "name", b->name, "device", b->device, "gpu_name",
                        b->gpu_name, "threads", b->threads, "tasks_done", (json_int_t)delta(b->tasks_done, a->tasks_done),
                        "memory_limit", (json_int_t)b->memory_limit, "memory_peak", (json_int_t)host, "disk_peak",
                        (json_int_t)disk);
  json_object_set_new(o, "cpu_s", b->has_usage ? json_real(cpu_s) : json_null());
  json_object_set_new(o, "cpu_efficiency", b->has_usage ? ratio_or_null(cpu_s, b->threads * wall) : json_null());
  json_object_set_new(o, "memory_efficiency", ratio_or_null((double)host, (double)b->memory_limit));
  json_object_set_new(o, "device_memory_peak", json_integer((json_int_t)dev));
  json_object_set_new(o, "device_memory_limit", json_integer((json_int_t)b->device_memory_limit));
  json_object_set_new(o, "device_memory_efficiency", ratio_or_null((double)dev, (double)b->device_memory_limit));
  json_object_set_new(o, "fetch_bytes", json_integer((json_int_t)delta(b->fetch_bytes, a->fetch_bytes)));
  json_object_set_new(o, "fetch_s", json_real(fetch_s));
  json_object_set_new(o, "bytes_spilled", json_integer((json_int_t)delta(b->bytes_spilled, a->bytes_spilled)));
  json_object_set_new(o, "bytes_dropped", json_integer((json_int_t)delta(b->bytes_dropped, a->bytes_dropped)));
  json_object_set_new(o, "bytes_recomputed", json_integer((json_int_t)delta(b->bytes_recomputed, a->bytes_recomputed)));
  t->threads += b->threads, t->cpu_s += cpu_s, t->fetch_s += fetch_s, t->usage |= b->has_usage;
  t->fetched += (double)delta(b->fetch_bytes, a->fetch_bytes), t->spilled += (double)delta(b->bytes_spilled, a->bytes_spilled);
  t->dropped += (double)delta(b->bytes_dropped, a->bytes_dropped);
  t->recomputed += (double)delta(b->bytes_recomputed, a->bytes_recomputed);
  t->host_peak += (double)host, t->disk_peak += (double)disk, t->dev_peak += (double)dev;
  t->host_limit += (double)b->memory_limit, t->host_limited |= b->memory_limit > 0;
  t->dev_limit += (double)b->device_memory_limit;
  return o;
}

static json_t *tier(double peak, double limit, bool limited)
{
  json_t *o = json_pack("{s:f}", "peak", peak);
  json_object_set_new(o, "limit", limited ? json_real(limit) : json_null());
  json_object_set_new(o, "efficiency", limited ? ratio_or_null(peak, limit) : json_null());
  return o;
}

/* ---------- samples ---------- */

static json_t *series(const tsr_report *r, double (*get)(const rep_sample *))
{
  json_t *a = json_array();
  for (size_t i = 0; i < r->nsamples; i++) {
    double v = get(&r->samples[i]);
    json_array_append_new(a, v < 0 ? json_null() : json_real(v));
  }
  return a;
}

static double s_t(const rep_sample *s) { return s->t; }
static double s_mem(const rep_sample *s) { return (double)s->memory_used; }
static double s_disk(const rep_sample *s) { return (double)s->disk_bytes; }
static double s_dev(const rep_sample *s) { return (double)s->device_memory_used; }
static double s_cpu(const rep_sample *s) { return s->cpu_util < 0 ? -1 : 100.0 * (s->cpu_util > 1 ? 1 : s->cpu_util); }
static double s_gpu(const rep_sample *s) { return s->gpu_util; }
static double s_gpumem(const rep_sample *s) { return s->gpu_memory_used; }
static double s_running(const rep_sample *s) { return s->tasks_running; }
static double s_threads(const rep_sample *s) { return s->threads; }
static double s_waiting(const rep_sample *s) { return (double)s->tasks_waiting; }

static json_t *build_samples(const tsr_report *r)
{
  return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "t", series(r, s_t), "memory_used",
                   series(r, s_mem), "disk_bytes", series(r, s_disk), "device_memory_used", series(r, s_dev),
                   "cpu_util", series(r, s_cpu), "gpu_util", series(r, s_gpu), "gpu_memory_used", series(r, s_gpumem),
                   "tasks_running", series(r, s_running), "threads", series(r, s_threads), "tasks_waiting",
                   series(r, s_waiting));
}

/* Seconds (between samples) in which threads sat free while tasks waited. */
static double starved_seconds(const tsr_report *r, double wall)
{
  double secs = 0;
  for (size_t i = 1; i < r->nsamples; i++) {
    const rep_sample *s = &r->samples[i];
    if (s->t <= wall && s->tasks_waiting > 0 && s->tasks_running < s->threads) secs += s->t - r->samples[i - 1].t;
  }
  return secs;
}

/* ---------- the verdict ---------- */

static void evidence(json_t *list, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void evidence(json_t *list, const char *fmt, ...)
{
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  json_array_append_new(list, json_string(line));
}

/* bound: {by, fractions: {compute, transfer, idle}, spill_ratio, evidence: [str]}. Thread time
 * (threads x wall) splits into running ops (busy), fetching inputs, and idle; spill is
 * judged by bytes (moved to disk, dropped and recomputed, against bytes made). */
static json_t *build_bound(const tsr_report *r, const totals *t, double wall, double busy_s, double bytes_made)
{
  double cap = t->threads * wall;
  /* at most 1: a live graph's busy time may predate the recording (its note says so) */
  double compute = cap > 0 ? fmin(1, busy_s / cap) : 0, transfer = cap > 0 ? fmin(1 - compute, t->fetch_s / cap) : 0;
  double idle = 1 - compute - transfer < 0 ? 0 : 1 - compute - transfer;
  double spill = bytes_made > 0 ? (t->spilled + t->dropped + t->recomputed) / bytes_made : 0;
  const char *by = spill >= 0.25 ? "spill" : compute >= transfer && compute >= idle ? "compute"
                                           : transfer >= idle                       ? "transfer"
                                                                                    : "scheduler";
  json_t *ev = json_array();
  char b1[32], b2[32], b3[32], b4[32];
  evidence(ev, "compute: ops ran %.2f s of %.2f thread-seconds (%.0f%%: %.0f threads x %.2f s wall)", busy_s, cap,
           100 * compute, t->threads, wall);
  evidence(ev, "transfer: fetching inputs took %.2f thread-seconds (%.0f%%), %s fetched", t->fetch_s, 100 * transfer,
           rep_bytes(t->fetched, b1, sizeof b1));
  evidence(ev, "spill: %s spilled, %s dropped, %s recomputed, against %s of results made (%.0f%%)",
           rep_bytes(t->spilled, b1, sizeof b1), rep_bytes(t->dropped, b2, sizeof b2),
           rep_bytes(t->recomputed, b3, sizeof b3), rep_bytes(bytes_made, b4, sizeof b4), 100 * spill);
  evidence(ev, "scheduler: threads idle %.0f%% of the time; in %.1f s of samples threads were free while tasks waited",
           100 * idle, starved_seconds(r, wall));
  if (t->usage) evidence(ev, "CPU: the workers used %.2f s of CPU time (%.0f%% of their threads; heartbeats lag up to a period)", t->cpu_s, cap > 0 ? 100 * t->cpu_s / cap : 0);
  return json_pack("{s:s, s:{s:f, s:f, s:f}, s:f, s:o}", "by", by, "fractions", "compute", compute, "transfer", transfer,
                   "idle", idle, "spill_ratio", spill, "evidence", ev);
}

/* ---------- the document ---------- */

static json_t *build_tasks(const tsr_report *r, double *busy_s, double *bytes)
{
  uint64_t total = 0, done = 0, erred = 0, b = 0, busy = 0;
  for (size_t g = 0; g < r->ngraphs; g++) {
    const rep_graph *x = &r->graphs[g];
    total += x->total, done += x->done, erred += x->erred, b += x->bytes, busy += x->busy_us;
  }
  *busy_s = (double)busy / 1e6;
  *bytes = (double)b;
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:f}", "graphs", (json_int_t)r->ngraphs, "total", (json_int_t)total,
                   "done", (json_int_t)done, "erred", (json_int_t)erred, "bytes_done", (json_int_t)b, "busy_s", *busy_s);
}

json_t *rep_build(tsr_report *r)
{
  pthread_mutex_lock(&r->lock);
  double wall = (double)(r->t1_us - r->t0_us) / 1e6, busy_s, bytes_made;
  char started[64];
  time_t secs = (time_t)r->started_unix;
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime(&secs));
  json_t *doc = json_pack("{s:i, s:s, s:s, s:s, s:f, s:i}", "tessera_report", REPORT_VERSION, "program", r->program,
                          "command", r->command ? r->command : "", "started", started, "wall_s", wall, "exit_status",
                          r->exit_status);
  if (r->note[0]) json_object_set_new(doc, "note", json_string(r->note));
  json_object_set_new(doc, "tasks", build_tasks(r, &busy_s, &bytes_made));
  json_object_set_new(doc, "ops", build_ops(r));
  totals t = {0};
  json_t *workers = json_array();
  for (size_t i = 0; i < r->nworkers; i++) json_array_append_new(workers, build_worker(&r->workers[i], wall, &t));
  json_object_set_new(doc, "workers", workers);
  json_object_set_new(doc, "efficiency", json_pack("{s:o, s:o}", "cpu", t.usage ? ratio_or_null(t.cpu_s, t.threads * wall) : json_null(),
                                                   "busy", ratio_or_null(busy_s, t.threads * wall)));
  json_object_set_new(doc, "tiers", json_pack("{s:o, s:o, s:o}", "host", tier(t.host_peak, t.host_limit, t.host_limited),
                                              "disk", tier(t.disk_peak, 0, false), "device",
                                              tier(t.dev_peak, t.dev_limit, t.dev_limit > 0)));
  json_object_set_new(doc, "data", json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "bytes_made", bytes_made, "bytes_fetched",
                                             t.fetched, "fetch_s", t.fetch_s, "bytes_spilled", t.spilled,
                                             "bytes_dropped", t.dropped, "bytes_recomputed", t.recomputed));
  json_object_set_new(doc, "samples", build_samples(r));
  json_object_set_new(doc, "bound", build_bound(r, &t, wall, busy_s, bytes_made));
  pthread_mutex_unlock(&r->lock);
  return doc;
}
