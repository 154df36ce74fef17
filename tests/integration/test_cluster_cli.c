/* tsr-cluster end to end on a real cluster: pbmc68k's raw counts through
 * the whole pipeline, its labels against scanpy's own run of the same
 * pipeline (scanpy from PyPI in build/test-venv-scanpy, made by the
 * fixture test; tests/singlecell/scanpy_pipeline.py), the files it
 * writes, and bad input refused by name while the daemons keep serving. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/cluster.h"

static char out[1 << 16];
static char tmp[256];

static const char *pbmc(const char *file)
{
  static char path[4][1024];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, 1024, "%s/pbmc68k_reduced_10x/%s", TSR_SHARED_DATA, file);
  return p;
}

static const char *tmpfile_(const char *name)
{
  static char path[4][512];
  static int next;
  char *p = path[next++ % 4];
  snprintf(p, 512, "%s/%s", tmp, name);
  return p;
}

/* "barcode<TAB>label" lines (after an optional header) into parallel arrays. */
static int64_t read_labels(const char *path, char ***names_p, int32_t **labels_p)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[1024], **names = NULL;
  int32_t *labels = NULL;
  int64_t n = 0, cap = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    char *tab = strchr(line, '\t');
    if (tab == NULL || strncmp(line, "barcode\t", 8) == 0) continue;
    *tab = '\0';
    if (n == cap) {
      cap = cap ? 2 * cap : 1024;
      names = realloc(names, (size_t)cap * sizeof *names), labels = realloc(labels, (size_t)cap * sizeof *labels);
    }
    names[n] = strdup(line), labels[n] = atoi(tab + 1), n++;
  }
  fclose(f);
  *names_p = names, *labels_p = labels;
  return n;
}

static void free_names(char **names, int64_t n)
{
  for (int64_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

static int count_lines(const char *path)
{
  FILE *f = fopen(path, "r");
  int n = 0, c;
  while (f != NULL && (c = fgetc(f)) != EOF) n += c == '\n';
  if (f) fclose(f);
  return f ? n : -1;
}

static bool file_starts_with(const char *path, const char *magic, size_t len)
{
  char buf[64] = {0};
  FILE *f = fopen(path, "rb");
  size_t got = f ? fread(buf, 1, len, f) : 0;
  if (f) fclose(f);
  return got == len && memcmp(buf, magic, len) == 0;
}

/* The whole pipeline from raw counts; ARI against scanpy's run >= 0.6. */
TEST(pbmc68k_counts_whole_pipeline_matches_scanpy)
{
  const char *argv[] = {cluster_bin("tessera"), "local", "--cpu-workers", "2", "--threads-per-worker", "1", "--",
                        cluster_bin("tsr-cluster"), "--mtx", pbmc("counts_genes_x_cells.mtx"), "--transpose",
                        "--barcodes", pbmc("barcodes.tsv"), "--umap", "--out", tmpfile_("pbmc"), NULL};
  ASSERT_EQ(run_capture(argv, NULL, out, sizeof out, 300), 0);
  printf("%s", out);
  const char *steps[] = {"read", "pp.filter_cells", "pp.filter_genes", "pp.normalize_total", "pp.log1p",
                         "pp.highly_variable_genes", "pp.scale", "tl.pca", "pp.neighbors", "tl.leiden", "tl.umap"};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) ASSERT_CONTAINS(out, steps[i]);
  ASSERT_CONTAINS(out, "693 of 700 cells kept");

  const char *py = getenv("TSR_SCANPY_PYTHON");
  ASSERT_TRUE(py != NULL);
  char script[1024];
  snprintf(script, sizeof script, "%s/tests/singlecell/scanpy_pipeline.py", TSR_SOURCE_DIR);
  const char *ref[] = {py, script, pbmc("counts_genes_x_cells.mtx"), pbmc("barcodes.tsv"), tmpfile_("scanpy.tsv"),
                       NULL};
  ASSERT_EQ(run_capture(ref, NULL, out, sizeof out, 600), 0);

  char **ours = NULL, **theirs = NULL;
  int32_t *a = NULL, *b = NULL;
  int64_t n = read_labels(tmpfile_("pbmc.clusters.tsv"), &ours, &a);
  int64_t m = read_labels(tmpfile_("scanpy.tsv"), &theirs, &b);
  ASSERT_EQ(n, 693);
  ASSERT_EQ(m, n);
  for (int64_t i = 0; i < n; i++) ASSERT_TRUE(strcmp(ours[i], theirs[i]) == 0);  /* same cells, same order */
  double ari = tsr_adjusted_rand_index(a, b, n);
  printf("ARI of tsr-cluster's Leiden labels against scanpy's: %.4f\n", ari);
  ASSERT_TRUE(ari >= 0.6);
  free_names(ours, n), free_names(theirs, m), free(a), free(b);

  ASSERT_TRUE(file_starts_with(tmpfile_("pbmc.pca.npy"), "\x93NUMPY", 6));
  ASSERT_TRUE(file_starts_with(tmpfile_("pbmc.neighbors.mtx"), "%%MatrixMarket matrix coordinate real general", 45));
  ASSERT_TRUE(file_starts_with(tmpfile_("pbmc.umap.png"), "\x89PNG\r\n\x1a\n", 8));
  ASSERT_EQ(count_lines(tmpfile_("pbmc.umap.tsv")), 694);
}

/* Dense input used as it is (--n-pcs 0), with k-means and Louvain. */
TEST(npy_input_kmeans_and_louvain)
{
  /* The stored 50 PCs of pbmc68k as a .npy, written here. */
  FILE *in = fopen(pbmc("X_pca_stored.tsv"), "r"), *npy = fopen(tmpfile_("pcs.npy"), "wb");
  ASSERT_TRUE(in != NULL && npy != NULL);
  char header[128];
  int hl = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (700, 50), }");
  while ((10 + hl + 1) % 64 != 0) header[hl++] = ' ';
  header[hl++] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
  fwrite(pre, 1, 10, npy), fwrite(header, 1, (size_t)hl, npy);
  int values = 0;
  char tok[64];
  while (fscanf(in, "%63s", tok) == 1) {
    char *end;
    float v = strtof(tok, &end);
    if (*end == '\0') fwrite(&v, 4, 1, npy), values++;
  }
  fclose(in), fclose(npy);
  ASSERT_EQ(values, 700 * 50);
  const char *km[] = {cluster_bin("tessera"), "local", "--cpu-workers", "1", "--", cluster_bin("tsr-cluster"),
                      "--npy", tmpfile_("pcs.npy"), "--n-pcs", "0", "--method", "kmeans", "--kmeans-k", "8",
                      "--out", tmpfile_("km"), NULL};
  ASSERT_EQ(run_capture(km, NULL, out, sizeof out, 120), 0);
  ASSERT_CONTAINS(out, "inertia");
  ASSERT_EQ(count_lines(tmpfile_("km.clusters.tsv")), 701);
  const char *lv[] = {cluster_bin("tessera"), "local", "--cpu-workers", "1", "--", cluster_bin("tsr-cluster"),
                      "--npy", tmpfile_("pcs.npy"), "--n-pcs", "0", "--method", "louvain", "--neighbors", "10",
                      "--metric", "cosine", "--out", tmpfile_("lv"), NULL};
  ASSERT_EQ(run_capture(lv, NULL, out, sizeof out, 120), 0);
  ASSERT_CONTAINS(out, "tl.louvain");
  ASSERT_CONTAINS(out, "modularity 0.");
}

