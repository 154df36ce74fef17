/* kernels/cpu/philox_simd.c — Philox4x32-10 blocks 16 (AVX-512) or 8 (AVX2)
 * at a time, chosen at run time from what the CPU supports; the library is
 * still built for baseline x86-64. Same words as philox.h, bit for bit (the
 * unit test compares every path with the scalar one).
 *
 * Layout: each vector lane carries one block's counter word, so a round is
 * two 32x32→64 multiplies per lane (even and odd lanes separately, as
 * vpmuludq only multiplies even lanes), and the four result vectors are
 * transposed back to stream order (block b's words 4b..4b+3) on store.
 * On other compilers or CPUs the entry point does nothing and the caller's
 * scalar loop does all the work. */
#include "../philox.h"
#include "ops.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Counters b .. b+lanes-1 split into low and high words. */
static void counters(uint64_t b, int lanes, uint32_t *lo, uint32_t *hi)
{
  for (int j = 0; j < lanes; j++) {
    lo[j] = (uint32_t)(b + (uint64_t)j);
    hi[j] = (uint32_t)((b + (uint64_t)j) >> 32);
  }
}

__attribute__((target("avx512f"))) static inline void mulhilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo)
{
  __m512i pe = _mm512_mul_epu32(a, m);
  __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
  *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
}

__attribute__((target("avx512f"))) static size_t blocks_avx512(uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  const __m512i m0 = _mm512_set1_epi64(TSR_PHILOX_M0), m1 = _mm512_set1_epi64(TSR_PHILOX_M1);
  const __m512i pair_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i pair_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i quad_lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i quad_hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t lo[16], hi[16];
    counters(b0 + i, 16, lo, hi);
    __m512i c0 = _mm512_loadu_si512(lo), c1 = _mm512_loadu_si512(hi);
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, k0 += TSR_PHILOX_W0, k1 += TSR_PHILOX_W1) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo16(c0, m0, &hi0, &lo0);
      mulhilo16(c2, m1, &hi1, &lo1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
      c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
      c1 = lo1;
      c3 = lo0;
    }
    __m512i a0 = _mm512_permutex2var_epi32(c0, pair_lo, c1), a1 = _mm512_permutex2var_epi32(c0, pair_hi, c1);
    __m512i d0 = _mm512_permutex2var_epi32(c2, pair_lo, c3), d1 = _mm512_permutex2var_epi32(c2, pair_hi, c3);
    uint32_t *o = out + 4 * i;
    _mm512_storeu_si512(o, _mm512_permutex2var_epi64(a0, quad_lo, d0));
    _mm512_storeu_si512(o + 16, _mm512_permutex2var_epi64(a0, quad_hi, d0));
    _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi64(a1, quad_lo, d1));
    _mm512_storeu_si512(o + 48, _mm512_permutex2var_epi64(a1, quad_hi, d1));
  }
  return i;
}

__attribute__((target("avx2"))) static inline void mulhilo8(__m256i a, __m256i m, __m256i *hi, __m256i *lo)
{
  __m256i pe = _mm256_mul_epu32(a, m);
  __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
}

__attribute__((target("avx2"))) static size_t blocks_avx2(uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  const __m256i m0 = _mm256_set1_epi64x(TSR_PHILOX_M0), m1 = _mm256_set1_epi64x(TSR_PHILOX_M1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint32_t lo[8], hi[8];
    counters(b0 + i, 8, lo, hi);
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

size_t tsr_k_philox_blocks_isa(tsr_k_isa isa, uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  if (isa == TSR_K_ISA_BEST)
    isa = __builtin_cpu_supports("avx512f") ? TSR_K_ISA_AVX512 : __builtin_cpu_supports("avx2") ? TSR_K_ISA_AVX2
                                                                                                : TSR_K_ISA_SCALAR;
  if (isa == TSR_K_ISA_AVX512 && __builtin_cpu_supports("avx512f")) return blocks_avx512(seed, b0, n, out);
  if (isa == TSR_K_ISA_AVX2 && __builtin_cpu_supports("avx2")) return blocks_avx2(seed, b0, n, out);
  return 0;
}

#else

size_t tsr_k_philox_blocks_isa(tsr_k_isa isa, uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  (void)isa, (void)seed, (void)b0, (void)n, (void)out;
  return 0;
}

#endif
