/* Single-cell work on a GPU worker equals the CPU's (label gpu; skipped with
 * 77 where no GPU can be used). The same seeded count matrix
 * (tsr_random_counts) goes through normalize_total, log1p, HVG, scale and
 * PCA on a CPU-only cluster and on a GPU worker alone (where every op with
 * a CUDA variant runs on the device, the rest on its host):
 *   - PCA: the variances within 1e-4 relative, each of the top 10 PCs'
 *     scores within 1e-4 of the CPU's (relative to the column's norm);
 *   - kNN of the same PCs (the CPU's, as a .npy both clusters read):
 *     every index list and distance identical;
 *   - Leiden on the UMAP graph of those neighbours: modularity within 1%
 *     of the CPU's.
 * Uses only the public API; the GPU is reached through tessera-worker. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/cluster.h"
#include "tessera/singlecell.h"

#define CELLS 40000
#define GENES 3000
#define PCS 20
#define K 15
#define WAIT 300000

typedef struct side {
  double variance[PCS];
  float *scores;          /* CELLS x PCS */
  int64_t *idx;           /* CELLS x K */
  float *dist;
  double modularity;
  int clusters;
} side;

static bool have_gpu(void)
{
  char out[4096];
  const char *argv[] = {cluster_bin("tessera-worker"), "--list-gpus", NULL};
  return run_capture(argv, NULL, out, sizeof out, 60) == 0 && out[0] != '\0';
}

static int start(cluster *c, bool gpu)
{
  memset(c, 0, sizeof *c);
  if (cluster_start_scheduler(c, NULL) != 0) return -1;
  const char *args[] = {"--gpu", "0", NULL};
  if (cluster_add_worker(c, gpu ? 4 : 8, gpu ? args : NULL) < 0) return -1;
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, 1, 60000);
  tsr_client_close(client);
  return rc;
}

