/* Whole-slide images (tessera/tiles.h) through real daemons: the real
 * CMU-1 region (../shared/data/wsi_cmu1_small_region) decoded by
 * tsr_from_tiff equals its reference PPM byte for byte; the 88 full tiles'
 * statistics equal reference_tiles_256.tsv to its printed precision; the
 * seed filter's decisions (and grey min/max/p5/p50) equal a Python
 * implementation (tifffile + numpy, tests/tiles/seed_filter.py, from the
 * venv fixture tiles.venv); TIFFs written here with libtiff (tiled and
 * striped; none, LZW, deflate, JPEG YCbCr; two pyramid levels) decode to
 * what was written; tile grids for other sizes and levels, edge tiles
 * kept or dropped, any chunking; and refused files name the file and the
 * field, after which the cluster still serves. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>
#include <unistd.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/tiles.h"

#define SLIDE_W 2220
#define SLIDE_H 2967

static cluster c;
static tsr_client *client;
static tsr_array_ctx *ctx;
static char tmpdir[128];
static char svs[600], ppm[600], tsv[600];
static uint8_t *reference; /* the PPM's RGB */

static const char *tmp_path(const char *name)
{
  static char buf[4][300];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 300, "%s/%s", tmpdir, name);
  return p;
}

static uint8_t *ppm_read(const char *path)
{
  FILE *f = fopen(path, "rb");
  int w = 0, h = 0, maxv = 0;
  if (f == NULL || fscanf(f, "P6 %d %d %d", &w, &h, &maxv) != 3 || w != SLIDE_W || h != SLIDE_H || fgetc(f) < 0) {
    if (f) fclose(f);
    return NULL;
  }
  size_t n = (size_t)w * h * 3;
  uint8_t *px = malloc(n);
  if (fread(px, 1, n, f) != n) px = (free(px), NULL);
  fclose(f);
  return px;
}

static uint8_t *compute_image(const tsr_array *img)
{
  size_t n = (size_t)tsr_array_size(img);
  uint8_t *buf = malloc(n);
  int rc = tsr_compute(ctx, img, buf, n, 120000);
  if (rc != 0) {
    fprintf(stderr, "compute: %s\n", tsr_errmsg());
    free(buf);
    return NULL;
  }
  return buf;
}

static double *compute_stats(const tsr_array *stats)
{
  size_t n = (size_t)tsr_array_size(stats);
  double *buf = malloc(n * sizeof *buf);
  if (tsr_compute(ctx, stats, buf, n * sizeof *buf, 120000) != 0) {
    fprintf(stderr, "compute stats: %s\n", tsr_errmsg());
    free(buf);
    return NULL;
  }
  return buf;
}

/* ---------- the real slide ---------- */

TEST(info_has_the_levels_and_svs_metadata)
{
  tsr_tiff_info *info = NULL;
  ASSERT_OK(tsr_tiff_info_read(svs, &info));
  ASSERT_EQ(info->n_levels, 1);
  ASSERT_EQ(info->levels[0].width, SLIDE_W);
  ASSERT_EQ(info->levels[0].height, SLIDE_H);
  ASSERT_TRUE(info->levels[0].tiled);
  ASSERT_EQ(info->levels[0].block_w, 240);
  ASSERT_EQ(info->levels[0].compression, 7);
  ASSERT_TRUE(info->aperio);
  ASSERT_NEAR(info->mpp, 0.499, 1e-9);
  ASSERT_NEAR(info->app_mag, 20, 1e-9);
  ASSERT_CONTAINS(info->description, "46000x32914");
  tsr_tiff_info_destroy(&info);
  ASSERT_TRUE(info == NULL);
}

TEST(level0_equals_the_reference_ppm_for_any_tile_size)
{
  ASSERT_TRUE(reference != NULL);
  const int64_t tiles[] = {256, 240, 333};
  for (size_t t = 0; t < 3; t++) {
    tsr_array *img = NULL;
    ASSERT_OK(tsr_from_tiff(ctx, svs, 0, tiles[t], &img));
    ASSERT_EQ(tsr_array_dim(img, 0), SLIDE_H);
    ASSERT_EQ(tsr_array_dim(img, 1), SLIDE_W);
    ASSERT_EQ(tsr_array_chunk(img, 0), tiles[t]);
    uint8_t *px = compute_image(img);
    ASSERT_TRUE(px != NULL);
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)SLIDE_W * SLIDE_H * 3; i++) diff += px[i] != reference[i];
    free(px);
    ASSERT_EQ(diff, 0);
    tsr_array_free(ctx, &img);
  }
}

