/* plot/plot.c — tsr_plot_embedding_png (plot.h): the embedding coloured by
 * cluster. The page: title on top, the points' box on the left with UMAP1
 * below and UMAP2 beside it, the legend (colour, id, count) on the right
 * in as many columns as it needs. Points go through an accumulation
 * buffer, never one cairo arc each (plot.h says why); text and frames are
 * cairo's. */
#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

#define W TSR_PLOT_WIDTH
#define H TSR_PLOT_HEIGHT
#define FONT "DejaVu Sans"
#define LEGEND_FONT 13.0
#define LEGEND_LINE 19.0
#define TSR_PLOT_PI 3.14159265358979323846

typedef struct category {
  int32_t label;
  int64_t count;
  uint32_t color;
  double mx, my;   /* median position, data units */
} category;

typedef struct page {
  double x0, y0, x1, y1;           /* the points' box, pixels */
  double xmin, xmax, ymin, ymax;   /* its data range */
  double legend_x, col_w;
  int rows;                        /* legend rows per column */
} page;

void tsr_plot_point_style(int64_t n, double *radius_p, double *alpha_p)
{
  /* ~4 px discs for a few hundred points, down to sub-pixel splats for
   * millions; alpha falls too so dense regions show density, not a blot. */
  double s = n < 1 ? 1.0 : 1000.0 / (double)n;
  double r = 4.0 * pow(s, 0.25), a = 0.9 * pow(s, 0.3);
  *radius_p = r < 0.6 ? 0.6 : (r > 4.5 ? 4.5 : r);
  *alpha_p = a < 0.06 ? 0.06 : (a > 0.9 ? 0.9 : a);
}

