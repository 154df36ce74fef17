/* report/html.c — the report as one self-contained HTML page: inline CSS,
 * charts drawn here as inline SVG (no script, no network), and the JSON
 * document itself in a <script type="application/json"> for tools.
 *
 * Sections (ids the test and readers rely on): summary, bound, ops,
 * timeline, workers, data. Every string from the document is escaped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_int.h"

#define PLOT_W 960
#define PLOT_H 260
#define PAD_L 90
#define PAD_B 28
#define PAD_T 26   /* the legend sits above the plot area */

static const char *const palette[] = {"#2f6db5", "#d9822b", "#3a9a5b", "#b8443a", "#7d5ba6", "#8c6d31"};

static void esc(FILE *out, const char *s)
{
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", out); break;
    case '>': fputs("&gt;", out); break;
    case '&': fputs("&amp;", out); break;
    case '"': fputs("&quot;", out); break;
    default: fputc(*s, out);
    }
  }
}

static const char *fmt_value(double v, bool bytes, char *buf, size_t cap)
{
  if (bytes) return rep_bytes(v, buf, cap);
  snprintf(buf, cap, "%.0f%%", v);
  return buf;
}

/* ---------- a line plot ---------- */

typedef struct plot_series {
  const char *name;
  const json_t *values;      /* numbers or nulls, parallel to t */
} plot_series;

static double series_max(const plot_series *s, size_t ns)
{
  double m = 0;
  for (size_t k = 0; k < ns; k++)
    for (size_t i = 0; i < json_array_size(s[k].values); i++) {
      double v = json_number_value(json_array_get(s[k].values, i));
      if (v > m) m = v;
    }
  return m;
}

