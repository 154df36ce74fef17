/* tsr-cluster's steps (cluster.h). Each step builds its arrays, persists
 * the one the next step reads (so its line's time is its own work, as
 * scanpy's eager steps are timed), and frees what no later step needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "tessera/embed.h"
#include "tessera/singlecell.h"
#include "tessera/tenx.h"

#define WAIT (-1)

typedef struct run_state {
  tsr_client *client;
  tsr_array_ctx *ctx;
  const cl_opts *o;
  cl_result *r;
  tsr_array *x;      /* the matrix the next step reads */
  int64_t n_genes;
} run_state;

/* Replaces s->x by the persisted next; the old one is freed. */
static int advance(run_state *s, tsr_array *next)
{
  tsr_array *kept = NULL;
  int rc = tsr_persist(s->ctx, next, WAIT, &kept);
  if (next != s->x) tsr_array_free(s->ctx, &next);
  if (rc != 0) return rc;
  tsr_array_free(s->ctx, &s->x);
  s->x = kept;
  return 0;
}

/* ---------- read ---------- */

static void take_barcodes(run_state *s, tsr_tenx_info *info)
{
  s->r->barcodes = info->barcodes;
  s->r->n_barcodes = info->barcodes != NULL ? info->n_cells : 0;
  info->barcodes = NULL;
  s->n_genes = info->n_genes;
  tsr_tenx_info_free(info);
}

static int read_barcodes_file(const char *path, int64_t n, char ***out_p)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return fprintf(stderr, "tsr-cluster: cannot open %s\n", path), TSR_EIO;
  char **b = calloc((size_t)n, sizeof *b), line[4096];
  int64_t i = 0;
  while (b != NULL && i < n && fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\t\r\n")] = '\0';
    b[i++] = strdup(line);
  }
  fclose(f);
  if (i != n) {
    for (int64_t j = 0; b != NULL && j < i; j++) free(b[j]);
    free(b);
    fprintf(stderr, "tsr-cluster: %s has %lld lines, the matrix %lld cells\n", path, (long long)i, (long long)n);
    return TSR_EINVAL;
  }
  *out_p = b;
  return 0;
}

static int read_npy(run_state *s)
{
  tsr_array *raw = NULL;
  int rc = tsr_from_npy(s->ctx, s->o->npy, NULL, &raw);
  if (rc != 0) return rc;
  if (tsr_array_ndim(raw) != 2) {
    fprintf(stderr, "tsr-cluster: %s is %d-D; a cells x features matrix is 2-D\n", s->o->npy, tsr_array_ndim(raw));
    return TSR_ESHAPE;
  }
  int64_t chunks[2] = {s->o->row_chunk > 0 ? s->o->row_chunk : 16384, tsr_array_dim(raw, 1)};
  tsr_array_free(s->ctx, &raw);
  return tsr_from_npy(s->ctx, s->o->npy, chunks, &s->x);
}

static int read_synthetic(run_state *s)
{
  const cl_opts *o = s->o;
  tsr_random_counts_opts so = TSR_RANDOM_COUNTS_OPTS_DEFAULT;
  if (o->synth_types > 0) so.n_types = o->synth_types;
  tsr_array *types = NULL;
  int64_t chunk = o->row_chunk > 0 ? o->row_chunk : 32768;
  int rc = tsr_random_counts(s->ctx, o->seed, o->synth_cells, o->synth_genes, chunk, &so, &s->x, &types);
  s->r->truth = rc == 0 ? malloc((size_t)o->synth_cells * sizeof(int32_t)) : NULL;
  if (rc == 0 && s->r->truth == NULL) rc = TSR_ENOMEM;
  if (rc == 0) rc = tsr_compute(s->ctx, types, s->r->truth, (size_t)o->synth_cells * sizeof(int32_t), WAIT);
  s->n_genes = o->synth_genes;
  return rc;
}

static int read_input(run_state *s)
{
  const cl_opts *o = s->o;
  tsr_tenx_info info = {0};
  int rc = 0;
  if (o->h5 != NULL) rc = tsr_from_10x_h5(s->ctx, o->h5, o->row_chunk, &s->x, &info);
  else if (o->mtx_dir != NULL) rc = tsr_from_10x_mtx(s->ctx, o->mtx_dir, o->row_chunk, &s->x, &info);
  else if (o->mtx != NULL && o->transpose) rc = tsr_from_mtx_transposed(s->ctx, o->mtx, o->row_chunk, &s->x, &info);
  else if (o->mtx != NULL) rc = tsr_from_mtx(s->ctx, o->mtx, o->row_chunk, &s->x, &info);
  else if (o->npy != NULL) return read_npy(s);
  else return read_synthetic(s);
  if (rc != 0) return rc;
  take_barcodes(s, &info);
  int64_t n = tsr_array_dim(s->x, 0);
  if (o->barcodes != NULL && s->r->barcodes == NULL) {
    rc = read_barcodes_file(o->barcodes, n, &s->r->barcodes);
    s->r->n_barcodes = rc == 0 ? n : 0;
  }
  return rc;
}

