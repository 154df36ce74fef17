/* kernels/cpu/knn_fused.c — the GEMM and candidate scan of a knn_tile in
 * one pass (knn.h). A register-blocked micro-kernel forms an RG x 2W block
 * of dot products (W = 16 lanes on AVX-512, 8 on AVX2) over all d, turns
 * it into keys yn − 2·dot, and compares them with the rows' thresholds
 * (the current worst kept key); a row with no key below its threshold —
 * nearly all, once its list has filled — costs nothing more. The key
 * matrix is never stored, so neither a GEMM's output pass nor a scan's
 * read pass touches memory.
 *
 * Layout: b is packed in panels of 2W columns, [panel][d][2W] (padding
 * columns: zero values, yn = +inf, so their key never wins), a in groups of
 * RG rows, [group][d][RG] (padding rows: threshold −inf). Panels are taken
 * in chunks that stay in L2 while every row group passes over them; within
 * a row, columns still arrive in increasing order (the tie rule).
 *
 * The keys are f32 sums in an order of our own (not OpenBLAS's): the exact
 * f64 recompute in knn.c decides the result, the margin absorbs rounding. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "knn.h"
#include "ops.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define CHUNK_FLOATS (64 * 1024)  /* b floats of a panel chunk: 256 KiB, in L2 */

/* A 64-byte aligned buffer of n floats (aligned_alloc wants whole lines). */
static float *falloc(int64_t n)
{
  return aligned_alloc(64, ((size_t)n * sizeof(float) + 127) & ~(size_t)63);
}

/* Packs rows [0, n) of x [n, d] into groups of g rows: out[group][d][g],
 * rows past n zero. */
static void pack_rows(const float *x, int64_t n, int64_t d, int g, float *out)
{
  int64_t groups = (n + g - 1) / g;
  for (int64_t q = 0; q < groups; q++) {
    float *o = out + q * g * d;
    for (int r = 0; r < g; r++) {
      int64_t row = q * g + r;
      for (int64_t p = 0; p < d; p++) o[p * g + r] = row < n ? x[row * d + p] : 0.0f;
    }
  }
}

/* Offers row r's keys kv[0..2W) where mask has a bit (column c0 + j) to
 * its list; returns the row's new threshold. */
static float offer(float *key, int64_t *idx, int K, const float *kv, uint32_t mask, int64_t c0, int64_t self,
                   int64_t col0)
{
  float thr = key[K - 1];
  while (mask != 0) {
    int j = __builtin_ctz(mask);
    mask &= mask - 1;
    if (kv[j] < thr && c0 + j != self) {
      tsr_k_knn_insert(key, idx, K, kv[j], col0 + c0 + j);
      thr = key[K - 1];
    }
  }
  return thr;
}

typedef struct fused {
  const float *ap, *bp, *ynp;  /* packed a, b, padded yn */
  int64_t ri, d, npan, diag, col0;
  float *key;
  int64_t *idx;
  int K;
} fused;

/* Row group q's thresholds (−inf for padding rows). */
static void group_thr(const fused *f, int64_t q, int rg, float *thr)
{
  for (int r = 0; r < rg; r++) {
    int64_t row = q * rg + r;
    thr[r] = row < f->ri ? f->key[row * f->K + f->K - 1] : -INFINITY;
  }
}

/* The body of one width: V the vector type, W its lanes, RG rows a block;
 * LOAD, SET1, FMA(a, b, c), MASK(k, t) (bit per lane of k < t). */
