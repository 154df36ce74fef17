/* kernels/cpu/umap_spectral.h — the small dense steps of umap_spectral
 * that the CPU op (umap_spectral.c), its CUDA variant
 * (kernels/cuda/umap_spectral.cu) and the variant's plain-C emulation
 * (tests/unit/test_umap_spectral_par.c) share, so the three make the same
 * decisions on the same m x m matrices.
 *
 * The GPU scheme (docs/umap.md, "umap_spectral on the GPU") is the CPU
 * op's subspace iteration with two things changed: the block is stored
 * row-major (row i's m values together: one 64-byte gather per edge), and
 * the orthonormalization is two passes of projected Cholesky-QR instead of
 * modified Gram-Schmidt twice. In exact arithmetic both give the same Q
 * (the QR factor with a positive diagonal), so the iterates, the Ritz
 * steps and the stopping test are the CPU op's up to rounding.
 *
 * Projected Cholesky-QR of a block X (n x m) against the unit vector v0:
 * with c = v0ᵀX and Y = X - v0 cᵀ, YᵀY = XᵀX - (2 - v0ᵀv0) c cᵀ = RᵀR;
 * X <- Y R⁻¹. One pass needs only the Gram sums (v0ᵀv0, v0ᵀX, XᵀX: one
 * reduction) and a row-local update. */
#ifndef TSR_KERNELS_CPU_UMAP_SPECTRAL_H
#define TSR_KERNELS_CPU_UMAP_SPECTRAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../philox.h"

#define TSR_SPEC_BLOCK 8
/* Sums of one orthonormalization pass: v0ᵀv0, v0ᵀx_k (m), x_iᵀx_j (i <= j). */
#define TSR_SPEC_NORTH (1 + TSR_SPEC_BLOCK + TSR_SPEC_BLOCK * (TSR_SPEC_BLOCK + 1) / 2)
/* The residual threshold of the two wanted Ritz pairs (umap's eigsh tol). */
#define TSR_SPEC_TOL 1e-4

/* Eigen-decomposition of the symmetric m x m h by cyclic Jacobi: values
 * in ev, vectors as columns of q (row-major), sorted by decreasing value. */
static inline TSR_HOSTDEV void tsr_spec_jacobi(int m, double *h, double *ev, double *q)
{
  for (int i = 0; i < m * m; i++) q[i] = i % (m + 1) == 0;
  for (int sweep = 0; sweep < 100; sweep++) {
    double off = 0;
    for (int i = 0; i < m; i++)
      for (int j = i + 1; j < m; j++) off += h[i * m + j] * h[i * m + j];
    if (off < 1e-30) break;
    for (int p = 0; p < m; p++)
      for (int r = p + 1; r < m; r++) {
        if (fabs(h[p * m + r]) < 1e-300) continue;
        double th = (h[r * m + r] - h[p * m + p]) / (2 * h[p * m + r]);
        double t = (th >= 0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1)), c = 1 / sqrt(t * t + 1), sn = t * c;
        for (int k = 0; k < m; k++) {  /* h = J^T h J */
          double a = h[k * m + p], b = h[k * m + r];
          h[k * m + p] = c * a - sn * b, h[k * m + r] = sn * a + c * b;
        }
        for (int k = 0; k < m; k++) {
          double a = h[p * m + k], b = h[r * m + k];
          h[p * m + k] = c * a - sn * b, h[r * m + k] = sn * a + c * b;
        }
        for (int k = 0; k < m; k++) {
          double a = q[k * m + p], b = q[k * m + r];
          q[k * m + p] = c * a - sn * b, q[k * m + r] = sn * a + c * b;
        }
      }
  }
  int order[TSR_SPEC_BLOCK];
  for (int i = 0; i < m; i++) order[i] = i;
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && h[order[j] * m + order[j]] > h[order[j - 1] * m + order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  double qs[TSR_SPEC_BLOCK * TSR_SPEC_BLOCK];
  for (int i = 0; i < m; i++) {
    ev[i] = h[order[i] * m + order[i]];
    for (int k = 0; k < m; k++) qs[k * m + i] = q[k * m + order[i]];
  }
  for (int i = 0; i < m * m; i++) q[i] = qs[i];
}

