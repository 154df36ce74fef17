/* Chunked arrays and linear algebra on real daemons, checked against
 * BLAS/LAPACK on the same input (tolerances 1e-10 for f64, 1e-4 for f32):
 * chunking independence of random arrays, elementwise ops and reductions,
 * matmul (plain, integer, fused random), rechunk/slice/concatenate, TSQR,
 * exact SVD, randomized SVD on a known decaying spectrum, odd shapes. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/linalg.h"

static cluster c;
static tsr_client *client;
static char tmpdir[128];

/* ---------- helpers ---------- */

static double *fetch(tsr_array_ctx *ctx, const tsr_array *a)
{
  size_t n = (size_t)tsr_array_size(a);
  double *out = malloc((n ? n : 1) * sizeof *out);
  int rc = tsr_compute(ctx, a, out, n * sizeof *out, 60000);
  if (rc != 0) {
    fprintf(stderr, "  compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
    free(out);
    return NULL;
  }
  return out;
}

static float *fetch_f32(tsr_array_ctx *ctx, const tsr_array *a)
{
  size_t n = (size_t)tsr_array_size(a);
  float *out = malloc((n ? n : 1) * sizeof *out);
  if (tsr_compute(ctx, a, out, n * sizeof *out, 60000) != 0) {
    free(out);
    return NULL;
  }
  return out;
}

/* Writes a row-major f64 matrix as .npy; returns the path (static ring). */
static const char *write_npy(const double *data, int64_t rows, int64_t cols)
{
  static char paths[8][256];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, 256, "%s/m%d.npy", tmpdir, next);
  FILE *f = fopen(path, "wb");
  char dict[128];
  int len = snprintf(dict, sizeof dict, "{'descr': '<f8', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
  int pad = (64 - (10 + len + 1) % 64) % 64;
  unsigned short hl = (unsigned short)(len + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(hl & 0xff, f);
  fputc(hl >> 8, f);
  fwrite(dict, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, sizeof(double), (size_t)(rows * cols), f);
  fclose(f);
  return path;
}

static double *local_random(int64_t n, unsigned seed)
{
  double *m = malloc((size_t)n * sizeof *m);
  srand(seed);
  for (int64_t i = 0; i < n; i++) m[i] = (double)rand() / RAND_MAX - 0.5;
  return m;
}

static double max_rel_diff(const double *a, const double *b, size_t n)
{
  double worst = 0, scale = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / (scale > 0 ? scale : 1));
  return worst;
}

/* ||Q^T Q - I||_max for an m x n row-major Q. */
static double orthogonality(const double *q, int64_t m, int64_t n)
{
  double *g = calloc((size_t)(n * n), sizeof *g);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)n, (int)m, 1.0, q, (int)n, q, (int)n, 0.0, g, (int)n);
  double worst = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs(g[i * n + j] - (i == j)));
  free(g);
  return worst;
}

static double *lapack_svals(const double *a, int64_t m, int64_t n)
{
  int64_t mn = m < n ? m : n;
  double *copy = malloc((size_t)(m * n) * sizeof *copy), *s = malloc((size_t)mn * sizeof *s);
  double *superb = malloc((size_t)mn * sizeof *superb);
  memcpy(copy, a, (size_t)(m * n) * sizeof *copy);
  LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', (int)m, (int)n, copy, (int)n, s, NULL, 1, NULL, 1, superb);
  free(copy);
  free(superb);
  return s;
}

/* ---------- tests ---------- */

