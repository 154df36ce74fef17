/* bench/tiles/gen_slide.c — a large pyramidal tiled JPEG TIFF built by
 * tiling a real slide region (the CMU-1 reference PPM), for bench/tiles.
 *
 *   tsr-gen-slide REGION.ppm OUT.tif [SIZE (40000)] [LEVELS (3)]
 *
 * Level 0 is SIZE x SIZE, 240 x 240 JPEG tiles (quality 80, YCbCr 2x2, as
 * Aperio writes), the region repeated (mirrored on odd repeats so edges
 * match); each further level halves the previous one (2 x 2 box mean),
 * written as a reduced-resolution tiled directory. BigTIFF. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#define TILE 240

typedef struct { int w, h; uint8_t *px; } image;

static int ppm_read(const char *path, image *im)
{
  FILE *f = fopen(path, "rb");
  int maxv;
  if (f == NULL || fscanf(f, "P6 %d %d %d", &im->w, &im->h, &maxv) != 3 || fgetc(f) < 0) return -1;
  size_t n = (size_t)im->w * im->h * 3;
  im->px = malloc(n);
  int ok = fread(im->px, 1, n, f) == n;
  fclose(f);
  return ok ? 0 : -1;
}

/* Pixel (x, y) of the level-0 mosaic, shrunk by 2^level. */
static void mosaic_px(const image *r, int level, long x, long y, uint8_t *out)
{
  int f = 1 << level;
  unsigned sum[3] = {0, 0, 0};
  for (int dy = 0; dy < f; dy++)
    for (int dx = 0; dx < f; dx++) {
      long X = x * f + dx, Y = y * f + dy;
      long qx = X / r->w, qy = Y / r->h, ix = X % r->w, iy = Y % r->h;
      if (qx & 1) ix = r->w - 1 - ix;
      if (qy & 1) iy = r->h - 1 - iy;
      const uint8_t *p = r->px + ((size_t)iy * r->w + ix) * 3;
      for (int c = 0; c < 3; c++) sum[c] += p[c];
    }
  for (int c = 0; c < 3; c++) out[c] = (uint8_t)((sum[c] + f * f / 2) / (f * f));
}

static int write_level(TIFF *t, const image *r, long size, int level)
{
  long w = size >> level, h = size >> level;
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)w);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)h);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_JPEG);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_YCBCR);
  TIFFSetField(t, TIFFTAG_JPEGQUALITY, 80);
  TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
  TIFFSetField(t, TIFFTAG_TILEWIDTH, TILE);
  TIFFSetField(t, TIFFTAG_TILELENGTH, TILE);
  if (level > 0) TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
  else TIFFSetField(t, TIFFTAG_IMAGEDESCRIPTION, "Aperio Image Library (Tessera bench mosaic of CMU-1-Small-Region)|MPP = 0.4990|AppMag = 20");
  uint8_t *tile = malloc(TILE * TILE * 3);
  for (long ty = 0; ty < h; ty += TILE)
    for (long tx = 0; tx < w; tx += TILE) {
      for (int y = 0; y < TILE; y++)
        for (int x = 0; x < TILE; x++) {
          uint8_t *p = tile + ((size_t)y * TILE + x) * 3;
          if (tx + x < w && ty + y < h) mosaic_px(r, level, tx + x, ty + y, p);
          else p[0] = p[1] = p[2] = 255;
        }
      if (TIFFWriteTile(t, tile, (uint32_t)tx, (uint32_t)ty, 0, 0) < 0) return free(tile), -1;
    }
  free(tile);
  return TIFFWriteDirectory(t) ? 0 : -1;
}

int main(int argc, char **argv)
{
  if (argc < 3) return fprintf(stderr, "usage: tsr-gen-slide REGION.ppm OUT.tif [SIZE] [LEVELS]\n"), 2;
  long size = argc > 3 ? atol(argv[3]) : 40000;
  int levels = argc > 4 ? atoi(argv[4]) : 3;
  image r;
  if (ppm_read(argv[1], &r) != 0) return fprintf(stderr, "tsr-gen-slide: cannot read %s\n", argv[1]), 1;
  TIFF *t = TIFFOpen(argv[2], "w8");
  if (t == NULL) return fprintf(stderr, "tsr-gen-slide: cannot create %s\n", argv[2]), 1;
  for (int l = 0; l < levels; l++)
    if (write_level(t, &r, size, l) != 0) return fprintf(stderr, "tsr-gen-slide: writing level %d failed\n", l), 1;
  TIFFClose(t);
  free(r.px);
  printf("%s: %ld x %ld, %d levels\n", argv[2], size, size, levels);
  return 0;
}
