/* kernels/cpu/umap.c — the UMAP ops umap_prepare and umap_layout (the
 * layouts, the plan and the schedules are in umap.h; umap_spectral is in
 * umap_spectral.c).
 *
 * umap_prepare  inputs: `graph_chunks` CSR row chunks of the n x n f32
 *               connectivities, then the initial embedding's row chunks
 *               (f32 or f64 [rows, 2]). params: `n`, `n_epochs` (> 0),
 *               `seed`, `scale_init` bool. Output: the plan (u8), inferred
 *               at a bound and shrunk to its size.
 * umap_layout   input: a plan. params: `n`, `n_epochs`, `seed`, `a`, `b`
 *               (or `min_dist`, `spread`: fitted as umap's find_ab_params),
 *               `gamma` (1), `negative_sample_rate` (5), `learning_rate`
 *               (1), `scheme` "sequential" (umap's order: edge by edge,
 *               both ends moved at once; CPU only) or "synchronous" (every
 *               vertex moved from the epoch's positions: umap.h; CPU and
 *               CUDA). Output f32 [n, 2].
 * Both run as one task over the whole graph: the SGD is global. */
#include <stdlib.h>

#include "csr.h"
#include "ops.h"
#include "umap.h"

/* ---------- umap-learn's find_ab_params ---------- */

/* Least squares of 1 / (1 + a x^(2b)) against umap's target curve (1 below
 * min_dist, exp(-(x - min_dist) / spread) above) on 300 points of
 * [0, 3 spread], by Levenberg-Marquardt from (1, 1) like scipy's
 * curve_fit. */
void tsr_k_umap_find_ab(double spread, double min_dist, double *a_p, double *b_p)
{
  double x[300], y[300], p[2] = {1.0, 1.0}, lambda = 1e-3;
  for (int i = 0; i < 300; i++) {
    x[i] = 3.0 * spread * i / 299.0;
    y[i] = x[i] < min_dist ? 1.0 : exp(-(x[i] - min_dist) / spread);
  }
  double cost = 0;
  for (int it = 0; it < 500; it++) {
    double jtj[3] = {0, 0, 0}, jtr[2] = {0, 0};
    cost = 0;
    for (int i = 0; i < 300; i++) {
      double xp = x[i] > 0 ? pow(x[i], 2 * p[1]) : 0.0, den = 1.0 + p[0] * xp, r = 1.0 / den - y[i];
      double ja = -xp / (den * den), jb = x[i] > 0 ? -p[0] * xp * 2.0 * log(x[i]) / (den * den) : 0.0;
      jtj[0] += ja * ja, jtj[1] += ja * jb, jtj[2] += jb * jb, jtr[0] += ja * r, jtr[1] += jb * r, cost += r * r;
    }
    double m0 = jtj[0] * (1 + lambda), m2 = jtj[2] * (1 + lambda), det = m0 * m2 - jtj[1] * jtj[1];
    double q[2] = {p[0] - (m2 * jtr[0] - jtj[1] * jtr[1]) / det, p[1] - (m0 * jtr[1] - jtj[1] * jtr[0]) / det};
    double c2 = 0;
    for (int i = 0; i < 300; i++) {
      double r = 1.0 / (1.0 + (x[i] > 0 ? q[0] * pow(x[i], 2 * q[1]) : 0.0)) - y[i];
      c2 += r * r;
    }
    if (c2 < cost) {
      double step = fabs(q[0] - p[0]) + fabs(q[1] - p[1]);
      p[0] = q[0], p[1] = q[1], lambda *= 0.3;
      if (step < 1e-12) break;
    } else {
      lambda *= 10;
      if (lambda > 1e12) break;
    }
  }
  *a_p = p[0], *b_p = p[1];
}

/* ---------- reading the graph ---------- */

/* Views of the graph's row chunks in[0..chunks): f32 CSR, n columns, n
 * rows in all. */