/* The input's cells: their true labels (--truth) are given as read. */
static int read_all(run_state *s)
{
  int rc = read_input(s);
  if (rc == 0 && s->o->truth != NULL) rc = cl_read_labels(s->o->truth, tsr_array_dim(s->x, 0), &s->r->truth);
  return rc;
}

/* ---------- preprocessing (count input) ---------- */

/* Keeps the barcodes and true labels of the kept cells (kept->index
 * ascending), freeing the others' barcodes. */
static void keep_cells(cl_result *r, int64_t n_before, const tsr_sc_kept *kept)
{
  int64_t p = 0;
  for (int64_t i = 0; i < n_before; i++) {
    bool keep = p < kept->n && kept->index[p] == i;
    if (r->barcodes != NULL && keep) r->barcodes[p] = r->barcodes[i];
    else if (r->barcodes != NULL) free(r->barcodes[i]);
    if (r->truth != NULL && keep) r->truth[p] = r->truth[i];
    p += keep;
  }
  if (r->barcodes != NULL) r->n_barcodes = kept->n;
}

static int filter(run_state *s)
{
  int64_t n0 = tsr_array_dim(s->x, 0), g0 = tsr_array_dim(s->x, 1);
  tsr_array *next = NULL;
  tsr_sc_kept kept = {0};
  cl_step_begin("pp.filter_cells");
  int rc = tsr_filter_cells(s->ctx, s->x, s->o->min_genes, WAIT, &next, &kept);
  if (rc == 0) keep_cells(s->r, n0, &kept), rc = advance(s, next);
  free(kept.index);
  if (rc != 0) return cl_fail("pp.filter_cells", rc);
  int64_t n1 = tsr_array_dim(s->x, 0);
  cl_step_end("pp.filter_cells", "min_genes %lld: %lld of %lld cells kept", (long long)s->o->min_genes, (long long)n1,
              (long long)n0);
  cl_step_begin("pp.filter_genes");
  kept = (tsr_sc_kept){0};
  rc = tsr_filter_genes(s->ctx, s->x, s->o->min_cells, WAIT, &next, &kept);
  free(kept.index);
  if (rc == 0) rc = advance(s, next);
  if (rc != 0) return cl_fail("pp.filter_genes", rc);
  cl_step_end("pp.filter_genes", "min_cells %lld: %lld of %lld genes kept", (long long)s->o->min_cells,
              (long long)tsr_array_dim(s->x, 1), (long long)g0);
  return 0;
}

static int normalize(run_state *s)
{
  tsr_array *next = NULL;
  double target = 0;
  cl_step_begin("pp.normalize_total");
  int rc = tsr_normalize_total(s->ctx, s->x, s->o->target_sum, WAIT, &next, &target);
  if (rc == 0) rc = advance(s, next);
  if (rc != 0) return cl_fail("pp.normalize_total", rc);
  cl_step_end("pp.normalize_total", "target_sum %g", target);
  cl_step_begin("pp.log1p");
  rc = tsr_log1p(s->ctx, s->x, &next);
  if (rc == 0) rc = advance(s, next);
  if (rc != 0) return cl_fail("pp.log1p", rc);
  cl_step_end("pp.log1p", "%s", "");
  return 0;
}

