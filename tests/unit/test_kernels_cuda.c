/* Tests of the CUDA op variants (kernels/cuda/): every op with a CUDA
 * variant runs on random inputs on the CPU and on the GPU, and the results
 * are compared — bit for bit where docs/kernels-cuda.md promises the same
 * bytes (random uniform/int, elementwise, astype, layout, pack), within
 * ulp or relative bounds elsewhere; qr and svd also against their
 * definitions (Q orthonormal, QR = A, U S Vt = A).
 *
 * Modes:
 *   (none)   the GPU tests; prints "SKIPPED: no GPU (reason)" and exits 77
 *            when there is no usable GPU (CTest shows it skipped)
 *   --cpu    the CPU parts of the 2-bit ops, no GPU needed (label unit)
 *   --bench  measurements on the GPU (docs/kernels-cuda.md): per-op rates,
 *            the SVD algorithms by shape, the fused genotype products
 *            (genotype), and their f64 form at whole and per-task shapes
 *            (genotype64) */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/csr.h"
#include "kernels.h"
#include "gpu_kit.h"
#include "kit.h"
#include "philox.h"


/* ---------- buffers and runs ---------- */


static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}
static double rnd_unit(void)
{
  return (double)(rnd() >> 11) * 0x1p-53;
}

/* Random contents: u8 0..hi, ints around 0, floats in (-1, 1). */
static void fill_random(tsr_buf *b, int hi)
{
  int64_t n = tsr_meta_count(&b->meta);
  for (int64_t i = 0; i < n; i++) {
    switch (b->meta.dtype) {
    case TSR_U8: ((uint8_t *)b->data)[i] = (uint8_t)(rnd() % (uint64_t)(hi + 1)); break;
    case TSR_I32: ((int32_t *)b->data)[i] = (int32_t)(rnd() % 2001) - 1000; break;
    case TSR_I64: ((int64_t *)b->data)[i] = (int64_t)(rnd() % 200001) - 100000; break;
    case TSR_F32: ((float *)b->data)[i] = (float)(2 * rnd_unit() - 1); break;
    default: ((double *)b->data)[i] = 2 * rnd_unit() - 1; break;
    }
  }
}

static tsr_buf rand_buf(tsr_dtype dt, int nd, const int64_t *shape, int hi)
{
  tsr_buf b = hbuf(dt, nd, shape);
  fill_random(&b, hi);
  return b;
}




/* ---------- comparisons ---------- */

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

static int64_t ordered(double x)
{
  int64_t i;
  memcpy(&i, &x, sizeof i);
  return i < 0 ? INT64_MIN - i : i;
}
static int32_t ordered_f(float x)
{
  int32_t i;
  memcpy(&i, &x, sizeof i);
  return i < 0 ? INT32_MIN - i : i;
}

/* Largest distance in ulps between two float buffers of one dtype. */
static int64_t max_ulp(const tsr_buf *a, const tsr_buf *b)
{
  int64_t n = tsr_meta_count(&a->meta), worst = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t d = a->meta.dtype == TSR_F32
                    ? llabs((int64_t)ordered_f(((float *)a->data)[i]) - ordered_f(((float *)b->data)[i]))
                    : llabs(ordered(((double *)a->data)[i]) - ordered(((double *)b->data)[i]));
    if (d > worst) worst = d;
  }
  return worst;
}

/* ‖a − b‖ / ‖b‖ over all elements (NaN anywhere gives NaN). */
static double rel_err(const tsr_buf *a, const tsr_buf *b)
{
  double num = 0, den = 0;
  for (int64_t i = 0, n = tsr_meta_count(&b->meta); i < n; i++) {
    double d = at(a, i) - at(b, i);
    num += d * d, den += at(b, i) * at(b, i);
  }
  return den == 0 ? sqrt(num) : sqrt(num / den);
}

static bool same_bytes(const tsr_buf *a, const tsr_buf *b)
{
  return tsr_meta_equal(&a->meta, &b->meta) && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static void free_bufs(tsr_buf *b, int n)
{
  for (int i = 0; i < n; i++) free(b[i].data), b[i].data = NULL;
}

/* Runs name on both sides; on success *c and *g hold the results. */
#define BOTH(name, p, in, n, c, g)                                   \
  do {                                                               \
    tsr_errbuf e1_, e2_;                                             \
    int r1_ = cpu_run(name, p, in, n, c, &e1_);                      \
    if (r1_ != 0) KIT_FAIL_("cpu %s: %d %s", name, r1_, e1_.text);   \
    int r2_ = gpu_run(name, p, in, n, g, &e2_);                      \
    if (r2_ != 0) KIT_FAIL_("cuda %s: %d %s", name, r2_, e2_.text);  \
  } while (0)

#define ASSERT_SAME(c, g)                                                                      \
  do {                                                                                         \
    if (!same_bytes(c, g)) KIT_FAIL_("CPU and GPU bytes differ (%s)", tsr_meta_format(&(g)->meta, (char[64]){0}, 64)); \
  } while (0)

/* ---------- random ---------- */

/* A random op's params for the chunk at offset of global (nd dims). */
static void rparams(tsr_params *p, int64_t seed, const char *dtype, int nd, const int64_t *shape, const int64_t *global,
                    const int64_t *offset)
{
  tsr_params_clear(p);
  tsr_params_add_int(p, "seed", seed);
  tsr_params_add_str(p, "dtype", dtype, strlen(dtype));
  tsr_params_add_ints(p, "shape", shape, (size_t)nd);
  tsr_params_add_ints(p, "global_shape", global, (size_t)nd);
  tsr_params_add_ints(p, "offset", offset, (size_t)nd);
}

/* Chunks: contiguous with an odd offset, a 2-D block with partial rows, a
 * 3-D block, a scalar. */
static const struct {
  int nd;
  int64_t shape[3], global[3], offset[3];
} chunks[] = {
  {1, {100003}, {300007}, {12345}},
  {2, {257, 131}, {1000, 777}, {33, 101}},
  {2, {64, 500}, {128, 500}, {7, 0}},
  {3, {5, 17, 29}, {9, 40, 31}, {3, 11, 1}},
  {0, {0}, {0}, {0}},
};
#define N_CHUNKS (sizeof chunks / sizeof chunks[0])

TEST(random_uniform_and_int_bit_identical)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  static const char *dts[] = {"f32", "f64"};
  for (size_t k = 0; k < N_CHUNKS; k++)
    for (int d = 0; d < 2; d++) {
      rparams(&p, (int64_t)0xdeadbeefcafe + (int64_t)k, dts[d], chunks[k].nd, chunks[k].shape, chunks[k].global,
              chunks[k].offset);
      BOTH("random_uniform", &p, NULL, 0, &c, &g);
      ASSERT_SAME(&c, &g);
      free(c.data), free(g.data);
    }
  static const struct {
    const char *dt;
    int64_t low, high;
  } ints[] = {{"u8", 0, 3}, {"u8", 7, 256}, {"i32", -5, 1000}, {"i32", INT32_MIN, (int64_t)INT32_MIN + (1ll << 32)},
              {"i64", -3000000000ll, 1000000000ll}, {"i64", 1ll << 40, (1ll << 40) + 17}};
  for (size_t k = 0; k < N_CHUNKS; k++)
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
      rparams(&p, -7 - (int64_t)k, ints[i].dt, chunks[k].nd, chunks[k].shape, chunks[k].global, chunks[k].offset);
      tsr_params_add_int(&p, "low", ints[i].low);
      tsr_params_add_int(&p, "high", ints[i].high);
      BOTH("randint", &p, NULL, 0, &c, &g);
      ASSERT_SAME(&c, &g);
      free(c.data), free(g.data);
    }
  tsr_params_clear(&p);
}

static int64_t ulp_dist(double a, double b)
{
  return llabs(ordered(a) - ordered(b));
}

/* Normals: f64 within 2 ulp of the CPU, f32 within 1. Prints how far each
 * side is from the exact value of the same formula (long double, rounded
 * to double): the GPU's double-double evaluation is (nearly) correctly
 * rounded, the CPU's glibc-based one up to about 2 ulp off. */
TEST(random_normal_within_2_ulp)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  int64_t shape[1] = {2000000}, global[1] = {1ll << 40}, offset[1] = {(1ll << 33) + 5};
  static const char *dts[] = {"f64", "f32"};
  for (int d = 0; d < 2; d++) {
    rparams(&p, 424242, dts[d], 1, shape, global, offset);
    BOTH("random_normal", &p, NULL, 0, &c, &g);
    int64_t hist[3][4] = {{0}}, n = shape[0];
    for (int64_t i = 0; i < n; i++) {
      uint32_t w[4];
      tsr_philox_block(424242, (uint64_t)(offset[0] + i), w);
      double u1 = tsr_u01_f64(w[0], w[1]), theta = TSR_TWO_PI * tsr_u01_f64(w[2], w[3]);
      double exact = (double)(sqrtl(-2.0L * logl(1.0L - (long double)u1)) * cosl((long double)theta));
      double gv = at(&g, i), cv = at(&c, i);
      int64_t u[3] = {ulp_dist(gv, cv), ulp_dist(gv, exact), ulp_dist(cv, exact)};
      if (d == 1) {  /* in f32 ulps */
        float ef = (float)exact;
        u[0] = llabs((int64_t)ordered_f((float)gv) - ordered_f((float)cv));
        u[1] = llabs((int64_t)ordered_f((float)gv) - ordered_f(ef));
        u[2] = llabs((int64_t)ordered_f((float)cv) - ordered_f(ef));
      }
      for (int k = 0; k < 3; k++) hist[k][u[k] > 3 ? 3 : u[k]]++;
    }
    static const char *what[] = {"GPU vs CPU", "GPU vs exact", "CPU vs exact"};
    for (int k = 0; k < 3; k++)
      fprintf(stderr, "  normal %s %s over %lld: 0 ulp %lld, 1 ulp %lld, 2 ulp %lld, >2 ulp %lld\n", dts[d], what[k],
              (long long)n, (long long)hist[k][0], (long long)hist[k][1], (long long)hist[k][2], (long long)hist[k][3]);
    ASSERT_EQ(hist[0][3], 0);
    if (d == 1) ASSERT_EQ(hist[0][2], 0);
    for (size_t k = 0; k < N_CHUNKS; k++) {  /* chunk shapes: same values, same bounds */
      free(c.data), free(g.data);
      rparams(&p, 99, dts[d], chunks[k].nd, chunks[k].shape, chunks[k].global, chunks[k].offset);
      BOTH("random_normal", &p, NULL, 0, &c, &g);
      ASSERT_TRUE(max_ulp(&c, &g) <= (d == 0 ? 2 : 1));
    }
    free(c.data), free(g.data);
  }
  tsr_params_clear(&p);
}

/* ---------- elementwise ---------- */

static const tsr_dtype all_dts[] = {TSR_U8, TSR_I32, TSR_I64, TSR_F32, TSR_F64};

TEST(full_all_dtypes)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  int64_t shape[2] = {37, 53};
  for (int d = 0; d < 5; d++)
    for (int v = 0; v < 2; v++) {
      const char *dt = tsr_dtype_name(all_dts[d]);
      tsr_params_clear(&p);
      tsr_params_add_ints(&p, "shape", shape, 2);
      tsr_params_add_str(&p, "dtype", dt, strlen(dt));
      if (v == 0) tsr_params_add_int(&p, "value", 7);
      else tsr_params_add_float(&p, "value", 3.75);
      BOTH("full", &p, NULL, 0, &c, &g);
      ASSERT_SAME(&c, &g);
      free(c.data), free(g.data);
    }
  tsr_params_clear(&p);
}

TEST(nary_and_div_bit_identical)
{
  tsr_buf in[11], c, g;
  tsr_errbuf err;
  int64_t shape[2] = {129, 77};
  static const char *ops[] = {"add", "mul", "sub"};
  for (int d = 0; d < 5; d++) {
    for (int i = 0; i < 11; i++) in[i] = rand_buf(all_dts[d], 2, shape, 255);
    for (int o = 0; o < 3; o++) {
      int counts[] = {2, 3, 11};  /* 11: more inputs than one launch takes */
      for (int k = 0; k < 3; k++) {
        int n = o == 2 ? 2 : counts[k];
        BOTH(ops[o], NULL, in, n, &c, &g);
        ASSERT_SAME(&c, &g);
        free(c.data), free(g.data);
      }
    }
    if (all_dts[d] == TSR_F32 || all_dts[d] == TSR_F64) {
      BOTH("div", NULL, in, 2, &c, &g);
      ASSERT_SAME(&c, &g);
      free(c.data), free(g.data);
    } else {
      ASSERT_EQ(gpu_run("div", NULL, in, 2, &g, &err), TSR_ENODEV);
      ASSERT_CONTAINS(err.text, "CPU variant");
      free(g.data);
    }
    free_bufs(in, 11);
  }
}

/* Values that exercise astype's edges: NaN, infinities, out of range. */
static void special_values(tsr_buf *b)
{
  static const double sp[] = {NAN, INFINITY, -INFINITY, 1e300, -1e300, 255.9, 256.0, -0.5, 2147483648.0,
                              -2147483649.0, 9.3e18, -9.3e18, 0.0, -0.0, 3.5};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
    if (b->meta.dtype == TSR_F32) ((float *)b->data)[i] = (float)sp[i];
    if (b->meta.dtype == TSR_F64) ((double *)b->data)[i] = sp[i];
  }
}

