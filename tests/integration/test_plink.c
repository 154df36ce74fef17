/* PLINK 1 binary genotypes (tessera/plink.h) through real daemons: the
 * HapMap3 and 1000 Genomes sets of ../shared/data (the exact genotype
 * counts of their SOURCE.md, and the whole matrix against the small
 * decoder in this file), several chunkings, the packed chunks' own bytes,
 * the samples' and variants' names, and each refused file with its
 * message — on the client, and on a worker for a .bed changed after the
 * graph was built — after which the cluster still serves. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/plink.h"

static cluster c;
static tsr_client *client;
static char tmpdir[128];
static char data_dir[512];
static bool have_data;

#define HM3 "HM3_thinned_autosomal_overlap"
#define KG "1kg.ref.phase1_release_v3.20101123_thinned_autosomal_overlap"

/* .bed code → A1 dosage (PLINK 1.9 --recode A; 01 is missing). */
static const uint8_t dosage_of_code[4] = {2, 3, 1, 0};

/* ---------- helpers ---------- */

static const char *data_prefix(const char *name)
{
  static char buf[2][600];
  static int next;
  char *p = buf[next++ % 2];
  snprintf(p, 600, "%s/%s", data_dir, name);
  return p;
}

static uint8_t *slurp(const char *path, size_t *len_p)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc((size_t)len + 1);
  if (fread(data, 1, (size_t)len, f) != (size_t)len) len = -1;
  fclose(f);
  if (len < 0) {
    free(data);
    return NULL;
  }
  *len_p = (size_t)len;
  return data;
}

/* The independent decoder: prefix.bed straight to u8 [n, m] A1 dosages. */
static uint8_t *reference_decode(const char *prefix, int64_t n, int64_t m)
{
  char path[700];
  size_t len, bps = (size_t)(n + 3) / 4;
  snprintf(path, sizeof path, "%s.bed", prefix);
  uint8_t *bed = slurp(path, &len);
  if (bed == NULL || len != 3 + bps * (size_t)m || bed[0] != 0x6c || bed[1] != 0x1b || bed[2] != 1) {
    free(bed);
    return NULL;
  }
  uint8_t *x = malloc((size_t)(n * m));
  for (int64_t v = 0; v < m; v++)
    for (int64_t i = 0; i < n; i++)
      x[i * m + v] = dosage_of_code[(bed[3 + (size_t)v * bps + (size_t)i / 4] >> (2 * (i % 4))) & 3];
  free(bed);
  return x;
}

static uint8_t *compute_u8(tsr_array_ctx *ctx, const tsr_array *a)
{
  size_t n = (size_t)tsr_array_size(a);
  uint8_t *out = malloc(n ? n : 1);
  int rc = tsr_compute(ctx, a, out, n, 60000);
  if (rc != 0) {
    fprintf(stderr, "  compute: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
    free(out);
    return NULL;
  }
  return out;
}

/* The cluster still reads a tiny good set and sums a constant array. */
static int cluster_still_serves(const char *good_prefix, const uint8_t *want, size_t n)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL, *ones = NULL, *s = NULL;
  int64_t shape[1] = {1000}, chunks[1] = {300};
  double total = 0;
  int rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_from_plink(ctx, good_prefix, NULL, &a);
  uint8_t *got = rc == 0 ? compute_u8(ctx, a) : NULL;
  if (rc == 0 && (got == NULL || memcmp(got, want, n) != 0)) rc = -100;
  if (rc == 0) rc = tsr_ones(ctx, TSR_F64, 1, shape, chunks, &ones);
  if (rc == 0) rc = tsr_sum(ctx, ones, -1, 0, &s);
  if (rc == 0) rc = tsr_compute(ctx, s, &total, sizeof total, 30000);
  if (rc == 0 && total != 1000.0) rc = -101;
  free(got);
  tsr_array_ctx_destroy(&ctx);
  return rc;
}

/* ---------- the real data sets ---------- */

