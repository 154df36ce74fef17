/* Unit tests of the kernels behind broadcasting, missing values and folded
 * chains: add/sub/mul/div with `bcast`, astype's `missing`, fillnan,
 * ufunc, sum's skipna/missing/count, and matmul_chain against the same
 * chain computed op by op (every side, u8 and packed X, narrow and wide
 * B), with its error messages. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kit.h"
#include "cpu/csr.h"
#include "cpu/ops.h"

static tsr_buf buf_of(tsr_dtype dtype, int ndim, const int64_t *shape, void *data)
{
  tsr_buf b;
  memset(&b, 0, sizeof b);
  tsr_k_meta_set(&b.meta, dtype, ndim, shape);
  b.data = data;
  b.nbytes = (size_t)tsr_meta_nbytes(&b.meta);
  return b;
}

static int run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  return tsr_op_run_cpu(tsr_op_find(name), p, in, n_in, out, err);
}

/* ---------- broadcasting ---------- */

TEST(broadcast_row_col_scalar_and_swap)
{
  double x[6] = {1, 2, 3, 4, 5, 6}, row[3] = {10, 20, 30}, col[2] = {100, 200}, one[1] = {2};
  int64_t s23[2] = {2, 3}, s3[1] = {3}, s21[2] = {2, 1}, s1[1] = {1};
  tsr_buf in[2] = {buf_of(TSR_F64, 2, s23, x), buf_of(TSR_F64, 1, s3, row)}, out;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_params_add_str(&p, "bcast", "row", 3);
  ASSERT_OK(run("sub", &p, in, 2, &out, &err));
  const double *o = out.data;
  ASSERT_EQ(o[0], -9.0);
  ASSERT_EQ(o[5], -24.0);
  ASSERT_EQ(out.meta.shape[0], 2);
  free(out.data);
  tsr_params_add_bool(&p, "swap", true);  /* v - x */
  ASSERT_OK(run("sub", &p, in, 2, &out, &err));
  ASSERT_EQ(((double *)out.data)[4], 15.0);
  free(out.data);
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "bcast", "col", 3);
  in[1] = buf_of(TSR_F64, 2, s21, col);
  ASSERT_OK(run("div", &p, in, 2, &out, &err));
  ASSERT_EQ(((double *)out.data)[2], 0.03);
  ASSERT_EQ(((double *)out.data)[3], 0.02);
  free(out.data);
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "bcast", "scalar", 6);
  in[1] = buf_of(TSR_F64, 1, s1, one);
  ASSERT_OK(run("mul", &p, in, 2, &out, &err));
  ASSERT_EQ(((double *)out.data)[5], 12.0);
  free(out.data);
  /* a vector of the wrong length is refused, naming both */
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "bcast", "row", 3);
  in[1] = buf_of(TSR_F64, 2, s21, col);
  ASSERT_EQ(run("add", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_TRUE(strstr(err.text, "needs 3 values") != NULL);
  tsr_params_clear(&p);
}

TEST(broadcast_integers_wrap_and_divide_by_zero_fails)
{
  uint8_t x[4] = {250, 1, 2, 3}, v[2] = {10, 0};
  int64_t s22[2] = {2, 2}, s2[1] = {2};
  tsr_buf in[2] = {buf_of(TSR_U8, 2, s22, x), buf_of(TSR_U8, 1, s2, v)}, out;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_params_add_str(&p, "bcast", "row", 3);
  ASSERT_OK(run("add", &p, in, 2, &out, &err));
  ASSERT_EQ(((uint8_t *)out.data)[0], 4);  /* 260 wraps */
  free(out.data);
  ASSERT_EQ(run("div", &p, in, 2, &out, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "division by zero") != NULL);
  tsr_params_clear(&p);
}

/* ---------- missing values ---------- */

TEST(astype_missing_fillnan_and_ufunc)
{
  uint8_t g[5] = {0, 1, 2, 3, 1};
  int64_t s5[1] = {5};
  tsr_buf in = buf_of(TSR_U8, 1, s5, g), out, filled, root;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_params_add_str(&p, "dtype", "f64", 3);
  tsr_params_add_int(&p, "missing", 3);
  ASSERT_OK(run("astype", &p, &in, 1, &out, &err));
  const double *d = out.data;
  ASSERT_TRUE(isnan(d[3]) && d[2] == 2.0 && d[4] == 1.0);
  tsr_params_clear(&p);
  tsr_params_add_float(&p, "value", -7.5);
  ASSERT_OK(run("fillnan", &p, &out, 1, &filled, &err));
  ASSERT_EQ(((double *)filled.data)[3], -7.5);
  ASSERT_EQ(((double *)filled.data)[1], 1.0);
  ASSERT_EQ(run("fillnan", &p, &in, 1, &root, &err), TSR_ESHAPE);  /* integers have no NaN */
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "fn", "sqrt", 4);
  ASSERT_OK(run("ufunc", &p, &out, 1, &root, &err));
  ASSERT_TRUE(isnan(((double *)root.data)[3]));
  ASSERT_EQ(((double *)root.data)[2], sqrt(2.0));
  free(root.data);
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "fn", "cbrt", 4);
  ASSERT_EQ(run("ufunc", &p, &out, 1, &root, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "unknown fn 'cbrt'") != NULL);
  tsr_params_clear(&p);
  free(out.data);
  free(filled.data);
}

