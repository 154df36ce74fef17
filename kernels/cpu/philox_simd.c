/* kernels/cpu/philox_simd.c — Philox4x32-10 eight blocks at a time with
 * AVX-512 (and words only with AVX2), mapped straight to values: f64/f32
 * uniforms and randint integers, per docs/random.md. Chosen at run time from
 * what the CPU supports; the library is still built for baseline x86-64.
 * Same values as philox.h, bit for bit (the unit tests compare every path
 * with the scalar one).
 *
 * AVX-512 layout: lane j of a 512-bit vector holds block b+j's counter word
 * in the low half of a 64-bit lane. vpmuludq multiplies exactly those low
 * halves into full 64-bit products, so a round is two multiplies, two moves
 * of the high halves down and two three-way XORs (vpternlog) for eight
 * blocks; the high halves of lanes carry garbage that no later step reads.
 * Three groups of eight are in flight at once (a round is a 7-cycle chain).
 *
 * Two layouts of the results:
 * - stream order (tsr_k_philox_values_isa): four permutes put the 32 words
 *   in stream order (block b's words 4b..4b+3), where a 64-bit lane is
 *   already an f64 uniform's 64 bits (word 2L+1 << 32 | word 2L), so the
 *   value maps need no more shuffles. A short last group computes eight
 *   blocks and stores only what was asked (masked stores), so AVX-512
 *   always does all n blocks.
 * - transposed tiles (tsr_k_philox_tile_t_isa): the lanes are eight rows of
 *   a 2-D array at the same column, so a lane's words are already values
 *   of one row and a vector is a column of the tile — no ordering at all.
 *
 * On other compilers or CPUs the entry points do nothing and the caller's
 * scalar loop does all the work. */
#include <limits.h>

#include "../philox.h"
#include "ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512dq,avx512bw")))
#define INLINE static inline __attribute__((always_inline))
/* Groups of eight blocks in flight: a round is a chain of multiply, shift
 * and XOR (7 cycles), so one group leaves the vector ports idle; three
 * measured best (four run out of registers). */
#define GROUPS 3
/* -O2 leaves short constant loops rolled, and the Philox state must live
 * in registers. */
#define UNROLL _Pragma("GCC unroll 10")

/* The ten round keys as scalars: the XORs take them as broadcast memory
 * operands, which leaves the registers to the three groups' state. */
typedef struct keys8 {
  uint64_t k0[10], k1[10];
} keys8;

static void keys8_make(uint64_t seed, keys8 *k)
{
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++, k0 += TSR_PHILOX_W0, k1 += TSR_PHILOX_W1) {
    k->k0[r] = k0;
    k->k1[r] = k1;
  }
}

AVX512 INLINE __m512i key(const uint64_t *k, int r)
{
  return _mm512_set1_epi64((int64_t)k[r]);
}

/* A 64-bit lane's high half moved to its low half by a dword shuffle. A
 * round needs two such moves: one is a shuffle (port 5 only), the other a
 * shift (port 0 only), so neither port becomes the bottleneck. */
AVX512 INLINE __m512i high(__m512i x)
{
  return _mm512_shuffle_epi32(x, _MM_PERM_CDAB);
}

/* Philox4x32-10 of G (≤ GROUPS, a constant) groups of eight blocks,
 * block ctr[g] + j in lane j: the result's words 0..3 in c0..c3[g] (low
 * halves of the 64-bit lanes; the high halves are garbage). */
AVX512 INLINE void philox_rounds(int G, const __m512i *ctr, const keys8 *k, __m512i *c0, __m512i *c1, __m512i *c2,
                                 __m512i *c3)
{
  const __m512i m0 = _mm512_set1_epi64(TSR_PHILOX_M0), m1 = _mm512_set1_epi64(TSR_PHILOX_M1);
  UNROLL for (int g = 0; g < G; g++) {  /* round 0 with c2 = c3 = 0: the second product is 0 */
    __m512i p0 = _mm512_mul_epu32(ctr[g], m0);
    c0[g] = _mm512_xor_si512(_mm512_srli_epi64(ctr[g], 32), key(k->k0, 0));
    c1[g] = _mm512_setzero_si512();
    c2[g] = _mm512_xor_si512(high(p0), key(k->k1, 0));
    c3[g] = p0;
  }
  UNROLL for (int r = 1; r < 10; r++)
    UNROLL for (int g = 0; g < G; g++) {
      __m512i q0 = _mm512_mul_epu32(c0[g], m0), q1 = _mm512_mul_epu32(c2[g], m1);
      c0[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(q1, 32), c1[g], key(k->k0, r), 0x96);
      c2[g] = _mm512_ternarylogic_epi64(high(q0), c3[g], key(k->k1, r), 0x96);
      c1[g] = q1;
      c3[g] = q0;
    }
}

