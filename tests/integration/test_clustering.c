/* Clustering (tessera/cluster.h) through real daemons, on the real data of
 * ../shared/data: pbmc68k_reduced_10x (scanpy's UMAP graph of the stored
 * PCs, Leiden/Louvain against leidenalg and the stored louvain labels),
 * clustering_benchmarks (MNIST: PCA → kNN → Leiden against the digit
 * labels, kNN against brute force; optdigits: k-means against
 * scikit-learn). Reference values: tests/data/cluster (README.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/array.h"
#include "tessera/cluster.h"
#include "tessera/linalg.h"

static cluster c;
static tsr_client *client;
static char tmpdir[128];

#ifndef TSR_SHARED_DATA
#define TSR_SHARED_DATA "../shared/data"
#endif
#ifndef TSR_FIXTURES
#define TSR_FIXTURES "tests/data/cluster"
#endif

/* ---------- helpers ---------- */

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Writes a C-order 2-D array as .npy (descr '<f4', '<f8', '<i4'). */
static int write_npy(const char *path, const char *descr, size_t es, int64_t rows, int64_t cols, const void *data)
{
  char h[128];
  int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }", descr,
                   (long long)rows, (long long)cols);
  int total = 10 + n + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  uint16_t hl = (uint16_t)(n + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fwrite(&hl, 2, 1, f);
  fwrite(h, 1, (size_t)n, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, es, (size_t)(rows * cols), f);
  return fclose(f);
}

static tsr_array *array_of(tsr_array_ctx *ctx, const char *name, const char *descr, size_t es, int64_t rows,
                           int64_t cols, const void *data, int64_t chunk_rows)
{
  char path[256];
  snprintf(path, sizeof path, "%s/%s.npy", tmpdir, name);
  tsr_array *a = NULL;
  int64_t chunks[2] = {chunk_rows, cols};
  if (write_npy(path, descr, es, rows, cols, data) != 0 || tsr_from_npy(ctx, path, chunks, &a) != 0) return NULL;
  return a;
}

static void *fetch(tsr_array_ctx *ctx, const tsr_array *a)
{
  size_t n = (size_t)tsr_array_size(a) * tsr_dtype_size(tsr_array_dtype(a));
  void *out = malloc(n ? n : 1);
  int rc = tsr_compute(ctx, a, out, n, 600000);
  if (rc != 0) {
    fprintf(stderr, "  compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
    free(out);
    return NULL;
  }
  return out;
}

/* rows x cols whitespace-separated floats. */
static float *read_tsv(const char *path, int64_t rows, int64_t cols)
{
  FILE *f = fopen(path, "r");
  float *x = malloc((size_t)(rows * cols) * sizeof *x);
  int64_t i = 0;
  while (f && x && i < rows * cols && fscanf(f, "%f", &x[i]) == 1) i++;
  if (f) fclose(f);
  if (i != rows * cols) free(x), x = NULL;
  return x;
}

/* A dense square matrix from a sparse array (for comparing). */
static float *densify(tsr_array_ctx *ctx, const tsr_array *s)
{
  tsr_array *d = NULL;
  if (tsr_decompress(ctx, s, &d) != 0) return NULL;
  return fetch(ctx, d);
}

/* ---------- pbmc68k ---------- */

#define PBMC_N 700
#define PBMC_D 50

typedef struct pbmc_ref {
  double leiden_q[5];
  float *conn, *dist;  /* dense 700 x 700 */
} pbmc_ref;

static int read_triplets(FILE *f, const char *name, float *dense)
{
  char word[64];
  long nnz = 0;
  if (fscanf(f, "%63s %ld", word, &nnz) != 2 || strcmp(word, name) != 0) return -1;
  for (long e = 0; e < nnz; e++) {
    long i, j;
    double v;
    if (fscanf(f, "%ld %ld %lf", &i, &j, &v) != 3 || i < 0 || j < 0 || i >= PBMC_N || j >= PBMC_N) return -1;
    dense[i * PBMC_N + j] = (float)v;
  }
  return 0;
}

static int read_pbmc_ref(pbmc_ref *r)
{
  FILE *f = fopen(TSR_FIXTURES "/pbmc68k_neighbors.txt", "r");
  char line[512];
  r->conn = calloc(PBMC_N * PBMC_N, sizeof(float));
  r->dist = calloc(PBMC_N * PBMC_N, sizeof(float));
  if (f == NULL || !r->conn || !r->dist) return -1;
  while (fgets(line, sizeof line, f) && line[0] == '#') {}
  int ok = sscanf(line, "leiden_modularity %lf %lf %lf %lf %lf", &r->leiden_q[0], &r->leiden_q[1], &r->leiden_q[2],
                  &r->leiden_q[3], &r->leiden_q[4]) == 5 &&
           read_triplets(f, "connectivities", r->conn) == 0 && read_triplets(f, "distances", r->dist) == 0;
  fclose(f);
  return ok ? 0 : -1;
}

/* The stored `louvain` column of obs.tsv. */
static int read_louvain(int32_t *lab)
{
  FILE *f = fopen(TSR_SHARED_DATA "/pbmc68k_reduced_10x/obs.tsv", "r");
  char line[512];
  int n = 0;
  if (f == NULL) return -1;
  if (!fgets(line, sizeof line, f)) n = -1;
  while (n >= 0 && n < PBMC_N && fgets(line, sizeof line, f)) {
    char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
    if (tab2 == NULL) break;
    lab[n++] = atoi(tab2 + 1);
  }
  fclose(f);
  return n == PBMC_N ? 0 : -1;
}

static double max_abs_diff(const float *a, const float *b, size_t n, size_t *at)
{
  double m = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs((double)a[i] - b[i]) > m) m = fabs((double)a[i] - b[i]), *at = i;
  return m;
}