static uint8_t *pack(const uint8_t *x, int64_t r, int64_t c);

/* sum over axis with the given extra params; returns the output buffer. */
static void *sum_of(const tsr_buf *in, int axis, const char *mode, tsr_dtype *dt_p)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  tsr_params_add_int(&p, "axis", axis);
  if (strstr(mode, "missing")) tsr_params_add_int(&p, "missing", 3);
  if (strstr(mode, "skipna")) tsr_params_add_bool(&p, "skipna", true);
  if (strstr(mode, "count")) tsr_params_add_bool(&p, "count", true);
  int rc = run("sum", &p, in, 1, &out, &err);
  tsr_params_clear(&p);
  if (rc != 0) return NULL;
  *dt_p = out.meta.dtype;
  return out.data;
}

TEST(sum_skips_missing_and_counts)
{
  /* 3 x 4 genotypes, 3 = missing; a float copy with NaN */
  uint8_t g[12] = {0, 1, 2, 3, 3, 3, 2, 1, 2, 0, 3, 2};
  double f[12];
  for (int i = 0; i < 12; i++) f[i] = g[i] == 3 ? NAN : g[i];
  int64_t shape[2] = {3, 4};
  tsr_buf gi = buf_of(TSR_U8, 2, shape, g), fi = buf_of(TSR_F64, 2, shape, f);
  tsr_dtype dt;
  int64_t *cs = sum_of(&gi, 0, "missing", &dt), *cc = sum_of(&gi, 0, "missing count", &dt);
  ASSERT_TRUE(cs != NULL && cc != NULL);
  ASSERT_EQ(dt, TSR_I64);
  int64_t want_s[4] = {2, 1, 4, 3}, want_c[4] = {2, 2, 2, 2};
  for (int j = 0; j < 4; j++) {
    ASSERT_EQ(cs[j], want_s[j]);
    ASSERT_EQ(cc[j], want_c[j]);
  }
  double *fs = sum_of(&fi, 1, "skipna", &dt);
  int64_t *fc = sum_of(&fi, -1, "skipna count", &dt);
  ASSERT_TRUE(fs != NULL && fc != NULL);
  ASSERT_EQ(fs[0], 3.0);
  ASSERT_EQ(fs[1], 3.0);
  ASSERT_EQ(fs[2], 4.0);
  ASSERT_EQ(fc[0], 8);
  double *plain = sum_of(&fi, 1, "", &dt);
  ASSERT_TRUE(plain != NULL && isnan(plain[0]));  /* without skipna NaN propagates */
  /* the same column sums from the packed bytes */
  uint8_t *pk = pack(g, 3, 4);
  int64_t sp[2] = {3, 1};
  tsr_buf pb = buf_of(TSR_U8, 2, sp, pk), out;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  for (int mode = 0; mode < 2; mode++) {
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "axis", 0);
    tsr_params_add_int(&p, "cols", 4);
    tsr_params_add_int(&p, "missing", 3);
    if (mode) tsr_params_add_bool(&p, "count", true);
    ASSERT_OK(run("sum", &p, &pb, 1, &out, &err));
    for (int j = 0; j < 4; j++) ASSERT_EQ(((int64_t *)out.data)[j], mode ? want_c[j] : want_s[j]);
    free(out.data);
  }
  tsr_params_clear(&p);
  free(pk), free(cs), free(cc), free(fs), free(fc), free(plain);
}