/* The low halves of x and y paired into 64-bit lanes: lane j is
 * y_j << 32 | x_j — for (c0, c1) an f64 uniform's 64 bits. */
AVX512 INLINE __m512i pair_lows(__m512i x, __m512i y)
{
  const __m512i lows = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  return _mm512_permutex2var_epi32(x, lows, y);
}

/* G groups of eight consecutive blocks ctr[g] + j: their 32 words each in
 * stream order, wa[g] blocks 0..3 (words 0..15), wb[g] blocks 4..7. */
AVX512 INLINE void philox8(int G, const __m512i *ctr, const keys8 *k, __m512i *wa, __m512i *wb)
{
  __m512i c0[GROUPS], c1[GROUPS], c2[GROUPS], c3[GROUPS];
  philox_rounds(G, ctr, k, c0, c1, c2, c3);
  UNROLL for (int g = 0; g < G; g++) {
    __m512i a = pair_lows(c0[g], c1[g]), d = pair_lows(c2[g], c3[g]);
    wa[g] = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), d);
    wb[g] = _mm512_permutex2var_epi64(a, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), d);
  }
}

/* Mask of the first n (clamped to 0..lanes) of lanes ≤ 16 lanes. */
INLINE uint32_t first(int64_t n, int lanes)
{
  return n <= 0 ? 0 : n >= lanes ? (1u << lanes) - 1 : (1u << n) - 1;
}

/* randint values of 16 stream-order words: low + ((w · range) >> 32), in
 * 32-bit lanes (the caller checked every value fits int32). */
AVX512 INLINE __m512i int_map(__m512i w, __m512i range, __m512i low, bool full)
{
  if (full) return _mm512_add_epi32(w, low);  /* range 2^32: (w · 2^32) >> 32 = w */
  __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(w, range), 32);
  __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(w, 32), range);
  return _mm512_add_epi32(_mm512_mask_blend_epi32(0xAAAA, even, odd), low);
}

/* Stores 16 values (32-bit lanes, stream order) at o, the first n of them. */
AVX512 INLINE void store_int16(tsr_k_vals_kind kind, __m512i v, int64_t n, void *o)
{
  __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
  __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
  switch (kind) {
  case TSR_K_VALS_INT_U8: _mm512_mask_cvtepi32_storeu_epi8(o, (__mmask16)first(n, 16), v); break;
  case TSR_K_VALS_INT_I32: _mm512_mask_storeu_epi32(o, (__mmask16)first(n, 16), v); break;
  case TSR_K_VALS_INT_I64:
    _mm512_mask_storeu_epi64(o, (__mmask8)first(n, 8), lo);
    _mm512_mask_storeu_epi64((int64_t *)o + 8, (__mmask8)first(n - 8, 8), hi);
    break;
  default:
    _mm512_mask_storeu_pd(o, (__mmask8)first(n, 8), _mm512_cvtepi64_pd(lo));
    _mm512_mask_storeu_pd((double *)o + 8, (__mmask8)first(n - 8, 8), _mm512_cvtepi64_pd(hi));
  }
}

/* Stores the 32 words' values of one eight-block group, the first n
 * values (n ≤ 8 blocks' worth). */
