/* examples/tiles/tiles.h — tsr-tiles: whole-slide images split into tiles,
 * their statistics and the seed's tissue filter, over any number of slides
 * in one graph (docs/tiles.md). main.c: flags and the run; output.c: the
 * table, the thumbnails and the saved tiles (PNG through cairo). */
#ifndef TSR_EXAMPLES_TILES_H
#define TSR_EXAMPLES_TILES_H

#include <tessera/tiles.h>

typedef struct tl_opts {
  const char **slides;
  size_t n_slides;
  int64_t tile;
  int64_t region;            /* tiles a side each read task decodes; 0: 8 with a GPU worker, else 1 */
  int level;
  bool drop_edges;
  tsr_tile_rule rule;
  const char *filter_name;   /* "seed", "none" or the rule file */
  const char *save_tiles;    /* dir or NULL */
  const char *out_thumbs;    /* dir or NULL */
  const char *embed_op;      /* plugin op or NULL */
  int64_t embed_dim;
  const char *out;
  bool no_progress;            /* --no-progress: no bar on stderr (the per-slide lines stay) */
  const char *report;          /* --report FILE.html|.json (docs/report.md) */
} tl_opts;

typedef struct tl_slide {
  const char *path;
  char name[256];            /* file name without directory */
  char error[700];           /* "" when the slide was read */
  int64_t width, height, ny, nx, thumb_factor, thumb_h, thumb_w;
  tsr_array *img, *stats, *kept, *thumb, *embed;
  double *stats_v;           /* [ny, nx, TSR_TILE_NSTATS] */
  uint8_t *kept_v;           /* [ny, nx] */
  uint8_t *thumb_v;          /* [thumb_h, thumb_w, 3] */
  float *embed_v;            /* [ny, nx, embed_dim] */
} tl_slide;

int tl_write_table(const tl_opts *o, const tl_slide *s, size_t n);
int tl_write_thumb(const tl_opts *o, const tl_slide *s);
/* Writes rgb (h x w) as a PNG. */
int tl_write_png(const char *path, const uint8_t *rgb, int64_t w, int64_t h, const tl_slide *outline, int64_t tile);

#endif
