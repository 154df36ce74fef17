/* Tests of the whole-slide CUDA variants (kernels/cuda/tiles.cu) on the
 * real slide region of ../shared/data/wsi_cmu1_small_region (Aperio SVS,
 * 240 x 240 JPEG tiles, RGB stored as is):
 *
 * - tiff_read on the GPU (nvJPEG) against the CPU (libjpeg-turbo through
 *   libtiff, equal to the data set's reference PPM): two IDCTs, so pixels
 *   may differ by a few levels; the mean difference must stay under one
 *   level and no pixel may be off by more than 16 — a wrong colour
 *   transform, a shifted tile or an undecoded tile breaks both at once.
 *   Regions cross tile borders and the image's right and bottom edges.
 * - tile_stats on the GPU against the CPU on the same pixels: the
 *   histogram values (min, max, p5, p50) and the pixel count exactly, the
 *   means and the std to 1e-12 relative (the sums run in another order).
 * - a region of a non-JPEG file (the LZW label image) is TSR_ENODEV (the
 *   worker decodes it on the CPU).
 *
 * Prints "SKIPPED: no GPU" and exits 77 without a GPU, and fails (not
 * skips) when the GPU is there but nvJPEG cannot be loaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "cuda/nvjpeg_dl.h"
#include "gpu_kit.h"
#include "kit.h"

#ifndef TSR_WSI_DIR
#define TSR_WSI_DIR "../shared/data/wsi_cmu1_small_region"
#endif
/* $TSR_WSI_DATA (the device machine: scripts/device-tests.sh) or the
 * build's data set. */
static char SLIDE[600];
#define SLIDE_W 2220
#define SLIDE_H 2967

static void region_params(tsr_params *p, int64_t ifd, int64_t width, int64_t height, int64_t x0, int64_t y0,
                          int64_t w, int64_t h)
{
  *p = (tsr_params)TSR_PARAMS_INIT;
  tsr_params_add_str(p, "path", SLIDE, strlen(SLIDE));
  tsr_params_add_int(p, "ifd", ifd);
  tsr_params_add_int(p, "width", width);
  tsr_params_add_int(p, "height", height);
  tsr_params_add_int(p, "x0", x0);
  tsr_params_add_int(p, "y0", y0);
  tsr_params_add_int(p, "w", w);
  tsr_params_add_int(p, "h", h);
}

TEST(nvjpeg_loads)
{
  const char *why = NULL;
  const tsr_nvjpeg_api *api = tsr_nvjpeg(&why);
  if (api == NULL) fprintf(stderr, "  nvJPEG: %s\n", why);
  ASSERT_TRUE(api != NULL);
}

/* One region through both decoders; mean and max absolute difference. */
static int compare_region(int64_t x0, int64_t y0, int64_t w, int64_t h, double *mean_p, int *max_p)
{
  tsr_params p;
  region_params(&p, 0, SLIDE_W, SLIDE_H, x0, y0, w, h);
  tsr_buf cpu, gpu;
  tsr_errbuf err = {{0}};
  int rc = cpu_run("tiff_read", &p, NULL, 0, &cpu, &err);
  if (rc == 0) rc = gpu_run("tiff_read", &p, NULL, 0, &gpu, &err);
  tsr_params_clear(&p);
  if (rc != 0) {
    fprintf(stderr, "  tiff_read %lld,%lld %lldx%lld: %s\n", (long long)x0, (long long)y0, (long long)w,
            (long long)h, err.text);
    return rc;
  }
  double sum = 0;
  int worst = 0;
  const uint8_t *a = cpu.data, *b = gpu.data;
  for (size_t i = 0; i < cpu.nbytes; i++) {
    int d = abs((int)a[i] - (int)b[i]);
    sum += d;
    if (d > worst) worst = d;
  }
  *mean_p = sum / (double)cpu.nbytes, *max_p = worst;
  fprintf(stderr, "  region %lld,%lld %lldx%lld: mean |gpu - cpu| %.4f, max %d\n", (long long)x0, (long long)y0,
          (long long)w, (long long)h, *mean_p, worst);
  free(cpu.data), free(gpu.data);
  return 0;
}

TEST(tiff_read_gpu_matches_cpu_within_idct_rounding)
{
  /* inside one tile; across four tiles; the bottom-right corner (partial
   * tiles); a wide strip across a whole row of tiles */
  const int64_t r[][4] = {{10, 10, 200, 200}, {200, 200, 256, 256}, {SLIDE_W - 300, SLIDE_H - 277, 300, 277},
                          {0, 1000, SLIDE_W, 64}};
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    double mean = 0;
    int worst = 0;
    ASSERT_OK(compare_region(r[k][0], r[k][1], r[k][2], r[k][3], &mean, &worst));
    ASSERT_TRUE(mean < 1.0);
    ASSERT_TRUE(worst <= 16);
  }
}