/* ---------- matmul_chain ---------- */

/* Packs u8 values 0..3 of a [r, c] matrix into pack2bit's layout. */
static uint8_t *pack(const uint8_t *x, int64_t r, int64_t c)
{
  int64_t cb = (c + 3) / 4;
  uint8_t *p = calloc((size_t)(r * cb), 1);
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) p[i * cb + j / 4] |= (uint8_t)(x[i * c + j] << (2 * (j % 4)));
  return p;
}

/* Z = fillnan((astype(X, f64, missing 3) - mu) / sd, 0), op by op. */
static double *chain_by_ops(const tsr_buf *x, const tsr_buf *mu, const tsr_buf *sd)
{
  tsr_params p = TSR_PARAMS_INIT, pb = TSR_PARAMS_INIT, pf = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf f, c, z, zf;
  tsr_params_add_str(&p, "dtype", "f64", 3);
  tsr_params_add_int(&p, "missing", 3);
  tsr_params_add_str(&pb, "bcast", "row", 3);
  tsr_params_add_float(&pf, "value", 0.0);
  int rc = run("astype", &p, x, 1, &f, &err);
  tsr_buf in1[2] = {f, *mu};
  if (rc == 0) rc = run("sub", &pb, in1, 2, &c, &err);
  tsr_buf in2[2] = {c, *sd};
  if (rc == 0) rc = run("div", &pb, in2, 2, &z, &err);
  if (rc == 0) rc = run("fillnan", &pf, &z, 1, &zf, &err);
  tsr_params_clear(&p), tsr_params_clear(&pb), tsr_params_clear(&pf);
  free(f.data), free(c.data), free(z.data);
  return rc == 0 ? zf.data : NULL;
}

/* The chain's params for matmul_chain (vectors are inputs 2 and 3). */
static void chain_params(tsr_params *p, const char *side, int64_t packed_cols)
{
  int64_t steps[3] = {2, 4, 8}, step_inputs[3] = {2, 3, -1};
  double values[6] = {0, 0, 0, 0, 0, 0};
  tsr_params_add_str(p, "side", side, strlen(side));
  tsr_params_add_int(p, "missing", 3);
  tsr_params_add_ints(p, "steps", steps, 3);
  tsr_params_add_ints(p, "step_inputs", step_inputs, 3);
  tsr_params_add_floats(p, "step_values", values, 6);
  if (packed_cols >= 0) tsr_params_add_int(p, "cols", packed_cols);
}

/* C = op(A) op(B) naively in long double, A [m,k] (or [k,m] when ta). */
static void naive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *a, const double *b, double *c)
{
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      long double s = 0;
      for (int64_t q = 0; q < k; q++) s += (long double)(ta ? a[q * m + i] : a[i * k + q]) * (tb ? b[j * k + q] : b[q * n + j]);
      c[i * n + j] = (double)s;
    }
}

static double max_rel(const double *a, const double *b, size_t n)
{
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
  return d / (m > 0 ? m : 1);
}

/* Every side, narrow (w) B: folded = product of the stored chain, and u8
 * and packed X give the same bytes. */
