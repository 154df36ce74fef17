/* kernels/cpu/umap.h — UMAP's layout optimization (umap-learn's
 * optimize_layout_euclidean, as scanpy's tl.umap calls it), split into
 * three ops (kernels/cpu/umap.c) and the per-vertex step the CPU and the
 * CUDA variant (kernels/cuda/umap.cu) share:
 *
 *   umap_spectral  graph row chunks -> f32 [n, 2]: eigenvectors 1 and 2 of
 *                  the normalized Laplacian (umap's spectral_layout), CPU
 *   umap_prepare   graph row chunks + init row chunks -> a plan (u8): the
 *                  edges kept (weight >= max / n_epochs), each edge's
 *                  rate (1 / epochs_per_sample), and the initial embedding (scaled to
 *                  max |coordinate| 10 plus N(0, 1e-4) noise, as umap's
 *                  noisy_scale_coords, when asked), CPU
 *   umap_layout    plan -> f32 [n, 2]: the SGD epochs, CPU and CUDA
 *
 * The plan, one u8 chunk (all little-endian, 8-byte aligned sections):
 *   bytes 0..31  "TUMP", u32 version 1, int64 n, int64 nnz, int64 0
 *   then         f32 y0[2n] (padded to 8 bytes)
 *                int64 indptr[n + 1]        (row j's edges: [indptr[j], indptr[j+1]))
 *                f64 rate[nnz]              (samples per epoch of each edge: w / max w, in (0, 1];
 *                                            umap's epochs_per_sample is 1 / rate)
 *                int32 indices[nnz]         (each edge's tail vertex)
 *
 * Randomness: negative sample p of edge e in epoch t is vertex
 * (w * n) >> 32 with w a word of Philox4x32-10 under the seed at counter
 * (lo32(e), hi32(e), t, p / 4) (kernels/philox.h): a function of (seed,
 * t, e, p), never of the order the edges run in, so every scheme, thread
 * count and device draws the same samples.
 *
 * Schedules are stateless: edge e fires in epoch t (0 <= t < n_epochs) when
 * floor(t r) > floor((t - 1) r) (r its rate), i.e. at t = ceil(k / r), its
 * k-th firing, as umap's epoch_of_next_sample accumulation does; its
 * negative sample count there is the one umap's
 * epoch_of_next_negative_sample bookkeeping gives:
 * floor(t r s) - max(floor(t_prev r s), 1), with s = negative_sample_rate
 * and t_prev the previous firing (0 for the first). Multiplications by the
 * rate, not divisions by epochs_per_sample: this test runs for every edge
 * every epoch.
 *
 * Everything below is static inline so kernels/cuda/umap.cu compiles it. */
#ifndef TSR_KERNELS_CPU_UMAP_H
#define TSR_KERNELS_CPU_UMAP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../philox.h"

#define TSR_UMAP_HEADER 32
#define TSR_UMAP_MAX_EPOCHS 100000
#define TSR_UMAP_MAX_NEG 1000

typedef struct tsr_k_umap_plan {
  int64_t n, nnz;
  float *y0;
  int64_t *indptr;
  double *rate;
  int32_t *indices;
} tsr_k_umap_plan;

/* What umap_layout's params resolve to. */
typedef struct tsr_k_umap_sgd {
  int64_t n;
  int n_epochs;
  int neg_rate;        /* negative_sample_rate */
  float a, b, gamma;
  float alpha0;        /* initial learning rate */
  uint64_t seed;
} tsr_k_umap_sgd;

static inline TSR_HOSTDEV int64_t tsr_k_umap_pad8(int64_t b) { return (b + 7) / 8 * 8; }

/* Bytes of a plan of n vertices and nnz edges. */
static inline TSR_HOSTDEV int64_t tsr_k_umap_plan_bytes(int64_t n, int64_t nnz)
{
  return TSR_UMAP_HEADER + tsr_k_umap_pad8(8 * n) + 8 * (n + 1) + 8 * nnz + tsr_k_umap_pad8(4 * nnz);
}

/* The sections of a plan of n vertices and nnz edges at data. */
static inline TSR_HOSTDEV void tsr_k_umap_plan_parts(void *data, int64_t n, int64_t nnz, tsr_k_umap_plan *p)
{
  char *c = (char *)data + TSR_UMAP_HEADER;
  p->n = n, p->nnz = nnz;
  p->y0 = (float *)c;
  c += tsr_k_umap_pad8(8 * n);
  p->indptr = (int64_t *)c;
  c += 8 * (n + 1);
  p->rate = (double *)c;
  c += 8 * nnz;
  p->indices = (int32_t *)c;
}

/* umap's clip: the gradient of each coordinate kept within [-4, 4]. */
static inline TSR_HOSTDEV float tsr_k_umap_clip(float v) { return v > 4.0f ? 4.0f : (v < -4.0f ? -4.0f : v); }

/* The learning rate of epoch t: umap lowers it after each epoch. */
static inline TSR_HOSTDEV float tsr_k_umap_alpha(const tsr_k_umap_sgd *s, int t)
{
  return t == 0 ? s->alpha0 : s->alpha0 * (1.0f - (float)(t - 1) / (float)s->n_epochs);
}

/* Whether an edge of rate r fires in epoch t, and with how many negative
 * samples (see the top comment). */
