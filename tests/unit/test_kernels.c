/* Unit tests of kernels/: Philox known answers, chunking-independent random
 * arrays against a slow per-element reference, every op's results and
 * error messages, .npy files, and the registry itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "kit.h"
#include "cpu/ops.h"
#include "philox.h"

/* ---------- helpers ---------- */

static tsr_meta meta_of(tsr_dtype dtype, int ndim, const int64_t *shape)
{
  tsr_meta m;
  memset(&m, 0, sizeof m);
  m.dtype = dtype;
  m.ndim = ndim;
  for (int d = 0; d < ndim; d++) m.shape[d] = shape[d];
  return m;
}

/* A buf over caller-owned data. */
static tsr_buf buf_of(tsr_dtype dtype, int ndim, const int64_t *shape, void *data)
{
  tsr_buf b;
  b.meta = meta_of(dtype, ndim, shape);
  b.data = data;
  b.nbytes = (size_t)tsr_meta_nbytes(&b.meta);
  return b;
}

/* Runs op by name; returns the rc and leaves the message in err. */
static int run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  const tsr_op_def *op = tsr_op_find(name);
  if (op == NULL) return tsr_fail(err, TSR_EUNKNOWNOP, "no op %s", name);
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  return tsr_op_run_cpu(op, p, in, n_in, out, err);
}

/* ---------- Philox known answers (Random123's kat_vectors) ---------- */

static int kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1, const uint32_t want[4])
{
  uint32_t ctr[4] = {c0, c1, c2, c3};
  tsr_philox4x32_10(ctr, k0, k1);
  return memcmp(ctr, want, sizeof ctr) == 0;
}

TEST(philox_known_answers)
{
  static const uint32_t zero[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  static const uint32_t ones[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
  static const uint32_t pi[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  ASSERT_TRUE(kat(0, 0, 0, 0, 0, 0, zero));
  ASSERT_TRUE(kat(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, ones));
  ASSERT_TRUE(kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, pi));
  /* The word stream: seed 0, block 0 is the first vector. */
  ASSERT_EQ(tsr_philox_word(0, 0), 0x6627e8d5u);
  ASSERT_EQ(tsr_philox_word(0, 3), 0x9b00dbd8u);
}

/* Every SIMD path this CPU has gives philox.h's words, including across a
 * carry into the counter's high word. */
TEST(philox_simd_paths)
{
  static const tsr_k_isa isas[] = {TSR_K_ISA_BEST, TSR_K_ISA_AVX2, TSR_K_ISA_AVX512};
  static const uint64_t starts[] = {0, 5, 0xFFFFFFF0ull, 0x1FFFFFFFDull};
  uint32_t got[4 * 100], want[4];
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
      size_t done = tsr_k_philox_blocks_isa(isas[i], 0xdeadbeefcafef00dull, starts[s], 100, got);
      ASSERT_TRUE(done <= 100);
      for (size_t b = 0; b < done; b++) {
        tsr_philox_block(0xdeadbeefcafef00dull, starts[s] + b, want);
        if (memcmp(want, got + 4 * b, sizeof want) != 0) KIT_FAIL_("isa %d start %llx block %zu", (int)isas[i],
                                                                  (unsigned long long)starts[s], b);
      }
    }
  fprintf(stderr, "  SIMD paths here: avx2 %s, avx512 %s\n",
          tsr_k_philox_blocks_isa(TSR_K_ISA_AVX2, 0, 0, 100, got) ? "yes" : "no",
          tsr_k_philox_blocks_isa(TSR_K_ISA_AVX512, 0, 0, 100, got) ? "yes" : "no");
}

/* The value map of philox_values_isa, the scalar way (philox.h): block
 * b's values into out[0 .. per). */
static void values_ref(const tsr_k_vals *v, uint64_t b, void *out)
{
  uint32_t w[4];
  tsr_philox_block(v->seed, b, w);
  for (int i = 0; i < 4; i++) {
    int64_t x = tsr_randint_map(w[i], v->low, v->range);
    switch (v->kind) {
    case TSR_K_VALS_WORDS: ((uint32_t *)out)[i] = w[i]; break;
    case TSR_K_VALS_U01_F64: if (i < 2) ((double *)out)[i] = tsr_u01_f64(w[2 * i], w[2 * i + 1]); break;
    case TSR_K_VALS_U01_F32: ((float *)out)[i] = tsr_u01_f32(w[i]); break;
    case TSR_K_VALS_INT_U8: ((uint8_t *)out)[i] = (uint8_t)x; break;
    case TSR_K_VALS_INT_I32: ((int32_t *)out)[i] = (int32_t)x; break;
    case TSR_K_VALS_INT_I64: ((int64_t *)out)[i] = x; break;
    case TSR_K_VALS_INT_F64: ((double *)out)[i] = (double)x; break;
    }
  }
}

/* Every value map on every path this CPU has, for counts that leave every
 * remainder of the SIMD groups, across the counter's 32-bit carry: the
 * values of philox.h, and nothing written past the blocks done. */
TEST(philox_values_paths)
{
  static const tsr_k_isa isas[] = {TSR_K_ISA_BEST, TSR_K_ISA_SCALAR, TSR_K_ISA_AVX2, TSR_K_ISA_AVX512};
  static const uint64_t starts[] = {0, 5, 0xFFFFFFF0ull, 0x1FFFFFFFDull};
  static const size_t counts[] = {0, 1, 7, 8, 9, 16, 23, 24, 25, 47, 61};
  static const tsr_k_vals vals[] = {
    {TSR_K_VALS_WORDS, 7, 0, 0},
    {TSR_K_VALS_U01_F64, 0xdeadbeefcafef00dull, 0, 0},
    {TSR_K_VALS_U01_F32, 3, 0, 0},
    {TSR_K_VALS_INT_U8, 11, 0, 3},
    {TSR_K_VALS_INT_U8, 11, 3, 250},
    {TSR_K_VALS_INT_I32, 12, -5, 16},
    {TSR_K_VALS_INT_I32, 12, INT32_MIN, (uint64_t)1 << 32},
    {TSR_K_VALS_INT_I64, 13, -1000, 6000},
    {TSR_K_VALS_INT_F64, 14, 0, 3},
    {TSR_K_VALS_INT_F64, 14, INT32_MIN, (uint64_t)1 << 32},
    {TSR_K_VALS_INT_F64, 14, 7, (uint64_t)1 << 32}, /* values beyond int32: no SIMD path */
  };
  static const size_t sizes[] = {16, 16, 16, 4, 4, 16, 16, 32, 32, 32, 32};
  unsigned char got[32 * 64], want[32];
  size_t full = 0;
  for (size_t c = 0; c < sizeof vals / sizeof vals[0]; c++)
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
      for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
          size_t n = counts[k], bs = sizes[c];
          memset(got, 0xAB, sizeof got);
          size_t done = tsr_k_philox_values_isa(isas[i], &vals[c], starts[s], n, got);
          ASSERT_TRUE(done <= n);
          full += done == n;
          for (size_t b = 0; b < done; b++) {
            values_ref(&vals[c], starts[s] + b, want);
            if (memcmp(want, got + b * bs, bs) != 0)
              KIT_FAIL_("kind %d isa %d start %llx n %zu block %zu", (int)vals[c].kind, (int)isas[i],
                        (unsigned long long)starts[s], n, b);
          }
          for (size_t at = done * bs; at < sizeof got; at++)
            if (got[at] != 0xAB)
              KIT_FAIL_("kind %d isa %d n %zu: byte %zu written", (int)vals[c].kind, (int)isas[i], n, at);
        }
  fprintf(stderr, "  runs that did every block: %zu\n", full);
}

