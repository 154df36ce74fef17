/* Prometheus text format (prom.h). */
#include "prom.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double tsr_hist_bounds[TSR_HIST_BUCKETS - 1] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1,
                                                      0.25,   0.5,    1,     2.5,   10,   60};

static int reserve(tsr_text *t, size_t more)
{
  if (t->failed) return -1;
  if (t->len + more + 1 <= t->cap) return 0;
  size_t cap = t->cap ? t->cap : 4096;
  while (cap < t->len + more + 1) cap *= 2;
  char *data = realloc(t->data, cap);
  if (data == NULL) {
    t->failed = 1;
    return -1;
  }
  t->data = data;
  t->cap = cap;
  return 0;
}

void tsr_text_printf(tsr_text *t, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || reserve(t, (size_t)n) != 0) return;
  va_start(ap, fmt);
  vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

void tsr_text_label(tsr_text *t, const char *s)
{
  for (; *s; s++) {
    if (*s == '\\') tsr_text_printf(t, "\\\\");
    else if (*s == '"') tsr_text_printf(t, "\\\"");
    else if (*s == '\n') tsr_text_printf(t, "\\n");
    else tsr_text_printf(t, "%c", *s);
  }
}

void tsr_text_free(tsr_text *t)
{
  free(t->data);
  memset(t, 0, sizeof *t);
}

void tsr_prom_head(tsr_text *t, const char *name, const char *type, const char *help)
{
  tsr_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void tsr_hist_add(tsr_hist *h, double seconds)
{
  int b = 0;
  while (b < TSR_HIST_BUCKETS - 1 && seconds > tsr_hist_bounds[b]) b++;
  h->bucket[b]++;
  h->count++;
  h->sum += seconds;
}

void tsr_prom_hist(tsr_text *t, const char *name, const char *labels, const tsr_hist *h)
{
  const char *sep = labels[0] ? "," : "";
  uint64_t cumulative = 0;
  for (int b = 0; b < TSR_HIST_BUCKETS; b++) {
    cumulative += h->bucket[b];
    if (b < TSR_HIST_BUCKETS - 1)
      tsr_text_printf(t, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, tsr_hist_bounds[b],
                      (unsigned long long)cumulative);
    else
      tsr_text_printf(t, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cumulative);
  }
  /* "name{} 1" parses, but not every reader likes empty braces */
  const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
  tsr_text_printf(t, "%s_sum%s%s%s %.9g\n", name, open, labels, close, h->sum);
  tsr_text_printf(t, "%s_count%s%s%s %llu\n", name, open, labels, close, (unsigned long long)h->count);
}
