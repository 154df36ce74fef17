/* tsr-tiles: whole-slide images into tiles, their statistics and a tissue
 * filter, all slides in ONE graph on a Tessera cluster (docs/tiles.md).
 *
 *   tessera local -- tsr-tiles --slide-dir /data/svs --out-thumbs thumbs --out tiles.tsv
 *
 * A slide that cannot be read is reported (stderr and the table's `error`
 * column) and every other slide's tiles are still produced. Exit 0 when
 * every slide was read, 1 when some were not (or nothing could run), 2 for
 * bad flags. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clireport.h"
#include "tiles.h"

#define TIMEOUT_MS (24 * 3600 * 1000)

static void usage(FILE *f)
{
  fprintf(f, "usage: tsr-tiles (--slides FILE... | --slide-dir DIR) [--tile 256] [--region N] [--level 0] [--drop-edges]\n"
             "                 [--filter seed|none|FILE] [--save-tiles DIR] [--out-thumbs DIR]\n"
             "                 [--embed OP [--embed-dim 64]] [--no-progress] [--report FILE.html|.json]\n"
             "                 --out tiles.tsv\n"
             "Connects to $TESSERA_SCHEDULER (`tessera local -- tsr-tiles ...`). docs/tiles.md.\n");
}

static int bad(const char *msg, const char *arg)
{
  fprintf(stderr, "tsr-tiles: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
  return -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_slide_name(const char *n)
{
  const char *dot = strrchr(n, '.');
  return dot != NULL && (strcasecmp(dot, ".svs") == 0 || strcasecmp(dot, ".tif") == 0 ||
                         strcasecmp(dot, ".tiff") == 0);
}

/* The .svs/.tif/.tiff files of dir, sorted. */
static int list_dir(const char *dir, tl_opts *o)
{
  DIR *d = opendir(dir);
  if (d == NULL) return fprintf(stderr, "tsr-tiles: cannot open --slide-dir %s: %s\n", dir, strerror(errno)), -1;
  size_t cap = 16;
  o->slides = malloc(cap * sizeof *o->slides);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!is_slide_name(e->d_name)) continue;
    if (o->n_slides == cap) o->slides = realloc(o->slides, (cap *= 2) * sizeof *o->slides);
    char *p = malloc(strlen(dir) + strlen(e->d_name) + 2);
    sprintf(p, "%s/%s", dir, e->d_name);
    o->slides[o->n_slides++] = p;
  }
  closedir(d);
  qsort(o->slides, o->n_slides, sizeof *o->slides, cmp_str);
  return o->n_slides ? 0 : bad("no .svs, .tif or .tiff file in --slide-dir", dir);
}

static int read_rule(const char *name, tsr_tile_rule *rule)
{
  if (strcmp(name, "seed") == 0) return tsr_tile_rule_seed(rule), 0;
  if (strcmp(name, "none") == 0) return rule->n = 0, 0;
  FILE *f = fopen(name, "r");
  if (f == NULL) return fprintf(stderr, "tsr-tiles: --filter %s: %s\n", name, strerror(errno)), -1;
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  if (tsr_tile_rule_parse(text, rule) != 0) return fprintf(stderr, "tsr-tiles: --filter %s: %s\n", name, tsr_errmsg()), -1;
  return 0;
}

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
  char *end = NULL;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (v == NULL || *end != '\0' || x < lo || x > hi)
    return fprintf(stderr, "tsr-tiles: %s needs an integer in %lld..%lld\n", flag, (long long)lo, (long long)hi), -1;
  *out = x;
  return 0;
}

