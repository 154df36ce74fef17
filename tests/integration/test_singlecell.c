/* Sparse primitives and scanpy-style preprocessing through real daemons:
 * - a small random sparse matrix against dense references computed here
 *   (row/column sums, means/variances, products with and without
 *   implicit centering, row/column selection);
 * - pbmc68k_reduced (../shared/data/pbmc68k_reduced_10x, SOURCE.md): PCA
 *   of the stored scaled matrix on its 309 highly variable genes gives the
 *   stored variances and PCs;
 * - the same data's raw counts through filter_cells, filter_genes,
 *   normalize_total, log1p, highly_variable_genes, PCA and scale against
 *   scanpy 1.11.5's values (tests/data/singlecell/, made by its
 *   make_fixtures.py). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/singlecell.h"

static cluster c;
static tsr_client *client;
static char tmpdir[128];

#define PBMC TSR_SHARED_DATA "/pbmc68k_reduced_10x"
#define FIX TSR_TESTS_DATA "/singlecell"
#define TIMEOUT 120000

/* ---------- helpers ---------- */

static double *fetch(tsr_array_ctx *ctx, const tsr_array *a)
{
  size_t n = (size_t)tsr_array_size(a), es = tsr_dtype_size(tsr_array_dtype(a));
  void *raw = malloc(n * es + 1);
  double *out = malloc(sizeof *out * (n + 1));
  int rc = tsr_compute(ctx, a, raw, n * es, TIMEOUT);
  if (rc != 0) fprintf(stderr, "  compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  for (size_t i = 0; rc == 0 && i < n; i++)
    out[i] = tsr_array_dtype(a) == TSR_F32 ? ((float *)raw)[i] : ((double *)raw)[i];
  free(raw);
  if (rc != 0) free(out);
  return rc == 0 ? out : NULL;
}

/* Whitespace-separated numbers of a text file ("nan" allowed). */
static double *read_numbers(const char *path, size_t *n_p)
{
  FILE *f = fopen(path, "r");
  size_t n = 0, cap = 1024;
  double *v = malloc(sizeof *v * cap);
  char tok[64];
  if (f == NULL) return fprintf(stderr, "  cannot open %s\n", path), free(v), NULL;
  while (fscanf(f, "%63s", tok) == 1) {
    if (n == cap) v = realloc(v, sizeof *v * (cap *= 2));
    v[n++] = strcmp(tok, "nan") == 0 ? NAN : strtod(tok, NULL);
  }
  fclose(f);
  *n_p = n;
  return v;
}

/* Writes a C-order f32 matrix as .npy. */
static int write_npy(const char *path, const float *x, int64_t rows, int64_t cols)
{
  char dict[128];
  int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
  int total = 10 + len + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  unsigned short hl = (unsigned short)(len + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fwrite(&hl, 2, 1, f);
  fwrite(dict, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(x, sizeof *x, (size_t)(rows * cols), f);
  return fclose(f);
}

static tsr_array *from_dense(tsr_array_ctx *ctx, const char *name, const float *x, int64_t rows, int64_t cols, int64_t chunk)
{
  char path[256];
  snprintf(path, sizeof path, "%s/%s.npy", tmpdir, name);
  tsr_array *a = NULL;
  int64_t chunks[2] = {chunk, cols};
  if (write_npy(path, x, rows, cols) != 0 || tsr_from_npy(ctx, path, chunks, &a) != 0) return NULL;
  return a;
}

static double max_rel_err(const double *got, const double *want, size_t n)
{
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(got[i] - want[i]) / (fabs(want[i]) > 1e-3 ? fabs(want[i]) : 1e-3);
    if (!(d <= worst)) worst = d;  /* NaN counts as the worst */
  }
  return worst;
}

static double abs_corr(const double *a, int64_t sa, const double *b, int64_t sb, int64_t n)
{
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (int64_t i = 0; i < n; i++) ma += a[i * sa], mb += b[i * sb];
  ma /= (double)n, mb /= (double)n;
  for (int64_t i = 0; i < n; i++) {
    double x = a[i * sa] - ma, y = b[i * sb] - mb;
    sab += x * y, saa += x * x, sbb += y * y;
  }
  return fabs(sab) / sqrt(saa * sbb);
}

/* ---------- a small random sparse matrix against dense references ---------- */

enum { R = 53, C = 11, K = 3 };

static void small_matrix(float *x)
{
  unsigned s = 12345;
  for (int i = 0; i < R * C; i++) {
    s = s * 1103515245u + 12345u;
    x[i] = (s >> 16) % 10 < 7 ? 0.0f : (float)((s >> 8) % 97) / 8.0f;
  }
}

TEST(sparse_statistics_equal_the_dense_ones)
{
  float x[R * C];
  small_matrix(x);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *d = from_dense(ctx, "small", x, R, C, 8), *s = NULL, *rows = NULL, *cols = NULL, *nnz = NULL, *mean = NULL, *var = NULL;
  ASSERT_TRUE(d != NULL);
  ASSERT_OK(tsr_sparse(ctx, d, &s));
  ASSERT_OK(tsr_sparse_reduce(ctx, s, 1, TSR_SPARSE_SUM, &rows));
  ASSERT_OK(tsr_sparse_reduce(ctx, s, 0, TSR_SPARSE_SUM, &cols));
  ASSERT_OK(tsr_sparse_reduce(ctx, s, 0, TSR_SPARSE_NNZ, &nnz));
  ASSERT_OK(tsr_sparse_mean_var(ctx, s, 1, &mean, &var));
  double *gr = fetch(ctx, rows), *gc = fetch(ctx, cols), *gn = fetch(ctx, nnz), *gm = fetch(ctx, mean), *gv = fetch(ctx, var);
  ASSERT_TRUE(gr && gc && gn && gm && gv);
  for (int i = 0; i < R; i++) {
    double t = 0;
    for (int j = 0; j < C; j++) t += x[i * C + j];
    ASSERT_NEAR(gr[i], t, 1e-9);
  }
  for (int j = 0; j < C; j++) {
    double t = 0, q = 0, m;
    int n = 0;
    for (int i = 0; i < R; i++) t += x[i * C + j], n += x[i * C + j] != 0;
    m = t / R;
    for (int i = 0; i < R; i++) q += (x[i * C + j] - m) * (x[i * C + j] - m);
    ASSERT_NEAR(gc[j], t, 1e-9);
    ASSERT_EQ((int)gn[j], n);
    ASSERT_NEAR(gm[j], m, 1e-12);
    ASSERT_NEAR(gv[j], q / (R - 1), 1e-10);
  }
  free(gr), free(gc), free(gn), free(gm), free(gv);
  tsr_array_ctx_destroy(&ctx);
}

/* X·B, Xᵀ·C and (X − μ)·B, (X − μ)ᵀ·C, ((X − μ)/σ)·B against loops here. */
TEST(sparse_products_with_and_without_centering_equal_the_dense_ones)
{
  float x[R * C], bf[C * K], cf[R * K];
  small_matrix(x);
  for (int i = 0; i < C * K; i++) bf[i] = (float)((i * 7) % 5) - 2.0f;
  for (int i = 0; i < R * K; i++) cf[i] = (float)((i * 3) % 7) - 3.0f;
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *d = from_dense(ctx, "small2", x, R, C, 8), *b32 = from_dense(ctx, "b", bf, C, K, C), *c32 = from_dense(ctx, "c", cf, R, K, 8);
  ASSERT_TRUE(d && b32 && c32);
  tsr_array *s = NULL, *sf = NULL, *b = NULL, *cc = NULL, *mean = NULL, *var = NULL, *sd = NULL, *z = NULL, *zs = NULL, *zt = NULL, *st = NULL;
  ASSERT_OK(tsr_sparse(ctx, d, &s));
  ASSERT_OK(tsr_astype(ctx, s, TSR_F64, &sf));
  ASSERT_OK(tsr_astype(ctx, b32, TSR_F64, &b));
  ASSERT_OK(tsr_astype(ctx, c32, TSR_F64, &cc));
  ASSERT_OK(tsr_sparse_mean_var(ctx, s, 1, &mean, &var));
  ASSERT_OK(tsr_ufunc(ctx, var, "sqrt", &sd));
  ASSERT_OK(tsr_sub(ctx, sf, mean, &z));
  ASSERT_OK(tsr_div(ctx, z, sd, &zs));
  ASSERT_OK(tsr_transpose(ctx, z, &zt));
  ASSERT_OK(tsr_transpose(ctx, sf, &st));
  tsr_array *p[4] = {NULL};
  ASSERT_OK(tsr_matmul(ctx, sf, b, &p[0]));
  ASSERT_OK(tsr_matmul(ctx, st, cc, &p[1]));
  ASSERT_OK(tsr_matmul(ctx, zs, b, &p[2]));
  ASSERT_OK(tsr_matmul(ctx, zt, cc, &p[3]));
  double *gm = fetch(ctx, mean), *gsd = fetch(ctx, sd), *g[4];
  for (int i = 0; i < 4; i++) ASSERT_TRUE((g[i] = fetch(ctx, p[i])) != NULL);
  for (int i = 0; i < R; i++)
    for (int t = 0; t < K; t++) {
      double w0 = 0, w2 = 0;
      for (int j = 0; j < C; j++) {
        w0 += x[i * C + j] * (double)bf[j * K + t];
        w2 += (x[i * C + j] - gm[j]) / gsd[j] * bf[j * K + t];
      }
      ASSERT_NEAR(g[0][i * K + t], w0, 1e-9);
      ASSERT_NEAR(g[2][i * K + t], w2, 1e-9);
    }
  for (int j = 0; j < C; j++)
    for (int t = 0; t < K; t++) {
      double w1 = 0, w3 = 0;
      for (int i = 0; i < R; i++) {
        w1 += x[i * C + j] * (double)cf[i * K + t];
        w3 += (x[i * C + j] - gm[j]) * cf[i * K + t];
      }
      ASSERT_NEAR(g[1][j * K + t], w1, 1e-9);
      ASSERT_NEAR(g[3][j * K + t], w3, 1e-9);
    }
  for (int i = 0; i < 4; i++) free(g[i]);
  free(gm), free(gsd);
  tsr_array_ctx_destroy(&ctx);
}

TEST(select_rows_and_columns_keeps_the_order_and_rechunks)
{
  float x[R * C];
  small_matrix(x);
  uint8_t rm[R], cm[C];
  for (int i = 0; i < R; i++) rm[i] = i % 3 != 1 && i != 40;
  for (int j = 0; j < C; j++) cm[j] = j % 4 != 2;
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *d = from_dense(ctx, "small3", x, R, C, 8), *s = NULL, *sel = NULL, *dense = NULL;
  ASSERT_TRUE(d != NULL);
  ASSERT_OK(tsr_sparse(ctx, d, &s));
  ASSERT_OK(tsr_sparse_select(ctx, s, rm, cm, 5, &sel));
  ASSERT_OK(tsr_decompress(ctx, sel, &dense));
  double *g = fetch(ctx, dense);
  ASSERT_TRUE(g != NULL);
  int64_t nr = tsr_array_dim(sel, 0), nc = tsr_array_dim(sel, 1), r = 0;
  ASSERT_EQ(tsr_array_chunk(sel, 0), 5);
  for (int i = 0; i < R; i++) {
    if (!rm[i]) continue;
    int64_t k = 0;
    for (int j = 0; j < C; j++)
      if (cm[j]) ASSERT_NEAR(g[r * nc + k++], x[i * C + j], 0);
    r++;
  }
  ASSERT_EQ(r, nr);
  uint8_t none[C] = {0};
  ASSERT_EQ(tsr_sparse_select(ctx, s, NULL, none, 0, &sel), TSR_ESHAPE);
  ASSERT_CONTAINS(tsr_errmsg(), "nothing left");
  free(g);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- pbmc68k_reduced: the stored PCA ---------- */

static const double stored_variance[10] = {30.928, 21.182, 14.686, 11.571, 9.233, 7.350, 4.338, 3.197, 3.158, 2.910};

static void check_stored_pca(tsr_array_ctx *ctx, const tsr_array *x, tsr_sc_pca_solver solver, const double *pcs)
{
  tsr_sc_pca_opts o = TSR_SC_PCA_OPTS_DEFAULT;
  tsr_sc_pca_result r;
  o.solver = solver;
  ASSERT_OK(tsr_sc_pca(ctx, x, &o, &r));
  double *var = fetch(ctx, r.variance), *ratio = fetch(ctx, r.variance_ratio), *scores = fetch(ctx, r.scores);
  ASSERT_TRUE(var && ratio && scores);
  for (int i = 0; i < 10; i++) ASSERT_NEAR(var[i] / stored_variance[i], 1.0, 1e-3);
  ASSERT_NEAR(ratio[0], 0.09771, 1e-4);
  ASSERT_NEAR(ratio[4], 0.02917, 1e-4);
  for (int k = 0; k < 6; k++) {
    double corr = abs_corr(scores + k, 50, pcs + k, 50, 700);
    fprintf(stderr, "  %s PC%d |corr| %.6f variance %.4f\n", solver ? "exact" : "randomized", k + 1, corr, var[k]);
    ASSERT_TRUE(corr >= 0.999);
  }
  free(var), free(ratio), free(scores);
}

TEST(pbmc68k_pca_of_the_309_hvg_reproduces_the_stored_one)
{
  size_t nx = 0, nh = 0, np = 0;
  FILE *f = fopen(PBMC "/X_scaled_700x765_f32le.bin", "rb");
  ASSERT_TRUE(f != NULL);
  float *all = malloc(sizeof *all * 700 * 765), *x = malloc(sizeof *x * 700 * 309);
  nx = fread(all, sizeof *all, 700 * 765, f);
  fclose(f);
  ASSERT_EQ(nx, (size_t)700 * 765);
  double *hv = read_numbers(FIX "/pbmc68k_stored_hvg.tsv", &nh), *pcs = read_numbers(PBMC "/X_pca_stored.tsv", &np);
  ASSERT_TRUE(hv && pcs && nh == 765 && np == 700 * 50);
  int64_t k = 0;
  for (int i = 0; i < 700; i++)
    for (int j = 0; j < 765; j++)
      if (hv[j] != 0) x[k++] = all[i * 765 + j];
  ASSERT_EQ(k, (int64_t)700 * 309);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *a = from_dense(ctx, "pbmc_hvg", x, 700, 309, 128);
  ASSERT_TRUE(a != NULL);
  check_stored_pca(ctx, a, TSR_SC_PCA_EXACT, pcs);
  check_stored_pca(ctx, a, TSR_SC_PCA_RANDOMIZED, pcs);
  free(all), free(x), free(hv), free(pcs);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- pbmc68k_reduced: the preprocessing chain against scanpy ---------- */

/* The counts .mtx (genes x cells, 1-based) as a dense cells x genes f32. */
static float *read_counts(int64_t *cells_p, int64_t *genes_p)
{
  FILE *f = fopen(PBMC "/counts_genes_x_cells.mtx", "r");
  char line[512];
  long long genes = 0, cells = 0, n = 0, g, c;
  double v;
  if (f == NULL) return NULL;
  while (fgets(line, sizeof line, f) && line[0] == '%') {}
  if (sscanf(line, "%lld %lld %lld", &genes, &cells, &n) != 3) return fclose(f), NULL;
  float *x = calloc((size_t)(genes * cells), sizeof *x);
  for (long long i = 0; i < n && fscanf(f, "%lld %lld %lf", &g, &c, &v) == 3; i++) x[(c - 1) * genes + (g - 1)] = (float)v;
  fclose(f);
  *cells_p = cells, *genes_p = genes;
  return x;
}

/* The first `first` values of a against the fixture's (0: all). */
static void check_vector_n(tsr_array_ctx *ctx, const tsr_array *a, const char *fixture, size_t first, double tol)
{
  size_t n = 0;
  char path[256];
  snprintf(path, sizeof path, FIX "/%s", fixture);
  double *want = read_numbers(path, &n), *got = fetch(ctx, a);
  ASSERT_TRUE(want && got);
  ASSERT_EQ((int64_t)n, tsr_array_size(a));
  double err = max_rel_err(got, want, first > 0 && first < n ? first : n);
  fprintf(stderr, "  %s: max relative error %.3g\n", fixture, err);
  ASSERT_TRUE(err <= tol);
  free(want), free(got);
}

static void check_vector(tsr_array_ctx *ctx, const tsr_array *a, const char *fixture, double tol)
{
  check_vector_n(ctx, a, fixture, 0, tol);
}

static void check_kept(const tsr_sc_kept *k, const char *fixture)
{
  size_t n = 0;
  char path[256];
  snprintf(path, sizeof path, FIX "/%s", fixture);
  double *want = read_numbers(path, &n);
  ASSERT_TRUE(want != NULL);
  ASSERT_EQ((int64_t)n, k->n);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(k->index[i], (int64_t)want[i]);
  free(want);
}

static void check_hvg(const tsr_hvg_result *h)
{
  size_t n = 0;
  double *want = read_numbers(FIX "/hvg_seurat_300.tsv", &n);
  ASSERT_TRUE(want != NULL && (int64_t)n == 4 * h->n_genes);
  int64_t differ = 0;
  for (int64_t j = 0; j < h->n_genes; j++) {
    ASSERT_NEAR(h->means[j], want[4 * j], 1e-6 * fabs(want[4 * j]) + 1e-9);
    if (isnan(want[4 * j + 1])) ASSERT_TRUE(isnan(h->dispersions[j]));
    else ASSERT_NEAR(h->dispersions[j], want[4 * j + 1], 1e-5);
    if (!isnan(want[4 * j + 2])) ASSERT_NEAR(h->dispersions_norm[j], want[4 * j + 2], 1e-4);
    differ += h->highly_variable[j] != (want[4 * j + 3] != 0);
  }
  ASSERT_EQ(differ, 0);
  ASSERT_EQ(h->n_highly_variable, 300);
  free(want);
}

static void check_pca_variance(tsr_array_ctx *ctx, const tsr_array *x, tsr_sc_pca_solver solver, const char *fixture)
{
  tsr_sc_pca_opts o = TSR_SC_PCA_OPTS_DEFAULT;
  tsr_sc_pca_result r;
  o.n_comps = 20, o.solver = solver;
  ASSERT_OK(tsr_sc_pca(ctx, x, &o, &r));
  /* exact: all 20 as arpack's; randomized: the top 10 (the bar) */
  check_vector_n(ctx, r.variance, fixture, solver == TSR_SC_PCA_EXACT ? 0 : 10, solver == TSR_SC_PCA_EXACT ? 1e-4 : 1e-3);
}

TEST(pbmc68k_counts_preprocessing_matches_scanpy)
{
  int64_t cells = 0, genes = 0;
  float *counts = read_counts(&cells, &genes);
  ASSERT_TRUE(counts != NULL && cells == 700 && genes == 765);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *d = from_dense(ctx, "counts", counts, cells, genes, 128), *x = NULL, *fc = NULL, *fg = NULL, *nt = NULL, *lg = NULL;
  free(counts);
  ASSERT_TRUE(d != NULL);
  ASSERT_OK(tsr_sparse(ctx, d, &x));
  tsr_sc_kept kc = {0}, kg = {0};
  ASSERT_OK(tsr_filter_cells(ctx, x, 230, TIMEOUT, &fc, &kc));
  ASSERT_OK(tsr_filter_genes(ctx, fc, 20, TIMEOUT, &fg, &kg));
  check_kept(&kc, "kept_cells.tsv");
  check_kept(&kg, "kept_genes.tsv");
  double target = 0;
  ASSERT_OK(tsr_normalize_total(ctx, fg, 0, TIMEOUT, &nt, &target));
  ASSERT_NEAR(target, 710.5, 0);
  tsr_array *rows = NULL, *cols = NULL, *lcols = NULL;
  ASSERT_OK(tsr_sparse_reduce(ctx, nt, 1, TSR_SPARSE_SUM, &rows));
  ASSERT_OK(tsr_sparse_reduce(ctx, nt, 0, TSR_SPARSE_SUM, &cols));
  check_vector(ctx, rows, "normalized_row_sums.tsv", 1e-6);
  check_vector(ctx, cols, "normalized_col_sums.tsv", 1e-6);
  ASSERT_OK(tsr_log1p(ctx, nt, &lg));
  ASSERT_OK(tsr_sparse_reduce(ctx, lg, 0, TSR_SPARSE_SUM, &lcols));
  check_vector(ctx, lcols, "log1p_col_sums.tsv", 1e-6);
  tsr_hvg_opts ho = {300, 20};
  tsr_hvg_result h;
  ASSERT_OK(tsr_highly_variable_genes(ctx, lg, &ho, TIMEOUT, &h));
  check_hvg(&h);
  tsr_array *hv = NULL, *sc = NULL, *scols = NULL;
  ASSERT_OK(tsr_sparse_select(ctx, lg, NULL, h.highly_variable, 0, &hv));
  check_pca_variance(ctx, hv, TSR_SC_PCA_EXACT, "pca_sparse_hvg_variance.tsv");
  check_pca_variance(ctx, hv, TSR_SC_PCA_RANDOMIZED, "pca_sparse_hvg_variance.tsv");
  ASSERT_OK(tsr_sc_scale(ctx, hv, true, 10, TIMEOUT, &sc));
  ASSERT_OK(tsr_sum(ctx, sc, 0, 0, &scols));
  double *s = fetch(ctx, scols);
  ASSERT_TRUE(s != NULL);
  for (int64_t j = 0; j < 300; j++) ASSERT_NEAR(s[j], 0.0, 2e-3);  /* centered (clipping moves the sum a little) */
  check_pca_variance(ctx, sc, TSR_SC_PCA_EXACT, "pca_scaled_hvg_variance.tsv");
  free(s);
  tsr_hvg_result_free(&h);
  free(kc.index), free(kg.index);
  tsr_array_ctx_destroy(&ctx);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-sc-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  if (cluster_start(&c, 2, 1, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(sparse_statistics_equal_the_dense_ones);
  RUN(sparse_products_with_and_without_centering_equal_the_dense_ones);
  RUN(select_rows_and_columns_keeps_the_order_and_rechunks);
  RUN(pbmc68k_pca_of_the_309_hvg_reproduces_the_stored_one);
  RUN(pbmc68k_counts_preprocessing_matches_scanpy);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0 || getenv("TSR_TEST_DUMP_LOGS") != NULL);  /* to see which ops ran */
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