TEST(random_arrays_do_not_depend_on_chunking)
{
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  int64_t shape[2] = {700, 300}, ch1[2] = {128, 100}, ch2[2] = {700, 300}, ch3[2] = {333, 77};
  tsr_dtype dtypes[] = {TSR_F64, TSR_F32};
  for (int d = 0; d < 2; d++) {
    tsr_array *a = NULL, *b = NULL, *n1 = NULL, *n2 = NULL;
    ASSERT_OK(tsr_random_uniform(ctx, 99, dtypes[d], 2, shape, ch1, &a));
    ASSERT_OK(tsr_random_uniform(ctx, 99, dtypes[d], 2, shape, ch2, &b));
    ASSERT_OK(tsr_random_normal(ctx, 5, dtypes[d], 2, shape, ch1, &n1));
    ASSERT_OK(tsr_random_normal(ctx, 5, dtypes[d], 2, shape, ch3, &n2));
    size_t bytes = (size_t)(700 * 300) * tsr_dtype_size(dtypes[d]);
    char *x = malloc(bytes), *y = malloc(bytes), *z = malloc(bytes), *w = malloc(bytes);
    ASSERT_OK(tsr_compute(ctx, a, x, bytes, 60000));
    ASSERT_OK(tsr_compute(ctx, b, y, bytes, 60000));
    ASSERT_OK(tsr_compute(ctx, n1, z, bytes, 60000));
    ASSERT_OK(tsr_compute(ctx, n2, w, bytes, 60000));
    ASSERT_EQ(memcmp(x, y, bytes), 0);
    ASSERT_EQ(memcmp(z, w, bytes), 0);
    ASSERT_NE(memcmp(x, z, bytes), 0);
    free(x), free(y), free(z), free(w);
  }
  tsr_array *r1 = NULL, *r2 = NULL;
  ASSERT_OK(tsr_randint(ctx, 7, 0, 3, TSR_U8, 2, shape, ch1, &r1));
  ASSERT_OK(tsr_randint(ctx, 7, 0, 3, TSR_U8, 2, shape, ch3, &r2));
  unsigned char *p = malloc(700 * 300), *q = malloc(700 * 300);
  ASSERT_OK(tsr_compute(ctx, r1, p, 700 * 300, 60000));
  ASSERT_OK(tsr_compute(ctx, r2, q, 700 * 300, 60000));
  ASSERT_EQ(memcmp(p, q, 700 * 300), 0);
  int counts[4] = {0};
  for (int i = 0; i < 700 * 300; i++) counts[p[i] < 4 ? p[i] : 3]++;
  ASSERT_EQ(counts[3], 0);
  ASSERT_TRUE(counts[0] > 60000 && counts[1] > 60000 && counts[2] > 60000);
  free(p), free(q);
  tsr_array_ctx_destroy(&ctx);
}

TEST(elementwise_reductions_and_reshapes_match_local)
{
  const int64_t m = 257, n = 131;
  double *a = local_random(m * n, 1), *b = local_random(m * n, 2);
  const char *pa = write_npy(a, m, n), *pb = write_npy(b, m, n);
  tsr_array_ctx *ctx = NULL;
  tsr_array *A = NULL, *B = NULL, *S = NULL, *D = NULL, *P = NULL, *Q = NULL, *sc = NULL;
  tsr_array *s0 = NULL, *s1 = NULL, *st = NULL, *mean0 = NULL, *re = NULL, *sl = NULL, *cat = NULL;
  int64_t chA[2] = {64, 40}, chB[2] = {100, 131}, reck[2] = {50, 17};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_npy(ctx, pa, chA, &A));
  ASSERT_OK(tsr_from_npy(ctx, pb, chB, &B));
  ASSERT_OK(tsr_add(ctx, A, B, &S));
  ASSERT_OK(tsr_sub(ctx, A, B, &D));
  ASSERT_OK(tsr_mul(ctx, A, B, &P));
  ASSERT_OK(tsr_div(ctx, A, B, &Q));
  ASSERT_OK(tsr_scale(ctx, A, 3.0, -1.0, &sc));
  ASSERT_OK(tsr_sum(ctx, A, 0, 3, &s0));
  ASSERT_OK(tsr_sum(ctx, A, 1, 0, &s1));
  ASSERT_OK(tsr_sum(ctx, A, -1, 2, &st));
  ASSERT_OK(tsr_mean(ctx, A, 0, 0, &mean0));
  ASSERT_OK(tsr_rechunk(ctx, A, reck, &re));
  int64_t start[2] = {13, 7}, stop[2] = {200, 120};
  ASSERT_OK(tsr_slice(ctx, A, start, stop, &sl));
  const tsr_array *parts[2] = {A, B};
  ASSERT_OK(tsr_concatenate(ctx, parts, 2, 1, &cat));
  double *x;
  double *want = malloc((size_t)(m * 2 * n) * sizeof *want);
  for (int k = 0; k < 5; k++) {
    const tsr_array *arr[] = {S, D, P, Q, sc};
    for (int64_t i = 0; i < m * n; i++)
      want[i] = k == 0 ? a[i] + b[i] : k == 1 ? a[i] - b[i] : k == 2 ? a[i] * b[i] : k == 3 ? a[i] / b[i] : a[i] * 3 - 1;
    ASSERT_TRUE((x = fetch(ctx, arr[k])) != NULL);
    ASSERT_TRUE(max_rel_diff(x, want, (size_t)(m * n)) <= 1e-15);
    free(x);
  }
  double total = 0;
  for (int64_t j = 0; j < n; j++) {
    want[j] = 0;
    for (int64_t i = 0; i < m; i++) want[j] += a[i * n + j];
    total += want[j];
  }
  ASSERT_TRUE((x = fetch(ctx, s0)) != NULL);
  ASSERT_TRUE(max_rel_diff(x, want, (size_t)n) <= 1e-12);
  free(x);
  ASSERT_TRUE((x = fetch(ctx, mean0)) != NULL);
  ASSERT_NEAR(x[5], want[5] / m, 1e-12);
  free(x);
  ASSERT_TRUE((x = fetch(ctx, st)) != NULL);
  ASSERT_NEAR(x[0], total, 1e-10);
  free(x);
  for (int64_t i = 0; i < m; i++) {
    want[i] = 0;
    for (int64_t j = 0; j < n; j++) want[i] += a[i * n + j];
  }
  ASSERT_TRUE((x = fetch(ctx, s1)) != NULL);
  ASSERT_TRUE(max_rel_diff(x, want, (size_t)m) <= 1e-12);
  free(x);
  ASSERT_TRUE((x = fetch(ctx, re)) != NULL);
  ASSERT_EQ(memcmp(x, a, (size_t)(m * n) * sizeof *x), 0);
  free(x);
  ASSERT_EQ(tsr_array_nchunks(re, 0), 6);
  ASSERT_TRUE((x = fetch(ctx, sl)) != NULL);
  for (int64_t i = 13; i < 200; i++)
    for (int64_t j = 7; j < 120; j++) ASSERT_TRUE(x[(i - 13) * 113 + (j - 7)] == a[i * n + j]);
  free(x);
  ASSERT_TRUE((x = fetch(ctx, cat)) != NULL);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < 2 * n; j++) ASSERT_TRUE(x[i * 2 * n + j] == (j < n ? a[i * n + j] : b[i * n + j - n]));
  free(x);
  free(want), free(a), free(b);
  tsr_array_ctx_destroy(&ctx);
}

