/* graphs/tiles.c — tile statistics, filters and thumbnails over an RGB
 * image array (tessera/tiles.h): one `tile_stats`, `tile_filter` or
 * `tile_thumb` task per tile (kernels/cpu/tiles.c). An image whose chunks
 * are not the tiles is rechunked first, so the table never depends on how
 * the image was chunked. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/tiles.h"
#include "tiles_int.h"

#define TSR_API __attribute__((visibility("default")))

static const char *const stat_names[TSR_TILE_NSTATS] = {
  "min", "max", "p5", "p50", "mean_r", "mean_g", "mean_b", "mean_gray", "std_gray", "mean_sat", "frac_bg", "pixels",
};

TSR_API const char *tsr_tile_stat_name(tsr_tile_stat stat)
{
  return stat >= 0 && stat < TSR_TILE_NSTATS ? stat_names[stat] : "?";
}

/* img cut to the tile grid (drop_partial) and chunked by tile x tile x 3,
 * or, with regions, kept in chunks that are whole multiples of the tile.
 * *grid_p is a new array the caller frees. */
int gtile_grid(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *o, const char *what, bool regions,
               tsr_array **grid_p)
{
  if (img->dtype != TSR_U8 || img->ndim != 3 || img->shape[2] != 3)
    return client_fail(TSR_ESHAPE, "%s: the image must be u8 [H, W, 3]", what);
  if (o->tile < 1) return client_fail(TSR_EINVAL, "%s: tile %lld must be >= 1", what, (long long)o->tile);
  int64_t h = img->shape[0], w = img->shape[1];
  if (o->drop_partial) h -= h % o->tile, w -= w % o->tile;
  if (h == 0 || w == 0)
    return client_fail(TSR_EINVAL, "%s: the image (%lldx%lld) holds no full %lld-pixel tile", what,
                       (long long)img->shape[1], (long long)img->shape[0], (long long)o->tile);
  const tsr_array *cut = img;
  tsr_array *sliced = NULL, *re = NULL;
  int rc = 0;
  if (h != img->shape[0] || w != img->shape[1]) {
    int64_t start[3] = {0, 0, 0}, stop[3] = {h, w, 3};
    rc = tsr_slice(ctx, img, start, stop, &sliced);
    cut = sliced;
  }
  bool keep = cut->chunk[2] == 3 && (regions ? cut->chunk[0] % o->tile == 0 && cut->chunk[1] % o->tile == 0
                                             : cut->chunk[0] == o->tile && cut->chunk[1] == o->tile);
  if (rc == 0 && !keep) {
    int64_t chunks[3] = {o->tile, o->tile, 3};
    rc = tsr_rechunk(ctx, cut, chunks, &re);
  } else if (rc == 0) {
    rc = garray_view(ctx, "tilegrid", cut, &re);
  }
  tsr_array_free(ctx, &sliced);
  if (rc == 0) *grid_p = re;
  return rc;
}

/* Statistics of every tile of a grid whose chunks are regions of whole
 * tiles (one tile or many): one tile_stats task a chunk (param tile), its
 * block of the output [H/t, W/t, N]. */
static int region_stats(tsr_array_ctx *ctx, const tsr_array *grid, int64_t t, tsr_array **out_p)
{
  int64_t shape[3] = {(grid->shape[0] + t - 1) / t, (grid->shape[1] + t - 1) / t, TSR_TILE_NSTATS};
  int64_t chunks[3] = {grid->chunk[0] / t, grid->chunk[1] / t, TSR_TILE_NSTATS};
  tsr_array *out = NULL;
  tsr_args *args = NULL;
  int rc = garray_new(ctx, "tilestats", TSR_F64, 3, shape, chunks, &out);
  if (rc == 0 && (tsr_args_new(&args) != 0 || tsr_args_int(args, "tile", t) != 0))
    rc = client_fail(TSR_ENOMEM, "tile_stats: out of memory");
  for (size_t b = 0; rc == 0 && b < out->nblocks; b++) {
    int64_t idx[3];
    garray_index(out, b, idx);
    const char *in = grid->keys[garray_block(grid, idx)];
    rc = gtask_add(ctx, out->keys[b], "tile_stats", args, &in, 1);
  }
  tsr_args_destroy(&args);
  if (rc != 0) tsr_array_free(ctx, &out);
  if (rc == 0) *out_p = out;
  return rc;
}

