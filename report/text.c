/* report/text.c — the report as a few lines of text, the shared
 * formatting helpers, and the entry points that write or render a
 * document (tsr_report_save, tsr_report_render). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "report_int.h"

void rep_errf(char *err, size_t err_len, const char *fmt, ...)
{
  if (err == NULL || err_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
}

double rep_num(const json_t *obj, const char *key)
{
  const json_t *v = json_object_get(obj, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

const char *rep_str(const json_t *obj, const char *key)
{
  const char *s = json_string_value(json_object_get(obj, key));
  return s != NULL ? s : "";
}

const char *rep_bytes(double bytes, char *buf, size_t cap)
{
  static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 1000 && u < 5) bytes /= 1000, u++;
  snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

const char *rep_secs(double secs, char *buf, size_t cap)
{
  if (secs < 60) snprintf(buf, cap, "%.2f s", secs);
  else if (secs < 3600) snprintf(buf, cap, "%d min %d s", (int)(secs / 60), (int)fmod(secs, 60));
  else snprintf(buf, cap, "%d h %d min", (int)(secs / 3600), (int)fmod(secs / 60, 60));
  return buf;
}

/* "83%" or "-" for null. */
static const char *pct(const json_t *obj, const char *key, char *buf, size_t cap)
{
  double v = rep_num(obj, key);
  if (isnan(v)) snprintf(buf, cap, "-");
  else snprintf(buf, cap, "%.0f%%", 100 * v);
  return buf;
}

static void text_workers(const json_t *doc, FILE *out)
{
  size_t i;
  const json_t *w;
  char a[32], b[32], c[32], d[32];
  fprintf(out, "workers:\n");
  json_array_foreach(json_object_get(doc, "workers"), i, w)
    fprintf(out, "  %-24s %-6s %3.0f threads  cpu %5s  memory peak %9s (%s of limit)  fetched %s\n", rep_str(w, "name"),
            rep_str(w, "device"), rep_num(w, "threads"), pct(w, "cpu_efficiency", a, sizeof a),
            rep_bytes(rep_num(w, "memory_peak"), b, sizeof b), pct(w, "memory_efficiency", c, sizeof c),
            rep_bytes(rep_num(w, "fetch_bytes"), d, sizeof d));
}

int rep_write_text(const json_t *doc, FILE *out, char *err, size_t err_len)
{
  const json_t *tasks = json_object_get(doc, "tasks"), *bound = json_object_get(doc, "bound");
  if (!json_is_object(tasks) || !json_is_object(bound)) {
    rep_errf(err, err_len, "field '%s' is missing or not an object", json_is_object(tasks) ? "bound" : "tasks");
    return TSR_EPROTO;
  }
  char a[32], b[32];
  fprintf(out, "%s: %s wall, %.0f/%.0f tasks done (%.0f erred), %s of results\n", rep_str(doc, "program"),
          rep_secs(rep_num(doc, "wall_s"), a, sizeof a), rep_num(tasks, "done"), rep_num(tasks, "total"),
          rep_num(tasks, "erred"), rep_bytes(rep_num(tasks, "bytes_done"), b, sizeof b));
  if (rep_str(doc, "note")[0]) fprintf(out, "note: %s\n", rep_str(doc, "note"));
  fprintf(out, "bounded by: %s\n", rep_str(bound, "by"));
  size_t i;
  const json_t *e;
  json_array_foreach(json_object_get(bound, "evidence"), i, e) fprintf(out, "  - %s\n", json_string_value(e));
  fprintf(out, "time per op:\n");
  json_array_foreach(json_object_get(doc, "ops"), i, e)
    fprintf(out, "  %-24s %10.2f s  %6.0f tasks  %s\n", rep_str(e, "op"), rep_num(e, "busy_s"), rep_num(e, "tasks"),
            rep_bytes(rep_num(e, "bytes"), a, sizeof a));
  text_workers(doc, out);
  return 0;
}

/* True when path ends in suffix (case-sensitive). */
static bool ends_with(const char *path, const char *suffix)
{
  size_t n = strlen(path), k = strlen(suffix);
  return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Writes doc to out_path (NULL or "-": stdout) as format. */
static int write_doc(const json_t *doc, tsr_report_format format, const char *out_path, char *err, size_t err_len)
{
  bool to_stdout = out_path == NULL || strcmp(out_path, "-") == 0;
  FILE *out = to_stdout ? stdout : fopen(out_path, "w");
  if (out == NULL) {
    rep_errf(err, err_len, "cannot write '%s': %s", out_path, strerror(errno));
    return TSR_EIO;
  }
  int rc = format == TSR_REPORT_HTML   ? rep_write_html(doc, out, err, err_len)
           : format == TSR_REPORT_TEXT ? rep_write_text(doc, out, err, err_len)
           : json_dumpf(doc, out, JSON_INDENT(1) | JSON_REAL_PRECISION(12)) == 0 ? 0 : TSR_EIO;
  if (format == TSR_REPORT_JSON && rc == 0) fputc('\n', out);
  if ((to_stdout ? fflush(out) : fclose(out)) != 0 && rc == 0) rc = TSR_EIO;
  if (rc == TSR_EIO) rep_errf(err, err_len, "cannot write '%s': %s", to_stdout ? "stdout" : out_path, strerror(errno));
  return rc;
}

TSR_API int tsr_report_save(tsr_report *r, const char *path, char *err, size_t err_len)
{
  if (r == NULL || path == NULL || !r->finished) {
    rep_errf(err, err_len, "the report is not finished (call tsr_report_finish first)");
    return TSR_EINVAL;
  }
  json_t *doc = rep_build(r);
  if (doc == NULL) return TSR_ENOMEM;
  bool html = ends_with(path, ".html") || ends_with(path, ".htm");
  int rc = write_doc(doc, html ? TSR_REPORT_HTML : TSR_REPORT_JSON, path, err, err_len);
  json_decref(doc);
  return rc;
}

TSR_API int tsr_report_render(const char *json_path, tsr_report_format format, const char *out_path, char *err,
                              size_t err_len)
{
  json_error_t jerr;
  json_t *doc = json_load_file(json_path, 0, &jerr);
  if (doc == NULL) {
    if (jerr.line > 0) rep_errf(err, err_len, "cannot read report '%s': %s (line %d)", json_path, jerr.text, jerr.line);
    else rep_errf(err, err_len, "cannot read report '%s': %s", json_path, jerr.text);
    return TSR_EIO;
  }
  int rc = 0;
  if (!json_is_object(doc) || !json_is_integer(json_object_get(doc, "tessera_report"))) {
    rep_errf(err, err_len, "'%s' is not a Tessera report: field 'tessera_report' is missing", json_path);
    rc = TSR_EPROTO;
  } else {
    rc = write_doc(doc, format, out_path, err, err_len);
    if (rc == TSR_EPROTO) {
      char field[256];
      snprintf(field, sizeof field, "%s", err != NULL ? err : "");
      rep_errf(err, err_len, "'%s': %s", json_path, field);
    }
  }
  json_decref(doc);
  return rc;
}