/* Reads prefix with the default chunks; checks the metadata, the counts
 * of each dosage and every element against the reference decoder. */
static void check_real_set(const char *name, int64_t n, int64_t m, const int64_t counts[4])
{
  const char *prefix = data_prefix(name);
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL;
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_plink(ctx, prefix, NULL, &a));
  ASSERT_EQ(tsr_array_dtype(a), TSR_U8);
  ASSERT_EQ(tsr_array_ndim(a), 2);
  ASSERT_EQ(tsr_array_dim(a, 0), n);
  ASSERT_EQ(tsr_array_dim(a, 1), m);
  ASSERT_EQ(tsr_array_encoding(a), TSR_ENC_PACKED2);
  ASSERT_EQ(tsr_array_missing(a), TSR_GENO_MISSING);
  ASSERT_EQ(tsr_array_nchunks(a, 0), 1);  /* default: all samples x 8192 variants */
  ASSERT_EQ(tsr_array_chunk(a, 1), 8192);
  uint8_t *x = compute_u8(ctx, a), *want = reference_decode(prefix, n, m);
  ASSERT_TRUE(x != NULL && want != NULL);
  int64_t got[5] = {0};
  for (int64_t i = 0; i < n * m; i++) got[x[i] < 4 ? x[i] : 4]++;
  for (int v = 0; v < 4; v++) ASSERT_EQ(got[v], counts[v]);
  ASSERT_EQ(got[4], 0);
  ASSERT_EQ(memcmp(x, want, (size_t)(n * m)), 0);
  free(x), free(want);
  tsr_array_ctx_destroy(&ctx);
}

TEST(hapmap3_has_the_genotype_counts_of_source_md)
{
  static const int64_t counts[4] = {4584422, 6029768, 2838865, 20548};
  check_real_set(HM3, 957, 14079, counts);
}

TEST(thousand_genomes_has_the_genotype_counts_of_source_md)
{
  static const int64_t counts[4] = {5527098, 6817595, 3029575, 0};
  check_real_set(KG, 1092, 14079, counts);
}

/* Rows and columns not multiples of 4, one chunk, many thin ones. */
TEST(every_chunking_gives_the_same_matrix)
{
  static const int64_t chunkings[][2] = {{0, 0}, {101, 1001}, {957, 4099}, {4, 14079}, {250, 997}, {3, 5000}, {479, 13}};
  const char *prefix = data_prefix(HM3);
  uint8_t *want = reference_decode(prefix, 957, 14079);
  ASSERT_TRUE(want != NULL);
  for (size_t k = 0; k < sizeof chunkings / sizeof chunkings[0]; k++) {
    tsr_array_ctx *ctx = NULL;
    tsr_array *a = NULL;
    ASSERT_OK(tsr_array_ctx_new(client, &ctx));
    ASSERT_OK(tsr_from_plink(ctx, prefix, chunkings[k], &a));
    uint8_t *x = compute_u8(ctx, a);
    ASSERT_TRUE(x != NULL);
    int same = memcmp(x, want, 957 * 14079) == 0;
    if (!same) fprintf(stderr, "  chunking %lld x %lld differs\n", (long long)chunkings[k][0], (long long)chunkings[k][1]);
    free(x);
    tsr_array_ctx_destroy(&ctx);
    ASSERT_TRUE(same);
  }
  free(want);
}

