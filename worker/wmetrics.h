/* worker/wmetrics.h — the worker's /metrics over HTTP (--metrics
 * HOST:PORT; docs/metrics.md lists every metric).
 *
 * The main thread counts finished tasks per op (plain integers) and, once
 * a second while someone polled within the last WMETRICS_IDLE_MS, writes
 * the Prometheus text from its own state and publishes it (http/board.h);
 * the HTTP thread serves the latest text. Main thread only. */
#ifndef TSR_WORKER_WMETRICS_H
#define TSR_WORKER_WMETRICS_H

#include <stdint.h>

#include "util/util.h"

#define WMETRICS_PERIOD_MS 1000
#define WMETRICS_IDLE_MS 10000

struct tsr_worker;
struct tsr_wtask;
typedef struct tsr_wmetrics tsr_wmetrics;

/* Starts serving /metrics on address ("HOST:PORT" / ":PORT" = loopback).
 * Logs the bound address. 0, TSR_EINVAL (bad address), TSR_ECONN (port
 * taken) or TSR_ENOMEM, with err. */
int tsr_wmetrics_open(const char *address, tsr_wmetrics **metrics_p, tsr_errbuf *err);
/* NULL and *NULL are no-ops. */
void tsr_wmetrics_close(tsr_wmetrics **metrics_p);
/* A finished task (done or erred), before it is reported. No-op for NULL. */
void tsr_wmetrics_task(tsr_wmetrics *metrics, const struct tsr_wtask *task);
/* A heartbeat from the scheduler arrived at now_ms. No-op for NULL. */
void tsr_wmetrics_heard(tsr_wmetrics *metrics, uint64_t now_ms);
/* Publishes the text when due and wanted. No-op while w->metrics is NULL. */
void tsr_wmetrics_tick(struct tsr_worker *w, uint64_t now_ms);

#endif
