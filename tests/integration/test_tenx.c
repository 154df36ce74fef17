/* 10x Genomics and Matrix Market readers (tessera/tenx.h) through real
 * daemons: every file of ../shared/data/tenx_format_fixtures (Cell Ranger
 * v3 and v2 HDF5, v3 gzip and v2 plain Matrix Market directories) and the
 * pbmc68k counts read to the same matrix, barcodes and features as
 * scanpy's readers (tests/data/tenx: reference values from scanpy, see
 * its README), in several chunkings, with canonical CSR chunks; a file
 * in no order with repeated entries and zeros; and each refused file
 * with its message (on the client, and on a worker for a file changed
 * after the graph was built), after which the cluster still serves. */
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/tenx.h"

static cluster c;
static tsr_client *client;
static char tmpdir[128];
static char data_dir[512];

#define FIXTURES "tenx_format_fixtures"
#define MAX_SUMS 4096

/* ---------- helpers ---------- */

static const char *data_path(const char *rel)
{
  static char buf[4][700];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 700, "%s/%.150s", data_dir, rel);
  return p;
}

static const char *tmp_path(const char *name)
{
  static char buf[4][400];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 400, "%s/%.200s", tmpdir, name);
  return p;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

#define FNV_OFFSET 0xCBF29CE484222325ull

/* The value of key in the reference file NAME.txt, or NULL. */
static const char *ref_value(const char *name, const char *key)
{
  static char value[4][512];
  static int next;
  char path[700], line[1024];
  snprintf(path, sizeof path, "%s/%s.txt", TSR_TENX_REF, name);
  FILE *f = fopen(path, "r");
  char *out = NULL;
  size_t klen = strlen(key);
  while (f != NULL && out == NULL && fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
      out = value[next++ % 4];
      snprintf(out, 512, "%s", line + klen + 1);
      out[strcspn(out, "\n")] = '\0';
    }
  if (f != NULL) fclose(f);
  return out;
}

static double ref_num(const char *name, const char *key)
{
  const char *v = ref_value(name, key);
  return v != NULL ? strtod(v, NULL) : NAN;
}

/* The dense matrix of x (decompressed on the cluster), or NULL. */
static float *dense_of(tsr_array_ctx *ctx, const tsr_array *x)
{
  tsr_array *d = NULL;
  size_t n = (size_t)tsr_array_size(x);
  float *buf = malloc(n * sizeof *buf + 1);
  int rc = tsr_decompress(ctx, x, &d);
  if (rc == 0) rc = tsr_compute(ctx, d, buf, n * sizeof *buf, 60000);
  if (rc != 0) {
    fprintf(stderr, "  compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
    free(buf);
    return NULL;
  }
  return buf;
}

/* ---------- comparing with scanpy ---------- */

/* One list of names against the reference's count, first, last and hash. */
static void check_names(const char *name, const char *key, char *const *got, int64_t n)
{
  char k[64];
  snprintf(k, sizeof k, "%s_count", key);
  int64_t want = (int64_t)ref_num(name, k);
  if (want == 0) {
    ASSERT_TRUE(got == NULL);
    return;
  }
  ASSERT_TRUE(got != NULL);
  ASSERT_EQ(n, want);
  uint64_t h = FNV_OFFSET;
  for (int64_t i = 0; i < n; i++) h = fnv1a(fnv1a(h, got[i], strlen(got[i])), "\n", 1);
  char hex[32];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  snprintf(k, sizeof k, "%s_first", key);
  ASSERT_STREQ(got[0], ref_value(name, k));
  snprintf(k, sizeof k, "%s_last", key);
  ASSERT_STREQ(got[n - 1], ref_value(name, k));
  snprintf(k, sizeof k, "%s_fnv1a64", key);
  ASSERT_STREQ(hex, ref_value(name, k));
}

/* Row or column sums of the dense n x m matrix against NAME.SUFFIX. */
static int sums_match(const char *name, const char *suffix, const float *x, int64_t n, int64_t m, bool rows)
{
  static double want[MAX_SUMS];
  char path[700];
  snprintf(path, sizeof path, "%s/%s.%s", TSR_TENX_REF, name, suffix);
  int64_t len = rows ? n : m;
  if (read_column(path, 0, want, MAX_SUMS) != len) return 0;
  for (int64_t k = 0; k < len; k++) {
    double s = 0;
    for (int64_t t = 0; t < (rows ? m : n); t++) s += rows ? x[k * m + t] : x[t * m + k];
    if (s != want[k]) {
      fprintf(stderr, "  %s %lld: %g, scanpy %g\n", suffix, (long long)k, s, want[k]);
      return 0;
    }
  }
  return 1;
}

/* The dense matrix against the reference: shape, counts, sums, bytes. */
static void check_matrix(const char *name, const float *x, int64_t n, int64_t m)
{
  ASSERT_EQ(n, (int64_t)ref_num(name, "n_cells"));
  ASSERT_EQ(m, (int64_t)ref_num(name, "n_genes"));
  int64_t nonzeros = 0;
  double total = 0, weighted = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < m; j++) {
      double v = x[i * m + j];
      nonzeros += v != 0;
      total += v;
      weighted += v * (double)(1 + (31 * i + 17 * j) % 101);
    }
  ASSERT_EQ(nonzeros, (int64_t)ref_num(name, "nonzeros"));
  ASSERT_NEAR(total, ref_num(name, "total"), 0);
  ASSERT_NEAR(weighted, ref_num(name, "weighted_sum"), 0);
  char hex[32];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a(FNV_OFFSET, x, (size_t)(n * m) * sizeof *x));
  ASSERT_STREQ(hex, ref_value(name, "dense_fnv1a64"));
  ASSERT_TRUE(sums_match(name, "cell_sums.txt", x, n, m, true));
  ASSERT_TRUE(sums_match(name, "gene_sums.txt", x, n, m, false));
}