TEST(scale_astype_bmul_signs_bit_identical)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf x, v, c, g;
  int64_t shape[2] = {61, 47};
  for (int d = 0; d < 5; d++) {
    x = rand_buf(all_dts[d], 2, shape, 255);
    special_values(&x);
    tsr_params_clear(&p);
    tsr_params_add_float(&p, "factor", 1.37);
    tsr_params_add_float(&p, "offset", -0.25);
    BOTH("scale", &p, &x, 1, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    for (int t = 0; t < 5; t++) {
      const char *dt = tsr_dtype_name(all_dts[t]);
      tsr_params_clear(&p);
      tsr_params_add_str(&p, "dtype", dt, strlen(dt));
      BOTH("astype", &p, &x, 1, &c, &g);
      ASSERT_SAME(&c, &g);
      free(c.data), free(g.data);
    }
    BOTH("signs", NULL, &x, 1, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    for (int axis = 0; axis < 2; axis++)
      for (int t = 0; t < 5; t++) {
        tsr_buf in[2] = {x, rand_buf(all_dts[t], 1, &shape[axis], 9)};
        tsr_params_clear(&p);
        tsr_params_add_int(&p, "axis", axis);
        BOTH("bmul", &p, in, 2, &c, &g);
        ASSERT_SAME(&c, &g);
        free(c.data), free(g.data), free(in[1].data);
      }
    free(x.data);
  }
  (void)v;
  tsr_params_clear(&p);
}

/* ---------- sum ---------- */

TEST(sum_axes_and_total)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf x, c, g;
  static const int64_t shapes[][3] = {{3000, 7, 0}, {5, 100000, 0}, {64, 33, 129}, {1, 3000000, 0}};
  static const int nds[] = {2, 2, 3, 2};
  for (int s = 0; s < 4; s++)
    for (int d = 0; d < 5; d++) {
      x = rand_buf(all_dts[d], nds[s], shapes[s], 255);
      for (int axis = -1; axis < nds[s]; axis++) {
        tsr_params_clear(&p);
        tsr_params_add_int(&p, "axis", axis);
        BOTH("sum", &p, &x, 1, &c, &g);
        if (all_dts[d] == TSR_F64) {
          ASSERT_TRUE(rel_err(&g, &c) <= 1e-12);
        } else if (all_dts[d] == TSR_F32) {
          ASSERT_TRUE(max_ulp(&g, &c) <= 1);
        } else {
          ASSERT_SAME(&c, &g);
        }
        free(c.data), free(g.data);
      }
      free(x.data);
    }
  tsr_params_clear(&p);
}

/* ---------- layout ---------- */

TEST(layout_ops_bit_identical)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  for (int d = 0; d < 5; d++) {
    int64_t s2[2] = {1037, 70}, s3[3] = {9, 31, 17};
    tsr_buf x = rand_buf(all_dts[d], 2, s2, 255), y = rand_buf(all_dts[d], 3, s3, 255);
    BOTH("transpose", NULL, &x, 1, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    int64_t st[3] = {3, 5, 0}, sp[3] = {1000, 69, 0}, st3[3] = {2, 0, 4}, sp3[3] = {9, 31, 15};
    tsr_params_clear(&p);
    tsr_params_add_ints(&p, "start", st, 2);
    tsr_params_add_ints(&p, "stop", sp, 2);
    BOTH("slice", &p, &x, 1, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    tsr_params_clear(&p);
    tsr_params_add_ints(&p, "start", st3, 3);
    tsr_params_add_ints(&p, "stop", sp3, 3);
    BOTH("slice", &p, &y, 1, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    int64_t vs[2] = {35, 11};
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "offset", 1001);
    tsr_params_add_ints(&p, "shape", vs, 2);
    BOTH("view", &p, &x, 1, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    /* a 2 x 3 grid of pieces with uneven extents */
    int64_t rows[2] = {40, 7}, cols[3] = {13, 1, 20}, grid[2] = {2, 3};
    tsr_buf pieces[6];
    for (int i = 0; i < 6; i++) {
      int64_t sh[2] = {rows[i / 3], cols[i % 3]};
      pieces[i] = rand_buf(all_dts[d], 2, sh, 255);
    }
    tsr_params_clear(&p);
    tsr_params_add_ints(&p, "grid", grid, 2);
    BOTH("assemble", &p, pieces, 6, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    BOTH("noop", NULL, pieces, 2, &c, &g);
    free(c.data), free(g.data);
    free_bufs(pieces, 6);
    free(x.data), free(y.data);
  }
  tsr_params_clear(&p);
}

/* ---------- matmul ---------- */

static void mm_params(tsr_params *p, bool ta, bool tb, bool tf32, bool fused)
{
  tsr_params_clear(p);
  tsr_params_add_bool(p, "trans_a", ta);
  tsr_params_add_bool(p, "trans_b", tb);
  tsr_params_add_bool(p, "allow_tf32", tf32);
  tsr_params_add_bool(p, "fused", fused);
}

TEST(matmul_float)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g, t;
  int64_t m = 173, k = 301, n = 89;
  for (int d = 3; d < 5; d++)
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr & 2;
      int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
      tsr_buf in[2] = {rand_buf(all_dts[d], 2, sa, 0), rand_buf(all_dts[d], 2, sb, 0)};
      mm_params(&p, ta, tb, false, true);
      BOTH("matmul", &p, in, 2, &c, &g);
      double e = rel_err(&g, &c);
      ASSERT_TRUE(e <= (all_dts[d] == TSR_F64 ? 1e-13 : 1e-5));
      if (all_dts[d] == TSR_F32) {
        tsr_errbuf err;
        mm_params(&p, ta, tb, true, true);
        ASSERT_OK(gpu_run("matmul", &p, in, 2, &t, &err));
        double et = rel_err(&t, &c);
        if (tr == 0) fprintf(stderr, "  f32 matmul vs CPU: %.2e; with allow_tf32: %.2e\n", e, et);
        ASSERT_TRUE(et <= 5e-3);
        free(t.data);
      }
      free(c.data), free(g.data);
      free_bufs(in, 2);
    }
  tsr_params_clear(&p);
}

/* u8 X times a thin f32 B both ways (the fused kernels, and the panel
 * path with fused=false), aligned and unaligned row lengths. */
TEST(matmul_genotype_fused)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  static const int64_t cases[][4] = {  /* r, c, thin, max value */
    {1000, 2048, 20, 2}, {777, 1001, 20, 2}, {300, 64, 1, 2}, {513, 4096, 33, 255}, {2050, 300, 64, 3},
    {33, 16, 8, 2}, {4000, 520, 24, 2}, {100, 20001, 20, 2}, {140000, 4096, 20, 2}};  /* last: no splits, long k */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int fused = 1; fused >= 0; fused--) {
      int64_t r = cases[i][0], cc = cases[i][1], th = cases[i][2];
      int64_t sx[2] = {r, cc}, sb[2] = {cc, th}, sq[2] = {r, th};
      tsr_buf xb[2] = {rand_buf(TSR_U8, 2, sx, (int)cases[i][3]), rand_buf(TSR_F32, 2, sb, 0)};
      mm_params(&p, false, false, false, fused);
      BOTH("matmul", &p, xb, 2, &c, &g);
      double e1 = rel_err(&g, &c);
      free(c.data), free(g.data);
      tsr_buf btx[2] = {rand_buf(TSR_F32, 2, sq, 0), xb[0]};
      mm_params(&p, true, false, false, fused);
      BOTH("matmul", &p, btx, 2, &c, &g);
      double e2 = rel_err(&g, &c);
      fprintf(stderr, "  u8 %lldx%lld, %lld thin (fused %d): X@B %.2e, B'X %.2e\n", (long long)r, (long long)cc,
              (long long)th, fused, e1, e2);
      ASSERT_TRUE(e1 <= 1e-4 && e2 <= 1e-4);
      free(c.data), free(g.data);
      free(btx[0].data);
      free_bufs(xb, 2);
    }
  tsr_params_clear(&p);
}

/* The internal hook of kernels/cuda/geno_xb.cu: the narrow configuration
 * that GPUs with less shared memory (A100) get. */
void tsr_cuda_geno_test_narrow(bool on);

/* X @ B in the narrow configuration, u8 and 2-bit, against the CPU. */
TEST(matmul_genotype_narrow_config)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  static const int64_t cases[][3] = {{1000, 2048, 20}, {777, 1001, 33}, {3000, 520, 8}};
  tsr_cuda_geno_test_narrow(true);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t sx[2] = {cases[i][0], cases[i][1]}, sb[2] = {cases[i][1], cases[i][2]};
    tsr_buf in[2] = {rand_buf(TSR_U8, 2, sx, 3), rand_buf(TSR_F32, 2, sb, 0)}, pk;
    tsr_errbuf err;
    mm_params(&p, false, false, false, true);
    BOTH("matmul", &p, in, 2, &c, &g);
    double e1 = rel_err(&g, &c);
    free(c.data), free(g.data);
    ASSERT_OK(cpu_run("pack2bit", NULL, &in[0], 1, &pk, &err));
    tsr_buf in2[2] = {pk, in[1]};
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "cols", cases[i][1]);
    BOTH("matmul_2bit", &p, in2, 2, &c, &g);
    double e2 = rel_err(&g, &c);
    free(c.data), free(g.data);
    tsr_buf b64 = rand_buf(TSR_F64, 2, sb, 0), in3[2] = {pk, b64};
    BOTH("matmul_2bit", &p, in3, 2, &c, &g);
    double e3 = rel_err(&g, &c);
    fprintf(stderr, "  narrow %lldx%lld, %lld thin: u8 %.2e, 2-bit %.2e, 2-bit f64 %.2e\n", (long long)cases[i][0],
            (long long)cases[i][1], (long long)cases[i][2], e1, e2, e3);
    ASSERT_TRUE(e1 <= 1e-4 && e2 <= 1e-4 && e3 <= 1e-8);
    free(c.data), free(g.data), free(pk.data), free(b64.data);
    free_bufs(in, 2);
  }
  tsr_cuda_geno_test_narrow(false);
  tsr_params_clear(&p);
}

TEST(matmul_integer_generic)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  int64_t s1[2] = {65, 130}, s2[2] = {130, 40}, s3[2] = {40, 130};
  tsr_buf a[2] = {rand_buf(TSR_I32, 2, s1, 0), rand_buf(TSR_F64, 2, s2, 0)};
  mm_params(&p, false, false, false, true);
  BOTH("matmul", &p, a, 2, &c, &g);
  ASSERT_TRUE(rel_err(&g, &c) <= 1e-13);
  free(c.data), free(g.data), free(a[1].data);
  a[1] = rand_buf(TSR_U8, 2, s2, 255);  /* both integers: f64 */
  BOTH("matmul", &p, a, 2, &c, &g);
  ASSERT_EQ(g.meta.dtype, TSR_F64);
  ASSERT_TRUE(rel_err(&g, &c) <= 1e-13);
  free(c.data), free(g.data), free(a[1].data);
  a[1] = rand_buf(TSR_I64, 2, s3, 0);
  free(a[0].data);
  a[0] = rand_buf(TSR_F32, 2, s1, 0);
  mm_params(&p, false, true, false, true);
  BOTH("matmul", &p, a, 2, &c, &g);
  ASSERT_TRUE(rel_err(&g, &c) <= 1e-5);
  free(c.data), free(g.data);
  free_bufs(a, 2);
  tsr_params_clear(&p);
}

TEST(matmul_random_all_sides)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  static const char *sides[] = {"xb", "xtb", "bx", "btx"};
  static const struct {
    const char *dist, *xdt;
    tsr_dtype bdt;
  } kinds[] = {{"random_uniform", "f32", TSR_F32}, {"random_uniform", "f64", TSR_F64},
               {"random_normal", "f64", TSR_F64}, {"randint", "i32", TSR_F64}, {"randint", "u8", TSR_F32}};
  int64_t xs[2] = {301, 57}, gs[2] = {1000, 100}, off[2] = {13, 7};
  for (int s = 0; s < 4; s++)
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      int64_t sb[2];
      if (s == 0) sb[0] = 57, sb[1] = 9;
      else if (s == 2) sb[0] = 9, sb[1] = 301;
      else sb[0] = 301, sb[1] = 9;
      tsr_buf b = rand_buf(kinds[k].bdt, 2, sb, 0);
      rparams(&p, 77 + s, kinds[k].xdt, 2, xs, gs, off);
      tsr_params_add_str(&p, "side", sides[s], strlen(sides[s]));
      tsr_params_add_str(&p, "dist", kinds[k].dist, strlen(kinds[k].dist));
      tsr_params_add_int(&p, "low", 0);
      tsr_params_add_int(&p, "high", 3);
      BOTH("matmul_random", &p, &b, 1, &c, &g);
      ASSERT_TRUE(rel_err(&g, &c) <= (kinds[k].bdt == TSR_F64 ? 1e-12 : 1e-5));
      free(c.data), free(g.data), free(b.data);
    }
  tsr_params_clear(&p);
}

/* ---------- qr and svd ---------- */

/* Element (i, j) of a row-major block inside a packed output. */
static double el(const tsr_buf *b, int64_t base, int64_t ld, int64_t i, int64_t j)
{
  return at(b, base + i * ld + j);
}

/* max |(XᵀX)_ij - δ_ij| over the first k columns of the m×ld block at base
 * (cols: columns are X's (i, j) = (row, col); rows: rows are). */
static double orth_err(const tsr_buf *b, int64_t base, int64_t rows, int64_t cols, int64_t k, bool by_rows)
{
  double worst = 0;
  for (int64_t a = 0; a < k; a++)
    for (int64_t c = 0; c < k; c++) {
      double s = 0;
      int64_t len = by_rows ? cols : rows;
      for (int64_t i = 0; i < len; i++)
        s += by_rows ? el(b, base, cols, a, i) * el(b, base, cols, c, i) : el(b, base, cols, i, a) * el(b, base, cols, i, c);
      double d = fabs(s - (a == c ? 1.0 : 0.0));
      if (d > worst) worst = d;
    }
  return worst;
}

TEST(qr_against_cpu_and_definition)
{
  tsr_buf c, g;
  static const int64_t shapes[][2] = {{200, 50}, {50, 200}, {64, 64}, {1, 5}, {300, 1}};
  static const tsr_dtype dts[] = {TSR_F32, TSR_F64, TSR_I32};
  for (int s = 0; s < 5; s++)
    for (int d = 0; d < 3; d++) {
      int64_t m = shapes[s][0], n = shapes[s][1], k = m < n ? m : n;
      double tol = dts[d] == TSR_F32 ? 1e-4 : 1e-10;
      tsr_buf a = rand_buf(dts[d], 2, shapes[s], 0);
      BOTH("qr", NULL, &a, 1, &c, &g);
      int64_t rb = m * n;  /* R's offset */
      ASSERT_TRUE(orth_err(&g, 0, m, n, k, false) <= tol);
      double num = 0, den = 0, dq = 0, dn = 0;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double qr = 0;
          for (int64_t l = 0; l < n; l++) qr += el(&g, 0, n, i, l) * el(&g, rb, n, l, j);
          num += (qr - at(&a, i * n + j)) * (qr - at(&a, i * n + j)), den += at(&a, i * n + j) * at(&a, i * n + j);
        }
      ASSERT_TRUE(sqrt(num / den) <= tol);
      for (int64_t l = 0; l < n; l++) {  /* CPU and GPU agree up to the signs of Q's columns / R's rows */
        double sg = l < k && (el(&g, rb, n, l, l) < 0) != (el(&c, rb, n, l, l) < 0) ? -1 : 1;
        for (int64_t i = 0; i < m; i++) {
          double x = sg * el(&g, 0, n, i, l) - el(&c, 0, n, i, l);
          dq += x * x, dn += el(&c, 0, n, i, l) * el(&c, 0, n, i, l);
        }
        for (int64_t j = 0; j < n; j++) {
          double x = sg * el(&g, rb, n, l, j) - el(&c, rb, n, l, j);
          dq += x * x, dn += el(&c, rb, n, l, j) * el(&c, rb, n, l, j);
        }
      }
      ASSERT_TRUE(sqrt(dq / dn) <= tol);
      free(c.data), free(g.data), free(a.data);
    }
}

