/* tessera/tiles.h — whole-slide images (TIFF / Aperio SVS) as chunked RGB
 * arrays, their tile statistics, and tile filters (docs/tiles.md).
 *
 * tsr_from_tiff reads only the file's directories here, on the client, and
 * records one `tiff_read` task per output tile: a worker decodes only the
 * source tiles (or strips) that tile overlaps. The workers must see the
 * file at the absolute path the client resolves.
 *
 * Supported: tiled and striped TIFF (classic and BigTIFF), 8-bit grey, RGB
 * and RGBA, contiguous; JPEG (YCbCr or RGB, Aperio's shared JPEG tables),
 * LZW, deflate, PackBits and none. Pyramid levels: directory 0 and every
 * later tiled directory smaller than the level before it (Aperio's thumbnail,
 * label and macro images are striped and so are not levels).
 *
 * Errors: as in tessera.h; tsr_errmsg() names the file, the directory and
 * the field (e.g. "Compression 33005 ... is not supported"). */
#ifndef TESSERA_TILES_H
#define TESSERA_TILES_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_TIFF_MAX_LEVELS 32

typedef struct tsr_tiff_level {
  int64_t width, height;     /* pixels */
  int ifd;                   /* its TIFF directory */
  bool tiled;                /* false: strips */
  int64_t block_w, block_h;  /* tile size, or width x rows per strip */
  int compression;           /* TIFFTAG_COMPRESSION: 1 none, 5 LZW, 7 JPEG, 8 deflate ... */
  int photometric;           /* TIFFTAG_PHOTOMETRIC */
  int samples;               /* 1, 3 or 4 */
} tsr_tiff_level;

/* What the client learns from a file's directories. Owned by the caller
 * (tsr_tiff_info_destroy); immutable, so any thread may read it. */
typedef struct tsr_tiff_info {
  char *path;                 /* absolute */
  int n_levels;
  tsr_tiff_level levels[TSR_TIFF_MAX_LEVELS];  /* level 0 the largest */
  bool aperio;                /* an Aperio SVS (ImageDescription says so) */
  double mpp;                 /* microns per pixel at level 0 (SVS "MPP", or XResolution), 0 unknown */
  double app_mag;             /* objective magnification (SVS "AppMag"), 0 unknown */
  char *description;          /* level 0's ImageDescription, "" when absent */
} tsr_tiff_info;

/* Reads and checks path's directories (every level: sample layout,
 * compression, and that each tile or strip lies inside the file). On
 * success *info_p is the caller's. Errors: TSR_EINVAL (NULL), TSR_EIO (not
 * there, not a TIFF, truncated, unsupported: the message says which). */
int tsr_tiff_info_read(const char *path, tsr_tiff_info **info_p);
void tsr_tiff_info_destroy(tsr_tiff_info **info_p);

/* Level `level` of the slide at path as a u8 [height, width, 3] array whose
 * chunks are tile x tile x 3 (the last row and column of chunks smaller):
 * chunk (i, j) is output tile (row i, column j). tile in 16..16384. */
int tsr_from_tiff(tsr_array_ctx *ctx, const char *path, int level, int64_t tile, tsr_array **out_p);

/* ---------- tile statistics ---------- */

/* The statistics of one tile, in this order (docs/tiles.md has the exact
 * definitions; they follow the seed's filter and the reference table of
 * the CMU-1 slide): grey8 is Pillow's convert("L"), gray the float
 * 0.299 R + 0.587 G + 0.114 B. */
typedef enum tsr_tile_stat {
  TSR_TILE_MIN = 0,    /* smallest grey8 */
  TSR_TILE_MAX,        /* largest grey8 */
  TSR_TILE_P5,         /* 5th percentile of grey8 (numpy.percentile, linear) */
  TSR_TILE_P50,        /* median of grey8 */
  TSR_TILE_MEAN_R, TSR_TILE_MEAN_G, TSR_TILE_MEAN_B,
  TSR_TILE_MEAN_GRAY, TSR_TILE_STD_GRAY,  /* population std */
  TSR_TILE_MEAN_SAT,   /* mean of (max - min) / max over a pixel's RGB */
  TSR_TILE_FRAC_BG,    /* fraction with gray > 220 and saturation < 0.1 */
  TSR_TILE_PIXELS,     /* pixels in the tile (< tile^2 at partial edges) */
  TSR_TILE_NSTATS
} tsr_tile_stat;