/* Transposed f64 tiles: out[c·ldo + r] is element L0 + r·stride + c, for
 * starts at every place in a block, row counts around the 8 lanes, column
 * counts around the 3-block steps; nothing written outside the tile. */
TEST(philox_tile_t)
{
  static const tsr_k_vals vals[] = {
    {TSR_K_VALS_U01_F64, 0x123456789ull, 0, 0},
    {TSR_K_VALS_INT_F64, 5, 0, 3},
    {TSR_K_VALS_INT_F64, 5, -3000000000LL, 4000000000ULL},
    {TSR_K_VALS_INT_F64, 5, 7, (uint64_t)1 << 32},
  };
  static const uint64_t L0s[] = {0, 1, 2, 3, 0x1FFFFFFF9ull};
  static const size_t rows_of[] = {1, 7, 8, 9, 17}, cols_of[] = {1, 2, 5, 12, 13, 31};
  enum { LDO = 20, CAP = 31 * LDO };
  double got[CAP];
  bool any = false;
  for (size_t c = 0; c < sizeof vals / sizeof vals[0]; c++)
    for (size_t l = 0; l < sizeof L0s / sizeof L0s[0]; l++)
      for (size_t ri = 0; ri < sizeof rows_of / sizeof rows_of[0]; ri++)
        for (size_t ci = 0; ci < sizeof cols_of / sizeof cols_of[0]; ci++) {
          int per = vals[c].kind == TSR_K_VALS_U01_F64 ? 2 : 4;
          size_t rows = rows_of[ri], cols = cols_of[ci];
          uint64_t stride = 4 * 37;
          for (size_t i = 0; i < CAP; i++) got[i] = -1.0;
          if (!tsr_k_philox_tile_t_isa(TSR_K_ISA_BEST, &vals[c], L0s[l], stride, rows, cols, got, LDO)) continue;
          any = true;
          for (size_t i = 0; i < CAP; i++) {
            size_t col = i / LDO, row = i % LDO;
            double want = -1.0;
            if (col < cols && row < rows) {
              uint64_t L = L0s[l] + row * stride + col;
              double v[4];
              values_ref(&vals[c], L / (uint64_t)per, v);
              want = v[L % (uint64_t)per];
            }
            if (memcmp(&got[i], &want, sizeof want) != 0)
              KIT_FAIL_("kind %d L0 %llu rows %zu cols %zu: element (%zu, %zu)", (int)vals[c].kind,
                        (unsigned long long)L0s[l], rows, cols, row, col);
          }
        }
  /* Rows that start at different places in a block have no SIMD path. */
  ASSERT_TRUE(!tsr_k_philox_tile_t_isa(TSR_K_ISA_BEST, &vals[0], 0, 3, 2, 4, got, LDO));
  ASSERT_TRUE(!tsr_k_philox_tile_t_isa(TSR_K_ISA_SCALAR, &vals[0], 0, 4, 2, 4, got, LDO));
  fprintf(stderr, "  transposed tiles here: %s\n", any ? "yes" : "no");
}

/* ---------- slow reference of docs/random.md ----------
 * Written from the spec with its own Philox, one word at a time, so it
 * shares nothing with the kernels but the KAT-checked constants. */

static uint32_t ref_word(uint64_t seed, uint64_t w)
{
  uint32_t c[4] = {(uint32_t)(w / 4), (uint32_t)((w / 4) >> 32), 0, 0};
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0, c[1] = (uint32_t)p1, c[2] = n2, c[3] = (uint32_t)p0;
    k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
  }
  return c[w % 4];
}

static double ref_f64(uint64_t seed, uint64_t w_lo)
{
  uint64_t bits = (uint64_t)ref_word(seed, w_lo + 1) << 32 | ref_word(seed, w_lo);
  return (double)(bits >> 11) * 0x1p-53;
}

typedef enum { REF_UNIFORM, REF_NORMAL, REF_RANDINT } ref_kind;

/* Element L of the array, stored as dtype into out. */
static void ref_element(ref_kind kind, tsr_dtype dt, uint64_t seed, int64_t low, int64_t high, uint64_t L, void *out)
{
  if (kind == REF_UNIFORM && dt == TSR_F32) {
    *(float *)out = (float)(ref_word(seed, L) >> 8) * (1.0f / 16777216.0f);
  } else if (kind == REF_UNIFORM) {
    *(double *)out = ref_f64(seed, 2 * L);
  } else if (kind == REF_NORMAL) {
    double u1 = ref_f64(seed, 4 * L), u2 = ref_f64(seed, 4 * L + 2);
    double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * 3.14159265358979323846 * u2);
    if (dt == TSR_F32) *(float *)out = (float)z;
    else *(double *)out = z;
  } else {
    uint64_t r = (uint64_t)(high - low);
    int64_t v = low + (int64_t)(((uint64_t)ref_word(seed, L) * r) >> 32);
    if (dt == TSR_U8) *(uint8_t *)out = (uint8_t)v;
    else if (dt == TSR_I32) *(int32_t *)out = (int32_t)v;
    else *(int64_t *)out = v;
  }
}

/* ---------- random arrays: chunking independence ---------- */

typedef struct rand_case {
  const char *op;
  ref_kind kind;
  tsr_dtype dtype;
  int64_t low, high;
} rand_case;

static const rand_case rand_cases[] = {
  {"random_uniform", REF_UNIFORM, TSR_F32, 0, 0}, {"random_uniform", REF_UNIFORM, TSR_F64, 0, 0},
  {"random_normal", REF_NORMAL, TSR_F32, 0, 0},   {"random_normal", REF_NORMAL, TSR_F64, 0, 0},
  {"randint", REF_RANDINT, TSR_U8, 0, 256},       {"randint", REF_RANDINT, TSR_U8, 3, 10},
  {"randint", REF_RANDINT, TSR_I64, -1000, 5000}, {"randint", REF_RANDINT, TSR_I32, -2147483648LL, 2147483648LL},
  {"randint", REF_RANDINT, TSR_I32, -5, 6},
  {"randint", REF_RANDINT, TSR_I64, 7, 7 + 4294967296},
};

static const uint64_t rand_seed = 0x123456789abcdef0ull;

/* Params of one chunk of case c (global shape = shape when global NULL). */
static void rand_params(tsr_params *p, const rand_case *c, int nd, const int64_t *shape, const int64_t *global,
                        const int64_t *offset)
{
  tsr_params_clear(p);
  tsr_params_add_int(p, "seed", (int64_t)rand_seed);
  tsr_params_add_str(p, "dtype", tsr_dtype_name(c->dtype), strlen(tsr_dtype_name(c->dtype)));
  if (c->kind == REF_RANDINT) {
    tsr_params_add_int(p, "low", c->low);
    tsr_params_add_int(p, "high", c->high);
  }
  tsr_params_add_ints(p, "shape", shape, (size_t)nd);
  if (global) tsr_params_add_ints(p, "global_shape", global, (size_t)nd);
  if (offset) tsr_params_add_ints(p, "offset", offset, (size_t)nd);
}