static int hvg_and_scale(run_state *s)
{
  tsr_hvg_opts ho = TSR_HVG_OPTS_DEFAULT;
  ho.n_top_genes = s->o->n_top_genes;
  tsr_hvg_result hvg = {0};
  tsr_array *next = NULL;
  cl_step_begin("pp.highly_variable_genes");
  int rc = tsr_highly_variable_genes(s->ctx, s->x, &ho, WAIT, &hvg);
  if (rc == 0) rc = tsr_sparse_select(s->ctx, s->x, NULL, hvg.highly_variable, 0, &next);
  if (rc == 0) rc = advance(s, next);
  int64_t n_hvg = hvg.n_highly_variable;
  tsr_hvg_result_free(&hvg);
  if (rc != 0) return cl_fail("pp.highly_variable_genes", rc);
  cl_step_end("pp.highly_variable_genes", "flavor seurat: %lld genes", (long long)n_hvg);
  cl_step_begin("pp.scale");
  rc = tsr_sc_scale(s->ctx, s->x, true, s->o->max_value, WAIT, &next);
  if (rc == 0) rc = advance(s, next);
  if (rc != 0) return cl_fail("pp.scale", rc);
  cl_step_end("pp.scale", "max_value %g (dense %lld x %lld)", s->o->max_value, (long long)tsr_array_dim(s->x, 0),
              (long long)tsr_array_dim(s->x, 1));
  return 0;
}

/* tl.pca: s->x becomes the cells' scores, written to PREFIX.pca.npy. */
static int pca(run_state *s)
{
  tsr_sc_pca_opts po = TSR_SC_PCA_OPTS_DEFAULT;
  po.n_comps = s->o->n_pcs;
  po.seed = s->o->seed;
  tsr_sc_pca_result pr = {0};
  char path[4096];
  snprintf(path, sizeof path, "%s.pca.npy", s->o->out);
  cl_step_begin("tl.pca");
  int rc = tsr_sc_pca(s->ctx, s->x, &po, &pr);
  if (rc == 0) rc = advance(s, pr.scores);
  if (rc == 0) rc = tsr_compute_npy(s->ctx, s->x, path, WAIT);
  if (rc != 0) return cl_fail("tl.pca", rc);
  cl_step_end("tl.pca", "%d components (randomized, implicit centering where sparse)", (int)tsr_array_dim(s->x, 1));
  return 0;
}

/* ---------- graph, clusters, embedding ---------- */

static int neighbors(run_state *s, tsr_array **graph_p)
{
  tsr_array *idx = NULL, *dist = NULL, *conn = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s.neighbors.mtx", s->o->out);
  cl_step_begin("pp.neighbors");
  int rc = tsr_knn(s->ctx, s->x, s->o->neighbors, s->o->metric, &idx, &dist);
  if (rc == 0) rc = tsr_knn_graph(s->ctx, idx, dist, &conn, NULL);
  if (rc == 0) rc = tsr_persist(s->ctx, conn, WAIT, graph_p);
  tsr_array_free(s->ctx, &idx), tsr_array_free(s->ctx, &dist), tsr_array_free(s->ctx, &conn);
  if (rc != 0) return cl_fail("pp.neighbors", rc);
  cl_step_end("pp.neighbors", "%d neighbors, exact, %s, umap connectivities", s->o->neighbors,
              s->o->metric == TSR_METRIC_COSINE ? "cosine" : "euclidean");
  double t = cl_now();
  rc = cl_write_mtx(s->client, *graph_p, path);
  if (rc == 0) printf("  wrote %s (%.3f s)\n", path, cl_now() - t);
  return rc;
}

static const char *method_step(cl_method m)
{
  return m == CL_LEIDEN ? "tl.leiden" : m == CL_LOUVAIN ? "tl.louvain" : "kmeans";
}

