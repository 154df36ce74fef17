/* tests/unit/test_umap_spectral_par.c — a plain-C emulation of the CUDA
 * umap_spectral variant (kernels/cuda/umap_spectral.cu): the block
 * row-major, A X one (row, vector) at a time in CSR order, the
 * orthonormalization as two passes of projected Cholesky-QR from Gram
 * sums taken as NB fixed row ranges (kernels/cpu/umap_spectral.h has the
 * shared m x m steps), the Ritz step and stopping test of the CPU op. Runs
 * everywhere, no GPU needed.
 *
 * Checked on a 16 x 20 grid graph (n = 320, λ2 != λ3, weights varied),
 * chunked in 3: the emulation's two vectors equal the CPU op's (same
 * signs: both are the positive-diagonal QR iterates) within 1e-6 in
 * 2-norm each (unit vectors), for two seeds. */
#include <stdint.h>
#include <stdlib.h>

#include "cpu/csr.h"
#include "cpu/umap_spectral.h"
#include "kit.h"

#define M TSR_SPEC_BLOCK
#define NB 240

typedef struct egraph {
  int64_t n, *ptr;
  int32_t *adj;
  float *w;
} egraph;

/* sums[v] over NB fixed row ranges, each range in row order, then ranges
 * in order (the device's tree order differs only in rounding). */
static void reduce(const egraph *g, int mode, const double *x, const double *ax, const double *v0, const double *ev,
                   double *sums, int nv)
{
  for (int v = 0; v < nv; v++) sums[v] = 0;
  for (int b = 0; b < NB; b++) {
    double acc[M * M] = {0};
    for (int64_t i = g->n * b / NB; i < g->n * (b + 1) / NB; i++) {
      const double *xi = x + i * M, *ai = ax ? ax + i * M : NULL;
      if (mode == 0) {
        acc[0] += v0[i] * v0[i];
        for (int k = 0; k < M; k++) acc[1 + k] += v0[i] * xi[k];
        for (int a = 0; a < M; a++)
          for (int c = a; c < M; c++) acc[tsr_spec_pair(a, c)] += xi[a] * xi[c];
      } else if (mode == 1) {
        for (int a = 0; a < M; a++)
          for (int c = 0; c < M; c++) acc[a * M + c] += xi[a] * ai[c];
      } else {
        for (int k = 0; k < 2; k++) acc[k] += (ai[k] - ev[k] * xi[k]) * (ai[k] - ev[k] * xi[k]);
      }
    }
    for (int v = 0; v < nv; v++) sums[v] += acc[v];
  }
}

static bool orth(const egraph *g, double *x, const double *v0)
{
  for (int pass = 0; pass < 2; pass++) {
    double s[TSR_SPEC_NORTH], c[M], t[M * M];
    reduce(g, 0, x, NULL, v0, NULL, s, TSR_SPEC_NORTH);
    if (!tsr_spec_cholqr(s, c, t)) return false;
    for (int64_t i = 0; i < g->n; i++) tsr_spec_orth_row(x + i * M, v0[i], c, t);
  }
  return true;
}

/* The variant's schedule; y: n x 2. False when the block lost rank. */
static bool emulate(const egraph *g, uint64_t seed, int64_t max_iter, float *y)
{
  int64_t n = g->n;
  double *isd = malloc((size_t)n * 8), *v0 = malloc((size_t)n * 8), *x = malloc((size_t)n * M * 8),
         *ax = malloc((size_t)n * M * 8), nrm = 0;
  for (int64_t j = 0; j < n; j++) {
    double d = 0;
    for (int64_t e = g->ptr[j]; e < g->ptr[j + 1]; e++) d += g->w[e];
    isd[j] = d > 0 ? 1 / sqrt(d) : 0.0, v0[j] = d;
  }
  for (int b = 0; b < NB; b++) {
    double a = 0;
    for (int64_t i = n * b / NB; i < n * (b + 1) / NB; i++) a += v0[i];
    nrm += a;
  }
  for (int64_t j = 0; j < n; j++) v0[j] = nrm > 0 ? sqrt(v0[j]) / sqrt(nrm) : 1 / sqrt((double)n);
  for (int64_t i = 0; i < n * M; i++) x[i] = tsr_spec_start(seed, (int)(i % M), n, i / M);
  bool ok = orth(g, x, v0);
  for (int64_t it = 1; ok && it <= max_iter; it++) {
    for (int64_t t = 0; t < n * M; t++) {
      int64_t j = t / M, k = t % M;
      double acc = 0;
      for (int64_t e = g->ptr[j]; e < g->ptr[j + 1]; e++) acc += (double)g->w[e] * isd[g->adj[e]] * x[(int64_t)g->adj[e] * M + k];
      ax[t] = 0.5 * (x[t] + isd[j] * acc);
    }
    if (it % 10 == 0 || it == max_iter) {
      double hs[M * M], h[M * M], ev[M], q[M * M], r[2];
      reduce(g, 1, x, ax, v0, NULL, hs, M * M);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) h[i * M + j] = 0.5 * (hs[i * M + j] + hs[j * M + i]);
      tsr_spec_jacobi(M, h, ev, q);
      for (int64_t i = 0; i < n; i++) tsr_spec_rotate_row(x + i * M, q), tsr_spec_rotate_row(ax + i * M, q);
      reduce(g, 2, x, ax, v0, ev, r, 2);
      if (fmax(sqrt(r[0]), sqrt(r[1])) < TSR_SPEC_TOL || it == max_iter) {
        for (int64_t i = 0; i < n; i++) y[2 * i] = (float)x[i * M], y[2 * i + 1] = (float)x[i * M + 1];
        break;
      }
    }
    double *sw = x;
    x = ax, ax = sw;
    ok = orth(g, x, v0);
  }
  free(isd), free(v0), free(x), free(ax);
  return ok;
}