static int parse_args(int argc, char **argv, tl_opts *o)
{
  *o = (tl_opts){.tile = 256, .filter_name = "seed", .embed_dim = 64};
  const char *dir = NULL;
  int64_t v = 0;
  int rc = 0;
  for (int i = 1; i < argc && rc == 0; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0) return usage(stdout), exit(0), 0;
    if (strcmp(a, "--version") == 0) return printf("tsr-tiles %s\n", TSR_VERSION_STRING), exit(0), 0;
    if (strcmp(a, "--slides") == 0) {
      o->slides = (const char **)&argv[i + 1];
      while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++, o->n_slides++;
      if (o->n_slides == 0) rc = bad("--slides needs at least one file", NULL);
      continue;
    }
    if (strcmp(a, "--no-progress") == 0) {
      o->no_progress = true;
      continue;
    }
    if (next == NULL && strcmp(a, "--drop-edges") != 0) return bad("missing value or unknown flag", a);
    if (strcmp(a, "--slide-dir") == 0) dir = argv[++i];
    else if (strcmp(a, "--tile") == 0) rc = parse_int(a, argv[++i], 16, 16384, &o->tile);
    else if (strcmp(a, "--region") == 0) rc = parse_int(a, argv[++i], 1, 64, &o->region);
    else if (strcmp(a, "--level") == 0) rc = parse_int(a, argv[++i], 0, TSR_TIFF_MAX_LEVELS - 1, &v), o->level = (int)v;
    else if (strcmp(a, "--drop-edges") == 0) o->drop_edges = true;
    else if (strcmp(a, "--filter") == 0) o->filter_name = argv[++i];
    else if (strcmp(a, "--save-tiles") == 0) o->save_tiles = argv[++i];
    else if (strcmp(a, "--out-thumbs") == 0) o->out_thumbs = argv[++i];
    else if (strcmp(a, "--embed") == 0) o->embed_op = argv[++i];
    else if (strcmp(a, "--embed-dim") == 0) rc = parse_int(a, argv[++i], 1, 65536, &o->embed_dim);
    else if (strcmp(a, "--out") == 0) o->out = argv[++i];
    else if (strcmp(a, "--report") == 0) rc = clireport_check_path("tsr-tiles", o->report = argv[++i]);
    else rc = bad("unknown flag", a);
  }
  if (rc != 0) return rc;
  if ((dir != NULL) == (o->n_slides > 0)) return bad("give --slides FILE... or --slide-dir DIR (one of them)", NULL);
  if (o->out == NULL) return bad("--out FILE is required", NULL);
  if (dir != NULL && list_dir(dir, o) != 0) return -1;
  for (const char *d; (d = o->out_thumbs) != NULL || (d = o->save_tiles) != NULL;) {
    if (mkdir(d, 0777) != 0 && errno != EEXIST) return bad("cannot create directory", d);
    if (d == o->out_thumbs && o->save_tiles != NULL && mkdir(o->save_tiles, 0777) != 0 && errno != EEXIST)
      return bad("cannot create directory", o->save_tiles);
    break;
  }
  return read_rule(o->filter_name, &o->rule);
}

/* ---------- building the graph ---------- */

static void slide_fail(tl_slide *s, const char *why)
{
  snprintf(s->error, sizeof s->error, "%s", why);
  fprintf(stderr, "tsr-tiles: %s: %s\n", s->path, why);
}

/* The largest picture side at most ~1024 pixels: the smallest divisor of the tile that gets there. */
static int64_t thumb_factor(int64_t tile, int64_t w, int64_t h)
{
  int64_t side = w > h ? w : h;
  for (int64_t f = 1; f < tile; f++)
    if (tile % f == 0 && side / f <= 1024) return f;
  return tile;
}

/* --region's default: on a cluster with a GPU worker each read task
 * decodes a region of 8 x 8 tiles as one nvJPEG batch (a task a tile left
 * the JPEG engines waiting on small batches: bench/RESULTS.md); on CPU
 * workers a tile a task spreads a slide over every core. */
static int64_t default_region(tsr_client *client)
{
  tsr_cluster_info *info = NULL;
  int64_t region = 1;
  if (tsr_cluster_info_get(client, 10000, &info) != 0) return region;
  for (size_t i = 0; i < info->n_workers; i++)
    if (strncmp(info->workers[i].device, "gpu", 3) == 0) region = 8;
  tsr_cluster_info_destroy(&info);
  return region;
}

