/* Genotype PCA through real daemons: compressed persist (blosc and 2-bit
 * packed chunks give the same bytes as a plain u8 persist, in fewer
 * bytes), the standardization folded into the products (the same
 * eigenvalues as the standardized matrix stored, for any chunking), and
 * the real data sets of ../shared/data/hapmap3_1kg_genotypes against the
 * reference results of its SOURCE.md. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/linalg.h"
#include "tessera/plink.h"

static cluster c;
static tsr_client *client;
static char data_dir[512], tmpdir[128];

#define HM3 "HM3_thinned_autosomal_overlap"
#define KG "1kg.ref.phase1_release_v3.20101123_thinned_autosomal_overlap"

/* ---------- helpers ---------- */

static void *fetch_bytes(tsr_array_ctx *ctx, const tsr_array *a, size_t *n_p)
{
  size_t n = (size_t)tsr_array_size(a) * tsr_dtype_size(tsr_array_dtype(a));
  void *out = malloc(n ? n : 1);
  int rc = tsr_compute(ctx, a, out, n, 120000);
  if (rc != 0) {
    fprintf(stderr, "  compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
    free(out);
    return NULL;
  }
  *n_p = n;
  return out;
}

/* The scheduler's count of result bytes held in the workers' memory. */
static uint64_t bytes_held(void)
{
  tsr_cluster_info *info = NULL;
  uint64_t held = 0;
  if (tsr_cluster_info_get(client, 10000, &info) != 0) return 0;
  for (size_t i = 0; i < info->n_workers; i++) held += info->workers[i].memory_held;
  tsr_cluster_info_destroy(&info);
  return held;
}

typedef struct svd_bytes {
  void *u, *s, *v;
  size_t nu, ns, nv;
} svd_bytes;

static int svd_of(tsr_array_ctx *ctx, const tsr_array *x, svd_bytes *out)
{
  tsr_svd_opts o = TSR_SVD_OPTS_DEFAULT;
  o.n_power_iter = 2;
  tsr_array *u = NULL, *s = NULL, *v = NULL;
  int rc = tsr_svd_compressed(ctx, x, 5, &o, &u, &s, &v);
  if (rc != 0) return rc;
  out->u = fetch_bytes(ctx, u, &out->nu);
  out->s = fetch_bytes(ctx, s, &out->ns);
  out->v = fetch_bytes(ctx, v, &out->nv);
  return out->u && out->s && out->v ? 0 : TSR_ETASK;
}

static bool same_svd(const svd_bytes *a, const svd_bytes *b)
{
  return a->nu == b->nu && a->ns == b->ns && a->nv == b->nv && memcmp(a->u, b->u, a->nu) == 0 &&
         memcmp(a->s, b->s, a->ns) == 0 && memcmp(a->v, b->v, a->nv) == 0;
}

static void free_svd(svd_bytes *a) { free(a->u), free(a->s), free(a->v); }

/* ---------- compressed persist ---------- */

TEST(blosc_and_packed_persist_give_the_raw_svd_in_fewer_bytes)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *raw = NULL, *bl = NULL, *pk = NULL, *blp = NULL, *pkp = NULL;
  int64_t shape[2] = {3000, 900}, ch[2] = {700, 300};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_randint(ctx, 11, 0, 3, TSR_U8, 2, shape, ch, &x));
  uint64_t h0 = bytes_held();
  ASSERT_OK(tsr_persist(ctx, x, 60000, &raw));
  uint64_t h1 = bytes_held();
  tsr_compress_opts bo = TSR_COMPRESS_OPTS_DEFAULT, po = TSR_COMPRESS_OPTS_DEFAULT;
  po.encoding = TSR_ENC_PACKED2;
  ASSERT_OK(tsr_compress(ctx, raw, &bo, &bl));
  ASSERT_OK(tsr_persist(ctx, bl, 60000, &blp));
  uint64_t h2 = bytes_held();
  ASSERT_OK(tsr_compress(ctx, raw, &po, &pk));
  ASSERT_OK(tsr_persist(ctx, pk, 60000, &pkp));
  uint64_t h3 = bytes_held();
  fprintf(stderr, "  held: raw %llu, blosc %llu, packed %llu bytes\n", (unsigned long long)(h1 - h0),
          (unsigned long long)(h2 - h1), (unsigned long long)(h3 - h2));
  ASSERT_EQ(h1 - h0, (uint64_t)(3000 * 900));
  ASSERT_TRUE(h2 - h1 < (h1 - h0) / 2);            /* 3 values in 8 bits: bitshuffle + zstd */
  ASSERT_EQ(h3 - h2, (uint64_t)(3000 * 900 / 4));
  ASSERT_EQ(tsr_array_encoding(blp), TSR_ENC_BLOSC);
  ASSERT_EQ(tsr_array_encoding(pkp), TSR_ENC_PACKED2);
  svd_bytes a = {0}, b = {0}, d = {0};
  ASSERT_OK(svd_of(ctx, raw, &a));
  ASSERT_OK(svd_of(ctx, blp, &b));
  ASSERT_OK(svd_of(ctx, pkp, &d));
  ASSERT_TRUE(same_svd(&a, &b));
  ASSERT_TRUE(same_svd(&a, &d));
  /* and the elements read back unchanged */
  size_t n1 = 0, n2 = 0;
  void *e1 = fetch_bytes(ctx, raw, &n1), *e2 = fetch_bytes(ctx, blp, &n2);
  ASSERT_TRUE(e1 && e2 && n1 == n2 && memcmp(e1, e2, n1) == 0);
  free(e1), free(e2);
  free_svd(&a), free_svd(&b), free_svd(&d);
  tsr_compress_opts bad = TSR_COMPRESS_OPTS_DEFAULT;
  bad.cname = "snappy";
  ASSERT_EQ(tsr_compress(ctx, raw, &bad, &bl), TSR_EINVAL);
  ASSERT_TRUE(strstr(tsr_errmsg(), "unknown cname 'snappy'") != NULL);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- the standardization folded ---------- */