/* reference_tiles_256.tsv: tile_x tile_y x0 y0 mean_r mean_g mean_b mean_gray std_gray mean_sat frac_bg */
TEST(full_tile_stats_equal_the_reference_table)
{
  tsr_array *img = NULL, *stats = NULL;
  tsr_tile_opts o = TSR_TILE_OPTS_DEFAULT;
  o.drop_partial = true;
  ASSERT_OK(tsr_from_tiff(ctx, svs, 0, 256, &img));
  ASSERT_OK(tsr_tile_stats(ctx, img, &o, &stats));
  ASSERT_EQ(tsr_array_dim(stats, 0), 11);
  ASSERT_EQ(tsr_array_dim(stats, 1), 8);
  double *s = compute_stats(stats);
  ASSERT_TRUE(s != NULL);
  FILE *f = fopen(tsv, "r");
  ASSERT_TRUE(f != NULL);
  char line[512];
  ASSERT_TRUE(fgets(line, sizeof line, f) != NULL);
  int rows = 0;
  const int cols[7] = {TSR_TILE_MEAN_R, TSR_TILE_MEAN_G, TSR_TILE_MEAN_B, TSR_TILE_MEAN_GRAY,
                       TSR_TILE_STD_GRAY, TSR_TILE_MEAN_SAT, TSR_TILE_FRAC_BG};
  while (fgets(line, sizeof line, f) != NULL) {
    int tx, ty, x0, y0;
    double v[7];
    if (sscanf(line, "%d %d %d %d %lf %lf %lf %lf %lf %lf %lf", &tx, &ty, &x0, &y0, &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6]) != 11)
      continue;
    const double *t = s + ((size_t)ty * 8 + tx) * TSR_TILE_NSTATS;
    for (int k = 0; k < 7; k++) ASSERT_NEAR(t[cols[k]], v[k], 0.00005 + 1e-9);
    ASSERT_EQ(t[TSR_TILE_PIXELS], 65536.0);
    rows++;
  }
  fclose(f);
  free(s);
  ASSERT_EQ(rows, 88);
}

/* SOURCE.md: 55 of the 88 full tiles have frac_bg >= 0.5. */
TEST(a_user_rule_from_text_counts_what_source_md_says)
{
  tsr_tile_rule rule;
  ASSERT_OK(tsr_tile_rule_parse("# tissue\nfrac_bg < 0.5\n", &rule));
  ASSERT_EQ(rule.n, 1);
  tsr_array *img = NULL, *stats = NULL, *kept = NULL;
  tsr_tile_opts o = TSR_TILE_OPTS_DEFAULT;
  o.drop_partial = true;
  ASSERT_OK(tsr_from_tiff(ctx, svs, 0, 256, &img));
  ASSERT_OK(tsr_tile_stats(ctx, img, &o, &stats));
  ASSERT_OK(tsr_tile_filter(ctx, stats, &rule, &kept));
  uint8_t flags[88];
  ASSERT_OK(tsr_compute(ctx, kept, flags, sizeof flags, 60000));
  int n = 0;
  for (int i = 0; i < 88; i++) n += flags[i];
  ASSERT_EQ(n, 88 - 55);
  ASSERT_EQ(tsr_tile_rule_parse("p50 <> 3", &rule), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "'<>'");
  ASSERT_EQ(tsr_tile_rule_parse("min < 1\nbrightness > 3", &rule), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "line 2: unknown statistic 'brightness'");
  ASSERT_OK(tsr_tile_rule_parse("min < 135 && max >= 255; p5 < 162\np50 < 225", &rule));
  tsr_tile_rule seed;
  tsr_tile_rule_seed(&seed);
  ASSERT_EQ(rule.n, seed.n);
  for (int i = 0; i < seed.n; i++) {
    ASSERT_EQ(rule.conds[i].stat, seed.conds[i].stat);
    ASSERT_EQ(rule.conds[i].cmp, seed.conds[i].cmp);
    ASSERT_EQ(rule.conds[i].value, seed.conds[i].value);
  }
}

