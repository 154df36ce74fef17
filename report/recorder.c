/* report/recorder.c — follows a client while a program runs: a thread
 * asks for the cluster's status every interval; progress callbacks keep
 * each graph's latest counts (contract in tessera/report.h).
 *
 * Everything recorded is under r->lock; the status request itself runs
 * without it, so a slow scheduler never blocks a progress callback (which
 * runs on the client's I/O thread and must return quickly). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include "report_int.h"

static uint64_t mono_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static double since_start(const tsr_report *r) { return (double)(mono_us() - r->t0_us) / 1e6; }

/* ---------- progress ---------- */

static rep_graph *graph_slot(tsr_report *r, uint64_t graph)
{
  for (size_t i = 0; i < r->ngraphs; i++)
    if (r->graphs[i].graph == graph) return &r->graphs[i];
  if (r->ngraphs == r->cap_graphs) {
    size_t cap = r->cap_graphs ? 2 * r->cap_graphs : 16;
    rep_graph *grown = realloc(r->graphs, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    r->graphs = grown;
    r->cap_graphs = cap;
  }
  r->graphs[r->ngraphs] = (rep_graph){.graph = graph};
  return &r->graphs[r->ngraphs++];
}

/* Copies the groups of p into g (op names duplicated); false on ENOMEM,
 * leaving g's old groups. */
static bool copy_groups(rep_graph *g, const tsr_progress *p)
{
  rep_group *groups = calloc(p->ngroups ? p->ngroups : 1, sizeof *groups);
  if (groups == NULL) return false;
  for (size_t i = 0; i < p->ngroups; i++) {
    const tsr_progress_group *s = &p->groups[i];
    groups[i] = (rep_group){strdup(s->op ? s->op : "?"), s->tasks_total, s->tasks_done, s->tasks_erred, s->bytes_done, s->busy_us};
    if (groups[i].op == NULL) {
      for (size_t k = 0; k < i; k++) free(groups[k].op);
      free(groups);
      return false;
    }
  }
  for (size_t i = 0; i < g->ngroups; i++) free(g->groups[i].op);
  free(g->groups);
  g->groups = groups;
  g->ngroups = p->ngroups;
  return true;
}

TSR_API void tsr_report_progress(tsr_report *r, const tsr_progress *p)
{
  if (r == NULL || p == NULL) return;
  pthread_mutex_lock(&r->lock);
  rep_graph *g = graph_slot(r, p->graph);
  if (g != NULL && copy_groups(g, p)) {
    g->total = p->tasks_total, g->waiting = p->tasks_waiting, g->processing = p->tasks_processing;
    g->done = p->tasks_done, g->erred = p->tasks_erred, g->bytes = p->bytes_done, g->busy_us = p->busy_us;
  }
  pthread_mutex_unlock(&r->lock);
}

TSR_API void tsr_report_progress_fn(void *user, const tsr_progress *p) { tsr_report_progress(user, p); }

/* ---------- status samples ---------- */

static rep_worker *worker_slot(tsr_report *r, const tsr_worker_info *w, double t)
{
  for (size_t i = 0; i < r->nworkers; i++)
    if (strcmp(r->workers[i].first.name, w->name) == 0) return &r->workers[i];
  if (r->nworkers >= REPORT_MAX_WORKERS) return NULL;
  if (r->nworkers == r->cap_workers) {
    size_t cap = r->cap_workers ? 2 * r->cap_workers : 8;
    rep_worker *grown = realloc(r->workers, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    r->workers = grown;
    r->cap_workers = cap;
  }
  r->workers[r->nworkers] = (rep_worker){.first = *w, .last = *w, .first_t = t, .last_t = t};
  return &r->workers[r->nworkers++];
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Folds one worker's status into its record and the sample s; adds its
 * CPU time since its previous sample to *cpu_us (and its threads to
 * *cpu_threads when that is known). */
static void fold_worker(tsr_report *r, const tsr_worker_info *w, double t, rep_sample *s, double *cpu_us, double *cpu_span)
{
  rep_worker *rw = worker_slot(r, w, t);
  if (rw == NULL) return;
  if (w->has_usage && rw->last_t < t && w->cpu_us >= rw->last.cpu_us) {
    *cpu_us += (double)(w->cpu_us - rw->last.cpu_us);
    *cpu_span += (double)w->threads * (t - rw->last_t) * 1e6;
  }
  rw->last = *w;
  rw->last_t = t;
  rw->memory_max = max_u64(rw->memory_max, w->memory_used);
  rw->disk_max = max_u64(rw->disk_max, w->disk_bytes);
  rw->device_max = max_u64(rw->device_max, w->device_memory_used);
  s->memory_used += w->memory_used;
  s->disk_bytes += w->disk_bytes;
  s->device_memory_used += w->device_memory_used;
  s->threads += (uint32_t)(w->threads > 0 ? w->threads : 0);
  s->tasks_running += (uint32_t)w->tasks_running;
}

/* Halves the kept samples (every other one) so a long job keeps its shape in bounded memory. */
static void thin_samples(tsr_report *r)
{
  size_t k = 0;
  for (size_t i = 0; i < r->nsamples; i += 2) r->samples[k++] = r->samples[i];
  r->nsamples = k;
  r->sample_every *= 2;
}

/* The watched graph's counts from a status reply into its record (the
 * scheduler keeps them per op, with busy time; bytes it does not report). */
static void fold_graph_info(tsr_report *r, const tsr_graph_info *gi)
{
  rep_graph *g = graph_slot(r, gi->graph);
  if (g == NULL) return;
  rep_group *groups = calloc(gi->n_groups ? gi->n_groups : 1, sizeof *groups);
  if (groups == NULL) return;
  /* totals from the progress groups: the counts a CLI's own report has */
  uint64_t total = 0, done = 0, erred = 0, bytes = 0;
  for (size_t i = 0; i < gi->n_groups; i++) {
    const tsr_graph_group *x = &gi->groups[i];
    groups[i] = (rep_group){strdup(x->op), x->tasks_total, x->tasks_done, x->tasks_erred, x->bytes_done, x->busy_us};
    total += x->tasks_total, done += x->tasks_done, erred += x->tasks_erred, bytes += x->bytes_done;
  }
  for (size_t i = 0; i < g->ngroups; i++) free(g->groups[i].op);
  free(g->groups);
  g->groups = groups, g->ngroups = gi->n_groups;
  g->total = total, g->done = done, g->erred = erred, g->bytes = bytes, g->busy_us = gi->busy_us;
  g->waiting = total > done + erred ? total - done - erred : 0;
}

/* Follows opts.graph: folds it in when listed; done when complete, or gone after being seen. */
static void watch_graph(tsr_report *r, const tsr_cluster_info *info, double t)
{
  bool listed = false;
  for (size_t i = 0; i < info->n_graphs; i++) {
    const tsr_graph_info *gi = &info->graphs[i];
    if ((int64_t)gi->graph != r->watch_graph || (r->watch_client && strcmp(gi->client, r->watch_client) != 0)) continue;
    listed = true;
    fold_graph_info(r, gi);
    rep_graph *g = graph_slot(r, gi->graph);
    if (g != NULL && g->total > 0 && g->done + g->erred >= g->total) r->watch_done = true;
    if (g != NULL && !r->watch_seen && g->done > 0)
      snprintf(r->note, sizeof r->note, "recording began with %llu of %llu tasks done: busy time covers the whole graph, "
               "wall time only the recording", (unsigned long long)g->done, (unsigned long long)g->total);
    r->watch_last_t = t;
  }
  if (!listed && r->watch_seen && !r->watch_done) {
    /* its client released it between two samples: the scheduler forgets a released graph */
    r->watch_done = true;
    snprintf(r->note, sizeof r->note,
             "the graph was released before a sample saw it complete: its counts are from %.0f ms before it left",
             1000 * (t - r->watch_last_t));
  }
  r->watch_seen |= listed;
}

static void add_sample(tsr_report *r, const tsr_cluster_info *info, double t)
{
  if (r->watch_graph >= 0) watch_graph(r, info, t);
  rep_sample s = {.t = t, .cpu_util = -1, .gpu_util = -1, .gpu_memory_used = -1};
  double cpu_us = 0, cpu_span = 0, gpu_util = 0;
  int ngpu = 0;
  for (size_t i = 0; i < info->n_workers; i++) {
    const tsr_worker_info *w = &info->workers[i];
    fold_worker(r, w, t, &s, &cpu_us, &cpu_span);
    if (w->gpu_util >= 0) gpu_util += w->gpu_util, ngpu++;
    if (w->gpu_memory_used >= 0) s.gpu_memory_used = (s.gpu_memory_used < 0 ? 0 : s.gpu_memory_used) + (double)w->gpu_memory_used;
  }
  if (cpu_span > 0) s.cpu_util = cpu_us / cpu_span;
  if (ngpu > 0) s.gpu_util = gpu_util / ngpu;
  for (size_t g = 0; g < r->ngraphs; g++) s.tasks_waiting += r->graphs[g].waiting;
  /* the first and every sample_every-th are kept; the last is always kept (finish) */
  if (r->sample_count++ % r->sample_every != 0 && !r->stopping) return;
  if (r->nsamples == REPORT_MAX_SAMPLES) thin_samples(r);
  r->samples[r->nsamples++] = s;
}

int rep_sample_now(tsr_report *r)
{
  tsr_cluster_info *info = NULL;
  int rc = tsr_cluster_info_get(r->client, 5000, &info);
  pthread_mutex_lock(&r->lock);
  r->last_error = rc;
  if (rc == 0) add_sample(r, info, since_start(r));
  pthread_mutex_unlock(&r->lock);
  tsr_cluster_info_destroy(&info);
  return rc;
}

static void *sampler_main(void *arg)
{
  tsr_report *r = arg;
  pthread_mutex_lock(&r->lock);
  while (!r->stopping) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)r->interval_ms * 1000000u;
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    while (!r->stopping && pthread_cond_timedwait(&r->wake, &r->lock, &until) != ETIMEDOUT) {
    }
    if (r->stopping) break;
    pthread_mutex_unlock(&r->lock);
    rep_sample_now(r);   /* an error is kept in last_error; the next sample may succeed */
    pthread_mutex_lock(&r->lock);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* ---------- life cycle ---------- */

static char *dup_or_null(const char *s) { return s != NULL ? strdup(s) : NULL; }

TSR_API int tsr_report_start(tsr_client *client, const tsr_report_opts *opts, tsr_report **report_p)
{
  tsr_report_opts o = TSR_REPORT_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  if (client == NULL || report_p == NULL) return TSR_EINVAL;
  tsr_report *r = calloc(1, sizeof *r);
  if (r == NULL) return TSR_ENOMEM;
  r->client = client;
  r->program = strdup(o.program ? o.program : "tessera");
  r->command = dup_or_null(o.command);
  r->interval_ms = o.interval_ms < 100 ? 100 : o.interval_ms;
  r->settle_ms = o.settle_ms < 0 ? 0 : o.settle_ms;
  r->watch_graph = o.graph;
  r->watch_client = dup_or_null(o.graph_client);
  r->samples = calloc(REPORT_MAX_SAMPLES, sizeof *r->samples);
  r->sample_every = 1;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->wake, NULL);
  struct timeval now;
  gettimeofday(&now, NULL);
  r->started_unix = (double)now.tv_sec + (double)now.tv_usec / 1e6;
  r->t0_us = mono_us();
  int rc = r->program == NULL || r->samples == NULL || (o.command != NULL && r->command == NULL) ||
                   (o.graph_client != NULL && r->watch_client == NULL)
               ? TSR_ENOMEM
               : 0;
  if (rc == 0) rc = rep_sample_now(r);
  if (rc == 0) rc = pthread_create(&r->thread, NULL, sampler_main, r) == 0 ? 0 : TSR_ENOMEM;
  if (rc != 0) {
    tsr_report_destroy(&r);
    return rc;
  }
  r->thread_started = true;
  *report_p = r;
  return 0;
}

TSR_API int tsr_report_graph_done(tsr_report *r)
{
  if (r == NULL) return 0;
  pthread_mutex_lock(&r->lock);
  bool done = r->watch_done;
  pthread_mutex_unlock(&r->lock);
  return done;
}

TSR_API int tsr_report_finish(tsr_report *r, int exit_status)
{
  if (r == NULL) return TSR_EINVAL;
  if (r->finished) return 0;
  r->t1_us = mono_us();
  r->exit_status = exit_status;
  pthread_mutex_lock(&r->lock);
  r->stopping = true;
  pthread_cond_broadcast(&r->wake);
  pthread_mutex_unlock(&r->lock);
  if (r->thread_started) pthread_join(r->thread, NULL);
  r->thread_started = false;
  /* the workers' counters reach the scheduler with their next heartbeat */
  struct timespec settle = {r->settle_ms / 1000, (long)(r->settle_ms % 1000) * 1000000L};
  nanosleep(&settle, NULL);
  rep_sample_now(r);
  r->finished = true;
  return 0;
}

TSR_API void tsr_report_destroy(tsr_report **report_p)
{
  if (report_p == NULL || *report_p == NULL) return;
  tsr_report *r = *report_p;
  if (r->thread_started) tsr_report_finish(r, r->exit_status);
  for (size_t g = 0; g < r->ngraphs; g++) {
    for (size_t i = 0; i < r->graphs[g].ngroups; i++) free(r->graphs[g].groups[i].op);
    free(r->graphs[g].groups);
  }
  free(r->graphs);
  free(r->workers);
  free(r->samples);
  free(r->program);
  free(r->command);
  free(r->watch_client);
  pthread_mutex_destroy(&r->lock);
  pthread_cond_destroy(&r->wake);
  free(r);
  *report_p = NULL;
}
