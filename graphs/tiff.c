/* graphs/tiff.c — the client side of the TIFF / SVS reader
 * (tessera/tiles.h): the file's directories are read and checked here with
 * libtiff, and tsr_from_tiff records one `tiff_read` task per output tile
 * (kernels/cpu/tiff_read.c decodes on the workers).
 *
 * Everything a worker would trip on that the directories show is refused
 * here, with the file, directory and field in the message: sample layout,
 * compression, and tiles or strips that lie past the end of the file (a
 * truncated copy). A slide that fails here never reaches the cluster. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>

#include "graphs.h"
#include "tessera/tiles.h"

#define TSR_API __attribute__((visibility("default")))

typedef struct tiff_msgs {
  char text[256];
} tiff_msgs;

static int on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
  (void)tif, (void)module;
  vsnprintf(((tiff_msgs *)user)->text, sizeof ((tiff_msgs *)user)->text, fmt, ap);
  return 1;
}

static int on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
  (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
  return 1;
}

static TIFF *open_quiet(const char *path, tiff_msgs *msgs)
{
  TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
  if (opts == NULL) return NULL;
  TIFFOpenOptionsSetErrorHandlerExtR(opts, on_error, msgs);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, on_warning, msgs);
  TIFF *tif = TIFFOpenExt(path, "rm", opts);
  TIFFOpenOptionsFree(opts);
  return tif;
}

static const char *compression_name(int c)
{
  switch (c) {
  case COMPRESSION_NONE: return "none";
  case COMPRESSION_LZW: return "LZW";
  case COMPRESSION_JPEG: return "JPEG";
  case COMPRESSION_ADOBE_DEFLATE: case COMPRESSION_DEFLATE: return "deflate";
  case COMPRESSION_PACKBITS: return "PackBits";
  case COMPRESSION_OJPEG: return "old-style JPEG";
  case 33003: case 33005: return "JPEG 2000, Aperio";
  case 34712: return "JPEG 2000";
  default: return "unknown";
  }
}

static bool compression_ok(int c)
{
  return c == COMPRESSION_NONE || c == COMPRESSION_LZW || c == COMPRESSION_JPEG || c == COMPRESSION_ADOBE_DEFLATE ||
         c == COMPRESSION_DEFLATE || c == COMPRESSION_PACKBITS;
}

/* The current directory's layout and its checks. */
static int level_read(TIFF *tif, const char *path, int ifd, tsr_tiff_level *lv)
{
  uint32_t w = 0, h = 0, bw = 0, bh = 0;
  uint16_t spp = 1, bps = 1, planar = 1, photo = PHOTOMETRIC_MINISBLACK, comp = 1;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bps);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
  TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo);
  lv->tiled = TIFFIsTiled(tif);
  if (lv->tiled) {
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &bw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &bh);
  } else {
    bw = w;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &bh);
    if (bh > h) bh = h;
  }
  *lv = (tsr_tiff_level){w, h, ifd, lv->tiled, bw, bh, comp, photo, spp};
  if (w == 0 || h == 0 || w > (1u << 24) || h > (1u << 24) || bw == 0 || bh == 0)
    return client_fail(TSR_EIO, "from_tiff: %s: directory %d: ImageWidth x ImageLength %ux%u or tile %ux%u is empty "
                       "or over 16777216", path, ifd, w, h, bw, bh);
  if (!compression_ok(comp))
    return client_fail(TSR_EIO, "from_tiff: %s: directory %d: Compression %u (%s) is not supported (Tessera reads "
                       "none, LZW, deflate, JPEG, PackBits)", path, ifd, comp, compression_name(comp));
  if (bps != 8 || planar != PLANARCONFIG_CONTIG || !(spp == 1 || spp == 3 || spp == 4))
    return client_fail(TSR_EIO, "from_tiff: %s: directory %d: BitsPerSample %u, SamplesPerPixel %u, PlanarConfig %u "
                       "are not supported (Tessera reads 8-bit grey, RGB or RGBA, contiguous)", path, ifd, bps, spp,
                       planar);
  if (photo == PHOTOMETRIC_YCBCR && comp != COMPRESSION_JPEG)
    return client_fail(TSR_EIO, "from_tiff: %s: directory %d: Photometric YCbCr without JPEG is not supported", path,
                       ifd);
  return 0;
}