static void check_sides(int64_t r, int64_t c, int64_t w)
{
  uint8_t *x = malloc((size_t)(r * c));
  double *mu = malloc((size_t)c * sizeof *mu), *sd = malloc((size_t)c * sizeof *sd);
  double *bx = malloc((size_t)(c * w) * sizeof(double)), *br = malloc((size_t)(r * w) * sizeof(double));
  for (int64_t i = 0; i < r * c; i++) x[i] = (uint8_t)((i * 7 + i / 13) % 4);
  for (int64_t j = 0; j < c; j++) mu[j] = 0.5 + 0.01 * (double)j, sd[j] = 0.7 + 0.003 * (double)j;
  for (int64_t i = 0; i < c * w; i++) bx[i] = sin((double)i);
  for (int64_t i = 0; i < r * w; i++) br[i] = cos((double)i);
  uint8_t *px = pack(x, r, c);
  int64_t sx[2] = {r, c}, spx[2] = {r, (c + 3) / 4}, sc[1] = {c}, sbx[2] = {c, w}, sbr[2] = {r, w}, swr[2] = {w, r};
  tsr_buf xb = buf_of(TSR_U8, 2, sx, x), pb = buf_of(TSR_U8, 2, spx, px);
  tsr_buf mub = buf_of(TSR_F64, 1, sc, mu), sdb = buf_of(TSR_F64, 1, sc, sd);
  double *z = chain_by_ops(&xb, &mub, &sdb);
  ASSERT_TRUE(z != NULL);
  static const char *const sides[] = {"xb", "xtb", "bx", "btx"};
  for (int s = 0; s < 4; s++) {
    /* B for the side: xb [c, w]; xtb [r, w]; bx [w, r]; btx [r, w] */
    tsr_buf b = s == 0 ? buf_of(TSR_F64, 2, sbx, bx) : s == 2 ? buf_of(TSR_F64, 2, swr, br) : buf_of(TSR_F64, 2, sbr, br);
    tsr_buf in_u8[4] = {xb, b, mub, sdb}, in_pk[4] = {pb, b, mub, sdb}, o1, o2;
    tsr_params p1 = TSR_PARAMS_INIT, p2 = TSR_PARAMS_INIT;
    tsr_errbuf err;
    chain_params(&p1, sides[s], -1);
    chain_params(&p2, sides[s], c);
    ASSERT_OK(run("matmul_chain", &p1, in_u8, 4, &o1, &err));
    ASSERT_OK(run("matmul_chain", &p2, in_pk, 4, &o2, &err));
    ASSERT_EQ(o1.nbytes, o2.nbytes);
    ASSERT_TRUE(memcmp(o1.data, o2.data, o1.nbytes) == 0);
    int64_t m = o1.meta.shape[0], n = o1.meta.shape[1];
    double *want = malloc((size_t)(m * n) * sizeof *want);
    if (s == 0) naive(false, false, r, w, c, z, bx, want);
    if (s == 1) naive(true, false, c, w, r, z, br, want);
    if (s == 2) naive(false, false, w, c, r, br, z, want);
    if (s == 3) naive(true, false, w, c, r, br, z, want);
    double e = max_rel(o1.data, want, (size_t)(m * n));
    if (e > 1e-13) fprintf(stderr, "  side %s r %lld c %lld w %lld: error %.3g\n", sides[s], (long long)r, (long long)c, (long long)w, e);
    ASSERT_TRUE(e <= 1e-13);
    tsr_params_clear(&p1), tsr_params_clear(&p2);
    free(o1.data), free(o2.data), free(want);
  }
  free(x), free(px), free(mu), free(sd), free(bx), free(br), free(z);
}

TEST(matmul_chain_matches_the_chain_op_by_op)
{
  check_sides(70, 300, 5);    /* skinny kernels, tiles over both axes */
  check_sides(9, 11, 3);      /* odd sizes, one tile */
  check_sides(40, 90, 70);    /* wide B: dgemm over panels */
}

TEST(matmul_chain_plain_integer_equals_matmul)
{
  int64_t r = 33, c = 517, w = 7;
  uint8_t *x = malloc((size_t)(r * c));
  double *b = malloc((size_t)(c * w) * sizeof *b);
  for (int64_t i = 0; i < r * c; i++) x[i] = (uint8_t)(i % 3);
  for (int64_t i = 0; i < c * w; i++) b[i] = 1.0 / (double)(i + 1);
  int64_t sx[2] = {r, c}, sb[2] = {c, w};
  tsr_buf in[2] = {buf_of(TSR_U8, 2, sx, x), buf_of(TSR_F64, 2, sb, b)}, o1, o2;
  tsr_params p = TSR_PARAMS_INIT, none = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_params_add_str(&p, "side", "xb", 2);
  ASSERT_OK(run("matmul_chain", &p, in, 2, &o1, &err));
  ASSERT_OK(run("matmul", &none, in, 2, &o2, &err));
  ASSERT_TRUE(o1.nbytes == o2.nbytes && memcmp(o1.data, o2.data, o1.nbytes) == 0);
  tsr_params_clear(&p);
  free(o1.data), free(o2.data), free(x), free(b);
}