/* tests/tiles/seed_filter.py prints "tx ty kept min max p5 p50" per full tile. */
TEST(seed_filter_decisions_equal_the_python_seed)
{
  char py[700], script[700], out[65536];
  snprintf(py, sizeof py, "%s/test-venv-tiles/bin/python", TSR_BUILD_DIR);
  snprintf(script, sizeof script, "%s/tests/tiles/seed_filter.py", TSR_SOURCE_DIR);
  const char *argv[] = {py, script, svs, "256", NULL};
  ASSERT_EQ(run_capture(argv, NULL, out, sizeof out, 120), 0);
  tsr_array *img = NULL, *stats = NULL, *kept = NULL;
  tsr_tile_opts o = TSR_TILE_OPTS_DEFAULT;
  o.drop_partial = true;
  tsr_tile_rule seed;
  tsr_tile_rule_seed(&seed);
  ASSERT_OK(tsr_from_tiff(ctx, svs, 0, 256, &img));
  ASSERT_OK(tsr_tile_stats(ctx, img, &o, &stats));
  ASSERT_OK(tsr_tile_filter(ctx, stats, &seed, &kept));
  double *s = compute_stats(stats);
  uint8_t flags[88];
  ASSERT_OK(tsr_compute(ctx, kept, flags, sizeof flags, 60000));
  int rows = 0, n_kept = 0;
  for (char *save = NULL, *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
    int tx, ty, k;
    double mn, mx, p5, p50;
    if (sscanf(l, "%d %d %d %lf %lf %lf %lf", &tx, &ty, &k, &mn, &mx, &p5, &p50) != 7) continue;
    const double *t = s + ((size_t)ty * 8 + tx) * TSR_TILE_NSTATS;
    ASSERT_EQ(flags[ty * 8 + tx], k);
    ASSERT_EQ(t[TSR_TILE_MIN], mn);
    ASSERT_EQ(t[TSR_TILE_MAX], mx);
    ASSERT_NEAR(t[TSR_TILE_P5], p5, 1e-9);
    ASSERT_NEAR(t[TSR_TILE_P50], p50, 1e-9);
    rows++, n_kept += k;
  }
  free(s);
  ASSERT_EQ(rows, 88);
  ASSERT_TRUE(n_kept > 0 && n_kept < 88); /* the rule decides something here */
  fprintf(stderr, "  seed filter keeps %d of 88 tiles, as the Python seed does\n", n_kept);
}

TEST(grids_for_any_tile_size_with_edges_kept_or_dropped_and_any_chunking)
{
  const int64_t sizes[] = {256, 500, 1000};
  for (int s = 0; s < 3; s++) {
    int64_t t = sizes[s];
    tsr_tile_opts keep = {t, false}, drop = {t, true};
    tsr_array *img = NULL, *img_other = NULL, *a = NULL, *b = NULL, *d = NULL;
    ASSERT_OK(tsr_from_tiff(ctx, svs, 0, t, &img));
    ASSERT_OK(tsr_from_tiff(ctx, svs, 0, t == 256 ? 384 : 256, &img_other));
    ASSERT_OK(tsr_tile_stats(ctx, img, &keep, &a));
    ASSERT_OK(tsr_tile_stats(ctx, img_other, &keep, &b));
    ASSERT_OK(tsr_tile_stats(ctx, img_other, &drop, &d));
    int64_t ny = (SLIDE_H + t - 1) / t, nx = (SLIDE_W + t - 1) / t;
    ASSERT_EQ(tsr_array_dim(a, 0), ny);
    ASSERT_EQ(tsr_array_dim(a, 1), nx);
    ASSERT_EQ(tsr_array_dim(d, 0), SLIDE_H / t);
    ASSERT_EQ(tsr_array_dim(d, 1), SLIDE_W / t);
    /* chunks of 3 x 3 tiles: one tile_stats task a region (param tile) */
    tsr_array *img_region = NULL, *r = NULL, *rd = NULL;
    ASSERT_OK(tsr_from_tiff(ctx, svs, 0, 3 * t, &img_region));
    ASSERT_OK(tsr_tile_stats(ctx, img_region, &keep, &r));
    ASSERT_OK(tsr_tile_stats(ctx, img_region, &drop, &rd));
    if (3 * t < SLIDE_W) ASSERT_EQ(tsr_array_chunk(r, 1), 3);  /* a task a region, not a tile */
    double *sa = compute_stats(a), *sb = compute_stats(b), *sd = compute_stats(d);
    double *sr = compute_stats(r), *srd = compute_stats(rd);
    ASSERT_TRUE(sa && sb && sd && sr && srd);
    ASSERT_EQ(memcmp(sa, sb, (size_t)tsr_array_size(a) * sizeof(double)), 0);
    ASSERT_EQ(tsr_array_size(r), tsr_array_size(a));
    ASSERT_EQ(memcmp(sa, sr, (size_t)tsr_array_size(a) * sizeof(double)), 0);
    ASSERT_EQ(tsr_array_size(rd), tsr_array_size(d));
    ASSERT_EQ(memcmp(sd, srd, (size_t)tsr_array_size(d) * sizeof(double)), 0);
    free(sr), free(srd);
    const double *corner = sa + ((size_t)(ny - 1) * nx + nx - 1) * TSR_TILE_NSTATS;
    ASSERT_EQ(corner[TSR_TILE_PIXELS], (double)((SLIDE_H - (ny - 1) * t) * (SLIDE_W - (nx - 1) * t)));
    for (int64_t y = 0; y < SLIDE_H / t; y++)
      for (int64_t x = 0; x < SLIDE_W / t; x++)
        ASSERT_EQ(memcmp(sd + (y * (SLIDE_W / t) + x) * TSR_TILE_NSTATS, sa + (y * nx + x) * TSR_TILE_NSTATS,
                         TSR_TILE_NSTATS * sizeof(double)), 0);
    free(sa), free(sb), free(sd);
  }
}

