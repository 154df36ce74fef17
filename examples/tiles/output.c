/* examples/tiles/output.c — tsr-tiles' table (one row per tile, one per
 * unreadable slide) and its pictures: a thumbnail per slide with the kept
 * tiles outlined, and kept tiles as PNG files (cairo). */
#include <cairo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiles.h"

static const int stat_cols[] = {TSR_TILE_MIN, TSR_TILE_MAX, TSR_TILE_P5, TSR_TILE_P50, TSR_TILE_MEAN_R,
                                TSR_TILE_MEAN_G, TSR_TILE_MEAN_B, TSR_TILE_MEAN_GRAY, TSR_TILE_STD_GRAY,
                                TSR_TILE_MEAN_SAT, TSR_TILE_FRAC_BG};
#define N_COLS (sizeof stat_cols / sizeof stat_cols[0])

static void write_header(FILE *f, const tl_opts *o)
{
  fprintf(f, "slide\tlevel\tx\ty\tw\th");
  for (size_t c = 0; c < N_COLS; c++) fprintf(f, "\t%s", tsr_tile_stat_name(stat_cols[c]));
  fprintf(f, "\tkept");
  for (int64_t e = 0; o->embed_op != NULL && e < o->embed_dim; e++) fprintf(f, "\temb%lld", (long long)e);
  fprintf(f, "\terror\n");
}

static void write_rows(FILE *f, const tl_opts *o, const tl_slide *s)
{
  for (int64_t y = 0; y < s->ny; y++)
    for (int64_t x = 0; x < s->nx; x++) {
      const double *t = s->stats_v + (y * s->nx + x) * TSR_TILE_NSTATS;
      int64_t x0 = x * o->tile, y0 = y * o->tile;
      int64_t w = s->width - x0 < o->tile ? s->width - x0 : o->tile;
      int64_t h = s->height - y0 < o->tile ? s->height - y0 : o->tile;
      fprintf(f, "%s\t%d\t%lld\t%lld\t%lld\t%lld", s->name, o->level, (long long)x0, (long long)y0, (long long)w,
              (long long)h);
      for (size_t c = 0; c < N_COLS; c++) fprintf(f, c < 4 ? "\t%.1f" : "\t%.4f", t[stat_cols[c]]);
      fprintf(f, "\t%d", s->kept_v[y * s->nx + x]);
      for (int64_t e = 0; o->embed_op != NULL && e < o->embed_dim; e++)
        fprintf(f, "\t%.6g", s->embed_v[(y * s->nx + x) * o->embed_dim + e]);
      fprintf(f, "\t\n");
    }
}

int tl_write_table(const tl_opts *o, const tl_slide *s, size_t n)
{
  FILE *f = fopen(o->out, "w");
  if (f == NULL) return fprintf(stderr, "tsr-tiles: cannot create %s\n", o->out), -1;
  write_header(f, o);
  for (size_t i = 0; i < n; i++) {
    if (s[i].error[0] == '\0') {
      write_rows(f, o, &s[i]);
      continue;
    }
    fprintf(f, "%s\t%d\tNA\tNA\tNA\tNA", s[i].name, o->level);
    for (size_t c = 0; c < N_COLS + 1 + (o->embed_op ? (size_t)o->embed_dim : 0); c++) fprintf(f, "\tNA");
    fprintf(f, "\t%s\n", s[i].error);
  }
  return fclose(f) == 0 ? 0 : (fprintf(stderr, "tsr-tiles: cannot write %s\n", o->out), -1);
}

/* Kept tiles of outline (at `tile` pixels a tile in this picture) in green. */
static void draw_outlines(cairo_t *cr, const tl_slide *outline, double tile)
{
  cairo_set_source_rgb(cr, 0.0, 0.8, 0.2);
  cairo_set_line_width(cr, tile >= 8 ? 1.5 : 1.0);
  for (int64_t y = 0; y < outline->ny; y++)
    for (int64_t x = 0; x < outline->nx; x++)
      if (outline->kept_v[y * outline->nx + x]) cairo_rectangle(cr, x * tile + 0.75, y * tile + 0.75, tile - 1.5, tile - 1.5);
  cairo_stroke(cr);
}

int tl_write_png(const char *path, const uint8_t *rgb, int64_t w, int64_t h, const tl_slide *outline, int64_t tile)
{
  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)w, (int)h);
  if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) return -1;
  cairo_surface_flush(surf);
  unsigned char *px = cairo_image_surface_get_data(surf);
  int stride = cairo_image_surface_get_stride(surf);
  for (int64_t y = 0; y < h; y++)
    for (int64_t x = 0; x < w; x++) {
      const uint8_t *p = rgb + (y * w + x) * 3;
      ((uint32_t *)(px + y * stride))[x] = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
    }
  cairo_surface_mark_dirty(surf);
  if (outline != NULL) {
    cairo_t *cr = cairo_create(surf);
    draw_outlines(cr, outline, (double)tile);
    cairo_destroy(cr);
  }
  cairo_status_t st = cairo_surface_write_to_png(surf, path);
  cairo_surface_destroy(surf);
  if (st != CAIRO_STATUS_SUCCESS) return fprintf(stderr, "tsr-tiles: cannot write %s: %s\n", path, cairo_status_to_string(st)), -1;
  return 0;
}

int tl_write_thumb(const tl_opts *o, const tl_slide *s)
{
  char path[1200];
  snprintf(path, sizeof path, "%s/%s.png", o->out_thumbs, s->name);
  return tl_write_png(path, s->thumb_v, s->thumb_w, s->thumb_h, s, o->tile / s->thumb_factor);
}