TSR_API int tsr_tile_stats(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *opts, tsr_array **stats_p)
{
  if (ctx == NULL || img == NULL || stats_p == NULL) return client_fail(TSR_EINVAL, "tile_stats: NULL argument");
  tsr_tile_opts o = opts != NULL ? *opts : (tsr_tile_opts)TSR_TILE_OPTS_DEFAULT;
  tsr_array *grid = NULL;
  int rc = gtile_grid(ctx, img, &o, "tile_stats", true, &grid);
  if (rc == 0) rc = region_stats(ctx, grid, o.tile, stats_p);
  tsr_array_free(ctx, &grid);
  return rc;
}

TSR_API int tsr_tile_thumb(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *opts, int64_t factor,
                           tsr_array **thumb_p)
{
  if (ctx == NULL || img == NULL || thumb_p == NULL) return client_fail(TSR_EINVAL, "tile_thumb: NULL argument");
  tsr_tile_opts o = opts != NULL ? *opts : (tsr_tile_opts)TSR_TILE_OPTS_DEFAULT;
  if (factor < 1 || o.tile % factor != 0)
    return client_fail(TSR_EINVAL, "tile_thumb: factor %lld must divide the tile (%lld)", (long long)factor,
                       (long long)o.tile);
  tsr_array *grid = NULL, *out = NULL;
  int rc = gtile_grid(ctx, img, &o, "tile_thumb", false, &grid);
  int64_t shape[3], chunks[3] = {o.tile / factor, o.tile / factor, 3};
  if (rc == 0) {
    shape[0] = (grid->shape[0] + factor - 1) / factor, shape[1] = (grid->shape[1] + factor - 1) / factor;
    shape[2] = 3;
    rc = garray_new(ctx, "tilethumb", TSR_U8, 3, shape, chunks, &out);
  }
  tsr_args *args = NULL;
  if (rc == 0 && (tsr_args_new(&args) != 0 || tsr_args_int(args, "factor", factor) != 0))
    rc = client_fail(TSR_ENOMEM, "tile_thumb: out of memory");
  for (size_t b = 0; rc == 0 && b < out->nblocks; b++)
    rc = gtask_add(ctx, out->keys[b], "tile_thumb", args, (const char *const *)&grid->keys[b], 1);
  tsr_args_destroy(&args);
  tsr_array_free(ctx, &grid);
  if (rc != 0) tsr_array_free(ctx, &out);
  if (rc == 0) *thumb_p = out;
  return rc;
}

/* ---------- rules ---------- */

TSR_API int tsr_tile_rule_add(tsr_tile_rule *rule, tsr_tile_stat stat, tsr_cmp cmp, double value)
{
  if (rule == NULL || rule->n < 0 || rule->n >= TSR_TILE_RULE_MAX)
    return client_fail(TSR_EINVAL, "tile rule: full (at most %d conditions)", TSR_TILE_RULE_MAX);
  if (stat < 0 || stat >= TSR_TILE_NSTATS || cmp < TSR_LT || cmp > TSR_GE)
    return client_fail(TSR_EINVAL, "tile rule: stat %d or comparison %d out of range", (int)stat, (int)cmp);
  rule->conds[rule->n++] = (tsr_tile_cond){stat, cmp, value};
  return 0;
}

TSR_API void tsr_tile_rule_seed(tsr_tile_rule *rule)
{
  if (rule == NULL) return;
  rule->n = 0;
  tsr_tile_rule_add(rule, TSR_TILE_MIN, TSR_LT, 135);
  tsr_tile_rule_add(rule, TSR_TILE_MAX, TSR_GE, 255);
  tsr_tile_rule_add(rule, TSR_TILE_P5, TSR_LT, 162);
  tsr_tile_rule_add(rule, TSR_TILE_P50, TSR_LT, 225);
}

static int parse_stat(const char *word, tsr_tile_stat *stat_p)
{
  for (int s = 0; s < TSR_TILE_NSTATS; s++)
    if (strcmp(word, stat_names[s]) == 0) return *stat_p = (tsr_tile_stat)s, 0;
  return -1;
}

static int parse_cmp(const char *word, tsr_cmp *cmp_p)
{
  static const char *const ops[] = {"<", "<=", ">", ">="};
  for (int c = 0; c < 4; c++)
    if (strcmp(word, ops[c]) == 0) return *cmp_p = (tsr_cmp)c, 0;
  return -1;
}