TEST(pbmc68k_umap_graph_equals_scanpy_and_leiden_louvain_reach_leidenalg)
{
  pbmc_ref ref = {0};
  int32_t stored[PBMC_N];
  ASSERT_OK(read_pbmc_ref(&ref));
  ASSERT_OK(read_louvain(stored));
  float *pcs = read_tsv(TSR_SHARED_DATA "/pbmc68k_reduced_10x/X_pca_stored.tsv", PBMC_N, PBMC_D);
  ASSERT_TRUE(pcs != NULL);
  tsr_array_ctx *ctx = NULL;
  tsr_array *x, *idx = NULL, *dist = NULL, *conn = NULL, *dg = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_TRUE((x = array_of(ctx, "pbmc_pcs", "<f4", 4, PBMC_N, PBMC_D, pcs, 256)) != NULL);
  ASSERT_OK(tsr_knn(ctx, x, 10, TSR_METRIC_EUCLIDEAN, &idx, &dist));
  ASSERT_OK(tsr_knn_graph(ctx, idx, dist, &conn, &dg));
  ASSERT_EQ(tsr_array_encoding(conn), TSR_ENC_CSR);
  float *cd = densify(ctx, conn), *dd = densify(ctx, dg);
  ASSERT_TRUE(cd != NULL && dd != NULL);
  size_t at = 0;
  double e1 = max_abs_diff(cd, ref.conn, PBMC_N * PBMC_N, &at);
  fprintf(stderr, "  connectivities: max |ours - scanpy| = %.3g at (%zu, %zu)\n", e1, at / PBMC_N, at % PBMC_N);
  double e2 = max_abs_diff(dd, ref.dist, PBMC_N * PBMC_N, &at);
  fprintf(stderr, "  distances: max |ours - scanpy| = %.3g\n", e2);
  ASSERT_TRUE(e1 <= 1e-5);
  ASSERT_TRUE(e2 <= 1e-5);
  double best_ref = 0;
  for (int s = 0; s < 5; s++) best_ref = ref.leiden_q[s] > best_ref ? ref.leiden_q[s] : best_ref;
  for (int m = 0; m < 2; m++) {
    tsr_community_opts o = TSR_COMMUNITY_OPTS_DEFAULT;
    tsr_array *lab = NULL;
    ASSERT_OK(m == 0 ? tsr_leiden(ctx, conn, &o, &lab) : tsr_louvain(ctx, conn, &o, &lab));
    int32_t *l = fetch(ctx, lab);
    ASSERT_TRUE(l != NULL);
    double q = 0;
    ASSERT_OK(tsr_modularity(ctx, conn, lab, 1.0, 60000, &q));
    int nc = 0;
    for (int i = 0; i < PBMC_N; i++) nc = l[i] + 1 > nc ? l[i] + 1 : nc;
    double ari = tsr_adjusted_rand_index(l, stored, PBMC_N);
    fprintf(stderr, "  %s: %d clusters, modularity %.4f (leidenalg best of 5 seeds %.4f), ARI vs stored louvain %.3f\n",
            m == 0 ? "leiden" : "louvain", nc, q, best_ref, ari);
    ASSERT_TRUE(q >= 0.98 * best_ref);
    ASSERT_TRUE(ari >= 0.7);
    /* deterministic for a seed */
    tsr_array *again = NULL;
    ASSERT_OK(m == 0 ? tsr_leiden(ctx, conn, &o, &again) : tsr_louvain(ctx, conn, &o, &again));
    int32_t *l2 = fetch(ctx, again);
    ASSERT_TRUE(l2 != NULL && memcmp(l, l2, sizeof stored) == 0);
    free(l), free(l2);
  }
  free(cd), free(dd), free(pcs), free(ref.conn), free(ref.dist);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- bad input ---------- */

TEST(bad_input_gets_clear_errors)
{
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  float x[40];
  for (int i = 0; i < 40; i++) x[i] = (float)(i % 7);
  tsr_array *a = array_of(ctx, "small", "<f4", 4, 10, 4, x, 5), *idx = NULL, *dist = NULL;
  ASSERT_TRUE(a != NULL);
  ASSERT_EQ(tsr_knn(ctx, a, 11, TSR_METRIC_EUCLIDEAN, &idx, &dist), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "k = 11");
  x[13] = NAN;
  tsr_array *b = array_of(ctx, "small_nan", "<f4", 4, 10, 4, x, 5);
  ASSERT_TRUE(b != NULL);
  ASSERT_OK(tsr_knn(ctx, b, 3, TSR_METRIC_EUCLIDEAN, &idx, &dist));
  int64_t out[30];
  int rc = tsr_compute(ctx, idx, out, sizeof out, 60000);
  ASSERT_TRUE(rc != 0);
  fprintf(stderr, "  NaN: %s\n", tsr_errmsg());
  ASSERT_CONTAINS(tsr_errmsg(), "NaN");
  ASSERT_CONTAINS(tsr_errmsg(), "row 3");
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- optdigits: k-means against scikit-learn ---------- */

#define OPT_N 1797
#define OPT_D 64

static double *read_optdigits(void)
{
  FILE *f = fopen(TSR_SHARED_DATA "/clustering_benchmarks/optdigits_test/optdigits.tes", "r");
  double *x = malloc(OPT_N * OPT_D * sizeof *x);
  int i = 0, lab;
  while (f && x && i < OPT_N) {
    for (int j = 0; j < OPT_D; j++)
      if (fscanf(f, "%lf,", &x[i * OPT_D + j]) != 1) goto done;
    if (fscanf(f, "%d", &lab) != 1) break;
    i++;
  }
done:
  if (f) fclose(f);
  if (i != OPT_N) free(x), x = NULL;
  return x;
}

typedef struct km_ref {
  double inertia, best;
  double init[10 * OPT_D];
  int32_t labels[OPT_N];
} km_ref;

static int read_km_ref(km_ref *r)
{
  FILE *f = fopen(TSR_FIXTURES "/optdigits_kmeans.txt", "r");
  char line[1024];
  int ok = f != NULL;
  while (ok && fgets(line, sizeof line, f) && line[0] == '#') {}
  ok = ok && sscanf(line, "inertia %lf", &r->inertia) == 1;
  ok = ok && fgets(line, sizeof line, f) && fgets(line, sizeof line, f) && sscanf(line, "best_of_10_inertia %lf", &r->best) == 1;
  ok = ok && fscanf(f, " init") == 0;
  for (int i = 0; ok && i < 10 * OPT_D; i++) ok = fscanf(f, "%lf", &r->init[i]) == 1;
  ok = ok && fscanf(f, " labels") == 0;
  for (int i = 0; ok && i < OPT_N; i++) ok = fscanf(f, "%d", &r->labels[i]) == 1;
  if (f) fclose(f);
  return ok ? 0 : -1;
}

TEST(optdigits_kmeans_equals_scikit_learn)
{
  static km_ref ref;
  ASSERT_OK(read_km_ref(&ref));
  double *x = read_optdigits();
  ASSERT_TRUE(x != NULL);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *a = array_of(ctx, "optdigits", "<f8", 8, OPT_N, OPT_D, x, 400), *lab = NULL, *cen = NULL;
  ASSERT_TRUE(a != NULL);
  tsr_kmeans_opts o = TSR_KMEANS_OPTS_DEFAULT;
  o.k = 10, o.init = ref.init;
  double inertia = 0;
  ASSERT_OK(tsr_kmeans(ctx, a, &o, &lab, &cen, &inertia));
  int32_t *l = fetch(ctx, lab);
  double *centers = fetch(ctx, cen);
  ASSERT_TRUE(l != NULL && centers != NULL);
  int same = 0;
  for (int i = 0; i < OPT_N; i++) same += l[i] == ref.labels[i];
  fprintf(stderr, "  same init: inertia %.6f (sklearn %.6f), %d of %d labels equal\n", inertia, ref.inertia, same, OPT_N);
  ASSERT_EQ(same, OPT_N);
  ASSERT_TRUE(fabs(inertia - ref.inertia) <= 1e-6 * ref.inertia);
  o.init = NULL, o.n_init = 10, o.seed = 0;
  double t0 = now();
  ASSERT_OK(tsr_kmeans(ctx, a, &o, NULL, NULL, &inertia));
  fprintf(stderr, "  k-means++ n_init 10: inertia %.1f (sklearn best of 10: %.1f) in %.2f s\n", inertia, ref.best, now() - t0);
  ASSERT_TRUE(inertia <= 1.02 * ref.best);
  free(l), free(centers), free(x);
  tsr_array_ctx_destroy(&ctx);
}

TEST(kmeans_relocates_an_empty_cluster)
{
  /* two tight groups and a third initial center far from every point:
   * nothing is assigned to it in the first step */
  double x[12 * 2], init[3 * 2] = {0, 0, 10, 10, 1000, 1000};
  for (int i = 0; i < 12; i++) x[2 * i] = (i < 6 ? 0 : 10) + 0.1 * (i % 3), x[2 * i + 1] = (i < 6 ? 0 : 10) + 0.1 * (i % 2);
  x[2 * 11] = 30, x[2 * 11 + 1] = 30;  /* the farthest point gets the empty cluster */
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *a = array_of(ctx, "empty", "<f8", 8, 12, 2, x, 5), *lab = NULL;
  ASSERT_TRUE(a != NULL);
  tsr_kmeans_opts o = TSR_KMEANS_OPTS_DEFAULT;
  o.k = 3, o.init = init;
  double inertia = -1;
  ASSERT_OK(tsr_kmeans(ctx, a, &o, &lab, NULL, &inertia));
  int32_t *l = fetch(ctx, lab);
  ASSERT_TRUE(l != NULL);
  ASSERT_EQ(l[11], 2);
  for (int i = 0; i < 11; i++) ASSERT_EQ(l[i], i < 6 ? 0 : 1);
  ASSERT_TRUE(inertia >= 0 && inertia < 1.0);
  free(l);
  o.k = 13;
  o.init = NULL;
  ASSERT_EQ(tsr_kmeans(ctx, a, &o, NULL, NULL, &inertia), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "k = 13");
  tsr_array_ctx_destroy(&ctx);
}

TEST(kmeans_on_two_workers_gives_the_same_labels)
{
  /* A second worker (3 threads in all): the runs of chunks and the held
   * states now span two workers, and the states' chunks move between
   * them; the labels and inertia must not change. */
  static km_ref ref;
  ASSERT_OK(read_km_ref(&ref));
  ASSERT_EQ(cluster_add_worker(&c, 1, NULL), 1);
  ASSERT_OK(tsr_wait_for_workers(client, 2, 20000));
  double *x = read_optdigits();
  ASSERT_TRUE(x != NULL);
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *a = array_of(ctx, "optdigits2", "<f8", 8, OPT_N, OPT_D, x, 150), *lab = NULL;
  ASSERT_TRUE(a != NULL);
  tsr_kmeans_opts o = TSR_KMEANS_OPTS_DEFAULT;
  o.k = 10, o.init = ref.init;
  double inertia = 0;
  ASSERT_OK(tsr_kmeans(ctx, a, &o, &lab, NULL, &inertia));
  int32_t *l = fetch(ctx, lab);
  ASSERT_TRUE(l != NULL);
  int same = 0;
  for (int i = 0; i < OPT_N; i++) same += l[i] == ref.labels[i];
  fprintf(stderr, "  two workers: %d of %d labels equal, inertia %.6f\n", same, OPT_N, inertia);
  ASSERT_EQ(same, OPT_N);
  ASSERT_TRUE(fabs(inertia - ref.inertia) <= 1e-6 * ref.inertia);
  free(l), free(x);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- MNIST: PCA 50 → 15-NN → Leiden ---------- */

#define MN_N 10000
#define MN_D 784
#define MN_K 15

static int read_idx(const char *path, int header, unsigned char *out, size_t n)
{
  gzFile f = gzopen(path, "rb");
  unsigned char h[16];
  int ok = f != NULL && gzread(f, h, (unsigned)header) == header && gzread(f, out, (unsigned)n) == (int)n;
  if (f) gzclose(f);
  return ok ? 0 : -1;
}

/* Row i's neighbours by brute force in f64 (the same sums as the exact pass). */
static void brute_row(const double *p, int64_t n, int64_t d, int64_t i, int k, int64_t *idx, double *dist)
{
  for (int q = 0; q < k; q++) idx[q] = -1, dist[q] = INFINITY;
  idx[0] = i, dist[0] = 0;
  for (int64_t j = 0; j < n; j++) {
    if (j == i) continue;
    double s = 0;
    for (int64_t c = 0; c < d; c++) s += (p[i * d + c] - p[j * d + c]) * (p[i * d + c] - p[j * d + c]);
    if (!(s < dist[k - 1])) continue;  /* ties keep the smaller index already there */
    int q = k - 1;
    while (q > 1 && dist[q - 1] > s) dist[q] = dist[q - 1], idx[q] = idx[q - 1], q--;
    dist[q] = s, idx[q] = j;
  }
}

TEST(mnist_pca_knn_leiden_finds_the_digits)
{
  unsigned char *px = malloc(MN_N * MN_D), lab8[MN_N];
  ASSERT_TRUE(px != NULL);
  ASSERT_OK(read_idx(TSR_SHARED_DATA "/clustering_benchmarks/mnist_test/t10k-images-idx3-ubyte.gz", 16, px, MN_N * MN_D));
  ASSERT_OK(read_idx(TSR_SHARED_DATA "/clustering_benchmarks/mnist_test/t10k-labels-idx1-ubyte.gz", 8, lab8, MN_N));
  double *x = malloc(MN_N * MN_D * sizeof *x);
  for (int i = 0; i < MN_N * MN_D; i++) x[i] = px[i] / 255.0;
  tsr_array_ctx *ctx = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  tsr_array *a = array_of(ctx, "mnist", "<f8", 8, MN_N, MN_D, x, 2500), *z = NULL, *u = NULL, *s = NULL, *v = NULL;
  ASSERT_TRUE(a != NULL);
  double t0 = now();
  ASSERT_OK(tsr_standardize(ctx, a, TSR_STANDARDIZE_CENTER, &z));
  tsr_svd_opts so = TSR_SVD_OPTS_DEFAULT;
  so.n_power_iter = 4, so.iterator = TSR_SVD_KRYLOV;
  ASSERT_OK(tsr_svd_compressed(ctx, z, 50, &so, &u, &s, &v));
  tsr_array *scores = NULL, *pcs = NULL, *idx = NULL, *dist = NULL, *conn = NULL, *lab = NULL;
  ASSERT_OK(tsr_mul(ctx, u, s, &scores));
  ASSERT_OK(tsr_astype(ctx, scores, TSR_F32, &pcs));
  ASSERT_OK(tsr_persist(ctx, pcs, 600000, &pcs));
  double t1 = now();
  ASSERT_OK(tsr_knn(ctx, pcs, MN_K, TSR_METRIC_EUCLIDEAN, &idx, &dist));
  ASSERT_OK(tsr_persist(ctx, idx, 600000, &idx));
  ASSERT_OK(tsr_persist(ctx, dist, 600000, &dist));
  double t2 = now();
  ASSERT_OK(tsr_knn_graph(ctx, idx, dist, &conn, NULL));
  tsr_community_opts co = TSR_COMMUNITY_OPTS_DEFAULT;
  ASSERT_OK(tsr_leiden(ctx, conn, &co, &lab));
  int32_t *l = fetch(ctx, lab);
  double t3 = now();
  ASSERT_TRUE(l != NULL);
  int32_t truth[MN_N];
  for (int i = 0; i < MN_N; i++) truth[i] = lab8[i];
  int nc = 0;
  for (int i = 0; i < MN_N; i++) nc = l[i] + 1 > nc ? l[i] + 1 : nc;
  double ari = tsr_adjusted_rand_index(l, truth, MN_N);
  fprintf(stderr, "  PCA %.2f s, kNN %.2f s, graph + Leiden %.2f s: %d clusters, ARI %.4f\n", t1 - t0, t2 - t1, t3 - t2, nc, ari);
  ASSERT_TRUE(ari >= 0.75);
  /* kNN lists against brute force on 1,000 rows (on the f32 scores as f64) */
  float *p32 = fetch(ctx, pcs);
  int64_t *ki = fetch(ctx, idx);
  float *kd = fetch(ctx, dist);
  ASSERT_TRUE(p32 && ki && kd);
  double *p = malloc(MN_N * 50 * sizeof *p);
  for (int i = 0; i < MN_N * 50; i++) p[i] = p32[i];
  int bad = 0;
  for (int64_t i = 0; i < MN_N; i += 10) {
    int64_t bi[MN_K];
    double bd[MN_K];
    brute_row(p, MN_N, 50, i, MN_K, bi, bd);
    for (int q = 0; q < MN_K; q++)
      if (bi[q] != ki[i * MN_K + q] || fabs(sqrt(bd[q]) - kd[i * MN_K + q]) > 1e-5 * (1 + sqrt(bd[q]))) {
        if (bad++ < 3) fprintf(stderr, "  row %lld slot %d: brute %lld (%.7g), ours %lld (%.7g)\n", (long long)i, q,
                               (long long)bi[q], sqrt(bd[q]), (long long)ki[i * MN_K + q], kd[i * MN_K + q]);
      }
  }
  ASSERT_EQ(bad, 0);
  free(p), free(p32), free(ki), free(kd), free(l), free(x), free(px);
  tsr_array_ctx_destroy(&ctx);
}

int main(void)
{
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-clustering-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  if (cluster_start(&c, 1, 2, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(pbmc68k_umap_graph_equals_scanpy_and_leiden_louvain_reach_leidenalg);
  RUN(bad_input_gets_clear_errors);
  RUN(optdigits_kmeans_equals_scikit_learn);
  RUN(kmeans_relocates_an_empty_cluster);
  RUN(mnist_pca_knn_leiden_finds_the_digits);
  RUN(kmeans_on_two_workers_gives_the_same_labels);  /* last: it adds a worker */
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