static int cluster(run_state *s, const tsr_array *graph)
{
  const cl_opts *o = s->o;
  int64_t n = tsr_array_dim(s->x, 0);
  tsr_array *labels = NULL;
  tsr_community_opts co = TSR_COMMUNITY_OPTS_DEFAULT;
  co.resolution = o->resolution, co.seed = o->seed;
  tsr_kmeans_opts ko = TSR_KMEANS_OPTS_DEFAULT;
  ko.k = o->kmeans_k, ko.seed = o->seed, ko.n_init = 10;
  double inertia = 0, *init = NULL;
  const char *step = method_step(o->method);
  int64_t d = tsr_array_dim(s->x, 1);
  if (o->method == CL_KMEANS && o->kmeans_init != NULL) {
    int rc = cl_read_npy(o->kmeans_init, (int64_t)o->kmeans_k * d, &init);
    if (rc != 0) return rc;
    ko.init = init, ko.n_init = 1;
  }
  cl_step_begin(step);
  int rc = o->method == CL_LEIDEN    ? tsr_leiden(s->ctx, graph, &co, &labels)
           : o->method == CL_LOUVAIN ? tsr_louvain(s->ctx, graph, &co, &labels)
                                     : tsr_kmeans(s->ctx, s->x, &ko, &labels, NULL, &inertia);
  /* The labels are read twice (gathered here, and by the modularity
   * task): kept on the workers, else the second graph runs the whole
   * community detection again (it did: 0.65 s of a 1.46 s tl.leiden on
   * one H200). */
  tsr_array *kept = NULL;
  if (rc == 0 && graph != NULL) rc = tsr_persist(s->ctx, labels, WAIT, &kept);
  const tsr_array *use = kept != NULL ? kept : labels;
  s->r->labels = rc == 0 ? malloc((size_t)n * sizeof(int32_t)) : NULL;
  if (rc == 0 && s->r->labels == NULL) rc = TSR_ENOMEM;
  if (rc == 0) rc = tsr_compute(s->ctx, use, s->r->labels, (size_t)n * sizeof(int32_t), WAIT);
  double q = 0;
  if (rc == 0 && graph != NULL) rc = tsr_modularity(s->ctx, graph, use, o->resolution, WAIT, &q);
  tsr_array_free(s->ctx, &kept);
  tsr_array_free(s->ctx, &labels);
  free(init);
  if (rc != 0) return cl_fail(step, rc);
  s->r->n_cells = n;
  for (int64_t i = 0; i < n; i++)
    if (s->r->labels[i] + 1 > s->r->n_clusters) s->r->n_clusters = s->r->labels[i] + 1;
  if (o->method == CL_KMEANS)
    cl_step_end(step, "k %d: inertia %.6g", o->kmeans_k, inertia);
  else
    cl_step_end(step, "resolution %g: %d clusters, modularity %.4f", o->resolution, s->r->n_clusters, q);
  return 0;
}

static int umap(run_state *s, const tsr_array *graph)
{
  int64_t n = tsr_array_dim(s->x, 0);
  tsr_umap_opts uo = TSR_UMAP_OPTS_DEFAULT;
  uo.seed = s->o->seed;
  tsr_array *emb = NULL, *init = NULL;
  int64_t start[2] = {0, 0}, stop[2] = {n, 2};
  cl_step_begin("tl.umap");
  int rc = s->o->umap_init_pca && tsr_array_dim(s->x, 1) >= 2 ? tsr_slice(s->ctx, s->x, start, stop, &init) : 0;
  if (rc == 0) rc = tsr_umap(s->ctx, graph, init, &uo, &emb);
  tsr_array_free(s->ctx, &init);
  s->r->umap = rc == 0 ? malloc((size_t)n * 2 * sizeof(float)) : NULL;
  if (rc == 0 && s->r->umap == NULL) rc = TSR_ENOMEM;
  if (rc == 0) rc = tsr_compute(s->ctx, emb, s->r->umap, (size_t)n * 2 * sizeof(float), WAIT);
  tsr_array_free(s->ctx, &emb);
  if (rc != 0) return cl_fail("tl.umap", rc);
  cl_step_end("tl.umap", "%s init, min_dist 0.5", s->o->umap_init_pca ? "PCA" : "spectral");
  return 0;
}

static bool counts_input(const cl_opts *o) { return o->npy == NULL; }

static int steps(run_state *s)
{
  const cl_opts *o = s->o;
  cl_step_begin("read");
  int rc = read_all(s);
  if (rc == 0) rc = advance(s, s->x);
  if (rc != 0) return cl_fail("read", rc);
  cl_step_end("read", "%lld cells x %lld %s", (long long)tsr_array_dim(s->x, 0), (long long)tsr_array_dim(s->x, 1),
              counts_input(o) ? "genes" : "features");
  if (counts_input(o) && ((rc = filter(s)) != 0 || (rc = normalize(s)) != 0 || (rc = hvg_and_scale(s)) != 0))
    return rc;
  if (o->n_pcs > 0 && (rc = pca(s)) != 0) return rc;
  tsr_array *graph = NULL;
  if (o->method != CL_KMEANS || o->umap) rc = neighbors(s, &graph);
  if (rc == 0) rc = cluster(s, o->method == CL_KMEANS ? NULL : graph);
  if (rc == 0 && o->umap) rc = umap(s, graph);
  tsr_array_free(s->ctx, &graph);
  return rc;
}

int cl_run(tsr_client *client, const cl_opts *o, cl_result *r)
{
  run_state s = {client, NULL, o, r, NULL, 0};
  int rc = tsr_array_ctx_new(client, &s.ctx);
  if (rc != 0) return cl_fail("opening an array context", rc);
  rc = steps(&s);
  tsr_array_ctx_destroy(&s.ctx);
  return rc;
}
