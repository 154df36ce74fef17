/* kernels/cpu/tiles.c — whole-slide tile ops: `tile_stats`, `tile_filter`,
 * `tile_thumb` (docs/tiles.md has the definitions, which match the
 * reference table of ../shared/data/wsi_cmu1_small_region).
 *
 * tile_stats: u8 [h, w, 3] (RGB) -> f64 [1, 1, TSR_K_TS_N], or with the
 *   param `tile` t, f64 [ceil(h/t), ceil(w/t), TSR_K_TS_N]: the statistics
 *   of each t x t tile of the chunk (smaller at its bottom and right
 *   edges), each exactly as for a chunk of that tile alone — so a GPU
 *   worker reads and decodes a region of many tiles as one task:
 *   grey8 = Pillow's Image.convert("L") of a pixel, (19595 R + 38470 G +
 *   7471 B + 2^15) >> 16; its min, max, and 5th / 50th percentiles as
 *   numpy.percentile's default (linear) computes them, read from a
 *   256-bin histogram (no sort); mean R, G, B; gray = 0.299 R + 0.587 G +
 *   0.114 B in double, its mean and (population) std; saturation
 *   (max - min) / max of the pixel's RGB (0 for black), its mean; the
 *   fraction of pixels with gray > 220 and saturation < 0.1 (background);
 *   and the pixel count.
 * tile_filter: f64 [.., TSR_K_TS_N] -> u8 [..] (1 kept, 0 dropped): the AND
 *   of conditions `stat` [int] `cmp` [int: 0 <, 1 <=, 2 >, 3 >=] `value`
 *   [float]; no condition keeps every tile.
 * tile_thumb: u8 [h, w, 3] -> u8 [ceil(h/f), ceil(w/f), 3], box means of
 *   f x f pixels (`factor` f; the cells at the edges average what they
 *   hold), rounded half up.
 *
 * Sums run in one fixed order, so the same tile gives the same bytes on
 * any worker. The GPU seam: CUDA variants (histograms in shared memory)
 * belong in kernels/cuda/ under the same names. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct tile_sums {
  uint64_t hist[256];
  uint64_t sum_rgb[3];
  double sum_gray, sum_sat, n_bg;
} tile_sums;

/* gray = 0.299 R + 0.587 G + 0.114 B, the products as NumPy forms them. */
static void gray_tables(double wr[256], double wg[256], double wb[256])
{
  for (int v = 0; v < 256; v++) {
    wr[v] = 0.299 * v;
    wg[v] = 0.587 * v;
    wb[v] = 0.114 * v;
  }
}

static void tile_accumulate(const uint8_t *px, size_t n, tile_sums *s, double *gray_out)
{
  double wr[256], wg[256], wb[256];
  gray_tables(wr, wg, wb);
  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < n; i++, px += 3) {
    unsigned r = px[0], g = px[1], b = px[2];
    s->hist[(19595u * r + 38470u * g + 7471u * b + 32768u) >> 16]++;
    s->sum_rgb[0] += r, s->sum_rgb[1] += g, s->sum_rgb[2] += b;
    double gray = wr[r] + wg[g] + wb[b];
    unsigned mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
    unsigned mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    double sat = mx == 0 ? 0.0 : (double)(mx - mn) / (double)mx;
    s->sum_gray += gray;
    s->sum_sat += sat;
    s->n_bg += gray > 220.0 && sat < 0.1;
    gray_out[i] = gray;
  }
}

/* The value of rank k (0-based) in the histogram's sorted values. */
static double hist_rank(const uint64_t hist[256], uint64_t k)
{
  uint64_t seen = 0;
  for (int v = 0; v < 256; v++) {
    seen += hist[v];
    if (seen > k) return v;
  }
  return 255;
}

/* numpy.percentile(a, q) (method "linear"), including its _lerp. */
static double hist_percentile(const uint64_t hist[256], uint64_t n, double q)
{
  double pos = q / 100.0 * (double)(n - 1);
  uint64_t lo = (uint64_t)pos;
  uint64_t hi = lo + 1 < n ? lo + 1 : lo;
  double t = pos - (double)lo, a = hist_rank(hist, lo), b = hist_rank(hist, hi);
  double diff = b - a;
  return t >= 0.5 ? b - diff * (1.0 - t) : a + diff * t;
}

static double hist_min(const uint64_t hist[256])
{
  for (int v = 0; v < 256; v++)
    if (hist[v]) return v;
  return 0;
}

static double hist_max(const uint64_t hist[256])
{
  for (int v = 255; v >= 0; v--)
    if (hist[v]) return v;
  return 0;
}