/* ---------- TIFFs written here ---------- */

typedef struct tiff_spec {
  const char *name;
  int compression, photometric;
  bool tiled, two_levels;
} tiff_spec;

/* Writes w x h pixels (RGB, stride SLIDE_W) of src as one directory. */
static int write_dir(TIFF *t, const tiff_spec *s, const uint8_t *src, int w, int h, bool reduced)
{
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, s->compression);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s->photometric);
  if (reduced) TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
  if (s->compression == COMPRESSION_JPEG) TIFFSetField(t, TIFFTAG_JPEGQUALITY, 90);
  if (s->photometric == PHOTOMETRIC_YCBCR) TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
  if (!s->tiled) {
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 16);
    for (int y = 0; y < h; y++)
      if (TIFFWriteScanline(t, (void *)(src + (size_t)y * SLIDE_W * 3), (uint32_t)y, 0) < 0) return -1;
    return TIFFWriteDirectory(t) ? 0 : -1;
  }
  TIFFSetField(t, TIFFTAG_TILEWIDTH, 64);
  TIFFSetField(t, TIFFTAG_TILELENGTH, 48);
  uint8_t *tile = calloc(64 * 48 * 3, 1);
  for (int ty = 0; ty < h; ty += 48)
    for (int tx = 0; tx < w; tx += 64) {
      memset(tile, 0, 64 * 48 * 3);
      for (int y = ty; y < h && y < ty + 48; y++)
        memcpy(tile + (size_t)(y - ty) * 64 * 3, src + ((size_t)y * SLIDE_W + tx) * 3, (size_t)((w - tx < 64 ? w - tx : 64) * 3));
      TIFFWriteTile(t, tile, (uint32_t)tx, (uint32_t)ty, 0, 0);
    }
  free(tile);
  return TIFFWriteDirectory(t) ? 0 : -1;
}

/* A 300 x 200 crop of the reference (level 0) and, with two_levels, its
 * top-left 150 x 100 as a second, smaller level. */
static int write_tiff(const tiff_spec *s, const char *path)
{
  TIFF *t = TIFFOpen(path, "w");
  if (t == NULL) return -1;
  const uint8_t *src = reference + ((size_t)1000 * SLIDE_W + 900) * 3;
  int rc = write_dir(t, s, src, 300, 200, false);
  if (rc == 0 && s->two_levels) rc = write_dir(t, s, src, 150, 100, true);
  TIFFClose(t);
  return rc;
}