TEST(matmul_chain_refuses_bad_params)
{
  uint8_t x[4] = {0};
  double b[4] = {0}, v[3] = {0};
  int64_t s22[2] = {2, 2}, s3[1] = {3};
  tsr_buf in[3] = {buf_of(TSR_U8, 2, s22, x), buf_of(TSR_F64, 2, s22, b), buf_of(TSR_F64, 1, s3, v)}, out;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_params_add_str(&p, "side", "yx", 2);
  ASSERT_EQ(run("matmul_chain", &p, in, 2, &out, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "side 'yx'") != NULL);
  tsr_params_clear(&p);
  int64_t steps[1] = {2}, inputs[1] = {2};
  double values[2] = {0, 0};
  tsr_params_add_str(&p, "side", "xb", 2);
  tsr_params_add_ints(&p, "steps", steps, 1);
  tsr_params_add_ints(&p, "step_inputs", inputs, 1);
  tsr_params_add_floats(&p, "step_values", values, 2);
  ASSERT_EQ(run("matmul_chain", &p, in, 3, &out, &err), TSR_ESHAPE);  /* 3 values for 2 columns */
  ASSERT_TRUE(strstr(err.text, "vector of 2 values") != NULL);
  tsr_params_clear(&p);
}

/* randint_packed writes pack2bit(randint) for any chunk of any array. */
TEST(randint_packed_is_randint_packed)
{
  static const int64_t cases[][6] = {{70, 301, 1000, 1000, 13, 7}, {5, 20000, 10, 20000, 3, 0}, {1, 3, 4, 9, 0, 5}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t shape[2] = {cases[i][0], cases[i][1]}, global[2] = {cases[i][2], cases[i][3]};
    int64_t offset[2] = {cases[i][4], cases[i][5]};
    tsr_params p = TSR_PARAMS_INIT;
    tsr_errbuf err;
    tsr_buf raw, packed, direct;
    tsr_params_add_int(&p, "seed", 77);
    tsr_params_add_int(&p, "low", 0);
    tsr_params_add_int(&p, "high", 3);
    tsr_params_add_str(&p, "dtype", "u8", 2);
    tsr_params_add_ints(&p, "shape", shape, 2);
    tsr_params_add_ints(&p, "global_shape", global, 2);
    tsr_params_add_ints(&p, "offset", offset, 2);
    ASSERT_OK(run("randint", &p, NULL, 0, &raw, &err));
    ASSERT_OK(run("pack2bit", NULL, &raw, 1, &packed, &err));
    ASSERT_OK(run("randint_packed", &p, NULL, 0, &direct, &err));
    ASSERT_TRUE(packed.nbytes == direct.nbytes && memcmp(packed.data, direct.data, packed.nbytes) == 0);
    free(raw.data), free(packed.data), free(direct.data);
    tsr_params_clear(&p);
  }
}

/* A dense chunk to CSR and back: zeros (and -0.0) dropped, NaN kept,
 * columns in order; a damaged chunk is refused. */
TEST(csr_round_trip_and_checks)
{
  double x[12] = {0, 1.5, 0, -0.0, NAN, 0, 0, 0, 2, 0, 0, -3};
  int64_t shape[2] = {3, 4};
  tsr_buf in = buf_of(TSR_F64, 2, shape, x), csr, back;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  ASSERT_OK(run("csr_from_dense", NULL, &in, 1, &csr, &err));
  tsr_k_csr v;
  ASSERT_OK(tsr_k_csr_view(&csr, true, &v, &err));
  ASSERT_EQ(v.nnz, 4);
  ASSERT_EQ(v.indptr[1], 1);
  ASSERT_EQ(v.indices[1], 0);  /* row 1: the NaN at column 0 */
  ASSERT_EQ(csr.nbytes, (size_t)tsr_k_csr_bytes(3, 4, TSR_F64));
  tsr_params_add_str(&p, "dtype", "f64", 3);
  tsr_params_add_ints(&p, "shape", shape, 2);
  ASSERT_OK(run("csr_densify", &p, &csr, 1, &back, &err));
  for (int i = 0; i < 12; i++)
    ASSERT_TRUE(isnan(x[i]) ? isnan(((double *)back.data)[i]) : ((double *)back.data)[i] == (x[i] == 0 ? 0.0 : x[i]));
  free(back.data);
  v.indices[2] = 9;  /* out of range */
  ASSERT_EQ(tsr_k_csr_view(&csr, true, &v, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "outside") != NULL);
  ASSERT_EQ(run("csr_densify", &p, &csr, 1, &back, &err), TSR_EPROTO);
  ((unsigned char *)csr.data)[0] = 'X';
  ASSERT_EQ(run("csr_densify", &p, &csr, 1, &back, &err), TSR_EPROTO);
  ASSERT_TRUE(strstr(err.text, "not a CSR chunk") != NULL);
  free(csr.data);
  tsr_params_clear(&p);
}

