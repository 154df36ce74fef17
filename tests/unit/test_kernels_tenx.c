/* Unit tests of the 10x / Matrix Market pieces below the cluster: the
 * Matrix Market line parser, canonical CSR rows and the mtx_read op on
 * small files (tests/integration/test_tenx.c runs the readers end to end
 * against scanpy). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/csr.h"
#include "cpu/csr_build.h"
#include "cpu/ops.h"
#include "kernels.h"
#include "kit.h"
#include "util/mtx.h"

static char tmpdir[64];

TEST(banner_and_size_lines)
{
  tsr_mtx_header h;
  tsr_errbuf err;
  ASSERT_OK(tsr_mtx_banner("%%MatrixMarket matrix coordinate integer general\n", &h, &err));
  ASSERT_TRUE(h.integer);
  ASSERT_OK(tsr_mtx_banner("%%matrixmarket MATRIX Coordinate REAL General\r\n", &h, &err));
  ASSERT_TRUE(!h.integer);
  ASSERT_EQ(tsr_mtx_banner("%%MatrixMarket matrix coordinate pattern general", &h, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "field 'pattern' is not supported");
  ASSERT_EQ(tsr_mtx_banner("%%MatrixMarket matrix coordinate real general extra", &h, &err), TSR_EINVAL);
  ASSERT_EQ(tsr_mtx_banner("%MatrixMarket matrix coordinate real general", &h, &err), TSR_EINVAL);
  ASSERT_OK(tsr_mtx_size("  765 700\t174400 \n", &h, &err));
  ASSERT_TRUE(h.rows == 765 && h.cols == 700 && h.entries == 174400);
  ASSERT_EQ(tsr_mtx_size("765 700\n", &h, &err), TSR_EINVAL);
  ASSERT_EQ(tsr_mtx_size("-1 700 3\n", &h, &err), TSR_EINVAL);
  ASSERT_EQ(tsr_mtx_size("2 2 2000000000000\n", &h, &err), TSR_ELIMIT);
  ASSERT_CONTAINS(err.text, "entries exceed the limit");
  ASSERT_OK(tsr_mtx_size("2 2 5\n", &h, &err));  /* repeats are summed: more entries than cells is allowed */
  ASSERT_TRUE(tsr_mtx_skip("% comment") && tsr_mtx_skip("  \r\n") && !tsr_mtx_skip("1 1 1"));
}