/* Directory `dir` of path through TIFFReadRGBAImage, as RGB. */
static uint8_t *rgba_decode(const char *path, int dir, int w, int h)
{
  TIFF *t = TIFFOpen(path, "r");
  if (t == NULL || !TIFFSetDirectory(t, (tdir_t)dir)) return t ? TIFFClose(t), NULL : NULL;
  uint32_t *raster = malloc((size_t)w * h * 4);
  uint8_t *rgb = malloc((size_t)w * h * 3);
  int ok = TIFFReadRGBAImageOriented(t, (uint32_t)w, (uint32_t)h, raster, ORIENTATION_TOPLEFT, 0);
  for (size_t i = 0; ok && i < (size_t)w * h; i++)
    rgb[3 * i] = TIFFGetR(raster[i]), rgb[3 * i + 1] = TIFFGetG(raster[i]), rgb[3 * i + 2] = TIFFGetB(raster[i]);
  free(raster);
  TIFFClose(t);
  if (!ok) rgb = (free(rgb), NULL);
  return rgb;
}

TEST(written_tiffs_decode_to_what_was_written)
{
  const tiff_spec specs[] = {
    {"none_tiled.tif", COMPRESSION_NONE, PHOTOMETRIC_RGB, true, true},
    {"lzw_striped.tif", COMPRESSION_LZW, PHOTOMETRIC_RGB, false, false},
    {"deflate_tiled.tif", COMPRESSION_ADOBE_DEFLATE, PHOTOMETRIC_RGB, true, false},
    {"deflate_striped.tif", COMPRESSION_ADOBE_DEFLATE, PHOTOMETRIC_RGB, false, false},
    {"packbits_tiled.tif", COMPRESSION_PACKBITS, PHOTOMETRIC_RGB, true, false},
    {"jpeg_ycbcr_tiled.tif", COMPRESSION_JPEG, PHOTOMETRIC_YCBCR, true, true},
  };
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    const char *path = tmp_path(specs[i].name);
    ASSERT_OK(write_tiff(&specs[i], path));
    tsr_tiff_info *info = NULL;
    ASSERT_OK(tsr_tiff_info_read(path, &info));
    ASSERT_EQ(info->n_levels, specs[i].two_levels ? 2 : 1);
    int lossy = specs[i].compression == COMPRESSION_JPEG;
    for (int level = 0; level < info->n_levels; level++) {
      int w = level ? 150 : 300, h = level ? 100 : 200;
      ASSERT_EQ(info->levels[level].width, w);
      tsr_array *img = NULL;
      ASSERT_OK(tsr_from_tiff(ctx, path, level, 80, &img));
      uint8_t *px = compute_image(img);
      ASSERT_TRUE(px != NULL);
      /* lossless: the pixels written; JPEG: libtiff's own RGBA decode (tiff2rgba's) */
      uint8_t *want = lossy ? rgba_decode(path, level, w, h) : NULL;
      size_t diff = 0;
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w * 3; x++) {
          const uint8_t *ref = want ? want + (size_t)y * w * 3 + x
                                    : reference + ((size_t)(1000 + y) * SLIDE_W + 900) * 3 + x;
          diff += px[(size_t)y * w * 3 + x] != *ref;
        }
      if (lossy) ASSERT_TRUE(want != NULL);
      free(px);
      free(want);
      ASSERT_EQ(diff, 0);
      tsr_array_free(ctx, &img);
    }
    tsr_tiff_info_destroy(&info);
  }
}

/* ---------- refused files ---------- */

static void write_bytes(const char *path, const void *data, size_t n)
{
  FILE *f = fopen(path, "wb");
  if (f != NULL) fwrite(data, 1, n, f), fclose(f);
}

/* Sets the Compression entry (tag 259) of directory 0 of a little-endian
 * classic TIFF to value, in place. */
static int patch_compression(const char *path, uint16_t value)
{
  FILE *f = fopen(path, "r+b");
  uint8_t hdr[8], entry[12];
  if (f == NULL || fread(hdr, 1, 8, f) != 8 || hdr[0] != 'I') return f ? fclose(f), -1 : -1;
  uint32_t off = hdr[4] | hdr[5] << 8 | hdr[6] << 16 | (uint32_t)hdr[7] << 24;
  uint8_t cnt[2];
  fseek(f, off, SEEK_SET);
  if (fread(cnt, 1, 2, f) != 2) return fclose(f), -1;
  for (int i = 0; i < (cnt[0] | cnt[1] << 8); i++) {
    long at = (long)off + 2 + 12 * i;
    fseek(f, at, SEEK_SET);
    if (fread(entry, 1, 12, f) != 12) break;
    if ((entry[0] | entry[1] << 8) != 259) continue;
    entry[8] = value & 0xff, entry[9] = value >> 8;
    fseek(f, at, SEEK_SET);
    fwrite(entry, 1, 12, f);
    fclose(f);
    return 0;
  }
  fclose(f);
  return -1;
}