int tsr_k_umap_graph(const char *op, const tsr_buf *in, int chunks, int64_t n, tsr_k_csr *v, tsr_errbuf *err)
{
  int64_t rows = 0;
  for (int c = 0; c < chunks; c++) {
    tsr_errbuf why;
    int rc = tsr_k_csr_view(&in[c], true, &v[c], &why);
    if (rc != 0) return tsr_fail(err, rc, "%s: graph chunk %d: %s", op, c, why.text);
    if (v[c].dtype != TSR_F32 || v[c].cols != n)
      return tsr_fail(err, TSR_ESHAPE, "%s: graph chunk %d is %lld columns of dtype %d, expected %lld of f32", op, c,
                      (long long)v[c].cols, (int)v[c].dtype, (long long)n);
    rows += v[c].rows;
  }
  if (rows != n) return tsr_fail(err, TSR_ESHAPE, "%s: the graph's chunks hold %lld rows, expected %lld", op, (long long)rows, (long long)n);
  return 0;
}

/* ---------- umap_prepare ---------- */

typedef struct prep_args {
  int64_t n, n_epochs, seed, graph_chunks;
  bool scale_init;
} prep_args;

static int prep_params(const tsr_params *p, int n_in, prep_args *a, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, "n", &a->n, err);
  if (rc == 0) rc = tsr_params_get_int(p, "n_epochs", &a->n_epochs, err);
  if (rc == 0) rc = tsr_params_get_int(p, "graph_chunks", &a->graph_chunks, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "seed", 0, &a->seed, err);
  if (rc == 0) rc = tsr_params_get_bool(p, "scale_init", &a->scale_init, err);
  if (rc == TSR_ENOTFOUND) a->scale_init = false, rc = 0;
  if (rc != 0) return tsr_k_param_fail("umap_prepare", rc, err);
  if (a->n < 1 || a->n > INT32_MAX || a->n_epochs < 1 || a->n_epochs > TSR_UMAP_MAX_EPOCHS)
    return tsr_fail(err, TSR_EINVAL, "umap_prepare: n = %lld (1..2^31-1) or n_epochs = %lld (1..%d) out of range",
                    (long long)a->n, (long long)a->n_epochs, TSR_UMAP_MAX_EPOCHS);
  if (a->graph_chunks < 1 || a->graph_chunks >= n_in)
    return tsr_fail(err, TSR_EINVAL, "umap_prepare: graph_chunks = %lld, but %d inputs (graph chunks, then init chunks)",
                    (long long)a->graph_chunks, n_in);
  return 0;
}

static int prep_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  prep_args a;
  int rc = prep_params(p, n_in, &a, err);
  if (rc != 0) return rc;
  int64_t bytes = 0, rows = 0;
  for (int i = 0; i < n_in; i++) {
    bool graph = i < a.graph_chunks;
    if (graph && (in[i].dtype != TSR_U8 || in[i].ndim != 1))
      return tsr_fail(err, TSR_ESHAPE, "umap_prepare: input %d must be a CSR chunk (1-D u8), got %s", i, tsr_k_str(&in[i]).s);
    if (!graph && (in[i].ndim != 2 || in[i].shape[1] != 2 || (in[i].dtype != TSR_F32 && in[i].dtype != TSR_F64)))
      return tsr_fail(err, TSR_ESHAPE, "umap_prepare: input %d must be an init chunk (f32/f64 [rows, 2]), got %s", i,
                      tsr_k_str(&in[i]).s);
    if (graph) bytes += in[i].shape[0];
    else rows += in[i].shape[0];
  }
  if (rows != a.n)
    return tsr_fail(err, TSR_ESHAPE, "umap_prepare: the init chunks hold %lld rows, expected n = %lld", (long long)rows, (long long)a.n);
  int64_t plan = tsr_k_umap_plan_bytes(a.n, bytes / 8);  /* each value costs >= 8 bytes of CSR */
  tsr_k_meta_set(out, TSR_U8, 1, &plan);
  return 0;
}

/* The largest weight, and the threshold umap drops edges under. */
static float prep_threshold(const tsr_k_csr *v, int chunks, int64_t n, int64_t n_epochs, float *wmax_p)
{
  float wmax = 0.0f;
  for (int c = 0; c < chunks; c++)
    for (int64_t i = 0; i < v[c].nnz; i++) wmax = fmaxf(wmax, ((const float *)v[c].values)[i]);
  *wmax_p = wmax;
  int64_t div = n_epochs > 10 ? n_epochs : (n <= 10000 ? 500 : 200);
  return wmax / (float)div;
}

/* Copies the kept edges and their rates (w / max w in f32, as umap's
 * make_epochs_per_sample computes the inverse) into the plan; returns nnz. */
