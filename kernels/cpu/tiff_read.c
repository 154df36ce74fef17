/* kernels/cpu/tiff_read.c — the `tiff_read` op: one region of one TIFF
 * directory (a pyramid level of a whole-slide image) decoded to u8 RGB.
 *
 * Params (graphs/tiff.c writes them; docs/tiles.md): `path` str, `ifd` int
 * (the directory), `width`, `height` int (its size when the graph was
 * built: checked again, the file may have changed), `x0`, `y0`, `w`, `h`
 * int (the region). Output u8 [h, w, 3], C order (row, column, RGB).
 *
 * Only the source tiles (or strips) the region overlaps are decoded, each
 * through libtiff's TIFFReadEncodedTile/Strip into one reused buffer. JPEG
 * tiles with YCbCr photometric are converted by libjpeg-turbo
 * (TIFFTAG_JPEGCOLORMODE = RGB), the same path tiff2rgba and Pillow take,
 * so the bytes equal theirs; Aperio's shared tables (TIFFTAG_JPEGTABLES)
 * are libtiff's business. Grey (1 sample) is replicated to RGB; RGBA drops
 * its alpha. libtiff's messages go to a per-handle handler (never stderr:
 * kernels never print) and become the task's error, naming the file.
 *
 * The GPU variant (kernels/cuda/tiff_read.cu) reads the same compressed
 * JPEG tiles on the host (tsr_k_tiff_jpeg_blocks below: TIFFReadRawTile,
 * the shared tables spliced in) and decodes them on the device with
 * nvJPEG. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#include "ops.h"

typedef struct tiff_region {
  const char *path;
  int64_t ifd, width, height, x0, y0, w, h;
} tiff_region;

/* What libtiff said last on this handle (per call: thread-safe). */
typedef struct tiff_msgs {
  char text[256];
} tiff_msgs;

static int tiff_on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
  (void)tif, (void)module;
  tiff_msgs *m = user;
  vsnprintf(m->text, sizeof m->text, fmt, ap);
  return 1;
}

static int tiff_on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
  (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
  return 1; /* Aperio files carry private tags libtiff warns about */
}

static int region_parse(const tsr_params *p, tiff_region *r, tsr_errbuf *err)
{
  int rc = tsr_params_get_str(p, "path", &r->path, err);
  if (rc == 0) rc = tsr_params_get_int(p, "ifd", &r->ifd, err);
  if (rc == 0) rc = tsr_params_get_int(p, "width", &r->width, err);
  if (rc == 0) rc = tsr_params_get_int(p, "height", &r->height, err);
  if (rc == 0) rc = tsr_params_get_int(p, "x0", &r->x0, err);
  if (rc == 0) rc = tsr_params_get_int(p, "y0", &r->y0, err);
  if (rc == 0) rc = tsr_params_get_int(p, "w", &r->w, err);
  if (rc == 0) rc = tsr_params_get_int(p, "h", &r->h, err);
  if (rc != 0) return tsr_k_param_fail("tiff_read", rc, err);
  if (r->ifd < 0 || r->ifd > 65535 || r->w < 1 || r->h < 1 || r->x0 < 0 || r->y0 < 0 ||
      r->x0 + r->w > r->width || r->y0 + r->h > r->height || r->width > (1 << 24) || r->height > (1 << 24))
    return tsr_fail(err, TSR_EINVAL, "tiff_read: %s: region x0=%lld y0=%lld w=%lld h=%lld is not inside %lldx%lld",
                    r->path, (long long)r->x0, (long long)r->y0, (long long)r->w, (long long)r->h,
                    (long long)r->width, (long long)r->height);
  return 0;
}

static int tiff_read_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  tiff_region r;
  int rc = region_parse(p, &r, err);
  if (rc != 0) return rc;
  int64_t shape[3] = {r.h, r.w, 3};
  tsr_k_meta_set(out, TSR_U8, 3, shape);
  return 0;
}

/* The directory's layout, checked against what the op can decode. */
typedef struct tiff_layout {
  uint32_t width, height, block_w, block_h;
  uint16_t spp, bps, planar, photometric, compression;
  int tiled;
} tiff_layout;