/* Whole [R, C] array vs the reference, then 3x2 irregular chunks vs the
 * whole array's bytes. Returns a description of the first mismatch. */
static const char *rand_case_check(const rand_case *c, int64_t R, int64_t C)
{
  static char why[TSR_ERRMSG_LEN + 128];
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf whole, part;
  int64_t shape[2] = {R, C};
  size_t es = tsr_dtype_size(c->dtype);
  rand_params(&p, c, 2, shape, NULL, NULL);
  if (run(c->op, &p, NULL, 0, &whole, &err) != 0) {
    snprintf(why, sizeof why, "%s whole: %s", c->op, err.text);
    tsr_params_clear(&p);
    return why;
  }
  const char *bad = NULL;
  for (int64_t L = 0; L < R * C && !bad; L++) {
    char want[8];
    ref_element(c->kind, c->dtype, rand_seed, c->low, c->high, (uint64_t)L, want);
    if (memcmp(want, (char *)whole.data + L * (int64_t)es, es) != 0) {
      snprintf(why, sizeof why, "%s %s: element %lld differs from the reference", c->op,
               tsr_dtype_name(c->dtype), (long long)L);
      bad = why;
    }
  }
  int64_t r_at[4] = {0, R / 3 + 1, 2 * (R / 3 + 1), R}, c_at[3] = {0, (C + 1) / 2, C};
  for (int i = 0; i < 3 && !bad; i++)
    for (int j = 0; j < 2 && !bad; j++) {
      int64_t cs[2] = {r_at[i + 1] - r_at[i], c_at[j + 1] - c_at[j]}, off[2] = {r_at[i], c_at[j]};
      rand_params(&p, c, 2, cs, shape, off);
      if (run(c->op, &p, NULL, 0, &part, &err) != 0) {
        snprintf(why, sizeof why, "%s chunk: %s", c->op, err.text);
        bad = why;
        break;
      }
      for (int64_t r = 0; r < cs[0] && !bad; r++)
        if (memcmp((char *)part.data + r * cs[1] * (int64_t)es,
                   (char *)whole.data + ((off[0] + r) * C + off[1]) * (int64_t)es, (size_t)(cs[1] * (int64_t)es))) {
          snprintf(why, sizeof why, "%s %s: chunk (%d,%d) row %lld differs", c->op, tsr_dtype_name(c->dtype), i, j,
                   (long long)r);
          bad = why;
        }
      free(part.data);
    }
  free(whole.data);
  tsr_params_clear(&p);
  return bad;
}

TEST(random_chunking_independent)
{
  for (size_t i = 0; i < sizeof rand_cases / sizeof rand_cases[0]; i++) {
    const char *bad = rand_case_check(&rand_cases[i], 7, 1501);
    if (bad) KIT_FAIL_("%s", bad);
    bad = rand_case_check(&rand_cases[i], 5, 3);
    if (bad) KIT_FAIL_("%s (small)", bad);
  }
}

/* Chunks far into a huge array: counters beyond 32 bits (block 2^32 is
 * word 2^34 — f32 element 2^34, f64 element 2^33, normal element 2^32). */
TEST(random_far_offsets)
{
  int64_t global[1] = {(int64_t)1 << 40};
  for (size_t i = 0; i < sizeof rand_cases / sizeof rand_cases[0]; i++) {
    const rand_case *c = &rand_cases[i];
    tsr_params p = TSR_PARAMS_INIT;
    tsr_errbuf err;
    tsr_buf out;
    int per = c->kind == REF_NORMAL ? 1 : (c->kind == REF_UNIFORM && c->dtype == TSR_F64) ? 2 : 4;
    int64_t off[1] = {((int64_t)1 << 34) / per - 37}, shape[1] = {301};
    size_t es = tsr_dtype_size(c->dtype);
    rand_params(&p, c, 1, shape, global, off);
    ASSERT_OK(run(c->op, &p, NULL, 0, &out, &err));
    for (int64_t k = 0; k < shape[0]; k++) {
      char want[8];
      ref_element(c->kind, c->dtype, rand_seed, c->low, c->high, (uint64_t)(off[0] + k), want);
      if (memcmp(want, (char *)out.data + k * (int64_t)es, es) != 0)
        KIT_FAIL_("%s %s element %lld", c->op, tsr_dtype_name(c->dtype), (long long)(off[0] + k));
    }
    free(out.data);
    tsr_params_clear(&p);
  }
}

/* 3-D chunks — partial in every dim, whole in the trailing ones (one run
 * of consecutive L), whole in all — and a 0-d array follow the same
 * L = row-major index rule. */
TEST(random_nd_and_scalar)
{
  static const int64_t global[3] = {4, 5, 6};
  static const int64_t shapes[4][3] = {{2, 3, 4}, {2, 3, 6}, {3, 5, 6}, {4, 5, 6}};
  static const int64_t offs[4][3] = {{1, 2, 1}, {1, 2, 0}, {1, 0, 0}, {0, 0, 0}};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  for (size_t c_i = 0; c_i < sizeof rand_cases / sizeof rand_cases[0]; c_i++)
    for (int t = 0; t < 4; t++) {
      const rand_case *c = &rand_cases[c_i];
      const int64_t *shape = shapes[t], *off = offs[t];
      size_t es = tsr_dtype_size(c->dtype);
      rand_params(&p, c, 3, shape, global, off);
      ASSERT_OK(run(c->op, &p, NULL, 0, &out, &err));
      for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++)
          for (int64_t k = 0; k < shape[2]; k++) {
            char want[8];
            uint64_t L = (uint64_t)(((off[0] + i) * 5 + off[1] + j) * 6 + off[2] + k);
            ref_element(c->kind, c->dtype, rand_seed, c->low, c->high, L, want);
            ASSERT_TRUE(memcmp((char *)out.data + ((i * shape[1] + j) * shape[2] + k) * (int64_t)es, want, es) == 0);
          }
      free(out.data);
    }
  const rand_case *c = &rand_cases[1];
  rand_params(&p, c, 0, NULL, NULL, NULL);
  ASSERT_OK(run(c->op, &p, NULL, 0, &out, &err));
  ASSERT_EQ(out.meta.ndim, 0);
  double want;
  ref_element(c->kind, c->dtype, rand_seed, 0, 0, 0, &want);
  ASSERT_TRUE(*(double *)out.data == want);
  free(out.data);
  tsr_params_clear(&p);
}

/* ---------- elementwise ---------- */

/* Runs a 2-input op on n-element 1-D arrays of dtype; out owned by caller. */
static int run2(const char *op, tsr_dtype dt, int64_t n, void *a, void *b, tsr_buf *out, tsr_errbuf *err)
{
  tsr_buf in[2] = {buf_of(dt, 1, &n, a), buf_of(dt, 1, &n, b)};
  return run(op, NULL, in, 2, out, err);
}

