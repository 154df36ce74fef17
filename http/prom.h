/* http/prom.h — writing the Prometheus text exposition format (version
 * 0.0.4): a growable text, metric headers, samples with escaped label
 * values, and fixed-bucket histograms kept as plain integers (so an event
 * loop can count without locks and write the text only when polled).
 *
 * Threading: none inside; a tsr_text or tsr_hist belongs to its caller. */
#ifndef TSR_HTTP_PROM_H
#define TSR_HTTP_PROM_H

#include <stddef.h>
#include <stdint.h>

#define TSR_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A growable NUL-terminated text. Starts zeroed; on ENOMEM it stops
 * growing and sets failed (the caller checks once at the end). */
typedef struct tsr_text {
  char *data;
  size_t len, cap;
  int failed;
} tsr_text;

void tsr_text_printf(tsr_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a Prometheus label value (\\, \" and \n escaped). */
void tsr_text_label(tsr_text *t, const char *s);
/* Frees the text and zeroes it. */
void tsr_text_free(tsr_text *t);

/* "# HELP name help\n# TYPE name type\n". */
void tsr_prom_head(tsr_text *t, const char *name, const char *type, const char *help);

/* Bucket upper bounds in seconds, shared by every histogram (+Inf last). */
#define TSR_HIST_BUCKETS 14
extern const double tsr_hist_bounds[TSR_HIST_BUCKETS - 1];

typedef struct tsr_hist {
  uint64_t bucket[TSR_HIST_BUCKETS];   /* not cumulative; the last is +Inf */
  uint64_t count;
  double sum;                          /* seconds */
} tsr_hist;

void tsr_hist_add(tsr_hist *h, double seconds);
/* The histogram's _bucket, _sum and _count samples under name with the
 * label pairs `labels` (already written, `op="qr"`; "" for none). */
void tsr_prom_hist(tsr_text *t, const char *name, const char *labels, const tsr_hist *h);

#endif