static int cmp_i32(const void *a, const void *b)
{
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static int cmp_f32(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static int64_t find_cat(const category *c, int64_t k, int32_t label)
{
  int64_t lo = 0, hi = k - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (c[mid].label < label) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool finite_point(const float *xy, int64_t i) { return isfinite(xy[2 * i]) && isfinite(xy[2 * i + 1]); }

/* The distinct labels of the finite points, sorted, with counts and colours;
 * cat_of[i] their index per point (-1: not finite). */
static int categories(const float *xy, const int32_t *labels, int64_t n, category **cats_p, int64_t *k_p,
                      int64_t *cat_of, tsr_errbuf *err)
{
  int32_t *s = malloc((size_t)n * sizeof *s);
  int64_t m = 0, k = 0;
  if (s == NULL) return tsr_fail(err, TSR_ENOMEM, "plot: out of memory for %lld labels", (long long)n);
  for (int64_t i = 0; i < n; i++)
    if (finite_point(xy, i)) s[m++] = labels[i];
  qsort(s, (size_t)m, sizeof *s, cmp_i32);
  for (int64_t i = 0; i < m; i++) k += i == 0 || s[i] != s[i - 1];
  category *c = calloc((size_t)(k > 0 ? k : 1), sizeof *c);
  if (c == NULL) {
    free(s);
    return tsr_fail(err, TSR_ENOMEM, "plot: out of memory for %lld clusters", (long long)k);
  }
  for (int64_t i = 0, j = -1; i < m; i++)
    if (i == 0 || s[i] != s[i - 1]) c[++j].label = s[i];
  free(s);
  for (int64_t j = 0; j < k; j++) c[j].color = tsr_plot_color(j, k);
  for (int64_t i = 0; i < n; i++) {
    cat_of[i] = finite_point(xy, i) && k > 0 ? find_cat(c, k, labels[i]) : -1;
    if (cat_of[i] >= 0) c[cat_of[i]].count++;
  }
  *cats_p = c, *k_p = k;
  return 0;
}

/* Each cluster's median x and y (where its id is written). */
static int medians(const float *xy, int64_t n, const int64_t *cat_of, category *c, int64_t k, tsr_errbuf *err)
{
  int64_t *start = calloc((size_t)k + 1, sizeof *start), *fill = calloc((size_t)k + 1, sizeof *fill);
  float *g = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *g);
  if (start == NULL || fill == NULL || g == NULL) {
    free(start), free(fill), free(g);
    return tsr_fail(err, TSR_ENOMEM, "plot: out of memory for %lld points", (long long)n);
  }
  for (int64_t j = 0; j < k; j++) start[j + 1] = start[j] + c[j].count;
  for (int64_t i = 0; i < n; i++)
    if (cat_of[i] >= 0) {
      int64_t at = start[cat_of[i]] + fill[cat_of[i]]++;
      g[at] = xy[2 * i], g[n + at] = xy[2 * i + 1];
    }
  for (int64_t j = 0; j < k; j++) {
    size_t len = (size_t)c[j].count;
    qsort(g + start[j], len, sizeof *g, cmp_f32);
    qsort(g + n + start[j], len, sizeof *g, cmp_f32);
    c[j].mx = g[start[j] + (int64_t)len / 2], c[j].my = g[n + start[j] + (int64_t)len / 2];
  }
  free(start), free(fill), free(g);
  return 0;
}

static void count_text(int64_t v, char *out, size_t cap)
{
  char digits[32];
  int len = snprintf(digits, sizeof digits, "%lld", (long long)v), o = 0;
  for (int i = 0; i < len && o + 2 < (int)cap; i++) {
    if (i > 0 && (len - i) % 3 == 0 && digits[i] != '-' && digits[i - 1] != '-') out[o++] = ',';
    out[o++] = digits[i];
  }
  out[o] = '\0';
}

static void entry_text(const category *c, char *out, size_t cap)
{
  char cnt[40];
  count_text(c->count, cnt, sizeof cnt);
  snprintf(out, cap, "%d  (%s)", (int)c->label, cnt);
}

/* Places the box and the legend: the legend as wide as its longest entry,
 * in columns of as many rows as fit the height. */
static void layout(cairo_t *cr, const float *xy, int64_t n, const category *c, int64_t k, page *pg)
{
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, LEGEND_FONT);
  char head[64], cnt[40];
  cairo_text_extents_t he;
  count_text(n, cnt, sizeof cnt);
  snprintf(head, sizeof head, "cluster (n = %s)", cnt);
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_text_extents(cr, head, &he);
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  double widest = fmax(90, he.x_advance - 18);  /* the header starts 18 px left of the entries' text */
  for (int64_t j = 0; j < k; j++) {
    char t[64];
    cairo_text_extents_t e;
    entry_text(&c[j], t, sizeof t);
    cairo_text_extents(cr, t, &e);
    widest = fmax(widest, e.x_advance);
  }
  pg->rows = (int)((H - 60.0 - 40.0) / LEGEND_LINE);
  int64_t cols = k == 0 ? 1 : (k + pg->rows - 1) / pg->rows;
  if (cols > 4) cols = 4;  /* past 4 columns the rest are summarized */
  pg->col_w = widest + 28;
  pg->x0 = 62, pg->y0 = 62, pg->y1 = H - 52;
  pg->x1 = W - 16 - cols * pg->col_w;
  if (pg->x1 < pg->x0 + 300) pg->x1 = pg->x0 + 300;
  pg->legend_x = pg->x1 + 16;
  pg->xmin = pg->ymin = INFINITY, pg->xmax = pg->ymax = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (finite_point(xy, i)) {
      pg->xmin = fmin(pg->xmin, xy[2 * i]), pg->xmax = fmax(pg->xmax, xy[2 * i]);
      pg->ymin = fmin(pg->ymin, xy[2 * i + 1]), pg->ymax = fmax(pg->ymax, xy[2 * i + 1]);
    }
  if (!(pg->xmax >= pg->xmin)) pg->xmin = pg->ymin = -1, pg->xmax = pg->ymax = 1;
  double px = fmax(pg->xmax - pg->xmin, 1e-6) * 0.03, py = fmax(pg->ymax - pg->ymin, 1e-6) * 0.03;
  pg->xmin -= px, pg->xmax += px, pg->ymin -= py, pg->ymax += py;
}

static double to_px(const page *pg, double x) { return pg->x0 + (x - pg->xmin) / (pg->xmax - pg->xmin) * (pg->x1 - pg->x0); }
static double to_py(const page *pg, double y) { return pg->y1 - (y - pg->ymin) / (pg->ymax - pg->ymin) * (pg->y1 - pg->y0); }

/* Splats every point as an anti-aliased disc into per-pixel coverage and
 * colour sums, then resolves them into a premultiplied ARGB32 surface of
 * the box's size. */
static cairo_surface_t *splat(const float *xy, int64_t n, const int64_t *cat_of, const category *c, const page *pg,
                              tsr_errbuf *err)
{
  int bw = (int)(pg->x1 - pg->x0), bh = (int)(pg->y1 - pg->y0);
  float *acc = calloc((size_t)bw * (size_t)bh * 4, sizeof *acc);
  cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, bw, bh);
  if (acc == NULL || cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    free(acc), cairo_surface_destroy(s);
    tsr_fail(err, TSR_ENOMEM, "plot: out of memory for a %d x %d picture", bw, bh);
    return NULL;
  }
  double r, alpha;
  tsr_plot_point_style(n, &r, &alpha);
  for (int64_t i = 0; i < n; i++) {
    if (cat_of[i] < 0) continue;
    double cx = to_px(pg, xy[2 * i]) - pg->x0, cy = to_py(pg, xy[2 * i + 1]) - pg->y0;
    uint32_t rgb = c[cat_of[i]].color;
    float cr = (float)(rgb >> 16 & 255) / 255.0f, cg = (float)(rgb >> 8 & 255) / 255.0f, cb = (float)(rgb & 255) / 255.0f;
    for (int yy = (int)floor(cy - r - 1); yy <= (int)ceil(cy + r + 1); yy++)
      for (int xx = (int)floor(cx - r - 1); xx <= (int)ceil(cx + r + 1); xx++) {
        if (xx < 0 || yy < 0 || xx >= bw || yy >= bh) continue;
        double d = hypot(xx + 0.5 - cx, yy + 0.5 - cy), w = r + 0.5 - d;
        if (w <= 0) continue;
        float wf = (float)(w > 1 ? 1 : w), *p = acc + ((size_t)yy * (size_t)bw + (size_t)xx) * 4;
        p[0] += wf, p[1] += wf * cr, p[2] += wf * cg, p[3] += wf * cb;
      }
  }
  cairo_surface_flush(s);
  unsigned char *data = cairo_image_surface_get_data(s);
  int stride = cairo_image_surface_get_stride(s);
  for (int yy = 0; yy < bh; yy++)
    for (int xx = 0; xx < bw; xx++) {
      const float *p = acc + ((size_t)yy * (size_t)bw + (size_t)xx) * 4;
      double a = p[0] > 0 ? 1.0 - pow(1.0 - alpha, p[0]) : 0.0;
      uint32_t px = 0;
      if (a > 0) {
        uint32_t A = (uint32_t)lround(a * 255), R = (uint32_t)lround(a * 255 * p[1] / p[0]);
        uint32_t G = (uint32_t)lround(a * 255 * p[2] / p[0]), B = (uint32_t)lround(a * 255 * p[3] / p[0]);
        px = A << 24 | R << 16 | G << 8 | B;
      }
      memcpy(data + (size_t)yy * (size_t)stride + (size_t)xx * 4, &px, 4);
    }
  cairo_surface_mark_dirty(s);
  free(acc);
  return s;
}

