/* Unit tests of kernels/, second part: the ops the array graphs build on —
 * transpose, slice, assemble, view, qr, svd, bmul, signs, matmul with
 * integer inputs, the skinny f64 kernels and matmul_random (checked against
 * the random op's chunk multiplied by plain matmul, and bit for bit against
 * the skinny kernels' fma order). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "kernels.h"
#include "kit.h"

/* ---------- helpers ---------- */

static tsr_buf buf_of(tsr_dtype dtype, int ndim, const int64_t *shape, void *data)
{
  tsr_buf b;
  memset(&b, 0, sizeof b);
  b.meta.dtype = dtype;
  b.meta.ndim = ndim;
  for (int d = 0; d < ndim; d++) b.meta.shape[d] = shape[d];
  b.data = data;
  b.nbytes = (size_t)tsr_meta_nbytes(&b.meta);
  return b;
}

static int run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  const tsr_op_def *op = tsr_op_find(name);
  if (op == NULL) return tsr_fail(err, TSR_EUNKNOWNOP, "no op %s", name);
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  return tsr_op_run_cpu(op, p, in, n_in, out, err);
}

/* Element i of a buffer of dtype as double. */
static double at(const tsr_buf *b, int64_t i)
{
  switch (b->meta.dtype) {
  case TSR_U8: return ((const uint8_t *)b->data)[i];
  case TSR_I32: return ((const int32_t *)b->data)[i];
  case TSR_I64: return (double)((const int64_t *)b->data)[i];
  case TSR_F32: return ((const float *)b->data)[i];
  default: return ((const double *)b->data)[i];
  }
}

static double *filled(int64_t n, double scale)
{
  double *x = malloc((size_t)n * sizeof *x);
  for (int64_t i = 0; i < n; i++) x[i] = sin((double)i * 0.731 + scale) * scale;
  return x;
}

/* ---------- layout ---------- */

TEST(transpose_all_sizes)
{
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[2] = {37, 70};
  unsigned char data[37 * 70 * 8];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 13 + 5);
  static const tsr_dtype dts[] = {TSR_U8, TSR_I32, TSR_F64};
  for (int t = 0; t < 3; t++) {
    tsr_buf in = buf_of(dts[t], 2, shape, data);
    size_t es = tsr_dtype_size(dts[t]);
    ASSERT_OK(run("transpose", NULL, &in, 1, &out, &err));
    ASSERT_EQ(out.meta.shape[0], 70);
    ASSERT_EQ(out.meta.shape[1], 37);
    for (int64_t r = 0; r < 37; r++)
      for (int64_t c = 0; c < 70; c++)
        ASSERT_TRUE(memcmp((char *)out.data + (c * 37 + r) * (int64_t)es, data + (r * 70 + c) * (int64_t)es, es) == 0);
    free(out.data);
  }
  int64_t s1[1] = {4};
  tsr_buf v = buf_of(TSR_F64, 1, s1, data);
  ASSERT_EQ(run("transpose", NULL, &v, 1, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "transpose: input must be 2-D, got f64[4]");
}