TEST(add_nary_and_wrap)
{
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[1] = {3};
  double a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, c[3] = {100, 200, 300};
  tsr_buf in[3] = {buf_of(TSR_F64, 1, shape, a), buf_of(TSR_F64, 1, shape, b), buf_of(TSR_F64, 1, shape, c)};
  ASSERT_OK(run("add", NULL, in, 3, &out, &err));
  ASSERT_TRUE(((double *)out.data)[2] == 333.0);
  free(out.data);
  ASSERT_OK(run("mul", NULL, in, 3, &out, &err));
  ASSERT_TRUE(((double *)out.data)[1] == 8000.0);
  free(out.data);
  int32_t x[3] = {INT32_MAX, -5, 7}, y[3] = {1, 5, -9};
  ASSERT_OK(run2("add", TSR_I32, 3, x, y, &out, &err));
  ASSERT_EQ(((int32_t *)out.data)[0], INT32_MIN);
  ASSERT_EQ(((int32_t *)out.data)[1], 0);
  ASSERT_EQ(((int32_t *)out.data)[2], -2);
  free(out.data);
  uint8_t u[3] = {250, 3, 16}, v[3] = {10, 5, 16};
  ASSERT_OK(run2("add", TSR_U8, 3, u, v, &out, &err));
  ASSERT_EQ(((uint8_t *)out.data)[0], 4);
  free(out.data);
  ASSERT_OK(run2("sub", TSR_U8, 3, v, u, &out, &err));
  ASSERT_EQ(((uint8_t *)out.data)[1], 2);
  ASSERT_EQ(((uint8_t *)out.data)[0], 16);
  free(out.data);
  ASSERT_OK(run2("mul", TSR_U8, 3, u, v, &out, &err));
  ASSERT_EQ(((uint8_t *)out.data)[2], 0);  /* 256 wraps */
  free(out.data);
  int64_t p[2] = {INT64_MAX, INT64_MIN}, q[2] = {2, -1};
  ASSERT_OK(run2("mul", TSR_I64, 2, p, q, &out, &err));
  ASSERT_EQ(((int64_t *)out.data)[0], -2);
  ASSERT_EQ(((int64_t *)out.data)[1], INT64_MIN);
  free(out.data);
  ASSERT_OK(run2("sub", TSR_I64, 2, p, q, &out, &err));
  ASSERT_EQ(((int64_t *)out.data)[0], INT64_MAX - 2);
  ASSERT_EQ(((int64_t *)out.data)[1], INT64_MIN + 1);
  free(out.data);
  float f[2] = {1.5f, -2.0f}, g[2] = {0.25f, 4.0f};
  ASSERT_OK(run2("sub", TSR_F32, 2, f, g, &out, &err));
  ASSERT_TRUE(((float *)out.data)[0] == 1.25f && ((float *)out.data)[1] == -6.0f);
  free(out.data);
}

/* Large enough to cross the n-ary tile size. */
TEST(add_large_nary)
{
  enum { N = 10000 };
  tsr_errbuf err;
  tsr_buf out;
  int64_t n = N;
  int64_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
  for (int i = 0; i < N; i++) a[i] = i, b[i] = 2 * i, c[i] = -7;
  tsr_buf in[3] = {buf_of(TSR_I64, 1, &n, a), buf_of(TSR_I64, 1, &n, b), buf_of(TSR_I64, 1, &n, c)};
  int rc = run("add", NULL, in, 3, &out, &err);
  free(a), free(b), free(c);
  ASSERT_OK(rc);
  for (int i = 0; i < N; i++) ASSERT_EQ(((int64_t *)out.data)[i], 3 * i - 7);
  free(out.data);
}