/* Column names ("min", "max", "p5", "p50", "mean_r", ... "pixels"). */
const char *tsr_tile_stat_name(tsr_tile_stat stat);

typedef struct tsr_tile_opts {
  int64_t tile;          /* tile size in pixels (default 256) */
  bool drop_partial;     /* leave out tiles cut by the right or bottom edge */
} tsr_tile_opts;
#define TSR_TILE_OPTS_DEFAULT {256, false}

/* The statistics of every tile of image img (u8 [H, W, 3]) as f64
 * [ny, nx, TSR_TILE_NSTATS], one chunk per tile. ny = ceil(H / tile)
 * (floor with drop_partial), nx likewise. img may have any chunking: when
 * its chunks are not the tiles it is rechunked first, and the table is the
 * same bytes either way. */
int tsr_tile_stats(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *opts, tsr_array **stats_p);

/* ---------- filters ---------- */

typedef enum tsr_cmp { TSR_LT = 0, TSR_LE = 1, TSR_GT = 2, TSR_GE = 3 } tsr_cmp;
typedef struct tsr_tile_cond {
  tsr_tile_stat stat;
  tsr_cmp cmp;
  double value;
} tsr_tile_cond;
#define TSR_TILE_RULE_MAX 32
/* A tile is kept when every condition holds (no condition: every tile). */
typedef struct tsr_tile_rule {
  int n;
  tsr_tile_cond conds[TSR_TILE_RULE_MAX];
} tsr_tile_rule;

/* The seed's tissue rule: min < 135, max >= 255, p5 < 162, p50 < 225. */
void tsr_tile_rule_seed(tsr_tile_rule *rule);
/* Appends a condition; TSR_EINVAL when full or out of range. */
int tsr_tile_rule_add(tsr_tile_rule *rule, tsr_tile_stat stat, tsr_cmp cmp, double value);
/* Parses a rule's text: conditions "STAT OP NUMBER" (OP one of < <= > >=)
 * separated by newlines, ";" or "&&"; "#" starts a comment. The message
 * names the line and the word. */
int tsr_tile_rule_parse(const char *text, tsr_tile_rule *rule);

/* Kept flags (u8 [ny, nx], 1 kept) of a statistics array under rule. */
int tsr_tile_filter(tsr_array_ctx *ctx, const tsr_array *stats, const tsr_tile_rule *rule, tsr_array **kept_p);

/* A thumbnail: each tile of img box-averaged by factor (a divisor of
 * opts->tile), u8 [ceil(H'/f), ceil(W'/f), 3] over the tiles of the grid. */
int tsr_tile_thumb(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *opts, int64_t factor,
                   tsr_array **thumb_p);

/* ---------- per-tile ops and batches ---------- */

/* out[i, j, :] = op(tile (i, j) of img) for every tile of the grid: op
 * (a built-in or a plugin op, docs/plugins.md) gets the u8 [h, w, 3] tile,
 * params plus "dim", and must give dtype [1, 1, dim]. */
int tsr_tile_map(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *opts, const char *op,
                 const tsr_args *params, tsr_dtype dtype, int64_t dim, tsr_array **out_p);

typedef struct tsr_tiles_progress {
  /* Called on the calling thread as arrays finish and about every
   * interval_s while waiting: arrays gathered of n, tasks done of total. */
  void (*fn)(void *arg, size_t arrays_done, size_t n_arrays, size_t tasks_done, size_t tasks_total);
  void *arg;
  double interval_s;
} tsr_tiles_progress;

typedef struct tsr_tiles_status {
  int rc;              /* 0, or why array i could not be computed */
  char message[512];   /* the worker's message ("tiff_read: /s/a.svs: ...") */
} tsr_tiles_status;

/* Computes n arrays (dense) in ONE graph, like tsr_compute_many, but a
 * failed task fails only the arrays that need it: status[i] says, and
 * every other bufs[i] is filled. Returns the number of failed arrays, or a
 * negative error when nothing could be submitted. progress may be NULL. */
int tsr_tiles_compute(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, void *const *bufs,
                      const size_t *caps, const tsr_tiles_progress *progress, int timeout_ms,
                      tsr_tiles_status *status);

#ifdef __cplusplus
}
#endif

#endif