TEST(slice_and_view)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[3] = {4, 5, 6}, start[3] = {1, 0, 2}, stop[3] = {3, 5, 5};
  int32_t x[120];
  for (int i = 0; i < 120; i++) x[i] = i;
  tsr_buf in = buf_of(TSR_I32, 3, shape, x);
  tsr_params_add_ints(&p, "start", start, 3);
  tsr_params_add_ints(&p, "stop", stop, 3);
  ASSERT_OK(run("slice", &p, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.shape[0], 2);
  ASSERT_EQ(out.meta.shape[1], 5);
  ASSERT_EQ(out.meta.shape[2], 3);
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 5; j++)
      for (int64_t k = 0; k < 3; k++)
        ASSERT_EQ(((int32_t *)out.data)[(i * 5 + j) * 3 + k], ((1 + i) * 5 + j) * 6 + 2 + k);
  free(out.data);
  tsr_params_clear(&p);
  int64_t bad[3] = {0, 0, 7};
  tsr_params_add_ints(&p, "start", start, 3);
  tsr_params_add_ints(&p, "stop", bad, 3);
  ASSERT_EQ(run("slice", &p, &in, 1, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "slice: [[1,0,2], [0,0,7]) is not inside i32[4,5,6]");
  tsr_params_clear(&p);
  tsr_params_add_ints(&p, "start", start, 2);
  tsr_params_add_ints(&p, "stop", stop, 3);
  ASSERT_EQ(run("slice", &p, &in, 1, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "one entry per axis");

  int64_t vshape[2] = {3, 7};
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "offset", 50);
  tsr_params_add_ints(&p, "shape", vshape, 2);
  ASSERT_OK(run("view", &p, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.ndim, 2);
  ASSERT_EQ(((int32_t *)out.data)[20], 70);
  free(out.data);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "offset", 100);
  tsr_params_add_ints(&p, "shape", vshape, 2);
  ASSERT_EQ(run("view", &p, &in, 1, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "view: elements [100, +[3,7]) are not inside i32[4,5,6] (120 elements)");
  tsr_params_clear(&p);
}

/* A 7x9 array cut into a 3x2 grid of irregular pieces and put back. */
TEST(assemble_pieces)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t rows[4] = {0, 3, 4, 7}, cols[3] = {0, 5, 9};
  double whole[63], pieces[6][63];
  tsr_buf in[6];
  for (int i = 0; i < 63; i++) whole[i] = i * 1.5;
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 2; b++) {
      int64_t shape[2] = {rows[a + 1] - rows[a], cols[b + 1] - cols[b]};
      for (int64_t r = 0; r < shape[0]; r++)
        for (int64_t c = 0; c < shape[1]; c++)
          pieces[a * 2 + b][r * shape[1] + c] = whole[(rows[a] + r) * 9 + cols[b] + c];
      in[a * 2 + b] = buf_of(TSR_F64, 2, shape, pieces[a * 2 + b]);
    }
  int64_t grid[2] = {3, 2};
  tsr_params_add_ints(&p, "grid", grid, 2);
  ASSERT_OK(run("assemble", &p, in, 6, &out, &err));
  ASSERT_EQ(out.meta.shape[0], 7);
  ASSERT_EQ(out.meta.shape[1], 9);
  ASSERT_TRUE(memcmp(out.data, whole, sizeof whole) == 0);
  free(out.data);
  ASSERT_EQ(run("assemble", &p, in, 5, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "assemble: grid [3,2] does not fit 5 pieces");
  int64_t odd[2] = {3, 4};
  tsr_buf keep = in[3];
  in[3] = buf_of(TSR_F64, 2, odd, pieces[3]);
  ASSERT_EQ(run("assemble", &p, in, 6, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "assemble: piece 3 is f64[3,4] but its grid slot along axis 0 is 1 wide");
  in[3] = keep;
  in[2].meta.dtype = TSR_I64;
  ASSERT_EQ(run("assemble", &p, in, 6, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "assemble: piece 2 is i64[1,5] but piece 0 is f64[3,5]");
  tsr_params_clear(&p);
}

/* ---------- qr, svd ---------- */

static void check_qr(int64_t m, int64_t n, tsr_dtype dt, double tol)
{
  tsr_errbuf err;
  tsr_buf out;
  double *a = filled(m * n, 1.3);
  float *af = malloc((size_t)(m * n) * sizeof *af);
  for (int64_t i = 0; i < m * n; i++) af[i] = (float)a[i];
  int64_t shape[2] = {m, n};
  tsr_buf in = buf_of(dt, 2, shape, dt == TSR_F32 ? (void *)af : (void *)a);
  if (dt == TSR_F32)
    for (int64_t i = 0; i < m * n; i++) a[i] = af[i];
  ASSERT_OK(run("qr", NULL, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.dtype, dt);
  ASSERT_EQ(out.meta.shape[0], m + n);
  ASSERT_EQ(out.meta.shape[1], n);
  for (int64_t i = 0; i < m; i++)  /* A = Q R */
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t l = 0; l < n; l++) s += at(&out, i * n + l) * at(&out, (m + l) * n + j);
      ASSERT_NEAR(s, a[i * n + j], tol);
    }
  for (int64_t i = 0; i < n; i++)  /* R upper triangular */
    for (int64_t j = 0; j < i; j++) ASSERT_TRUE(at(&out, (m + i) * n + j) == 0.0);
  int64_t r = m < n ? m : n;
  for (int64_t i = 0; i < r; i++)  /* Q's first r columns orthonormal */
    for (int64_t j = 0; j < r; j++) {
      double s = 0;
      for (int64_t l = 0; l < m; l++) s += at(&out, l * n + i) * at(&out, l * n + j);
      ASSERT_NEAR(s, i == j ? 1.0 : 0.0, tol);
    }
  free(out.data);
  free(a);
  free(af);
}

TEST(qr_shapes)
{
  check_qr(40, 7, TSR_F64, 1e-12);
  check_qr(7, 7, TSR_F64, 1e-12);
  check_qr(3, 7, TSR_F64, 1e-12);  /* short and fat: zero padding */
  check_qr(30, 5, TSR_F32, 1e-5);
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[2] = {3, 2};
  uint8_t u[6] = {1, 2, 3, 4, 5, 7};
  tsr_buf in = buf_of(TSR_U8, 2, shape, u);
  ASSERT_OK(run("qr", NULL, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_F64);
  double s = at(&out, 2 * 2 + 0) * at(&out, 3 * 2 + 1) + at(&out, 2 * 2 + 1) * at(&out, 4 * 2 + 1);
  ASSERT_NEAR(s, 7.0, 1e-12);  /* A[2][1] = Q[2,:] . R[:,1] */
  free(out.data);
}

static void check_svd(int64_t m, int64_t n)
{
  tsr_errbuf err;
  tsr_buf out;
  double *a = filled(m * n, 0.7);
  int64_t shape[2] = {m, n}, r = m < n ? m : n;
  tsr_buf in = buf_of(TSR_F64, 2, shape, a);
  ASSERT_OK(run("svd", NULL, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.ndim, 1);
  ASSERT_EQ(out.meta.shape[0], m * r + r + r * n);
  const double *u = out.data, *s = u + m * r, *vt = s + r;
  for (int64_t i = 1; i < r; i++) ASSERT_TRUE(s[i - 1] >= s[i]);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double x = 0;
      for (int64_t l = 0; l < r; l++) x += u[i * r + l] * s[l] * vt[l * n + j];
      ASSERT_NEAR(x, a[i * n + j], 1e-12);
    }
  free(out.data);
  free(a);
}

TEST(svd_shapes)
{
  check_svd(30, 6);
  check_svd(6, 30);
  check_svd(9, 9);
  tsr_errbuf err;
  tsr_buf out;
  int64_t s3[3] = {2, 2, 2};
  double d[8] = {0};
  tsr_buf in = buf_of(TSR_F64, 3, s3, d);
  ASSERT_EQ(run("svd", NULL, &in, 1, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "svd: input must be 2-D, got f64[2,2,2]");
}

/* ---------- bmul, signs ---------- */

TEST(bmul_and_signs)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2};
  double m[6] = {1, 2, 3, 4, 5, 6}, cols[3] = {10, -1, 0.5};
  int64_t rowv[2] = {-2, 3};
  tsr_buf in[2] = {buf_of(TSR_F64, 2, s23, m), buf_of(TSR_F64, 1, s3, cols)};
  tsr_params_add_int(&p, "axis", 1);
  ASSERT_OK(run("bmul", &p, in, 2, &out, &err));
  double want1[6] = {10, -2, 1.5, 40, -5, 3};
  ASSERT_TRUE(memcmp(out.data, want1, sizeof want1) == 0);
  free(out.data);
  ASSERT_EQ(run("bmul", &p, (tsr_buf[]){in[0], buf_of(TSR_I64, 1, s2, rowv)}, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "bmul: axis 1 needs a vector of 3 (the columns of f64[2,3]), got i64[2]");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "axis", 0);
  in[1] = buf_of(TSR_I64, 1, s2, rowv);
  ASSERT_OK(run("bmul", &p, in, 2, &out, &err));
  double want0[6] = {-2, -4, -6, 12, 15, 18};
  ASSERT_TRUE(memcmp(out.data, want0, sizeof want0) == 0);
  free(out.data);
  tsr_params_clear(&p);
  ASSERT_EQ(run("bmul", &p, in, 2, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "bmul: missing parameter 'axis'");

  double x[5] = {-0.0, 2, -3, NAN, 0};
  int64_t s5[1] = {5};
  tsr_buf sx = buf_of(TSR_F64, 1, s5, x);
  ASSERT_OK(run("signs", NULL, &sx, 1, &out, &err));
  double wants[5] = {1, 1, -1, -1, 1};
  ASSERT_TRUE(memcmp(out.data, wants, sizeof wants) == 0);
  free(out.data);
  int32_t xi[3] = {-5, 0, 7};
  tsr_buf si = buf_of(TSR_I32, 1, s3, xi);
  ASSERT_OK(run("signs", NULL, &si, 1, &out, &err));
  ASSERT_EQ(((int32_t *)out.data)[0], -1);
  ASSERT_EQ(((int32_t *)out.data)[1], 1);
  free(out.data);
}

/* ---------- matmul with integer inputs ---------- */

TEST(matmul_integer_inputs)
{
  enum { M = 1000, K = 5000, N = 2 };
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  uint8_t *a = malloc(M * K);
  double *b = filled(K * N, 1.0);
  for (int i = 0; i < M * K; i++) a[i] = (uint8_t)(i * 7 % 251);
  int64_t sa[2] = {M, K}, sb[2] = {K, N};
  tsr_buf in[2] = {buf_of(TSR_U8, 2, sa, a), buf_of(TSR_F64, 2, sb, b)};
  ASSERT_OK(run("matmul", &p, in, 2, &out, &err));  /* several k-panels */
  ASSERT_EQ(out.meta.dtype, TSR_F64);
  for (int i = 0; i < M; i += 97)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int l = 0; l < K; l++) s += a[i * K + l] * b[l * N + j];
      ASSERT_NEAR(((double *)out.data)[i * N + j], s, 1e-12);
    }
  free(out.data);
  /* both integer, transposed: i32ᵀ @ i64ᵀ → f64 */
  int32_t x[6] = {1, 2, 3, 4, 5, 6};
  int64_t y[6] = {1, -1, 2, 0, 3, 1}, s32[2] = {3, 2}, s23[2] = {2, 3};
  tsr_buf iin[2] = {buf_of(TSR_I32, 2, s32, x), buf_of(TSR_I64, 2, s23, y)};
  tsr_params_add_bool(&p, "trans_a", true);
  tsr_params_add_bool(&p, "trans_b", true);
  ASSERT_OK(run("matmul", &p, iin, 2, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_F64);
  /* xᵀ = [[1,3,5],[2,4,6]], yᵀ = [[1,0],[-1,3],[2,1]] */
  double want[4] = {8, 14, 10, 18};
  for (int i = 0; i < 4; i++) ASSERT_NEAR(((double *)out.data)[i], want[i], 0);
  free(out.data);
  tsr_params_clear(&p);
  free(a);
  free(b);
}

/* ---------- skinny f64 kernels ---------- */

static void ref_chain(int64_t M, int64_t N, int64_t K, const double *a, int64_t a_rs, int64_t a_cs, const double *b,
                      int64_t b_rs, int64_t b_cs, double *c);

/* The contract of gemm_skinny.c, written out: c = fma(a, b, c) per term in
 * increasing order of the inner index. */
static void ref_btx(int64_t rows, int64_t cols, int64_t m, const double *b, int64_t ldb, const double *x, int64_t ldx,
                    double *c, int64_t ldc)
{
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < cols; j++)
      for (int64_t r = 0; r < rows; r++) c[i * ldc + j] = fma(b[r * ldb + i], x[r * ldx + j], c[i * ldc + j]);
}