/* What a chunk key holds: pack2bit's bytes of the block, pad bits zero. */
static int check_packed_block(const tsr_array *p, const int64_t idx[2], const uint8_t *want, int64_t m)
{
  int64_t r0 = idx[0] * tsr_array_chunk(p, 0), c0 = idx[1] * tsr_array_chunk(p, 1);
  int64_t rows = tsr_array_chunk(p, 0), cols = tsr_array_chunk(p, 1);
  if (r0 + rows > tsr_array_dim(p, 0)) rows = tsr_array_dim(p, 0) - r0;
  if (c0 + cols > m) cols = m - c0;
  int64_t cb = (cols + 3) / 4;
  tsr_chunk *chunk = NULL;
  if (tsr_gather(client, tsr_array_chunk_key(p, idx), 30000, &chunk) != 0) return 0;
  int ok = chunk->dtype == TSR_U8 && chunk->ndim == 2 && chunk->shape[0] == rows && chunk->shape[1] == cb &&
           chunk->nbytes == (size_t)(rows * cb);
  for (int64_t r = 0; ok && r < rows; r++)
    for (int64_t j = 0; ok && j < cb; j++) {
      unsigned byte = 0;
      for (int s = 0; s < 4 && 4 * j + s < cols; s++) byte |= (unsigned)want[(r0 + r) * m + c0 + 4 * j + s] << (2 * s);
      ok = ((const uint8_t *)chunk->data)[r * cb + j] == byte;
    }
  tsr_chunk_destroy(&chunk);
  return ok;
}

TEST(persisted_chunks_hold_the_packed_bytes)
{
  const char *prefix = data_prefix(HM3);
  const int64_t chunks[2] = {101, 1001};
  uint8_t *want = reference_decode(prefix, 957, 14079);
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL, *p = NULL;
  ASSERT_TRUE(want != NULL);
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_plink(ctx, prefix, chunks, &a));
  ASSERT_OK(tsr_persist(ctx, a, 60000, &p));
  ASSERT_EQ(tsr_array_encoding(p), TSR_ENC_PACKED2);
  ASSERT_EQ(tsr_array_missing(p), TSR_GENO_MISSING);
  for (int64_t i = 0; i < tsr_array_nchunks(p, 0); i++)
    for (int64_t j = 0; j < tsr_array_nchunks(p, 1); j++) {
      int64_t idx[2] = {i, j};
      ASSERT_TRUE(check_packed_block(p, idx, want, 14079));
    }
  /* And the persisted packed array decodes to the matrix. */
  uint8_t *x = compute_u8(ctx, p);
  ASSERT_TRUE(x != NULL && memcmp(x, want, 957 * 14079) == 0);
  free(x), free(want);
  tsr_array_ctx_destroy(&ctx);
}

/* The first and last line of a text file, split into 6 fields. */
static int text_line(const char *path, int last, char f[6][64])
{
  size_t len;
  char *text = (char *)slurp(path, &len), *line = text;
  if (text == NULL) return 0;
  text[len] = '\0';
  if (last) {
    while (len > 0 && text[len - 1] == '\n') text[--len] = '\0';
    char *nl = strrchr(text, '\n');
    line = nl ? nl + 1 : text;
  }
  int n = sscanf(line, "%63s %63s %63s %63s %63s %63s", f[0], f[1], f[2], f[3], f[4], f[5]);
  free(text);
  return n == 6;
}

TEST(info_names_the_samples_and_variants)
{
  const char *prefix = data_prefix(HM3);
  char path[700], f[6][64];
  tsr_plink_info *info = NULL;
  ASSERT_OK(tsr_plink_info_read(prefix, &info));
  ASSERT_EQ(info->n_samples, 957);
  ASSERT_EQ(info->n_variants, 14079);
  snprintf(path, sizeof path, "%s.fam", prefix);
  for (int last = 0; last < 2; last++) {
    int64_t i = last ? 956 : 0;
    ASSERT_TRUE(text_line(path, last, f));
    ASSERT_STREQ(info->fid[i], f[0]);
    ASSERT_STREQ(info->iid[i], f[1]);
  }
  snprintf(path, sizeof path, "%s.bim", prefix);
  for (int last = 0; last < 2; last++) {
    int64_t v = last ? 14078 : 0;
    ASSERT_TRUE(text_line(path, last, f));
    ASSERT_STREQ(info->chrom[v], f[0]);
    ASSERT_STREQ(info->variant_id[v], f[1]);
    ASSERT_NEAR(info->cm[v], atof(f[2]), 0);
    ASSERT_EQ(info->bp[v], atoll(f[3]));
    ASSERT_STREQ(info->allele1[v], f[4]);
    ASSERT_STREQ(info->allele2[v], f[5]);
  }
  ASSERT_TRUE(info->bp[14078] > 0 && strcmp(info->allele1[0], info->allele2[0]) != 0);
  tsr_plink_info_destroy(&info);
  ASSERT_TRUE(info == NULL);
  tsr_plink_info_destroy(&info);  /* NULL is a no-op */
}