static void le16(uint8_t *p, unsigned v) { p[0] = v & 0xff, p[1] = (v >> 8) & 0xff; }
static void le32(uint8_t *p, uint32_t v) { le16(p, v & 0xffff), le16(p + 2, v >> 16); }

/* A 32 x 32 grey TIFF of four 16 x 16 uncompressed tiles, its directory
 * first (at 8) and the tiles after it, so cutting the file loses tiles
 * but keeps the directory: a copy that stopped early. */
static size_t tiny_tiff(uint8_t *buf)
{
  static const uint16_t tags[10] = {256, 257, 258, 259, 262, 277, 322, 323, 324, 325};
  const uint32_t vals[10] = {32, 32, 8, 1, 1, 1, 16, 16, 0, 0};
  size_t ifd = 8, arrays = ifd + 2 + 10 * 12 + 4, data = arrays + 32;
  memcpy(buf, "II*\0", 4);
  le32(buf + 4, (uint32_t)ifd);
  le16(buf + ifd, 10);
  for (int i = 0; i < 10; i++) {
    uint8_t *e = buf + ifd + 2 + 12 * i;
    le16(e, tags[i]), le16(e + 2, i < 8 ? 3 : 4), le32(e + 4, i < 8 ? 1 : 4);
    le32(e + 8, i < 8 ? vals[i] : (uint32_t)(arrays + (i == 8 ? 0 : 16)));
  }
  le32(buf + ifd + 2 + 120, 0);
  for (int t = 0; t < 4; t++) le32(buf + arrays + 4 * t, (uint32_t)(data + 256 * t)), le32(buf + arrays + 16 + 4 * t, 256);
  for (int i = 0; i < 1024; i++) buf[data + i] = (uint8_t)i;
  return data + 1024;
}

static void cluster_still_serves(void)
{
  tsr_array *img = NULL, *stats = NULL;
  tsr_tile_opts o = {512, true};
  ASSERT_OK(tsr_from_tiff(ctx, svs, 0, 512, &img));
  ASSERT_OK(tsr_tile_stats(ctx, img, &o, &stats));
  double *s = compute_stats(stats);
  ASSERT_TRUE(s != NULL);
  ASSERT_EQ(s[TSR_TILE_PIXELS], 512.0 * 512.0);
  free(s);
}

TEST(bad_files_are_refused_naming_the_file_and_the_field)
{
  tsr_array *img = NULL;
  const char *missing = tmp_path("nope.svs");
  ASSERT_EQ(tsr_from_tiff(ctx, missing, 0, 256, &img), TSR_EIO);
  ASSERT_CONTAINS(tsr_errmsg(), missing);
  ASSERT_CONTAINS(tsr_errmsg(), "No such file");

  const char *text = tmp_path("notes.svs");
  write_bytes(text, "this is not a TIFF at all\n", 26);
  ASSERT_EQ(tsr_from_tiff(ctx, text, 0, 256, &img), TSR_EIO);
  ASSERT_CONTAINS(tsr_errmsg(), text);
  ASSERT_CONTAINS(tsr_errmsg(), "not a readable TIFF");

  size_t n = 0;
  FILE *f = fopen(svs, "rb");
  uint8_t *bytes = malloc(2000000);
  if (f) n = fread(bytes, 1, 2000000, f), fclose(f);
  const char *cut = tmp_path("truncated.svs");
  write_bytes(cut, bytes, n / 3);
  free(bytes);
  ASSERT_EQ(tsr_from_tiff(ctx, cut, 0, 256, &img), TSR_EIO);
  ASSERT_CONTAINS(tsr_errmsg(), cut);
  ASSERT_CONTAINS(tsr_errmsg(), "Failed to read directory"); /* Aperio writes its directories last */

  uint8_t tiny[2048];
  size_t tiny_n = tiny_tiff(tiny);
  const char *whole = tmp_path("tiny.tif"), *short_tiles = tmp_path("tiny_cut.tif");
  write_bytes(whole, tiny, tiny_n);
  write_bytes(short_tiles, tiny, tiny_n - 300);
  ASSERT_OK(tsr_from_tiff(ctx, whole, 0, 32, &img));
  uint8_t px[32 * 32 * 3];
  ASSERT_OK(tsr_compute(ctx, img, px, sizeof px, 60000));
  ASSERT_EQ(px[(17 * 32 + 1) * 3 + 2], (uint8_t)(3 * 256 + 16 + 1)); /* tile 3, row 1, column 1, grey in B */
  ASSERT_EQ(tsr_from_tiff(ctx, short_tiles, 0, 32, &img), TSR_EIO);
  ASSERT_CONTAINS(tsr_errmsg(), short_tiles);
  ASSERT_CONTAINS(tsr_errmsg(), "directory 0: tile 2 (bytes");
  ASSERT_CONTAINS(tsr_errmsg(), "the file is truncated");

  const tiff_spec plain = {"j2k.tif", COMPRESSION_NONE, PHOTOMETRIC_RGB, true, false};
  const char *j2k = tmp_path("j2k.tif");
  ASSERT_OK(write_tiff(&plain, j2k));
  ASSERT_OK(patch_compression(j2k, 33005));
  ASSERT_EQ(tsr_from_tiff(ctx, j2k, 0, 256, &img), TSR_EIO);
  ASSERT_CONTAINS(tsr_errmsg(), j2k);
  ASSERT_CONTAINS(tsr_errmsg(), "Compression 33005 (JPEG 2000, Aperio) is not supported");

  ASSERT_EQ(tsr_from_tiff(ctx, svs, 3, 256, &img), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "level 3 does not exist");
  cluster_still_serves();
}