static void ref_xb(int64_t rows, int64_t cols, int64_t n, const double *x, int64_t ldx, const double *b, int64_t ldb,
                   double *c, int64_t ldc)
{
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t k = 0; k < cols; k++) c[r * ldc + j] = fma(x[r * ldx + k], b[k * ldb + j], c[r * ldc + j]);
}

/* Every isa gives the reference's bytes: shapes around every blocking
 * remainder (5-row and 32/8-column blocks of btx, 8-row and 24/8-column
 * blocks of xb), padded leading dimensions, C accumulated onto. */
TEST(gemm_skinny_paths)
{
  static const tsr_k_isa isas[] = {TSR_K_ISA_BEST, TSR_K_ISA_SCALAR, TSR_K_ISA_AVX2, TSR_K_ISA_AVX512};
  static const int64_t rows_of[] = {1, 2, 8, 9, 17}, cols_of[] = {1, 3, 8, 13, 32, 37, 70};
  static const int64_t narrow_of[] = {1, 4, 5, 8, 19, 20, 24, 25, 47};
  double *x = filled(17 * 73, 1.3), *b = filled(73 * 50, 0.7), *c0 = filled(50 * 73, 2.1);
  double *want = malloc(50 * 73 * sizeof *want), *got = malloc(50 * 73 * sizeof *got);
  for (size_t ri = 0; ri < sizeof rows_of / sizeof rows_of[0]; ri++)
    for (size_t ci = 0; ci < sizeof cols_of / sizeof cols_of[0]; ci++)
      for (size_t ni = 0; ni < sizeof narrow_of / sizeof narrow_of[0]; ni++) {
        int64_t rows = rows_of[ri], cols = cols_of[ci], w = narrow_of[ni], ldx = cols + 3, ldb = w + 2;
        /* btx: C [w, cols] (ldc cols + 1) += B [rows, w]ᵀ X [rows, cols] */
        memcpy(want, c0, 50 * 73 * sizeof *want);
        ref_btx(rows, cols, w, b, ldb, x, ldx, want, cols + 1);
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
          memcpy(got, c0, 50 * 73 * sizeof *got);
          tsr_k_gemm_btx_f64(isas[i], rows, cols, w, b, ldb, x, ldx, got, cols + 1);
          if (memcmp(got, want, 50 * 73 * sizeof *got) != 0)
            KIT_FAIL_("btx isa %d rows %lld cols %lld m %lld", (int)isas[i], (long long)rows, (long long)cols,
                      (long long)w);
        }
        /* xb: C [rows, w] (ldc w + 1) += X [rows, cols] B [cols, w] */
        memcpy(want, c0, 50 * 73 * sizeof *want);
        ref_xb(rows, cols, w, x, ldx, b, ldb, want, w + 1);
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
          memcpy(got, c0, 50 * 73 * sizeof *got);
          tsr_k_gemm_xb_f64(isas[i], rows, cols, w, x, ldx, b, ldb, got, w + 1);
          if (memcmp(got, want, 50 * 73 * sizeof *got) != 0)
            KIT_FAIL_("xb isa %d rows %lld cols %lld n %lld", (int)isas[i], (long long)rows, (long long)cols,
                      (long long)w);
        }
      }
  free(x), free(b), free(c0), free(want), free(got);
}