/* What a CSR chunk key holds (tessera/array.h, TSR_ENC_CSR): the header,
 * and canonical rows (columns strictly increasing, no stored zero). */
static int chunk_is_canonical(const tsr_array *p, int64_t i, int64_t rows, int64_t cols)
{
  int64_t idx[2] = {i, 0};
  tsr_chunk *ch = NULL;
  if (tsr_gather(client, tsr_array_chunk_key(p, idx), 30000, &ch) != 0) return 0;
  const unsigned char *b = ch->data;
  int64_t h[3];
  int ok = ch->dtype == TSR_U8 && ch->nbytes >= 32 && memcmp(b, "TCSR", 4) == 0 && b[5] == TSR_F32;
  if (ok) memcpy(h, b + 8, 24);
  ok = ok && h[0] == rows && h[1] == cols && ch->nbytes >= 32 + 8 * (size_t)(rows + 1) + 8 * (size_t)h[2];
  const int64_t *ip = ok ? (const int64_t *)(b + 32) : NULL;
  const int32_t *ix = ok ? (const int32_t *)(b + 32 + 8 * (rows + 1)) : NULL;
  const float *v = ok ? (const float *)(b + 32 + 8 * (rows + 1) + (4 * h[2] + 7) / 8 * 8) : NULL;
  for (int64_t r = 0; ok && r < rows; r++)
    for (int64_t k = ip[r]; ok && k < ip[r + 1]; k++)
      ok = ix[k] >= 0 && ix[k] < cols && (k == ip[r] || ix[k] > ix[k - 1]) && v[k] != 0.0f;
  ok = ok && ip[0] == 0 && ip[rows] == h[2];
  tsr_chunk_destroy(&ch);
  return ok;
}

typedef int (*reader_fn)(tsr_array_ctx *, const char *, int64_t, tsr_array **, tsr_tenx_info *);

/* Reads path with row_chunk, persists it, checks every chunk, the
 * matrix and the names against reference NAME. */