TEST(div_all_dtypes)
{
  tsr_errbuf err;
  tsr_buf out;
  int32_t a[3] = {7, -7, INT32_MIN}, b[3] = {2, 2, -1};
  ASSERT_OK(run2("div", TSR_I32, 3, a, b, &out, &err));
  ASSERT_EQ(((int32_t *)out.data)[0], 3);
  ASSERT_EQ(((int32_t *)out.data)[1], -3);  /* truncates toward zero */
  ASSERT_EQ(((int32_t *)out.data)[2], INT32_MIN);
  free(out.data);
  int64_t c[2] = {INT64_MIN, 9}, d[2] = {-1, -4};
  ASSERT_OK(run2("div", TSR_I64, 2, c, d, &out, &err));
  ASSERT_EQ(((int64_t *)out.data)[0], INT64_MIN);
  ASSERT_EQ(((int64_t *)out.data)[1], -2);
  free(out.data);
  uint8_t u[2] = {200, 9}, v[2] = {7, 0};
  ASSERT_EQ(run2("div", TSR_U8, 2, u, v, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "div: integer division by zero");
  ASSERT_CONTAINS(err.text, "element 1");
  int64_t z[2] = {0, 0};
  ASSERT_EQ(run2("div", TSR_I64, 2, c, z, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "div:");
  double x[3] = {1, -1, 0}, y[3] = {0, 0, 0};
  ASSERT_OK(run2("div", TSR_F64, 3, x, y, &out, &err));
  ASSERT_TRUE(isinf(((double *)out.data)[0]) && ((double *)out.data)[0] > 0);
  ASSERT_TRUE(isinf(((double *)out.data)[1]) && ((double *)out.data)[1] < 0);
  ASSERT_TRUE(isnan(((double *)out.data)[2]));
  free(out.data);
  float f[1] = {1}, g[1] = {4};
  ASSERT_OK(run2("div", TSR_F32, 1, f, g, &out, &err));
  ASSERT_TRUE(((float *)out.data)[0] == 0.25f);
  free(out.data);
}

static int run1(const char *op, const tsr_params *p, tsr_dtype dt, int64_t n, void *a, tsr_buf *out, tsr_errbuf *err)
{
  tsr_buf in = buf_of(dt, 1, &n, a);
  return run(op, p, &in, 1, out, err);
}

static void set_dtype(tsr_params *p, const char *dtype)
{
  tsr_params_clear(p);
  tsr_params_add_str(p, "dtype", dtype, strlen(dtype));
}

TEST(astype_conversions)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  double x[7] = {300.0, -5.0, NAN, 3.9, -0.9, 1e300, -2.5};
  set_dtype(&p, "u8");
  ASSERT_OK(run1("astype", &p, TSR_F64, 7, x, &out, &err));
  uint8_t want_u8[7] = {255, 0, 0, 3, 0, 255, 0};
  ASSERT_TRUE(memcmp(out.data, want_u8, 7) == 0);
  ASSERT_EQ(out.meta.dtype, TSR_U8);
  free(out.data);
  set_dtype(&p, "i32");
  ASSERT_OK(run1("astype", &p, TSR_F64, 7, x, &out, &err));
  int32_t want_i32[7] = {300, -5, 0, 3, 0, INT32_MAX, -2};
  ASSERT_TRUE(memcmp(out.data, want_i32, sizeof want_i32) == 0);
  free(out.data);
  set_dtype(&p, "i64");
  double big[2] = {-1e300, 9.3e18};
  ASSERT_OK(run1("astype", &p, TSR_F64, 2, big, &out, &err));
  ASSERT_EQ(((int64_t *)out.data)[0], INT64_MIN);
  ASSERT_EQ(((int64_t *)out.data)[1], INT64_MAX);
  free(out.data);
  int64_t ints[3] = {257, -1, ((int64_t)1 << 40) + 3};
  set_dtype(&p, "u8");
  ASSERT_OK(run1("astype", &p, TSR_I64, 3, ints, &out, &err));
  ASSERT_EQ(((uint8_t *)out.data)[0], 1);
  ASSERT_EQ(((uint8_t *)out.data)[1], 255);
  ASSERT_EQ(((uint8_t *)out.data)[2], 3);
  free(out.data);
  set_dtype(&p, "i32");
  ASSERT_OK(run1("astype", &p, TSR_I64, 3, ints, &out, &err));
  ASSERT_EQ(((int32_t *)out.data)[2], 3);
  ASSERT_EQ(((int32_t *)out.data)[1], -1);
  free(out.data);
  set_dtype(&p, "f32");
  ASSERT_OK(run1("astype", &p, TSR_I64, 3, ints, &out, &err));
  ASSERT_TRUE(((float *)out.data)[0] == 257.0f);
  free(out.data);
  uint8_t u[2] = {0, 255};
  set_dtype(&p, "f64");
  ASSERT_OK(run1("astype", &p, TSR_U8, 2, u, &out, &err));
  ASSERT_TRUE(((double *)out.data)[1] == 255.0);
  free(out.data);
  ASSERT_OK(run1("astype", &p, TSR_F64, 7, x, &out, &err));  /* same dtype: a copy */
  ASSERT_TRUE(((double *)out.data)[3] == 3.9);
  free(out.data);
  set_dtype(&p, "f16");
  ASSERT_EQ(run1("astype", &p, TSR_F64, 7, x, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "astype: unknown dtype 'f16'");
  tsr_params_clear(&p);
  ASSERT_EQ(run1("astype", &p, TSR_F64, 7, x, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "astype: missing parameter 'dtype'");
}

TEST(scale_and_full)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  double x[2] = {1.5, -2};
  tsr_params_add_float(&p, "factor", 2.0);
  tsr_params_add_float(&p, "offset", 1.0);
  ASSERT_OK(run1("scale", &p, TSR_F64, 2, x, &out, &err));
  ASSERT_TRUE(((double *)out.data)[0] == 4.0 && ((double *)out.data)[1] == -3.0);
  free(out.data);
  uint8_t u[2] = {100, 200};
  ASSERT_OK(run1("scale", &p, TSR_U8, 2, u, &out, &err));
  ASSERT_EQ(((uint8_t *)out.data)[0], 201);
  ASSERT_EQ(((uint8_t *)out.data)[1], 255);  /* clamped like astype */
  free(out.data);
  tsr_params_clear(&p);
  ASSERT_EQ(run1("scale", &p, TSR_F64, 2, x, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "scale: missing parameter 'factor'");

  int64_t shape[2] = {2, 3};
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_str(&p, "dtype", "i64", 3);
  tsr_params_add_int(&p, "value", INT64_MAX - 1);
  ASSERT_OK(run("full", &p, NULL, 0, &out, &err));
  ASSERT_EQ(out.meta.ndim, 2);
  ASSERT_EQ(((int64_t *)out.data)[5], INT64_MAX - 1);
  free(out.data);
  tsr_params_clear(&p);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_str(&p, "dtype", "u8", 2);
  tsr_params_add_int(&p, "value", 300);
  ASSERT_EQ(run("full", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "full: value 300 does not fit u8");
  tsr_params_clear(&p);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_float(&p, "value", 0.5);
  ASSERT_OK(run("full", &p, NULL, 0, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_F64);
  ASSERT_TRUE(((double *)out.data)[4] == 0.5);
  free(out.data);
  tsr_params_clear(&p);
}

/* ---------- sum ---------- */

/* Naive sum of a [A, B, C] f64-valued array (values i*0.5 - 3) over axis. */
static double naive3(const int64_t *shape, int axis, int64_t o, int64_t j)
{
  double s = 0;
  for (int64_t i0 = 0; i0 < shape[0]; i0++)
    for (int64_t i1 = 0; i1 < shape[1]; i1++)
      for (int64_t i2 = 0; i2 < shape[2]; i2++) {
        int64_t keep[3] = {i0, i1, i2}, rest[3], k = 0;
        for (int d = 0; d < 3; d++)
          if (d != axis) rest[k++] = keep[d];
        if (axis >= 0 && (rest[0] != o || rest[1] != j)) continue;
        s += (double)((i0 * shape[1] + i1) * shape[2] + i2) * 0.5 - 3;
      }
  return s;
}

TEST(sum_axes)
{
  int64_t shape[3] = {3, 5, 1100}, count = 3 * 5 * 1100;
  double *x = malloc((size_t)count * sizeof *x);
  for (int64_t i = 0; i < count; i++) x[i] = (double)i * 0.5 - 3;
  tsr_buf in = buf_of(TSR_F64, 3, shape, x);
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  for (int axis = 0; axis < 3; axis++) {
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "axis", axis);
    ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
    ASSERT_EQ(out.meta.ndim, 2);
    int64_t rest[2], k = 0;
    for (int d = 0; d < 3; d++)
      if (d != axis) rest[k++] = shape[d];
    ASSERT_EQ(out.meta.shape[0], rest[0]);
    ASSERT_EQ(out.meta.shape[1], rest[1]);
    for (int64_t o = 0; o < rest[0]; o += 2)
      for (int64_t j = 0; j < rest[1]; j += 97)
        ASSERT_NEAR(((double *)out.data)[o * rest[1] + j], naive3(shape, axis, o, j), 1e-12);
    free(out.data);
  }
  tsr_params_clear(&p);
  ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.ndim, 0);
  ASSERT_EQ(out.meta.dtype, TSR_F64);
  ASSERT_NEAR(*(double *)out.data, naive3(shape, -1, 0, 0), 1e-12);
  free(out.data);
  tsr_params_add_int(&p, "axis", 3);
  ASSERT_EQ(run("sum", &p, &in, 1, &out, &err), TSR_EINVAL);
  free(x);
  tsr_params_clear(&p);
  ASSERT_CONTAINS(err.text, "sum: axis 3 is out of range for 3-d input");
}

TEST(sum_dtypes)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[2] = {2, 3};
  uint8_t u[6] = {255, 255, 255, 1, 2, 3};
  tsr_buf in = buf_of(TSR_U8, 2, shape, u);
  ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_I64);
  ASSERT_EQ(*(int64_t *)out.data, 771);
  free(out.data);
  tsr_params_add_int(&p, "axis", 1);
  ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.ndim, 1);
  ASSERT_EQ(((int64_t *)out.data)[0], 765);
  ASSERT_EQ(((int64_t *)out.data)[1], 6);
  free(out.data);
  int32_t i32[6] = {INT32_MAX, INT32_MAX, 1, -1, -2, -3};
  in = buf_of(TSR_I32, 2, shape, i32);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "axis", 0);
  ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
  ASSERT_EQ(((int64_t *)out.data)[0], (int64_t)INT32_MAX - 1);
  ASSERT_EQ(((int64_t *)out.data)[1], (int64_t)INT32_MAX - 2);
  free(out.data);
  /* f32 keeps f32 but accumulates in double: 1e8 + 1 + 1 ... stays exact. */
  float f[6] = {1e8f, 1, 1, 1, 1, -1e8f};
  in = buf_of(TSR_F32, 2, shape, f);
  tsr_params_clear(&p);
  ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_F32);
  ASSERT_TRUE(*(float *)out.data == 4.0f);
  free(out.data);
  double s = 2.5;
  in = buf_of(TSR_F64, 0, NULL, &s);
  ASSERT_OK(run("sum", &p, &in, 1, &out, &err));
  ASSERT_TRUE(*(double *)out.data == 2.5);
  free(out.data);
  tsr_params_add_int(&p, "axis", 0);
  ASSERT_EQ(run("sum", &p, &in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "0-d");
  tsr_params_clear(&p);
}