TEST(svd_all_algorithms)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  static const int64_t shapes[][2] = {{300, 40}, {40, 300}, {100, 100}, {1, 7}, {7, 1}};
  static const char *algos[] = {"auto", "gesvd", "gesvdj", "qr_gesvd", "qr_gesvdj"};
  static const tsr_dtype dts[] = {TSR_F32, TSR_F64};
  for (int s = 0; s < 5; s++)
    for (int d = 0; d < 2; d++)
      for (int al = 0; al < 5; al++) {
        int64_t m = shapes[s][0], n = shapes[s][1], r = m < n ? m : n;
        double tol = dts[d] == TSR_F32 ? 1e-4 : 1e-10;
        tsr_buf a = rand_buf(dts[d], 2, shapes[s], 0);
        tsr_params_clear(&p);
        tsr_params_add_str(&p, "algo", algos[al], strlen(algos[al]));
        BOTH("svd", &p, &a, 1, &c, &g);
        int64_t so = m * r, vo = so + r;
        double ds = 0, dn = 0, num = 0, den = 0;
        for (int64_t i = 0; i < r; i++) {
          ds += (at(&g, so + i) - at(&c, so + i)) * (at(&g, so + i) - at(&c, so + i));
          dn += at(&c, so + i) * at(&c, so + i);
          if (i > 0) ASSERT_TRUE(at(&g, so + i) <= at(&g, so + i - 1));
        }
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) {
            double x = 0;
            for (int64_t l = 0; l < r; l++) x += el(&g, 0, r, i, l) * at(&g, so + l) * el(&g, vo, n, l, j);
            num += (x - at(&a, i * n + j)) * (x - at(&a, i * n + j)), den += at(&a, i * n + j) * at(&a, i * n + j);
          }
        double eo = orth_err(&g, 0, m, r, r, false), ev = orth_err(&g, vo, r, n, r, true);
        if (!(sqrt(ds / dn) <= tol && sqrt(num / den) <= tol && eo <= tol && ev <= tol))
          KIT_FAIL_("svd %lldx%lld %s %s: S %.2e, USVt %.2e, U'U %.2e, VtV' %.2e", (long long)m, (long long)n,
                    tsr_dtype_name(dts[d]), algos[al], sqrt(ds / dn), sqrt(num / den), eo, ev);
        free(c.data), free(g.data), free(a.data);
      }
  tsr_params_clear(&p);
}

/* A solver that fails on the device (gesvdj held to one sweep cannot
 * converge) fails the variant through the deferred check, naming the
 * routine; the next call, converging, succeeds (the check was cleared). */
TEST(solver_failure_is_reported_after_the_stream)
{
  tsr_params p = TSR_PARAMS_INIT;
  int64_t shape[2] = {60, 40};
  tsr_buf a = rand_buf(TSR_F64, 2, shape, 0), g;
  tsr_errbuf err;
  tsr_params_add_str(&p, "algo", "gesvdj", 6);
  tsr_params_add_int(&p, "max_sweeps", 1);
  ASSERT_EQ(gpu_run("svd", &p, &a, 1, &g, &err), TSR_EINVAL);
  fprintf(stderr, "  one sweep: %s\n", err.text);
  ASSERT_CONTAINS(err.text, "svd: cuSOLVER gesvdj did not converge (info");
  free(g.data);
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "algo", "gesvdj", 6);
  ASSERT_OK(gpu_run("svd", &p, &a, 1, &g, &err));
  ASSERT_TRUE(!isnan(at(&g, 0)));
  free(g.data);
  tsr_params_add_int(&p, "max_sweeps", 0);
  ASSERT_EQ(gpu_run("svd", &p, &a, 1, &g, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "svd: max_sweeps must be 1 to 1000000, got 0");
  free(g.data), free(a.data);
  tsr_params_clear(&p);
}

/* ---------- 2-bit genotypes ---------- */

TEST(pack_unpack_gpu_matches_cpu)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g, uc, ug;
  static const int64_t shapes[][3] = {{5, 13, 0}, {3, 4, 8}, {1000, 1001, 0}, {7, 0, 0}, {2, 4096, 0}};
  static const int nds[] = {2, 3, 2, 2, 2};
  for (int s = 0; s < 5; s++)
    for (int hi = 3; hi <= 255; hi += 252) {
      tsr_buf x = rand_buf(TSR_U8, nds[s], shapes[s], hi);
      BOTH("pack2bit", NULL, &x, 1, &c, &g);
      ASSERT_SAME(&c, &g);
      tsr_params_clear(&p);
      tsr_params_add_int(&p, "cols", shapes[s][nds[s] - 1]);
      BOTH("unpack2bit", &p, &g, 1, &uc, &ug);
      ASSERT_SAME(&uc, &ug);
      if (hi == 3) ASSERT_SAME(&ug, &x);  /* the exact round trip */
      free(c.data), free(g.data), free(uc.data), free(ug.data), free(x.data);
    }
  tsr_params_clear(&p);
}

TEST(matmul_2bit_gpu_vs_cpu)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  static const int64_t cases[][3] = {{1000, 1001, 20}, {513, 4096, 33}, {300, 17, 1}, {2049, 2000, 64}, {64, 20000, 20},
                                     {140000, 4096, 20}, {5000, 5002, 20}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int side = 0; side < 2; side++)
      for (int d = 3; d < 5; d++) {
        int64_t r = cases[i][0], cc = cases[i][1], th = cases[i][2];
        int64_t sx[2] = {r, cc}, sb[2] = {side ? r : cc, th};
        tsr_buf x = rand_buf(TSR_U8, 2, sx, 3), pk, in[2];
        tsr_errbuf err;
        ASSERT_OK(cpu_run("pack2bit", NULL, &x, 1, &pk, &err));
        in[0] = pk, in[1] = rand_buf(all_dts[d], 2, sb, 0);
        tsr_params_clear(&p);
        tsr_params_add_int(&p, "cols", cc);
        tsr_params_add_str(&p, "side", side ? "btx" : "xb", side ? 3 : 2);
        BOTH("matmul_2bit", &p, in, 2, &c, &g);
        double e = rel_err(&g, &c);
        fprintf(stderr, "  2-bit %lldx%lld, %lld thin, %s, %s: %.2e\n", (long long)r, (long long)cc, (long long)th,
                side ? "btx" : "xb", tsr_dtype_name(all_dts[d]), e);
        ASSERT_EQ(g.meta.dtype, all_dts[d]);  /* B's dtype */
        ASSERT_TRUE(e <= (all_dts[d] == TSR_F64 ? 1e-8 : 1e-4));  /* 30-bit / 22-bit quantization of B */
        free(c.data), free(g.data), free(x.data);
        free_bufs(in, 2);
      }
  tsr_params_clear(&p);
}

/* add/sub/mul/div broadcasting a row, a column or a scalar, either side:
 * the same bytes as the CPU. */
TEST(broadcast_bit_identical)
{
  static const char *const ops[] = {"add", "sub", "mul", "div"}, *const kinds[] = {"row", "col", "scalar"};
  static const tsr_dtype dts[] = {TSR_U8, TSR_I32, TSR_F32, TSR_F64};
  int64_t sm[2] = {301, 77}, sr[1] = {77}, sc[2] = {301, 1}, s1[1] = {1};
  tsr_params p = TSR_PARAMS_INIT;
  for (int o = 0; o < 4; o++)
    for (int k = 0; k < 3; k++)
      for (int d = 0; d < 4; d++)
        for (int sw = 0; sw < 2; sw++) {
          if (o == 3 && (dts[d] == TSR_U8 || dts[d] == TSR_I32)) continue;  /* integer div: the CPU variant */
          tsr_buf in[2] = {rand_buf(dts[d], 2, sm, 200), rand_buf(dts[d], k == 0 ? 1 : k == 1 ? 2 : 1, k == 0 ? sr : k == 1 ? sc : s1, 200)}, c, g;
          tsr_params_clear(&p);
          tsr_params_add_str(&p, "bcast", kinds[k], strlen(kinds[k]));
          if (sw) tsr_params_add_bool(&p, "swap", true);
          BOTH(ops[o], &p, in, 2, &c, &g);
          ASSERT_SAME(&c, &g);
          free(c.data), free(g.data);
          free_bufs(in, 2);
        }
  tsr_params_clear(&p);
}

/* randint_packed: the CPU's bytes, aligned and unaligned rows. */
TEST(randint_packed_bit_identical)
{
  static const int64_t cases[][6] = {{1000, 20000, 5000, 20000, 1000, 0}, {70, 301, 1000, 1000, 13, 7}, {3, 5, 9, 9, 2, 3}};
  tsr_params p = TSR_PARAMS_INIT;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t shape[2] = {cases[i][0], cases[i][1]}, global[2] = {cases[i][2], cases[i][3]}, offset[2] = {cases[i][4], cases[i][5]};
    tsr_buf c, g;
    rparams(&p, 91, "u8", 2, shape, global, offset);
    tsr_params_add_int(&p, "low", 0);
    tsr_params_add_int(&p, "high", 3);
    BOTH("randint_packed", &p, NULL, 0, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
  }
  tsr_params_clear(&p);
}

/* sum skipping missing values (a genotype's 3, NaN) and counting the
 * rest, and astype turning the missing value into NaN: the CPU's results
 * (integers and counts to the bit, f64 sums within 1e-12). */
TEST(missing_values_sum_count_and_astype)
{
  int64_t shape[2] = {300, 257};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf g = rand_buf(TSR_U8, 2, shape, 3), f = rand_buf(TSR_F64, 2, shape, 0), c, gg;
  for (int64_t i = 0; i < 300 * 257; i += 7) ((double *)f.data)[i] = NAN;
  for (int axis = -1; axis < 2; axis++)
    for (int mode = 0; mode < 2; mode++) {
      tsr_params_clear(&p);
      tsr_params_add_int(&p, "axis", axis);
      tsr_params_add_int(&p, "missing", 3);
      if (mode) tsr_params_add_bool(&p, "count", true);
      BOTH("sum", &p, &g, 1, &c, &gg);
      ASSERT_SAME(&c, &gg);
      free(c.data), free(gg.data);
      tsr_params_clear(&p);
      tsr_params_add_int(&p, "axis", axis);
      tsr_params_add_bool(&p, mode ? "count" : "skipna", true);
      BOTH("sum", &p, &f, 1, &c, &gg);
      if (mode) ASSERT_SAME(&c, &gg);
      else ASSERT_TRUE(rel_err(&gg, &c) <= 1e-12);
      free(c.data), free(gg.data);
    }
  /* the column sums of a packed chunk (rows not a multiple of anything, a partial last byte) */
  tsr_buf pk;
  tsr_errbuf err;
  ASSERT_OK(cpu_run("pack2bit", NULL, &g, 1, &pk, &err));
  for (int mode = 0; mode < 2; mode++) {
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "axis", 0);
    tsr_params_add_int(&p, "cols", 257);
    tsr_params_add_int(&p, "missing", 3);
    if (mode) tsr_params_add_bool(&p, "count", true);
    BOTH("sum", &p, &pk, 1, &c, &gg);
    ASSERT_SAME(&c, &gg);
    free(c.data), free(gg.data);
  }
  free(pk.data);
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "dtype", "f64", 3);
  tsr_params_add_int(&p, "missing", 3);
  BOTH("astype", &p, &g, 1, &c, &gg);
  ASSERT_SAME(&c, &gg);
  free(c.data), free(gg.data), free(g.data), free(f.data);
  tsr_params_clear(&p);
}

/* matmul_chain on every side, u8 and packed X, without steps, with a
 * standardization that fills missing values, and with a scale: within the
 * int8 kernels' f64 bound of the CPU variant. A column without variance
 * (mean 0, spread 0) is all 0 on both. Missing values left NaN go to the
 * CPU variant. */
static void chain_params(tsr_params *p, const char *side, int kind, int64_t packed_cols)
{
  int64_t steps[3] = {2, 4, 8}, inputs[3] = {2, 3, -1}, s1[1] = {7}, i1[1] = {-1};
  double values[6] = {0, 0, 0, 0, 0, 0}, v1[2] = {0.25, -1.5};
  tsr_params_clear(p);
  tsr_params_add_str(p, "side", side, strlen(side));
  if (packed_cols >= 0) tsr_params_add_int(p, "cols", packed_cols);
  if (kind == 1) {
    tsr_params_add_int(p, "missing", 3);
    tsr_params_add_ints(p, "steps", steps, 3);
    tsr_params_add_ints(p, "step_inputs", inputs, 3);
    tsr_params_add_floats(p, "step_values", values, 6);
  } else if (kind == 2) {
    tsr_params_add_ints(p, "steps", s1, 1);
    tsr_params_add_ints(p, "step_inputs", i1, 1);
    tsr_params_add_floats(p, "step_values", v1, 2);
  } else if (kind == 3) {
    tsr_params_add_int(p, "missing", 3);  /* missing values stay NaN */
  }
}

