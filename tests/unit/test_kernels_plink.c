/* Unit tests of read_bed (kernels/cpu/plink.c): the 2-bit transpose and
 * remap against a one-genotype-at-a-time reference for many shapes, first
 * samples (every residue mod 4), strides and batch sizes; the op on real
 * files; and each refused file and parameter with its message. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/ops.h"
#include "kernels.h"
#include "kit.h"

static char tmpdir[64];

/* PLINK 1.9 --recode A: A1 dosage of each .bed code (01 is missing). */
static const uint8_t dosage_of_code[4] = {2, 3, 1, 0};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint8_t rand_byte(void)
{
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (uint8_t)(rng_state >> 24);
}

/* The reference: each genotype decoded and packed on its own. */
static void naive(const uint8_t *in, size_t istride, int q, int64_t rows, int64_t cols, uint8_t *out, size_t ostride)
{
  for (int64_t r = 0; r < rows; r++) {
    memset(out + r * ostride, 0, (size_t)(cols + 3) / 4);
    for (int64_t c = 0; c < cols; c++) {
      int64_t s = q + r;
      unsigned code = (in[c * (int64_t)istride + s / 4] >> (2 * (s % 4))) & 3u;
      out[r * ostride + c / 4] |= (uint8_t)(dosage_of_code[code] << (2 * (c % 4)));
    }
  }
}

/* One shape: random input with junk around it, output rows wider than
 * needed and filled with a sentinel that must survive past each row. */
static int check_shape(int q, int64_t rows, int64_t cols, size_t extra)
{
  size_t seg = (size_t)(q + rows + 3) / 4, istride = seg + extra, ob = (size_t)(cols + 3) / 4, ostride = ob + 3;
  size_t in_len = istride * (size_t)cols + 8, out_len = ostride * (size_t)rows + 8;
  uint8_t *in = malloc(in_len), *got = malloc(out_len), *want = malloc(out_len);
  for (size_t i = 0; i < in_len; i++) in[i] = rand_byte();
  memset(got, 0xEE, out_len);
  memset(want, 0xEE, out_len);
  tsr_k_bed_transpose(in, istride, q, rows, cols, got, ostride);
  naive(in, istride, q, rows, cols, want, ostride);
  int same = memcmp(got, want, out_len) == 0;
  if (!same) fprintf(stderr, "  mismatch: q %d rows %lld cols %lld extra %zu\n", q, (long long)rows, (long long)cols, extra);
  free(in), free(got), free(want);
  return same;
}

TEST(each_code_maps_to_its_a1_dosage)
{
  for (unsigned code = 0; code < 4; code++)
    for (int q = 0; q < 4; q++) {
      uint8_t in = (uint8_t)(code << (2 * q)), out = 0xFF;
      tsr_k_bed_transpose(&in, 1, q, 1, 1, &out, 1);
      ASSERT_EQ(out, dosage_of_code[code]);  /* pad bits of the one output byte are zero */
    }
}

TEST(transpose_matches_the_reference_for_small_shapes)
{
  for (int q = 0; q < 4; q++)
    for (int64_t rows = 0; rows <= 21; rows++)
      for (int64_t cols = 0; cols <= 19; cols++) ASSERT_TRUE(check_shape(q, rows, cols, (size_t)(rows + cols) % 3));
}

/* Past the tiles (64 sample bytes x 16 variant groups) and their edges. */
TEST(transpose_matches_the_reference_across_tiles)
{
  static const int64_t rows[] = {252, 253, 255, 256, 257, 511, 1000, 1027};
  static const int64_t cols[] = {63, 64, 65, 127, 130, 301};
  for (int q = 0; q < 4; q++)
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
      for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) ASSERT_TRUE(check_shape(q, rows[r], cols[c], r % 2 ? 5 : 0));
}

/* ---------- files ---------- */

/* Writes PATH: header bytes h0 h1 h2, then len random bytes; returns them. */
static uint8_t *write_bed(const char *path, const uint8_t header[3], size_t len)
{
  uint8_t *body = malloc(len + 1);
  for (size_t i = 0; i < len; i++) body[i] = rand_byte();
  FILE *f = fopen(path, "wb");
  fwrite(header, 1, 3, f);
  fwrite(body, 1, len, f);
  fclose(f);
  return body;
}

static const uint8_t good_header[3] = {0x6c, 0x1b, 0x01};