/* Eigenvalues of a PCA of x (k of them) into ev; 0 or an error. */
static int eigenvalues(tsr_array_ctx *ctx, const tsr_array *x, const tsr_pca_opts *o, double *ev)
{
  tsr_array *e = NULL, *s = NULL, *l = NULL;
  int rc = tsr_pca(ctx, x, o, &e, &s, &l);
  if (rc == 0) rc = tsr_compute(ctx, s, ev, (size_t)o->k * sizeof *ev, 120000);
  if (rc != 0) fprintf(stderr, "  pca: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  return rc;
}

/* A genotype-like u8 matrix with missing values (3) from a seed. */
static int genotypes(tsr_array_ctx *ctx, const int64_t *shape, const int64_t *chunks, tsr_array **x_p)
{
  tsr_array *g = NULL;
  int rc = tsr_randint(ctx, 3, 0, 4, TSR_U8, 2, shape, chunks, &g);  /* a quarter missing */
  return rc == 0 ? tsr_with_missing(ctx, g, TSR_GENO_MISSING, x_p) : rc;
}

TEST(folded_standardization_equals_the_stored_matrix_for_any_chunking)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *z = NULL, *zp = NULL, *x2 = NULL, *pk = NULL, *pkp = NULL;
  int64_t shape[2] = {400, 1500}, ch1[2] = {400, 500}, ch2[2] = {133, 211};
  tsr_pca_opts o = TSR_PCA_OPTS_DEFAULT;
  o.k = 4;
  o.method = TSR_PCA_EXACT;
  double exact[4], folded1[4], folded2[4], packed[4], stored[4];
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(genotypes(ctx, shape, ch1, &x));
  ASSERT_OK(genotypes(ctx, shape, ch2, &x2));
  ASSERT_OK(eigenvalues(ctx, x, &o, exact));
  o.method = TSR_PCA_COMPRESSED;
  o.svd.n_power_iter = 6;
  ASSERT_OK(eigenvalues(ctx, x, &o, folded1));
  ASSERT_OK(eigenvalues(ctx, x2, &o, folded2));
  tsr_compress_opts po = TSR_COMPRESS_OPTS_DEFAULT;
  po.encoding = TSR_ENC_PACKED2;
  ASSERT_OK(tsr_compress(ctx, x, &po, &pk));
  ASSERT_OK(tsr_persist(ctx, pk, 60000, &pkp));
  ASSERT_EQ(tsr_array_missing(pkp), TSR_GENO_MISSING);
  ASSERT_OK(eigenvalues(ctx, pkp, &o, packed));
  /* Z stored: persisted, so the products read it as it is */
  ASSERT_OK(tsr_standardize(ctx, x, TSR_STANDARDIZE_BINOM2, &z));
  ASSERT_OK(tsr_persist(ctx, z, 60000, &zp));
  o.standardize = TSR_STANDARDIZE_NONE;
  ASSERT_OK(eigenvalues(ctx, zp, &o, stored));
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ(folded1[i], packed[i]);                            /* packed and u8: the same bytes */
    ASSERT_TRUE(fabs(folded1[i] - folded2[i]) <= 1e-12 * folded1[0]);  /* any chunking */
    ASSERT_TRUE(fabs(folded1[i] - stored[i]) <= 1e-12 * folded1[0]);
    /* a flat random spectrum: the randomized values stay at or below the exact ones */
    ASSERT_TRUE(folded1[i] <= exact[i] * (1 + 1e-12) && folded1[i] >= 0.9 * exact[i]);
  }
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- the real data sets (../shared/data/hapmap3_1kg_genotypes) ---------- */