TEST(matmul_chain_gpu_vs_cpu)
{
  static const char *const sides[] = {"xb", "xtb", "bx", "btx"};
  static const int64_t cases[][3] = {{1000, 1001, 20}, {513, 4096, 30}, {70, 300, 5}};
  tsr_params p = TSR_PARAMS_INIT;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
    for (int side = 0; side < 4; side++)
      for (int packed = 0; packed < 2; packed++)
        for (int kind = 0; kind < 3; kind++) {
          int64_t r = cases[ci][0], cc = cases[ci][1], w = cases[ci][2];
          int64_t sx[2] = {r, cc}, sv[1] = {cc};
          int64_t sb[2] = {side == 0 ? cc : side == 2 ? w : r, side == 2 ? r : w};
          tsr_buf x = rand_buf(TSR_U8, 2, sx, 3), mu = hbuf(TSR_F64, 1, sv), sd = hbuf(TSR_F64, 1, sv), pk, c, g;
          for (int64_t i = 0; i < r; i++) ((uint8_t *)x.data)[i * cc + 5] = 0;  /* a column without variance */
          for (int64_t j = 0; j < cc; j++) {
            ((double *)mu.data)[j] = j == 5 ? 0.0 : 0.2 + 1.6 * rnd_unit();
            ((double *)sd.data)[j] = j == 5 ? 0.0 : 0.5 + 0.5 * rnd_unit();
          }
          tsr_errbuf err;
          ASSERT_OK(cpu_run("pack2bit", NULL, &x, 1, &pk, &err));
          tsr_buf in[4] = {packed ? pk : x, rand_buf(TSR_F64, 2, sb, 0), mu, sd};
          chain_params(&p, sides[side], kind, packed ? cc : -1);
          BOTH("matmul_chain", &p, in, kind == 1 ? 4 : 2, &c, &g);
          double e = rel_err(&g, &c);
          if (e > 1e-8)
            fprintf(stderr, "  chain %s %s kind %d %lldx%lld w %lld: %.2e\n", sides[side], packed ? "packed" : "u8", kind,
                    (long long)r, (long long)cc, (long long)w, e);
          ASSERT_TRUE(e <= 1e-8);
          free(c.data), free(g.data), free(x.data), free(pk.data), free(in[1].data), free(mu.data), free(sd.data);
        }
  /* a missing value left NaN: the CPU variant's */
  int64_t sx[2] = {64, 64}, sb[2] = {64, 4};
  tsr_buf in[2] = {rand_buf(TSR_U8, 2, sx, 3), rand_buf(TSR_F64, 2, sb, 0)}, g;
  tsr_errbuf err;
  chain_params(&p, "xb", 3, -1);
  ASSERT_EQ(gpu_run("matmul_chain", &p, in, 2, &g, &err), TSR_ENODEV);
  free(g.data);
  free_bufs(in, 2);
  tsr_params_clear(&p);
}


/* A float X (the single-cell PCA's scaled matrix): no steps, (x − μ)/σ and
 * a scale, every side, f32 and f64, against the CPU within 1e-10; a chain
 * with fillnan is left to the CPU. */
TEST(matmul_chain_float_x_gpu_vs_cpu)
{
  static const char *const sides[] = {"xb", "xtb", "bx", "btx"};
  int64_t steps[2] = {2, 4}, inputs[2] = {2, 3}, s1[1] = {7}, i1[1] = {-1}, s8[1] = {8};
  double values[4] = {0, 0, 0, 0}, v1[2] = {0.25, -1.5};
  int64_t r = 700, cc = 300, w = 12, sv[1] = {cc}, sx[2] = {r, cc};
  tsr_params p = TSR_PARAMS_INIT;
  for (int dt = 0; dt < 2; dt++)
    for (int side = 0; side < 4; side++)
      for (int kind = 0; kind < 3; kind++) {
        int64_t sb[2] = {side == 0 ? cc : side == 2 ? w : r, side == 2 ? r : w};
        tsr_buf x = rand_buf(dt ? TSR_F64 : TSR_F32, 2, sx, 0), mu = hbuf(TSR_F64, 1, sv), sd = hbuf(TSR_F64, 1, sv), c, g;
        for (int64_t j = 0; j < cc; j++) ((double *)mu.data)[j] = rnd_unit() - 0.5, ((double *)sd.data)[j] = 0.5 + rnd_unit();
        tsr_params_clear(&p);
        tsr_params_add_str(&p, "side", sides[side], strlen(sides[side]));
        if (kind == 1) {
          tsr_params_add_ints(&p, "steps", steps, 2);
          tsr_params_add_ints(&p, "step_inputs", inputs, 2);
          tsr_params_add_floats(&p, "step_values", values, 4);
        } else if (kind == 2) {
          tsr_params_add_ints(&p, "steps", s1, 1);
          tsr_params_add_ints(&p, "step_inputs", i1, 1);
          tsr_params_add_floats(&p, "step_values", v1, 2);
        }
        tsr_buf in[4] = {x, rand_buf(TSR_F64, 2, sb, 0), mu, sd};
        BOTH("matmul_chain", &p, in, kind == 1 ? 4 : 2, &c, &g);
        double e = rel_err(&g, &c);
        if (e > 1e-10) fprintf(stderr, "  float chain %s f%d kind %d: %.2e\n", sides[side], dt ? 64 : 32, kind, e);
        ASSERT_TRUE(e <= 1e-10);
        free(c.data), free(g.data), free(x.data), free(in[1].data), free(mu.data), free(sd.data);
      }
  int64_t sb[2] = {cc, w};
  tsr_buf in[2] = {rand_buf(TSR_F32, 2, sx, 0), rand_buf(TSR_F64, 2, sb, 0)}, g;
  tsr_errbuf err;
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "side", "xb", 2);
  tsr_params_add_ints(&p, "steps", s8, 1);
  tsr_params_add_ints(&p, "step_inputs", i1, 1);
  tsr_params_add_floats(&p, "step_values", v1, 2);
  ASSERT_EQ(gpu_run("matmul_chain", &p, in, 2, &g, &err), TSR_ENODEV);
  free(g.data);
  free_bufs(in, 2);
  tsr_params_clear(&p);
}

/* ---------- kNN ---------- */

/* n x d rows in (-1, 1); every 7th row a copy of the row 5 before it, so
 * pairs of equal rows tie in distance everywhere (ties by index). */
static tsr_buf knn_data(tsr_dtype dt, int64_t n, int64_t d)
{
  int64_t shape[2] = {n, d};
  tsr_buf b = rand_buf(dt, 2, shape, 0);
  size_t row = (size_t)d * tsr_dtype_size(dt);
  for (int64_t r = 7; r < n; r += 7) memcpy((char *)b.data + r * row, (char *)b.data + (r - 5) * row, row);
  return b;
}

/* Rows [r0, r0 + n) of x as a block of their own. */
static tsr_buf knn_rows(const tsr_buf *x, int64_t r0, int64_t n)
{
  int64_t shape[2] = {n, x->meta.shape[1]};
  tsr_buf b = hbuf(x->meta.dtype, 2, shape);
  size_t row = (size_t)shape[1] * tsr_dtype_size(x->meta.dtype);
  memcpy(b.data, (const char *)x->data + r0 * row, (size_t)n * row);
  return b;
}

static void knn_params_set(tsr_params *p, int64_t k, int64_t metric, int64_t row0, int64_t col0, int64_t part)
{
  tsr_params_clear(p);
  tsr_params_add_int(p, "k", k);
  tsr_params_add_int(p, "metric", metric);
  tsr_params_add_int(p, "row0", row0);
  if (col0 >= 0) tsr_params_add_int(p, "col0", col0);
  if (part >= 0) tsr_params_add_int(p, "part", part);
}

/* The tile of rows [r0, r0+ri) against rows [c0, c0+rj) of x, both sides:
 * the same bytes. */
static void knn_tile_case(const tsr_buf *x, int64_t k, int64_t metric, int64_t r0, int64_t ri, int64_t c0, int64_t rj)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf in[2] = {knn_rows(x, r0, ri), knn_rows(x, c0, rj)}, c, g;
  knn_params_set(&p, k, metric, r0, c0, -1);
  BOTH("knn_tile", &p, in, 2, &c, &g);
  if (!same_bytes(&c, &g)) {
    int64_t n = tsr_meta_count(&c.meta), i = 0;
    while (i < n && ((double *)c.data)[i] == ((double *)g.data)[i]) i++;
    fprintf(stderr, "  knn_tile %s k %lld metric %lld rows %lld+%lld cols %lld+%lld: element %lld cpu %.17g gpu %.17g\n",
            x->meta.dtype == TSR_F32 ? "f32" : "f64", (long long)k, (long long)metric, (long long)r0, (long long)ri,
            (long long)c0, (long long)rj, (long long)i, ((double *)c.data)[i], ((double *)g.data)[i]);
  }
  ASSERT_SAME(&c, &g);
  free(c.data), free(g.data);
  free_bufs(in, 2);
  tsr_params_clear(&p);
}

/* knn_tile: diagonal tiles (the self row skipped), off-diagonal ones, a
 * column block of fewer rows than k (−1 / +inf padding), one row, k = 1,
 * lists of more than 32 (two slots a lane), f32 and f64, euclidean and
 * cosine (with a zero row), sub-tiles of more than one launch, and the
 * TF32 path's exact redo of rows it cannot certify. */
TEST(knn_tile_bit_identical)
{
  static const tsr_dtype dts[2] = {TSR_F32, TSR_F64};
  for (int di = 0; di < 2; di++)
    for (int metric = 0; metric < 2; metric++) {
      tsr_buf x = knn_data(dts[di], 700, 23);
      memset((char *)x.data + 40 * 23 * tsr_dtype_size(dts[di]), 0, 23 * tsr_dtype_size(dts[di]));  /* a zero row */
      static const int64_t ks[] = {15, 1, 2, 40};
      for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        int64_t k = ks[ki];
        knn_tile_case(&x, k, metric, 0, 300, 0, 300);      /* diagonal */
        knn_tile_case(&x, k, metric, 300, 250, 0, 300);    /* below it */
        knn_tile_case(&x, k, metric, 0, 300, 300, 400);    /* right of it, wider */
        knn_tile_case(&x, k, metric, 100, 200, 0, 700);    /* the self rows inside a wider block */
        knn_tile_case(&x, k, metric, 690, 10, 690, 10);    /* fewer rows than k: padding */
        knn_tile_case(&x, k, metric, 5, 1, 0, 9);          /* one row */
      }
      free(x.data);
    }
  /* The TF32 path (f32, k <= 25): 50 dims (7 k-steps); and rows away from
   * the origin, where TF32 keys cannot certify rows, which are redone
   * exactly (knn_tc.cu's step 4) over their band of columns or, far out,
   * over every column. */
  tsr_buf pcs = knn_data(TSR_F32, 3000, 50);
  knn_tile_case(&pcs, 15, 0, 0, 1000, 0, 3000);
  knn_tile_case(&pcs, 15, 1, 1000, 1000, 0, 3000);
  for (int64_t i = 0; i < 3000 * 50; i++) ((float *)pcs.data)[i] += 4.0f;  /* some rows: a band of columns */
  knn_tile_case(&pcs, 15, 0, 0, 1000, 0, 3000);
  for (int64_t i = 0; i < 3000 * 50; i++) ((float *)pcs.data)[i] += 26.0f;  /* every row: all columns */
  knn_tile_case(&pcs, 15, 0, 0, 300, 0, 3000);
  knn_tile_case(&pcs, 10, 0, 2900, 100, 2000, 1000);
  free(pcs.data);
  /* sub-tiles: more rows than one launch and columns in several sub-tiles */
  tsr_buf big = knn_data(TSR_F32, 9000, 8);
  knn_tile_case(&big, 15, 0, 0, 8500, 0, 9000);
  free(big.data);
  tsr_buf wide = knn_data(TSR_F32, 12000, 5);
  knn_tile_case(&wide, 10, 0, 11990, 10, 0, 12000);  /* a few rows: columns in wide sub-tiles */
  free(wide.data);
}

/* knn_merge of CPU tiles, both parts and metrics: the same bytes; also a
 * row of more tiles than one launch takes (72 > 64) with short tiles
 * whose rows end in padding, and a list of more than 32. */
TEST(knn_merge_bit_identical)
{
  tsr_buf x = knn_data(TSR_F32, 720, 12);
  static const int64_t cases[][2] = {{15, 4}, {15, 72}, {40, 3}, {1, 2}};  /* k, tiles */
  tsr_params p = TSR_PARAMS_INIT;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
    for (int metric = 0; metric < 2; metric++) {
      int64_t k = cases[ci][0], nt = cases[ci][1], rj = 720 / nt, ri = 50, r0 = 200;
      tsr_buf tiles[72];
      for (int64_t t = 0; t < nt; t++) {
        tsr_buf in[2] = {knn_rows(&x, r0, ri), knn_rows(&x, t * rj, rj)};
        tsr_errbuf err;
        knn_params_set(&p, k, metric, r0, t * rj, -1);
        ASSERT_OK(cpu_run("knn_tile", &p, in, 2, &tiles[t], &err));
        free_bufs(in, 2);
      }
      for (int part = 0; part < 2; part++) {
        tsr_buf c, g;
        knn_params_set(&p, k, metric, r0, -1, part);
        BOTH("knn_merge", &p, tiles, (int)nt, &c, &g);
        ASSERT_SAME(&c, &g);
        free(c.data), free(g.data);
      }
      free_bufs(tiles, (int)nt);
    }
  free(x.data);
  tsr_params_clear(&p);
}

/* A non-finite input fails the tile after the stream, naming the row; a
 * list longer than 64 is left to the CPU (TSR_ENODEV). */