AVX512 INLINE void store_group(const tsr_k_vals *v, tsr_k_vals_kind kind, __m512i wa, __m512i wb, int64_t n, void *o)
{
  const __m512d u53 = _mm512_set1_pd(0x1p-53);
  const __m512 u24 = _mm512_set1_ps(0x1p-24f);
  switch (kind) {
  case TSR_K_VALS_WORDS:
    _mm512_mask_storeu_epi32(o, (__mmask16)first(n, 16), wa);
    _mm512_mask_storeu_epi32((uint32_t *)o + 16, (__mmask16)first(n - 16, 16), wb);
    break;
  case TSR_K_VALS_U01_F64:  /* exact: 53-bit integers times a power of 2 */
    _mm512_mask_storeu_pd(o, (__mmask8)first(n, 8), _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(wa, 11)), u53));
    _mm512_mask_storeu_pd((double *)o + 8, (__mmask8)first(n - 8, 8),
                          _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(wb, 11)), u53));
    break;
  case TSR_K_VALS_U01_F32:
    _mm512_mask_storeu_ps(o, (__mmask16)first(n, 16), _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(wa, 8)), u24));
    _mm512_mask_storeu_ps((float *)o + 16, (__mmask16)first(n - 16, 16),
                          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(wb, 8)), u24));
    break;
  default: {
    const __m512i range = _mm512_set1_epi64((int64_t)v->range), low = _mm512_set1_epi32((int32_t)v->low);
    bool full = v->range == (uint64_t)1 << 32;
    size_t es = kind == TSR_K_VALS_INT_U8 ? 1 : kind == TSR_K_VALS_INT_I32 ? 4 : 8;
    store_int16(kind, int_map(wa, range, low, full), n, o);
    store_int16(kind, int_map(wb, range, low, full), n - 16, (char *)o + 16 * es);
  }
  }
}

/* All n blocks from b0, one kind (a constant after inlining, so each kind
 * gets its own loop): GROUPS groups at a time, then single groups, so a
 * short tail costs at most one group of unused blocks. */
AVX512 INLINE void values_loop(const tsr_k_vals *v, tsr_k_vals_kind kind, size_t per, size_t es, uint64_t b0, size_t n,
                               char *out)
{
  keys8 k;
  keys8_make(v->seed, &k);
  __m512i ctr[GROUPS], wa[GROUPS], wb[GROUPS];
  const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  size_t i = 0;
  for (; i + 8 * GROUPS <= n; i += 8 * GROUPS) {
    UNROLL for (int g = 0; g < GROUPS; g++)
      ctr[g] = _mm512_add_epi64(_mm512_set1_epi64((int64_t)(b0 + i + 8 * (size_t)g)), lanes);
    philox8(GROUPS, ctr, &k, wa, wb);
    UNROLL for (int g = 0; g < GROUPS; g++)
      store_group(v, kind, wa[g], wb[g], (int64_t)(8 * per), out + (i + 8 * (size_t)g) * per * es);
  }
  for (; i < n; i += 8) {
    ctr[0] = _mm512_add_epi64(_mm512_set1_epi64((int64_t)(b0 + i)), lanes);
    philox8(1, ctr, &k, wa, wb);
    store_group(v, kind, wa[0], wb[0], (int64_t)((n - i < 8 ? n - i : 8) * per), out + i * per * es);
  }
}

AVX512 static size_t values_avx512(const tsr_k_vals *v, uint64_t b0, size_t n, void *out)
{
  switch (v->kind) {
  case TSR_K_VALS_WORDS: values_loop(v, TSR_K_VALS_WORDS, 4, 4, b0, n, out); break;
  case TSR_K_VALS_U01_F64: values_loop(v, TSR_K_VALS_U01_F64, 2, 8, b0, n, out); break;
  case TSR_K_VALS_U01_F32: values_loop(v, TSR_K_VALS_U01_F32, 4, 4, b0, n, out); break;
  case TSR_K_VALS_INT_U8: values_loop(v, TSR_K_VALS_INT_U8, 4, 1, b0, n, out); break;
  case TSR_K_VALS_INT_I32: values_loop(v, TSR_K_VALS_INT_I32, 4, 4, b0, n, out); break;
  case TSR_K_VALS_INT_I64: values_loop(v, TSR_K_VALS_INT_I64, 4, 8, b0, n, out); break;
  case TSR_K_VALS_INT_F64: values_loop(v, TSR_K_VALS_INT_F64, 4, 8, b0, n, out); break;
  }
  return n;
}

/* f64 values of lanes whose words 0..3 are c[0..3]: U01_F64 gives 2 (the
 * elements of words 0,1 and 2,3), INT_F64 4. */