static int synth(const char *op, int64_t rows, int64_t row0, tsr_buf *out, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "seed", 7);
  tsr_params_add_int(&p, "rows", rows);
  tsr_params_add_int(&p, "row0", row0);
  tsr_params_add_int(&p, "types", 5);
  tsr_params_add_int(&p, "genes", 2000);
  tsr_params_add_float(&p, "density", 0.03);
  int rc = run(op, &p, NULL, 0, out, err);
  tsr_params_clear(&p);
  return rc;
}

/* The synthetic counts: canonical CSR chunks whose rows do not depend on
 * the chunking, about density x genes values per cell, cells of one type
 * sharing more genes than cells of two types. */
TEST(counts_synth_is_chunking_free_and_clustered)
{
  tsr_buf whole, half, types;
  tsr_errbuf err;
  tsr_k_csr a, b;
  ASSERT_OK(synth("counts_synth", 400, 0, &whole, &err));
  ASSERT_OK(synth("counts_synth", 200, 200, &half, &err));
  ASSERT_OK(synth("counts_synth_types", 400, 0, &types, &err));
  ASSERT_OK(tsr_k_csr_view(&whole, true, &a, &err));
  ASSERT_OK(tsr_k_csr_view(&half, true, &b, &err));
  int64_t off = a.indptr[200], n = a.nnz - off;
  ASSERT_EQ(b.nnz, n);
  ASSERT_TRUE(memcmp(b.indices, a.indices + off, (size_t)n * 4) == 0);
  ASSERT_TRUE(memcmp(b.values, (float *)a.values + off, (size_t)n * 4) == 0);
  double per_cell = (double)a.nnz / 400;
  ASSERT_TRUE(per_cell > 0.7 * 60 && per_cell < 1.3 * 60);
  const int32_t *t = types.data;
  double same = 0, other = 0;
  int n_same = 0, n_other = 0;
  for (int i = 0; i < 40; i++)
    for (int j = i + 1; j < 40; j++) {
      int shared = 0;
      for (int64_t p = a.indptr[i], q = a.indptr[j]; p < a.indptr[i + 1] && q < a.indptr[j + 1];)
        if (a.indices[p] == a.indices[q]) shared++, p++, q++;
        else if (a.indices[p] < a.indices[q]) p++;
        else q++;
      if (t[i] == t[j]) same += shared, n_same++;
      else other += shared, n_other++;
    }
  ASSERT_TRUE(n_same > 0 && n_other > 0 && same / n_same > 3 * (other / n_other));
  free(whole.data), free(half.data), free(types.data);
}

/* ---------- knn_tile against brute force, with ties ---------- */

typedef struct knn_ref {
  double d;
  int64_t i;
} knn_ref;

static int knn_ref_cmp(const void *a, const void *b)
{
  const knn_ref *x = a, *y = b;
  return x->d < y->d ? -1 : x->d > y->d ? 1 : x->i < y->i ? -1 : x->i > y->i;
}

/* Row r's m nearest other rows by the exact f64 distance (the op's
 * definition: squared euclidean, or 1 − cos with 1 for a zero row), ties
 * by index. */
static void knn_brute(const float *x, int64_t n, int64_t d, int64_t r, bool cosine, int64_t m, knn_ref *out, knn_ref *all)
{
  int64_t c = 0;
  for (int64_t j = 0; j < n; j++) {
    if (j == r) continue;
    double s = 0, xx = 0, yy = 0;
    for (int64_t t = 0; t < d; t++) {
      double a = x[r * d + t], b = x[j * d + t];
      s += cosine ? a * b : (a - b) * (a - b), xx += a * a, yy += b * b;
    }
    all[c].d = !cosine ? s : xx > 0 && yy > 0 ? 1.0 - s / (sqrt(xx) * sqrt(yy)) : 1.0;
    all[c++].i = j;
  }
  qsort(all, (size_t)c, sizeof *all, knn_ref_cmp);
  memcpy(out, all, (size_t)m * sizeof *out);
}

