/* tests/unit/test_plot.c — plot/plot.h: the embedding PNG read back with
 * cairo: its size, and for every cluster, pixels inside the points' box
 * of that cluster's colour (blended over white at some alpha), for 700
 * points in 11 clusters (scanpy's default_20), 200,000 in 25 (default_28)
 * and 3,000 in 40 (default_102); bad arguments and unwritable paths. */
#include <cairo.h>
#include <unistd.h>

#include "kit.h"
#include "plot.h"

static char dir[64];

/* Gaussian blobs (Box-Muller from a fixed LCG) on a circle, label = blob. */
static void blobs(int64_t n, int k, float *xy, int32_t *lab)
{
  uint64_t s = 12345;
  for (int64_t i = 0; i < n; i++) {
    double u[2];
    for (int q = 0; q < 2; q++) s = s * 6364136223846793005ULL + 1442695040888963407ULL, u[q] = ((s >> 11) + 0.5) * 0x1p-53;
    double g0 = sqrt(-2 * log(u[0])) * cos(6.283185307 * u[1]), g1 = sqrt(-2 * log(u[0])) * sin(6.283185307 * u[1]);
    int c = (int)((i * 7) % k);
    lab[i] = c * 3 - 5;  /* any int32 values, negative ones too */
    xy[2 * i] = (float)(10 * cos(6.283185307 * c / k) + 0.6 * g0);
    xy[2 * i + 1] = (float)(10 * sin(6.283185307 * c / k) + 0.6 * g1);
  }
}

/* The box's right edge: its grey frame, found from the right on the
 * middle row (the legend lies right of it). */
static int box_right(cairo_surface_t *s)
{
  unsigned char *d = cairo_image_surface_get_data(s);
  int stride = cairo_image_surface_get_stride(s);
  for (int x = TSR_PLOT_WIDTH - 1; x > 0; x--) {
    uint32_t px;
    memcpy(&px, d + (size_t)(TSR_PLOT_HEIGHT / 2) * (size_t)stride + (size_t)x * 4, 4);
    if ((px & 0xffffff) == 0x8c8c8c) return x;
  }
  return 0;
}

/* Pixels inside the box that are colour rgb over white at alpha >= 0.25,
 * within 3 levels per channel. */
static long pixels_of(cairo_surface_t *s, uint32_t rgb)
{
  unsigned char *d = cairo_image_surface_get_data(s);
  int stride = cairo_image_surface_get_stride(s), right = box_right(s);
  double c[3] = {rgb >> 16 & 255, rgb >> 8 & 255, rgb & 255};
  long hits = 0;
  for (int y = 70; y < TSR_PLOT_HEIGHT - 60; y++)
    for (int x = 70; x < right - 2; x++) {
      uint32_t px;
      memcpy(&px, d + (size_t)y * (size_t)stride + (size_t)x * 4, 4);
      double p[3] = {px >> 16 & 255, px >> 8 & 255, px & 255}, a = -1;
      int far = 0;  /* the channel farthest from white measures alpha best */
      for (int q = 1; q < 3; q++) far = fabs(255 - c[q]) > fabs(255 - c[far]) ? q : far;
      if (fabs(255 - c[far]) >= 10) a = (255 - p[far]) / (255 - c[far]);
      if (a < 0.25 || a > 1.02) continue;
      bool ok = true;
      for (int q = 0; q < 3; q++) ok = ok && fabs(255 + a * (c[q] - 255) - p[q]) <= 3.0;
      hits += ok;
    }
  return hits;
}

static void check_picture(int64_t n, int k)
{
  float *xy = malloc(sizeof(float) * 2 * (size_t)n);
  int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
  char path[128], title[64];
  tsr_errbuf err;
  blobs(n, k, xy, lab);
  snprintf(path, sizeof path, "%s/umap_%lld.png", dir, (long long)n);
  snprintf(title, sizeof title, "%lld points, %d clusters", (long long)n, k);
  int rc = tsr_plot_embedding_png(path, xy, lab, n, title, &err);
  free(xy), free(lab);
  if (rc != 0) fprintf(stderr, "  %s\n", err.text);
  ASSERT_OK(rc);
  cairo_surface_t *s = cairo_image_surface_create_from_png(path);
  ASSERT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  ASSERT_EQ(cairo_image_surface_get_width(s), TSR_PLOT_WIDTH);
  ASSERT_EQ(cairo_image_surface_get_height(s), TSR_PLOT_HEIGHT);
  ASSERT_TRUE(box_right(s) > 600);
  long fewest = -1;
  for (int c = 0; c < k; c++) {
    long h = pixels_of(s, tsr_plot_color(c, k));
    if (h < 20) fprintf(stderr, "  cluster %d (colour %06x): %ld pixels\n", c, tsr_plot_color(c, k), h);
    fewest = fewest < 0 || h < fewest ? h : fewest;
  }
  cairo_surface_destroy(s);
  ASSERT_TRUE(fewest >= 20);
}

TEST(small_picture_has_every_cluster) { check_picture(700, 11); }
TEST(large_picture_has_every_cluster) { check_picture(200000, 25); }
TEST(many_clusters_use_the_long_palette) { check_picture(3000, 40); }

TEST(palettes_are_scanpys)
{
  ASSERT_EQ(tsr_plot_color(0, 11), 0x1f77b4u);
  ASSERT_EQ(tsr_plot_color(0, 25), 0x023fa5u);
  ASSERT_EQ(tsr_plot_color(0, 40), 0xffff00u);
  double r1, a1, r2, a2;
  tsr_plot_point_style(700, &r1, &a1);
  tsr_plot_point_style(1300000, &r2, &a2);
  ASSERT_TRUE(r1 > r2 && a1 > a2 && r2 >= 0.5 && a2 >= 0.05);
}

TEST(bad_arguments_and_paths_are_named)
{
  float xy[6] = {0, 0, 1, 1, NAN, 2};
  int32_t lab[3] = {0, 1, 1};
  tsr_errbuf err;
  ASSERT_EQ(tsr_plot_embedding_png("/nonexistent-dir/x.png", xy, lab, 3, "t", &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "/nonexistent-dir/x.png");
  ASSERT_EQ(tsr_plot_embedding_png("/tmp/x.png", xy, lab, 0, "t", &err), TSR_EINVAL);
  ASSERT_EQ(tsr_plot_embedding_png(NULL, xy, lab, 3, "t", &err), TSR_EINVAL);
  char path[128];
  snprintf(path, sizeof path, "%s/nan.png", dir);
  ASSERT_OK(tsr_plot_embedding_png(path, xy, lab, 3, NULL, &err));  /* the NaN point is left out */
}

int main(void)
{
  snprintf(dir, sizeof dir, "/tmp/tsr-plot-XXXXXX");
  if (mkdtemp(dir) == NULL) return 1;
  RUN(palettes_are_scanpys);
  RUN(small_picture_has_every_cluster);
  RUN(large_picture_has_every_cluster);
  RUN(many_clusters_use_the_long_palette);
  RUN(bad_arguments_and_paths_are_named);
  if (getenv("TSR_KEEP_PLOTS") == NULL) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  } else {
    fprintf(stderr, "pictures kept in %s\n", dir);
  }
  return kit_summary();
}
