/* plot/plot.h — pictures of results, as PNG files drawn with cairo: the
 * 2-D embedding (UMAP) coloured by cluster, the one `tsr-cluster` writes.
 * A small library (tsr_plot) for the command-line tools; it uses cairo
 * and common/util only, never the cluster.
 *
 * Threading: functions are reentrant (no global state). */
#ifndef TSR_PLOT_H
#define TSR_PLOT_H

#include <stdint.h>

#include "util/util.h"

#define TSR_PLOT_WIDTH 1000
#define TSR_PLOT_HEIGHT 800
#define TSR_PLOT_MAX_POINTS ((int64_t)1 << 31)

/* Writes a TSR_PLOT_WIDTH x TSR_PLOT_HEIGHT PNG at path: the n points
 * xy[2i], xy[2i+1] coloured by labels[i] (any int32 values; each distinct
 * value one colour of scanpy's palettes, in increasing order of value),
 * with title (may be NULL) on top, axes UMAP1 / UMAP2, a legend of the
 * labels with their counts and each cluster's id at its median point.
 * Points are splatted into an accumulation buffer (each pixel: the mean
 * colour of the points covering it, opacity 1 - (1 - alpha)^coverage), so
 * the picture does not depend on the points' order and costs O(n) for
 * millions of points; their radius and alpha shrink as n grows so 700 and
 * 1.3M points both read well. Non-finite points are left out (and
 * counted in the legend's last line).
 * Returns 0, TSR_EINVAL (NULL argument, n < 1 or above
 * TSR_PLOT_MAX_POINTS), TSR_ENOMEM, or TSR_EIO naming path when the file
 * cannot be written; err says which. */
int tsr_plot_embedding_png(const char *path, const float *xy, const int32_t *labels, int64_t n, const char *title,
                           tsr_errbuf *err);

/* 0xRRGGBB of category k (0-based, in increasing label order) of
 * n_categories: scanpy's default_20 / default_28 / default_102. */
uint32_t tsr_plot_color(int64_t k, int64_t n_categories);

/* The radius (pixels) and alpha of a point when n are drawn. */
void tsr_plot_point_style(int64_t n, double *radius_p, double *alpha_p);

#endif
