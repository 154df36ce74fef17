/* kernels/cpu/umap_spectral.c — umap_spectral: umap's spectral_layout, the
 * eigenvectors of the 2nd and 3rd smallest eigenvalues of the normalized
 * Laplacian L = I - D^-1/2 W D^-1/2 of the connectivities W.
 *
 * inputs: the graph's CSR row chunks (f32, n x n). params: `n`, `seed`
 * (the start block), `max_iter` (default 1000). Output f32 [n, 2].
 *
 * Method: the smallest eigenvalues of L are the largest of
 * A = (I + D^-1/2 W D^-1/2) / 2 (spectrum in [0, 1]), whose top
 * eigenvector D^1/2 1 is known and projected out. Subspace iteration on a
 * block of 8 vectors with a Rayleigh-Ritz step every 10 iterations, until
 * the two wanted Ritz pairs have residual ||A v - θ v|| < 1e-4 (umap's
 * eigsh tolerance) or max_iter. Deterministic: a fixed order of every sum.
 * A graph of several components has more than one zero eigenvalue of L:
 * the result then places whole components apart (umap would lay out each
 * component separately); the SGD spreads them afterwards.
 * CUDA variant: kernels/cuda/umap_spectral.cu (the same iteration with
 * Cholesky-QR; umap_spectral.h). */
#include <stdlib.h>

#include "csr.h"
#include "ops.h"
#include "umap.h"
#include "umap_spectral.h"

#define BLOCK TSR_SPEC_BLOCK


typedef struct spec {
  int64_t n;
  int chunks;
  const tsr_k_csr *v;
  double *isd;   /* D^-1/2 (0 for an isolated vertex) */
  double *v0;    /* D^1/2 1, unit */
} spec;

/* out = A x for one vector. */
static void spec_apply(const spec *s, const double *x, double *out)
{
  int64_t j = 0;
  for (int c = 0; c < s->chunks; c++)
    for (int64_t r = 0; r < s->v[c].rows; r++, j++) {
      double acc = 0;
      const float *w = s->v[c].values;
      for (int64_t i = s->v[c].indptr[r]; i < s->v[c].indptr[r + 1]; i++)
        acc += (double)w[i] * s->isd[s->v[c].indices[i]] * x[s->v[c].indices[i]];
      out[j] = 0.5 * (x[j] + s->isd[j] * acc);
    }
}

static double dot(const double *a, const double *b, int64_t n)
{
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* Orthonormalizes the m columns (vectors of n) against v0 and each other
 * (modified Gram-Schmidt, twice); a vanished column gets a fresh
 * direction from the seed. */
static void spec_orth(const spec *s, double *x, int m, uint64_t seed, int salt)
{
  for (int k = 0; k < m; k++) {
    double *xk = x + (size_t)k * s->n;
    for (int pass = 0; pass < 2; pass++) {
      double d = dot(xk, s->v0, s->n);
      for (int64_t i = 0; i < s->n; i++) xk[i] -= d * s->v0[i];
      for (int q = 0; q < k; q++) {
        const double *xq = x + (size_t)q * s->n;
        d = dot(xk, xq, s->n);
        for (int64_t i = 0; i < s->n; i++) xk[i] -= d * xq[i];
      }
    }
    double nrm = sqrt(dot(xk, xk, s->n));
    if (nrm < 1e-300) {
      for (int64_t i = 0; i < s->n; i++) {
        uint32_t w[4];
        tsr_philox_block(seed, ((uint64_t)salt * BLOCK + (uint64_t)k) * (uint64_t)s->n + (uint64_t)i, w);
        xk[i] = tsr_normal_f64(w);
      }
      k--;  /* orthogonalize the fresh one */
      salt++;
      continue;
    }
    for (int64_t i = 0; i < s->n; i++) xk[i] /= nrm;
  }
}

/* Rayleigh-Ritz: x <- x Q with Q the eigenvectors of xᵀ A x (ax = A x on
 * entry, rotated too); returns the largest residual of the first 2 pairs. */
static double spec_ritz(const spec *s, double *x, double *ax, int m, double *tmp)
{
  double h[BLOCK * BLOCK], q[BLOCK * BLOCK], ev[BLOCK];
  for (int i = 0; i < m; i++)
    for (int j = 0; j < m; j++) h[i * m + j] = 0.5 * (dot(x + (size_t)i * s->n, ax + (size_t)j * s->n, s->n) +
                                                   dot(x + (size_t)j * s->n, ax + (size_t)i * s->n, s->n));
  tsr_spec_jacobi(m, h, ev, q);
  double *bufs[2] = {x, ax};
  for (int b = 0; b < 2; b++)
    for (int64_t i = 0; i < s->n; i++) {
      for (int k = 0; k < m; k++) {
        double acc = 0;
        for (int j = 0; j < m; j++) acc += bufs[b][(size_t)j * s->n + i] * q[j * m + k];
        tmp[k] = acc;
      }
      for (int k = 0; k < m; k++) bufs[b][(size_t)k * s->n + i] = tmp[k];
    }
  double worst = 0;
  for (int k = 0; k < 2 && k < m; k++) {
    double r = 0;
    for (int64_t i = 0; i < s->n; i++) {
      double d = ax[(size_t)k * s->n + i] - ev[k] * x[(size_t)k * s->n + i];
      r += d * d;
    }
    worst = fmax(worst, sqrt(r));
  }
  return worst;
}

static int spec_params(const tsr_params *p, int64_t *n, int64_t *seed, int64_t *max_iter, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, "n", n, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "seed", 0, seed, err);
  if (rc == 0) rc = tsr_params_opt_int(p, "max_iter", 1000, max_iter, err);
  if (rc != 0) return tsr_k_param_fail("umap_spectral", rc, err);
  if (*n < 3 || *n > INT32_MAX || *max_iter < 1)
    return tsr_fail(err, TSR_EINVAL, "umap_spectral: n = %lld (at least 3 vertices) or max_iter = %lld out of range",
                    (long long)*n, (long long)*max_iter);
  return 0;
}