static void check_read_names(const char *name, reader_fn read, const char *path, int64_t row_chunk, int64_t want_chunks,
                             bool names)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *p = NULL;
  tsr_tenx_info info;
  memset(&info, 0, sizeof info);
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  int rc = read(ctx, path, row_chunk, &x, &info);
  if (rc != 0) fprintf(stderr, "  %s: %s\n", path, tsr_errmsg());
  ASSERT_OK(rc);
  int64_t n = tsr_array_dim(x, 0), m = tsr_array_dim(x, 1);
  ASSERT_EQ(tsr_array_dtype(x), TSR_F32);
  ASSERT_EQ(tsr_array_encoding(x), TSR_ENC_CSR);
  ASSERT_EQ(tsr_array_nchunks(x, 1), 1);
  if (want_chunks > 0) ASSERT_EQ(tsr_array_nchunks(x, 0), want_chunks);
  ASSERT_EQ(info.n_cells, n);
  ASSERT_EQ(info.n_genes, m);
  ASSERT_OK(tsr_persist(ctx, x, 60000, &p));
  for (int64_t i = 0; i < tsr_array_nchunks(p, 0); i++) {
    int64_t r = tsr_array_chunk(p, 0), rows = (i + 1) * r > n ? n - i * r : r;
    ASSERT_TRUE(chunk_is_canonical(p, i, rows, m));
  }
  float *dense = dense_of(ctx, p);
  ASSERT_TRUE(dense != NULL);
  check_matrix(name, dense, n, m);
  free(dense);
  if (kit_current_failed) return;
  if (!names) ASSERT_TRUE(info.barcodes == NULL && info.gene_ids == NULL && info.gene_names == NULL);
  if (names) check_names(name, "barcodes", info.barcodes, n);
  if (names) check_names(name, "gene_ids", info.gene_ids, m);
  if (names) check_names(name, "gene_names", info.gene_names, m);
  if (names) check_names(name, "feature_types", info.feature_types, m);
  if (names && ref_value(name, "genomes_count") != NULL) check_names(name, "genomes", info.genomes, m);
  tsr_tenx_info_free(&info);
  ASSERT_TRUE(info.barcodes == NULL && info.n_cells == 0);
  tsr_tenx_info_free(&info);  /* a zeroed info is a no-op */
  tsr_array_ctx_destroy(&ctx);
}

static void check_read(const char *name, reader_fn read, const char *path, int64_t row_chunk, int64_t want_chunks)
{
  check_read_names(name, read, path, row_chunk, want_chunks, true);
}

/* ---------- the fixtures against scanpy ---------- */

TEST(v3_h5_reads_as_scanpy_reads_it)
{
  check_read("v3_h5", tsr_from_10x_h5, data_path(FIXTURES "/v3_filtered_feature_bc_matrix.h5"), 100, 12);
  check_read("v3_h5", tsr_from_10x_h5, data_path(FIXTURES "/v3_filtered_feature_bc_matrix.h5"), 0, 1);
  check_read("v3_h5", tsr_from_10x_h5, data_path(FIXTURES "/v3_filtered_feature_bc_matrix.h5"), 1, 1107);
}

TEST(v2_h5_reads_as_scanpy_reads_it)
{
  check_read("v2_h5", tsr_from_10x_h5, data_path(FIXTURES "/v1_2_filtered_gene_bc_matrices_h5.h5"), 5, 3);
  check_read("v2_h5", tsr_from_10x_h5, data_path(FIXTURES "/v1_2_filtered_gene_bc_matrices_h5.h5"), 0, 1);
}

TEST(v3_mtx_directory_gzip_reads_as_scanpy_reads_it)
{
  check_read("v3_mtx", tsr_from_10x_mtx, data_path(FIXTURES "/v3_filtered_feature_bc_matrix"), 300, 4);
  check_read("v3_mtx", tsr_from_10x_mtx, data_path(FIXTURES "/v3_filtered_feature_bc_matrix"), 7, 159);
}

TEST(v2_mtx_directory_plain_reads_as_scanpy_reads_it)
{
  check_read("v2_mtx", tsr_from_10x_mtx, data_path(FIXTURES "/v1_2_filtered_gene_bc_matrices_hg19_chr21"), 5, 3);
  check_read("v2_mtx", tsr_from_10x_mtx, data_path(FIXTURES "/v1_2_filtered_gene_bc_matrices_hg19_chr21"), 0, 1);
}

/* The counts as a plain .mtx (transposed: cells x genes), and as a 10x
 * directory made of links to the same files (genes.tsv of one column). */
TEST(pbmc68k_counts_read_as_scanpy_reads_them)
{
  check_read_names("pbmc68k_mtx", tsr_from_mtx_transposed, data_path("pbmc68k_reduced_10x/counts_genes_x_cells.mtx"), 128, 6,
                   false);
  static const char *const links[][2] = {
    {"counts_genes_x_cells.mtx", "matrix.mtx"}, {"barcodes.tsv", "barcodes.tsv"}, {"genes.tsv", "genes.tsv"}};
  ASSERT_OK(mkdir(tmp_path("pbmc68k"), 0755));
  for (int i = 0; i < 3; i++) {
    char from[100], to[100];
    snprintf(from, sizeof from, "pbmc68k_reduced_10x/%s", links[i][0]);
    snprintf(to, sizeof to, "pbmc68k/%s", links[i][1]);
    ASSERT_OK(symlink(data_path(from), tmp_path(to)));
  }
  check_read("pbmc68k_mtx", tsr_from_10x_mtx, tmp_path("pbmc68k"), 0, 1);
}