/* A block against itself (the symmetric fused path) with duplicate rows
 * and, under cosine, a zero row whose distances all tie at 1: every list
 * is brute force's, ties by index. */
TEST(knn_tile_with_ties_equals_brute_force)
{
  enum { N = 300, D = 23 };
  static float x[N * D];
  uint64_t st = 12345;
  for (int i = 0; i < N * D; i++) st = st * 6364136223846793005ull + 1442695040888963407ull, x[i] = (float)((st >> 40) % 2001) / 1000.0f - 1.0f;
  for (int r = 7; r < N; r += 7) memcpy(x + r * D, x + (r - 5) * D, D * sizeof *x);
  memset(x + 40 * D, 0, D * sizeof *x);
  int64_t shape[2] = {N, D};
  static knn_ref want[64], all[N];
  for (int cosine = 0; cosine < 2; cosine++)
    for (int64_t k = 15; k <= 40; k += 25) {
      tsr_buf in[2] = {buf_of(TSR_F32, 2, shape, x), buf_of(TSR_F32, 2, shape, x)}, out;
      tsr_params p = TSR_PARAMS_INIT;
      tsr_errbuf err;
      tsr_params_add_int(&p, "k", k);
      tsr_params_add_int(&p, "metric", cosine);
      tsr_params_add_int(&p, "row0", 0);
      tsr_params_add_int(&p, "col0", 0);
      ASSERT_OK(run("knn_tile", &p, in, 2, &out, &err));
      int64_t m = k - 1;
      const double *o = out.data;
      for (int64_t r = 0; r < N; r++) {
        knn_brute(x, N, D, r, cosine, m, want, all);
        for (int64_t t = 0; t < m; t++) ASSERT_EQ((int64_t)o[r * 2 * m + t], want[t].i);
      }
      free(out.data);
      tsr_params_clear(&p);
    }
}

/* One knn_chain tile (i, j) of blocks of CH rows of x (dtype dt, N x D):
 * continues the blocks' lists in st[b] (rows from off[b]), then st[i],
 * st[j] hold its output. */
static int chain_tile(const void *x, tsr_dtype dt, int64_t n, int64_t d, int64_t ch, int i, int j, int64_t k, int cosine,
                      tsr_buf *st, int64_t *off, bool *has, tsr_buf *owned, tsr_errbuf *err)
{
  size_t es = tsr_dtype_size(dt);
  int64_t ri = n - i * ch < ch ? n - i * ch : ch, rj = n - j * ch < ch ? n - j * ch : ch;
  int64_t si[2] = {ri, d}, sj[2] = {rj, d};
  tsr_buf in[4] = {buf_of(dt, 2, si, (char *)x + (size_t)(i * ch * d) * es), buf_of(dt, 2, sj, (char *)x + (size_t)(j * ch * d) * es)};
  int nin = 2;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", k);
  tsr_params_add_int(&p, "metric", cosine);
  tsr_params_add_int(&p, "row0", i * ch);
  tsr_params_add_int(&p, "col0", j * ch);
  if (i == j) tsr_params_add_int(&p, "sym", 1);
  if (has[i]) tsr_params_add_int(&p, "si", off[i]), in[nin++] = st[i];
  if (i != j && has[j]) tsr_params_add_int(&p, "sj", off[j]), in[nin++] = st[j];
  int rc = run("knn_chain", &p, in, nin, owned, err);
  tsr_params_clear(&p);
  if (rc != 0) return rc;
  st[i] = *owned, off[i] = 0, has[i] = true;
  if (i != j) st[j] = *owned, off[j] = ri, has[j] = true;
  return 0;
}

/* 3 blocks (the last one short) chained as graphs/knn.c does: diagonal
 * tiles, then rounds of pairs; each block's knn_finish equals brute force,
 * ties by index — f32 (fused kernel) and f64 (GEMM + sorted scan), both
 * metrics, duplicate rows and a zero row. A state of the wrong width is
 * refused naming the input. */