static inline TSR_HOSTDEV int tsr_k_umap_fires(double r, int t, int neg_rate, int *n_neg_p)
{
  if (t < 1) return 0;
  double k = floor((double)t * r);
  if (!(k > floor((double)(t - 1) * r))) return 0;
  double nr = r * (double)neg_rate, prev = k >= 2 ? ceil((k - 1) / r) : 0.0;
  double before = floor(prev * nr), n_neg = floor((double)t * nr) - (before > 1.0 ? before : 1.0);
  *n_neg_p = n_neg <= 0 ? 0 : (n_neg > TSR_UMAP_MAX_NEG ? TSR_UMAP_MAX_NEG : (int)n_neg);
  return 1;
}

/* The words of negative samples 4q..4q+3 of edge e in epoch t; sample p
 * is vertex tsr_k_umap_vertex_of(w[p % 4], n). */
static inline TSR_HOSTDEV void tsr_k_umap_neg_block(uint64_t seed, int t, int64_t e, int q, uint32_t w[4])
{
  w[0] = (uint32_t)e, w[1] = (uint32_t)((uint64_t)e >> 32), w[2] = (uint32_t)t, w[3] = (uint32_t)q;
  tsr_philox4x32_10(w, (uint32_t)seed, (uint32_t)(seed >> 32));
}

static inline TSR_HOSTDEV int64_t tsr_k_umap_vertex_of(uint32_t w, int64_t n)
{
  return (int64_t)(((uint64_t)w * (uint64_t)n) >> 32);
}

/* umap's attractive coefficient for squared distance d2 (0 at d2 = 0). */
static inline TSR_HOSTDEV float tsr_k_umap_attract(float d2, float a, float b)
{
  if (!(d2 > 0.0f)) return 0.0f;
  float pb = powf(d2, b);  /* d2^(b-1) = d2^b / d2: one powf, not umap's two */
  return -2.0f * a * b * (pb / d2) / (a * pb + 1.0f);
}

/* umap's repulsive coefficient (0 at d2 = 0: the sample is skipped). */
static inline TSR_HOSTDEV float tsr_k_umap_repulse(float d2, float a, float b, float gamma)
{
  if (!(d2 > 0.0f)) return 0.0f;
  return 2.0f * gamma * b / ((0.001f + d2) * (a * powf(d2, b) + 1.0f));
}

/* The synchronous scheme's step for vertex j in epoch t: every force on j
 * is computed from the epoch's positions y (2 floats a vertex) and the
 * sum applied at once, into out[0..1]. Each of j's edges that fires pulls
 * j twice (umap moves both ends of each of the two directed copies of an
 * edge of the symmetric graph), each negative sample pushes it once; the
 * same clip as umap on each term. Reads y and the plan only, so vertices
 * run in any order or all at once with the same result. */
static inline TSR_HOSTDEV void tsr_k_umap_vertex_sync(const tsr_k_umap_sgd *s, const tsr_k_umap_plan *pl,
                                                    const float *y, int t, float alpha, int64_t j, float *out)
{
  float y0 = y[2 * j], y1 = y[2 * j + 1], g0 = 0.0f, g1 = 0.0f;
  for (int64_t e = pl->indptr[j]; e < pl->indptr[j + 1]; e++) {
    int n_neg = 0;
    if (!tsr_k_umap_fires(pl->rate[e], t, s->neg_rate, &n_neg)) continue;
    int64_t k = pl->indices[e];
    if ((uint64_t)k >= (uint64_t)s->n) continue;  /* never in a plan umap_prepare made; guards the GPU */
    float d0 = y0 - y[2 * k], d1 = y1 - y[2 * k + 1];
    float c = tsr_k_umap_attract(d0 * d0 + d1 * d1, s->a, s->b);
    g0 += 2.0f * tsr_k_umap_clip(c * d0), g1 += 2.0f * tsr_k_umap_clip(c * d1);
    uint32_t w[4];
    for (int p = 0; p < n_neg; p++) {
      if (p % 4 == 0) tsr_k_umap_neg_block(s->seed, t, e, p / 4, w);
      k = tsr_k_umap_vertex_of(w[p % 4], s->n);
      d0 = y0 - y[2 * k], d1 = y1 - y[2 * k + 1];
      c = tsr_k_umap_repulse(d0 * d0 + d1 * d1, s->a, s->b, s->gamma);
      if (c > 0.0f) g0 += tsr_k_umap_clip(c * d0), g1 += tsr_k_umap_clip(c * d1);
    }
  }
  out[0] = y0 + alpha * g0;
  out[1] = y1 + alpha * g1;
}

/* Shared by the ops (umap.c, umap_spectral.c) and their tests. */
#include "kernels.h"
#include "csr.h"
/* umap-learn's find_ab_params(spread, min_dist): a, b of 1 / (1 + a x^2b). */
void tsr_k_umap_find_ab(double spread, double min_dist, double *a_p, double *b_p);
/* Views of the graph's row chunks in[0..chunks) (f32 CSR, n x n in all). */
int tsr_k_umap_graph(const char *op, const tsr_buf *in, int chunks, int64_t n, tsr_k_csr *v, tsr_errbuf *err);
/* A plan chunk checked against n (sizes; the indices are checked by the layout). */
int tsr_k_umap_plan_view(const tsr_buf *b, int64_t n, tsr_k_umap_plan *pl, tsr_errbuf *err);
/* umap_layout's params resolved (a, b fitted when not given). */
int tsr_k_umap_sgd_params(const tsr_params *p, tsr_k_umap_sgd *s, bool *sequential_p, tsr_errbuf *err);

#endif
