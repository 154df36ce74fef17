/* tests/unit/test_kernels_umap.c — the UMAP ops (kernels/cpu/umap.c,
 * umap_spectral.c) on pbmc68k_reduced against umap-learn.
 *
 * The graph is scanpy's 10-NN connectivities of the stored 50 PCs, the
 * reference values umap-learn's trustworthiness and label agreement on it
 * (tests/data/umap: README says how they were made). The embedding must
 * keep the structure as well as umap-learn's: trustworthiness (sklearn's
 * definition, k = 10, against the 50 PCs) >= 0.9 and at most 0.02 below
 * umap-learn's mean over 5 seeds; the fraction of each cell's 10 nearest
 * cells in 2-D sharing its louvain label >= 0.8 x umap-learn's. Same seed
 * -> the same bytes. */
#include <time.h>

#include "cpu/csr.h"
#include "cpu/umap.h"
#include "kit.h"

#define N 700
#define NPC 50

static float pcs[N * NPC];
static int labels[N];
static double ref_a, ref_b, ref_trust, ref_agree;
/* The graph as 3 row chunks (CSR u8 bufs). */
static tsr_buf graph[3];
static const int64_t chunk_rows[3] = {256, 256, 188};

static int read_pcs(void)
{
  FILE *f = fopen(TSR_PBMC_DATA "/X_pca_stored.tsv", "r");
  if (f == NULL) return -1;
  int ok = 1;
  for (int i = 0; i < N * NPC && ok; i++) ok = fscanf(f, "%f", &pcs[i]) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

static int read_labels(void)
{
  FILE *f = fopen(TSR_PBMC_DATA "/obs.tsv", "r");
  char line[512];
  if (f == NULL || fgets(line, sizeof line, f) == NULL) return -1;
  int i = 0;
  while (i < N && fgets(line, sizeof line, f) != NULL) {
    char *tab = strchr(line, '\t');
    tab = tab ? strchr(tab + 1, '\t') : NULL;
    if (tab == NULL) break;
    labels[i++] = atoi(tab + 1);
  }
  fclose(f);
  return i == N ? 0 : -1;
}

static int read_reference(void)
{
  FILE *f = fopen(TSR_UMAP_FIXTURES "/reference.tsv", "r");
  char line[256];
  int seeds = 0;
  if (f == NULL) return -1;
  while (fgets(line, sizeof line, f) != NULL) {
    double t, g;
    if (strncmp(line, "a\t", 2) == 0) ref_a = atof(line + 2);
    if (strncmp(line, "b\t", 2) == 0) ref_b = atof(line + 2);
    if (strncmp(line, "seed", 4) == 0 && sscanf(strchr(line, '\t'), "%lf %lf", &t, &g) == 2)
      ref_trust += t, ref_agree += g, seeds++;
  }
  fclose(f);
  if (seeds == 0) return -1;
  ref_trust /= seeds, ref_agree /= seeds;
  return 0;
}

/* The .mtx (rows sorted, 1-based) into CSR chunks of chunk_rows. */
static int read_graph(void)
{
  FILE *f = fopen(TSR_UMAP_FIXTURES "/pbmc68k_connectivities.mtx", "r");
  char line[256];
  long r, c, nnz;
  if (f == NULL) return -1;
  do {
    if (fgets(line, sizeof line, f) == NULL) return -1;
  } while (line[0] == '%');
  if (sscanf(line, "%ld %ld %ld", &r, &c, &nnz) != 3 || r != N || c != N) return -1;
  int32_t *ri = malloc(sizeof(int32_t) * (size_t)nnz), *ci = malloc(sizeof(int32_t) * (size_t)nnz);
  float *w = malloc(sizeof(float) * (size_t)nnz);
  for (long i = 0; i < nnz; i++)
    if (fscanf(f, "%d %d %f", &ri[i], &ci[i], &w[i]) != 3) return -1;
  fclose(f);
  long at = 0;
  for (int k = 0, row0 = 0; k < 3; row0 += (int)chunk_rows[k], k++) {
    long lo = at;
    while (at < nnz && ri[at] - 1 < row0 + chunk_rows[k]) at++;
    int64_t bytes = tsr_k_csr_bytes(chunk_rows[k], at - lo, TSR_F32);
    tsr_k_csr v;
    graph[k].data = calloc(1, (size_t)bytes);
    graph[k].nbytes = (size_t)bytes;
    graph[k].meta = (tsr_meta){0};
    graph[k].meta.dtype = TSR_U8, graph[k].meta.ndim = 1, graph[k].meta.shape[0] = bytes;
    tsr_k_csr_init(graph[k].data, chunk_rows[k], N, at - lo, TSR_F32, &v);
    for (int64_t q = 0; q <= chunk_rows[k]; q++) v.indptr[q] = 0;
    for (long i = lo; i < at; i++) {
      v.indptr[ri[i] - 1 - row0 + 1]++;
      v.indices[i - lo] = ci[i] - 1;
      ((float *)v.values)[i - lo] = w[i];
    }
    for (int64_t q = 0; q < chunk_rows[k]; q++) v.indptr[q + 1] += v.indptr[q];
  }
  free(ri), free(ci), free(w);
  return at == nnz ? 0 : -1;
}

/* ---------- the quality measures ---------- */

static double dist2(const float *x, int i, int j, int d)
{
  double s = 0;
  for (int k = 0; k < d; k++) s += ((double)x[i * d + k] - x[j * d + k]) * ((double)x[i * d + k] - x[j * d + k]);
  return s;
}

static const double *sort_key;
static int by_key(const void *a, const void *b)
{
  double x = sort_key[*(const int *)a], y = sort_key[*(const int *)b];
  return x < y ? -1 : (x > y ? 1 : (*(const int *)a - *(const int *)b));
}

/* order[0..N) of all points by distance from i in x (d dims); i first. */
static void ranked(const float *x, int d, int i, int *order, double *dd)
{
  for (int j = 0; j < N; j++) dd[j] = j == i ? -1.0 : dist2(x, i, j, d), order[j] = j;
  sort_key = dd;
  qsort(order, N, sizeof *order, by_key);
}

/* sklearn.manifold.trustworthiness(X, Y, n_neighbors=k). */
static double trustworthiness(const float *y, int k)
{
  static int order[N], rank[N], eo[N];
  static double dd[N];
  double t = 0;
  for (int i = 0; i < N; i++) {
    ranked(pcs, NPC, i, order, dd);
    for (int r = 0; r < N; r++) rank[order[r]] = r;  /* i itself has rank 0 */
    ranked(y, 2, i, eo, dd);
    for (int q = 1; q <= k; q++) t += fmax(0.0, (double)rank[eo[q]] - k);
  }
  return 1.0 - t * (2.0 / (N * k * (2.0 * N - 3.0 * k - 1.0)));
}

static double label_agreement(const float *y, int k)
{
  static int eo[N];
  static double dd[N];
  long same = 0;
  for (int i = 0; i < N; i++) {
    ranked(y, 2, i, eo, dd);
    for (int q = 1; q <= k; q++) same += labels[eo[q]] == labels[i];
  }
  return (double)same / ((double)N * k);
}

/* ---------- running the ops ---------- */

static int run_op(const char *name, tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  int rc = tsr_op_run_cpu(tsr_op_find(name), p, in, n_in, out, err);
  tsr_params_clear(p);
  return rc;
}

/* spectral init -> plan -> layout; the embedding in *out. */
static int umap_run(const char *scheme, int64_t seed, tsr_buf *out, double *secs, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf init, plan, in[4];
  tsr_params_add_int(&p, "n", N), tsr_params_add_int(&p, "seed", seed);
  int rc = run_op("umap_spectral", &p, graph, 3, &init, err);
  if (rc != 0) return rc;
  memcpy(in, graph, sizeof graph), in[3] = init;
  tsr_params_add_int(&p, "n", N), tsr_params_add_int(&p, "seed", seed), tsr_params_add_int(&p, "n_epochs", 500);
  tsr_params_add_int(&p, "graph_chunks", 3), tsr_params_add_bool(&p, "scale_init", true);
  rc = run_op("umap_prepare", &p, in, 4, &plan, err);
  free(init.data);
  if (rc != 0) return rc;
  tsr_params_add_int(&p, "n", N), tsr_params_add_int(&p, "seed", seed), tsr_params_add_int(&p, "n_epochs", 500);
  tsr_params_add_str(&p, "scheme", scheme, strlen(scheme));
  clock_t t0 = clock();
  rc = run_op("umap_layout", &p, &plan, 1, out, err);
  *secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  free(plan.data);
  return rc;
}

TEST(find_ab_matches_umap_learn)
{
  double a, b;
  tsr_k_umap_find_ab(1.0, 0.5, &a, &b);
  ASSERT_NEAR(a, ref_a, 1e-4);
  ASSERT_NEAR(b, ref_b, 1e-4);
}

TEST(spectral_is_an_eigenbasis)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf out;
  tsr_errbuf err;
  tsr_params_add_int(&p, "n", N);
  ASSERT_OK(run_op("umap_spectral", &p, graph, 3, &out, &err));
  const float *y = out.data;
  double d00 = 0, d11 = 0, d01 = 0;
  for (int i = 0; i < N; i++) d00 += (double)y[2 * i] * y[2 * i], d11 += (double)y[2 * i + 1] * y[2 * i + 1], d01 += (double)y[2 * i] * y[2 * i + 1];
  free(out.data);
  ASSERT_NEAR(d00, 1.0, 1e-4);
  ASSERT_NEAR(d11, 1.0, 1e-4);
  ASSERT_NEAR(d01, 0.0, 1e-4);
}