static int64_t prep_edges(const tsr_k_csr *v, int chunks, float thr, float wmax, tsr_k_umap_plan *pl,
                          int64_t bound)
{
  int64_t nnz = 0, j = 0;
  int32_t *idx = malloc((size_t)(bound > 0 ? bound : 1) * sizeof *idx);
  for (int c = 0; c < chunks; c++)
    for (int64_t r = 0; r < v[c].rows; r++, j++) {
      pl->indptr[j] = nnz;
      for (int64_t i = v[c].indptr[r]; i < v[c].indptr[r + 1]; i++) {
        float w = ((const float *)v[c].values)[i];
        if (!(w >= thr) || !(w > 0.0f)) continue;
        pl->rate[nnz] = (double)(w / wmax);
        if (idx != NULL) idx[nnz] = v[c].indices[i];
        nnz++;
      }
    }
  pl->indptr[j] = nnz;
  if (idx == NULL) return -1;
  pl->nnz = nnz;
  tsr_k_umap_plan_parts((char *)pl->y0 - TSR_UMAP_HEADER, pl->n, nnz, pl);  /* indices now follow nnz rates */
  memcpy(pl->indices, idx, (size_t)nnz * sizeof *idx);
  free(idx);
  return nnz;
}

/* The init rows into y0, scaled to max |coordinate| 10 plus N(0, 1e-4)
 * noise when asked (umap's noisy_scale_coords). */
static int prep_init(const tsr_buf *in, int n_init, const prep_args *a, float *y0, tsr_errbuf *err)
{
  int64_t at = 0;
  for (int c = 0; c < n_init; c++) {
    size_t cnt = (size_t)in[c].meta.shape[0] * 2;
    tsr_k_to_float(TSR_F32, in[c].meta.dtype, in[c].data, cnt, y0 + at);
    at += (int64_t)cnt;
  }
  float amax = 0.0f;
  for (int64_t i = 0; i < 2 * a->n; i++) {
    if (!isfinite(y0[i])) return tsr_fail(err, TSR_EINVAL, "umap_prepare: init row %lld is not finite", (long long)(i / 2));
    amax = fmaxf(amax, fabsf(y0[i]));
  }
  if (!a->scale_init) return 0;
  float f = amax > 0.0f ? 10.0f / amax : 1.0f;
  for (int64_t i = 0; i < 2 * a->n; i++) {
    uint32_t w[4];
    tsr_philox_block((uint64_t)a->seed ^ 0x5ca1ab1eULL, (uint64_t)i, w);
    y0[i] = y0[i] * f + (float)(1e-4 * tsr_normal_f64(w));
  }
  return 0;
}

static int prep_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  prep_args a;
  int rc = prep_params(p, n_in, &a, err);
  if (rc != 0) return rc;
  int chunks = (int)a.graph_chunks;
  tsr_k_csr *v = malloc((size_t)chunks * sizeof *v);
  if (v == NULL) return tsr_fail(err, TSR_ENOMEM, "umap_prepare: out of memory");
  rc = tsr_k_umap_graph("umap_prepare", in, chunks, a.n, v, err);
  int64_t bound = 0;
  for (int c = 0; rc == 0 && c < chunks; c++) bound += v[c].nnz;
  tsr_k_umap_plan pl;
  tsr_k_umap_plan_parts(out->data, a.n, bound, &pl);
  if (rc == 0) rc = prep_init(in + chunks, n_in - chunks, &a, pl.y0, err);
  float wmax = 0.0f, thr = rc == 0 ? prep_threshold(v, chunks, a.n, a.n_epochs, &wmax) : 0.0f;
  int64_t nnz = rc == 0 ? prep_edges(v, chunks, thr, wmax, &pl, bound) : 0;
  free(v);
  if (rc != 0) return rc;
  if (nnz < 0) return tsr_fail(err, TSR_ENOMEM, "umap_prepare: out of memory for %lld edges", (long long)bound);
  unsigned char *h = out->data;
  uint32_t version = 1;
  int64_t zero = 0;
  memcpy(h, "TUMP", 4), memcpy(h + 4, &version, 4), memcpy(h + 8, &a.n, 8), memcpy(h + 16, &nnz, 8), memcpy(h + 24, &zero, 8);
  out->meta.shape[0] = tsr_k_umap_plan_bytes(a.n, nnz);
  memset((char *)pl.indices + 4 * nnz, 0, (size_t)(tsr_k_umap_pad8(4 * nnz) - 4 * nnz));
  return 0;
}