/* ---------- matmul ---------- */

/* C = op(A) op(B) naively; A is stored ar x ac, B br x bc. */
static void naive_mm(const double *A, int64_t ar, int64_t ac, bool ta, const double *B, int64_t br, int64_t bc,
                     bool tb, double *C)
{
  int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  (void)br;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t l = 0; l < k; l++) s += (ta ? A[l * ac + i] : A[i * ac + l]) * (tb ? B[j * bc + l] : B[l * bc + j]);
      C[i * n + j] = s;
    }
}

TEST(matmul_against_naive)
{
  enum { M = 37, K = 53, N = 29 };
  double *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b), *want = malloc(M * N * sizeof *want);
  for (int i = 0; i < M * K; i++) a[i] = sin(i * 0.37) + 0.1;
  for (int i = 0; i < K * N; i++) b[i] = cos(i * 0.11) - 0.2;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N};
    tsr_buf in[2] = {buf_of(TSR_F64, 2, sa, a), buf_of(TSR_F64, 2, sb, b)};
    tsr_params_clear(&p);
    tsr_params_add_bool(&p, "trans_a", ta);
    tsr_params_add_bool(&p, "trans_b", tb);
    ASSERT_OK(run("matmul", &p, in, 2, &out, &err));
    ASSERT_EQ(out.meta.shape[0], M);
    ASSERT_EQ(out.meta.shape[1], N);
    naive_mm(a, sa[0], sa[1], ta, b, sb[0], sb[1], tb, want);
    for (int i = 0; i < M * N; i++) ASSERT_NEAR(((double *)out.data)[i], want[i], 1e-12);
    free(out.data);
  }
  /* f32 */
  float fa[6] = {1, 2, 3, 4, 5, 6}, fb[6] = {1, 0, 0, 1, 1, 1};
  int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  tsr_buf fin[2] = {buf_of(TSR_F32, 2, s23, fa), buf_of(TSR_F32, 2, s32, fb)};
  tsr_params_clear(&p);
  ASSERT_OK(run("matmul", &p, fin, 2, &out, &err));
  float fwant[4] = {4, 5, 10, 11};
  ASSERT_TRUE(memcmp(out.data, fwant, sizeof fwant) == 0);
  free(out.data);
  /* k = 0 gives zeros */
  int64_t s20[2] = {2, 0}, s02[2] = {0, 2};
  tsr_buf zin[2] = {buf_of(TSR_F64, 2, s20, a), buf_of(TSR_F64, 2, s02, b)};
  ASSERT_OK(run("matmul", &p, zin, 2, &out, &err));
  ASSERT_TRUE(((double *)out.data)[3] == 0.0);
  free(out.data);
  free(a), free(b), free(want);
}

TEST(matmul_errors)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  double d[20] = {0};
  float f[20] = {0};
  int64_t s34[2] = {3, 4}, s52[2] = {5, 2}, s42[2] = {4, 2}, s4[1] = {4};
  tsr_buf in[2] = {buf_of(TSR_F64, 2, s34, d), buf_of(TSR_F64, 2, s52, d)};
  ASSERT_EQ(run("matmul", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "matmul: inner dimensions differ: f64[3,4] @ f64[5,2]");
  in[1] = buf_of(TSR_F32, 2, s42, f);
  ASSERT_EQ(run("matmul", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "f64[3,4] @ f32[4,2]");
  in[1] = buf_of(TSR_F64, 1, s4, d);
  ASSERT_EQ(run("matmul", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "2-D");
  ASSERT_EQ(run("matmul", &p, in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "matmul: takes 2 inputs, got 1");
  tsr_params_add_str(&p, "trans_a", "yes", 3);
  in[1] = buf_of(TSR_F64, 2, s42, d);
  ASSERT_EQ(run("matmul", &p, in, 2, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "matmul: parameter 'trans_a' must be a boolean");
  tsr_params_clear(&p);
}

/* ---------- .npy ---------- */

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  return path;
}

/* A hand-made .npy: version 1 or 2, the dict as given (padded), data. */
static void write_raw_npy(const char *path, int version, const char *dict, const void *data, size_t len)
{
  FILE *f = fopen(path, "wb");
  size_t pre = version == 1 ? 10 : 12, dl = strlen(dict), total = pre + dl + 1;
  size_t hl = dl + 1 + (64 - total % 64) % 64;
  unsigned char head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)version, 0,
                            (unsigned char)hl, (unsigned char)(hl >> 8), 0, 0};
  fwrite(head, 1, pre, f);
  fwrite(dict, 1, dl, f);
  for (size_t i = dl + 1; i < hl; i++) fputc(' ', f);
  fputc('\n', f);
  if (len) fwrite(data, 1, len, f);
  fclose(f);
}

static void path_params(tsr_params *p, const char *path)
{
  tsr_params_clear(p);
  tsr_params_add_str(p, "path", path, strlen(path));
}

TEST(npy_round_trip)
{
  static const tsr_dtype dtypes[] = {TSR_U8, TSR_I32, TSR_I64, TSR_F32, TSR_F64};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out, back;
  int64_t shape[3] = {4, 5, 6};
  unsigned char data[4 * 5 * 6 * 8];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 1);
  for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
    tsr_buf in = buf_of(dtypes[t], 3, shape, data);
    path_params(&p, tmp_path("a.npy"));
    ASSERT_OK(run("save_npy", &p, &in, 1, &out, &err));
    ASSERT_EQ(out.meta.dtype, TSR_I64);
    ASSERT_EQ(out.meta.ndim, 0);
    int64_t written = *(int64_t *)out.data;
    free(out.data);
    FILE *f = fopen(tmp_path("a.npy"), "rb");
    ASSERT_TRUE(f != NULL);
    fseek(f, 0, SEEK_END);
    ASSERT_EQ(ftell(f), written);
    fclose(f);
    ASSERT_OK(run("load_npy", &p, NULL, 0, &back, &err));
    ASSERT_TRUE(tsr_meta_equal(&back.meta, &in.meta));
    ASSERT_TRUE(memcmp(back.data, data, in.nbytes) == 0);
    free(back.data);
    /* A slice: rows 1..2, cols 2..4, all of the last dim; then a run that
     * is not whole in the last dim either. */
    int64_t off[3] = {1, 2, 0}, sl[3] = {2, 3, 6}, off2[3] = {3, 0, 1}, sl2[3] = {1, 5, 4};
    for (int k = 0; k < 2; k++) {
      const int64_t *o = k ? off2 : off, *s = k ? sl2 : sl;
      path_params(&p, tmp_path("a.npy"));
      tsr_params_add_ints(&p, "offset", o, 3);
      tsr_params_add_ints(&p, "shape", s, 3);
      ASSERT_OK(run("load_npy", &p, NULL, 0, &back, &err));
      size_t es = tsr_dtype_size(dtypes[t]);
      for (int64_t i = 0; i < s[0]; i++)
        for (int64_t j = 0; j < s[1]; j++)
          for (int64_t l = 0; l < s[2]; l++) {
            int64_t src = ((o[0] + i) * 5 + o[1] + j) * 6 + o[2] + l, dst = (i * s[1] + j) * s[2] + l;
            ASSERT_TRUE(memcmp((char *)back.data + dst * (int64_t)es, data + src * (int64_t)es, es) == 0);
          }
      free(back.data);
    }
  }
  /* offset without shape: the rest of the array */
  path_params(&p, tmp_path("a.npy"));
  int64_t off[3] = {3, 1, 5};
  tsr_params_add_ints(&p, "offset", off, 3);
  ASSERT_OK(run("load_npy", &p, NULL, 0, &back, &err));
  ASSERT_EQ(back.meta.shape[0], 1);
  ASSERT_EQ(back.meta.shape[1], 4);
  ASSERT_EQ(back.meta.shape[2], 1);
  free(back.data);
  tsr_params_clear(&p);
}