/* Bad input: named errors, non-zero exits, and the same daemons then run
 * a good job. */
TEST(bad_input_is_named_and_the_cluster_keeps_serving)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 2, NULL, NULL));
  char env[512];
  snprintf(env, sizeof env, "TESSERA_SCHEDULER=%s", c.address);
  const char *too_many[] = {cluster_bin("tsr-cluster"), "--mtx", pbmc("counts_genes_x_cells.mtx"), "--transpose",
                            "--neighbors", "5000", "--out", tmpfile_("bad"), NULL};
  int rc = run_capture(too_many, env, out, sizeof out, 120);
  ASSERT_TRUE(rc != 0);
  ASSERT_CONTAINS(out, "pp.neighbors");
  ASSERT_CONTAINS(out, "5000");

  FILE *f = fopen(tmpfile_("broken.mtx"), "w");
  fprintf(f, "%%%%MatrixMarket matrix array real general\n3 3\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
  fclose(f);
  const char *broken[] = {cluster_bin("tsr-cluster"), "--mtx", tmpfile_("broken.mtx"), "--out", tmpfile_("bad"),
                          NULL};
  ASSERT_TRUE(run_capture(broken, env, out, sizeof out, 60) != 0);
  ASSERT_CONTAINS(out, "broken.mtx");

  f = fopen(tmpfile_("nan.npy"), "wb");
  const char hdr[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (20, 2), }";
  char header[64];
  memset(header, ' ', sizeof header);
  memcpy(header, hdr, sizeof hdr - 1);
  header[63] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 64, 0};
  fwrite(pre, 1, 10, f), fwrite(header, 1, 64, f);
  for (int i = 0; i < 40; i++) {
    float v = i == 7 ? NAN : (float)i;
    fwrite(&v, 4, 1, f);
  }
  fclose(f);
  const char *nan_in[] = {cluster_bin("tsr-cluster"), "--npy", tmpfile_("nan.npy"), "--n-pcs", "0", "--neighbors",
                          "5", "--out", tmpfile_("bad"), NULL};
  ASSERT_TRUE(run_capture(nan_in, env, out, sizeof out, 60) != 0);
  ASSERT_CONTAINS(out, "NaN");

  const char *good[] = {cluster_bin("tsr-cluster"), "--mtx", pbmc("counts_genes_x_cells.mtx"), "--transpose",
                        "--method", "louvain", "--out", tmpfile_("good"), NULL};
  rc = run_capture(good, env, out, sizeof out, 120);
  cluster_stop(&c, rc != 0);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "tl.louvain");
}

int main(void)
{
  snprintf(tmp, sizeof tmp, "/tmp/tsr-cluster-cli-XXXXXX");
  if (mkdtemp(tmp) == NULL) return 1;
  RUN(pbmc68k_counts_whole_pipeline_matches_scanpy);
  RUN(npy_input_kmeans_and_louvain);
  RUN(bad_input_is_named_and_the_cluster_keeps_serving);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  return kit_summary();
}