/* An integer operand times a narrow f64 one is exactly the in-order fma
 * chain (linalg_skinny.c), for every placement and transpose, on shapes
 * with tile remainders; x holds the integer operand's values as f64. */
static const char *skinny_case(tsr_dtype xdt, bool x_is_a, bool ta, bool tb, int64_t w, int64_t big, int64_t k)
{
  static char why[160];
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out = {0};
  int64_t m = x_is_a ? big : w, n = x_is_a ? w : big;
  int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n};
  int64_t xn = x_is_a ? m * k : k * n, wn = x_is_a ? k * n : m * k;
  double *xv = malloc((size_t)xn * sizeof *xv), *wv = filled(wn, 1.1), *want = malloc((size_t)(m * n) * sizeof *want);
  void *xraw = malloc((size_t)xn * 8);
  for (int64_t i = 0; i < xn; i++) {
    int64_t v = (i * 7919) % 251 - (xdt == TSR_U8 ? 0 : 100);
    xv[i] = (double)v;
    if (xdt == TSR_U8) ((uint8_t *)xraw)[i] = (uint8_t)v;
    else if (xdt == TSR_I32) ((int32_t *)xraw)[i] = (int32_t)v;
    else ((int64_t *)xraw)[i] = v;
  }
  const double *av = x_is_a ? xv : wv, *bv = x_is_a ? wv : xv;
  ref_chain(m, n, k, av, ta ? 1 : k, ta ? m : 1, bv, tb ? 1 : n, tb ? k : 1, want);
  tsr_buf in[2] = {buf_of(x_is_a ? xdt : TSR_F64, 2, as, x_is_a ? xraw : (void *)wv),
                   buf_of(x_is_a ? TSR_F64 : xdt, 2, bs, x_is_a ? (void *)wv : xraw)};
  if (ta) tsr_params_add_bool(&p, "trans_a", true);
  if (tb) tsr_params_add_bool(&p, "trans_b", true);
  const char *bad = run("matmul", &p, in, 2, &out, &err) != 0 ? "matmul failed" : NULL;
  if (!bad && memcmp(out.data, want, (size_t)(m * n) * sizeof *want) != 0) bad = "bytes differ from the fma chain";
  if (bad)
    snprintf(why, sizeof why, "%s %s ta %d tb %d m %lld n %lld k %lld: %s", tsr_dtype_name(xdt), x_is_a ? "A" : "B",
             ta, tb, (long long)m, (long long)n, (long long)k, bad);
  free(out.data), free(xv), free(wv), free(want), free(xraw);
  tsr_params_clear(&p);
  return bad ? why : NULL;
}