TEST(npy_versions_and_scalars)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  double d[3] = {1.5, 2.5, 3.5};
  write_raw_npy(tmp_path("v2.npy"), 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", d, sizeof d);
  path_params(&p, tmp_path("v2.npy"));
  ASSERT_OK(run("load_npy", &p, NULL, 0, &out, &err));
  ASSERT_EQ(out.meta.ndim, 1);
  ASSERT_TRUE(((double *)out.data)[2] == 3.5);
  free(out.data);
  uint8_t u = 200;
  write_raw_npy(tmp_path("u1.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", &u, 1);
  path_params(&p, tmp_path("u1.npy"));
  ASSERT_OK(run("load_npy", &p, NULL, 0, &out, &err));
  ASSERT_EQ(out.meta.ndim, 0);
  ASSERT_EQ(out.meta.dtype, TSR_U8);
  ASSERT_EQ(*(uint8_t *)out.data, 200);
  free(out.data);
  tsr_params_clear(&p);
}

TEST(npy_errors)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  double d[6] = {0};
  path_params(&p, tmp_path("missing.npy"));
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "load_npy:");
  ASSERT_CONTAINS(err.text, "missing.npy");
  ASSERT_CONTAINS(err.text, "No such file or directory");
  write_raw_npy(tmp_path("fortran.npy"), 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", d, sizeof d);
  path_params(&p, tmp_path("fortran.npy"));
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "fortran.npy");
  ASSERT_CONTAINS(err.text, "Fortran");
  write_raw_npy(tmp_path("big.npy"), 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }", d, sizeof d);
  path_params(&p, tmp_path("big.npy"));
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "big.npy");
  ASSERT_CONTAINS(err.text, "'>f8'");
  write_raw_npy(tmp_path("c16.npy"), 1, "{'descr': '<c16', 'fortran_order': False, 'shape': (3,), }", d, sizeof d);
  path_params(&p, tmp_path("c16.npy"));
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "'<c16'");
  write_raw_npy(tmp_path("short.npy"), 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4), }", d, sizeof d);
  path_params(&p, tmp_path("short.npy"));
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "truncated");
  write_raw_npy(tmp_path("ok.npy"), 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", d, sizeof d);
  path_params(&p, tmp_path("ok.npy"));
  int64_t off[2] = {1, 1}, sh[2] = {1, 3};
  tsr_params_add_ints(&p, "offset", off, 2);
  tsr_params_add_ints(&p, "shape", sh, 2);
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "load_npy: slice [1,3] at offset [1,1] exceeds");
  path_params(&p, tmp_path("ok.npy"));
  int64_t gs[2] = {2, 4};
  tsr_params_add_ints(&p, "global_shape", gs, 2);
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "holds f64[2,3] but the graph expects f64[2,4] (did the file change?)");
  path_params(&p, tmp_path("ok.npy"));
  tsr_params_add_str(&p, "dtype", "f32", 3);
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "but the graph expects f32[2,3]");
  path_params(&p, tmp_path("ok.npy"));
  gs[1] = 3;
  tsr_params_add_ints(&p, "global_shape", gs, 2);
  tsr_params_add_str(&p, "dtype", "f64", 3);
  ASSERT_OK(run("load_npy", &p, NULL, 0, &out, &err));
  free(out.data);
  path_params(&p, tmp_path("ok.npy"));
  tsr_params_add_ints(&p, "offset", off, 1);
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "dimensions");
  tsr_params_clear(&p);
  ASSERT_EQ(run("load_npy", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "load_npy: missing parameter 'path'");
  int64_t s2[1] = {2};
  tsr_buf in = buf_of(TSR_F64, 1, s2, d);
  path_params(&p, tmp_path("no/such/dir/x.npy"));
  ASSERT_EQ(run("save_npy", &p, &in, 1, &out, &err), TSR_EIO);
  ASSERT_CONTAINS(err.text, "save_npy: cannot create");
  ASSERT_CONTAINS(err.text, "No such file or directory");
  tsr_params_clear(&p);
}

/* ---------- errors common to many ops ---------- */