TEST(matmul_matches_blas_plain_integer_and_fused_random)
{
  const int64_t m = 301, k = 203, n = 71;
  double *a = local_random(m * k, 3), *b = local_random(k * n, 4), *want = malloc((size_t)(m * n) * sizeof *want);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0, a, (int)k, b, (int)n, 0.0, want,
              (int)n);
  tsr_array_ctx *ctx = NULL;
  tsr_array *A = NULL, *B = NULL, *C = NULL, *X = NULL, *XB = NULL, *XT = NULL, *XTA = NULL, *G = NULL, *GB = NULL;
  int64_t chA[2] = {64, 50}, chB[2] = {60, 30};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_npy(ctx, write_npy(a, m, k), chA, &A));
  ASSERT_OK(tsr_from_npy(ctx, write_npy(b, k, n), chB, &B));   /* B rechunked to A's column chunks */
  ASSERT_OK(tsr_matmul(ctx, A, B, &C));
  double *x = fetch(ctx, C);
  ASSERT_TRUE(x != NULL);
  ASSERT_TRUE(max_rel_diff(x, want, (size_t)(m * n)) <= 1e-12);
  free(x);
  /* A random X is generated inside the product; compare with X gathered. */
  int64_t xshape[2] = {m, k};
  ASSERT_OK(tsr_random_uniform(ctx, 17, TSR_F64, 2, xshape, chA, &X));
  ASSERT_OK(tsr_matmul(ctx, X, B, &XB));
  ASSERT_OK(tsr_transpose(ctx, X, &XT));
  ASSERT_OK(tsr_matmul(ctx, XT, A, &XTA));
  double *xv = fetch(ctx, X), *xb = fetch(ctx, XB), *xta = fetch(ctx, XTA);
  ASSERT_TRUE(xv && xb && xta);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0, xv, (int)k, b, (int)n, 0.0, want,
              (int)n);
  ASSERT_TRUE(max_rel_diff(xb, want, (size_t)(m * n)) <= 1e-12);
  double *want2 = malloc((size_t)(k * k) * sizeof *want2);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)k, (int)m, 1.0, xv, (int)k, a, (int)k, 0.0, want2,
              (int)k);
  ASSERT_TRUE(max_rel_diff(xta, want2, (size_t)(k * k)) <= 1e-12);
  free(xv), free(xb), free(xta), free(want2);
  /* Genotype-like u8 times f64, no float copy of G. */
  ASSERT_OK(tsr_randint(ctx, 8, 0, 3, TSR_U8, 2, xshape, chA, &G));
  ASSERT_OK(tsr_matmul(ctx, G, B, &GB));
  unsigned char *g = malloc((size_t)(m * k));
  ASSERT_OK(tsr_compute(ctx, G, g, (size_t)(m * k), 60000));
  double *gd = malloc((size_t)(m * k) * sizeof *gd);
  for (int64_t i = 0; i < m * k; i++) gd[i] = g[i];
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0, gd, (int)k, b, (int)n, 0.0, want,
              (int)n);
  ASSERT_TRUE((x = fetch(ctx, GB)) != NULL);
  ASSERT_TRUE(max_rel_diff(x, want, (size_t)(m * n)) <= 1e-12);
  free(x), free(g), free(gd);
  /* Shape errors are clear. */
  tsr_array *bad = NULL;
  ASSERT_EQ(tsr_matmul(ctx, A, A, &bad), TSR_ESHAPE);
  ASSERT_CONTAINS(tsr_errmsg(), "inner dimensions");
  free(a), free(b), free(want);
  tsr_array_ctx_destroy(&ctx);
}