/* ---------- the benchmark's generator ---------- */

static int gen_bed(const char *prefix, const char *threads)
{
  const char *argv[] = {cluster_bin("tsr-gen-bed"), "--out", prefix, "--samples", "301", "--snps", "1003",
                        "--pops", "3", "--seed", "7", "--threads", threads, NULL};
  char out[512];
  return run_capture(argv, NULL, out, sizeof out, 60);
}

/* bench/gen_bed.c's files read back: the same bytes for any thread count,
 * the populations in the .fam, about 1% missing, and the structure a PCA
 * should find (population means of the dosage differ). */
TEST(generated_sets_read_back_whatever_the_thread_count)
{
  char p1[200], p3[200], bed1[220], bed3[220];
  snprintf(p1, sizeof p1, "%s/gen1", tmpdir);
  snprintf(p3, sizeof p3, "%s/gen3", tmpdir);
  ASSERT_EQ(gen_bed(p1, "1"), 0);
  ASSERT_EQ(gen_bed(p3, "3"), 0);
  snprintf(bed1, sizeof bed1, "%s.bed", p1);
  snprintf(bed3, sizeof bed3, "%s.bed", p3);
  size_t len1 = 0, len3 = 0;
  uint8_t *b1 = slurp(bed1, &len1), *b3 = slurp(bed3, &len3);
  ASSERT_TRUE(b1 != NULL && b3 != NULL);
  ASSERT_EQ(len1, 3 + 76 * 1003);
  ASSERT_TRUE(len1 == len3 && memcmp(b1, b3, len1) == 0);
  free(b1), free(b3);

  tsr_plink_info *info = NULL;
  ASSERT_OK(tsr_plink_info_read(p1, &info));
  ASSERT_STREQ(info->fid[0], "pop1");
  ASSERT_STREQ(info->fid[150], "pop2");
  ASSERT_STREQ(info->fid[300], "pop3");
  ASSERT_STREQ(info->iid[300], "s301");
  ASSERT_STREQ(info->variant_id[1002], "snp1003");
  ASSERT_STREQ(info->chrom[1002], "22");
  tsr_plink_info_destroy(&info);

  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL;
  const int64_t chunks[2] = {150, 250};
  ASSERT_OK(tsr_array_ctx_new(client, &ctx));
  ASSERT_OK(tsr_from_plink(ctx, p1, chunks, &a));
  uint8_t *x = compute_u8(ctx, a), *want = reference_decode(p1, 301, 1003);
  ASSERT_TRUE(x != NULL && want != NULL && memcmp(x, want, 301 * 1003) == 0);
  int64_t missing = 0;
  double diff = 0;  /* mean |pop1 mean - pop3 mean| of the dosage over SNPs */
  for (int64_t v = 0; v < 1003; v++) {
    double s[2] = {0, 0}, n[2] = {0, 0};
    for (int64_t i = 0; i < 301; i++) {
      uint8_t g = x[i * 1003 + v];
      missing += g == TSR_GENO_MISSING;
      int k = i < 100 ? 0 : i >= 201 ? 1 : -1;  /* populations 1 and 3 */
      if (k >= 0 && g != TSR_GENO_MISSING) s[k] += g, n[k]++;
    }
    diff += fabs(s[0] / n[0] - s[1] / n[1]) / 1003;
  }
  fprintf(stderr, "  generated: %lld missing, dosage means of populations 1 and 3 differ by %.3f\n", (long long)missing,
          diff);
  ASSERT_TRUE(missing > 2700 && missing < 3340);  /* 1% of 301,903 is 3,019, sd 55 */
  /* Sampling alone (Fst 0, 100 samples a population) gives about 0.07;
   * Fst 0.05 adds |2 (p1 - p3)|, about 0.2. */
  ASSERT_TRUE(diff > 0.14);
  free(x), free(want);
  tsr_array_ctx_destroy(&ctx);
}

