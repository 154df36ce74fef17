/* tsr_umap (tessera/embed.h) through real daemons on pbmc68k_reduced:
 * scanpy's 10-NN connectivities (tests/data/umap) as a dense .npy made
 * sparse by the builder; the embedding keeps the louvain structure (10-NN
 * label agreement in 2-D >= 0.8 x umap-learn's), does not depend on the
 * graph's chunking, repeats to the byte, takes a given init, and bad
 * arguments get clear errors. The quality against umap-learn in detail is
 * tests/unit/test_kernels_umap.c's. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/embed.h"

#define N 700

static cluster c;
static tsr_client *client;
static char tmpdir[128], graph_npy[256], init_npy[256];
static int labels[N];
static double ref_agree;

static int write_npy_f32(const char *path, const float *x, int64_t rows, int64_t cols)
{
  char h[128];
  int len = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }", (long long)rows,
                     (long long)cols);
  int total = 10 + len + 1, pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  unsigned short hl = (unsigned short)(len + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f), fwrite(&hl, 2, 1, f), fwrite(h, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  size_t n = fwrite(x, sizeof(float), (size_t)(rows * cols), f);
  return fclose(f) == 0 && n == (size_t)(rows * cols) ? 0 : -1;
}

/* The fixture graph as a dense .npy; the first 2 stored PCs as another. */
static int write_inputs(void)
{
  float *g = calloc((size_t)N * N, sizeof *g), *pc = malloc(sizeof(float) * N * 2);
  FILE *f = fopen(TSR_UMAP_FIXTURES "/pbmc68k_connectivities.mtx", "r"), *p = fopen(TSR_PBMC_DATA "/X_pca_stored.tsv", "r");
  char line[256];
  long r, cc, nnz, ok = f != NULL && p != NULL && g != NULL && pc != NULL;
  while (ok && fgets(line, sizeof line, f) != NULL && line[0] == '%') {}
  ok = ok && sscanf(line, "%ld %ld %ld", &r, &cc, &nnz) == 3;
  for (long i = 0; ok && i < nnz; i++) {
    int a, b;
    float w;
    ok = fscanf(f, "%d %d %f", &a, &b, &w) == 3 && a >= 1 && a <= N && b >= 1 && b <= N;
    if (ok) g[(size_t)(a - 1) * N + (size_t)(b - 1)] = w;
  }
  for (int i = 0; ok && i < N; i++) {
    float v[50];
    for (int k = 0; ok && k < 50; k++) ok = fscanf(p, "%f", &v[k]) == 1;
    pc[2 * i] = v[0], pc[2 * i + 1] = v[1];
  }
  if (f) fclose(f);
  if (p) fclose(p);
  ok = ok && write_npy_f32(graph_npy, g, N, N) == 0 && write_npy_f32(init_npy, pc, N, 2) == 0;
  free(g), free(pc);
  return ok ? 0 : -1;
}

static int read_labels_and_reference(void)
{
  FILE *f = fopen(TSR_PBMC_DATA "/obs.tsv", "r"), *r = fopen(TSR_UMAP_FIXTURES "/reference.tsv", "r");
  char line[512];
  int i = 0, seeds = 0;
  if (f == NULL || r == NULL || fgets(line, sizeof line, f) == NULL) return -1;
  while (i < N && fgets(line, sizeof line, f) != NULL) {
    char *t = strchr(line, '\t');
    t = t ? strchr(t + 1, '\t') : NULL;
    if (t == NULL) break;
    labels[i++] = atoi(t + 1);
  }
  while (fgets(line, sizeof line, r) != NULL) {
    double t, g;
    if (strncmp(line, "seed", 4) == 0 && sscanf(strchr(line, '\t'), "%lf %lf", &t, &g) == 2) ref_agree += g, seeds++;
  }
  fclose(f), fclose(r);
  if (seeds > 0) ref_agree /= seeds;
  return i == N && seeds > 0 ? 0 : -1;
}

/* Fraction of (cell, neighbour) pairs of the 10 nearest in 2-D sharing a label. */
static double label_agreement(const float *y)
{
  long same = 0;
  for (int i = 0; i < N; i++) {
    double best[10];
    int who[10];
    for (int q = 0; q < 10; q++) best[q] = INFINITY, who[q] = -1;
    for (int j = 0; j < N; j++) {
      if (j == i) continue;
      double d = (y[2 * i] - y[2 * j]) * (double)(y[2 * i] - y[2 * j]) + (y[2 * i + 1] - y[2 * j + 1]) * (double)(y[2 * i + 1] - y[2 * j + 1]);
      int q = 9;
      if (d >= best[q]) continue;
      for (; q > 0 && best[q - 1] > d; q--) best[q] = best[q - 1], who[q] = who[q - 1];
      best[q] = d, who[q] = j;
    }
    for (int q = 0; q < 10; q++) same += labels[who[q]] == labels[i];
  }
  return (double)same / (N * 10.0);
}