/* counts → normalize_total → log1p → HVG(1000) → scale(10) → PCA. */
static int pca(tsr_array_ctx *ctx, side *s, tsr_array **scores_p)
{
  tsr_array *x = NULL, *n = NULL, *l = NULL, *h = NULL, *z = NULL;
  tsr_random_counts_opts co = {10, 0.05};
  tsr_hvg_opts ho = {1000, 20};
  tsr_hvg_result hvg = {0};
  tsr_sc_pca_opts po = TSR_SC_PCA_OPTS_DEFAULT;
  tsr_sc_pca_result pr = {0};
  po.n_comps = PCS;
  int rc = tsr_random_counts(ctx, 11, CELLS, GENES, 8192, &co, &x, NULL);
  if (rc == 0) rc = tsr_normalize_total(ctx, x, 1e4, WAIT, &n, NULL);
  if (rc == 0) rc = tsr_log1p(ctx, n, &l);
  if (rc == 0) rc = tsr_persist(ctx, l, WAIT, &l);
  if (rc == 0) rc = tsr_highly_variable_genes(ctx, l, &ho, WAIT, &hvg);
  if (rc == 0) rc = tsr_sparse_select(ctx, l, NULL, hvg.highly_variable, 0, &h);
  if (rc == 0) rc = tsr_sc_scale(ctx, h, true, 10, WAIT, &z);
  if (rc == 0) rc = tsr_sc_pca(ctx, z, &po, &pr);
  if (rc == 0) rc = tsr_persist(ctx, pr.scores, WAIT, scores_p);
  if (rc == 0) rc = tsr_compute(ctx, pr.variance, s->variance, sizeof s->variance, WAIT);
  if (rc == 0) rc = tsr_compute(ctx, *scores_p, s->scores, (size_t)CELLS * PCS * sizeof(float), WAIT);
  tsr_hvg_result_free(&hvg);
  if (rc != 0) fprintf(stderr, "  pca: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  return rc;
}

/* kNN of the PCs in pcs_npy, its UMAP graph, Leiden and its modularity. */
static int neighbours(tsr_array_ctx *ctx, const char *pcs_npy, side *s)
{
  tsr_array *x = NULL, *idx = NULL, *dist = NULL, *g = NULL, *labels = NULL;
  int64_t chunks[2] = {8192, PCS};
  int32_t *lab = malloc(CELLS * sizeof *lab);
  int rc = tsr_from_npy(ctx, pcs_npy, chunks, &x);
  if (rc == 0) rc = tsr_knn(ctx, x, K, TSR_METRIC_EUCLIDEAN, &idx, &dist);
  const tsr_array *both[2] = {idx, dist};
  void *bufs[2] = {s->idx, s->dist};
  size_t caps[2] = {(size_t)CELLS * K * 8, (size_t)CELLS * K * 4};
  if (rc == 0) rc = tsr_compute_many(ctx, both, 2, bufs, caps, WAIT);
  if (rc == 0) rc = tsr_knn_graph(ctx, idx, dist, &g, NULL);
  if (rc == 0) rc = tsr_persist(ctx, g, WAIT, &g);
  if (rc == 0) rc = tsr_leiden(ctx, g, NULL, &labels);
  if (rc == 0) rc = tsr_compute(ctx, labels, lab, CELLS * sizeof *lab, WAIT);
  if (rc == 0) rc = tsr_modularity(ctx, g, labels, 1.0, WAIT, &s->modularity);
  for (int i = 0; rc == 0 && i < CELLS; i++) s->clusters = lab[i] + 1 > s->clusters ? lab[i] + 1 : s->clusters;
  free(lab);
  if (rc != 0) fprintf(stderr, "  neighbours: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  return rc;
}

/* One cluster's run; the CPU run also writes the PCs both kNNs read. */
static int run_side(bool gpu, const char *pcs_npy, side *s)
{
  cluster c;
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *scores = NULL;
  int rc = start(&c, gpu);
  if (rc == 0) rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = pca(ctx, s, &scores);
  if (rc == 0 && !gpu) rc = tsr_compute_npy(ctx, scores, pcs_npy, WAIT);
  if (rc == 0) rc = neighbours(ctx, pcs_npy, s);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  return rc;
}

/* Worst |a − ±b| / |b| over the top 10 PCs' score columns (the sign of a
 * PC is a convention both sides apply, but near-ties may flip it). */
static double worst_scores(const float *a, const float *b)
{
  double worst = 0;
  for (int c = 0; c < 10; c++) {
    double d_same = 0, d_flip = 0, norm = 0;
    for (int i = 0; i < CELLS; i++) {
      double x = a[(size_t)i * PCS + c], y = b[(size_t)i * PCS + c];
      d_same += (x - y) * (x - y), d_flip += (x + y) * (x + y), norm += y * y;
    }
    worst = fmax(worst, sqrt(fmin(d_same, d_flip) / norm));
  }
  return worst;
}

TEST(single_cell_pipeline_on_the_gpu_equals_the_cpu)
{
  static side cpu, gpu;
  side *sides[2] = {&cpu, &gpu};
  for (int i = 0; i < 2; i++) {
    sides[i]->scores = malloc((size_t)CELLS * PCS * sizeof(float));
    sides[i]->idx = malloc((size_t)CELLS * K * 8);
    sides[i]->dist = malloc((size_t)CELLS * K * 4);
  }
  char pcs_npy[] = "/tmp/tsr-gpu-cluster-XXXXXX";
  int fd = mkstemp(pcs_npy);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  ASSERT_OK(run_side(false, pcs_npy, &cpu));
  ASSERT_OK(run_side(true, pcs_npy, &gpu));
  unlink(pcs_npy);
  double var = 0;
  for (int c = 0; c < 10; c++) var = fmax(var, fabs(gpu.variance[c] - cpu.variance[c]) / cpu.variance[c]);
  double sc = worst_scores(gpu.scores, cpu.scores);
  int64_t idx_diff = 0, dist_diff = 0;
  for (int64_t i = 0; i < (int64_t)CELLS * K; i++) idx_diff += gpu.idx[i] != cpu.idx[i], dist_diff += gpu.dist[i] != cpu.dist[i];
  double dq = fabs(gpu.modularity - cpu.modularity) / cpu.modularity;
  printf("  PCA: variances within %.2e, PC scores within %.2e; kNN: %lld of %d indices and %lld distances differ; "
         "Leiden: modularity %.5f (GPU, %d clusters) vs %.5f (CPU, %d clusters), %.3f%% apart\n",
         var, sc, (long long)idx_diff, CELLS * K, (long long)dist_diff, gpu.modularity, gpu.clusters, cpu.modularity,
         cpu.clusters, 100 * dq);
  ASSERT_TRUE(var <= 1e-4);
  ASSERT_TRUE(sc <= 1e-4);
  ASSERT_EQ(idx_diff, 0);
  ASSERT_EQ(dist_diff, 0);
  ASSERT_TRUE(dq <= 0.01);
  for (int i = 0; i < 2; i++) free(sides[i]->scores), free(sides[i]->idx), free(sides[i]->dist);
}

int main(void)
{
  if (!have_gpu()) {
    printf("SKIPPED: no GPU\n");
    return KIT_SKIP;
  }
  RUN(single_cell_pipeline_on_the_gpu_equals_the_cpu);
  return kit_summary();
}