TEST(matmul_integer_skinny_exact)
{
  static const tsr_dtype dts[] = {TSR_U8, TSR_I32, TSR_I64};
  static const int64_t dims[][3] = {{1, 1, 1}, {3, 70, 300}, {20, 129, 257}, {64, 65, 9}};  /* w, big, k */
  for (size_t d = 0; d < 3; d++)
    for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
      for (int cfg = 0; cfg < 8; cfg++) {
        const char *bad = skinny_case(dts[d], cfg & 1, cfg & 2, cfg & 4, dims[s][0], dims[s][1], dims[s][2]);
        if (bad) KIT_FAIL_("%s", bad);
      }
}

/* ---------- matmul_random ---------- */

typedef struct mr_case {
  const char *dist, *dtype;
  tsr_dtype b_dtype;
} mr_case;

static void x_params(tsr_params *p, const mr_case *c, const int64_t *shape, const int64_t *global, const int64_t *off)
{
  tsr_params_add_int(p, "seed", 99);
  tsr_params_add_str(p, "dtype", c->dtype, strlen(c->dtype));
  tsr_params_add_ints(p, "shape", shape, 2);
  tsr_params_add_ints(p, "global_shape", global, 2);
  tsr_params_add_ints(p, "offset", off, 2);
  if (strcmp(c->dist, "randint") == 0) {
    tsr_params_add_int(p, "low", 0);
    tsr_params_add_int(p, "high", 10);
  }
}