static int layout_read(TIFF *tif, const tiff_region *r, tiff_layout *l, tsr_errbuf *err)
{
  memset(l, 0, sizeof *l);
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l->width);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l->height);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l->spp);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l->bps);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l->planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &l->compression);
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l->photometric)) l->photometric = PHOTOMETRIC_MINISBLACK;
  l->tiled = TIFFIsTiled(tif);
  if (l->tiled) {
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &l->block_w);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &l->block_h);
  } else {
    l->block_w = l->width;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &l->block_h);
    if (l->block_h > l->height) l->block_h = l->height;
  }
  if ((int64_t)l->width != r->width || (int64_t)l->height != r->height)
    return tsr_fail(err, TSR_EIO, "tiff_read: %s: directory %lld is %ux%u, not %lldx%lld: the file changed", r->path,
                    (long long)r->ifd, l->width, l->height, (long long)r->width, (long long)r->height);
  if (l->bps != 8 || l->planar != PLANARCONFIG_CONTIG || !(l->spp == 1 || l->spp == 3 || l->spp == 4))
    return tsr_fail(err, TSR_EIO,
                    "tiff_read: %s: directory %lld has BitsPerSample %u, SamplesPerPixel %u, PlanarConfig %u: "
                    "Tessera reads 8-bit grey, RGB or RGBA, contiguous",
                    r->path, (long long)r->ifd, l->bps, l->spp, l->planar);
  if (l->block_w == 0 || l->block_h == 0 || (uint64_t)l->block_w * l->block_h > (1u << 26))
    return tsr_fail(err, TSR_EIO, "tiff_read: %s: directory %lld: tile %ux%u is empty or too large", r->path,
                    (long long)r->ifd, l->block_w, l->block_h);
  if (l->photometric == PHOTOMETRIC_YCBCR) {
    if (l->compression != COMPRESSION_JPEG)
      return tsr_fail(err, TSR_EIO, "tiff_read: %s: directory %lld: YCbCr without JPEG is not supported", r->path,
                      (long long)r->ifd);
    TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
  }
  return 0;
}

/* Copies the overlap of the decoded block at (bx, by) into out. */
static void block_copy(const tiff_layout *l, const tiff_region *r, const uint8_t *block, int64_t bx, int64_t by,
                       uint8_t *out)
{
  int64_t xa = bx > r->x0 ? bx : r->x0, ya = by > r->y0 ? by : r->y0;
  int64_t xb = bx + l->block_w < r->x0 + r->w ? bx + l->block_w : r->x0 + r->w;
  int64_t yb = by + l->block_h < r->y0 + r->h ? by + l->block_h : r->y0 + r->h;
  for (int64_t y = ya; y < yb; y++) {
    const uint8_t *src = block + ((size_t)(y - by) * l->block_w + (size_t)(xa - bx)) * l->spp;
    uint8_t *dst = out + ((size_t)(y - r->y0) * (size_t)r->w + (size_t)(xa - r->x0)) * 3;
    int64_t n = xb - xa;
    if (l->spp == 3) {
      memcpy(dst, src, (size_t)n * 3);
      continue;
    }
    for (int64_t i = 0; i < n; i++) {
      uint8_t g = src[i * l->spp];
      dst[3 * i] = g;
      dst[3 * i + 1] = l->spp == 1 ? g : src[i * l->spp + 1];
      dst[3 * i + 2] = l->spp == 1 ? g : src[i * l->spp + 2];
    }
  }
}

/* Decodes every block the region overlaps. A strip's last block may be
 * short: libtiff decodes what it holds, the rest of buf is never read. */
static int blocks_decode(TIFF *tif, const tiff_layout *l, const tiff_region *r, const tiff_msgs *msgs, uint8_t *out,
                         tsr_errbuf *err)
{
  size_t bytes = (size_t)l->block_w * l->block_h * l->spp;
  uint8_t *buf = malloc(bytes);
  if (buf == NULL) return tsr_fail(err, TSR_ENOMEM, "tiff_read: %s: out of memory for a %zu-byte tile", r->path, bytes);
  int rc = 0;
  int64_t by0 = r->y0 / l->block_h * l->block_h, bx0 = r->x0 / l->block_w * l->block_w;
  for (int64_t by = by0; rc == 0 && by < r->y0 + r->h; by += l->block_h) {
    for (int64_t bx = bx0; rc == 0 && bx < r->x0 + r->w; bx += l->block_w) {
      tmsize_t got;
      uint32_t index;
      if (l->tiled) {
        index = TIFFComputeTile(tif, (uint32_t)bx, (uint32_t)by, 0, 0);
        got = TIFFReadEncodedTile(tif, index, buf, (tmsize_t)bytes);
      } else {
        index = TIFFComputeStrip(tif, (uint32_t)by, 0);
        got = TIFFReadEncodedStrip(tif, index, buf, (tmsize_t)bytes);
      }
      if (got < 0)
        rc = tsr_fail(err, TSR_EIO, "tiff_read: %s: directory %lld: %s %u (at x=%lld y=%lld) does not decode: %s",
                      r->path, (long long)r->ifd, l->tiled ? "tile" : "strip", index, (long long)bx, (long long)by,
                      msgs->text[0] ? msgs->text : "libtiff gave no reason");
      else
        block_copy(l, r, buf, bx, by, out);
    }
  }
  free(buf);
  return rc;
}