AVX512 INLINE void f64_values(const tsr_k_vals *v, tsr_k_vals_kind kind, const __m512i *c, __m512d *out)
{
  if (kind == TSR_K_VALS_U01_F64) {
    const __m512d u53 = _mm512_set1_pd(0x1p-53);
    out[0] = _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(pair_lows(c[0], c[1]), 11)), u53);
    out[1] = _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_srli_epi64(pair_lows(c[2], c[3]), 11)), u53);
    return;
  }
  /* 64-bit lanes: low + ((w · range) >> 32) for any int64 low. */
  const __m512i range = _mm512_set1_epi64((int64_t)v->range), low = _mm512_set1_epi64(v->low);
  bool full = v->range == (uint64_t)1 << 32;
  UNROLL for (int e = 0; e < 4; e++) {
    __m512i w = full ? _mm512_and_si512(c[e], _mm512_set1_epi64(0xFFFFFFFF))
                     : _mm512_srli_epi64(_mm512_mul_epu32(c[e], range), 32);
    out[e] = _mm512_cvtepi64_pd(_mm512_add_epi64(w, low));
  }
}

/* G groups of the blocks base + t + g (lane j: row j), their values
 * stored down columns (t+g)·per + e − head, those inside [0, cols). */
AVX512 INLINE void tile_t_step(int G, const tsr_k_vals *v, tsr_k_vals_kind kind, int per, __m512i base, size_t t,
                               const keys8 *k, int64_t head, int64_t cols, __mmask8 rows, double *out, size_t ldo)
{
  __m512i ctr[GROUPS], c[4][GROUPS];
  UNROLL for (int g = 0; g < G; g++) ctr[g] = _mm512_add_epi64(base, _mm512_set1_epi64((int64_t)(t + (size_t)g)));
  philox_rounds(G, ctr, k, c[0], c[1], c[2], c[3]);
  UNROLL for (int g = 0; g < G; g++) {
    __m512i cg[4] = {c[0][g], c[1][g], c[2][g], c[3][g]};
    __m512d vals[4];
    f64_values(v, kind, cg, vals);
    int64_t col0 = (int64_t)(t + (size_t)g) * per - head;
    UNROLL for (int e = 0; e < per; e++)
      if (col0 + e >= 0 && col0 + e < cols) _mm512_mask_storeu_pd(out + (size_t)(col0 + e) * ldo, rows, vals[e]);
  }
}

/* The transposed tile, eight rows (lanes) at a time: a lane walks its
 * row's blocks, GROUPS blocks per step. */
AVX512 INLINE void tile_t_loop(const tsr_k_vals *v, tsr_k_vals_kind kind, int per, uint64_t L0, uint64_t stride,
                               size_t rows, size_t cols, double *out, size_t ldo)
{
  keys8 k;
  keys8_make(v->seed, &k);
  size_t head = (size_t)(L0 % (uint64_t)per), nblocks = (head + cols + (size_t)per - 1) / (size_t)per;
  uint64_t b0 = L0 / (uint64_t)per, bstride = stride / (uint64_t)per;
  const __m512i lanes =
    _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64((int64_t)bstride));
  for (size_t j0 = 0; j0 < rows; j0 += 8) {
    __mmask8 rm = (__mmask8)first((int64_t)(rows - j0), 8);
    __m512i base = _mm512_add_epi64(_mm512_set1_epi64((int64_t)(b0 + j0 * bstride)), lanes);
    size_t t = 0;
    for (; t + GROUPS <= nblocks; t += GROUPS)
      tile_t_step(GROUPS, v, kind, per, base, t, &k, (int64_t)head, (int64_t)cols, rm, out + j0, ldo);
    for (; t < nblocks; t++) tile_t_step(1, v, kind, per, base, t, &k, (int64_t)head, (int64_t)cols, rm, out + j0, ldo);
  }
}

__attribute__((target("avx2"))) static inline void mulhilo8(__m256i a, __m256i m, __m256i *hi, __m256i *lo)
{
  __m256i pe = _mm256_mul_epu32(a, m);
  __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
}

/* AVX2: eight blocks per step, each 32-bit lane one block's counter word;
 * words only (the caller maps them), whole groups of eight only. */