/* matmul_random(side) against matmul(random chunk, B) with trans flags. */
static const char *mr_check(const mr_case *c, const char *side)
{
  static char why[TSR_ERRMSG_LEN + 64];
  int64_t xs[2] = {120, 20000}, global[2] = {300, 30000}, off[2] = {77, 5000};
  bool x_left = side[0] == 'x', x_t = strcmp(side, "xtb") == 0, b_t = strcmp(side, "btx") == 0;
  int64_t inner = strcmp(side, "xb") == 0 ? xs[1] : xs[0];
  int64_t bs[2] = {x_left || b_t ? inner : 3, x_left || b_t ? 3 : inner};
  tsr_params p = TSR_PARAMS_INIT, mp = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf x, got, want;
  size_t bn = (size_t)(bs[0] * bs[1]);
  double *bd = filled((int64_t)bn, 0.9);
  float *bf = malloc(bn * sizeof *bf);
  for (size_t i = 0; i < bn; i++) bf[i] = (float)bd[i];
  tsr_buf b = buf_of(c->b_dtype, 2, bs, c->b_dtype == TSR_F32 ? (void *)bf : (void *)bd);
  const char *bad = NULL;
  x_params(&p, c, xs, global, off);
  if (run(c->dist, &p, NULL, 0, &x, &err) != 0) bad = "random op failed";
  tsr_params_add_str(&p, "side", side, strlen(side));
  tsr_params_add_str(&p, "dist", c->dist, strlen(c->dist));
  if (!bad && run("matmul_random", &p, &b, 1, &got, &err) != 0) bad = "matmul_random failed";
  tsr_params_add_bool(&mp, x_left ? "trans_a" : "trans_b", x_t);
  tsr_params_add_bool(&mp, x_left ? "trans_b" : "trans_a", b_t);
  tsr_buf pair[2] = {x_left ? x : b, x_left ? b : x};
  if (!bad && run("matmul", &mp, pair, 2, &want, &err) != 0) bad = "matmul failed";
  if (!bad && !tsr_meta_equal(&got.meta, &want.meta)) bad = "metas differ";
  double tol = got.meta.dtype == TSR_F32 ? 1e-4 : 1e-11;
  for (int64_t i = 0; !bad && i < tsr_meta_count(&got.meta); i++) {
    double g = at(&got, i), w = at(&want, i);
    if (!(fabs(g - w) <= tol * (fabs(w) > 1 ? fabs(w) : 1))) bad = "values differ";
  }
  if (bad) {
    snprintf(why, sizeof why, "%s %s %s: %s (%s)", c->dist, c->dtype, side, bad, err.text);
  } else {
    free(got.data), free(want.data);
  }
  if (x.data) free(x.data);
  free(bd), free(bf);
  tsr_params_clear(&p), tsr_params_clear(&mp);
  return bad ? why : NULL;
}