static int spec_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  int64_t n, seed, it;
  int rc = spec_params(p, &n, &seed, &it, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n_in; i++)
    if (in[i].dtype != TSR_U8 || in[i].ndim != 1)
      return tsr_fail(err, TSR_ESHAPE, "umap_spectral: input %d must be a CSR chunk (1-D u8), got %s", i, tsr_k_str(&in[i]).s);
  int64_t shape[2] = {n, 2};
  tsr_k_meta_set(out, TSR_F32, 2, shape);
  return 0;
}

/* Degrees, D^-1/2 and the known top vector. */
static void spec_degrees(spec *s)
{
  int64_t j = 0;
  double nrm = 0;
  for (int c = 0; c < s->chunks; c++)
    for (int64_t r = 0; r < s->v[c].rows; r++, j++) {
      double d = 0;
      for (int64_t i = s->v[c].indptr[r]; i < s->v[c].indptr[r + 1]; i++) d += ((const float *)s->v[c].values)[i];
      s->isd[j] = d > 0 ? 1 / sqrt(d) : 0.0;
      s->v0[j] = sqrt(d);
      nrm += d;
    }
  for (j = 0; j < s->n; j++) s->v0[j] = nrm > 0 ? s->v0[j] / sqrt(nrm) : 1 / sqrt((double)s->n);
}

static void spec_iterate(const spec *s, double *x, double *ax, int m, int64_t seed, int64_t max_iter, double *tmp)
{
  for (int k = 0; k < m; k++)
    for (int64_t i = 0; i < s->n; i++) x[(size_t)k * s->n + i] = tsr_spec_start((uint64_t)seed, k, s->n, i);
  spec_orth(s, x, m, (uint64_t)seed, 1);
  for (int64_t it = 1; it <= max_iter; it++) {
    for (int k = 0; k < m; k++) spec_apply(s, x + (size_t)k * s->n, ax + (size_t)k * s->n);
    if ((it % 10 == 0 || it == max_iter) && (spec_ritz(s, x, ax, m, tmp) < 1e-4 || it == max_iter)) return;
    memcpy(x, ax, sizeof(double) * (size_t)m * (size_t)s->n);
    spec_orth(s, x, m, (uint64_t)seed, (int)(it + 1));
  }
}

static int spec_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  int64_t n, seed, max_iter;
  int rc = spec_params(p, &n, &seed, &max_iter, err);
  if (rc != 0) return rc;
  int m = n - 1 < BLOCK ? (int)n - 1 : BLOCK;
  tsr_k_csr *v = malloc((size_t)n_in * sizeof *v);
  double *isd = malloc((size_t)n * sizeof(double) * 2), *x = malloc((size_t)n * (size_t)m * sizeof(double) * 2);
  if (v == NULL || isd == NULL || x == NULL) rc = tsr_fail(err, TSR_ENOMEM, "umap_spectral: out of memory for %lld vertices", (long long)n);
  if (rc == 0) rc = tsr_k_umap_graph("umap_spectral", in, n_in, n, v, err);
  if (rc == 0) {
    spec s = {n, n_in, v, isd, isd + n};
    double tmp[BLOCK];
    spec_degrees(&s);
    spec_iterate(&s, x, x + (size_t)n * (size_t)m, m, seed, max_iter, tmp);
    float *y = out->data;
    for (int64_t i = 0; i < n; i++) y[2 * i] = (float)x[i], y[2 * i + 1] = (float)x[(size_t)n + i];
  }
  free(v), free(isd), free(x);
  return rc;
}

const tsr_op_def tsr_op_umap_spectral = {"umap_spectral", 1, -1, spec_infer, spec_cpu, false, NULL};