/* Opens path at directory ifd with messages going to msgs. */
static TIFF *tiff_open_dir(const tiff_region *r, tiff_msgs *msgs, tsr_errbuf *err)
{
  TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
  if (opts == NULL) {
    tsr_fail(err, TSR_ENOMEM, "tiff_read: out of memory");
    return NULL;
  }
  TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_on_error, msgs);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_on_warning, msgs);
  TIFF *tif = TIFFOpenExt(r->path, "rm", opts);
  TIFFOpenOptionsFree(opts);
  if (tif == NULL) {
    tsr_fail(err, TSR_EIO, "tiff_read: cannot open %s as a TIFF: %s", r->path, msgs->text[0] ? msgs->text : "?");
    return NULL;
  }
  if (!TIFFSetDirectory(tif, (tdir_t)r->ifd)) {
    tsr_fail(err, TSR_EIO, "tiff_read: %s has no directory %lld: %s", r->path, (long long)r->ifd, msgs->text);
    TIFFClose(tif);
    return NULL;
  }
  return tif;
}

static int tiff_read_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  tiff_region r;
  int rc = region_parse(p, &r, err);
  if (rc != 0) return rc;
  if (out->nbytes != (size_t)(r.w * r.h * 3))
    return tsr_fail(err, TSR_ESHAPE, "tiff_read: %s: the output is %s, not u8[%lld,%lld,3]", r.path,
                    tsr_k_str(&out->meta).s, (long long)r.h, (long long)r.w);
  tiff_msgs msgs = {{0}};
  TIFF *tif = tiff_open_dir(&r, &msgs, err);
  if (tif == NULL) return TSR_EIO;
  tiff_layout l;
  rc = layout_read(tif, &r, &l, err);
  if (rc == 0) rc = blocks_decode(tif, &l, &r, &msgs, out->data, err);
  TIFFClose(tif);
  return rc;
}

/* ---------- compressed blocks for a GPU decoder ---------- */

/* A JPEG stream without its SOI (FF D8) or EOI (FF D9) ends, as the
 * splice needs them: the tables' segments end before their EOI, the
 * block's begin after its SOI. */
static const unsigned char *jpeg_body(const unsigned char *s, size_t n, size_t *body_len, bool drop_eoi)
{
  size_t a = n >= 2 && s[0] == 0xFF && s[1] == 0xD8 ? 2 : 0;
  size_t b = drop_eoi && n >= a + 2 && s[n - 2] == 0xFF && s[n - 1] == 0xD9 ? n - 2 : n;
  *body_len = b - a;
  return s + a;
}

/* SOI + the tables (if any) + the block's stream after its SOI. */
static int splice_block(const unsigned char *tables, size_t ntables, const unsigned char *raw, size_t nraw,
                        unsigned char **out, size_t *out_len)
{
  size_t tlen = 0, rlen = 0;
  const unsigned char *t = tables ? jpeg_body(tables, ntables, &tlen, true) : NULL;
  const unsigned char *r = jpeg_body(raw, nraw, &rlen, false);
  unsigned char *s = malloc(2 + tlen + rlen);
  if (s == NULL) return TSR_ENOMEM;
  s[0] = 0xFF, s[1] = 0xD8;
  if (tlen) memcpy(s + 2, t, tlen);
  memcpy(s + 2 + tlen, r, rlen);
  *out = s, *out_len = 2 + tlen + rlen;
  return 0;
}

static int blocks_alloc(tsr_k_jpeg_blocks *b, size_t n)
{
  b->bx = calloc(n, sizeof *b->bx), b->by = calloc(n, sizeof *b->by);
  b->data = calloc(n, sizeof *b->data), b->len = calloc(n, sizeof *b->len);
  return b->bx && b->by && b->data && b->len ? 0 : TSR_ENOMEM;
}