/* TSQR: Q orthonormal, Q R = A, for several chunkings incl. blocks with
 * fewer rows than columns and a tree of more than one level. */
TEST(tsqr_is_orthonormal_and_reconstructs)
{
  const int64_t m = 2000, n = 30;
  double *a = local_random(m * n, 5);
  const char *path = write_npy(a, m, n);
  int64_t row_chunks[] = {2000, 333, 100, 20};
  for (size_t t = 0; t < sizeof row_chunks / sizeof row_chunks[0]; t++) {
    tsr_array_ctx *ctx = NULL;
    tsr_array *A = NULL, *Q = NULL, *R = NULL;
    int64_t ch[2] = {row_chunks[t], n};
    ASSERT_OK(tsr_array_ctx_new(client, &ctx));
    ASSERT_OK(tsr_from_npy(ctx, path, ch, &A));
    ASSERT_OK(tsr_tsqr(ctx, A, &Q, &R));
    double *q = fetch(ctx, Q), *r = fetch(ctx, R);
    ASSERT_TRUE(q && r);
    ASSERT_TRUE(orthogonality(q, m, n) <= 1e-12);
    double *qr = malloc((size_t)(m * n) * sizeof *qr);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)n, 1.0, q, (int)n, r, (int)n, 0.0, qr, (int)n);
    double err = max_rel_diff(qr, a, (size_t)(m * n));
    if (err > 1e-12) fprintf(stderr, "  chunk %lld: |QR - A| = %g\n", (long long)row_chunks[t], err);
    ASSERT_TRUE(err <= 1e-12);
    free(q), free(r), free(qr);
    tsr_array_ctx_destroy(&ctx);
  }
  free(a);
}

TEST(exact_svd_matches_lapack_f64_and_f32)
{
  const int64_t m = 1500, n = 40;
  double *a = local_random(m * n, 6);
  double *sref = lapack_svals(a, m, n);
  tsr_array_ctx *ctx = NULL;
  tsr_array *A = NULL, *U = NULL, *S = NULL, *V = NULL, *A32 = NULL, *U2 = NULL, *S2 = NULL, *V2 = NULL;
  int64_t ch[2] = {256, 16};   /* several column chunks: rechunked inside */
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_npy(ctx, write_npy(a, m, n), ch, &A));
  ASSERT_OK(tsr_svd_tall_skinny(ctx, A, &U, &S, &V));
  double *s = fetch(ctx, S), *u = fetch(ctx, U), *v = fetch(ctx, V);
  ASSERT_TRUE(s && u && v);
  ASSERT_TRUE(max_rel_diff(s, sref, (size_t)n) <= 1e-10);
  ASSERT_TRUE(orthogonality(u, m, n) <= 1e-10);
  /* U S V reconstructs A. */
  double worst = 0;
  for (int64_t i = 0; i < m; i += 7)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t t = 0; t < n; t++) acc += u[i * n + t] * s[t] * v[t * n + j];
      worst = fmax(worst, fabs(acc - a[i * n + j]));
    }
  ASSERT_TRUE(worst <= 1e-10);
  ASSERT_OK(tsr_astype(ctx, A, TSR_F32, &A32));
  ASSERT_OK(tsr_svd_tall_skinny(ctx, A32, &U2, &S2, &V2));
  ASSERT_EQ(tsr_array_dtype(S2), TSR_F32);
  float *s32 = fetch_f32(ctx, S2);
  ASSERT_TRUE(s32 != NULL);
  for (int64_t i = 0; i < n; i++) ASSERT_NEAR(s32[i], sref[i], 1e-4);
  free(s32), free(s), free(u), free(v), free(sref), free(a);
  tsr_array_ctx_destroy(&ctx);
}