/* Index of the sum x_iᵀx_j (i <= j) among a pass's TSR_SPEC_NORTH sums. */
static inline TSR_HOSTDEV int tsr_spec_pair(int i, int j)
{
  return 1 + TSR_SPEC_BLOCK + i * TSR_SPEC_BLOCK - i * (i - 1) / 2 + (j - i);
}

/* From one pass's sums g (TSR_SPEC_NORTH values, m = TSR_SPEC_BLOCK): c =
 * v0ᵀX and T = R⁻¹ (upper, row-major m x m) with RᵀR the projected Gram
 * matrix. False when a pivot is not positive (the block lost rank: the
 * CPU op would draw a fresh column there). */
static inline TSR_HOSTDEV bool tsr_spec_cholqr(const double *g, double *c, double *t)
{
  enum { M = TSR_SPEC_BLOCK };
  double a[M * M], r[M * M];
  double f = 2 - g[0];
  for (int k = 0; k < M; k++) c[k] = g[1 + k];
  for (int i = 0; i < M; i++)
    for (int j = i; j < M; j++) a[i * M + j] = a[j * M + i] = g[tsr_spec_pair(i, j)] - f * c[i] * c[j];
  for (int i = 0; i < M * M; i++) r[i] = 0, t[i] = 0;
  for (int j = 0; j < M; j++) {
    double d = a[j * M + j];
    for (int k = 0; k < j; k++) d -= r[k * M + j] * r[k * M + j];
    if (!(d > 1e-280) || !(d < INFINITY)) return false;
    r[j * M + j] = sqrt(d);
    for (int i = j + 1; i < M; i++) {
      double s = a[j * M + i];
      for (int k = 0; k < j; k++) s -= r[k * M + j] * r[k * M + i];
      r[j * M + i] = s / r[j * M + j];
    }
  }
  for (int j = 0; j < M; j++) {  /* column j of R⁻¹: R t_j = e_j, back substitution */
    for (int i = j; i >= 0; i--) {
      double s = i == j ? 1.0 : 0.0;
      for (int k = i + 1; k <= j; k++) s -= r[i * M + k] * t[k * M + j];
      t[i * M + j] = s / r[i * M + i];
    }
  }
  return true;
}

/* One row of a pass: x (m values) <- (x - v c) T. */
static inline TSR_HOSTDEV void tsr_spec_orth_row(double *x, double v, const double *c, const double *t)
{
  enum { M = TSR_SPEC_BLOCK };
  double y[M];
  for (int k = 0; k < M; k++) y[k] = x[k] - v * c[k];
  for (int j = 0; j < M; j++) {
    double s = 0;
    for (int k = 0; k <= j; k++) s += y[k] * t[k * M + j];
    x[j] = s;
  }
}

/* One row of the Ritz rotation: x <- x Q (Q row-major m x m). */
static inline TSR_HOSTDEV void tsr_spec_rotate_row(double *x, const double *q)
{
  enum { M = TSR_SPEC_BLOCK };
  double y[M];
  for (int k = 0; k < M; k++) {
    double s = 0;
    for (int j = 0; j < M; j++) s += x[j] * q[j * M + k];
    y[k] = s;
  }
  for (int k = 0; k < M; k++) x[k] = y[k];
}

/* The start block's entry (vector k, vertex i): the CPU op's draw. */
static inline TSR_HOSTDEV double tsr_spec_start(uint64_t seed, int k, int64_t n, int64_t i)
{
  uint32_t w[4];
  tsr_philox_block(seed, (uint64_t)k * (uint64_t)n + (uint64_t)i, w);
  return tsr_normal_f64(w);
}

#endif