/* The embedding of the graph read in chunks of `rows`, with the PC init
 * when with_init; NULL on failure (message printed). */
static float *embed(int64_t rows, bool with_init, tsr_umap_scheme scheme)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *g = NULL, *x = NULL, *y = NULL;
  int64_t gc[2] = {rows, N}, ic[2] = {rows, 2};
  float *out = malloc(sizeof(float) * N * 2);
  tsr_umap_opts o = TSR_UMAP_OPTS_DEFAULT;
  o.scheme = scheme;
  int rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_from_npy(ctx, graph_npy, gc, &g);
  if (rc == 0 && with_init) rc = tsr_from_npy(ctx, init_npy, ic, &x);
  if (rc == 0) rc = tsr_umap(ctx, g, x, &o, &y);
  if (rc == 0 && (tsr_array_dim(y, 0) != N || tsr_array_dim(y, 1) != 2 || tsr_array_dtype(y) != TSR_F32)) rc = TSR_ESHAPE;
  if (rc == 0) rc = tsr_compute(ctx, y, out, sizeof(float) * N * 2, 120000);
  if (rc != 0) fprintf(stderr, "  umap: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_array_ctx_destroy(&ctx);
  if (rc != 0) free(out);
  return rc == 0 ? out : NULL;
}

static void check_embedding(const float *y, const char *what)
{
  for (int i = 0; i < 2 * N; i++) ASSERT_TRUE(isfinite(y[i]));
  double agree = label_agreement(y);
  fprintf(stderr, "  %s: label agreement %.4f (umap-learn %.4f)\n", what, agree, ref_agree);
  ASSERT_TRUE(agree >= 0.8 * ref_agree);
}

TEST(spectral_init_keeps_structure_and_ignores_chunking)
{
  float *a = embed(256, false, TSR_UMAP_SYNCHRONOUS), *b = embed(100, false, TSR_UMAP_SYNCHRONOUS);
  float *s = embed(700, false, TSR_UMAP_SEQUENTIAL);
  bool same = a != NULL && b != NULL && memcmp(a, b, sizeof(float) * N * 2) == 0;
  if (a != NULL) check_embedding(a, "synchronous, spectral init");
  if (s != NULL) check_embedding(s, "sequential, spectral init");
  bool ok = a != NULL && s != NULL;
  free(a), free(b), free(s);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(same);
}

TEST(given_init_is_used)
{
  float *a = embed(300, true, TSR_UMAP_SYNCHRONOUS);
  ASSERT_TRUE(a != NULL);
  check_embedding(a, "synchronous, PC init");
  free(a);
}

TEST(bad_arguments_are_named)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *g = NULL, *x = NULL, *y = NULL, *rect = NULL;
  int64_t gc[2] = {256, N}, ic[2] = {256, 2}, s0[2] = {0, 0}, s1[2] = {N, 600};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_npy(ctx, graph_npy, gc, &g));
  ASSERT_OK(tsr_from_npy(ctx, init_npy, ic, &x));
  ASSERT_OK(tsr_slice(ctx, g, s0, s1, &rect));
  ASSERT_EQ(tsr_umap(ctx, rect, NULL, NULL, &y), TSR_ESHAPE);
  ASSERT_CONTAINS(tsr_errmsg(), "square");
  ASSERT_EQ(tsr_umap(ctx, g, g, NULL, &y), TSR_ESHAPE);
  ASSERT_CONTAINS(tsr_errmsg(), "init must be 700 x 2");
  tsr_umap_opts o = TSR_UMAP_OPTS_DEFAULT;
  o.spread = 0;
  ASSERT_EQ(tsr_umap(ctx, g, x, &o, &y), TSR_EINVAL);
  ASSERT_CONTAINS(tsr_errmsg(), "spread");
  tsr_array_ctx_destroy(&ctx);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-umap-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  snprintf(graph_npy, sizeof graph_npy, "%s/graph.npy", tmpdir);
  snprintf(init_npy, sizeof init_npy, "%s/init.npy", tmpdir);
  if (write_inputs() != 0 || read_labels_and_reference() != 0) {
    fprintf(stderr, "cannot read %s or %s\n", TSR_PBMC_DATA, TSR_UMAP_FIXTURES);
    return 1;
  }
  if (cluster_start(&c, 2, 1, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(spectral_init_keeps_structure_and_ignores_chunking);
  RUN(given_init_is_used);
  RUN(bad_arguments_are_named);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