/* Column `col` of an eigenvec file (rows in .fam order) into v (n rows). */
static int eigenvec_column(const char *path, int col, double *v, int n)
{
  return read_column(path, col, v, n) == n ? 0 : -1;
}

static double abs_corr(const double *a, const double *b, int n)
{
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (int i = 0; i < n; i++) ma += a[i] / n, mb += b[i] / n;
  for (int i = 0; i < n; i++) sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
  return fabs(sab) / sqrt(saa * sbb);
}

/* Runs tsr-pca on a data set (two iterations with a wider span: 90
 * oversamples); 0 when it exited 0. */
static int tsr_pca_run(const char *set, const char *out, const char *method, const char *power)
{
  char prefix[700], env[400], text[4096];
  snprintf(prefix, sizeof prefix, "%s/%s", data_dir, set);
  snprintf(env, sizeof env, "TESSERA_SCHEDULER=%s", c.address);
  const char *over = strcmp(power, "2") == 0 ? "90" : "10";
  const char *argv[] = {cluster_bin("tsr-pca"), "--bed", prefix, "--k", "10", "--method", method,
                        "--power-iters", power, "--oversamples", over, "--out", out, NULL};
  int rc = run_capture(argv, env, text, sizeof text, 300);
  if (rc != 0) fprintf(stderr, "  tsr-pca exit %d:\n%s\n", rc, text);
  return rc;
}

/* tsr-pca's results for one data set against the references: eigenvalues
 * within eig_tol of the exact binom2 column (the first top_exact of them;
 * the rest within loose), within 0.5% + eig_tol of PLINK's, and the top 5
 * eigenvectors with |correlation| >= 0.999 to PLINK's. */
static void check_set(const char *set, const char *tag, int n, const char *method, const char *power, int top_exact,
                      double eig_tol, double loose)
{
  char out[300], path[800];
  snprintf(out, sizeof out, "%s/%s-%s-%s", tmpdir, tag, method, power);
  ASSERT_EQ(tsr_pca_run(set, out, method, power), 0);
  double ev[10], exact[10], plink[10];
  snprintf(path, sizeof path, "%s.eigenval", out);
  ASSERT_EQ(read_column(path, 0, ev, 10), 10);
  snprintf(path, sizeof path, "%s/reference/%s.exact_eigh_binom2.txt", data_dir, tag);
  ASSERT_EQ(read_column(path, 1, exact, 10), 10);
  snprintf(path, sizeof path, "%s/reference/%s.plink2_pca20.eigenval", data_dir, tag);
  ASSERT_EQ(read_column(path, 0, plink, 10), 10);
  double worst = 0, worst_plink = 0;
  for (int i = 0; i < 10; i++) {
    double e = fabs(ev[i] - exact[i]) / exact[i];
    worst = fmax(worst, i < top_exact ? e : 0);
    worst_plink = fmax(worst_plink, fabs(ev[i] - plink[i]) / plink[i]);
    ASSERT_TRUE(e <= (i < top_exact ? eig_tol : loose));
  }
  fprintf(stderr, "  %s %s q=%s: eigenvalues within %.2e of exact (top %d), %.2e of PLINK\n", tag, method, power, worst,
          top_exact, worst_plink);
  ASSERT_TRUE(worst_plink <= 0.005 + (top_exact == 10 ? eig_tol : loose));
  double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  for (int pc = 0; pc < 5; pc++) {
    snprintf(path, sizeof path, "%s.eigenvec", out);
    ASSERT_OK(eigenvec_column(path, 2 + pc, a, n));
    snprintf(path, sizeof path, "%s/reference/%s.plink1.9_pca20.eigenvec", data_dir, tag);
    ASSERT_OK(eigenvec_column(path, 2 + pc, b, n));
    double r = abs_corr(a, b, n);
    if (r < 0.999) fprintf(stderr, "  %s PC%d: |correlation| %.6f\n", tag, pc + 1, r);
    ASSERT_TRUE(r >= 0.999);
  }
  free(a), free(b);
}