/* A = U diag(sigma) V^T with sigma_i = 0.7^i: the randomized SVD's error
 * must respect the Halko-Martinsson-Tropp bound and shrink with power
 * iterations. */
TEST(randomized_svd_on_a_decaying_spectrum)
{
  const int64_t m = 1200, n = 300;
  const int k = 10;
  double *g1 = local_random(m * n, 7), *g2 = local_random(n * n, 8), *tau = malloc((size_t)n * sizeof *tau);
  LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (int)m, (int)n, g1, (int)n, tau);
  LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (int)m, (int)n, (int)n, g1, (int)n, tau);
  LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (int)n, (int)n, g2, (int)n, tau);
  LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (int)n, (int)n, (int)n, g2, (int)n, tau);
  double *sigma = malloc((size_t)n * sizeof *sigma), *a = malloc((size_t)(m * n) * sizeof *a);
  for (int64_t i = 0; i < n; i++) {
    sigma[i] = pow(0.7, (double)i);
    for (int64_t r = 0; r < m; r++) g1[r * n + i] *= sigma[i];
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)n, 1.0, g1, (int)n, g2, (int)n, 0.0, a, (int)n);
  const char *path = write_npy(a, m, n);
  double err_q[2];
  int qs[2] = {0, 2};
  for (int t = 0; t < 2; t++) {
    tsr_array_ctx *ctx = NULL;
    tsr_array *A = NULL, *U = NULL, *S = NULL, *V = NULL;
    int64_t ch[2] = {250, 128};
    tsr_svd_opts o = TSR_SVD_OPTS_DEFAULT;
    o.n_power_iter = qs[t];
    o.n_oversamples = 2;   /* small oversampling so the power iterations show */
    ASSERT_OK(tsr_array_ctx_new(client, &ctx));
    ASSERT_OK(tsr_from_npy(ctx, path, ch, &A));
    ASSERT_OK(tsr_svd_compressed(ctx, A, k, &o, &U, &S, &V));
    ASSERT_EQ(tsr_array_dim(U, 1), k);
    ASSERT_EQ(tsr_array_dim(V, 0), k);
    double *s = fetch(ctx, S), *v = fetch(ctx, V);
    ASSERT_TRUE(s && v);
    err_q[t] = 0;
    for (int i = 0; i < k; i++) {
      err_q[t] = fmax(err_q[t], fabs(s[i] - sigma[i]) / sigma[0]);
      ASSERT_TRUE(s[i] <= sigma[i] * (1 + 1e-10));   /* never above the truth */
    }
    /* Bound on each value: sigma_i - s_i <= (1 + 9 sqrt(l min(m,n))) sigma_{l+1} (loose but published). */
    double bound = (1 + 9 * sqrt(20.0 * n)) * sigma[20];
    ASSERT_TRUE(err_q[t] * sigma[0] <= bound);
    /* Dask's sign convention: every row of v sums to >= 0. */
    for (int i = 0; i < k; i++) {
      double row = 0;
      for (int64_t j = 0; j < n; j++) row += v[i * n + j];
      ASSERT_TRUE(row >= 0);
    }
    free(s), free(v);
    tsr_array_ctx_destroy(&ctx);
  }
  fprintf(stderr, "  singular value error: q=0 %.3e, q=2 %.3e\n", err_q[0], err_q[1]);
  ASSERT_TRUE(err_q[1] < err_q[0]);
  ASSERT_TRUE(err_q[1] <= 1e-8);
  free(g1), free(g2), free(tau), free(sigma), free(a);
}