TEST(shape_and_count_errors)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  double d[15] = {0};
  int64_t s34[2] = {3, 4}, s35[2] = {3, 5};
  tsr_buf in[3] = {buf_of(TSR_F64, 2, s35, d), buf_of(TSR_F64, 2, s34, d), buf_of(TSR_F64, 2, s35, d)};
  ASSERT_EQ(run("add", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_STREQ(err.text, "add: input 1 is f64[3,4] but input 0 is f64[3,5]");
  in[1] = buf_of(TSR_I64, 2, s35, d);
  ASSERT_EQ(run("mul", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "mul: input 1 is i64[3,5] but input 0 is f64[3,5]");
  ASSERT_EQ(run("add", &p, in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "add: takes at least 2 inputs, got 1");
  in[1] = in[0];
  ASSERT_EQ(run("sub", &p, in, 3, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "sub: takes 2 inputs, got 3");
  ASSERT_EQ(run("random_uniform", &p, in, 1, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "random_uniform: takes 0 inputs, got 1");
  /* bytes that do not match the meta */
  in[0].nbytes = 8;
  ASSERT_EQ(run("add", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "add: input 0 holds 8 bytes but f64[3,5] needs 120");
  tsr_params_clear(&p);
}

TEST(random_param_errors)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[2] = {3, 4}, global[2] = {3, 5}, off[2] = {0, 2};
  tsr_params_add_ints(&p, "shape", shape, 2);
  ASSERT_EQ(run("random_uniform", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "random_uniform: missing parameter 'seed'");
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "global_shape", global, 2);
  tsr_params_add_ints(&p, "offset", off, 2);
  ASSERT_EQ(run("random_normal", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_STREQ(err.text, "random_normal: chunk [3,4] at offset [0,2] exceeds global_shape [3,5]");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_ints(&p, "global_shape", global, 1);
  ASSERT_EQ(run("random_uniform", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "'global_shape' [3] has 1 dimensions but 'shape' has 2");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_str(&p, "dtype", "i32", 3);
  ASSERT_EQ(run("random_uniform", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "random_uniform: dtype must be f32 or f64, not i32");
  tsr_params_clear(&p);
  int64_t neg[2] = {3, -1};
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", neg, 2);
  ASSERT_EQ(run("random_uniform", &p, NULL, 0, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "random_uniform: 'shape' [3,-1] has a negative entry");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_int(&p, "low", 5);
  tsr_params_add_int(&p, "high", 3);
  ASSERT_EQ(run("randint", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_STREQ(err.text, "randint: high (3) must be greater than low (5)");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_int(&p, "low", 0);
  tsr_params_add_int(&p, "high", 257);
  tsr_params_add_str(&p, "dtype", "u8", 2);
  ASSERT_EQ(run("randint", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "randint: values in [0, 257) do not fit u8 (0..255)");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_int(&p, "low", -1);
  tsr_params_add_int(&p, "high", ((int64_t)1 << 32));
  ASSERT_EQ(run("randint", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "randint: high - low (4294967297) must be at most 2^32");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "seed", 1);
  tsr_params_add_ints(&p, "shape", shape, 2);
  tsr_params_add_int(&p, "low", 0);
  tsr_params_add_float(&p, "high", 2.5);
  ASSERT_EQ(run("randint", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "randint: parameter 'high' must be an integer");
  tsr_params_clear(&p);
}

/* ---------- the registry ---------- */

TEST(registry_and_test_ops)
{
  static const char *names[] = {"random_uniform", "random_normal", "randint", "full", "add", "mul", "sub", "div",
                                "scale", "astype", "sum", "matmul", "load_npy", "save_npy", "noop",
                                "transpose", "slice", "assemble", "view", "qr", "svd", "bmul", "signs",
                                "matmul_random", "pack2bit", "unpack2bit", "matmul_2bit", "fillnan", "ufunc", "matmul_chain",
                                "blosc_compress", "blosc_decompress", "zarr_read", "zarr_write",
                                "read_bed", "randint_packed", "tiff_read", "tile_stats", "tile_filter", "tile_thumb",
                                "csr_from_dense", "csr_densify", "csr_sum", "csr_map", "csr_normalize_rows",
                                "csr_gather", "mask_from_runs", "clip", "csr_matmul", "values_f64",
                                "counts_synth", "counts_synth_types", "tenx_h5_read", "mtx_read",
                                "knn_tile", "knn_merge", "knn_chain", "knn_finish", "umap_membership", "umap_union", "knn_distances_csr",
                                "community", "modularity", "umap_spectral", "umap_prepare", "umap_layout",
                                "kmeans_partial", "kmeans_combine", "kmeans_pp", "kmeans_centers",
                                "kmeans_init", "kmeans_step", "kmeans_update", "kmeans_labels", "kmeans_loop", "kmeans_model"};
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  tsr_ops_init(false);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    ASSERT_TRUE(tsr_op_find(names[i]) != NULL);
    ASSERT_STREQ(tsr_op_find(names[i])->name, names[i]);
  }
  ASSERT_EQ(tsr_op_count(), sizeof names / sizeof names[0]);
  ASSERT_TRUE(tsr_op_find("crash") == NULL && tsr_op_find("fail") == NULL && tsr_op_find("sleep") == NULL);
  ASSERT_TRUE(tsr_op_find("nope") == NULL);
  ASSERT_TRUE(tsr_op_at(tsr_op_count()) == NULL);
  for (size_t i = 0; i < tsr_op_count(); i++) ASSERT_TRUE(!tsr_op_at(i)->test_only);
  ASSERT_OK(run("noop", &p, NULL, 0, &out, &err));
  ASSERT_EQ(out.meta.dtype, TSR_U8);
  ASSERT_EQ(out.meta.ndim, 1);
  ASSERT_EQ(out.meta.shape[0], 0);
  ASSERT_EQ(out.nbytes, 0);
  free(out.data);

  tsr_ops_init(true);
  tsr_ops_init(true);  /* idempotent */
  ASSERT_EQ(tsr_op_count(), sizeof names / sizeof names[0] + 3);
  ASSERT_TRUE(tsr_op_find("crash") != NULL && tsr_op_find("crash")->test_only);
  tsr_params_add_str(&p, "message", "boom 42", 7);
  ASSERT_EQ(run("fail", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_STREQ(err.text, "boom 42");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "ms", 20);
  uint64_t t0 = tsr_now_ms();
  ASSERT_OK(run("sleep", &p, NULL, 0, &out, &err));
  ASSERT_TRUE(tsr_now_ms() - t0 >= 19);
  ASSERT_EQ(*(int64_t *)out.data, 20);
  ASSERT_EQ(out.meta.ndim, 0);
  free(out.data);
  tsr_params_clear(&p);
  tsr_ops_init(false);
  ASSERT_TRUE(tsr_op_find("sleep") == NULL);
}

/* run_cpu's output is 64-byte aligned, also for odd sizes. */
TEST(output_alignment)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t shape[1] = {13};
  tsr_params_add_ints(&p, "shape", shape, 1);
  tsr_params_add_str(&p, "dtype", "u8", 2);
  tsr_params_add_int(&p, "value", 7);
  ASSERT_OK(run("full", &p, NULL, 0, &out, &err));
  ASSERT_EQ((uintptr_t)out.data % 64, 0);
  ASSERT_EQ(out.nbytes, 13);
  ASSERT_EQ(((uint8_t *)out.data)[12], 7);
  free(out.data);
  tsr_params_clear(&p);
}

static void remove_tmpdir(void)
{
  static const char *files[] = {"a.npy",   "v2.npy",  "u1.npy",    "fortran.npy",
                                "big.npy", "c16.npy", "short.npy", "ok.npy"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(tmp_path(files[i]));
  rmdir(tmpdir);
}

int main(void)
{
  tsr_ops_init(false);
  snprintf(tmpdir, sizeof tmpdir, "%s/tsr-kernels-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(tmpdir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  RUN(philox_known_answers);
  RUN(philox_simd_paths);
  RUN(philox_values_paths);
  RUN(philox_tile_t);
  RUN(random_chunking_independent);
  RUN(random_far_offsets);
  RUN(random_nd_and_scalar);
  RUN(add_nary_and_wrap);
  RUN(add_large_nary);
  RUN(div_all_dtypes);
  RUN(astype_conversions);
  RUN(scale_and_full);
  RUN(sum_axes);
  RUN(sum_dtypes);
  RUN(matmul_against_naive);
  RUN(matmul_errors);
  RUN(npy_round_trip);
  RUN(npy_versions_and_scalars);
  RUN(npy_errors);
  RUN(shape_and_count_errors);
  RUN(random_param_errors);
  RUN(registry_and_test_ops);
  RUN(output_alignment);
  remove_tmpdir();
  return kit_summary();
}