/* ---------- umap_layout ---------- */

/* Reads and checks a plan chunk against n (full: every index in range). */
int tsr_k_umap_plan_view(const tsr_buf *b, int64_t n, tsr_k_umap_plan *pl, tsr_errbuf *err)
{
  const unsigned char *h = b->data;
  int64_t pn, nnz;
  if (b->meta.dtype != TSR_U8 || b->meta.ndim != 1 || b->nbytes < TSR_UMAP_HEADER || memcmp(h, "TUMP", 4) != 0)
    return tsr_fail(err, TSR_EPROTO, "umap_layout: input is not a UMAP plan (umap_prepare's output): %s", tsr_k_str(&b->meta).s);
  memcpy(&pn, h + 8, 8), memcpy(&nnz, h + 16, 8);
  if (pn != n || nnz < 0 || nnz > ((int64_t)1 << 40) || (size_t)tsr_k_umap_plan_bytes(pn, nnz) != b->nbytes)
    return tsr_fail(err, TSR_EPROTO, "umap_layout: plan of %lld vertices and %lld edges in %zu bytes, expected n = %lld",
                    (long long)pn, (long long)nnz, b->nbytes, (long long)n);
  tsr_k_umap_plan_parts(b->data, n, nnz, pl);
  return 0;
}

int tsr_k_umap_sgd_params(const tsr_params *p, tsr_k_umap_sgd *s, bool *sequential_p, tsr_errbuf *err)
{
  int64_t n = 0, epochs = 0, seed = 0, neg = 5;
  double a = 0, b = 0, md = 0.5, spread = 1.0, gamma = 1.0, lr = 1.0;
  const char *scheme = "synchronous";
  int rc = tsr_params_get_int(p, "n", &n, err);
  if (rc == 0) rc = tsr_params_get_int(p, "n_epochs", &epochs, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "seed", 0, &seed, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "negative_sample_rate", 5, &neg, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "min_dist", 0.5, &md, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "spread", 1.0, &spread, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "gamma", 1.0, &gamma, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "learning_rate", 1.0, &lr, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "a", 0.0, &a, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "b", 0.0, &b, err);
  if (rc == 0 && tsr_params_get_str(p, "scheme", &scheme, NULL) == TSR_EINVAL) rc = tsr_fail(err, TSR_EINVAL, "'scheme' must be a string");
  if (rc != 0) return tsr_k_param_fail("umap_layout", rc, err);
  bool seq = strcmp(scheme, "sequential") == 0;
  if (!seq && strcmp(scheme, "synchronous") != 0)
    return tsr_fail(err, TSR_EINVAL, "umap_layout: unknown scheme '%s' (sequential, synchronous)", scheme);
  if (n < 1 || n > INT32_MAX || epochs < 1 || epochs > TSR_UMAP_MAX_EPOCHS || neg < 0 || neg > 100 || !(spread > 0) ||
      !(md >= 0) || !(gamma >= 0) || !(lr > 0))
    return tsr_fail(err, TSR_EINVAL, "umap_layout: a parameter is out of range (n %lld, n_epochs %lld, negative_sample_rate %lld, "
                    "spread %g, min_dist %g, gamma %g, learning_rate %g)", (long long)n, (long long)epochs, (long long)neg,
                    spread, md, gamma, lr);
  if (!(a > 0) || !(b > 0)) tsr_k_umap_find_ab(spread, md, &a, &b);
  *s = (tsr_k_umap_sgd){n, (int)epochs, (int)neg, (float)a, (float)b, (float)gamma, (float)lr, (uint64_t)seed};
  *sequential_p = seq;
  return 0;
}

static int layout_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  tsr_k_umap_sgd s;
  bool seq;
  int rc = tsr_k_umap_sgd_params(p, &s, &seq, err);
  if (rc != 0) return rc;
  if (n_in != 1 || in[0].dtype != TSR_U8 || in[0].ndim != 1)
    return tsr_fail(err, TSR_ESHAPE, "umap_layout: takes one plan (1-D u8), got %d inputs", n_in);
  int64_t shape[2] = {s.n, 2};
  tsr_k_meta_set(out, TSR_F32, 2, shape);
  return 0;
}