/* ---------- bad input ---------- */

#define SMALL_N 10
#define SMALL_M 7

static uint8_t small_want[SMALL_N * SMALL_M];

static void write_file(const char *prefix, const char *ext, const void *data, size_t len)
{
  char path[300];
  snprintf(path, sizeof path, "%s%s", prefix, ext);
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, len, f);
  fclose(f);
}

static void write_text(const char *prefix, const char *ext, const char *text)
{
  write_file(prefix, ext, text, strlen(text));
}

static const char small_fam[] =
  "F1 I1 0 0 1 -9\nF1 I2 0 0 2 -9\nF2 I3 0 0 1 1\nF2 I4 0 0 2 2\nF3 I5 0 0 0 -9\n"
  "F3 I6 0 0 1 -9\r\nF4 I7 0 0 1 -9\n\nF4 I8 0 0 2 -9\nF5 I9 0 0 1 -9\nF5\tI10\t0\t0\t2\t-9";
static const char small_bim[] =
  "1\trs1\t0\t100\tA\tG\n1\trs2\t0.5\t200\tC\tT\n2\trs3\t0\t300\tA\tC\n2\trs4\t0\t400\tG\tT\n"
  "3\trs5\t0\t500\tA\tT\n3\trs6\t0\t600\tC\tG\n22\trs7\t1.25\t700\tT\tA\n";

/* A good set of SMALL_N x SMALL_M random codes at prefix; its dosages go
 * to small_want. Returns the .bed's bytes (3 + 3 x 7). */
static size_t write_small_set(const char *prefix, uint8_t *bed)
{
  bed[0] = 0x6c, bed[1] = 0x1b, bed[2] = 0x01;
  srand(5);
  for (int i = 3; i < 3 + 3 * SMALL_M; i++) bed[i] = (uint8_t)rand();
  for (int v = 0; v < SMALL_M; v++) {
    bed[3 + 3 * v + 2] &= 0x0f;  /* pad bits of samples 10, 11 zero, as PLINK writes them */
    for (int i = 0; i < SMALL_N; i++)
      small_want[i * SMALL_M + v] = dosage_of_code[(bed[3 + 3 * v + i / 4] >> (2 * (i % 4))) & 3];
  }
  write_text(prefix, ".fam", small_fam);
  write_text(prefix, ".bim", small_bim);
  write_file(prefix, ".bed", bed, 3 + 3 * SMALL_M);
  return 3 + 3 * SMALL_M;
}

/* tsr_from_plink(prefix) fails with rc, and the message holds needle and
 * (when not NULL) the file's name. */
static int refused(const char *prefix, int rc, const char *file, const char *needle)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL;
  if (tsr_array_ctx_new(client, &ctx) != 0) return 0;
  int got = tsr_from_plink(ctx, prefix, NULL, &a);
  const char *msg = tsr_errmsg();
  int ok = got == rc && strstr(msg, needle) != NULL && (file == NULL || strstr(msg, file) != NULL) && a == NULL;
  if (!ok) fprintf(stderr, "  rc %d (want %d): \"%s\" should hold \"%s\" and \"%s\"\n", got, rc, msg, needle, file ? file : "");
  tsr_array_ctx_destroy(&ctx);
  return ok;
}