TEST(knn_bad_input_and_cpu_fallback)
{
  tsr_buf x = knn_data(TSR_F32, 60, 4), g;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf in[2] = {knn_rows(&x, 0, 30), knn_rows(&x, 30, 30)};
  ((float *)in[1].data)[7 * 4 + 2] = NAN;
  knn_params_set(&p, 5, 0, 0, 30, -1);
  ASSERT_EQ(gpu_run("knn_tile", &p, in, 2, &g, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "knn_tile: row 37 of the input is not finite");
  free(g.data);
  ((float *)in[1].data)[7 * 4 + 2] = 0.5f;
  ASSERT_OK(gpu_run("knn_tile", &p, in, 2, &g, &err));  /* the check was cleared */
  free(g.data);
  knn_params_set(&p, 58, 0, 0, 30, -1);
  ASSERT_EQ(gpu_run("knn_tile", &p, in, 2, &g, &err), TSR_ENODEV);
  free(g.data);
  free_bufs(in, 2), free(x.data);
  tsr_params_clear(&p);
}

/* ---------- the CPU side of the 2-bit ops (--cpu) ---------- */

TEST(pack2bit_cpu_format)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out, back;
  uint8_t x[2][6] = {{1, 2, 3, 0, 3, 3}, {0, 9, 1, 1, 2, 255}};
  int64_t shape[2] = {2, 6};
  tsr_buf in = {{TSR_U8, 2, {2, 6}}, x, 12};
  ASSERT_OK(cpu_run("pack2bit", NULL, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.shape[1], 2);
  uint8_t *y = out.data;
  ASSERT_EQ(y[0], 1 | 2 << 2 | 3 << 4);
  ASSERT_EQ(y[1], 3 | 3 << 2);                /* pad bits 0 */
  ASSERT_EQ(y[2], 3 << 2 | 1 << 4 | 1 << 6);  /* 9 saturates to 3 */
  ASSERT_EQ(y[3], 2 | 3 << 2);
  tsr_params_add_int(&p, "cols", 6);
  ASSERT_OK(cpu_run("unpack2bit", &p, &out, 1, &back, &err));
  ASSERT_EQ(back.meta.shape[1], 6);
  uint8_t want[12] = {1, 2, 3, 0, 3, 3, 0, 3, 1, 1, 2, 3};
  ASSERT_TRUE(memcmp(back.data, want, 12) == 0);
  free(back.data);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "cols", 9);
  ASSERT_EQ(cpu_run("unpack2bit", &p, &out, 1, &back, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "unpack2bit: packed input must be u8 with a last dimension of ceil(9/4) = 3");
  free(out.data);
  (void)shape;
  tsr_params_clear(&p);
}

TEST(matmul_2bit_cpu_matches_unpacked)
{
  tsr_params p = TSR_PARAMS_INIT, q = TSR_PARAMS_INIT;
  tsr_errbuf err;
  int64_t sx[2] = {301, 103}, sb[2] = {103, 7}, sq[2] = {301, 5};
  tsr_buf x = rand_buf(TSR_U8, 2, sx, 3), pk, got, ref, in[2];
  ASSERT_OK(cpu_run("pack2bit", NULL, &x, 1, &pk, &err));
  for (int side = 0; side < 2; side++) {
    in[0] = pk, in[1] = rand_buf(TSR_F64, 2, side ? sq : sb, 0);
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "cols", 103);
    tsr_params_add_str(&p, "side", side ? "btx" : "xb", side ? 3 : 2);
    ASSERT_OK(cpu_run("matmul_2bit", &p, in, 2, &got, &err));
    ASSERT_EQ(got.meta.dtype, TSR_F64);  /* B's dtype */
    tsr_buf mm[2] = {side ? in[1] : x, side ? x : in[1]};
    tsr_params_clear(&q);
    tsr_params_add_bool(&q, "trans_a", side);
    ASSERT_OK(cpu_run("matmul", &q, mm, 2, &ref, &err));
    ASSERT_EQ(got.meta.shape[0], ref.meta.shape[0]);
    ASSERT_EQ(got.meta.shape[1], ref.meta.shape[1]);
    ASSERT_TRUE(rel_err(&got, &ref) <= 1e-14);  /* f64 sums, f64 out */
    free(got.data), free(ref.data), free(in[1].data);
  }
  in[1] = rand_buf(TSR_F64, 2, sq, 0);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "cols", 103);
  ASSERT_EQ(cpu_run("matmul_2bit", &p, in, 2, &got, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "matmul_2bit: side xb needs B with 103 rows");
  tsr_params_add_str(&p, "side", "xtb", 3);
  ASSERT_EQ(cpu_run("matmul_2bit", &p, in, 2, &got, &err), TSR_EINVAL);
  free(in[1].data), free(pk.data), free(x.data);
  tsr_params_clear(&p), tsr_params_clear(&q);
}

/* ---------- measurements (--bench) ---------- */

static tsr_buf dalloc(tsr_dtype dt, int nd, const int64_t *shape)
{
  tsr_buf b;
  memset(&b, 0, sizeof b);
  b.meta.dtype = dt, b.meta.ndim = nd;
  for (int d = 0; d < nd; d++) b.meta.shape[d] = shape[d];
  b.nbytes = (size_t)tsr_meta_nbytes(&b.meta);
  if (cudaMalloc(&b.data, b.nbytes ? b.nbytes : 1) != cudaSuccess) {
    fprintf(stderr, "cudaMalloc of %zu bytes failed\n", b.nbytes);
    exit(1);
  }
  return b;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Runs name's CUDA variant on device buffers: one warm-up, then reps
 * timed runs (events on the stream); the median in ms, or -1. Allocates
 * *dout from infer() when its data is NULL. Stops repeating once a run
 * took over 3 s. */
static double bench_op(const char *name, const tsr_params *p, const tsr_buf *din, int n_in, tsr_buf *dout, int reps)
{
  static const tsr_params none = TSR_PARAMS_INIT;
  const tsr_op_def *op = tsr_op_find(name);
  tsr_errbuf err;
  tsr_meta metas[8];
  if (p == NULL) p = &none;
  for (int i = 0; i < n_in; i++) metas[i] = din[i].meta;
  if (dout->data == NULL) {
    tsr_meta om;
    if (op->infer(p, metas, n_in, &om, &err) != 0) {
      fprintf(stderr, "%s: %s\n", name, err.text);
      return -1;
    }
    *dout = dalloc(om.dtype, om.ndim, om.shape);
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  double t[32];
  int done = 0;
  for (int r = -1; r < reps && r < 32; r++) {
    cudaEventRecord(e0, g_stream);
    int rc = op->cuda(p, din, n_in, dout, &g_ctx, &err);
    cudaEventRecord(e1, g_stream);
    cudaError_t e = cudaEventSynchronize(e1);
    if (rc != 0 || e != cudaSuccess) {
      fprintf(stderr, "%s: %d %s %s\n", name, rc, err.text, cudaGetErrorString(e));
      return -1;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r >= 0) t[done++] = ms;
    if (ms > 3000) break;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  if (done == 0) return t[0] = -1;
  qsort(t, (size_t)done, sizeof t[0], cmp_double);
  return t[done / 2];
}

static void dfree(tsr_buf *b)
{
  cudaFree(b->data);
  b->data = NULL;
}

static void report(const char *what, double ms, double gbytes, double gflop)
{
  printf("%-58s %10.3f ms", what, ms);
  if (gbytes > 0) printf(" %8.1f GB/s", gbytes / (ms * 1e-3));
  if (gflop > 0) printf(" %8.1f TFLOP/s", gflop / (ms * 1e-3) / 1e3);
  printf("\n");
  fflush(stdout);
}

static void bench_rates(void)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf a, b, o = {0};
  int64_t n1[1] = {1ll << 30}, n2[1] = {1ll << 28};
  {
    a = dalloc(TSR_U8, 1, (int64_t[1]){4ll << 30});
    b = dalloc(TSR_U8, 1, (int64_t[1]){4ll << 30});
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaMemcpyAsync(b.data, a.data, a.nbytes, cudaMemcpyDeviceToDevice, g_stream);
    cudaEventRecord(e0, g_stream);
    for (int i = 0; i < 5; i++) cudaMemcpyAsync(b.data, a.data, a.nbytes, cudaMemcpyDeviceToDevice, g_stream);
    cudaEventRecord(e1, g_stream);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    report("cudaMemcpy D2D 4 GiB (read + write)", ms / 5, 2.0 * (double)a.nbytes / 1e9, 0);
    dfree(&a), dfree(&b);
  }
  rparams(&p, 1, "f32", 1, n1, n1, (int64_t[1]){0});
  report("random_uniform f32 2^30", bench_op("random_uniform", &p, NULL, 0, &o, 5), 4.0 * n1[0] / 1e9, 0);
  dfree(&o);
  rparams(&p, 1, "f64", 1, n2, n2, (int64_t[1]){0});
  report("random_normal f64 2^28 (double-double)", bench_op("random_normal", &p, NULL, 0, &o, 5), 8.0 * n2[0] / 1e9, 0);
  dfree(&o);
  rparams(&p, 1, "f32", 1, n2, n2, (int64_t[1]){0});
  report("random_normal f32 2^28", bench_op("random_normal", &p, NULL, 0, &o, 5), 4.0 * n2[0] / 1e9, 0);
  dfree(&o);
  rparams(&p, 1, "u8", 2, (int64_t[2]){1 << 16, 1 << 16}, (int64_t[2]){1 << 17, 1 << 16}, (int64_t[2]){5, 0});
  tsr_params_add_int(&p, "low", 0);
  tsr_params_add_int(&p, "high", 3);
  report("randint u8 2^32 (rows of a wider array)", bench_op("randint", &p, NULL, 0, &o, 5), 4.294967296, 0);
  dfree(&o);
  tsr_buf in2[2] = {dalloc(TSR_F32, 1, n2), dalloc(TSR_F32, 1, n2)};
  cudaMemset(in2[0].data, 0x3f, in2[0].nbytes), cudaMemset(in2[1].data, 0x3e, in2[1].nbytes);
  report("add f32 2^28 + 2^28", bench_op("add", NULL, in2, 2, &o, 5), 12.0 * n2[0] / 1e9, 0);
  dfree(&o);
  tsr_params_clear(&p);
  tsr_params_add_str(&p, "dtype", "f64", 3);
  report("astype f32 -> f64 2^28", bench_op("astype", &p, in2, 1, &o, 5), 12.0 * n2[0] / 1e9, 0);
  tsr_params_clear(&p);
  report("sum f64 total 2^28", bench_op("sum", &p, &o, 1, &(tsr_buf){0}, 5), 8.0 * n2[0] / 1e9, 0);
  dfree(&o);
  tsr_buf sq = dalloc(TSR_F32, 2, (int64_t[2]){1ll << 20, 256});
  cudaMemset(sq.data, 0x3f, sq.nbytes);
  tsr_params_add_int(&p, "axis", 0);
  tsr_buf so = {0};
  report("sum f32 [2^20, 256] axis 0", bench_op("sum", &p, &sq, 1, &so, 5), (double)sq.nbytes / 1e9, 0);
  dfree(&so), dfree(&sq);
  tsr_buf t = dalloc(TSR_F32, 2, (int64_t[2]){16384, 16384});
  report("transpose f32 16384x16384", bench_op("transpose", NULL, &t, 1, &o, 5), 2.0 * (double)t.nbytes / 1e9, 0);
  dfree(&o), dfree(&t);
  tsr_buf mm[2] = {dalloc(TSR_F32, 2, (int64_t[2]){8192, 8192}), dalloc(TSR_F32, 2, (int64_t[2]){8192, 8192})};
  cudaMemset(mm[0].data, 0x3c, mm[0].nbytes), cudaMemset(mm[1].data, 0x3c, mm[1].nbytes);
  double fl = 2.0 * 8192.0 * 8192.0 * 8192.0 / 1e9;
  mm_params(&p, false, false, false, true);
  report("matmul f32 8192^3 (full f32)", bench_op("matmul", &p, mm, 2, &o, 5), 0, fl);
  mm_params(&p, false, false, true, true);
  report("matmul f32 8192^3 allow_tf32", bench_op("matmul", &p, mm, 2, &o, 5), 0, fl);
  dfree(&o), dfree(&mm[0]), dfree(&mm[1]);
  /* matmul_random: a 200000 x 2000 f32 uniform X times B [2000, 20] */
  tsr_buf bb = dalloc(TSR_F32, 2, (int64_t[2]){2000, 20});
  cudaMemset(bb.data, 0x3c, bb.nbytes);
  rparams(&p, 5, "f32", 2, (int64_t[2]){200000, 2000}, (int64_t[2]){200000, 2000}, (int64_t[2]){0, 0});
  tsr_params_add_str(&p, "side", "xb", 2);
  tsr_params_add_str(&p, "dist", "random_uniform", 14);
  report("matmul_random xb: X 200000x2000 f32 uniform @ [2000,20]", bench_op("matmul_random", &p, &bb, 1, &o, 5), 0, 0);
  dfree(&o), dfree(&bb), dfree(&in2[0]), dfree(&in2[1]);
  tsr_params_clear(&p);
}

static void bench_svd(void)
{
  tsr_params p = TSR_PARAMS_INIT;
  static const int64_t shapes[][2] = {{9000, 1000}, {3000, 3000}, {1000, 9000}, {100000, 50}};
  static const char *algos[] = {"gesvd", "gesvdj", "qr_gesvd", "qr_gesvdj", "auto"};
  static const tsr_dtype dts[] = {TSR_F32, TSR_F64};
  for (int s = 0; s < 4; s++)
    for (int d = 0; d < 2; d++) {
      tsr_buf a = dalloc(dts[d], 2, shapes[s]), o = {0};
      tsr_params_clear(&p);
      rparams(&p, 3, tsr_dtype_name(dts[d]), 2, shapes[s], shapes[s], (int64_t[2]){0, 0});
      bench_op("random_normal", &p, NULL, 0, &a, 0);
      for (int al = 0; al < 5; al++) {
        if (s == 1 && d == 1 && al == 0) continue;  /* gesvd f64 3000^2 takes seconds; measured once below */
        char what[96];
        tsr_params_clear(&p);
        tsr_params_add_str(&p, "algo", algos[al], strlen(algos[al]));
        snprintf(what, sizeof what, "svd %s %lldx%lld %s", tsr_dtype_name(dts[d]), (long long)shapes[s][0],
                 (long long)shapes[s][1], algos[al]);
        report(what, bench_op("svd", &p, &a, 1, &o, 3), 0, 0);
      }
      dfree(&o), dfree(&a);
    }
  tsr_params_clear(&p);
}

/* knn_tile as GPU clusters cut it (graphs/knn.c: 24,576 rows against
 * every row), 50 standard normal dims, k = 15: the 1.3M-row kNN is 53 such
 * tiles. */
static void bench_knn(void)
{
  tsr_params p = TSR_PARAMS_INIT;
  int64_t rows[2] = {24576, 50}, cols[2] = {1300000, 50};
  tsr_buf in[2] = {dalloc(TSR_F32, 2, rows), dalloc(TSR_F32, 2, cols)}, o = {0};
  rparams(&p, 5, "f32", 2, rows, rows, (int64_t[2]){0, 0});
  bench_op("random_normal", &p, NULL, 0, &in[0], 0);
  rparams(&p, 6, "f32", 2, cols, cols, (int64_t[2]){0, 0});
  bench_op("random_normal", &p, NULL, 0, &in[1], 0);
  for (int metric = 0; metric < 2; metric++) {
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "k", 15);
    tsr_params_add_int(&p, "metric", metric);
    tsr_params_add_int(&p, "row0", 0);
    tsr_params_add_int(&p, "col0", 0);
    report(metric ? "knn_tile f32 24576 x 1.3M x 50, k 15, cosine" : "knn_tile f32 24576 x 1.3M x 50, k 15",
           bench_op("knn_tile", &p, in, 2, &o, 5), 0, 2.0 * 24576 * 1300000 * 50 / 1e9);
  }
  dfree(&o), dfree(&in[0]), dfree(&in[1]);
  tsr_params_clear(&p);
}

static void bench_genotype(void)
{
  const int64_t R = 1000000, C = 20000, K = 20;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf x = {0}, b, q, o1 = {0}, o2 = {0}, o3 = {0}, pk = {0};
  rparams(&p, 11, "u8", 2, (int64_t[2]){R, C}, (int64_t[2]){R, C}, (int64_t[2]){0, 0});
  tsr_params_add_int(&p, "low", 0);
  tsr_params_add_int(&p, "high", 3);
  report("randint u8 1M x 20k (writes 20 GB)", bench_op("randint", &p, NULL, 0, &x, 1), 20.0, 0);
  b = dalloc(TSR_F32, 2, (int64_t[2]){C, K});
  q = dalloc(TSR_F32, 2, (int64_t[2]){R, K});
  rparams(&p, 12, "f32", 2, (int64_t[2]){C, K}, (int64_t[2]){C, K}, (int64_t[2]){0, 0});
  bench_op("random_normal", &p, NULL, 0, &b, 0);
  rparams(&p, 13, "f32", 2, (int64_t[2]){R, K}, (int64_t[2]){R, K}, (int64_t[2]){0, 0});
  bench_op("random_normal", &p, NULL, 0, &q, 0);
  double gflop = 2.0 * R * C * K / 1e9;
  tsr_buf xb[2] = {x, b}, btx[2] = {q, x};
  mm_params(&p, false, false, false, true);
  report("matmul u8 X[1M,20k] @ f32 B[20k,20], fused", bench_op("matmul", &p, xb, 2, &o1, 7), 20.0, gflop);
  mm_params(&p, true, false, false, true);
  report("matmul f32 Q[1M,20]' @ u8 X[1M,20k], fused", bench_op("matmul", &p, btx, 2, &o2, 7), 20.0, gflop);
  mm_params(&p, false, false, false, false);
  report("matmul u8 X @ f32 B, fused=false (panels + SGEMM)", bench_op("matmul", &p, xb, 2, &o3, 1), 20.0, gflop);
  /* the fused result against the SGEMM path, and rows against the CPU */
  size_t n1 = (size_t)(R * K);
  float *f1 = malloc(n1 * 4), *f3 = malloc(n1 * 4);
  cudaMemcpy(f1, o1.data, n1 * 4, cudaMemcpyDeviceToHost), cudaMemcpy(f3, o3.data, n1 * 4, cudaMemcpyDeviceToHost);
  double num = 0, den = 0;
  for (size_t i = 0; i < n1; i++) num += (f1[i] - f3[i]) * (double)(f1[i] - f3[i]), den += (double)f3[i] * f3[i];
  printf("  fused X@B vs SGEMM path: rel %.2e\n", sqrt(num / den));
  {
    int64_t rows = 2000;
    tsr_buf hx = hbuf(TSR_U8, 2, (int64_t[2]){rows, C}), hb = hbuf(TSR_F32, 2, (int64_t[2]){C, K}), ref;
    tsr_errbuf err;
    cudaMemcpy(hx.data, x.data, hx.nbytes, cudaMemcpyDeviceToHost), cudaMemcpy(hb.data, b.data, hb.nbytes, cudaMemcpyDeviceToHost);
    tsr_buf in[2] = {hx, hb};
    if (cpu_run("matmul", NULL, in, 2, &ref, &err) == 0) {
      num = den = 0;
      for (int64_t i = 0; i < rows * K; i++) {
        double d = f1[i] - ((float *)ref.data)[i];
        num += d * d, den += (double)((float *)ref.data)[i] * ((float *)ref.data)[i];
      }
      printf("  fused X@B, first %lld rows vs CPU: rel %.2e\n", (long long)rows, sqrt(num / den));
      free(ref.data);
    }
    free(hx.data), free(hb.data);
  }
  dfree(&o3);
  mm_params(&p, true, false, false, false);
  report("matmul f32 Q' @ u8 X, fused=false (panels + SGEMM)", bench_op("matmul", &p, btx, 2, &o3, 1), 20.0, gflop);
  size_t n2 = (size_t)(K * C);
  float *g2 = malloc(n2 * 4), *g3 = malloc(n2 * 4);
  cudaMemcpy(g2, o2.data, n2 * 4, cudaMemcpyDeviceToHost), cudaMemcpy(g3, o3.data, n2 * 4, cudaMemcpyDeviceToHost);
  num = den = 0;
  for (size_t i = 0; i < n2; i++) num += (g2[i] - g3[i]) * (double)(g2[i] - g3[i]), den += (double)g3[i] * g3[i];
  printf("  fused Q'X vs SGEMM path: rel %.2e\n", sqrt(num / den));
  dfree(&o3);
  report("pack2bit u8 1M x 20k -> 5 GB", bench_op("pack2bit", NULL, &x, 1, &pk, 3), 25.0, 0);
  tsr_buf pb[2] = {pk, b}, pq[2] = {pk, q};
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "cols", C);
  tsr_params_add_str(&p, "side", "xb", 2);
  report("matmul_2bit xb X[1M,20k] 2-bit @ B[20k,20]", bench_op("matmul_2bit", &p, pb, 2, &o3, 7), 5.0, gflop);
  cudaMemcpy(f3, o3.data, n1 * 4, cudaMemcpyDeviceToHost);
  num = den = 0;
  for (size_t i = 0; i < n1; i++) num += (f1[i] - f3[i]) * (double)(f1[i] - f3[i]), den += (double)f1[i] * f1[i];
  printf("  2-bit X@B vs u8 fused: rel %.2e\n", sqrt(num / den));
  dfree(&o3);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "cols", C);
  tsr_params_add_str(&p, "side", "btx", 3);
  pq[1] = q;
  report("matmul_2bit btx Q[1M,20]' @ X 2-bit", bench_op("matmul_2bit", &p, pq, 2, &o3, 7), 5.0, gflop);
  cudaMemcpy(g3, o3.data, n2 * 4, cudaMemcpyDeviceToHost);
  num = den = 0;
  for (size_t i = 0; i < n2; i++) num += (g2[i] - g3[i]) * (double)(g2[i] - g3[i]), den += (double)g2[i] * g2[i];
  printf("  2-bit Q'X vs u8 fused: rel %.2e\n", sqrt(num / den));
  dfree(&o3);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "cols", C);
  report("unpack2bit 5 GB -> u8 1M x 20k", bench_op("unpack2bit", &p, &pk, 1, &x, 3), 25.0, 0);
  free(f1), free(f3), free(g2), free(g3);
  dfree(&o1), dfree(&o2), dfree(&pk), dfree(&x), dfree(&b), dfree(&q);
  tsr_params_clear(&p);
}