/* Every tile or strip of the current directory must lie inside the file. */
static int blocks_inside(TIFF *tif, const char *path, int ifd, uint64_t file_size)
{
  uint64_t *offsets = NULL, *counts = NULL;
  bool tiled = TIFFIsTiled(tif);
  uint32_t n = tiled ? TIFFNumberOfTiles(tif) : TIFFNumberOfStrips(tif);
  if (!TIFFGetField(tif, tiled ? TIFFTAG_TILEOFFSETS : TIFFTAG_STRIPOFFSETS, &offsets) ||
      !TIFFGetField(tif, tiled ? TIFFTAG_TILEBYTECOUNTS : TIFFTAG_STRIPBYTECOUNTS, &counts) || offsets == NULL ||
      counts == NULL)
    return client_fail(TSR_EIO, "from_tiff: %s: directory %d has no %s", path, ifd,
                       tiled ? "TileOffsets/TileByteCounts" : "StripOffsets/StripByteCounts");
  for (uint32_t i = 0; i < n; i++)
    if (counts[i] > file_size || offsets[i] > file_size - counts[i])
      return client_fail(TSR_EIO, "from_tiff: %s: directory %d: %s %u (bytes %llu..%llu) lies past the end of the "
                         "file (%llu bytes): the file is truncated", path, ifd, tiled ? "tile" : "strip", i,
                         (unsigned long long)offsets[i], (unsigned long long)(offsets[i] + counts[i]),
                         (unsigned long long)file_size);
  return 0;
}

/* "KEY = VALUE" of an Aperio description ("...|MPP = 0.4990|AppMag = 20"). */
static double aperio_field(const char *desc, const char *key)
{
  size_t len = strlen(key);
  for (const char *p = strchr(desc, '|'); p != NULL; p = strchr(p + 1, '|')) {
    const char *k = p + 1;
    while (*k == ' ') k++;
    if (strncmp(k, key, len) == 0 && (k[len] == ' ' || k[len] == '=')) {
      const char *eq = strchr(k, '=');
      return eq != NULL ? strtod(eq + 1, NULL) : 0;
    }
  }
  return 0;
}

static void metadata_read(TIFF *tif, tsr_tiff_info *info)
{
  const char *desc = NULL;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEDESCRIPTION, &desc) || desc == NULL) desc = "";
  info->description = strdup(desc);
  info->aperio = strncmp(desc, "Aperio", 6) == 0;
  if (info->aperio) {
    info->mpp = aperio_field(desc, "MPP");
    info->app_mag = aperio_field(desc, "AppMag");
  }
  float xres = 0;
  uint16_t unit = RESUNIT_INCH;
  if (info->mpp == 0 && TIFFGetField(tif, TIFFTAG_XRESOLUTION, &xres) && xres > 0) {
    TIFFGetFieldDefaulted(tif, TIFFTAG_RESOLUTIONUNIT, &unit);
    if (unit == RESUNIT_CENTIMETER) info->mpp = 1e4 / xres;
    if (unit == RESUNIT_INCH) info->mpp = 25400.0 / xres;
  }
}

/* Directory 0, then each later tiled directory smaller than the last level. */
static int levels_scan(TIFF *tif, tsr_tiff_info *info, uint64_t file_size)
{
  int ifd = 0;
  do {
    bool tiled = TIFFIsTiled(tif);
    tsr_tiff_level *last = info->n_levels > 0 ? &info->levels[info->n_levels - 1] : NULL;
    uint32_t w = 0;
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
    bool is_level = ifd == 0 || (tiled && last != NULL && last->tiled && (int64_t)w < last->width);
    if (is_level && info->n_levels < TSR_TIFF_MAX_LEVELS) {
      tsr_tiff_level *lv = &info->levels[info->n_levels];
      int rc = level_read(tif, info->path, ifd, lv);
      if (rc == 0) rc = blocks_inside(tif, info->path, ifd, file_size);
      if (rc != 0) return rc;
      info->n_levels++;
    }
    ifd++;
  } while (TIFFReadDirectory(tif));
  return 0;
}

TSR_API void tsr_tiff_info_destroy(tsr_tiff_info **info_p)
{
  if (info_p == NULL || *info_p == NULL) return;
  free((*info_p)->path);
  free((*info_p)->description);
  free(*info_p);
  *info_p = NULL;
}