/* tsr_k_bed_read of slice s from the file whose records are body. */
static int check_read(const char *path, const uint8_t *body, tsr_k_bed_slice s, tsr_k_bed_io io)
{
  size_t bps = (size_t)(s.n_samples + 3) / 4, ob = (size_t)(s.cols + 3) / 4;
  size_t len = (size_t)s.rows * ob + 1;
  uint8_t *got = malloc(len), *want = malloc(len);
  memset(got, 0xEE, len);
  memset(want, 0xEE, len);
  naive(body + (size_t)s.col0 * bps + (size_t)s.row0 / 4, bps, (int)(s.row0 % 4), s.rows, s.cols, want, ob);
  tsr_errbuf err = {{0}};
  int fd = open(path, O_RDONLY);
  int rc = tsr_k_bed_check(fd, &s, &err);
  if (rc == 0) rc = tsr_k_bed_read(fd, &s, &io, got, &err);
  close(fd);
  int same = rc == 0 && memcmp(got, want, len) == 0;
  if (!same)
    fprintf(stderr, "  read rc %d (%s): rows [%lld +%lld) cols [%lld +%lld) batch %zu skip %llu\n", rc, err.text,
            (long long)s.row0, (long long)s.rows, (long long)s.col0, (long long)s.cols, io.batch_bytes,
            (unsigned long long)io.skip_bytes);
  free(got), free(want);
  return same;
}

/* Whole records (one pread, or batches of 4+ records) and per-record
 * reads of the chunk's bytes, from every first sample mod 4. */
TEST(read_matches_the_reference_for_chunks_and_batches)
{
  char path[128];
  snprintf(path, sizeof path, "%s/r.bed", tmpdir);
  const int64_t n = 157, m = 61;
  uint8_t *body = write_bed(path, good_header, (size_t)((n + 3) / 4 * m));
  static const int64_t row_cases[][2] = {{0, 157}, {1, 156}, {2, 150}, {3, 9}, {4, 4}, {101, 56}, {155, 2}, {0, 1}, {77, 0}};
  static const int64_t col_cases[][2] = {{0, 61}, {3, 17}, {60, 1}, {8, 40}, {13, 0}};
  static const size_t batches[] = {1, 100, 1000, (size_t)1 << 26};
  static const uint64_t skips[] = {0, 20, UINT64_MAX};
  for (size_t r = 0; r < sizeof row_cases / sizeof row_cases[0]; r++)
    for (size_t c = 0; c < sizeof col_cases / sizeof col_cases[0]; c++)
      for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
        for (size_t k = 0; k < sizeof skips / sizeof skips[0]; k++) {
          tsr_k_bed_slice s = {path, n, m, row_cases[r][0], row_cases[r][1], col_cases[c][0], col_cases[c][1]};
          tsr_k_bed_io io = {batches[b], skips[k]};
          ASSERT_TRUE(check_read(path, body, s, io));
        }
  free(body);
}

/* Runs read_bed on path with the given counts and chunk. */
static int run_op(const char *path, const int64_t v[6], tsr_buf *out, tsr_errbuf *err)
{
  static const char *const names[] = {"n_samples", "n_variants", "row0", "rows", "col0", "cols"};
  tsr_params p = TSR_PARAMS_INIT;
  if (path != NULL) tsr_params_add_str(&p, "path", path, strlen(path));
  for (int i = 0; i < 6; i++)
    if (v[i] != INT64_MIN) tsr_params_add_int(&p, names[i], v[i]);
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  int rc = tsr_op_run_cpu(tsr_op_find("read_bed"), &p, NULL, 0, out, err);
  tsr_params_clear(&p);
  return rc;
}