TEST(odd_shapes_and_clear_errors)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *A = NULL, *Q = NULL, *R = NULL, *U = NULL, *S = NULL, *V = NULL, *one = NULL, *tot = NULL;
  int64_t fat[2] = {100, 400}, ch[2] = {30, 400};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_random_uniform(ctx, 1, TSR_F64, 2, fat, ch, &A));
  ASSERT_EQ(tsr_tsqr(ctx, A, &Q, &R), TSR_ESHAPE);
  ASSERT_CONTAINS(tsr_errmsg(), "short and fat");
  ASSERT_EQ(tsr_svd_tall_skinny(ctx, A, &U, &S, &V), TSR_ESHAPE);
  /* The randomized SVD handles short-and-fat input. */
  ASSERT_OK(tsr_svd_compressed(ctx, A, 5, NULL, &U, &S, &V));
  double *s = fetch(ctx, S);
  ASSERT_TRUE(s != NULL);
  ASSERT_TRUE(s[0] > s[4] && s[4] > 0);
  free(s);
  /* A single chunk; a 1-D array; a 0-d total. */
  int64_t vec[1] = {1001};
  ASSERT_OK(tsr_full(ctx, 2.5, TSR_F64, 1, vec, NULL, &one));
  ASSERT_OK(tsr_sum(ctx, one, -1, 0, &tot));
  double total = 0;
  ASSERT_OK(tsr_compute(ctx, tot, &total, sizeof total, 60000));
  ASSERT_NEAR(total, 2502.5, 0);
  ASSERT_EQ(tsr_array_ndim(tot), 0);
  /* compute into too small a buffer. */
  double tiny;
  ASSERT_EQ(tsr_compute(ctx, one, &tiny, sizeof tiny, 1000), TSR_ELIMIT);
  tsr_array_ctx_destroy(&ctx);
}

TEST(chunk_directory_round_trip_and_constants)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *X = NULL, *Y = NULL, *Z = NULL, *O = NULL, *sum = NULL;
  int64_t shape[2] = {150, 70}, ch[2] = {64, 32};
  char dir[256];
  snprintf(dir, sizeof dir, "%s/chunks", tmpdir);
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_random_normal(ctx, 3, TSR_F32, 2, shape, ch, &X));
  ASSERT_OK(tsr_to_chunk_dir(ctx, X, dir, 60000));
  ASSERT_OK(tsr_from_chunk_dir(ctx, dir, &Y));
  ASSERT_EQ(tsr_array_dtype(Y), TSR_F32);
  ASSERT_EQ(tsr_array_chunk(Y, 0), 64);
  ASSERT_EQ(tsr_array_nchunks(Y, 1), 3);
  float *x = fetch_f32(ctx, X), *y = fetch_f32(ctx, Y);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(memcmp(x, y, 150 * 70 * sizeof(float)), 0);
  free(x), free(y);
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none", tmpdir);
  ASSERT_EQ(tsr_from_chunk_dir(ctx, missing, &Z), TSR_EIO);
  ASSERT_CONTAINS(tsr_errmsg(), "tessera-chunks.txt");
  ASSERT_OK(tsr_ones(ctx, TSR_I32, 2, shape, ch, &O));
  ASSERT_OK(tsr_sum(ctx, O, -1, 0, &sum));
  int64_t total = 0;
  ASSERT_OK(tsr_compute(ctx, sum, &total, sizeof total, 60000));
  ASSERT_EQ(total, 150 * 70);
  tsr_array_ctx_destroy(&ctx);
}

/* Regression (EEXIST "key 'load_npy-0-4-1' already exists"): two contexts
 * number their arrays alike; their keys must still not collide while both
 * are alive on the scheduler. */
TEST(two_contexts_do_not_share_key_names)
{
  tsr_array_ctx *c1 = NULL, *c2 = NULL;
  tsr_array *a = NULL, *b = NULL, *ka = NULL, *kb = NULL;
  int64_t shape[1] = {10};
  ASSERT_OK(tsr_array_ctx_new(client, &c1));
  ASSERT_OK(tsr_array_ctx_new(client, &c2));
  ASSERT_OK(tsr_full(c1, 1.0, TSR_F64, 1, shape, NULL, &a));
  ASSERT_OK(tsr_full(c2, 2.0, TSR_F64, 1, shape, NULL, &b));
  ASSERT_OK(tsr_persist(c1, a, 30000, &ka));
  ASSERT_OK(tsr_persist(c2, b, 30000, &kb));
  double x[10], y[10];
  ASSERT_OK(tsr_compute(c1, ka, x, sizeof x, 30000));
  ASSERT_OK(tsr_compute(c2, kb, y, sizeof y, 30000));
  ASSERT_TRUE(x[9] == 1.0 && y[9] == 2.0);
  tsr_array_ctx_destroy(&c1);
  tsr_array_ctx_destroy(&c2);
}

