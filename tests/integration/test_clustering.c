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

__attribute__((unused)) static double now(void)
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
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