/* A file cut after its graph was built fails the tasks of the tiles it
 * lost, on the worker, with the file in the message. */
TEST(a_slide_truncated_after_the_graph_was_built_fails_its_task)
{
  const tiff_spec spec = {"shrinks.tif", COMPRESSION_LZW, PHOTOMETRIC_RGB, true, false};
  const char *path = tmp_path("shrinks.tif");
  ASSERT_OK(write_tiff(&spec, path));
  tsr_array *img = NULL;
  ASSERT_OK(tsr_from_tiff(ctx, path, 0, 300, &img));
  struct stat st;
  ASSERT_OK(stat(path, &st));
  ASSERT_OK(truncate(path, st.st_size / 3));
  uint8_t *px = malloc(300 * 200 * 3);
  ASSERT_EQ(tsr_compute(ctx, img, px, 300 * 200 * 3, 60000), TSR_ETASK);
  ASSERT_CONTAINS(tsr_errmsg(), "tiff_read");
  ASSERT_CONTAINS(tsr_errmsg(), path);
  free(px);
  cluster_still_serves();
  for (int i = 0; i < c.n_workers; i++) ASSERT_TRUE(cluster_alive(c.workers[i]));
}

/* tsr-tiles over good, missing, non-TIFF and truncated slides: one graph,
 * a row per tile of the good ones, an error row naming each bad one, a
 * thumbnail per good slide, exit 1; the cluster still serves. */
