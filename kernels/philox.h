/* kernels/philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC'11; the Random123 constants) and the word-to-value
 * maps of docs/random.md, as static inline functions that compile as C and,
 * later, as CUDA device code (TSR_HOSTDEV).
 *
 * Invariant: everything here is a pure function of its arguments, so a value
 * depends only on (seed, global element index) — never on chunking, thread
 * or device. The CPU kernels and the unit test's slow reference both build on
 * these, and the CUDA kernels must too. */
#ifndef TSR_KERNELS_PHILOX_H
#define TSR_KERNELS_PHILOX_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TSR_HOSTDEV __host__ __device__
#else
#define TSR_HOSTDEV
#endif

#define TSR_PHILOX_M0 0xD2511F53u
#define TSR_PHILOX_M1 0xCD9E8D57u
#define TSR_PHILOX_W0 0x9E3779B9u
#define TSR_PHILOX_W1 0xBB67AE85u

/* 2π as the nearest double; the normal map multiplies by exactly this. */
#define TSR_TWO_PI 6.283185307179586476925286766559

/* One Philox round on ctr[0..3] with key (k0, k1). */
static inline TSR_HOSTDEV void tsr_philox_round(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
  uint64_t p0 = (uint64_t)TSR_PHILOX_M0 * ctr[0];
  uint64_t p1 = (uint64_t)TSR_PHILOX_M1 * ctr[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t c1 = ctr[1], c3 = ctr[3];
  ctr[0] = hi1 ^ c1 ^ k0;
  ctr[1] = lo1;
  ctr[2] = hi0 ^ c3 ^ k1;
  ctr[3] = lo0;
}

/* Philox4x32-10: encrypts ctr in place under key (k0, k1). */
static inline TSR_HOSTDEV void tsr_philox4x32_10(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += TSR_PHILOX_W0;
      k1 += TSR_PHILOX_W1;
    }
    tsr_philox_round(ctr, k0, k1);
  }
}

/* Block b of the word stream of seed: words 4b..4b+3, i.e. Philox with
 * counter (lo32(b), hi32(b), 0, 0) and key (lo32(seed), hi32(seed)). */
static inline TSR_HOSTDEV void tsr_philox_block(uint64_t seed, uint64_t b, uint32_t out[4])
{
  out[0] = (uint32_t)b;
  out[1] = (uint32_t)(b >> 32);
  out[2] = 0;
  out[3] = 0;
  tsr_philox4x32_10(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Word w of the stream of seed (slow: one Philox call per word). */
static inline TSR_HOSTDEV uint32_t tsr_philox_word(uint64_t seed, uint64_t w)
{
  uint32_t out[4];
  tsr_philox_block(seed, w / 4, out);
  return out[w % 4];
}

/* f32 uniform in [0, 1) from one word: 24 high bits. */
static inline TSR_HOSTDEV float tsr_u01_f32(uint32_t w)
{
  return (float)(w >> 8) * 0x1p-24f;
}

/* f64 uniform in [0, 1) from two words (lo = word 2L, hi = word 2L+1). */
static inline TSR_HOSTDEV double tsr_u01_f64(uint32_t lo, uint32_t hi)
{
  uint64_t bits = ((uint64_t)hi << 32 | lo) >> 11;
  return (double)(int64_t)bits * 0x1p-53;
}

/* low + ((w * r) >> 32), range r = high - low in 1..2^32. The sum wraps
 * like the unsigned arithmetic it is; callers checked it fits the dtype. */
static inline TSR_HOSTDEV int64_t tsr_randint_map(uint32_t w, int64_t low, uint64_t r)
{
  return (int64_t)((uint64_t)low + (((uint64_t)w * r) >> 32));
}

/* Standard normal from four words (block L of the stream): Box–Muller's
 * cosine branch, z = sqrt(-2 ln(1 - u1)) cos(2π u2), in double. */
static inline TSR_HOSTDEV double tsr_normal_f64(const uint32_t w[4])
{
  double u1 = tsr_u01_f64(w[0], w[1]);
  double u2 = tsr_u01_f64(w[2], w[3]);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(TSR_TWO_PI * u2);
}

#endif