TEST(op_reads_a_packed_chunk)
{
  char path[128];
  snprintf(path, sizeof path, "%s/op.bed", tmpdir);
  uint8_t *body = write_bed(path, good_header, 3 * 10);  /* 10 samples (3 bytes each) x 10 variants */
  const int64_t v[6] = {10, 10, 3, 6, 2, 7};
  tsr_buf out;
  tsr_errbuf err;
  ASSERT_OK(run_op(path, v, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_U8);
  ASSERT_EQ(out.meta.ndim, 2);
  ASSERT_EQ(out.meta.shape[0], 6);
  ASSERT_EQ(out.meta.shape[1], 2);
  uint8_t want[12];
  naive(body + 2 * 3, 3, 3, 6, 7, want, 2);
  ASSERT_EQ(memcmp(out.data, want, sizeof want), 0);
  free(out.data);
  free(body);
}

/* The op fails with rc and a message naming path and holding needle. */
static int op_fails(const char *path, const int64_t v[6], int rc, const char *needle)
{
  tsr_buf out;
  tsr_errbuf err;
  int got = run_op(path, v, &out, &err);
  if (got == 0) free(out.data);
  int ok = got == rc && strstr(err.text, needle) != NULL && (path == NULL || strstr(err.text, path) != NULL);
  if (!ok) fprintf(stderr, "  rc %d (want %d): \"%s\" should name the file and hold \"%s\"\n", got, rc, err.text, needle);
  return ok;
}

TEST(bad_files_fail_with_the_file_and_the_problem)
{
  char path[128], missing[128];
  snprintf(path, sizeof path, "%s/bad.bed", tmpdir);
  snprintf(missing, sizeof missing, "%s/none.bed", tmpdir);
  const int64_t v[6] = {10, 10, 0, 10, 0, 10};
  static const uint8_t not_bed[3] = {0x6c, 0x1c, 0x01}, ind_major[3] = {0x6c, 0x1b, 0x00}, mode9[3] = {0x6c, 0x1b, 0x09};
  free(write_bed(path, not_bed, 30));
  ASSERT_TRUE(op_fails(path, v, TSR_EIO, "not a PLINK .bed file"));
  free(write_bed(path, ind_major, 30));
  ASSERT_TRUE(op_fails(path, v, TSR_EIO, "individual-major .bed, which is not supported: convert it with plink"));
  free(write_bed(path, mode9, 30));
  ASSERT_TRUE(op_fails(path, v, TSR_EIO, "mode byte 09"));
  free(write_bed(path, good_header, 29));
  ASSERT_TRUE(op_fails(path, v, TSR_EIO, "has 32 bytes but 10 samples x 10 variants need 33 (3 + 3 per variant): the file is truncated"));
  free(write_bed(path, good_header, 31));
  ASSERT_TRUE(op_fails(path, v, TSR_EIO, "has 34 bytes but 10 samples x 10 variants need 33"));
  FILE *f = fopen(path, "wb");
  fwrite(good_header, 1, 2, f);
  fclose(f);
  ASSERT_TRUE(op_fails(path, v, TSR_EIO, "shorter than the 3-byte header"));
  ASSERT_TRUE(op_fails(missing, v, TSR_EIO, "cannot open"));
}

TEST(bad_params_are_refused_before_any_read)
{
  char path[128];
  snprintf(path, sizeof path, "%s/p.bed", tmpdir);
  free(write_bed(path, good_header, 30));
  const int64_t past_rows[6] = {10, 10, 5, 6, 0, 10}, past_cols[6] = {10, 10, 0, 10, 9, 2};
  const int64_t negative[6] = {10, 10, -1, 3, 0, 10}, no_cols[6] = {10, 10, 0, 10, 0, INT64_MIN};
  const int64_t huge[6] = {INT64_MAX, INT64_MAX, 0, 1, 0, 1};
  ASSERT_TRUE(op_fails(path, past_rows, TSR_ESHAPE, "exceed the file's 10 x 10"));
  ASSERT_TRUE(op_fails(path, past_cols, TSR_ESHAPE, "exceed the file's 10 x 10"));
  ASSERT_TRUE(op_fails(NULL, negative, TSR_EINVAL, "'path'"));
  tsr_buf out;
  tsr_errbuf err;
  ASSERT_EQ(run_op(path, negative, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "'row0' must be >= 0");
  ASSERT_EQ(run_op(path, no_cols, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "cols");
  ASSERT_TRUE(op_fails(path, huge, TSR_ESHAPE, "overflow"));
}

int main(void)
{
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-plink-unit-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  RUN(each_code_maps_to_its_a1_dosage);
  RUN(transpose_matches_the_reference_for_small_shapes);
  RUN(transpose_matches_the_reference_across_tiles);
  RUN(read_matches_the_reference_for_chunks_and_batches);
  RUN(op_reads_a_packed_chunk);
  RUN(bad_files_fail_with_the_file_and_the_problem);
  RUN(bad_params_are_refused_before_any_read);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return kit_summary();
}