/* Reads every overlapped block's raw bytes and splices the tables in. */
static int blocks_read_raw(TIFF *tif, const tiff_layout *l, const tiff_region *r, const tiff_msgs *msgs,
                           tsr_k_jpeg_blocks *b, tsr_errbuf *err)
{
  uint32_t ntables = 0;
  const unsigned char *tables = NULL;
  if (!TIFFGetField(tif, TIFFTAG_JPEGTABLES, &ntables, &tables)) tables = NULL, ntables = 0;
  int64_t by0 = r->y0 / l->block_h * l->block_h, bx0 = r->x0 / l->block_w * l->block_w;
  size_t nx = (size_t)((r->x0 + r->w - bx0 + l->block_w - 1) / l->block_w);
  size_t ny = (size_t)((r->y0 + r->h - by0 + l->block_h - 1) / l->block_h);
  if (blocks_alloc(b, nx * ny) != 0) return tsr_fail(err, TSR_ENOMEM, "tiff_read: %s: out of memory", r->path);
  for (size_t k = 0; k < nx * ny; k++) {
    int64_t bx = bx0 + (int64_t)(k % nx) * l->block_w, by = by0 + (int64_t)(k / nx) * l->block_h;
    uint32_t index = l->tiled ? TIFFComputeTile(tif, (uint32_t)bx, (uint32_t)by, 0, 0)
                              : TIFFComputeStrip(tif, (uint32_t)by, 0);
    tmsize_t size = (tmsize_t)TIFFGetStrileByteCount(tif, index);
    unsigned char *raw = size > 0 ? malloc((size_t)size) : NULL;
    tmsize_t got = raw == NULL ? -1
                   : l->tiled  ? TIFFReadRawTile(tif, index, raw, size)
                               : TIFFReadRawStrip(tif, index, raw, size);
    int rc = got > 0 ? splice_block(tables, ntables, raw, (size_t)got, &b->data[k], &b->len[k]) : TSR_EIO;
    free(raw);
    if (rc != 0)
      return tsr_fail(err, rc, "tiff_read: %s: directory %lld: %s %u (at x=%lld y=%lld) cannot be read: %s", r->path,
                      (long long)r->ifd, l->tiled ? "tile" : "strip", index, (long long)bx, (long long)by,
                      msgs->text[0] ? msgs->text : "no bytes");
    b->bx[k] = bx, b->by[k] = by, b->n = k + 1;
  }
  return 0;
}

int tsr_k_tiff_jpeg_blocks(const tsr_params *p, tsr_k_jpeg_blocks *b, tsr_errbuf *err)
{
  memset(b, 0, sizeof *b);
  tiff_region r;
  int rc = region_parse(p, &r, err);
  if (rc != 0) return rc;
  snprintf(b->path, sizeof b->path, "%s", r.path);
  tiff_msgs msgs = {{0}};
  TIFF *tif = tiff_open_dir(&r, &msgs, err);
  if (tif == NULL) return TSR_EIO;
  tiff_layout l;
  rc = layout_read(tif, &r, &l, err);
  bool jpeg = l.compression == COMPRESSION_JPEG && (l.spp == 1 || l.spp == 3);
  if (rc == 0 && !jpeg) rc = TSR_ENODEV;
  if (rc == 0) {
    b->x0 = r.x0, b->y0 = r.y0, b->w = r.w, b->h = r.h;
    b->block_w = l.block_w, b->block_h = l.block_h, b->spp = l.spp;
    b->ycbcr = l.photometric == PHOTOMETRIC_YCBCR;
    rc = blocks_read_raw(tif, &l, &r, &msgs, b, err);
  }
  TIFFClose(tif);
  if (rc != 0) tsr_k_jpeg_blocks_free(b);
  return rc;
}

void tsr_k_jpeg_blocks_free(tsr_k_jpeg_blocks *b)
{
  for (size_t k = 0; b->data != NULL && k < b->n; k++) free(b->data[k]);
  free(b->bx), free(b->by), free(b->data), free(b->len);
  b->bx = b->by = NULL, b->data = NULL, b->len = NULL, b->n = 0;
}

const tsr_op_def tsr_op_tiff_read = {"tiff_read", 0, 0, tiff_read_infer, tiff_read_cpu, false, NULL};