static int slide_build(tsr_array_ctx *ctx, const tl_opts *o, tl_slide *s)
{
  tsr_tile_opts to = {o->tile, o->drop_edges};
  if (tsr_from_tiff(ctx, s->path, o->level, o->tile * o->region, &s->img) != 0) return slide_fail(s, tsr_errmsg()), -1;
  s->width = tsr_array_dim(s->img, 1), s->height = tsr_array_dim(s->img, 0);
  if (tsr_tile_stats(ctx, s->img, &to, &s->stats) != 0 || tsr_tile_filter(ctx, s->stats, &o->rule, &s->kept) != 0)
    return slide_fail(s, tsr_errmsg()), -1;
  s->ny = tsr_array_dim(s->stats, 0), s->nx = tsr_array_dim(s->stats, 1);
  if (o->out_thumbs != NULL) {
    s->thumb_factor = thumb_factor(o->tile, s->width, s->height);
    if (tsr_tile_thumb(ctx, s->img, &to, s->thumb_factor, &s->thumb) != 0) return slide_fail(s, tsr_errmsg()), -1;
    s->thumb_h = tsr_array_dim(s->thumb, 0), s->thumb_w = tsr_array_dim(s->thumb, 1);
  }
  if (o->embed_op != NULL &&
      tsr_tile_map(ctx, s->img, &to, o->embed_op, NULL, TSR_F32, o->embed_dim, &s->embed) != 0)
    return slide_fail(s, tsr_errmsg()), -1;
  return 0;
}

static bool bar_drawn;   /* a progressbar shares stderr with the per-slide lines */

static void progress(void *arg, size_t arrays_done, size_t n_arrays, size_t done, size_t total)
{
  const size_t *per_slide = arg;
  /* the task bar is redrawn in place on a terminal: clear it so this line reads clean */
  if (bar_drawn && isatty(STDERR_FILENO)) fputs("\r\033[K", stderr);
  fprintf(stderr, "tsr-tiles: slides %zu/%zu done, tasks %zu/%zu\n", arrays_done / *per_slide,
          n_arrays / *per_slide, done, total);
}

/* Every readable slide's arrays in one graph; a slide whose task fails gets its message. */
static int run_all(tsr_array_ctx *ctx, const tl_opts *o, tl_slide *s, size_t n)
{
  size_t per = 2 + (o->out_thumbs != NULL) + (o->embed_op != NULL), m = 0;
  const tsr_array **arrays = calloc(n * per + 1, sizeof *arrays);
  void **bufs = calloc(n * per + 1, sizeof *bufs);
  size_t *caps = calloc(n * per + 1, sizeof *caps), *owner = calloc(n * per + 1, sizeof *owner);
  for (size_t i = 0; i < n; i++) {
    if (s[i].error[0]) continue;
    tsr_array *list[4] = {s[i].stats, s[i].kept, s[i].thumb, s[i].embed};
    void **dst[4] = {(void **)&s[i].stats_v, (void **)&s[i].kept_v, (void **)&s[i].thumb_v, (void **)&s[i].embed_v};
    for (int k = 0; k < 4; k++) {
      if (list[k] == NULL) continue;
      caps[m] = (size_t)tsr_array_size(list[k]) * (k == 0 ? 8 : k == 3 ? 4 : 1);
      *dst[k] = bufs[m] = calloc(1, caps[m] ? caps[m] : 1);
      arrays[m] = list[k], owner[m++] = i;
    }
  }
  tsr_tiles_status *st = calloc(m + 1, sizeof *st);
  tsr_tiles_progress prog = {progress, &per, 2.0};
  int rc = m ? tsr_tiles_compute(ctx, arrays, m, bufs, caps, &prog, TIMEOUT_MS, st) : 0;
  if (rc < 0) fprintf(stderr, "tsr-tiles: the graph could not run: %s\n", tsr_errmsg());
  for (size_t k = 0; rc >= 0 && k < m; k++)
    if (st[k].rc != 0 && s[owner[k]].error[0] == '\0') slide_fail(&s[owner[k]], st[k].message);
  free(st), free(arrays), free(bufs), free(caps), free(owner);
  return rc < 0 ? -1 : 0;
}