TEST(cli_runs_a_batch_and_reports_each_bad_slide)
{
  char a[300], b[300], junk[300], cut[300], out[300], thumbs[300], report[300], env[400], cmd[3000];
  snprintf(a, sizeof a, "%s", tmp_path("one.svs"));
  snprintf(b, sizeof b, "%s", tmp_path("two.svs"));
  snprintf(junk, sizeof junk, "%s", tmp_path("junk.svs"));
  snprintf(cut, sizeof cut, "%s", tmp_path("cut.tif"));
  snprintf(out, sizeof out, "%s", tmp_path("tiles.tsv"));
  snprintf(thumbs, sizeof thumbs, "%s", tmp_path("thumbs"));
  snprintf(report, sizeof report, "%s", tmp_path("report.json"));
  snprintf(cmd, sizeof cmd, "cp %s %s && cp %s %s && echo hello > %s", svs, a, svs, b, junk);
  ASSERT_EQ(system(cmd), 0);
  uint8_t tiny[2048];
  size_t n = tiny_tiff(tiny);
  write_bytes(cut, tiny, n - 300);
  snprintf(env, sizeof env, "TESSERA_SCHEDULER=%s", c.address);
  const char *argv[] = {cluster_bin("tsr-tiles"), "--slides", a, junk, "/nonexistent/x.svs", cut, b,
                        "--out-thumbs", thumbs, "--out", out, "--report", report, NULL};
  char log[16384];
  ASSERT_EQ(run_capture(argv, env, log, sizeof log, 120), 1);
  ASSERT_CONTAINS(log, "slides 2/2 done");
  /* the task bar's plain lines (not a terminal) and the efficiency report (docs/report.md) */
  ASSERT_CONTAINS(log, "tsr-tiles: progress: 100%");
  ASSERT_CONTAINS(log, "tsr-tiles: report written to");
  FILE *rf = fopen(report, "r");
  ASSERT_TRUE(rf != NULL);
  char doc[65536];
  doc[fread(doc, 1, sizeof doc - 1, rf)] = '\0';
  fclose(rf);
  ASSERT_CONTAINS(doc, "\"program\": \"tsr-tiles\"");
  ASSERT_CONTAINS(doc, "\"exit_status\": 1");
  ASSERT_CONTAINS(doc, "\"op\": \"tiff_read\"");
  ASSERT_CONTAINS(log, "2 of 5 slides read, 216 tiles");
  ASSERT_CONTAINS(log, "junk.svs is not a readable TIFF");
  FILE *f = fopen(out, "r");
  ASSERT_TRUE(f != NULL);
  char line[1024];
  int rows = 0, kept = 0, errors = 0;
  bool header = fgets(line, sizeof line, f) != NULL && strncmp(line, "slide\tlevel\tx\ty\t", 15) == 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, "\tNA\t") != NULL) {
      errors++;
      ASSERT_TRUE(strstr(line, "junk.svs") || strstr(line, "x.svs\t0\tNA") || strstr(line, "truncated"));
      continue;
    }
    rows++;
    char *k = line;
    for (int col = 0; col < 17 && k; col++) k = strchr(k, '\t') ? strchr(k, '\t') + 1 : NULL;
    kept += k != NULL && *k == '1';
  }
  fclose(f);
  ASSERT_TRUE(header);
  ASSERT_EQ(rows, 2 * 9 * 12);
  ASSERT_EQ(errors, 3);
  ASSERT_TRUE(kept > 0 && kept % 2 == 0); /* the same slide twice */
  char png[400];
  snprintf(png, sizeof png, "%s/one.svs.png", thumbs);
  f = fopen(png, "rb");
  uint8_t magic[8] = {0};
  ASSERT_TRUE(f != NULL && fread(magic, 1, 8, f) == 8);
  fclose(f);
  ASSERT_EQ(memcmp(magic, "\x89PNG\r\n\x1a\n", 8), 0);
  cluster_still_serves();
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const char *dir = getenv("TSR_WSI_DATA") ? getenv("TSR_WSI_DATA") : TSR_WSI_DATA;
  snprintf(svs, sizeof svs, "%s/CMU-1-Small-Region.svs", dir);
  snprintf(ppm, sizeof ppm, "%s/CMU-1-Small-Region_level0_rgb.ppm", dir);
  snprintf(tsv, sizeof tsv, "%s/reference_tiles_256.tsv", dir);
  reference = ppm_read(ppm);
  if (reference == NULL) {
    fprintf(stderr, "test_tiles: cannot read %s (set TSR_WSI_DATA)\n", ppm);
    return 1;
  }
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-tiles-XXXXXX");
  if (mkdtemp(tmpdir) == NULL || cluster_start(&c, 2, 1, NULL, NULL) != 0 ||
      tsr_client_open(&client, c.address, NULL) != 0 || tsr_array_ctx_new(client, &ctx) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(info_has_the_levels_and_svs_metadata);
  RUN(level0_equals_the_reference_ppm_for_any_tile_size);
  RUN(full_tile_stats_equal_the_reference_table);
  RUN(a_user_rule_from_text_counts_what_source_md_says);
  RUN(seed_filter_decisions_equal_the_python_seed);
  RUN(grids_for_any_tile_size_with_edges_kept_or_dropped_and_any_chunking);
  RUN(written_tiffs_decode_to_what_was_written);
  RUN(bad_files_are_refused_naming_the_file_and_the_field);
  RUN(a_slide_truncated_after_the_graph_was_built_fails_its_task);
  RUN(cli_runs_a_batch_and_reports_each_bad_slide);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  free(reference);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