/* tsr_from_mtx keeps the file's orientation: genes x cells here. */
TEST(plain_mtx_keeps_the_files_orientation)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL;
  tsr_tenx_info info;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_mtx(ctx, data_path("pbmc68k_reduced_10x/counts_genes_x_cells.mtx"), 200, &x, &info));
  ASSERT_EQ(tsr_array_dim(x, 0), 765);
  ASSERT_EQ(tsr_array_dim(x, 1), 700);
  ASSERT_EQ(info.n_cells, 765);
  ASSERT_EQ(info.nnz, 174400);
  ASSERT_TRUE(info.barcodes == NULL && info.gene_ids == NULL && info.gene_names == NULL);
  float *x_t = dense_of(ctx, x);
  ASSERT_TRUE(x_t != NULL);
  /* its rows are scanpy's genes: row sums = the reference's gene sums */
  ASSERT_TRUE(sums_match("pbmc68k_mtx", "gene_sums.txt", x_t, 765, 700, true));
  ASSERT_TRUE(sums_match("pbmc68k_mtx", "cell_sums.txt", x_t, 765, 700, false));
  free(x_t);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- files in no order ---------- */

static void write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

static void write_gz(const char *path, const char *text)
{
  gzFile f = gzopen(path, "wb");
  gzputs(f, text);
  gzclose(f);
}

/* 3 x 4, entries out of order, (2,3) given twice, one stored zero. */
static const char scrambled[] =
  "%%MatrixMarket matrix coordinate real general\n% a comment\n%\n3 4 7\n"
  "3 4 1.5\n1 2 2\n2 3 1\n1 1 0\n2 3 2.25\n2 1 -4\n3 1 7\n";
static const float scrambled_dense[12] = {0, 2, 0, 0, -4, 0, 3.25f, 0, 7, 0, 0, 1.5f};

TEST(entries_in_any_order_give_canonical_chunks)
{
  write_text(tmp_path("scrambled.mtx"), scrambled);
  write_gz(tmp_path("scrambled.mtx.gz"), scrambled);
  const char *paths[] = {tmp_path("scrambled.mtx"), tmp_path("scrambled.mtx.gz")};
  for (int k = 0; k < 2; k++)
    for (int64_t rc_rows = 1; rc_rows <= 3; rc_rows++) {
      tsr_array_ctx *ctx = NULL;
      tsr_array *x = NULL, *xt = NULL, *p = NULL;
      ASSERT_OK(tsr_array_ctx_new(client, &ctx));
      ASSERT_OK(tsr_from_mtx(ctx, paths[k], rc_rows, &x, NULL));
      ASSERT_OK(tsr_persist(ctx, x, 30000, &p));
      for (int64_t i = 0; i < tsr_array_nchunks(p, 0); i++)
        ASSERT_TRUE(chunk_is_canonical(p, i, (i + 1) * rc_rows > 3 ? 3 - i * rc_rows : rc_rows, 4));
      float *d = dense_of(ctx, p);
      ASSERT_TRUE(d != NULL && memcmp(d, scrambled_dense, sizeof scrambled_dense) == 0);
      free(d);
      ASSERT_OK(tsr_from_mtx_transposed(ctx, paths[k], rc_rows, &xt, NULL));
      d = dense_of(ctx, xt);
      ASSERT_TRUE(d != NULL);
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) ASSERT_TRUE(d[i * 3 + j] == scrambled_dense[j * 4 + i]);
      free(d);
      tsr_array_ctx_destroy(&ctx);
    }
}

/* ---------- bad input ---------- */

/* read(path) fails with rc and a message holding needle and the file. */
static int refused(reader_fn read, const char *path, int rc, const char *file, const char *needle)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL;
  tsr_tenx_info info;
  memset(&info, 0, sizeof info);
  info.n_cells = -7;  /* untouched on failure */
  if (tsr_array_ctx_new(client, &ctx) != 0) return 0;
  int got = read(ctx, path, 0, &x, &info);
  const char *msg = tsr_errmsg();
  int ok = got == rc && strstr(msg, needle) != NULL && strstr(msg, file) != NULL && x == NULL && info.n_cells == -7;
  if (!ok) fprintf(stderr, "  rc %d (want %d): \"%s\" should hold \"%s\" and \"%s\"\n", got, rc, msg, needle, file);
  tsr_array_ctx_destroy(&ctx);
  return ok;
}