TEST(tiff_read_not_jpeg_is_left_to_the_cpu)
{
  /* directory 2: the label image, LZW (SOURCE.md) */
  tsr_params p;
  region_params(&p, 2, 387, 463, 0, 0, 64, 64);
  tsr_k_jpeg_blocks b;
  tsr_errbuf err = {{0}};
  int rc = tsr_k_tiff_jpeg_blocks(&p, &b, &err);
  tsr_params_clear(&p);
  ASSERT_EQ(rc, TSR_ENODEV);
}

TEST(tile_stats_gpu_equals_cpu)
{
  tsr_params p;
  region_params(&p, 0, SLIDE_W, SLIDE_H, 512, 768, 256, 256);
  tsr_buf px, cs, gs;
  tsr_errbuf err = {{0}};
  int rc = cpu_run("tiff_read", &p, NULL, 0, &px, &err);
  tsr_params_clear(&p);
  ASSERT_OK(rc);
  /* and a synthetic tile with every grey level and black pixels */
  int64_t shape[3] = {97, 131, 3};
  tsr_buf syn = hbuf(TSR_U8, 3, shape);
  for (size_t i = 0; i < syn.nbytes; i++) ((uint8_t *)syn.data)[i] = (uint8_t)((i * 37 + i / 7) % 256 * (i % 11 != 0));
  const tsr_buf *tiles[2] = {&px, &syn};
  for (int t = 0; t < 2; t++) {
    ASSERT_OK(cpu_run("tile_stats", NULL, tiles[t], 1, &cs, &err));
    ASSERT_OK(gpu_run("tile_stats", NULL, tiles[t], 1, &gs, &err));
    const double *c = cs.data, *g = gs.data;
    for (int s = 0; s < TSR_K_TS_N; s++) {
      bool exact = s <= TSR_K_TS_P50 || s == TSR_K_TS_PIXELS;
      double tol = exact ? 0 : 1e-12 * fmax(1.0, fabs(c[s]));
      if (fabs(c[s] - g[s]) > tol) fprintf(stderr, "  tile %d stat %d: cpu %.17g gpu %.17g\n", t, s, c[s], g[s]);
      ASSERT_TRUE(fabs(c[s] - g[s]) <= tol);
    }
    free(cs.data), free(gs.data);
  }
  free(px.data), free(syn.data);
}

/* A chunk of many tiles (param tile 256: 3 x 4 tiles, the last row and
 * column partial): one block a tile on the GPU, the CPU op's per-tile
 * loop, the same values as above. */
TEST(tile_stats_of_a_region_gpu_equals_cpu)
{
  tsr_params p;
  region_params(&p, 0, SLIDE_W, SLIDE_H, 300, 200, 900, 700);
  tsr_buf px, cs, gs;
  tsr_errbuf err = {{0}};
  int rc = cpu_run("tiff_read", &p, NULL, 0, &px, &err);
  tsr_params_clear(&p);
  ASSERT_OK(rc);
  tsr_params t = TSR_PARAMS_INIT;
  tsr_params_add_int(&t, "tile", 256);
  ASSERT_OK(cpu_run("tile_stats", &t, &px, 1, &cs, &err));
  ASSERT_OK(gpu_run("tile_stats", &t, &px, 1, &gs, &err));
  tsr_params_clear(&t);
  ASSERT_EQ(cs.meta.shape[0], 3);
  ASSERT_EQ(cs.meta.shape[1], 4);
  const double *c = cs.data, *g = gs.data;
  for (int k = 0; k < 12 * TSR_K_TS_N; k++) {
    int s = k % TSR_K_TS_N;
    bool exact = s <= TSR_K_TS_P50 || s == TSR_K_TS_PIXELS;
    double tol = exact ? 0 : 1e-12 * fmax(1.0, fabs(c[k]));
    if (fabs(c[k] - g[k]) > tol) fprintf(stderr, "  tile %d stat %d: cpu %.17g gpu %.17g\n", k / TSR_K_TS_N, s, c[k], g[k]);
    ASSERT_TRUE(fabs(c[k] - g[k]) <= tol);
  }
  ASSERT_EQ(c[11 * TSR_K_TS_N + TSR_K_TS_PIXELS], (double)((700 - 512) * (900 - 768)));  /* the corner tile */
  free(cs.data), free(gs.data), free(px.data);
}

int main(void)
{
  const char *dir = getenv("TSR_WSI_DATA");
  snprintf(SLIDE, sizeof SLIDE, "%s/CMU-1-Small-Region.svs", dir && dir[0] ? dir : TSR_WSI_DIR);
  tsr_ops_init(false);
  int rc = gpu_open();
  if (rc != 0) return rc;
  RUN(nvjpeg_loads);
  RUN(tiff_read_gpu_matches_cpu_within_idct_rounding);
  RUN(tiff_read_not_jpeg_is_left_to_the_cpu);
  RUN(tile_stats_gpu_equals_cpu);
  RUN(tile_stats_of_a_region_gpu_equals_cpu);
  return kit_summary();
}