TEST(entry_lines)
{
  tsr_mtx_header h = {3, 4, 5, true};
  tsr_errbuf err;
  int64_t i, j;
  double v;
  ASSERT_OK(tsr_mtx_entry("3 4 -12\n", &h, &i, &j, &v, &err));
  ASSERT_TRUE(i == 2 && j == 3 && v == -12);
  ASSERT_EQ(tsr_mtx_entry("3 4 1e3\n", &h, &i, &j, &v, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "the value '1e3' is not an integer");
  ASSERT_EQ(tsr_mtx_entry("4 1 1\n", &h, &i, &j, &v, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "entry (4, 1) is out of range: the matrix is 3 x 4");
  ASSERT_EQ(tsr_mtx_entry("1x 1 1\n", &h, &i, &j, &v, &err), TSR_EINVAL);
  h.integer = false;
  ASSERT_OK(tsr_mtx_entry("1 1 2.5e-1\r\n", &h, &i, &j, &v, &err));
  ASSERT_TRUE(v == 0.25);
}

/* Rows given unsorted, with a repeat and zeros, become canonical. */
TEST(canonical_rows_sort_sum_and_drop_zeros)
{
  int64_t rows = 3, nnz = 7, got = -1;
  size_t bytes = (size_t)tsr_k_csr_bytes(rows, nnz, TSR_F32);
  void *data = calloc(1, bytes);
  tsr_k_csr v;
  tsr_k_csr_init(data, rows, 5, nnz, TSR_F32, &v);
  int64_t ip[] = {0, 3, 4, 7};
  int32_t ix[] = {4, 0, 4, 2, 1, 3, 0};
  float val[] = {1, 2, 3, 0, 5, 6, 7};
  memcpy(v.indptr, ip, sizeof ip), memcpy(v.indices, ix, sizeof ix), memcpy(v.values, val, sizeof val);
  tsr_errbuf err;
  ASSERT_OK(tsr_k_csr_canonical_f32(&v, &got, &err));
  ASSERT_EQ(got, 5);
  const int64_t want_ip[] = {0, 2, 2, 5};
  const int32_t want_ix[] = {0, 4, 0, 1, 3};
  const float want_v[] = {2, 4, 7, 5, 6};
  ASSERT_TRUE(memcmp(v.indptr, want_ip, sizeof want_ip) == 0);
  ASSERT_TRUE(memcmp(v.indices, want_ix, sizeof want_ix) == 0);
  ASSERT_TRUE(memcmp(v.values, want_v, sizeof want_v) == 0);
  free(data);
}

static const char small[] = "%%MatrixMarket matrix coordinate integer general\n3 2 4\n2 2 5\n1 1 1\n3 1 2\n1 2 7\n";

/* mtx_read of small with the given chunk params into dense (rows x cols). */
static int run_mtx(const char *path, bool transpose, int64_t row0, int64_t rows, int64_t nnz, int64_t begin, int64_t end,
                   float *dense, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_str(&p, "path", path, strlen(path));
  tsr_params_add_bool(&p, "transpose", transpose);
  const char *names[] = {"file_rows", "file_cols", "entries", "row0", "rows", "nnz", "begin", "end", "line0"};
  int64_t vals[] = {3, 2, 4, row0, rows, nnz, begin, end, 3};
  for (int i = 0; i < 9; i++) tsr_params_add_int(&p, names[i], vals[i]);
  tsr_buf out;
  int rc = tsr_op_run_cpu(tsr_op_find("mtx_read"), &p, NULL, 0, &out, err);
  tsr_params_clear(&p);
  if (rc != 0) return rc;
  tsr_k_csr v;
  rc = tsr_k_csr_view(&out, true, &v, err);
  int64_t cols = transpose ? 3 : 2;
  memset(dense, 0, (size_t)(rows * cols) * sizeof *dense);
  for (int64_t r = 0; rc == 0 && r < rows; r++)
    for (int64_t k = v.indptr[r]; k < v.indptr[r + 1]; k++) dense[r * cols + v.indices[k]] = ((float *)v.values)[k];
  free(out.data);
  return rc;
}

TEST(mtx_read_reads_its_rows_from_its_byte_range)
{
  char path[128];
  snprintf(path, sizeof path, "%s/small.mtx", tmpdir);
  FILE *f = fopen(path, "w");
  fputs(small, f);
  fclose(f);
  int64_t first = (int64_t)strlen("%%MatrixMarket matrix coordinate integer general\n3 2 4\n"), end = (int64_t)strlen(small);
  float d[6];
  tsr_errbuf err;
  ASSERT_OK(run_mtx(path, false, 0, 3, 4, first, end, d, &err));
  const float all[6] = {1, 7, 0, 5, 2, 0};
  ASSERT_TRUE(memcmp(d, all, sizeof all) == 0);
  ASSERT_OK(run_mtx(path, true, 1, 1, 2, first, end, d, &err));  /* column 2 as a row */
  const float col2[3] = {7, 5, 0};
  ASSERT_TRUE(memcmp(d, col2, sizeof col2) == 0);
  /* Rows [2, 3) with a range starting at "3 1 2": only that line is read. */
  int64_t at = (int64_t)(strstr(small, "3 1 2") - small);
  ASSERT_OK(run_mtx(path, false, 2, 1, 1, at, at + 6, d, &err));
  ASSERT_TRUE(d[0] == 2 && d[1] == 0);
  /* The scan said 2 entries: the file "changed". */
  ASSERT_EQ(run_mtx(path, false, 2, 1, 2, first, end, d, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "fewer than the 2 entries the scan found: the file changed");
  ASSERT_EQ(run_mtx(path, false, 2, 2, 1, first, end, d, &err), TSR_ESHAPE);  /* rows past the end */
  unlink(path);
  ASSERT_EQ(run_mtx(path, false, 0, 3, 4, first, end, d, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "cannot open");
}

TEST(tenx_h5_read_refuses_bad_params_and_files)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  const char *path = "/nonexistent/x.h5";
  tsr_params_add_str(&p, "path", path, strlen(path));
  tsr_params_add_str(&p, "group", "/matrix", 7);
  const char *names[] = {"n_cells", "n_genes", "entries", "row0", "rows", "p0", "nnz"};
  int64_t vals[] = {3, 2, 3, 0, 3, 0, 3};
  for (int i = 0; i < 7; i++) tsr_params_add_int(&p, names[i], vals[i]);
  ASSERT_EQ(tsr_op_run_cpu(tsr_op_find("tenx_h5_read"), &p, NULL, 0, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "cannot open /nonexistent/x.h5 as an HDF5 file");
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "path", path, strlen(path));
  tsr_params_add_str(&p, "group", "/matrix", 7);
  vals[4] = 4;  /* rows past n_cells */
  for (int i = 0; i < 7; i++) tsr_params_add_int(&p, names[i], vals[i]);
  ASSERT_EQ(tsr_op_run_cpu(tsr_op_find("tenx_h5_read"), &p, NULL, 0, &out, &err), TSR_ESHAPE);
  tsr_params_clear(&p);
}

int main(void)
{
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr-ktenx-XXXXXX");
  if (mkdtemp(tmpdir) == NULL) return 1;
  tsr_ops_init(false);
  RUN(banner_and_size_lines);
  RUN(entry_lines);
  RUN(canonical_rows_sort_sum_and_drop_zeros);
  RUN(mtx_read_reads_its_rows_from_its_byte_range);
  RUN(tenx_h5_read_refuses_bad_params_and_files);
  rmdir(tmpdir);
  return kit_summary();
}