void tsr_k_tile_stats(const uint8_t *px, size_t n, double *gray_scratch, double out[TSR_K_TS_N])
{
  tile_sums s;
  tile_accumulate(px, n, &s, gray_scratch);
  double dn = (double)n, mean = s.sum_gray / dn, ss = 0;
  for (size_t i = 0; i < n; i++) ss += (gray_scratch[i] - mean) * (gray_scratch[i] - mean);
  out[TSR_K_TS_MIN] = hist_min(s.hist);
  out[TSR_K_TS_MAX] = hist_max(s.hist);
  out[TSR_K_TS_P5] = hist_percentile(s.hist, n, 5);
  out[TSR_K_TS_P50] = hist_percentile(s.hist, n, 50);
  for (int c = 0; c < 3; c++) out[TSR_K_TS_MEAN_R + c] = (double)s.sum_rgb[c] / dn;
  out[TSR_K_TS_MEAN_GRAY] = mean;
  out[TSR_K_TS_STD_GRAY] = sqrt(ss / dn);
  out[TSR_K_TS_MEAN_SAT] = s.sum_sat / dn;
  out[TSR_K_TS_FRAC_BG] = s.n_bg / dn;
  out[TSR_K_TS_PIXELS] = dn;
}

static int rgb_input(const char *op, const tsr_meta *in, int n, tsr_errbuf *err)
{
  if (n != 1 || in[0].dtype != TSR_U8 || in[0].ndim != 3 || in[0].shape[2] != 3 || in[0].shape[0] < 1 ||
      in[0].shape[1] < 1)
    return tsr_fail(err, TSR_ESHAPE, "%s: input is %s, not a u8 [h, w, 3] RGB tile", op,
                    n >= 1 ? tsr_k_str(&in[0]).s : "nothing");
  return 0;
}

/* The sub-tile size: the param `tile` (at most the chunk's sides), or the
 * whole chunk without it. */
int tsr_k_tile_size(const tsr_params *p, const tsr_meta *in, int64_t *th_p, int64_t *tw_p, tsr_errbuf *err)
{
  *th_p = in->shape[0], *tw_p = in->shape[1];
  if (p == NULL || tsr_params_find(p, "tile") == NULL) return 0;
  int64_t t;
  int rc = tsr_params_get_int(p, "tile", &t, err);
  if (rc != 0) return tsr_k_param_fail("tile_stats", rc, err);
  if (t < 1) return tsr_fail(err, TSR_EINVAL, "tile_stats: tile (%lld) must be >= 1", (long long)t);
  /* a tile past the chunk's edge is the chunk (and no overflow sizing it) */
  if (t < *th_p) *th_p = t;
  if (t < *tw_p) *tw_p = t;
  return 0;
}

static int stats_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int rc = rgb_input("tile_stats", in, n, err);
  int64_t th, tw;
  if (rc == 0) rc = tsr_k_tile_size(p, &in[0], &th, &tw, err);
  if (rc != 0) return rc;
  int64_t shape[3] = {(in[0].shape[0] + th - 1) / th, (in[0].shape[1] + tw - 1) / tw, TSR_K_TS_N};
  tsr_k_meta_set(out, TSR_F64, 3, shape);
  return 0;
}

static int stats_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t h = in[0].meta.shape[0], w = in[0].meta.shape[1], th, tw;
  int rc = tsr_k_tile_size(p, &in[0].meta, &th, &tw, err);
  if (rc != 0) return rc;
  bool whole = th == h && tw == w;  /* one tile: its pixels are already side by side */
  double *gray = malloc((size_t)(th * tw) * sizeof *gray);
  uint8_t *tile = whole ? NULL : malloc((size_t)(th * tw * 3));
  if (gray == NULL || (!whole && tile == NULL)) {
    free(gray), free(tile);
    return tsr_fail(err, TSR_ENOMEM, "tile_stats: out of memory");
  }
  const uint8_t *px = in[0].data;
  double *o = out->data;
  for (int64_t y = 0; y < h; y += th)
    for (int64_t x = 0; x < w; x += tw, o += TSR_K_TS_N) {
      int64_t rows = h - y < th ? h - y : th, cols = w - x < tw ? w - x : tw;
      /* the tile's rows side by side, as a chunk of it alone holds them */
      for (int64_t r = 0; !whole && r < rows; r++)
        memcpy(tile + r * cols * 3, px + ((y + r) * w + x) * 3, (size_t)(cols * 3));
      tsr_k_tile_stats(whole ? px : tile, (size_t)(rows * cols), gray, o);
    }
  free(gray), free(tile);
  return 0;
}

const tsr_op_def tsr_op_tile_stats = {"tile_stats", 1, 1, stats_infer, stats_cpu, false, NULL};

/* ---------- tile_filter ---------- */

#define RULE_MAX 32

typedef struct filter_rule {
  int64_t stat[RULE_MAX], cmp[RULE_MAX];
  double value[RULE_MAX];
  size_t n;
} filter_rule;

/* A list param of at most RULE_MAX numbers (ints or floats) as doubles. */
static int rule_numbers(const tsr_params *p, const char *name, double *out, size_t *n_p, tsr_errbuf *err)
{
  const tsr_param *q = tsr_params_find(p, name);
  if (q == NULL || (q->type != TSR_PARAM_FLOATS && q->type != TSR_PARAM_INTS))
    return tsr_fail(err, TSR_EINVAL, "tile_filter: param '%s' must be a list of numbers", name);
  if (q->n > RULE_MAX)
    return tsr_fail(err, TSR_EINVAL, "tile_filter: %zu conditions, at most %d", q->n, RULE_MAX);
  for (size_t i = 0; i < q->n; i++) out[i] = q->type == TSR_PARAM_FLOATS ? q->floats[i] : (double)q->ints[i];
  *n_p = q->n;
  return 0;
}