static int refused_mtx(const char *text, const char *needle)
{
  const char *path = tmp_path("bad.mtx");
  write_text(path, text);
  return refused(tsr_from_mtx, path, TSR_EINVAL, "bad.mtx", needle);
}

TEST(bad_mtx_files_are_refused_with_the_file_and_the_problem)
{
  ASSERT_TRUE(refused(tsr_from_mtx, tmp_path("absent.mtx"), TSR_EIO, "absent.mtx", "No such file"));
  ASSERT_TRUE(refused_mtx("hello\n1 1 1\n", "bad.mtx:1: not a Matrix Market file"));
  ASSERT_TRUE(refused_mtx("", "is empty"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "'matrix array' is not supported"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n", "field 'complex' is not supported"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real symmetric\n2 2 1\n1 1 1\n", "symmetry 'symmetric' is not supported"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n%\n2 two 1\n1 1 1\n", "bad.mtx:3: the size line"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n", "no size line"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate integer general\n3 4 2\n1 1 5\n4 2 1\n",
                          "bad.mtx:4: entry (4, 2) is out of range: the matrix is 3 x 4"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate integer general\n3 4 2\n1 5 5\n", "bad.mtx:3: entry (1, 5) is out of range"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate integer general\n3 4 2\n0 1 5\n", "entry (0, 1) is out of range"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate integer general\n3 4 2\n1 1 2.5\n", "bad.mtx:3: the value '2.5' is not an integer"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n3 4 2\n1 1 x\n", "bad.mtx:3: the value 'x' is not a number"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n3 4 2\n1 1\n", "bad.mtx:3: entry (1, 1) has no value"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n3 4 3\n1 1 1\n2 2 2\n",
                          "has 2 entries but its size line (line 2) declares 3: the file is truncated"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n3 4 1\n1 1 1\n2 2 2\n",
                          "bad.mtx:4: more entries than the 1 its size line (line 2) declares"));
  ASSERT_TRUE(refused_mtx("%%MatrixMarket matrix coordinate real general\n0 4 0\n", "the matrix is 0 x 4: empty"));
  write_text(tmp_path("bad.mtx"), "%%MatrixMarket matrix coordinate real general\n3000000000 4 1\n1 1 1\n");
  ASSERT_TRUE(refused(tsr_from_mtx, tmp_path("bad.mtx"), TSR_ELIMIT, "bad.mtx:2", "exceeds the limit of 2147483647"));
}

/* A good v3-style directory (3 genes x 2 cells) at dir, plain files. */
static void write_mtx_dir(const char *dir, const char *barcodes, const char *features)
{
  char p[600];
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/matrix.mtx", dir);
  write_text(p, "%%MatrixMarket matrix coordinate integer general\n3 2 3\n1 1 4\n3 1 1\n2 2 9\n");
  snprintf(p, sizeof p, "%s/barcodes.tsv", dir);
  write_text(p, barcodes);
  snprintf(p, sizeof p, "%s/features.tsv", dir);
  write_text(p, features);
}