TEST(bad_files_are_refused_with_the_file_and_the_problem)
{
  char good[200], bad[200], bed_name[220], fam_name[220], bim_name[220];
  uint8_t bed[64];
  snprintf(good, sizeof good, "%s/good", tmpdir);
  snprintf(bad, sizeof bad, "%s/bad", tmpdir);
  snprintf(bed_name, sizeof bed_name, "%s.bed", bad);
  snprintf(fam_name, sizeof fam_name, "%s.fam", bad);
  snprintf(bim_name, sizeof bim_name, "%s.bim", bad);
  size_t len = write_small_set(good, bed);
  ASSERT_OK(cluster_still_serves(good, small_want, sizeof small_want));

  write_small_set(bad, bed);
  ASSERT_TRUE(refused("", TSR_EINVAL, NULL, "prefix is NULL or empty"));
  bed[1] = 0x1c;
  write_file(bad, ".bed", bed, len);
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "is not a PLINK .bed file: it starts 6c 1c, not 6c 1b"));
  bed[1] = 0x1b, bed[2] = 0x00;
  write_file(bad, ".bed", bed, len);
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "individual-major .bed, which is not supported: convert it with plink --bfile"));
  bed[2] = 0x01;
  write_file(bad, ".bed", bed, len + 1);
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "has 25 bytes but 10 samples"));
  ASSERT_TRUE(refused(bad, TSR_EIO, fam_name, "x 7 variants"));
  ASSERT_TRUE(refused(bad, TSR_EIO, bim_name, "need 24 (3 + 3 per variant)"));
  write_file(bad, ".bed", bed, len - 5);
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "has 19 bytes but 10 samples"));
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "need 24 (3 + 3 per variant): the file is truncated"));
  write_file(bad, ".bed", bed, 2);
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "truncated: 2 bytes, shorter than the 3-byte header"));
  unlink(bed_name);
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "cannot open"));
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "No such file"));
  write_file(bad, ".bed", bed, len);

  write_text(bad, ".fam", "F1 I1 0 0 1 -9\nF1 I2 0 0 2 -9\nF2 I3 0 0 1\n");
  ASSERT_TRUE(refused(bad, TSR_EINVAL, fam_name, ".fam:3: expected 6 fields (FID IID father mother sex phenotype), found 5"));
  write_text(bad, ".fam", "\n  \n");
  ASSERT_TRUE(refused(bad, TSR_EINVAL, fam_name, "has no lines"));
  unlink(fam_name);
  ASSERT_TRUE(refused(bad, TSR_EIO, fam_name, "cannot open"));
  write_text(bad, ".fam", small_fam);
  write_text(bad, ".bim", "1 rs1 0 100 A G\n1 rs2 0 200 C T\n1 rs3 0 300 A C\n1 rs4 0 400 G T\n1 rs5 0 12x A T\n");
  ASSERT_TRUE(refused(bad, TSR_EINVAL, bim_name, ".bim:5: the bp coordinate '12x' is not an integer"));
  write_text(bad, ".bim", "1 rs1 zero 100 A G\n");
  ASSERT_TRUE(refused(bad, TSR_EINVAL, bim_name, ".bim:1: the cM position 'zero' is not a number"));
  write_text(bad, ".bim", "1 rs1 0 100 A G extra\n");
  ASSERT_TRUE(refused(bad, TSR_EINVAL, bim_name, ".bim:1: expected 6 fields (chromosome ID cM bp A1 A2), found 7"));
  write_file(bad, ".bim", "1 rs1 0 100 A\0 G\n", 17);
  ASSERT_TRUE(refused(bad, TSR_EINVAL, bim_name, "is not a text file"));
  /* A .bim with one variant fewer than the .bed holds: the size check. */
  write_text(bad, ".bim", "1 r 0 1 A G\n1 r 0 2 A G\n1 r 0 3 A G\n1 r 0 4 A G\n1 r 0 5 A G\n1 r 0 6 A G\n");
  ASSERT_TRUE(refused(bad, TSR_EIO, bed_name, "has 24 bytes but 10 samples"));
  ASSERT_TRUE(refused(bad, TSR_EIO, bim_name, "x 6 variants"));

  ASSERT_OK(cluster_still_serves(good, small_want, sizeof small_want));
  for (int w = 0; w < c.n_workers; w++) ASSERT_TRUE(cluster_alive(c.workers[w]));
  ASSERT_TRUE(cluster_alive(c.scheduler));
}