/* A persisted array's chunks are fetched straight from the workers: its
 * compute needs no graph, so it works while the scheduler is stopped
 * (SIGSTOP; before, the compute submitted a graph and waited out its
 * timeout). */
TEST(a_persisted_array_is_gathered_without_the_scheduler)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL, *kept = NULL;
  int64_t shape[1] = {50000}, chunk[1] = {12500};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_random_uniform(ctx, 17, TSR_F64, 1, shape, chunk, &a));
  ASSERT_OK(tsr_persist(ctx, a, 30000, &kept));
  double *x = malloc(50000 * sizeof *x), *y = malloc(50000 * sizeof *y);
  ASSERT_TRUE(x && y);
  ASSERT_OK(tsr_compute(ctx, a, x, 50000 * sizeof *x, 30000));
  ASSERT_EQ(kill(c.scheduler, SIGSTOP), 0);
  int rc = tsr_compute(ctx, kept, y, 50000 * sizeof *y, 3000);
  ASSERT_EQ(kill(c.scheduler, SIGCONT), 0);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(memcmp(x, y, 50000 * sizeof *x), 0);
  ASSERT_TRUE(x[49999] > 0);
  free(x), free(y);
  tsr_array_ctx_destroy(&ctx);
}

/* Each row of v sums to >= 0, and each column of u was flipped with its
 * row of v: u_t . (A v_t) = s_t > 0 (regression: `tsr-svd --method exact`
 * on a 3000 x 700 uniform matrix returned rows of v with a negative sum).
 * For the exact SVD, A v_t = s_t u_t to tol. */
static void check_signs(const double *a, const double *u, const double *s, const double *v, int64_t m, int64_t n,
                        int64_t k, double tol)
{
  for (int64_t t = 0; t < k; t++) {
    double sum = 0, dot = 0, worst = 0, scale = 0;
    for (int64_t j = 0; j < n; j++) sum += v[t * n + j];
    ASSERT_TRUE(sum >= 0);
    for (int64_t i = 0; i < m; i++) {
      double av = 0;
      for (int64_t j = 0; j < n; j++) av += a[i * n + j] * v[t * n + j];
      dot += u[i * k + t] * av;
      worst = fmax(worst, fabs(av - s[t] * u[i * k + t]));
      scale = fmax(scale, fabs(av));
    }
    ASSERT_TRUE(dot > 0);
    if (tol > 0) ASSERT_TRUE(worst <= tol * scale);
  }
}

TEST(svd_signs_follow_dask_convention)
{
  const int64_t m = 3000, n = 700, k = 10;
  tsr_array_ctx *ctx = NULL;
  tsr_array *A = NULL, *U = NULL, *S = NULL, *V = NULL, *Uc = NULL, *Sc = NULL, *Vc = NULL;
  int64_t shape[2] = {m, n}, ch[2] = {1000, 700};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_random_uniform(ctx, 5, TSR_F64, 2, shape, ch, &A));
  ASSERT_OK(tsr_svd_tall_skinny(ctx, A, &U, &S, &V));
  tsr_svd_opts o = TSR_SVD_OPTS_DEFAULT;
  o.n_power_iter = 2;
  ASSERT_OK(tsr_svd_compressed(ctx, A, (int)k, &o, &Uc, &Sc, &Vc));
  double *a = fetch(ctx, A), *u = fetch(ctx, U), *s = fetch(ctx, S), *v = fetch(ctx, V);
  double *uc = fetch(ctx, Uc), *sc = fetch(ctx, Sc), *vc = fetch(ctx, Vc);
  ASSERT_TRUE(a && u && s && v && uc && sc && vc);
  check_signs(a, u, s, v, m, n, n, 1e-10);
  check_signs(a, uc, sc, vc, m, n, k, 0);
  free(a), free(u), free(s), free(v), free(uc), free(sc), free(vc);
  tsr_array_ctx_destroy(&ctx);
}