TSR_API int tsr_tiff_info_read(const char *path, tsr_tiff_info **info_p)
{
  if (path == NULL || info_p == NULL) return client_fail(TSR_EINVAL, "from_tiff: NULL argument");
  struct stat st;
  if (stat(path, &st) != 0) return client_fail(TSR_EIO, "from_tiff: cannot open %s: %s", path, strerror(errno));
  tiff_msgs msgs = {{0}};
  TIFF *tif = open_quiet(path, &msgs);
  if (tif == NULL)
    return client_fail(TSR_EIO, "from_tiff: %s is not a readable TIFF: %s", path, msgs.text[0] ? msgs.text : "?");
  tsr_tiff_info *info = calloc(1, sizeof *info);
  int rc = info == NULL ? client_fail(TSR_ENOMEM, "from_tiff: out of memory") : 0;
  if (rc == 0 && (info->path = realpath(path, NULL)) == NULL)
    rc = client_fail(TSR_EIO, "from_tiff: cannot resolve %s: %s", path, strerror(errno));
  if (rc == 0) metadata_read(tif, info);
  if (rc == 0 && info->description == NULL) rc = client_fail(TSR_ENOMEM, "from_tiff: out of memory");
  if (rc == 0) rc = levels_scan(tif, info, (uint64_t)st.st_size);
  TIFFClose(tif);
  if (rc != 0) {
    tsr_tiff_info_destroy(&info);
    return rc;
  }
  *info_p = info;
  return 0;
}

/* tiff_read's params for block b of a. */
static int block_args(const tsr_array *a, size_t b, const char *path, const tsr_tiff_level *lv, tsr_args **args_p)
{
  int64_t idx[3], off[3], shape[3];
  garray_index(a, b, idx);
  garray_block_offset(a, idx, off);
  garray_block_shape(a, idx, shape);
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_str(args, "path", path);
  if (rc == 0) rc = tsr_args_int(args, "ifd", lv->ifd);
  if (rc == 0) rc = tsr_args_int(args, "width", lv->width);
  if (rc == 0) rc = tsr_args_int(args, "height", lv->height);
  if (rc == 0) rc = tsr_args_int(args, "x0", off[1]);
  if (rc == 0) rc = tsr_args_int(args, "y0", off[0]);
  if (rc == 0) rc = tsr_args_int(args, "w", shape[1]);
  if (rc == 0) rc = tsr_args_int(args, "h", shape[0]);
  if (rc != 0) {
    tsr_args_destroy(&args);
    return client_fail(TSR_ENOMEM, "from_tiff: out of memory");
  }
  *args_p = args;
  return 0;
}

static int record_reads(tsr_array_ctx *ctx, const tsr_tiff_info *info, const tsr_tiff_level *lv, int64_t tile,
                        tsr_array **out_p)
{
  int64_t shape[3] = {lv->height, lv->width, 3}, chunks[3] = {tile, tile, 3};
  tsr_array *a = NULL;
  int rc = garray_new(ctx, "tiff", TSR_U8, 3, shape, chunks, &a);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    tsr_args *args = NULL;
    rc = block_args(a, b, info->path, lv, &args);
    if (rc == 0) rc = gtask_add(ctx, a->keys[b], "tiff_read", args, NULL, 0);
    tsr_args_destroy(&args);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &a);
    return rc;
  }
  *out_p = a;
  return 0;
}

TSR_API int tsr_from_tiff(tsr_array_ctx *ctx, const char *path, int level, int64_t tile, tsr_array **out_p)
{
  if (ctx == NULL || path == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "from_tiff: NULL argument");
  if (tile < 16 || tile > 16384)
    return client_fail(TSR_EINVAL, "from_tiff: tile %lld is not in 16..16384", (long long)tile);
  tsr_tiff_info *info = NULL;
  int rc = tsr_tiff_info_read(path, &info);
  if (rc != 0) return rc;
  if (level < 0 || level >= info->n_levels)
    rc = client_fail(TSR_EINVAL, "from_tiff: %s has levels 0..%d; level %d does not exist", path,
                     info->n_levels - 1, level);
  if (rc == 0) rc = record_reads(ctx, info, &info->levels[level], tile, out_p);
  tsr_tiff_info_destroy(&info);
  return rc;
}