static int rule_parse(const tsr_params *p, filter_rule *r, tsr_errbuf *err)
{
  memset(r, 0, sizeof *r);
  if (tsr_params_find(p, "stat") == NULL) return 0;
  double stat[RULE_MAX], cmp[RULE_MAX];
  size_t n_cmp = 0, n_val = 0;
  int rc = rule_numbers(p, "stat", stat, &r->n, err);
  if (rc == 0) rc = rule_numbers(p, "cmp", cmp, &n_cmp, err);
  if (rc == 0) rc = rule_numbers(p, "value", r->value, &n_val, err);
  if (rc != 0) return rc;
  if (n_cmp != r->n || n_val != r->n)
    return tsr_fail(err, TSR_EINVAL, "tile_filter: stat, cmp and value have %zu, %zu and %zu entries", r->n, n_cmp,
                    n_val);
  for (size_t i = 0; i < r->n; i++) {
    r->stat[i] = (int64_t)stat[i], r->cmp[i] = (int64_t)cmp[i];
    if (r->stat[i] < 0 || r->stat[i] >= TSR_K_TS_N || r->cmp[i] < 0 || r->cmp[i] > 3)
      return tsr_fail(err, TSR_EINVAL, "tile_filter: condition %zu: stat %lld or cmp %lld out of range", i,
                      (long long)r->stat[i], (long long)r->cmp[i]);
  }
  return 0;
}

static int filter_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  filter_rule r;
  int rc = rule_parse(p, &r, err);
  if (rc != 0) return rc;
  if (n != 1 || in[0].dtype != TSR_F64 || in[0].ndim < 1 || in[0].shape[in[0].ndim - 1] != TSR_K_TS_N)
    return tsr_fail(err, TSR_ESHAPE, "tile_filter: input is %s, not f64 [.., %d] tile statistics",
                    n >= 1 ? tsr_k_str(&in[0]).s : "nothing", TSR_K_TS_N);
  tsr_k_meta_set(out, TSR_U8, in[0].ndim - 1, in[0].shape);
  return 0;
}

static bool rule_holds(const filter_rule *r, const double *stats)
{
  for (size_t i = 0; i < r->n; i++) {
    double x = stats[r->stat[i]], v = r->value[i];
    bool ok = r->cmp[i] == 0 ? x < v : r->cmp[i] == 1 ? x <= v : r->cmp[i] == 2 ? x > v : x >= v;
    if (!ok) return false;
  }
  return true;
}

static int filter_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  filter_rule r;
  int rc = rule_parse(p, &r, err);
  if (rc != 0) return rc;
  const double *stats = in[0].data;
  uint8_t *kept = out->data;
  for (size_t t = 0; t < out->nbytes; t++) kept[t] = rule_holds(&r, stats + t * TSR_K_TS_N);
  return 0;
}

const tsr_op_def tsr_op_tile_filter = {"tile_filter", 1, 1, filter_infer, filter_cpu, false, NULL};

/* ---------- tile_thumb ---------- */

static int thumb_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t f;
  int rc = tsr_params_get_int(p, "factor", &f, err);
  if (rc != 0) return tsr_k_param_fail("tile_thumb", rc, err);
  if (f < 1 || f > 65536) return tsr_fail(err, TSR_EINVAL, "tile_thumb: factor %lld not in 1..65536", (long long)f);
  rc = rgb_input("tile_thumb", in, n, err);
  int64_t shape[3] = {(in[0].shape[0] + f - 1) / f, (in[0].shape[1] + f - 1) / f, 3};
  if (rc == 0) tsr_k_meta_set(out, TSR_U8, 3, shape);
  return rc;
}

static int thumb_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n, (void)err;
  int64_t f = 1, h = in[0].meta.shape[0], w = in[0].meta.shape[1];
  tsr_params_get_int(p, "factor", &f, NULL);
  const uint8_t *src = in[0].data;
  uint8_t *dst = out->data;
  for (int64_t ty = 0; ty < out->meta.shape[0]; ty++)
    for (int64_t tx = 0; tx < out->meta.shape[1]; tx++) {
      uint64_t sum[3] = {0, 0, 0}, cnt = 0;
      for (int64_t y = ty * f; y < h && y < (ty + 1) * f; y++)
        for (int64_t x = tx * f; x < w && x < (tx + 1) * f; x++, cnt++)
          for (int c = 0; c < 3; c++) sum[c] += src[(y * w + x) * 3 + c];
      for (int c = 0; c < 3; c++) dst[(ty * out->meta.shape[1] + tx) * 3 + c] = (uint8_t)((sum[c] + cnt / 2) / cnt);
    }
  return 0;
}

const tsr_op_def tsr_op_tile_thumb = {"tile_thumb", 1, 1, thumb_infer, thumb_cpu, false, NULL};