TEST(bad_10x_mtx_directories_are_refused)
{
  static const char bc[] = "AAAC-1\nGGGT-1\n", feat[] = "E1\tG1\tGene Expression\nE2\tG2\tGene Expression\nE3\tG3\tAntibody Capture\n";
  const char *dir = tmp_path("mexdir");
  write_mtx_dir(dir, bc, feat);
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL;
  tsr_tenx_info info;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_10x_mtx(ctx, dir, 0, &x, &info));
  ASSERT_STREQ(info.feature_types[2], "Antibody Capture");
  ASSERT_STREQ(info.gene_names[1], "G2");
  ASSERT_STREQ(info.barcodes[1], "GGGT-1");
  float d[6], want[6] = {4, 0, 1, 0, 9, 0};
  ASSERT_OK(tsr_decompress(ctx, x, &x));
  ASSERT_OK(tsr_compute(ctx, x, d, sizeof d, 30000));
  ASSERT_TRUE(memcmp(d, want, sizeof d) == 0);
  tsr_tenx_info_free(&info);
  tsr_array_ctx_destroy(&ctx);

  write_mtx_dir(dir, "AAAC-1\n", feat);
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EINVAL, "barcodes.tsv", "has 1 barcodes but"));
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EINVAL, "matrix.mtx", "has 2 cells (columns)"));
  write_mtx_dir(dir, bc, "E1\tG1\tGene Expression\nE2\tG2\tGene Expression\n");
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EINVAL, "features.tsv", "has 2 features but"));
  write_mtx_dir(dir, bc, "E1\tG1\tGene Expression\nE2\tG2\nE3\tG3\tGene Expression\n");
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EINVAL, "features.tsv:2", "expected 3 tab-separated columns"));
  write_mtx_dir(dir, "\n\n", feat);
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EINVAL, "barcodes.tsv", "has no lines"));
  unlink(tmp_path("mexdir/barcodes.tsv"));
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EIO, "mexdir", "has none of barcodes.tsv, barcodes.tsv.gz"));
  unlink(tmp_path("mexdir/matrix.mtx"));
  ASSERT_TRUE(refused(tsr_from_10x_mtx, dir, TSR_EIO, "mexdir", "has none of matrix.mtx, matrix.mtx.gz"));
  ASSERT_TRUE(refused(tsr_from_10x_mtx, tmp_path("no-such-dir"), TSR_EIO, "no-such-dir", "has none of matrix.mtx"));
}

/* ---------- bad HDF5 files, written here ---------- */

static void h5_ints(hid_t loc, const char *name, const int64_t *v, hsize_t n)
{
  hid_t sp = H5Screate_simple(1, &n, NULL);
  hid_t ds = H5Dcreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(ds), H5Sclose(sp);
}

static void h5_strs(hid_t loc, const char *name, const char *v, size_t width, hsize_t n)
{
  hid_t sp = H5Screate_simple(1, &n, NULL), t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, width);
  hid_t ds = H5Dcreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(ds), H5Tclose(t), H5Sclose(sp);
}

/* A v3 file of 2 genes x 3 cells; skip names a dataset left out, and
 * n_barcodes / indices[1] spoil it. */
static void write_v3(const char *path, const char *skip, hsize_t n_barcodes, int64_t index1)
{
  static const int64_t data[] = {5, 6, 7}, indptr[] = {0, 1, 1, 3}, shape[] = {2, 3};
  int64_t indices[] = {1, index1, 1};
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t m = H5Gcreate2(f, "matrix", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t ft = H5Gcreate2(m, "features", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (strcmp(skip, "data") != 0) h5_ints(m, "data", data, 3);
  if (strcmp(skip, "indices") != 0) h5_ints(m, "indices", indices, 3);
  if (strcmp(skip, "indptr") != 0) h5_ints(m, "indptr", indptr, 4);
  h5_ints(m, "shape", shape, 2);
  h5_strs(m, "barcodes", "AAAA-1CCCC-1GGGG-1TTTT-1", 6, n_barcodes);
  h5_strs(ft, "id", "E1E2", 2, 2);
  h5_strs(ft, "name", "G1G2", 2, 2);
  if (strcmp(skip, "features/feature_type") != 0) h5_strs(ft, "feature_type", "GEXGEX", 3, 2);
  H5Gclose(ft), H5Gclose(m), H5Fclose(f);
}

TEST(bad_h5_files_are_refused_with_the_file_and_the_problem)
{
  const char *path = tmp_path("bad.h5");
  write_v3(path, "", 3, 0);
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL;
  tsr_tenx_info info;
  float d[6], want[6] = {0, 5, 0, 0, 6, 7};  /* cells x genes */
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_10x_h5(ctx, path, 2, &x, &info));
  ASSERT_STREQ(info.feature_types[1], "GEX");
  ASSERT_STREQ(info.barcodes[2], "GGGG-1");
  ASSERT_TRUE(info.genomes == NULL);
  ASSERT_OK(tsr_decompress(ctx, x, &x));
  ASSERT_OK(tsr_compute(ctx, x, d, sizeof d, 30000));
  ASSERT_TRUE(memcmp(d, want, sizeof d) == 0);
  tsr_tenx_info_free(&info);
  tsr_array_ctx_destroy(&ctx);

  ASSERT_TRUE(refused(tsr_from_10x_h5, tmp_path("absent.h5"), TSR_EIO, "absent.h5", "No such file"));
  write_text(path, "not hdf5 at all\n");
  ASSERT_TRUE(refused(tsr_from_10x_h5, path, TSR_EINVAL, "bad.h5", "is not an HDF5 file"));
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  static const int64_t one = 1;
  h5_ints(f, "x", &one, 1);
  H5Fclose(f);
  ASSERT_TRUE(refused(tsr_from_10x_h5, path, TSR_EINVAL, "bad.h5", "is not a 10x HDF5 matrix: no /matrix group (v3) and no /<genome> group"));
  write_v3(path, "indptr", 3, 0);
  ASSERT_TRUE(refused(tsr_from_10x_h5, path, TSR_EINVAL, "bad.h5", "the 10x dataset /matrix/indptr is missing"));
  write_v3(path, "features/feature_type", 3, 0);
  ASSERT_TRUE(refused(tsr_from_10x_h5, path, TSR_EINVAL, "bad.h5", "the 10x dataset /matrix/features/feature_type is missing"));
  write_v3(path, "", 2, 0);
  ASSERT_TRUE(refused(tsr_from_10x_h5, path, TSR_EINVAL, "bad.h5", "/matrix/barcodes has 2 barcodes but /matrix/shape says 3 cells"));
  /* An index outside the genes is found by the chunk's task. */
  write_v3(path, "", 3, 9);
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_10x_h5(ctx, path, 0, &x, NULL));
  ASSERT_OK(tsr_decompress(ctx, x, &x));
  ASSERT_EQ(tsr_compute(ctx, x, d, sizeof d, 30000), TSR_ETASK);
  ASSERT_CONTAINS(tsr_errmsg(), "bad.h5");
  ASSERT_CONTAINS(tsr_errmsg(), "/matrix/indices[1] = 9 is outside 0..1");
  tsr_array_ctx_destroy(&ctx);
}