/* A minus its column means divided by its column spreads, through row
 * and column broadcasts, and nanmean/nansum/count over NaN. */
TEST(broadcasting_and_nan_reductions_match_local)
{
  const int64_t m = 301, n = 57;
  double *a = local_random(m * n, 9);
  for (int64_t i = 0; i < m * n; i += 11) a[i] = NAN;
  int64_t ch[2] = {64, 20};
  tsr_array_ctx *ctx = NULL;
  tsr_array *A = NULL, *mu = NULL, *cnt = NULL, *sum = NULL, *C = NULL, *Z = NULL, *F = NULL, *rows = NULL, *R = NULL;
  tsr_array *sq = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_npy(ctx, write_npy(a, m, n), ch, &A));
  ASSERT_OK(tsr_nanmean(ctx, A, 0, 3, &mu));
  ASSERT_OK(tsr_nansum(ctx, A, 1, 0, &sum));
  ASSERT_OK(tsr_count_valid(ctx, A, -1, 0, &cnt));
  ASSERT_OK(tsr_sub(ctx, A, mu, &C));            /* a row vector (n,) */
  ASSERT_OK(tsr_ufunc(ctx, mu, "square", &sq));
  ASSERT_OK(tsr_div(ctx, C, sq, &Z));
  ASSERT_OK(tsr_fillnan(ctx, Z, 0.0, &F));
  int64_t rshape[2] = {m, 1}, rch[2] = {100, 1};
  ASSERT_OK(tsr_full(ctx, 2.0, TSR_F64, 2, rshape, rch, &rows));
  ASSERT_OK(tsr_mul(ctx, rows, F, &R));          /* a column vector on the left */
  double *gmu = fetch(ctx, mu), *gsum = fetch(ctx, sum), *gr = fetch(ctx, R);
  int64_t gcnt = -1;
  ASSERT_OK(tsr_compute(ctx, cnt, &gcnt, sizeof gcnt, 60000));
  ASSERT_TRUE(gmu && gsum && gr);
  int64_t want_cnt = 0;
  for (int64_t j = 0; j < n; j++) {
    double s = 0;
    int64_t c = 0;
    for (int64_t i = 0; i < m; i++)
      if (!isnan(a[i * n + j])) s += a[i * n + j], c++;
    want_cnt += c;
    ASSERT_NEAR(gmu[j], s / (double)c, 1e-14);
    for (int64_t i = 0; i < m; i++) {
      double x = a[i * n + j], want = isnan(x) ? 0.0 : 2.0 * ((x - gmu[j]) / (gmu[j] * gmu[j]));
      ASSERT_EQ(gr[i * n + j], want);            /* the same IEEE operations: the same bytes */
    }
  }
  ASSERT_EQ(gcnt, want_cnt);
  for (int64_t i = 0; i < m; i++) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += isnan(a[i * n + j]) ? 0.0 : a[i * n + j];
    ASSERT_NEAR(gsum[i], s, 1e-13);
  }
  tsr_array *bad = NULL, *col = NULL;
  int64_t wrong[1] = {n + 1};
  ASSERT_OK(tsr_ones(ctx, TSR_F64, 1, wrong, NULL, &col));
  ASSERT_EQ(tsr_add(ctx, A, col, &bad), TSR_ESHAPE);
  ASSERT_TRUE(strstr(tsr_errmsg(), "do not broadcast") != NULL);
  free(a), free(gmu), free(gsum), free(gr);
  tsr_array_ctx_destroy(&ctx);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-arrays-XXXXXX");
  if (mkdtemp(tmpdir) == NULL || cluster_start(&c, 2, 1, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(random_arrays_do_not_depend_on_chunking);
  RUN(elementwise_reductions_and_reshapes_match_local);
  RUN(matmul_matches_blas_plain_integer_and_fused_random);
  RUN(tsqr_is_orthonormal_and_reconstructs);
  RUN(exact_svd_matches_lapack_f64_and_f32);
  RUN(randomized_svd_on_a_decaying_spectrum);
  RUN(odd_shapes_and_clear_errors);
  RUN(chunk_directory_round_trip_and_constants);
  RUN(two_contexts_do_not_share_key_names);
  RUN(a_persisted_array_is_gathered_without_the_scheduler);
  RUN(svd_signs_follow_dask_convention);
  RUN(broadcasting_and_nan_reductions_match_local);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