TEST(matmul_random_matches_materialized)
{
  static const mr_case cases[] = {
    {"random_uniform", "f64", TSR_F64}, {"random_normal", "f32", TSR_F32}, {"randint", "u8", TSR_F64},
    {"randint", "i64", TSR_I32},
  };
  static const char *sides[] = {"xb", "xtb", "bx", "btx"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int s = 0; s < 4; s++) {
      const char *bad = mr_check(&cases[c], sides[s]);
      if (bad) KIT_FAIL_("%s", bad);
    }
}

/* C [M, N] = A B as one fma chain per element over k in order (the
 * contract of f64 matmul_random); A and B addressed by row/column strides,
 * so one function covers every side's transposes. */
static void ref_chain(int64_t M, int64_t N, int64_t K, const double *a, int64_t a_rs, int64_t a_cs, const double *b,
                      int64_t b_rs, int64_t b_cs, double *c)
{
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; k++) acc = fma(a[i * a_rs + k * a_cs], b[k * b_rs + j * b_cs], acc);
      c[i * N + j] = acc;
    }
}

typedef struct mr_exact_case {
  const char *dist, *dtype;
  int64_t low, high;
  tsr_dtype b_dtype;
} mr_exact_case;

/* One case, one X chunk, one side: matmul_random's bytes against ref_chain
 * on the materialized chunk. NULL or what differs. */
static const char *mr_exact(const mr_exact_case *c, const int64_t *xs, const int64_t *global, const int64_t *off,
                            int64_t w, const char *side)
{
  static char why[TSR_ERRMSG_LEN + 128];
  int64_t r = xs[0], cc = xs[1], inner = strcmp(side, "xb") == 0 ? cc : r;
  bool b_rows_inner = strcmp(side, "bx") != 0;
  int64_t bs[2] = {b_rows_inner ? inner : w, b_rows_inner ? w : inner};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf x = {0}, got = {0};
  double *bd = filled(bs[0] * bs[1], 1.7), *xd = malloc((size_t)(r * cc) * sizeof *xd);
  int32_t *bi = malloc((size_t)(bs[0] * bs[1]) * sizeof *bi);
  for (int64_t i = 0; i < bs[0] * bs[1]; i++) {
    bi[i] = (int32_t)floor(bd[i] * 10);
    if (c->b_dtype == TSR_I32) bd[i] = bi[i];  /* B's values as matmul_random sees them */
  }
  tsr_buf b = buf_of(c->b_dtype, 2, bs, c->b_dtype == TSR_I32 ? (void *)bi : (void *)bd);
  tsr_params_add_int(&p, "seed", 4242);
  tsr_params_add_str(&p, "dtype", c->dtype, strlen(c->dtype));
  tsr_params_add_ints(&p, "shape", xs, 2);
  tsr_params_add_ints(&p, "global_shape", global, 2);
  tsr_params_add_ints(&p, "offset", off, 2);
  if (c->high > c->low) tsr_params_add_int(&p, "low", c->low), tsr_params_add_int(&p, "high", c->high);
  const char *bad = run(c->dist, &p, NULL, 0, &x, &err) != 0 ? "random op failed" : NULL;
  tsr_params_add_str(&p, "side", side, strlen(side));
  tsr_params_add_str(&p, "dist", c->dist, strlen(c->dist));
  if (!bad && run("matmul_random", &p, &b, 1, &got, &err) != 0) bad = "matmul_random failed";
  if (!bad && got.meta.dtype != TSR_F64) bad = "not f64";
  int64_t m = got.meta.shape[0], n = got.meta.shape[1];
  double *want = malloc((size_t)(m * n + 1) * sizeof *want);
  for (int64_t i = 0; !bad && i < r * cc; i++) xd[i] = at(&x, i);
  if (bad) {
  } else if (strcmp(side, "xb") == 0) {
    ref_chain(m, n, cc, xd, cc, 1, bd, w, 1, want);
  } else if (strcmp(side, "xtb") == 0) {
    ref_chain(m, n, r, xd, 1, cc, bd, w, 1, want);
  } else if (strcmp(side, "bx") == 0) {
    ref_chain(m, n, r, bd, r, 1, xd, cc, 1, want);
  } else {
    ref_chain(m, n, r, bd, 1, w, xd, cc, 1, want);
  }
  if (!bad && memcmp(got.data, want, (size_t)(m * n) * sizeof *want) != 0) bad = "bytes differ from the fma chain";
  if (bad)
    snprintf(why, sizeof why, "%s %s %s X [%lld,%lld] at (%lld,%lld) of [%lld,%lld] B width %lld: %s (%s)", c->dist,
             c->dtype, side, (long long)r, (long long)cc, (long long)off[0], (long long)off[1], (long long)global[0],
             (long long)global[1], (long long)w, bad, err.text);
  free(x.data), free(got.data), free(bd), free(bi), free(xd), free(want);
  tsr_params_clear(&p);
  return bad ? why : NULL;
}