static void plot_axes(FILE *out, double tmax, double ymax, bool bytes)
{
  char buf[32];
  int w = PLOT_W - PAD_L - 20, h = PLOT_H - PAD_B - PAD_T;
  for (int k = 0; k <= 4; k++) {
    double y = PAD_T + h - h * k / 4.0;
    fprintf(out, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>", PAD_L, y, PAD_L + w, y);
    fprintf(out, "<text x='%d' y='%.1f' text-anchor='end' font-size='11'>%s</text>", PAD_L - 6, y + 4,
            fmt_value(ymax * k / 4, bytes, buf, sizeof buf));
  }
  for (int k = 0; k <= 5; k++)
    fprintf(out, "<text x='%.1f' y='%d' text-anchor='middle' font-size='11'>%.1f s</text>", PAD_L + w * k / 5.0,
            PLOT_H - 8, tmax * k / 5);
  fprintf(out, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='#444'/>", PAD_L, PAD_T + h, PAD_L + w, PAD_T + h);
}

/* One plot of several series against t; nothing drawn for a series of nulls only. */
static void plot(FILE *out, const char *title, const json_t *t, const plot_series *s, size_t ns, bool bytes)
{
  size_t n = json_array_size(t);
  double tmax = n ? json_number_value(json_array_get(t, n - 1)) : 0, ymax = series_max(s, ns);
  if (!(tmax > 0)) tmax = 1;
  if (!(ymax > 0)) ymax = bytes ? 1 : 100;
  if (!bytes) ymax = ymax < 100 ? 100 : ymax;
  int w = PLOT_W - PAD_L - 20, h = PLOT_H - PAD_B - PAD_T;
  fprintf(out, "<h3>");
  esc(out, title);
  fprintf(out, "</h3>\n<svg class='plot' width='%d' height='%d' viewBox='0 0 %d %d' role='img'>", PLOT_W, PLOT_H, PLOT_W, PLOT_H);
  plot_axes(out, tmax, ymax, bytes);
  for (size_t k = 0; k < ns; k++) {
    fprintf(out, "<polyline fill='none' stroke-width='2' stroke='%s' points='", palette[k % 6]);
    for (size_t i = 0; i < n; i++) {
      const json_t *v = json_array_get(s[k].values, i);
      if (!json_is_number(v)) continue;
      double x = PAD_L + w * json_number_value(json_array_get(t, i)) / tmax, y = PAD_T + h - h * json_number_value(v) / ymax;
      fprintf(out, "%.1f,%.1f ", x, y);
    }
    fprintf(out, "'/><rect x='%zu' y='4' width='12' height='12' fill='%s'/><text x='%zu' y='15' font-size='12'>",
            (size_t)PAD_L + k * 240, palette[k % 6], (size_t)PAD_L + 16 + k * 240);
    esc(out, s[k].name);
    fprintf(out, "</text>");
  }
  fprintf(out, "</svg>\n");
}

/* True when some value of the series is a number. */
static bool has_numbers(const json_t *a)
{
  for (size_t i = 0; i < json_array_size(a); i++)
    if (json_is_number(json_array_get(a, i))) return true;
  return false;
}

static void section_timeline(FILE *out, const json_t *doc)
{
  const json_t *s = json_object_get(doc, "samples"), *t = json_object_get(s, "t");
  fprintf(out, "<section id='timeline'><h2>Over time</h2>\n");
  plot_series mem[3] = {{"host memory", json_object_get(s, "memory_used")},
                        {"spilled to disk", json_object_get(s, "disk_bytes")},
                        {"device memory", json_object_get(s, "device_memory_used")}};
  plot(out, "Memory held by the workers (all workers)", t, mem, 3, true);
  plot_series util[2] = {{"CPU (of the workers' threads)", json_object_get(s, "cpu_util")},
                         {"GPU utilization", json_object_get(s, "gpu_util")}};
  plot(out, "Utilization", t, util, has_numbers(util[1].values) ? 2 : 1, false);
  if (has_numbers(json_object_get(s, "gpu_memory_used"))) {
    plot_series gm[1] = {{"GPU memory used (NVML)", json_object_get(s, "gpu_memory_used")}};
    plot(out, "GPU memory", t, gm, 1, true);
  } else {
    fprintf(out, "<p class='note'>No GPU samples: no worker reported NVML utilization or memory.</p>\n");
  }
  fprintf(out, "</section>\n");
}

/* ---------- time per op ---------- */

static void section_ops(FILE *out, const json_t *doc)
{
  const json_t *ops = json_object_get(doc, "ops");
  size_t n = json_array_size(ops), i;
  const json_t *o;
  double max = 0;
  json_array_foreach(ops, i, o) if (rep_num(o, "busy_s") > max) max = rep_num(o, "busy_s");
  fprintf(out, "<section id='ops'><h2>Time per op</h2>\n<p>Run time of each op's tasks on the workers, summed "
               "(fetches excluded; a fused task's time shared among its parts).</p>\n");
  int row = 26, label = 220, barw = PLOT_W - label - 170;
  fprintf(out, "<svg class='bars' width='%d' height='%zu' role='img'>", PLOT_W, n * (size_t)row + 10);
  json_array_foreach(ops, i, o) {
    double v = rep_num(o, "busy_s"), len = max > 0 ? barw * v / max : 0;
    int y = 5 + (int)i * row;
    fprintf(out, "<text x='%d' y='%d' text-anchor='end' font-size='13'>", label - 8, y + 16);
    esc(out, rep_str(o, "op"));
    fprintf(out, "</text><rect x='%d' y='%d' width='%.1f' height='%d' fill='%s'/>", label, y + 2, len < 1 ? 1 : len,
            row - 6, palette[0]);
    fprintf(out, "<text x='%.1f' y='%d' font-size='12'>%.2f s, %.0f tasks</text>", label + (len < 1 ? 1 : len) + 6,
            y + 16, v, rep_num(o, "tasks"));
  }
  fprintf(out, "</svg>\n%s</section>\n", n == 0 ? "<p class='note'>No task reported progress.</p>" : "");
}

/* ---------- bounded by ---------- */

static void section_bound(FILE *out, const json_t *doc)
{
  const json_t *b = json_object_get(doc, "bound"), *f = json_object_get(b, "fractions");
  static const char *const parts[] = {"compute", "transfer", "idle"};
  fprintf(out, "<section id='bound'><h2>Bounded by: <span class='verdict'>");
  esc(out, rep_str(b, "by"));
  fprintf(out, "</span></h2>\n<svg width='%d' height='40' role='img'>", PLOT_W);
  double x = 0;
  for (int k = 0; k < 3; k++) {
    double v = rep_num(f, parts[k]), w = isnan(v) ? 0 : v * (PLOT_W - 2);
    fprintf(out, "<rect x='%.1f' y='4' width='%.1f' height='20' fill='%s'/>", 1 + x, w, k == 2 ? "#cccccc" : palette[k]);
    if (w > 80) fprintf(out, "<text x='%.1f' y='19' font-size='12' fill='%s'>%s %.0f%%</text>", x + 6, k == 2 ? "#222" : "#fff", parts[k], 100 * v);
    x += w;
  }
  fprintf(out, "</svg>\n<p>Share of the workers' thread time (threads &times; wall) spent running ops, fetching "
               "inputs, and idle.</p>\n<ul>");
  size_t i;
  const json_t *e;
  json_array_foreach(json_object_get(b, "evidence"), i, e) {
    fprintf(out, "<li>");
    esc(out, json_string_value(e));
    fprintf(out, "</li>");
  }
  fprintf(out, "</ul></section>\n");
}

/* ---------- tables ---------- */

static void cell_pct(FILE *out, const json_t *o, const char *key)
{
  double v = rep_num(o, key);
  if (isnan(v)) fprintf(out, "<td>-</td>");
  else fprintf(out, "<td>%.0f%%</td>", 100 * v);
}

static void cell_bytes(FILE *out, const json_t *o, const char *key)
{
  char buf[32];
  fprintf(out, "<td>%s</td>", rep_bytes(rep_num(o, key), buf, sizeof buf));
}

static void section_workers(FILE *out, const json_t *doc)
{
  fprintf(out, "<section id='workers'><h2>Workers</h2>\n<table><tr><th>worker</th><th>device</th><th>threads</th>"
               "<th>tasks</th><th>CPU time</th><th>CPU efficiency</th><th>memory peak</th><th>memory efficiency</th>"
               "<th>device peak</th><th>device efficiency</th><th>fetched</th><th>spilled</th><th>recomputed</th></tr>\n");
  size_t i;
  const json_t *w;
  json_array_foreach(json_object_get(doc, "workers"), i, w) {
    fprintf(out, "<tr><td>");
    esc(out, rep_str(w, "name"));
    fprintf(out, "</td><td>");
    esc(out, rep_str(w, "device"));
    double cpu = rep_num(w, "cpu_s");
    fprintf(out, "</td><td>%.0f</td><td>%.0f</td>", rep_num(w, "threads"), rep_num(w, "tasks_done"));
    if (isnan(cpu)) fprintf(out, "<td>-</td>");
    else fprintf(out, "<td>%.2f s</td>", cpu);
    cell_pct(out, w, "cpu_efficiency"), cell_bytes(out, w, "memory_peak"), cell_pct(out, w, "memory_efficiency");
    cell_bytes(out, w, "device_memory_peak"), cell_pct(out, w, "device_memory_efficiency");
    cell_bytes(out, w, "fetch_bytes"), cell_bytes(out, w, "bytes_spilled"), cell_bytes(out, w, "bytes_recomputed");
    fprintf(out, "</tr>\n");
  }
  fprintf(out, "</table>\n<h3>Memory tiers</h3>\n<table><tr><th>tier</th><th>peak (sum over workers)</th><th>limit</th>"
               "<th>efficiency</th></tr>\n");
  static const char *const tiers[] = {"host", "disk", "device"};
  for (int k = 0; k < 3; k++) {
    const json_t *t = json_object_get(json_object_get(doc, "tiers"), tiers[k]);
    fprintf(out, "<tr><td>%s</td>", tiers[k]);
    cell_bytes(out, t, "peak");
    if (isnan(rep_num(t, "limit"))) fprintf(out, "<td>none</td>");
    else cell_bytes(out, t, "limit");
    cell_pct(out, t, "efficiency");
    fprintf(out, "</tr>\n");
  }
  fprintf(out, "</table></section>\n");
}

static void section_data(FILE *out, const json_t *doc)
{
  const json_t *d = json_object_get(doc, "data");
  static const char *const rows[][2] = {{"bytes_made", "results made"}, {"bytes_fetched", "fetched between workers"},
                                        {"bytes_spilled", "spilled to disk"}, {"bytes_dropped", "dropped under memory pressure"},
                                        {"bytes_recomputed", "recomputed"}};
  fprintf(out, "<section id='data'><h2>Data moved</h2>\n<table>");
  for (int k = 0; k < 5; k++) {
    fprintf(out, "<tr><td>%s</td>", rows[k][1]);
    cell_bytes(out, d, rows[k][0]);
    fprintf(out, "</tr>");
  }
  fprintf(out, "<tr><td>time fetching (thread-seconds)</td><td>%.2f s</td></tr></table></section>\n", rep_num(d, "fetch_s"));
}

static void section_summary(FILE *out, const json_t *doc)
{
  const json_t *t = json_object_get(doc, "tasks"), *e = json_object_get(doc, "efficiency");
  char a[32], b[32];
  fprintf(out, "<section id='summary'><h2>Summary</h2>\n<table>");
  fprintf(out, "<tr><td>wall time</td><td>%s</td></tr>", rep_secs(rep_num(doc, "wall_s"), a, sizeof a));
  fprintf(out, "<tr><td>tasks</td><td>%.0f done of %.0f, %.0f erred, in %.0f graphs</td></tr>", rep_num(t, "done"),
          rep_num(t, "total"), rep_num(t, "erred"), rep_num(t, "graphs"));
  fprintf(out, "<tr><td>results made</td><td>%s</td></tr>", rep_bytes(rep_num(t, "bytes_done"), b, sizeof b));
  fprintf(out, "<tr><td>busy time (ops)</td><td>%.2f s</td></tr><tr><td>CPU efficiency</td>", rep_num(t, "busy_s"));
  cell_pct(out, e, "cpu");
  fprintf(out, "</tr><tr><td>busy efficiency</td>");
  cell_pct(out, e, "busy");
  fprintf(out, "</tr><tr><td>exit status</td><td>%.0f</td></tr></table></section>\n", rep_num(doc, "exit_status"));
}

/* The document for scripts, inside a script element. Every '<' (only ever
 * inside a JSON string) is written \u003c, so no "</script" or "<!--" can
 * end or confuse the element. */
static void embed_json(FILE *out, const json_t *doc)
{
  char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(12));
  if (text == NULL) return;
  fprintf(out, "<script type='application/json' id='report-data'>");
  for (const char *p = text; *p; p++) {
    if (*p == '<') fputs("\\u003c", out);
    else fputc(*p, out);
  }
  fprintf(out, "</script>\n");
  free(text);
}

int rep_write_html(const json_t *doc, FILE *out, char *err, size_t err_len)
{
  static const char *const need[] = {"tasks", "ops", "workers", "samples", "bound", "data", "tiers", "efficiency"};
  for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
    if (json_object_get(doc, need[k]) == NULL) {
      rep_errf(err, err_len, "field '%s' is missing", need[k]);
      return TSR_EPROTO;
    }
  fprintf(out, "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>");
  esc(out, rep_str(doc, "program"));
  fprintf(out, " report</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}"
               "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
               "td:first-child,th:first-child{text-align:left}th{background:#eef2f7}h1{margin-bottom:4px}"
               ".verdict{color:#b8443a}.note{color:#666}code{background:#f3f3f3;padding:2px 4px}</style></head>\n<body>\n");
  fprintf(out, "<h1>");
  esc(out, rep_str(doc, "program"));
  fprintf(out, ": efficiency report</h1>\n<p>Started ");
  esc(out, rep_str(doc, "started"));
  fprintf(out, ". Command: <code>");
  esc(out, rep_str(doc, "command"));
  fprintf(out, "</code></p>\n");
  if (rep_str(doc, "note")[0]) {
    fprintf(out, "<p class='note'>Note: ");
    esc(out, rep_str(doc, "note"));
    fprintf(out, "</p>\n");
  }
  section_summary(out, doc);
  section_bound(out, doc);
  section_ops(out, doc);
  section_timeline(out, doc);
  section_workers(out, doc);
  section_data(out, doc);
  embed_json(out, doc);
  fprintf(out, "</body></html>\n");
  return ferror(out) ? TSR_EIO : 0;
}