/* umap's own order: edge by edge, head and tail moved by the attraction,
 * the head by each negative sample, positions updated in place. */
static void layout_sequential(const tsr_k_umap_sgd *s, const tsr_k_umap_plan *pl, float *y)
{
  for (int t = 0; t < s->n_epochs; t++) {
    float alpha = tsr_k_umap_alpha(s, t);
    for (int64_t j = 0; j < s->n; j++)
      for (int64_t e = pl->indptr[j]; e < pl->indptr[j + 1]; e++) {
        int n_neg = 0;
        if (!tsr_k_umap_fires(pl->rate[e], t, s->neg_rate, &n_neg)) continue;
        float *cur = y + 2 * j, *oth = y + 2 * (int64_t)pl->indices[e];
        float d0 = cur[0] - oth[0], d1 = cur[1] - oth[1];
        float c = tsr_k_umap_attract(d0 * d0 + d1 * d1, s->a, s->b);
        float g0 = tsr_k_umap_clip(c * d0) * alpha, g1 = tsr_k_umap_clip(c * d1) * alpha;
        cur[0] += g0, cur[1] += g1, oth[0] -= g0, oth[1] -= g1;
        uint32_t w[4];
        for (int q = 0; q < n_neg; q++) {
          if (q % 4 == 0) tsr_k_umap_neg_block(s->seed, t, e, q / 4, w);
          oth = y + 2 * tsr_k_umap_vertex_of(w[q % 4], s->n);
          d0 = cur[0] - oth[0], d1 = cur[1] - oth[1];
          c = tsr_k_umap_repulse(d0 * d0 + d1 * d1, s->a, s->b, s->gamma);
          if (c > 0.0f) cur[0] += tsr_k_umap_clip(c * d0) * alpha, cur[1] += tsr_k_umap_clip(c * d1) * alpha;
        }
      }
  }
}

/* Every vertex from the epoch's positions (umap.h), double-buffered. */
static int layout_synchronous(const tsr_k_umap_sgd *s, const tsr_k_umap_plan *pl, float *y, tsr_errbuf *err)
{
  float *tmp = malloc((size_t)s->n * 2 * sizeof *tmp), *cur = y, *next = tmp;
  if (tmp == NULL) return tsr_fail(err, TSR_ENOMEM, "umap_layout: out of memory for %lld vertices", (long long)s->n);
  for (int t = 0; t < s->n_epochs; t++) {
    float alpha = tsr_k_umap_alpha(s, t);
    for (int64_t j = 0; j < s->n; j++) tsr_k_umap_vertex_sync(s, pl, cur, t, alpha, j, next + 2 * j);
    float *sw = cur;
    cur = next, next = sw;
  }
  if (cur != y) memcpy(y, cur, (size_t)s->n * 2 * sizeof *y);
  free(tmp);
  return 0;
}

static int layout_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)n_in;
  tsr_k_umap_sgd s;
  tsr_k_umap_plan pl;
  bool seq;
  int rc = tsr_k_umap_sgd_params(p, &s, &seq, err);
  if (rc == 0) rc = tsr_k_umap_plan_view(&in[0], s.n, &pl, err);
  if (rc != 0) return rc;
  for (int64_t e = 0; e < pl.nnz; e++)
    if (pl.indices[e] < 0 || pl.indices[e] >= s.n || !(pl.rate[e] > 0.0 && pl.rate[e] <= 1.0))
      return tsr_fail(err, TSR_EPROTO, "umap_layout: plan edge %lld has tail %d or rate %g out of range",
                      (long long)e, pl.indices[e], pl.rate[e]);
  float *y = out->data;
  memcpy(y, pl.y0, (size_t)s.n * 2 * sizeof *y);
  if (seq) layout_sequential(&s, &pl, y);
  else rc = layout_synchronous(&s, &pl, y, err);
  return rc;
}

const tsr_op_def tsr_op_umap_prepare = {"umap_prepare", 2, -1, prep_infer, prep_cpu, false, NULL};
const tsr_op_def tsr_op_umap_layout = {"umap_layout", 1, 1, layout_infer, layout_cpu, false, NULL};