TEST(hapmap3_and_1000_genomes_match_the_reference_pca)
{
  /* exact; compressed (block Krylov) with six iterations, tsr-pca's
   * default: both to 1e-4 */
  check_set(HM3, "hm3", 957, "exact", "2", 10, 1e-4, 0);
  check_set(KG, "1kg", 1092, "exact", "2", 10, 1e-4, 0);
  check_set(HM3, "hm3", 957, "compressed", "6", 10, 1e-4, 0);
  check_set(KG, "1kg", 1092, "compressed", "6", 10, 1e-4, 0);
  /* two iterations (a 300-column span): the population PCs to 1e-3, the
   * flat tail (PCs within 2% of each other) to 2% (docs/pca.md) */
  check_set(HM3, "hm3", 957, "compressed", "2", 5, 1e-3, 0.02);
  check_set(KG, "1kg", 1092, "compressed", "2", 3, 1e-3, 0.02);
}

/* Eigenvalues of the exact PCA of a data set read with the given chunks. */
static int exact_eigenvalues(tsr_array_ctx *ctx, const char *set, const int64_t *chunks, tsr_pca_method method,
                             double *ev)
{
  char prefix[700];
  snprintf(prefix, sizeof prefix, "%s/%s", data_dir, set);
  tsr_array *x = NULL;
  tsr_pca_opts o = TSR_PCA_OPTS_DEFAULT;
  o.method = method;
  int rc = tsr_from_plink(ctx, prefix, chunks, &x);
  return rc == 0 ? eigenvalues(ctx, x, &o, ev) : rc;
}

TEST(any_chunking_gives_the_same_eigenvalues)
{
  static const int64_t chunkings[][2] = {{957, 14079}, {320, 4096}, {101, 999}};
  tsr_array_ctx *ctx = NULL;
  double ref[10], ev[10], cref[10], cev[10];
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(exact_eigenvalues(ctx, HM3, NULL, TSR_PCA_EXACT, ref));
  ASSERT_OK(exact_eigenvalues(ctx, HM3, NULL, TSR_PCA_COMPRESSED, cref));
  for (size_t i = 0; i < sizeof chunkings / sizeof chunkings[0]; i++) {
    ASSERT_OK(exact_eigenvalues(ctx, HM3, chunkings[i], TSR_PCA_EXACT, ev));
    ASSERT_OK(exact_eigenvalues(ctx, HM3, chunkings[i], TSR_PCA_COMPRESSED, cev));
    double we = 0, wc = 0;
    for (int j = 0; j < 10; j++) we = fmax(we, fabs(ev[j] - ref[j]) / ref[j]), wc = fmax(wc, fabs(cev[j] - cref[j]) / cref[j]);
    fprintf(stderr, "  chunks %lld x %lld: exact within %.2e, compressed within %.2e\n", (long long)chunkings[i][0],
            (long long)chunkings[i][1], we, wc);
    ASSERT_TRUE(we <= 1e-12);
    ASSERT_TRUE(wc <= 1e-12);
  }
  tsr_array_ctx_destroy(&ctx);
}

TEST(tsr_pca_names_a_bad_input)
{
  char env[400], text[4096], prefix[400];
  snprintf(env, sizeof env, "TESSERA_SCHEDULER=%s", c.address);
  snprintf(prefix, sizeof prefix, "%s/nothing-here", tmpdir);
  const char *argv[] = {cluster_bin("tsr-pca"), "--bed", prefix, "--out", prefix, NULL};
  ASSERT_EQ(run_capture(argv, env, text, sizeof text, 60), 1);
  const char *bad[] = {cluster_bin("tsr-pca"), "--bed", prefix, "--method", "magic", NULL};
  ASSERT_EQ(run_capture(bad, env, text, sizeof text, 60), 2);
  const char *two[] = {cluster_bin("tsr-pca"), "--bed", prefix, "--npy", prefix, NULL};
  ASSERT_EQ(run_capture(two, env, text, sizeof text, 60), 2);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  snprintf(data_dir, sizeof data_dir, "%s", plink_data_dir());
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-pca-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  if (cluster_start(&c, 2, 1, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(blosc_and_packed_persist_give_the_raw_svd_in_fewer_bytes);
  RUN(folded_standardization_equals_the_stored_matrix_for_any_chunking);
  RUN(hapmap3_and_1000_genomes_match_the_reference_pca);
  RUN(any_chunking_gives_the_same_eigenvalues);
  RUN(tsr_pca_names_a_bad_input);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