static void text_at(cairo_t *cr, const char *t, double x, double y, double size, bool bold, double anchor)
{
  cairo_text_extents_t e;
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents(cr, t, &e);
  cairo_move_to(cr, x - anchor * e.x_advance, y);
  cairo_show_text(cr, t);
}

static void draw_frame(cairo_t *cr, const page *pg, const char *title)
{
  cairo_set_source_rgb(cr, 0.55, 0.55, 0.55);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, floor(pg->x0) + 0.5, floor(pg->y0) + 0.5, floor(pg->x1 - pg->x0), floor(pg->y1 - pg->y0));
  cairo_stroke(cr);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  if (title != NULL) text_at(cr, title, W / 2.0, 36, 20, true, 0.5);
  text_at(cr, "UMAP1", (pg->x0 + pg->x1) / 2, H - 20, 15, false, 0.5);
  cairo_save(cr);
  cairo_translate(cr, 34, (pg->y0 + pg->y1) / 2);
  cairo_rotate(cr, -TSR_PLOT_PI / 2);
  text_at(cr, "UMAP2", 0, 0, 15, false, 0.5);
  cairo_restore(cr);
}

/* Each cluster's id at its median point, dark on a white halo. */
static void draw_ids(cairo_t *cr, const category *c, int64_t k, const page *pg)
{
  if (k > 60) return;  /* ids would cover the points */
  cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_set_font_size(cr, 14);
  for (int64_t j = 0; j < k; j++) {
    char t[16];
    cairo_text_extents_t e;
    snprintf(t, sizeof t, "%d", (int)c[j].label);
    cairo_text_extents(cr, t, &e);
    cairo_move_to(cr, to_px(pg, c[j].mx) - e.x_advance / 2, to_py(pg, c[j].my) + e.height / 2);
    cairo_text_path(cr, t);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_set_line_width(cr, 3.5);
    cairo_stroke_preserve(cr);
    cairo_set_source_rgb(cr, 0.05, 0.05, 0.05);
    cairo_fill(cr);
  }
}