TEST(knn_chain_and_finish_equal_brute_force)
{
  enum { N = 300, D = 23, CH = 110 };
  static float x[N * D];
  static double x64[N * D];
  uint64_t st = 777;
  for (int i = 0; i < N * D; i++) st = st * 6364136223846793005ull + 1442695040888963407ull, x[i] = (float)((st >> 40) % 2001) / 1000.0f - 1.0f;
  for (int r = 5; r < N; r += 6) memcpy(x + r * D, x + (r - 4) * D, D * sizeof *x);
  memset(x + 150 * D, 0, D * sizeof *x);
  for (int i = 0; i < N * D; i++) x64[i] = x[i];
  static knn_ref want[64], all[N];
  const int pairs[3][2] = {{0, 2}, {1, 2}, {0, 1}};
  for (int f64 = 0; f64 < 2; f64++)
    for (int cosine = 0; cosine < 2; cosine++) {
      int64_t k = cosine ? 40 : 15, m = k - 1, off[3] = {0};
      tsr_buf sts[3], owned[6];
      bool has[3] = {false};
      tsr_errbuf err;
      const void *xv = f64 ? (const void *)x64 : (const void *)x;
      tsr_dtype dt = f64 ? TSR_F64 : TSR_F32;
      for (int b = 0; b < 3; b++) ASSERT_OK(chain_tile(xv, dt, N, D, CH, b, b, k, cosine, sts, off, has, &owned[b], &err));
      for (int t = 0; t < 3; t++)
        ASSERT_OK(chain_tile(xv, dt, N, D, CH, pairs[t][0], pairs[t][1], k, cosine, sts, off, has, &owned[3 + t], &err));
      for (int b = 0; b < 3; b++) {
        int64_t s0[2] = {CH, D}, s2[2] = {N - 2 * CH, D};
        size_t es = tsr_dtype_size(dt);
        tsr_buf in[4] = {sts[b], buf_of(dt, 2, s0, (char *)xv), buf_of(dt, 2, s0, (char *)xv + CH * D * es),
                         buf_of(dt, 2, s2, (char *)xv + 2 * CH * D * es)}, out;
        tsr_params p = TSR_PARAMS_INIT;
        tsr_params_add_int(&p, "k", k);
        tsr_params_add_int(&p, "metric", cosine);
        tsr_params_add_int(&p, "row0", b * CH);
        tsr_params_add_int(&p, "off", off[b]);
        tsr_params_add_int(&p, "block", b);
        tsr_params_add_int(&p, "chunk", CH);
        ASSERT_OK(run("knn_finish", &p, in, 4, &out, &err));
        const double *o = out.data;
        for (int64_t r = 0; r < out.meta.shape[0]; r++) {
          knn_brute(x, N, D, b * CH + r, cosine, m, want, all);
          for (int64_t t = 0; t < m; t++) ASSERT_EQ((int64_t)o[r * 2 * m + t], want[t].i);
        }
        free(out.data);
        tsr_params_clear(&p);
      }
      /* a state that is not k's width */
      int64_t s0[2] = {CH, D};
      tsr_buf bad[3] = {buf_of(dt, 2, s0, (void *)xv), buf_of(dt, 2, s0, (char *)xv + CH * D * tsr_dtype_size(dt)), sts[0]}, out;
      tsr_params p = TSR_PARAMS_INIT;
      tsr_params_add_int(&p, "k", k + 1);
      tsr_params_add_int(&p, "row0", 0);
      tsr_params_add_int(&p, "col0", CH);
      tsr_params_add_int(&p, "si", 0);
      ASSERT_EQ(run("knn_chain", &p, bad, 3, &out, &err), TSR_ESHAPE);
      ASSERT_CONTAINS(err.text, "knn_chain: input 2");
      tsr_params_clear(&p);
      for (int t = 0; t < 6; t++) free(owned[t].data);
    }
}

int main(void)
{
  tsr_ops_init(false);
  RUN(broadcast_row_col_scalar_and_swap);
  RUN(broadcast_integers_wrap_and_divide_by_zero_fails);
  RUN(astype_missing_fillnan_and_ufunc);
  RUN(sum_skips_missing_and_counts);
  RUN(matmul_chain_matches_the_chain_op_by_op);
  RUN(matmul_chain_plain_integer_equals_matmul);
  RUN(matmul_chain_refuses_bad_params);
  RUN(randint_packed_is_randint_packed);
  RUN(csr_round_trip_and_checks);
  RUN(counts_synth_is_chunking_free_and_clustered);
  RUN(knn_tile_with_ties_equals_brute_force);
  RUN(knn_chain_and_finish_equal_brute_force);
  return kit_summary();
}