/* --save-tiles: the kept tiles of every slide, one more graph. */
static int save_tiles(tsr_array_ctx *ctx, const tl_opts *o, tl_slide *s, size_t n)
{
  size_t m = 0, cap = 64;
  const tsr_array **arrays = malloc(cap * sizeof *arrays);
  char **names = malloc(cap * sizeof *names);
  for (size_t i = 0; i < n; i++)
    for (int64_t t = 0; !s[i].error[0] && t < s[i].ny * s[i].nx; t++) {
      if (!s[i].kept_v[t]) continue;
      int64_t y0 = t / s[i].nx * o->tile, x0 = t % s[i].nx * o->tile;
      int64_t start[3] = {y0, x0, 0}, stop[3] = {y0 + o->tile, x0 + o->tile, 3};
      if (stop[0] > s[i].height) stop[0] = s[i].height;
      if (stop[1] > s[i].width) stop[1] = s[i].width;
      tsr_array *cut = NULL;
      if (tsr_slice(ctx, s[i].img, start, stop, &cut) != 0) continue;
      if (m == cap) arrays = realloc(arrays, (cap *= 2) * sizeof *arrays), names = realloc(names, cap * sizeof *names);
      names[m] = malloc(1400);
      snprintf(names[m], 1400, "%s/%s_x%lld_y%lld.png", o->save_tiles, s[i].name, (long long)x0, (long long)y0);
      arrays[m++] = cut;
    }
  void **bufs = calloc(m + 1, sizeof *bufs);
  size_t *caps = calloc(m + 1, sizeof *caps);
  for (size_t k = 0; k < m; k++) caps[k] = (size_t)tsr_array_size(arrays[k]), bufs[k] = malloc(caps[k]);
  tsr_tiles_status *st = calloc(m + 1, sizeof *st);
  int rc = m ? tsr_tiles_compute(ctx, arrays, m, bufs, caps, NULL, TIMEOUT_MS, st) : 0;
  for (size_t k = 0; rc >= 0 && k < m; k++)
    if (st[k].rc == 0) tl_write_png(names[k], bufs[k], tsr_array_dim(arrays[k], 1), tsr_array_dim(arrays[k], 0), NULL, 0);
  fprintf(stderr, "tsr-tiles: saved %zu kept tiles in %s\n", m, o->save_tiles);
  for (size_t k = 0; k < m; k++) free(bufs[k]), free(names[k]);
  free(bufs), free(caps), free(st), free(arrays), free(names);
  return rc < 0 ? -1 : 0;
}

static void summary(const tl_opts *o, const tl_slide *s, size_t n, double secs)
{
  size_t ok = 0, tiles = 0, kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i].error[0]) continue;
    ok++, tiles += (size_t)(s[i].ny * s[i].nx);
    for (int64_t t = 0; t < s[i].ny * s[i].nx; t++) kept += s[i].kept_v[t];
  }
  fprintf(stderr, "tsr-tiles: %zu of %zu slides read, %zu tiles, %zu kept (filter %s), %.1f s; table %s\n", ok, n,
          tiles, kept, o->filter_name, secs, o->out);
}

int main(int argc, char **argv)
{
  tl_opts o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_client_opts copts = TSR_CLIENT_OPTS_DEFAULT;
  copts.name = "tsr-tiles";
  if (tsr_client_open(&client, NULL, &copts) != 0 || tsr_array_ctx_new(client, &ctx) != 0)
    return fprintf(stderr, "tsr-tiles: connecting: %s\n", tsr_errmsg()), 1;
  if (o.region == 0) o.region = default_region(client);
  clireport cr;
  if (clireport_begin(&cr, client, "tsr-tiles", argc, argv, o.report, !o.no_progress) != 0) return 1;
  bar_drawn = cr.bar != NULL && !o.no_progress;
  tl_slide *s = calloc(o.n_slides, sizeof *s);
  for (size_t i = 0; i < o.n_slides; i++) {
    s[i].path = o.slides[i];
    const char *slash = strrchr(s[i].path, '/');
    snprintf(s[i].name, sizeof s[i].name, "%s", slash ? slash + 1 : s[i].path);
    slide_build(ctx, &o, &s[i]);
  }
  int rc = run_all(ctx, &o, s, o.n_slides);
  if (rc == 0 && o.save_tiles != NULL) rc = save_tiles(ctx, &o, s, o.n_slides);
  for (size_t i = 0; rc == 0 && o.out_thumbs != NULL && i < o.n_slides; i++)
    if (!s[i].error[0]) rc = tl_write_thumb(&o, &s[i]);
  if (rc == 0) rc = tl_write_table(&o, s, o.n_slides);
  clireport_stop_bar(&cr);
  bar_drawn = false;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (rc == 0) summary(&o, s, o.n_slides, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
  size_t failed = 0;
  for (size_t i = 0; i < o.n_slides; i++) {
    failed += s[i].error[0] != '\0';
    free(s[i].stats_v), free(s[i].kept_v), free(s[i].thumb_v), free(s[i].embed_v);
  }
  free(s);
  int status = clireport_end(&cr, rc != 0 || failed ? 1 : 0);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return status;
}