static void check_scheme(const char *scheme)
{
  tsr_buf a, b;
  tsr_errbuf err;
  double secs, secs2;
  ASSERT_OK(umap_run(scheme, 0, &a, &secs, &err));
  ASSERT_OK(umap_run(scheme, 0, &b, &secs2, &err));
  ASSERT_TRUE(a.nbytes == (size_t)N * 8 && memcmp(a.data, b.data, a.nbytes) == 0);
  double t = trustworthiness(a.data, 10), g = label_agreement(a.data, 10);
  fprintf(stderr, "  %s: trustworthiness %.4f (umap-learn %.4f), label agreement %.4f (umap-learn %.4f), layout %.3f s CPU\n",
          scheme, t, ref_trust, g, ref_agree, secs);
  free(a.data), free(b.data);
  ASSERT_TRUE(t >= 0.9);
  ASSERT_TRUE(t >= ref_trust - 0.02);
  ASSERT_TRUE(g >= 0.8 * ref_agree);
}

TEST(sequential_keeps_structure) { check_scheme("sequential"); }
TEST(synchronous_keeps_structure) { check_scheme("synchronous"); }

TEST(bad_inputs_are_named)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf out, in[2] = {graph[0], graph[1]};
  tsr_errbuf err;
  /* Two chunks of 512 rows are not a 700-vertex graph. */
  tsr_params_add_int(&p, "n", N);
  ASSERT_EQ(run_op("umap_spectral", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "512 rows, expected 700");
  /* A graph chunk is not a plan. */
  tsr_params_add_int(&p, "n", N), tsr_params_add_int(&p, "n_epochs", 10);
  ASSERT_EQ(run_op("umap_layout", &p, graph, 1, &out, &err), TSR_EPROTO);
  ASSERT_CONTAINS(err.text, "not a UMAP plan");
  tsr_params_add_int(&p, "n", N), tsr_params_add_int(&p, "n_epochs", 10), tsr_params_add_str(&p, "scheme", "hogwild", 7);
  ASSERT_EQ(run_op("umap_layout", &p, graph, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "unknown scheme 'hogwild'");
  /* The init must have n rows. */
  tsr_buf init = {.data = calloc(100, 8), .nbytes = 800};
  init.meta.dtype = TSR_F32, init.meta.ndim = 2, init.meta.shape[0] = 100, init.meta.shape[1] = 2;
  tsr_buf pin[4] = {graph[0], graph[1], graph[2], init};
  tsr_params_add_int(&p, "n", N), tsr_params_add_int(&p, "n_epochs", 10), tsr_params_add_int(&p, "graph_chunks", 3);
  int rc = run_op("umap_prepare", &p, pin, 4, &out, &err);
  free(init.data);
  ASSERT_EQ(rc, TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "init chunks hold 100 rows");
}

int main(void)
{
  if (read_pcs() != 0 || read_labels() != 0 || read_reference() != 0 || read_graph() != 0) {
    fprintf(stderr, "cannot read the pbmc68k data (%s) or the fixtures (%s)\n", TSR_PBMC_DATA, TSR_UMAP_FIXTURES);
    return 1;
  }
  RUN(find_ab_matches_umap_learn);
  RUN(spectral_is_an_eigenbasis);
  RUN(sequential_keeps_structure);
  RUN(synchronous_keeps_structure);
  RUN(bad_inputs_are_named);
  return kit_summary();
}
