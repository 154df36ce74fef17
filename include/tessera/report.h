/* tessera/report.h — per-job efficiency reports (docs/report.md).
 *
 * A recorder follows one client while a program runs: every interval it
 * asks the scheduler for its workers' status (memory, CPU time, GPU
 * samples, fetches, spills) and it keeps the progress of every graph the
 * client submits (task counts and busy time per op), fed by the program's
 * progress callback. At the end it writes a self-contained HTML page
 * (inline SVG charts, no network) or a JSON document for scripts: wall
 * time, CPU efficiency per worker, memory efficiency per tier, memory and
 * GPU over time, time per op, bytes fetched / spilled / dropped /
 * recomputed, and what bounded the job, with the evidence.
 *
 * Threading: tsr_report_progress may be called from any thread (it is a
 * tsr_progress_fn: pass tsr_report_progress_fn and the recorder to
 * tsr_client_on_progress, or call it from your own callback). The other
 * functions belong to the thread that started the recorder. */
#ifndef TSR_REPORT_H
#define TSR_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_report tsr_report;   /* opaque */

typedef struct tsr_report_opts {
  const char *program;     /* "tsr-svd": the report's title; copied */
  const char *command;     /* the command line, shown as is; NULL: none; copied */
  int interval_ms;         /* status samples this often (default 1000, at least 100) */
  int settle_ms;           /* tsr_report_finish waits this long for the workers' last heartbeat
                              before its final sample (default 1100: one heartbeat period) */
  int64_t graph;           /* -1 (default): this client's graphs, through tsr_report_progress. Else
                              a live graph of any client, followed through the scheduler's status
                              (per op counts and busy time each sample; `tessera report --scheduler`) */
  const char *graph_client;  /* with graph: only the graph of the client of this name (NULL: any) */
} tsr_report_opts;

#define TSR_REPORT_OPTS_DEFAULT {NULL, NULL, 1000, 1100, -1, NULL}

/* Starts recording: takes a first status sample (the baseline of the
 * workers' counters) and starts the sampling thread. The client must
 * outlive the recorder's tsr_report_finish. 0, TSR_ENOMEM, or the error
 * of the first status request (TSR_ETIMEDOUT, TSR_ECONN). */
int tsr_report_start(tsr_client *client, const tsr_report_opts *opts, tsr_report **report_p);
/* Records a graph's progress (the latest report of each graph counts).
 * Any thread; returns quickly. NULL report: no-op. */
void tsr_report_progress(tsr_report *report, const tsr_progress *progress);
/* The same as a tsr_progress_fn: user is the tsr_report. */
void tsr_report_progress_fn(void *user, const tsr_progress *progress);
/* With opts.graph: 1 once the graph was seen complete (done + erred ==
 * total) or seen and then gone from the scheduler (released), else 0. */
int tsr_report_graph_done(tsr_report *report);
/* Ends the recording: the wall time stops now; the sampling thread stops;
 * after settle_ms a last sample is taken. exit_status is the program's
 * (shown in the report). Idempotent. 0 or TSR_EINVAL. Stop progress
 * callbacks into the recorder before tsr_report_destroy. */
int tsr_report_finish(tsr_report *report, int exit_status);
/* Writes the finished report to path: HTML when it ends in ".html" or
 * ".htm", else JSON. 0, or TSR_EINVAL (not finished) / TSR_EIO with a
 * message naming the file in err (err_len bytes; may be NULL). */
int tsr_report_save(tsr_report *report, const char *path, char *err, size_t err_len);
/* Frees (finishing first if needed); NULL and *NULL are no-ops. */
void tsr_report_destroy(tsr_report **report_p);

typedef enum tsr_report_format {
  TSR_REPORT_TEXT = 0,     /* a few lines for a terminal */
  TSR_REPORT_HTML = 1,
  TSR_REPORT_JSON = 2
} tsr_report_format;

/* Renders a saved JSON report (json_path) as format into out_path (NULL
 * or "-": stdout). 0, or TSR_EIO (a file cannot be read or written) /
 * TSR_EPROTO (not a report: the message names the file and the field)
 * with the message in err. */
int tsr_report_render(const char *json_path, tsr_report_format format, const char *out_path, char *err,
                      size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