static void draw_legend(cairo_t *cr, const category *c, int64_t k, int64_t n, int64_t dropped, const page *pg)
{
  char head[64], cnt[40], t[96];
  count_text(n, cnt, sizeof cnt);
  snprintf(head, sizeof head, "cluster (n = %s)", cnt);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text_at(cr, head, pg->legend_x, pg->y0 + 4, LEGEND_FONT, true, 0.0);
  int64_t shown = k <= (int64_t)pg->rows * 4 ? k : (int64_t)pg->rows * 4 - 1;
  for (int64_t j = 0; j < shown; j++) {
    double x = pg->legend_x + (double)(j / pg->rows) * pg->col_w, y = pg->y0 + 26 + (double)(j % pg->rows) * LEGEND_LINE;
    uint32_t rgb = c[j].color;
    cairo_set_source_rgb(cr, (rgb >> 16 & 255) / 255.0, (rgb >> 8 & 255) / 255.0, (rgb & 255) / 255.0);
    cairo_arc(cr, x + 6, y - 4.5, 6, 0, 2 * TSR_PLOT_PI);
    cairo_fill(cr);
    entry_text(&c[j], t, sizeof t);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, t, x + 18, y, LEGEND_FONT, false, 0.0);
  }
  double y = pg->y0 + 26 + (double)(shown < pg->rows ? shown : pg->rows) * LEGEND_LINE;
  cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
  if (shown < k) {
    snprintf(t, sizeof t, "... %lld more clusters", (long long)(k - shown));
    text_at(cr, t, pg->legend_x + (double)(shown / pg->rows) * pg->col_w, pg->y0 + 26 + (double)(shown % pg->rows) * LEGEND_LINE,
            LEGEND_FONT, false, 0.0);
  }
  if (dropped > 0) {
    snprintf(t, sizeof t, "%lld points not finite", (long long)dropped);
    text_at(cr, t, pg->legend_x, fmin(y + 8, H - 20.0), LEGEND_FONT - 1, false, 0.0);
  }
}

static int draw(cairo_t *cr, const float *xy, int64_t n, const int64_t *cat_of, const category *c, int64_t k,
                const char *title, tsr_errbuf *err)
{
  page pg;
  layout(cr, xy, n, c, k, &pg);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_surface_t *pts = splat(xy, n, cat_of, c, &pg, err);
  if (pts == NULL) return TSR_ENOMEM;
  cairo_set_source_surface(cr, pts, pg.x0, pg.y0);
  cairo_paint(cr);
  cairo_surface_destroy(pts);
  int64_t dropped = n;
  for (int64_t j = 0; j < k; j++) dropped -= c[j].count;
  draw_frame(cr, &pg, title);
  draw_ids(cr, c, k, &pg);
  draw_legend(cr, c, k, n, dropped, &pg);
  return 0;
}

int tsr_plot_embedding_png(const char *path, const float *xy, const int32_t *labels, int64_t n, const char *title,
                           tsr_errbuf *err)
{
  if (path == NULL || xy == NULL || labels == NULL) return tsr_fail(err, TSR_EINVAL, "plot: NULL argument");
  if (n < 1 || n > TSR_PLOT_MAX_POINTS)
    return tsr_fail(err, TSR_EINVAL, "plot: %lld points, expected 1..%lld", (long long)n, (long long)TSR_PLOT_MAX_POINTS);
  int64_t *cat_of = malloc((size_t)n * sizeof *cat_of), k = 0;
  category *c = NULL;
  if (cat_of == NULL) return tsr_fail(err, TSR_ENOMEM, "plot: out of memory for %lld points", (long long)n);
  int rc = categories(xy, labels, n, &c, &k, cat_of, err);
  if (rc == 0) rc = medians(xy, n, cat_of, c, k, err);
  cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
  cairo_t *cr = cairo_create(s);
  if (rc == 0 && cairo_status(cr) != CAIRO_STATUS_SUCCESS) rc = tsr_fail(err, TSR_ENOMEM, "plot: cannot create a %d x %d surface", W, H);
  if (rc == 0) rc = draw(cr, xy, n, cat_of, c, k, title, err);
  cairo_status_t st = rc == 0 ? cairo_surface_write_to_png(s, path) : CAIRO_STATUS_SUCCESS;
  if (rc == 0 && st != CAIRO_STATUS_SUCCESS)
    rc = tsr_fail(err, TSR_EIO, "plot: cannot write '%s': %s", path, cairo_status_to_string(st));
  cairo_destroy(cr);
  cairo_surface_destroy(s);
  free(cat_of), free(c);
  return rc;
}