/* matmul_2bit with f32 and f64 B: over a whole 1M x 20k 2-bit X (the
 * f64 result checked against the CPU's f64 on its first rows), and per
 * call at the chunk shapes an SVD graph gives each task. */
static void bench_2bit_out(const char *what, tsr_buf pk, tsr_buf b, int64_t cols, bool btx, int reps)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf o = {0};
  tsr_params_add_int(&p, "cols", cols);
  tsr_params_add_str(&p, "side", btx ? "btx" : "xb", btx ? 3 : 2);
  tsr_buf in[2] = {pk, b};
  double gflop = 2.0 * (double)pk.meta.shape[0] * (double)cols * (double)b.meta.shape[1] / 1e9;
  report(what, bench_op("matmul_2bit", &p, in, 2, &o, reps), (double)pk.nbytes / 1e9, gflop);
  dfree(&o);
  tsr_params_clear(&p);
}

static void bench_genotype_f64(void)
{
  static const int64_t shapes[][2] = {{1000000, 20000}, {20000, 5000}, {100000, 20000}, {200000, 20000}};
  for (int s = 0; s < 4; s++) {
    const int64_t R = shapes[s][0], C = shapes[s][1], K = 20;
    tsr_params p = TSR_PARAMS_INIT;
    tsr_buf x = {0}, pk = {0}, b[2], q[2];
    rparams(&p, 11, "u8", 2, (int64_t[2]){R, C}, (int64_t[2]){R, C}, (int64_t[2]){0, 0});
    tsr_params_add_int(&p, "low", 0);
    tsr_params_add_int(&p, "high", 3);
    bench_op("randint", &p, NULL, 0, &x, 0);
    bench_op("pack2bit", NULL, &x, 1, &pk, 0);
    for (int d = 0; d < 2; d++) {
      const char *dt = d ? "f64" : "f32";
      b[d] = (tsr_buf){0}, q[d] = (tsr_buf){0};
      rparams(&p, 12, dt, 2, (int64_t[2]){C, K}, (int64_t[2]){C, K}, (int64_t[2]){0, 0});
      bench_op("random_normal", &p, NULL, 0, &b[d], 0);
      rparams(&p, 13, dt, 2, (int64_t[2]){R, K}, (int64_t[2]){R, K}, (int64_t[2]){0, 0});
      bench_op("random_normal", &p, NULL, 0, &q[d], 0);
    }
    int reps = R * C > 1000000000 ? 7 : 31;
    for (int d = 0; d < 2; d++) {
      char what[96];
      snprintf(what, sizeof what, "2-bit X[%lld,%lld] @ %s B[.,20]", (long long)R, (long long)C, d ? "f64" : "f32");
      bench_2bit_out(what, pk, b[d], C, false, reps);
      snprintf(what, sizeof what, "%s Q[%lld,20]' @ 2-bit X[.,%lld]", d ? "f64" : "f32", (long long)R, (long long)C);
      bench_2bit_out(what, pk, q[d], C, true, reps);
    }
    if (s == 0) {  /* f64 X@B and Q'X against the CPU's f64 on the first 1000 rows */
      const int64_t rows = 1000;
      tsr_buf hp = hbuf(TSR_U8, 2, (int64_t[2]){rows, pk.meta.shape[1]}), hb = hbuf(TSR_F64, 2, (int64_t[2]){C, K});
      tsr_buf hq = hbuf(TSR_F64, 2, (int64_t[2]){rows, K}), ref, got;
      tsr_errbuf err;
      cudaMemcpy(hp.data, pk.data, hp.nbytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(hb.data, b[1].data, hb.nbytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(hq.data, q[1].data, hq.nbytes, cudaMemcpyDeviceToHost);
      tsr_params_clear(&p);
      tsr_params_add_int(&p, "cols", C);
      tsr_buf in[2] = {hp, hb};
      if (cpu_run("matmul_2bit", &p, in, 2, &ref, &err) == 0 && gpu_run("matmul_2bit", &p, in, 2, &got, &err) == 0) {
        printf("  f64 2-bit X@B, %lld rows: GPU vs CPU f64 rel %.2e\n", (long long)rows, rel_err(&got, &ref));
        free(ref.data), free(got.data);
      }
      tsr_params_add_str(&p, "side", "btx", 3);
      in[1] = hq;
      if (cpu_run("matmul_2bit", &p, in, 2, &ref, &err) == 0 && gpu_run("matmul_2bit", &p, in, 2, &got, &err) == 0) {
        printf("  f64 Q'X, %lld rows: GPU vs CPU f64 rel %.2e\n", (long long)rows, rel_err(&got, &ref));
        free(ref.data), free(got.data);
      }
      free(hp.data), free(hb.data), free(hq.data);
    }
    for (int d = 0; d < 2; d++) dfree(&b[d]), dfree(&q[d]);
    dfree(&x), dfree(&pk);
    tsr_params_clear(&p);
  }
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Per-task cost of the 2-bit products at the chunk shapes an SVD graph
 * gives its tasks: 64 calls back to back on one stream, and spread over
 * four streams (as a GPU worker's four slots run them), per call; and the
 * host's time to enqueue one. The narrow X·B configuration (half the
 * shared memory: two blocks an SM) beside the wide one. */
static void bench_task_costs(void)
{
  enum { CALLS = 64, STREAMS = 4 };
  static const int64_t shapes[][2] = {{20000, 5000}, {100000, 20000}};
  cudaStream_t st[STREAMS];
  tsr_gpu_ctx ctx[STREAMS];
  cudaEvent_t ev[STREAMS + 1];
  for (int i = 0; i < STREAMS; i++) {
    cudaStreamCreate(&st[i]);
    ctx[i] = g_ctx, ctx[i].stream = st[i], ctx[i].pool = st[i];
  }
  for (int i = 0; i <= STREAMS; i++) cudaEventCreate(&ev[i]);
  printf("%-44s %10s %10s %10s\n", "per call (ms)", "1 stream", "4 streams", "host");
  for (int sh = 0; sh < 2; sh++) {
    const int64_t R = shapes[sh][0], C = shapes[sh][1], K = 20;
    tsr_params p = TSR_PARAMS_INIT;
    tsr_buf x = {0}, pk = {0}, out[STREAMS];
    rparams(&p, 11, "u8", 2, (int64_t[2]){R, C}, (int64_t[2]){R, C}, (int64_t[2]){0, 0});
    tsr_params_add_int(&p, "low", 0);
    tsr_params_add_int(&p, "high", 3);
    bench_op("randint", &p, NULL, 0, &x, 0);
    bench_op("pack2bit", NULL, &x, 1, &pk, 0);
    dfree(&x);
    for (int d = 0; d < 2; d++)
      for (int side = 0; side < 2; side++)
        for (int narrow = 0; narrow <= (side == 0); narrow++) {
          const char *dt = d ? "f64" : "f32";
          tsr_buf b = {0};
          int64_t bs[2] = {side ? R : C, K};
          rparams(&p, 12, dt, 2, bs, bs, (int64_t[2]){0, 0});
          bench_op("random_normal", &p, NULL, 0, &b, 0);
          tsr_params_clear(&p);
          tsr_params_add_int(&p, "cols", C);
          tsr_params_add_str(&p, "side", side ? "btx" : "xb", side ? 3 : 2);
          tsr_buf in[2] = {pk, b};
          const tsr_op_def *op = tsr_op_find("matmul_2bit");
          tsr_meta om;
          tsr_errbuf err;
          tsr_meta metas[2] = {pk.meta, b.meta};
          op->infer(&p, metas, 2, &om, &err);
          for (int i = 0; i < STREAMS; i++) out[i] = dalloc(om.dtype, om.ndim, om.shape);
          tsr_cuda_geno_test_narrow(narrow);
          double ms[2] = {0, 0}, host = 0;
          for (int ns = 1, k = 0; ns <= STREAMS; ns *= 4, k++) {
            for (int w = 0; w < 2 * ns; w++) op->cuda(&p, in, 2, &out[w % ns], &ctx[w % ns], &err);  /* warm-up */
            cudaDeviceSynchronize();
            cudaEventRecord(ev[STREAMS], st[0]);
            for (int i = 1; i < ns; i++) cudaStreamWaitEvent(st[i], ev[STREAMS], 0);
            double t0 = now_ms();
            for (int c = 0; c < CALLS; c++) op->cuda(&p, in, 2, &out[c % ns], &ctx[c % ns], &err);
            if (ns == 1) host = (now_ms() - t0) / CALLS;
            for (int i = 1; i < ns; i++) cudaEventRecord(ev[i], st[i]), cudaStreamWaitEvent(st[0], ev[i], 0);
            cudaEventRecord(ev[0], st[0]);
            cudaEventSynchronize(ev[0]);
            float f = 0;
            cudaEventElapsedTime(&f, ev[STREAMS], ev[0]);
            ms[k] = f / CALLS;
          }
          tsr_cuda_geno_test_narrow(false);
          char what[96];
          snprintf(what, sizeof what, "%s %s X[%lld,%lld]%s", side ? "Q'X" : "X@B", dt, (long long)R, (long long)C,
                   narrow ? " narrow" : "");
          printf("%-44s %10.4f %10.4f %10.4f\n", what, ms[0], ms[1], host);
          fflush(stdout);
          for (int i = 0; i < STREAMS; i++) dfree(&out[i]);
          dfree(&b);
        }
    dfree(&pk);
    tsr_params_clear(&p);
  }
  for (int i = 0; i < STREAMS; i++) cudaStreamDestroy(st[i]);
  for (int i = 0; i <= STREAMS; i++) cudaEventDestroy(ev[i]);
}

/* Runs a test unless TSR_TEST_FILTER is set and not part of its name. */

/* ---------- sparse (CSR) ops ---------- */

/* A random CSR chunk of rows x cols with values of dt: about 1 in 8
 * stored, row 0 empty, row 3 dense (longer than a warp), positive counts
 * in 1..20 scaled by 0.37 so log1p and division see varied values. */
static tsr_buf csr_chunk(tsr_dtype dt, int64_t rows, int64_t cols)
{
  int64_t shape[2] = {rows, cols};
  tsr_buf d = hbuf(dt, 2, shape), c;
  for (int64_t i = 0; i < rows * cols; i++) {
    int64_t r = i / cols;
    double v = r != 0 && (r == 3 || rnd() % 8 == 0) ? (double)(1 + rnd() % 20) * 0.37 : 0.0;
    if (dt == TSR_F32) ((float *)d.data)[i] = (float)v;
    else ((double *)d.data)[i] = v;
  }
  tsr_errbuf err;
  if (cpu_run("csr_from_dense", NULL, &d, 1, &c, &err) != 0) memset(&c, 0, sizeof c);
  free(d.data);
  return c;
}

static void csr_shape_param(tsr_params *p, int64_t rows, int64_t cols)
{
  int64_t shape[2] = {rows, cols};
  tsr_params_clear(p);
  tsr_params_add_ints(p, "shape", shape, 2);
}

/* The values of two CSR chunks with equal patterns: at most ulps apart. */
static bool csr_values_within(const tsr_buf *a, const tsr_buf *b, int64_t rows, int64_t nnz, tsr_dtype dt, int64_t ulps)
{
  size_t off = (size_t)(TSR_CSR_HEADER + 8 * (rows + 1) + (4 * nnz + 7) / 8 * 8);
  if (a->nbytes != b->nbytes || memcmp(a->data, b->data, off) != 0) return false;
  int64_t n[1] = {nnz};
  tsr_buf va = {{0}, (char *)a->data + off, 0}, vb = {{0}, (char *)b->data + off, 0};
  va.meta.dtype = vb.meta.dtype = dt, va.meta.ndim = vb.meta.ndim = 1, va.meta.shape[0] = vb.meta.shape[0] = n[0];
  return max_ulp(&va, &vb) <= ulps;
}

static int64_t csr_nnz(const tsr_buf *c)
{
  int64_t nnz;
  memcpy(&nnz, (const char *)c->data + 24, 8);
  return nnz;
}

/* csr_map (none: the same bytes; log1p, expm1: within 2 ulp, CUDA's libm)
 * and csr_normalize_rows (the same bytes), f32 and f64, with in_dtype; and
 * without in_dtype the variant declines (TSR_ENODEV: the host runs it). */
TEST(csr_map_normalize_vs_cpu)
{
  const int64_t rows = 217, cols = 300;
  static const char *const fns[] = {"none", "log1p", "expm1"};
  tsr_params p = TSR_PARAMS_INIT, ps = TSR_PARAMS_INIT;
  tsr_buf c, g;
  tsr_errbuf err;
  for (int f64 = 0; f64 < 2; f64++) {
    tsr_dtype dt = f64 ? TSR_F64 : TSR_F32;
    const char *dn = f64 ? "f64" : "f32";
    tsr_buf x = csr_chunk(dt, rows, cols);
    ASSERT_TRUE(x.data != NULL);
    int64_t nnz = csr_nnz(&x);
    for (int k = 0; k < 3; k++) {
      csr_shape_param(&p, rows, cols);
      tsr_params_add_str(&p, "fn", fns[k], strlen(fns[k]));
      tsr_params_add_float(&p, "factor", k == 2 ? 0.25 : 1.5);
      tsr_params_add_str(&p, "dtype", dn, 3);
      tsr_params_add_str(&p, "in_dtype", dn, 3);
      BOTH("csr_map", &p, &x, 1, &c, &g);
      if (k == 0) ASSERT_SAME(&c, &g);
      else ASSERT_TRUE(csr_values_within(&c, &g, rows, nnz, dt, 2));
      free(c.data), free(g.data);
    }
    /* totals per row (row 0: 0, left as it is) */
    csr_shape_param(&ps, rows, cols);
    tsr_params_add_int(&ps, "axis", 1);
    tsr_buf in[2] = {x, {{0}, NULL, 0}};
    ASSERT_OK(cpu_run("csr_sum", &ps, &x, 1, &in[1], &err));
    csr_shape_param(&p, rows, cols);
    tsr_params_add_float(&p, "target", 1e4);
    tsr_params_add_str(&p, "dtype", dn, 3);
    tsr_params_add_str(&p, "in_dtype", dn, 3);
    BOTH("csr_normalize_rows", &p, in, 2, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data);
    /* without in_dtype the output size is only a bound: declined */
    csr_shape_param(&p, rows, cols);
    tsr_params_add_float(&p, "target", 1e4);
    ASSERT_TRUE(gpu_run("csr_normalize_rows", &p, in, 2, &g, &err) == TSR_ENODEV);
    free(g.data), free(in[1].data), free(x.data);
  }
  tsr_params_clear(&p), tsr_params_clear(&ps);
}

/* csr_sum, every stat and axis on f32 and f64 chunks: the CPU's bytes
 * (each element one thread's sum in the CPU's order). */
TEST(csr_sum_vs_cpu)
{
  const int64_t rows = 301, cols = 129;
  static const char *const stats[] = {"sum", "nnz", "sumsq"};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  tsr_errbuf err;
  for (int f64 = 0; f64 < 2; f64++) {
    tsr_buf x = csr_chunk(f64 ? TSR_F64 : TSR_F32, rows, cols);
    ASSERT_TRUE(x.data != NULL);
    for (int axis = 0; axis < 2; axis++)
      for (int k = 0; k < 3; k++) {
        csr_shape_param(&p, rows, cols);
        tsr_params_add_int(&p, "axis", axis);
        tsr_params_add_str(&p, "stat", stats[k], strlen(stats[k]));
        BOTH("csr_sum", &p, &x, 1, &c, &g);
        ASSERT_SAME(&c, &g);
        free(c.data), free(g.data);
      }
    /* sqdev around the column means */
    csr_shape_param(&p, rows, cols);
    tsr_buf in[2] = {x, {{0}, NULL, 0}};
    ASSERT_OK(cpu_run("csr_sum", &p, &x, 1, &in[1], &err));
    for (int64_t j = 0; j < cols; j++) ((double *)in[1].data)[j] /= (double)rows;
    tsr_params_add_str(&p, "stat", "sqdev", 5);
    BOTH("csr_sum", &p, in, 2, &c, &g);
    ASSERT_SAME(&c, &g);
    free(c.data), free(g.data), free(in[1].data), free(x.data);
  }
  tsr_params_clear(&p);
}

/* csr_matmul on every side, without steps and with (x − μ)/σ: the CPU's
 * bytes. */
TEST(csr_matmul_vs_cpu)
{
  const int64_t rows = 203, cols = 150, k = 7;
  static const char *const sides[] = {"xb", "xtb", "bx", "btx"};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf c, g;
  tsr_buf x = csr_chunk(TSR_F32, rows, cols);
  ASSERT_TRUE(x.data != NULL);
  int64_t vshape[1] = {cols};
  tsr_buf mu = rand_buf(TSR_F64, 1, vshape, 0), sd = rand_buf(TSR_F64, 1, vshape, 0);
  for (int64_t j = 0; j < cols; j++) ((double *)sd.data)[j] = 0.5 + fabs(((double *)sd.data)[j]);
  for (int s = 0; s < 4; s++) {
    int64_t bshape[2];
    if (s == 0) bshape[0] = cols, bshape[1] = k;
    else if (s == 2) bshape[0] = k, bshape[1] = rows;
    else bshape[0] = rows, bshape[1] = k;
    tsr_buf in[4] = {x, rand_buf(TSR_F64, 2, bshape, 0), mu, sd};
    for (int steps = 0; steps < 2; steps++) {
      int64_t codes[2] = {2, 4}, inputs[2] = {2, 3};
      double values[4] = {0, 0, 0, 0};
      csr_shape_param(&p, rows, cols);
      tsr_params_add_str(&p, "side", sides[s], strlen(sides[s]));
      if (steps) {
        tsr_params_add_ints(&p, "steps", codes, 2);
        tsr_params_add_ints(&p, "step_inputs", inputs, 2);
        tsr_params_add_floats(&p, "step_values", values, 4);
      }
      BOTH("csr_matmul", &p, in, steps ? 4 : 2, &c, &g);
      ASSERT_SAME(&c, &g);
      free(c.data), free(g.data);
    }
    free(in[1].data);
  }
  free(mu.data), free(sd.data), free(x.data);
  tsr_params_clear(&p);
}

/* A malformed chunk fails the task after the stream (deferred check), as
 * the CPU op fails it: a column index out of range, and a chunk whose
 * header disagrees with the task's shape. */
TEST(csr_bad_chunk_is_reported)
{
  const int64_t rows = 40, cols = 30;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_buf g;
  tsr_errbuf err;
  tsr_buf x = csr_chunk(TSR_F64, rows, cols);
  ASSERT_TRUE(x.data != NULL && csr_nnz(&x) > 0);
  int32_t *indices = (int32_t *)((char *)x.data + TSR_CSR_HEADER + 8 * (rows + 1));
  indices[0] = (int32_t)cols + 5;
  for (int axis = 0; axis < 2; axis++) {
    csr_shape_param(&p, rows, cols);
    tsr_params_add_int(&p, "axis", axis);
    int rc = gpu_run("csr_sum", &p, &x, 1, &g, &err);
    free(g.data);
    ASSERT_TRUE(rc == TSR_EPROTO && strstr(err.text, "column") != NULL);
  }
  indices[0] = 0;
  csr_shape_param(&p, rows, cols + 1);  /* the header says cols */
  tsr_params_add_str(&p, "side", "xb", 2);
  int64_t bshape[2] = {cols + 1, 3};
  tsr_buf in[2] = {x, rand_buf(TSR_F64, 2, bshape, 0)};
  ASSERT_TRUE(gpu_run("csr_matmul", &p, in, 2, &g, &err) == TSR_EPROTO);
  free(g.data), free(in[1].data), free(x.data);
  tsr_params_clear(&p);
}

#define RUN_IF(name)                                                       \
  do {                                                                     \
    const char *f_ = getenv("TSR_TEST_FILTER");                            \
    if (f_ == NULL || strstr(#name, f_) != NULL) RUN(name);                \
  } while (0)

/* ---------- community detection ---------- */

typedef struct cedge {
  int32_t col;
  float w;
} cedge;

static int cedge_cmp(const void *a, const void *b)
{
  int32_t x = ((const cedge *)a)->col, y = ((const cedge *)b)->col;
  return (x > y) - (x < y);
}

/* A symmetric planted-partition graph of n nodes in nblock blocks (about
 * deg_in neighbours inside the block, deg_out anywhere; weights in
 * [0.1, 1), duplicates summed) as nch CSR f32 row chunks in c[]. */
static void planted_graph(int64_t n, int nblock, int deg_in, int deg_out, int nch, tsr_buf *c)
{
  int64_t m = n * (deg_in + deg_out), *cnt = calloc((size_t)n + 1, sizeof *cnt), *at = calloc((size_t)n + 1, sizeof *at);
  int64_t *ea = malloc((size_t)m * 8), *eb = malloc((size_t)m * 8), q = 0;
  float *ew = malloc((size_t)m * 4);
  for (int64_t v = 0; v < n; v++) {
    int64_t b = v * nblock / n, b0 = (b * n + nblock - 1) / nblock, b1 = ((b + 1) * n + nblock - 1) / nblock;
    for (int j = 0; j < deg_in + deg_out; j++) {
      int64_t u = j < deg_in ? b0 + (int64_t)(rnd() % (uint64_t)(b1 - b0)) : (int64_t)(rnd() % (uint64_t)n);
      if (u == v) continue;
      ea[q] = v, eb[q] = u, ew[q++] = 0.1f + 0.9f * (float)(rnd() % 1000) / 1000.0f;
      cnt[v]++, cnt[u]++;
    }
  }
  int64_t *ptr = malloc((size_t)(n + 1) * 8);
  ptr[0] = 0;
  for (int64_t v = 0; v < n; v++) ptr[v + 1] = ptr[v] + cnt[v], at[v] = ptr[v];
  cedge *e = malloc((size_t)(2 * q + 1) * sizeof *e);
  for (int64_t k = 0; k < q; k++) {
    e[at[ea[k]]++] = (cedge){(int32_t)eb[k], ew[k]};
    e[at[eb[k]]++] = (cedge){(int32_t)ea[k], ew[k]};
  }
  for (int64_t v = 0; v < n; v++) {  /* sort each row, sum duplicates in place */
    qsort(e + ptr[v], (size_t)(ptr[v + 1] - ptr[v]), sizeof *e, cedge_cmp);
    int64_t o = ptr[v];
    for (int64_t k = ptr[v]; k < ptr[v + 1]; k++)
      if (o > ptr[v] && e[o - 1].col == e[k].col) e[o - 1].w += e[k].w;
      else e[o++] = e[k];
    cnt[v] = o - ptr[v];
  }
  for (int ch = 0; ch < nch; ch++) {
    int64_t r0 = n * ch / nch, r1 = n * (ch + 1) / nch, nnz = 0;
    for (int64_t v = r0; v < r1; v++) nnz += cnt[v];
    int64_t bytes = tsr_k_csr_bytes(r1 - r0, nnz, TSR_F32);
    c[ch] = hbuf(TSR_U8, 1, &bytes);
    tsr_k_csr v;
    tsr_k_csr_init(c[ch].data, r1 - r0, n, nnz, TSR_F32, &v);
    int64_t z = 0;
    v.indptr[0] = 0;
    for (int64_t r = r0; r < r1; r++) {
      for (int64_t k = ptr[r]; k < ptr[r] + cnt[r]; k++) v.indices[z] = e[k].col, ((float *)v.values)[z++] = e[k].w;
      v.indptr[r - r0 + 1] = z;
    }
  }
  free(cnt), free(at), free(ea), free(eb), free(ew), free(ptr), free(e);
}

static void community_params(tsr_params *p, const char *method, int64_t n, int64_t seed)
{
  tsr_params_clear(p);
  tsr_params_add_str(p, "method", method, strlen(method));
  tsr_params_add_int(p, "n", n);
  tsr_params_add_int(p, "seed", seed);
}

/* Q of labels on the graph chunks g[0..nch) by the CPU modularity op. */
static double cpu_q(const tsr_buf *g, int nch, const tsr_buf *labels)
{
  tsr_buf in[16], out;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  for (int i = 0; i < nch; i++) in[i] = g[i];
  in[nch] = *labels;
  tsr_params_add_int(&p, "n_graph", nch);
  double q = cpu_run("modularity", &p, in, nch + 1, &out, &err) == 0 ? *(double *)out.data : NAN;
  if (out.data) free(out.data);
  tsr_params_clear(&p);
  return q;
}

/* Labels numbered by decreasing size: sizes never increase with the label. */
static bool by_decreasing_size(const int32_t *l, int64_t n)
{
  int64_t *size = calloc((size_t)n + 1, sizeof *size);
  bool ok = true;
  for (int64_t v = 0; v < n && ok; v++) ok = l[v] >= 0 && l[v] < n, size[ok ? l[v] : 0]++;
  for (int64_t c = 1; c < n && ok; c++) ok = size[c] <= size[c - 1];
  free(size);
  return ok;
}

/* Leiden and Louvain on a planted partition (20k nodes, 3 chunks): the
 * GPU's modularity within 1% of the CPU op's, the same labels twice for
 * one seed, numbered by decreasing size; the modularity op agrees with
 * the CPU's to 1e-9. */
TEST(community_vs_cpu_planted)
{
  enum { N = 20000, NCH = 3 };
  tsr_buf g[NCH + 1];
  planted_graph(N, 12, 12, 4, NCH, g);
  tsr_params p = TSR_PARAMS_INIT;
  const char *methods[2] = {"leiden", "louvain"};
  for (int m = 0; m < 2; m++) {
    tsr_buf c, g1, g2, qo;
    tsr_errbuf err;
    community_params(&p, methods[m], N, 3);
    BOTH("community", &p, g, NCH, &c, &g1);
    ASSERT_OK(gpu_run("community", &p, g, NCH, &g2, &err));
    ASSERT_SAME(&g1, &g2);
    ASSERT_TRUE(by_decreasing_size(g1.data, N));
    double qc = cpu_q(g, NCH, &c), qg = cpu_q(g, NCH, &g1);
    fprintf(stderr, "  %s: cpu Q %.5f, gpu Q %.5f\n", methods[m], qc, qg);
    ASSERT_TRUE(qg >= 0.99 * qc);
    g[NCH] = g1;
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "n_graph", NCH);
    ASSERT_OK(gpu_run("modularity", &p, g, NCH + 1, &qo, &err));
    ASSERT_NEAR(*(double *)qo.data, qg, 1e-9);
    free(c.data), free(g1.data), free(g2.data), free(qo.data);
  }
  tsr_params_clear(&p);
  for (int i = 0; i < NCH; i++) free(g[i].data);
}

/* Two 5-cliques joined by one weak edge, as 2 chunks: both methods give
 * exactly the CPU op's labels (0 for nodes 0..4, 1 for 5..9). */
TEST(community_two_cliques_exact)
{
  enum { N = 10 };
  tsr_buf g[2], c, gl;
  for (int ch = 0; ch < 2; ch++) {
    int64_t nnz = 5 * 4 + 1, bytes = tsr_k_csr_bytes(5, nnz, TSR_F32);
    g[ch] = hbuf(TSR_U8, 1, &bytes);
    tsr_k_csr v;
    tsr_k_csr_init(g[ch].data, 5, N, nnz, TSR_F32, &v);
    int64_t z = 0;
    v.indptr[0] = 0;
    for (int r = 0; r < 5; r++) {
      int row = 5 * ch + r;
      for (int col = 0; col < N; col++) {
        bool same = col / 5 == row / 5 && col != row, bridge = (row == 4 && col == 5) || (row == 5 && col == 4);
        if (same || bridge) v.indices[z] = col, ((float *)v.values)[z++] = same ? 1.0f : 0.1f;
      }
      v.indptr[r + 1] = z;
    }
  }
  tsr_params p = TSR_PARAMS_INIT;
  const char *methods[2] = {"leiden", "louvain"};
  for (int m = 0; m < 2; m++) {
    community_params(&p, methods[m], N, 0);
    BOTH("community", &p, g, 2, &c, &gl);
    ASSERT_SAME(&c, &gl);
    for (int v = 0; v < N; v++) ASSERT_EQ(((int32_t *)gl.data)[v], v / 5);
    free(c.data), free(gl.data);
  }
  /* a negative weight fails the task after the stream, naming the problem */
  tsr_k_csr v;
  tsr_errbuf err;
  ASSERT_OK(tsr_k_csr_view(&g[1], true, &v, &err));
  ((float *)v.values)[3] = -1.0f;
  community_params(&p, "leiden", N, 0);
  ASSERT_EQ(gpu_run("community", &p, g, 2, &gl, &err), TSR_EPROTO);
  ASSERT_CONTAINS(err.text, "negative or not finite");
  tsr_params_clear(&p);
  free(g[0].data), free(g[1].data);
}

/* ---------- umap_spectral ---------- */

/* A rows x cols 4-neighbour grid graph (weights 0.5 + ((u + v) % 7) / 10,
 * symmetric; λ2 != λ3 for rows != cols) as nch CSR f32 row chunks. */
static void spec_grid(int rows, int cols, int nch, tsr_buf *c)
{
  int64_t n = (int64_t)rows * cols;
  for (int ch = 0; ch < nch; ch++) {
    int64_t r0 = n * ch / nch, r1 = n * (ch + 1) / nch, nnz = 0;
    for (int pass = 0; pass < 2; pass++) {
      tsr_k_csr v;
      if (pass == 1) {
        int64_t bytes = tsr_k_csr_bytes(r1 - r0, nnz, TSR_F32);
        c[ch] = hbuf(TSR_U8, 1, &bytes);
        tsr_k_csr_init(c[ch].data, r1 - r0, n, nnz, TSR_F32, &v);
        v.indptr[0] = 0;
      }
      int64_t z = 0;
      for (int64_t u = r0; u < r1; u++) {
        int r = (int)(u / cols), q = (int)(u % cols);
        int64_t nb[4] = {r > 0 ? u - cols : -1, q > 0 ? u - 1 : -1, q + 1 < cols ? u + 1 : -1, r + 1 < rows ? u + cols : -1};
        for (int k = 0; k < 4; k++)
          if (nb[k] >= 0) {
            if (pass == 1) v.indices[z] = (int32_t)nb[k], ((float *)v.values)[z] = 0.5f + (float)((u + nb[k]) % 7) / 10.0f;
            z++;
          }
        if (pass == 1) v.indptr[u - r0 + 1] = z;
      }
      nnz = z;
    }
  }
}

/* umap_spectral on a 40 x 30 grid (n = 1200, 3 chunks), seeds 0 and 1:
 * each of the GPU's two vectors within 5e-4 (2-norm; unit vectors; another
 * seed differs by ~3e-3) of
 * the CPU op's, signs included (both are the positive-diagonal QR
 * iterates; tests/unit/test_umap_spectral_par.c checks the scheme); the
 * same bytes twice; a 100-vertex graph gives TSR_ENODEV (CPU). */
TEST(umap_spectral_vs_cpu)
{
  enum { R = 40, C = 30, NCH = 3 };
  tsr_buf g[NCH];
  spec_grid(R, C, NCH, g);
  for (int64_t seed = 0; seed < 2; seed++) {
    tsr_params p = TSR_PARAMS_INIT;
    tsr_buf c, g1, g2;
    tsr_errbuf err;
    tsr_params_add_int(&p, "n", R * C);
    tsr_params_add_int(&p, "seed", seed);
    ASSERT_OK(cpu_run("umap_spectral", &p, g, NCH, &c, &err));
    ASSERT_OK(gpu_run("umap_spectral", &p, g, NCH, &g1, &err));
    ASSERT_OK(gpu_run("umap_spectral", &p, g, NCH, &g2, &err));
    ASSERT_SAME(&g1, &g2);
    const float *a = c.data, *b = g1.data;
    for (int k = 0; k < 2; k++) {
      double d = 0;
      for (int64_t i = 0; i < R * C; i++) d += pow((double)a[2 * i + k] - b[2 * i + k], 2);
      fprintf(stderr, "  seed %d vector %d: |gpu - cpu| = %.2e\n", (int)seed, k, sqrt(d));
      ASSERT_TRUE(sqrt(d) < 5e-4);
    }
    free(c.data), free(g1.data), free(g2.data);
    tsr_params_clear(&p);
  }
  for (int i = 0; i < NCH; i++) free(g[i].data);
  tsr_buf s[1], o;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  spec_grid(10, 10, 1, s);
  tsr_params_add_int(&p, "n", 100);
  ASSERT_EQ(gpu_run("umap_spectral", &p, s, 1, &o, &err), TSR_ENODEV);
  free(o.data), free(s[0].data);
  tsr_params_clear(&p);
}

int main(int argc, char **argv)
{
  tsr_ops_init(false);
  if (argc > 1 && strcmp(argv[1], "--cpu") == 0) {
    RUN(pack2bit_cpu_format);
    RUN(matmul_2bit_cpu_matches_unpacked);
    return kit_summary();
  }
  int rc = gpu_open();
  if (rc != 0) return rc;
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
    const char *what = argc > 2 ? argv[2] : "all";
    if (strcmp(what, "all") == 0 || strcmp(what, "rates") == 0) bench_rates();
    if (strcmp(what, "all") == 0 || strcmp(what, "svd") == 0) bench_svd();
    if (strcmp(what, "all") == 0 || strcmp(what, "genotype") == 0) bench_genotype();
    if (strcmp(what, "all") == 0 || strcmp(what, "genotype64") == 0) bench_genotype_f64();
    if (strcmp(what, "all") == 0 || strcmp(what, "tasks") == 0) bench_task_costs();
    if (strcmp(what, "all") == 0 || strcmp(what, "knn") == 0) bench_knn();
    return 0;
  }
  RUN_IF(random_uniform_and_int_bit_identical);
  RUN_IF(random_normal_within_2_ulp);
  RUN_IF(full_all_dtypes);
  RUN_IF(nary_and_div_bit_identical);
  RUN_IF(scale_astype_bmul_signs_bit_identical);
  RUN_IF(sum_axes_and_total);
  RUN_IF(layout_ops_bit_identical);
  RUN_IF(matmul_float);
  RUN_IF(matmul_genotype_fused);
  RUN_IF(matmul_genotype_narrow_config);
  RUN_IF(matmul_integer_generic);
  RUN_IF(matmul_random_all_sides);
  RUN_IF(qr_against_cpu_and_definition);
  RUN_IF(svd_all_algorithms);
  RUN_IF(solver_failure_is_reported_after_the_stream);
  RUN_IF(pack_unpack_gpu_matches_cpu);
  RUN_IF(matmul_2bit_gpu_vs_cpu);
  RUN_IF(broadcast_bit_identical);
  RUN_IF(missing_values_sum_count_and_astype);
  RUN_IF(randint_packed_bit_identical);
  RUN_IF(matmul_chain_gpu_vs_cpu);
  RUN_IF(matmul_chain_float_x_gpu_vs_cpu);
  RUN_IF(csr_map_normalize_vs_cpu);
  RUN_IF(csr_sum_vs_cpu);
  RUN_IF(csr_matmul_vs_cpu);
  RUN_IF(csr_bad_chunk_is_reported);
  RUN_IF(knn_tile_bit_identical);
  RUN_IF(knn_merge_bit_identical);
  RUN_IF(knn_bad_input_and_cpu_fallback);
  RUN_IF(community_vs_cpu_planted);
  RUN_IF(community_two_cliques_exact);
  RUN_IF(umap_spectral_vs_cpu);
  return kit_summary();
}
