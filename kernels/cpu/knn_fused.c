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
  const float *ap, *bp, *ynp, *xnp;  /* packed a, b, padded yn, xn (or NULL) */
  float *thrc;                       /* [npan·2W]: b rows' thresholds (both ways) */
  int64_t ri, rj, d, npan, diag, row0, col0;
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

/* Offers row `row` of a (global row0 + row) to the lists of b's rows c0 + j
 * where mask has bit j (keys kc[j]); updates their thresholds. */
static void offer_cols(const fused *f, const float *kc, uint32_t mask, int64_t c0, int64_t row)
{
  while (mask != 0) {
    int j = __builtin_ctz(mask);
    mask &= mask - 1;
    int64_t c = c0 + j;
    float *key = f->key + (f->ri + c) * f->K;
    if (kc[j] < f->thrc[c]) {
      tsr_k_knn_insert(key, f->idx + (f->ri + c) * f->K, f->K, kc[j], f->row0 + row);
      f->thrc[c] = key[f->K - 1];
    }
  }
}

/* The body of one width: V the vector type, W its lanes, RG rows a block;
 * LOAD, SET1, FMA(a, b, c), MASK(k, t) (bit per lane of k < t), STORE.
 * BOTH (a constant) adds the scan of the transpose: per row r of the
 * group, the keys xn[r] − 2·dot against b's rows' thresholds. */
#define FUSED_BODY(V, W, RG, LOAD, SET1, FMA, MASK, STORE, BOTH)                                     \
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
        if (!(BOTH)) continue;                                                                      \
        const float *tc = f->thrc + pan * 2 * W;                                                    \
        V t0 = LOAD(tc), t1 = LOAD(tc + W);                                                         \
        UNROLL for (int r = 0; r < RG; r++) {                                                       \
          V xr = SET1(f->xnp[q * RG + r]), k0 = FMA(c0[r], m2, xr), k1 = FMA(c1[r], m2, xr);        \
          uint32_t mask = MASK(k0, t0) | (MASK(k1, t1) << W);                                       \
          if (mask == 0) continue;                                                                  \
          STORE(kv, k0), STORE(kv + W, k1);                                                         \
          offer_cols(f, kv, mask, pan * 2 * W, q * RG + r);                                         \
          t0 = LOAD(tc), t1 = LOAD(tc + W);                                                         \
        }                                                                                           \
      }                                                                                             \
    }                                                                                               \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define M512(k, t) ((uint32_t)_mm512_cmp_ps_mask((k), (t), _CMP_LT_OQ))
#define RUN512(BOTH) FUSED_BODY(__m512, 16, 12, _mm512_load_ps, _mm512_set1_ps, _mm512_fmadd_ps, M512, _mm512_store_ps, BOTH)
__attribute__((target("avx512f"))) static void rows_avx512(const fused *f) { RUN512(0) }
__attribute__((target("avx512f"))) static void both_avx512(const fused *f) { RUN512(1) }

#define M256(k, t) ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps((k), (t), _CMP_LT_OQ)))
#define RUN256(BOTH) FUSED_BODY(__m256, 8, 6, _mm256_load_ps, _mm256_set1_ps, _mm256_fmadd_ps, M256, _mm256_store_ps, BOTH)
__attribute__((target("avx2,fma"))) static void rows_avx2(const fused *f) { RUN256(0) }
__attribute__((target("avx2,fma"))) static void both_avx2(const fused *f) { RUN256(1) }

/* Packs t for width w (rows of rg) into f; TSR_ENOMEM when a buffer is missing. */
static int pack(const tsr_k_knn_tile *t, int w, int rg, fused *f)
{
  int64_t npan = (t->rj + 2 * w - 1) / (2 * w), groups = (t->ri + rg - 1) / rg, d = t->d;
  float *ap = falloc(groups * rg * d), *bp = falloc(npan * 2 * w * d), *ynp = falloc(npan * 2 * w);
  float *xnp = t->xn != NULL ? falloc(groups * rg) : NULL, *thrc = t->xn != NULL ? falloc(npan * 2 * w) : NULL;
  *f = (fused){ap, bp, ynp, xnp, thrc, t->ri, t->rj, d, npan, t->row0 - t->col0, t->row0, t->col0, t->key, t->idx, t->K};
  if (ap == NULL || bp == NULL || ynp == NULL || (t->xn != NULL && (xnp == NULL || thrc == NULL))) return TSR_ENOMEM;
  pack_rows(t->a, t->ri, d, rg, ap);
  pack_rows(t->b, t->rj, d, 2 * w, bp);
  for (int64_t c = 0; c < npan * 2 * w; c++) ynp[c] = c < t->rj ? t->yn[c] : INFINITY;
  if (t->xn == NULL) return 0;
  for (int64_t r = 0; r < groups * rg; r++) xnp[r] = r < t->ri ? t->xn[r] : INFINITY;
  for (int64_t c = 0; c < npan * 2 * w; c++) thrc[c] = c < t->rj ? t->key[(t->ri + c) * t->K + t->K - 1] : -INFINITY;
  return 0;
}

int tsr_k_knn_fused_f32(const tsr_k_knn_tile *t)
{
  tsr_k_isa isa = tsr_k_isa_resolve(TSR_K_ISA_BEST);
  bool wide = isa == TSR_K_ISA_AVX512;
  if (!wide && !(isa == TSR_K_ISA_AVX2 && __builtin_cpu_supports("fma"))) return 1;
  fused f;
  int rc = pack(t, wide ? 16 : 8, wide ? 12 : 6, &f);
  if (rc == 0 && wide) t->xn != NULL ? both_avx512(&f) : rows_avx512(&f);
  if (rc == 0 && !wide) t->xn != NULL ? both_avx2(&f) : rows_avx2(&f);
  free((void *)f.ap), free((void *)f.bp), free((void *)f.ynp), free((void *)f.xnp), free(f.thrc);
  return rc;
}
#else
int tsr_k_knn_fused_f32(const tsr_k_knn_tile *t)
{
  (void)t;
  return 1;
}
#endif