#define FUSED_BODY(V, W, RG, LOAD, SET1, FMA, MASK, STORE)                                          \
  int64_t pch = CHUNK_FLOATS / (2 * W * f->d) > 0 ? CHUNK_FLOATS / (2 * W * f->d) : 1;            \
  int64_t groups = (f->ri + RG - 1) / RG;                                                           \
  float kv[2 * W] __attribute__((aligned(64)));                                                     \
  for (int64_t p0 = 0; p0 < f->npan; p0 += pch) {                                                   \
    int64_t p1 = p0 + pch < f->npan ? p0 + pch : f->npan;                                           \
    for (int64_t q = 0; q < groups; q++) {                                                          \
      float thr[RG];                                                                                \
      group_thr(f, q, RG, thr);                                                                     \
      const float *A = f->ap + q * RG * f->d;                                                       \
      for (int64_t pan = p0; pan < p1; pan++) {                                                     \
        const float *B = f->bp + pan * 2 * W * f->d;                                                \
        V c0[RG], c1[RG];                                                                           \
        UNROLL for (int r = 0; r < RG; r++) c0[r] = SET1(0.0f), c1[r] = SET1(0.0f);                 \
        for (int64_t p = 0; p < f->d; p++) {                                                        \
          V b0 = LOAD(B + p * 2 * W), b1 = LOAD(B + p * 2 * W + W);                                 \
          UNROLL for (int r = 0; r < RG; r++) {                                                     \
            V av = SET1(A[p * RG + r]);                                                             \
            c0[r] = FMA(av, b0, c0[r]);                                                             \
            c1[r] = FMA(av, b1, c1[r]);                                                             \
          }                                                                                         \
        }                                                                                           \
        V y0 = LOAD(f->ynp + pan * 2 * W), y1 = LOAD(f->ynp + pan * 2 * W + W), m2 = SET1(-2.0f);   \
        UNROLL for (int r = 0; r < RG; r++) {                                                       \
          V t = SET1(thr[r]), k0 = FMA(c0[r], m2, y0), k1 = FMA(c1[r], m2, y1);                     \
          uint32_t mask = MASK(k0, t) | (MASK(k1, t) << W);                                         \
          if (mask == 0) continue;                                                                  \
          STORE(kv, k0), STORE(kv + W, k1);                                                         \
          int64_t row = q * RG + r;                                                                 \
          thr[r] = offer(f->key + row * f->K, f->idx + row * f->K, f->K, kv, mask, pan * 2 * W,     \
                         row + f->diag, f->col0);                                                   \
        }                                                                                           \
      }                                                                                             \
    }                                                                                               \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define M512(k, t) ((uint32_t)_mm512_cmp_ps_mask((k), (t), _CMP_LT_OQ))
__attribute__((target("avx512f"))) static void run_avx512(const fused *f)
{
  FUSED_BODY(__m512, 16, 12, _mm512_load_ps, _mm512_set1_ps, _mm512_fmadd_ps, M512, _mm512_store_ps)
}

#define M256(k, t) ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps((k), (t), _CMP_LT_OQ)))
__attribute__((target("avx2,fma"))) static void run_avx2(const fused *f)
{
  FUSED_BODY(__m256, 8, 6, _mm256_load_ps, _mm256_set1_ps, _mm256_fmadd_ps, M256, _mm256_store_ps)
}
#endif

int tsr_k_knn_fused_f32(const float *a, int64_t ri, const float *b, int64_t rj, int64_t d, const float *yn,
                        int64_t diag, int64_t col0, float *key, int64_t *idx, int K)
{
#if defined(__x86_64__) && defined(__GNUC__)
  tsr_k_isa isa = tsr_k_isa_resolve(TSR_K_ISA_BEST);
  bool wide = isa == TSR_K_ISA_AVX512;
  if (!wide && !(isa == TSR_K_ISA_AVX2 && __builtin_cpu_supports("fma"))) return 1;
  int w = wide ? 16 : 8, rg = wide ? 12 : 6;
  int64_t npan = (rj + 2 * w - 1) / (2 * w), groups = (ri + rg - 1) / rg;
  float *ap = falloc(groups * rg * d), *bp = falloc(npan * 2 * w * d), *ynp = falloc(npan * 2 * w);
  if (ap == NULL || bp == NULL || ynp == NULL) {
    free(ap), free(bp), free(ynp);
    return TSR_ENOMEM;
  }
  pack_rows(a, ri, d, rg, ap);
  pack_rows(b, rj, d, 2 * w, bp);
  for (int64_t c = 0; c < npan * 2 * w; c++) ynp[c] = c < rj ? yn[c] : INFINITY;
  fused f = {ap, bp, ynp, ri, d, npan, diag, col0, key, idx, K};
  if (wide) run_avx512(&f);
  else run_avx2(&f);
  free(ap), free(bp), free(ynp);
  return 0;
#else
  (void)a, (void)ri, (void)b, (void)rj, (void)d, (void)yn, (void)diag, (void)col0, (void)key, (void)idx, (void)K;
  return 1;
#endif
}