/* A rows x cols grid graph, 4-neighbour, weight of edge {u, v} 0.5 +
 * ((u + v) % 7) / 10 (symmetric), as the emulation's arrays and as nch
 * CSR chunks. */
static void grid(int rows, int cols, egraph *g, tsr_buf *c, int nch)
{
  int64_t n = (int64_t)rows * cols;
  g->n = n, g->ptr = malloc((size_t)(n + 1) * 8), g->adj = malloc((size_t)n * 4 * 4), g->w = malloc((size_t)n * 4 * 4);
  int64_t z = 0;
  g->ptr[0] = 0;
  for (int64_t v = 0; v < n; v++) {
    int r = (int)(v / cols), q = (int)(v % cols);
    int64_t nb[4] = {r > 0 ? v - cols : -1, q > 0 ? v - 1 : -1, q + 1 < cols ? v + 1 : -1, r + 1 < rows ? v + cols : -1};
    for (int k = 0; k < 4; k++)
      if (nb[k] >= 0) g->adj[z] = (int32_t)nb[k], g->w[z++] = 0.5f + (float)((v + nb[k]) % 7) / 10.0f;
    g->ptr[v + 1] = z;
  }
  for (int ch = 0; ch < nch; ch++) {
    int64_t r0 = n * ch / nch, r1 = n * (ch + 1) / nch, nnz = g->ptr[r1] - g->ptr[r0];
    int64_t bytes = tsr_k_csr_bytes(r1 - r0, nnz, TSR_F32);
    c[ch].meta = (tsr_meta){0};
    c[ch].meta.dtype = TSR_U8, c[ch].meta.ndim = 1, c[ch].meta.shape[0] = bytes;
    c[ch].data = aligned_alloc(64, (size_t)(bytes + 63) / 64 * 64), c[ch].nbytes = (size_t)bytes;
    tsr_k_csr v;
    tsr_k_csr_init(c[ch].data, r1 - r0, n, nnz, TSR_F32, &v);
    for (int64_t r = r0; r <= r1; r++) v.indptr[r - r0] = g->ptr[r] - g->ptr[r0];
    memcpy(v.indices, g->adj + g->ptr[r0], (size_t)nnz * 4), memcpy(v.values, g->w + g->ptr[r0], (size_t)nnz * 4);
  }
}

TEST(emulation_matches_cpu_op_on_a_grid)
{
  enum { R = 16, C = 20, NCH = 3 };
  egraph g;
  tsr_buf c[NCH];
  grid(R, C, &g, c, NCH);
  for (int64_t seed = 0; seed < 2; seed++) {
    tsr_params p = TSR_PARAMS_INIT;
    tsr_buf out;
    tsr_errbuf err;
    tsr_params_add_int(&p, "n", g.n);
    tsr_params_add_int(&p, "seed", seed);
    ASSERT_OK(tsr_op_run_cpu(tsr_op_find("umap_spectral"), &p, c, NCH, &out, &err));
    float *y = malloc((size_t)g.n * 8);
    ASSERT_TRUE(emulate(&g, (uint64_t)seed, 1000, y));
    const float *ref = out.data;
    for (int k = 0; k < 2; k++) {
      double d = 0, nr = 0;
      for (int64_t i = 0; i < g.n; i++) d += pow(y[2 * i + k] - ref[2 * i + k], 2), nr += pow(ref[2 * i + k], 2);
      fprintf(stderr, "  seed %d vector %d: |emulation - cpu| = %.2e (|cpu| = %.4f)\n", (int)seed, k, sqrt(d), sqrt(nr));
      ASSERT_NEAR(nr, 1.0, 1e-4);
      ASSERT_TRUE(sqrt(d) < 1e-6);
    }
    free(y), free(out.data);
    tsr_params_clear(&p);
  }
  for (int ch = 0; ch < NCH; ch++) free(c[ch].data);
  free(g.ptr), free(g.adj), free(g.w);
}

int main(void)
{
  tsr_ops_init(false);
  RUN(emulation_matches_cpu_op_on_a_grid);
  return kit_summary();
}
