/* report/report_int.h — the recorder's state and the renderers' shared
 * helpers (include/tessera/report.h is the contract; docs/report.md the
 * JSON document).
 *
 * Layout: recorder.c samples and keeps progress; build.c turns what was
 * recorded into the JSON document (jansson), verdict included; html.c and
 * text.c render a document, fresh or loaded from a file. */
#ifndef TSR_REPORT_INT_H
#define TSR_REPORT_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tessera/report.h"

#define TSR_API __attribute__((visibility("default")))
#define REPORT_MAX_SAMPLES 2048   /* past this, every other sample is dropped (a long job keeps its shape) */
#define REPORT_MAX_WORKERS 4096
#define REPORT_VERSION 1

typedef struct rep_group {
  char *op;
  uint64_t total, done, erred, bytes, busy_us;
} rep_group;

typedef struct rep_graph {
  uint64_t graph, total, waiting, processing, done, erred, bytes, busy_us;
  rep_group *groups;
  size_t ngroups;
} rep_graph;

/* A worker as first and last seen, and the most its tiers held in a sample. */
typedef struct rep_worker {
  tsr_worker_info first, last;
  uint64_t memory_max, disk_max, device_max;  /* sampled during the run */
  double first_t, last_t;                     /* seconds since start */
} rep_worker;

/* Cluster-wide totals at one moment. gpu_* are -1 when no worker reports them. */
typedef struct rep_sample {
  double t;                          /* seconds since start */
  uint64_t memory_used, disk_bytes, device_memory_used;
  double cpu_util;                   /* CPU time since the previous sample / (threads x its span), -1 first */
  double gpu_util;                   /* mean over GPU workers, percent */
  double gpu_memory_used;            /* bytes, summed */
  uint32_t threads, tasks_running;
  uint64_t tasks_waiting;            /* of this client's graphs, from progress */
} rep_sample;

struct tsr_report {
  tsr_client *client;
  char *program, *command;
  int interval_ms, settle_ms;
  uint64_t t0_us, t1_us;             /* wall clock of the job (monotonic) */
  double started_unix;
  pthread_t thread;
  bool thread_started, stopping, finished;
  int exit_status;
  pthread_mutex_t lock;              /* graphs, samples, workers, stopping */
  pthread_cond_t wake;
  rep_graph *graphs;
  size_t ngraphs, cap_graphs;
  rep_worker *workers;
  size_t nworkers, cap_workers;
  rep_sample *samples;
  size_t nsamples;
  uint32_t sample_every;             /* keep one sample in this many (doubles when full) */
  uint64_t sample_count;
  int last_error;                    /* of the latest status request */
  int64_t watch_graph;               /* opts.graph: -1, or the live graph followed through status */
  char *watch_client;                /* opts.graph_client, or NULL */
  bool watch_seen, watch_done;       /* seen in a status reply; complete or gone after being seen */
  double watch_last_t;               /* when a sample last listed it */
  char note[256];                    /* a caveat for the reader (the document's `note`), or "" */
};

/* recorder.c: one status sample, under no lock (takes it). 0 or the request's error. */
int rep_sample_now(tsr_report *r);

/* build.c: the document of a finished recorder; NULL on ENOMEM. */
json_t *rep_build(tsr_report *r);

/* html.c / text.c: render a document (fresh or loaded) to out. 0 or
 * TSR_EPROTO with a message naming the missing field in err. */
int rep_write_html(const json_t *doc, FILE *out, char *err, size_t err_len);
int rep_write_text(const json_t *doc, FILE *out, char *err, size_t err_len);

/* Shared helpers (text.c). */
double rep_num(const json_t *obj, const char *key);       /* NAN when absent or not a number */
const char *rep_str(const json_t *obj, const char *key);  /* "" when absent */
/* "1.5 GB" style, into buf. */
const char *rep_bytes(double bytes, char *buf, size_t cap);
/* "12.3 s" / "2 min 3 s" / "1 h 2 min", into buf. */
const char *rep_secs(double secs, char *buf, size_t cap);
void rep_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
