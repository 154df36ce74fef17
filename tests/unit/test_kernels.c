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

/* A 3-D chunk and a 0-d array follow the same L = row-major index rule. */
TEST(random_nd_and_scalar)
{
  const rand_case *c = &rand_cases[1];
  tsr_params p = TSR_PARAMS_INIT;
  tsr_errbuf err;
  tsr_buf out;
  int64_t global[3] = {4, 5, 6}, shape[3] = {2, 3, 4}, off[3] = {1, 2, 1};
  rand_params(&p, c, 3, shape, global, off);
  ASSERT_OK(run(c->op, &p, NULL, 0, &out, &err));
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++)
      for (int64_t k = 0; k < 4; k++) {
        double want;
        uint64_t L = (uint64_t)(((off[0] + i) * 5 + off[1] + j) * 6 + off[2] + k);
        ref_element(c->kind, c->dtype, rand_seed, 0, 0, L, &want);
        ASSERT_TRUE(((double *)out.data)[(i * 3 + j) * 4 + k] == want);
      }
  free(out.data);
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
  int32_t x[3] = {INT32_MAX, -5, 7}, y[3] = {1, 5, -9};
  tsr_buf iin[2] = {buf_of(TSR_I32, 1, shape, x), buf_of(TSR_I32, 1, shape, y)};
  ASSERT_OK(run("add", NULL, iin, 2, &out, &err));
  ASSERT_EQ(((int32_t *)out.data)[0], INT32_MIN);
  ASSERT_EQ(((int32_t *)out.data)[1], 0);
  ASSERT_EQ(((int32_t *)out.data)[2], -2);
  free(out.data);
}

int main(void)
{
  tsr_ops_init(false);
  RUN(philox_known_answers);
  RUN(philox_simd_paths);
  RUN(random_chunking_independent);
  RUN(random_far_offsets);
  RUN(random_nd_and_scalar);
  RUN(add_nary_and_wrap);
  return kit_summary();
}