/* A .mtx rewritten between building the graph and running it. */
TEST(an_mtx_changed_after_the_graph_was_built_fails_its_task)
{
  const char *path = tmp_path("changing.mtx");
  write_text(path, scrambled);
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL;
  float d[12];
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_mtx(ctx, path, 2, &x, NULL));
  ASSERT_OK(tsr_decompress(ctx, x, &x));
  write_text(path, "%%MatrixMarket matrix coordinate real general\n3 4 2\n1 1 1\n2 2 2\n");
  ASSERT_EQ(tsr_compute(ctx, x, d, sizeof d, 30000), TSR_ETASK);
  ASSERT_CONTAINS(tsr_errmsg(), "mtx_read");
  ASSERT_CONTAINS(tsr_errmsg(), "changing.mtx");
  ASSERT_CONTAINS(tsr_errmsg(), "the file changed");
  tsr_array_ctx_destroy(&ctx);
}

TEST(the_cluster_still_serves)
{
  check_read("v2_mtx", tsr_from_10x_mtx, data_path(FIXTURES "/v1_2_filtered_gene_bc_matrices_hg19_chr21"), 4, 3);
  for (int w = 0; w < c.n_workers; w++) ASSERT_TRUE(cluster_alive(c.workers[w]));
  ASSERT_TRUE(cluster_alive(c.scheduler));
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const char *env = getenv("TSR_SHARED_DATA");
  snprintf(data_dir, sizeof data_dir, "%s", env != NULL && env[0] != '\0' ? env : TSR_SHARED_DATA);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-tenx-XXXXXX");
  if (mkdtemp(tmpdir) == NULL || cluster_start(&c, 2, 2, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(v3_h5_reads_as_scanpy_reads_it);
  RUN(v2_h5_reads_as_scanpy_reads_it);
  RUN(v3_mtx_directory_gzip_reads_as_scanpy_reads_it);
  RUN(v2_mtx_directory_plain_reads_as_scanpy_reads_it);
  RUN(pbmc68k_counts_read_as_scanpy_reads_them);
  RUN(plain_mtx_keeps_the_files_orientation);
  RUN(entries_in_any_order_give_canonical_chunks);
  RUN(bad_mtx_files_are_refused_with_the_file_and_the_problem);
  RUN(bad_10x_mtx_directories_are_refused);
  RUN(bad_h5_files_are_refused_with_the_file_and_the_problem);
  RUN(an_mtx_changed_after_the_graph_was_built_fails_its_task);
  RUN(the_cluster_still_serves);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