/* The array of prefix fails to compute on the workers with rc TSR_ETASK
 * and a message naming the .bed and holding needle. */
static int task_fails(const char *prefix, const char *bed_path, const char *needle)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL;
  uint8_t x[SMALL_N * SMALL_M];
  int ok = tsr_array_ctx_new(client, &ctx) == 0 && tsr_from_plink(ctx, prefix, NULL, &a) == 0;
  /* Changed between building the graph and running it. */
  char path[300];
  snprintf(path, sizeof path, "%s.bed", prefix);
  rename(bed_path, path);
  int rc = ok ? tsr_compute(ctx, a, x, sizeof x, 30000) : -1;
  const char *msg = tsr_errmsg();
  ok = ok && rc == TSR_ETASK && strstr(msg, "read_bed") != NULL && strstr(msg, path) != NULL &&
       strstr(msg, needle) != NULL;
  if (!ok) fprintf(stderr, "  rc %d: \"%s\" should name read_bed, %s and \"%s\"\n", rc, msg, path, needle);
  tsr_array_ctx_destroy(&ctx);
  return ok;
}

TEST(a_bed_changed_after_the_graph_was_built_fails_its_task)
{
  char prefix[200], replacement[220];
  uint8_t bed[64];
  snprintf(prefix, sizeof prefix, "%s/changing", tmpdir);
  snprintf(replacement, sizeof replacement, "%s/replacement.bed", tmpdir);
  size_t len = write_small_set(prefix, bed);
  FILE *f = fopen(replacement, "wb");
  fwrite(bed, 1, len - 3, f);
  fclose(f);
  ASSERT_TRUE(task_fails(prefix, replacement, "the file is truncated"));
  write_small_set(prefix, bed);
  bed[0] = 0x00;
  f = fopen(replacement, "wb");
  fwrite(bed, 1, len, f);
  fclose(f);
  ASSERT_TRUE(task_fails(prefix, replacement, "is not a PLINK .bed file"));
  write_small_set(prefix, bed);
  ASSERT_OK(cluster_still_serves(prefix, small_want, sizeof small_want));
  for (int w = 0; w < c.n_workers; w++) ASSERT_TRUE(cluster_alive(c.workers[w]));
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  snprintf(data_dir, sizeof data_dir, "%s", plink_data_dir());
  char probe[700];
  struct stat st;
  snprintf(probe, sizeof probe, "%s/" HM3 ".bed", data_dir);
  have_data = stat(probe, &st) == 0;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-plink-XXXXXX");
  if (mkdtemp(tmpdir) == NULL || cluster_start(&c, 2, 1, NULL, NULL) != 0 || tsr_client_open(&client, c.address, NULL) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  if (have_data) {
    RUN(hapmap3_has_the_genotype_counts_of_source_md);
    RUN(thousand_genomes_has_the_genotype_counts_of_source_md);
    RUN(every_chunking_gives_the_same_matrix);
    RUN(persisted_chunks_hold_the_packed_bytes);
    RUN(info_names_the_samples_and_variants);
  } else {
    fprintf(stderr, "[ SKIP ] the real-data tests: no %s (set TSR_PLINK_DATA)\n", probe);
  }
  RUN(generated_sets_read_back_whatever_the_thread_count);
  RUN(bad_files_are_refused_with_the_file_and_the_problem);
  RUN(a_bed_changed_after_the_graph_was_built_fails_its_task);
  tsr_client_close(client);
  cluster_stop(&c, kit_failed_tests > 0);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