/* f64 matmul_random is exactly the in-order fma chain, for every X kind
 * (SIMD-mapped uniform and small-range randint, randint beyond int32 and
 * normal through the word batches, an integer B), on odd shapes: 1x1, one
 * row, one column, odd offsets and odd global widths (f64 pairs straddling
 * rows), and chunks crossing several tiles with remainders; with even
 * global widths X @ B takes the transposed-tile path. */
TEST(matmul_random_fma_exact)
{
  static const mr_exact_case cases[] = {
    {"random_uniform", "f64", 0, 0, TSR_F64},
    {"randint", "u8", 0, 3, TSR_F64},
    {"randint", "i32", -7, 9, TSR_I32},
    {"randint", "i64", -3000000000LL, 1000000000LL, TSR_F64},
    {"random_normal", "f64", 0, 0, TSR_F64},
  };
  static const int64_t shapes[][7] = {
    /* rows, cols, global rows, global cols, offset row, offset col, B width */
    {1, 1, 3, 5, 1, 2, 1},     {1, 37, 2, 101, 1, 63, 3},      {37, 1, 40, 3, 2, 1, 5},
    {9, 33, 20, 77, 5, 31, 20}, {70, 517, 100, 1041, 13, 301, 20}, {65, 300, 65, 300, 0, 0, 25},
    /* even global widths: X @ B generates X transposed (rows in lanes),
     * starting mid-block (odd offsets), ending mid-block (odd widths) */
    {70, 517, 100, 1042, 13, 301, 20}, {33, 45, 50, 1044, 3, 7, 20}, {17, 258, 17, 260, 0, 2, 7},
  };
  static const char *sides[] = {"xb", "xtb", "bx", "btx"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int d = 0; d < 4; d++) {
        const int64_t *sh = shapes[s];
        const char *bad = mr_exact(&cases[c], sh, sh + 2, sh + 4, sh[6], sides[d]);
        if (bad) KIT_FAIL_("%s", bad);
      }
}

TEST(matmul_random_errors)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  mr_case c = {"random_uniform", "f64", TSR_F64};
  int64_t xs[2] = {4, 5}, bs[2] = {4, 2};
  double b[8] = {0};
  tsr_buf in = buf_of(TSR_F64, 2, bs, b);
  x_params(&p, &c, xs, xs, (int64_t[]){0, 0});
  tsr_params_add_str(&p, "side", "xb", 2);
  tsr_params_add_str(&p, "dist", "random_uniform", 14);
  ASSERT_EQ(run("matmul_random", &p, &in, 1, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "matmul_random: inner dimensions differ: f64[4,5] @ f64[4,2]");
  tsr_params_clear(&p);
  x_params(&p, &c, xs, xs, (int64_t[]){0, 0});
  tsr_params_add_str(&p, "side", "xtb", 3);
  tsr_params_add_str(&p, "dist", "random_unicorn", 14);
  ASSERT_EQ(run("matmul_random", &p, &in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "matmul_random: unknown random dist 'random_unicorn'");
  tsr_params_clear(&p);
  x_params(&p, &c, xs, xs, (int64_t[]){0, 0});
  tsr_params_add_str(&p, "side", "xx", 2);
  tsr_params_add_str(&p, "dist", "random_uniform", 14);
  ASSERT_EQ(run("matmul_random", &p, &in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "matmul_random: side 'xx' is not one of xb, xtb, bx, btx");
  tsr_params_clear(&p);
}

int main(void)
{
  tsr_ops_init(false);
  RUN(transpose_all_sizes);
  RUN(slice_and_view);
  RUN(assemble_pieces);
  RUN(qr_shapes);
  RUN(svd_shapes);
  RUN(bmul_and_signs);
  RUN(matmul_integer_inputs);
  RUN(gemm_skinny_paths);
  RUN(matmul_integer_skinny_exact);
  RUN(matmul_random_matches_materialized);
  RUN(matmul_random_fma_exact);
  RUN(matmul_random_errors);
  return kit_summary();
}