__attribute__((target("avx2"))) static size_t blocks_avx2(uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  const __m256i m0 = _mm256_set1_epi64x(TSR_PHILOX_M0), m1 = _mm256_set1_epi64x(TSR_PHILOX_M1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint32_t lo[8], hi[8];
    for (int j = 0; j < 8; j++) {
      lo[j] = (uint32_t)(b0 + i + (uint64_t)j);
      hi[j] = (uint32_t)((b0 + i + (uint64_t)j) >> 32);
    }
    __m256i c0 = _mm256_loadu_si256((const __m256i *)lo), c1 = _mm256_loadu_si256((const __m256i *)hi);
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, k0 += TSR_PHILOX_W0, k1 += TSR_PHILOX_W1) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(c0, m0, &hi0, &lo0);
      mulhilo8(c2, m1, &hi1, &lo1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
      c1 = lo1;
      c3 = lo0;
    }
    /* 4x4 transposes inside each 128-bit half, then swap halves. */
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i *o = (__m256i *)(out + 4 * i);
    _mm256_storeu_si256(o, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
  return i;
}

static bool has_avx512(void)
{
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw");
}

tsr_k_isa tsr_k_isa_resolve(tsr_k_isa isa)
{
  if (isa == TSR_K_ISA_BEST) return has_avx512() ? TSR_K_ISA_AVX512 : __builtin_cpu_supports("avx2") ? TSR_K_ISA_AVX2
                                                                                                    : TSR_K_ISA_SCALAR;
  if (isa == TSR_K_ISA_AVX512 && !has_avx512()) return TSR_K_ISA_SCALAR;
  if (isa == TSR_K_ISA_AVX2 && !__builtin_cpu_supports("avx2")) return TSR_K_ISA_SCALAR;
  return isa;
}

size_t tsr_k_philox_values_isa(tsr_k_isa isa, const tsr_k_vals *v, uint64_t b0, size_t n, void *out)
{
  isa = tsr_k_isa_resolve(isa);
  bool ints = v->kind == TSR_K_VALS_INT_U8 || v->kind == TSR_K_VALS_INT_I32 || v->kind == TSR_K_VALS_INT_I64 ||
              v->kind == TSR_K_VALS_INT_F64;
  /* 32-bit lane arithmetic: every value low .. low+range-1 must fit int32. */
  if (ints && (v->low < INT32_MIN || v->low + (int64_t)(v->range - 1) > INT32_MAX)) return 0;
  if (isa == TSR_K_ISA_AVX512) return values_avx512(v, b0, n, out);
  if (isa == TSR_K_ISA_AVX2 && v->kind == TSR_K_VALS_WORDS) return blocks_avx2(v->seed, b0, n, out);
  return 0;
}

AVX512 static void tile_t_avx512(const tsr_k_vals *v, uint64_t L0, uint64_t stride, size_t rows, size_t cols,
                                 double *out, size_t ldo)
{
  if (v->kind == TSR_K_VALS_U01_F64) tile_t_loop(v, TSR_K_VALS_U01_F64, 2, L0, stride, rows, cols, out, ldo);
  else tile_t_loop(v, TSR_K_VALS_INT_F64, 4, L0, stride, rows, cols, out, ldo);
}

bool tsr_k_philox_tile_t_isa(tsr_k_isa isa, const tsr_k_vals *v, uint64_t L0, uint64_t stride, size_t rows,
                             size_t cols, double *out, size_t ldo)
{
  int per = v->kind == TSR_K_VALS_U01_F64 ? 2 : v->kind == TSR_K_VALS_INT_F64 ? 4 : 0;
  if (tsr_k_isa_resolve(isa) != TSR_K_ISA_AVX512 || per == 0 || (rows > 1 && stride % (uint64_t)per != 0)) return false;
  tile_t_avx512(v, L0, stride, rows, cols, out, ldo);
  return true;
}

#else

bool tsr_k_philox_tile_t_isa(tsr_k_isa isa, const tsr_k_vals *v, uint64_t L0, uint64_t stride, size_t rows,
                             size_t cols, double *out, size_t ldo)
{
  (void)isa, (void)v, (void)L0, (void)stride, (void)rows, (void)cols, (void)out, (void)ldo;
  return false;
}

tsr_k_isa tsr_k_isa_resolve(tsr_k_isa isa)
{
  (void)isa;
  return TSR_K_ISA_SCALAR;
}

size_t tsr_k_philox_values_isa(tsr_k_isa isa, const tsr_k_vals *v, uint64_t b0, size_t n, void *out)
{
  (void)isa, (void)v, (void)b0, (void)n, (void)out;
  return 0;
}

#endif

size_t tsr_k_philox_blocks_isa(tsr_k_isa isa, uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  tsr_k_vals v = {TSR_K_VALS_WORDS, seed, 0, 0};
  return tsr_k_philox_values_isa(isa, &v, b0, n, out);
}