/* One condition "STAT OP NUMBER" (already cut out, blanks allowed). */
static int parse_cond(char *text, int line, tsr_tile_rule *rule)
{
  char stat_w[32], op_w[8], num_w[64], extra[2];
  int got = sscanf(text, " %31[a-z0-9_] %7[<>=] %63s %1s", stat_w, op_w, num_w, extra);
  if (got <= 0) return 0; /* blank */
  tsr_tile_stat stat;
  tsr_cmp cmp;
  char *end = NULL;
  double v = got >= 3 ? strtod(num_w, &end) : 0;
  if (got != 3) return client_fail(TSR_EINVAL, "tile rule line %d: '%s' is not 'STAT OP NUMBER'", line, text);
  if (parse_stat(stat_w, &stat) != 0)
    return client_fail(TSR_EINVAL, "tile rule line %d: unknown statistic '%s' (min, max, p5, p50, mean_r, mean_g, "
                       "mean_b, mean_gray, std_gray, mean_sat, frac_bg, pixels)", line, stat_w);
  if (parse_cmp(op_w, &cmp) != 0)
    return client_fail(TSR_EINVAL, "tile rule line %d: unknown comparison '%s' (<, <=, >, >=)", line, op_w);
  if (end == NULL || *end != '\0')
    return client_fail(TSR_EINVAL, "tile rule line %d: '%s' is not a number", line, num_w);
  return tsr_tile_rule_add(rule, stat, cmp, v);
}

TSR_API int tsr_tile_rule_parse(const char *text, tsr_tile_rule *rule)
{
  if (text == NULL || rule == NULL) return client_fail(TSR_EINVAL, "tile rule: NULL argument");
  char *copy = strdup(text);
  if (copy == NULL) return client_fail(TSR_ENOMEM, "tile rule: out of memory");
  tsr_tile_rule r = {0};
  int rc = 0, line = 1;
  for (char *p = copy; rc == 0 && *p != '\0'; line++) {
    char *nl = strchr(p, '\n');
    if (nl != NULL) *nl = '\0';
    char *hash = strchr(p, '#');
    if (hash != NULL) *hash = '\0';
    for (char *amp; (amp = strstr(p, "&&")) != NULL;) amp[0] = ';', amp[1] = ' ';
    for (char *save = NULL, *c = strtok_r(p, ";", &save); rc == 0 && c != NULL; c = strtok_r(NULL, ";", &save))
      rc = parse_cond(c, line, &r);
    p = nl != NULL ? nl + 1 : p + strlen(p);
  }
  free(copy);
  if (rc == 0) *rule = r;
  return rc;
}

TSR_API int tsr_tile_filter(tsr_array_ctx *ctx, const tsr_array *stats, const tsr_tile_rule *rule, tsr_array **kept_p)
{
  if (ctx == NULL || stats == NULL || rule == NULL || kept_p == NULL)
    return client_fail(TSR_EINVAL, "tile_filter: NULL argument");
  if (stats->dtype != TSR_F64 || stats->ndim != 3 || stats->shape[2] != TSR_TILE_NSTATS || stats->chunk[2] != stats->shape[2])
    return client_fail(TSR_ESHAPE, "tile_filter: not a tile statistics array (f64 [ny, nx, %d])", TSR_TILE_NSTATS);
  int64_t stat[TSR_TILE_RULE_MAX], cmp[TSR_TILE_RULE_MAX];
  double value[TSR_TILE_RULE_MAX];
  for (int i = 0; i < rule->n; i++) stat[i] = rule->conds[i].stat, cmp[i] = rule->conds[i].cmp, value[i] = rule->conds[i].value;
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0 && rule->n > 0) rc = tsr_args_ints(args, "stat", stat, (size_t)rule->n);
  if (rc == 0 && rule->n > 0) rc = tsr_args_ints(args, "cmp", cmp, (size_t)rule->n);
  if (rc == 0 && rule->n > 0) rc = tsr_args_floats(args, "value", value, (size_t)rule->n);
  tsr_array *out = NULL;
  int64_t shape[2] = {stats->shape[0], stats->shape[1]}, chunks[2] = {stats->chunk[0], stats->chunk[1]};
  if (rc != 0) rc = client_fail(TSR_ENOMEM, "tile_filter: out of memory");
  if (rc == 0) rc = garray_new(ctx, "tilekept", TSR_U8, 2, shape, chunks, &out);
  for (size_t b = 0; rc == 0 && b < out->nblocks; b++)
    rc = gtask_add(ctx, out->keys[b], "tile_filter", args, (const char *const *)&stats->keys[b], 1);
  tsr_args_destroy(&args);
  if (rc != 0) tsr_array_free(ctx, &out);
  if (rc == 0) *kept_p = out;
  return rc;
}
