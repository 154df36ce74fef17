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

/* The candidate lists of a tile, unsorted: list l (rows of a first, then
 * with both ways rows of b) holds cnt[l] <= B keys bk + l·B and global
 * indices bi + l·B (column of b, or row of a), in arrival order; it may
 * start with the K candidates a previous tile kept (knn_chain). A key is
 * appended when below the list's threshold thr (just above the K-th
 * smallest kept when the list was last compacted, +inf before): cheaper
 * than keeping the list sorted, and the thresholds lag a little. When a
 * list is full it is compacted to its K smallest by (key, index). A key
 * equal to the K-th smallest is still appended (the threshold is the next
 * float up): it may rank before it by index, since carried candidates
 * break the index order of arrival. So the final K are the K smallest by
 * (key, index) of all offered, in any order of arrival. */
typedef struct lists lists;
struct lists {
  float *bk;
  int32_t *bi, *cnt;
  int B, K;
  float (*compact)(const lists *, int64_t);  /* compact_body for this CPU: out of line, rarely run */
};

/* Compacts list l to its K smallest by (key, index), order kept; returns
 * the new threshold (the largest kept key). Ranks by counting, all before
 * any move: B is small and the loop is branch-free (vectorized). */
#define COMPACT_BODY                                                              \
  float *k = L->bk + l * L->B;                                                    \
  int32_t *ix = L->bi + l * L->B;                                                 \
  int n = L->cnt[l], o = 0, rank[n];                                              \
  float thr = -INFINITY;                                                          \
  for (int i = 0; i < n; i++) {                                                   \
    float ki = k[i];                                                              \
    int32_t ii = ix[i];                                                           \
    int r = 0;                                                                    \
    for (int j = 0; j < n; j++) r += (k[j] < ki) | ((k[j] == ki) & (ix[j] < ii)); \
    rank[i] = r;                                                                  \
  }                                                                               \
  for (int i = 0; i < n; i++) {                                                   \
    if (rank[i] >= L->K) continue;                                                \
    thr = k[i] > thr ? k[i] : thr;                                                \
    k[o] = k[i], ix[o] = ix[i], o++; /* o <= i: in place, order kept */           \
  }                                                                               \
  L->cnt[l] = o;                                                                  \
  return nextafterf(thr, INFINITY);

/* Appends row r's keys kv[j] where mask has bit j (local index c0 + j) to
 * list l; returns the list's threshold (new when it had to compact). */
INLINE float offer(const lists *L, int64_t l, const float *kv, uint32_t mask, int64_t c0, float thr)
{
  int n = L->cnt[l];
  if (n + __builtin_popcount(mask) > L->B) {
    thr = L->compact(L, l);
    n = L->cnt[l];
  }
  float *k = L->bk + l * L->B;
  int32_t *ix = L->bi + l * L->B;
  while (mask != 0) {
    int j = __builtin_ctz(mask);
    mask &= mask - 1;
    k[n] = kv[j], ix[n] = (int32_t)(c0 + j);  /* c0: global */
    n += kv[j] < thr;  /* (the threshold may have dropped) */
  }
  L->cnt[l] = n;
  return thr;
}

typedef struct fused {
  const float *ap, *bp, *ynp, *xnp;  /* packed a, b, padded yn, xn (or NULL) */
  float *thrr, *thrc;                /* [groups·RG], [npan·2W]: rows' and b rows' thresholds */
  int64_t ri, rj, d, npan, diag, row0, col0;  /* row0, col0: global first rows of a and b */
  bool sym;  /* a tile of a block with itself, scanned both ways over its upper triangle */
  lists L;
} fused;

/* Offers row `row` of a to the lists of b's rows c0 + j where mask has bit
 * j (keys kc[j]); updates their thresholds. */
INLINE void offer_cols(const fused *f, const float *kc, uint32_t mask, int64_t c0, int64_t row)
{
  while (mask != 0) {
    int j = __builtin_ctz(mask);
    mask &= mask - 1;
    int64_t c = c0 + j;
    f->thrc[c] = offer(&f->L, f->ri + c, kc + j, 1u, f->row0 + row, f->thrc[c]);
  }
}

/* The lanes j of a panel whose column lies past row (rel = row − the
 * panel's first column): the pairs a sym tile scans. */
INLINE uint32_t upper(int64_t rel)
{
  return rel < 0 ? ~0u : rel >= 31 ? 0u : ~0u << (rel + 1);
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
      float *thr = f->thrr + q * RG;                                                                \
      const float *A = f->ap + q * RG * f->d;                                                       \
      int64_t pfirst = f->sym ? q * RG / (2 * W) : 0; /* sym: panels with a column past a row */     \
      for (int64_t pan = p0 > pfirst ? p0 : pfirst; pan < p1; pan++) {                              \
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
          int64_t row = q * RG + r, self = row + f->diag - pan * 2 * W;                             \
          if (self >= 0 && self < 2 * W) mask &= ~(1u << self);                                     \
          mask &= f->sym ? upper(row - pan * 2 * W) : ~0u;                                          \
          STORE(kv, k0), STORE(kv + W, k1);                                                         \
          thr[r] = offer(&f->L, row, kv, mask, f->col0 + pan * 2 * W, thr[r]);                                \
        }                                                                                           \
        if (!(BOTH)) continue;                                                                      \
        const float *tc = f->thrc + pan * 2 * W;                                                    \
        V t0 = LOAD(tc), t1 = LOAD(tc + W);                                                         \
        UNROLL for (int r = 0; r < RG; r++) {                                                       \
          V xr = SET1(f->xnp[q * RG + r]), k0 = FMA(c0[r], m2, xr), k1 = FMA(c1[r], m2, xr);        \
          uint32_t mask = MASK(k0, t0) | (MASK(k1, t1) << W);                                       \
          mask &= f->sym ? upper(q * RG + r - pan * 2 * W) : ~0u;                                   \
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

/* Maps a key to an unsigned integer of the same order (−0 as +0, equal as
 * the float compare has them). */
static inline uint32_t key_ord(float f)
{
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  b = b == 0x80000000u ? 0 : b;
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

/* COMPACT_BODY's result without its n² ranking: the K-th smallest key T is
 * found bit by bit (the keys as ordered integers, only the bits where the
 * smallest and largest differ: about 25 counts of n in vector compares),
 * then the keys below T are kept and of those equal to T the smallest
 * indices (usually one): the K smallest by (key, index), order kept. */
__attribute__((target("avx512f"), noinline)) static float compact_avx512(const lists *L, int64_t l)
{
  float *k = L->bk + l * L->B;
  int32_t *ix = L->bi + l * L->B;
  int n = L->cnt[l], K = L->K, nv = (n + 15) / 16;
  if (n < K) return INFINITY;  /* not full: no threshold yet (callers compact only fuller lists) */
  __m512i u[nv], sign = _mm512_set1_epi32(INT32_MIN), lo = _mm512_set1_epi32(-1), hi = _mm512_setzero_si512();
  __mmask16 valid[nv];
  for (int v = 0; v < nv; v++) {
    valid[v] = n - 16 * v >= 16 ? 0xFFFF : (__mmask16)((1u << (n - 16 * v)) - 1);
    __m512i b = _mm512_maskz_loadu_epi32(valid[v], k + 16 * v);
    b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(b, sign), _mm512_setzero_si512());
    u[v] = _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi32(b, 31), sign));
    lo = _mm512_mask_min_epu32(lo, valid[v], lo, u[v]), hi = _mm512_mask_max_epu32(hi, valid[v], hi, u[v]);
  }
  uint32_t mn = _mm512_reduce_min_epu32(lo), diff = mn ^ _mm512_reduce_max_epu32(hi);
  int top = diff != 0 ? 31 - __builtin_clz(diff) : -1;
  uint32_t t = top >= 0 ? mn & ~((2u << top) - 1) : mn;  /* the bits all keys share */
  for (int bit = top; bit >= 0; bit--) {
    __m512i probe = _mm512_set1_epi32((int)(t | ((1u << bit) - 1)));
    int c = 0;
    for (int v = 0; v < nv; v++) c += __builtin_popcount(_mm512_mask_cmple_epu32_mask(valid[v], u[v], probe));
    if (c < K) t |= 1u << bit;  /* fewer than K at or below: T has this bit */
  }
  __m512i tv = _mm512_set1_epi32((int)t);
  int less = 0, eq = 0, o = 0;
  for (int v = 0; v < nv; v++)
    less += __builtin_popcount(_mm512_mask_cmplt_epu32_mask(valid[v], u[v], tv)),
    eq += __builtin_popcount(_mm512_mask_cmpeq_epu32_mask(valid[v], u[v], tv));
  if (eq <= K - less) {  /* nearly always: keep what is at or below T, in order, by compress */
    __m512 kv[nv];
    __m512i iv[nv];
    for (int v = 0; v < nv; v++) kv[v] = _mm512_maskz_loadu_ps(valid[v], k + 16 * v), iv[v] = _mm512_maskz_loadu_epi32(valid[v], ix + 16 * v);
    for (int v = 0; v < nv; v++) {  /* o <= 16·v: the stores stay in the list, behind what is loaded */
      __mmask16 keep = _mm512_mask_cmple_epu32_mask(valid[v], u[v], tv);
      _mm512_storeu_ps(k + o, _mm512_maskz_compress_ps(keep, kv[v]));
      _mm512_storeu_si512(ix + o, _mm512_maskz_compress_epi32(keep, iv[v]));
      o += __builtin_popcount(keep);
    }
  }
  /* Ties at T: the K − less smallest indices. Every entry is ranked
   * before any moves (moving while ranking read overwritten entries and
   * lost candidates: a zero row under cosine ties every key). */
  bool keep[eq > K - less ? n : 1];
  for (int i = 0; eq > K - less && i < n; i++) {
    uint32_t ui = key_ord(k[i]);
    int before = 0;
    for (int j = 0; j < n && ui == t; j++) before += key_ord(k[j]) == t && ix[j] < ix[i];
    keep[i] = ui < t || (ui == t && before < K - less);
  }
  for (int i = 0; eq > K - less && i < n; i++) {
    float ki = k[i];
    int32_t ii = ix[i];
    k[o] = ki, ix[o] = ii, o += keep[i];  /* o <= i: in place, order kept */
  }
  L->cnt[l] = o;
  uint32_t b = t & 0x80000000u ? t ^ 0x80000000u : ~t;
  float thr;
  memcpy(&thr, &b, sizeof thr);
  return nextafterf(thr, INFINITY);  /* a later key equal to the K-th may rank before it by index */
}
__attribute__((target("avx512f"))) static void rows_avx512(const fused *f) { RUN512(0) }
__attribute__((target("avx512f"))) static void both_avx512(const fused *f) { RUN512(1) }

#define M256(k, t) ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps((k), (t), _CMP_LT_OQ)))
#define RUN256(BOTH) FUSED_BODY(__m256, 8, 6, _mm256_load_ps, _mm256_set1_ps, _mm256_fmadd_ps, M256, _mm256_store_ps, BOTH)
__attribute__((target("avx2,fma"), noinline)) static float compact_avx2(const lists *L, int64_t l) { COMPACT_BODY }
__attribute__((target("avx2,fma"))) static void rows_avx2(const fused *f) { RUN256(0) }
__attribute__((target("avx2,fma"))) static void both_avx2(const fused *f) { RUN256(1) }

/* Starts list l with the candidates t holds for it (idx >= 0; none on a
 * first tile); returns its threshold (+inf while fewer than K). */
static float carry_in(const tsr_k_knn_tile *t, int64_t tl, const lists *L, int64_t l)
{
  float top = -INFINITY;
  int n = 0;
  for (int i = 0; i < t->K; i++) {
    if (t->idx[tl * t->K + i] < 0) continue;
    L->bk[l * L->B + n] = t->key[tl * t->K + i], L->bi[l * L->B + n++] = (int32_t)t->idx[tl * t->K + i];
    top = t->key[tl * t->K + i] > top ? t->key[tl * t->K + i] : top;
  }
  L->cnt[l] = n;
  return n >= t->K ? nextafterf(top, INFINITY) : INFINITY;
}

/* Packs t for width w (rows of rg) into f, its lists started from t's
 * key/idx; TSR_ENOMEM when a buffer is missing. */
static int pack(const tsr_k_knn_tile *t, int w, int rg, bool sym, fused *f)
{
  int64_t npan = (t->rj + 2 * w - 1) / (2 * w), groups = (t->ri + rg - 1) / rg, d = t->d;
  const float *xn = sym ? t->yn : t->xn;  /* sym: the rows are b's rows */
  int64_t nl = t->ri + (xn != NULL ? t->rj : 0);
  int B = (t->K + (t->K > 2 * w ? t->K : 2 * w) + 15) & ~15;  /* room for K kept + one block */
  memset(f, 0, sizeof *f);
  f->ap = falloc(groups * rg * d), f->bp = falloc(npan * 2 * w * d), f->ynp = falloc(npan * 2 * w);
  f->thrr = falloc(groups * rg), f->thrc = falloc(npan * 2 * w);
  f->xnp = xn != NULL ? falloc(groups * rg) : NULL;
  f->L = (lists){falloc(nl * B), malloc((size_t)(nl * B + 1) * sizeof(int32_t)), calloc((size_t)nl + 1, sizeof(int32_t)),
                 B, t->K, w == 16 ? compact_avx512 : compact_avx2};
  f->ri = t->ri, f->rj = t->rj, f->d = d, f->npan = npan, f->diag = t->row0 - t->col0, f->sym = sym;
  f->row0 = t->row0, f->col0 = t->col0;
  if (!f->ap || !f->bp || !f->ynp || !f->thrr || !f->thrc || !f->L.bk || !f->L.bi || !f->L.cnt || (xn && !f->xnp))
    return TSR_ENOMEM;
  pack_rows(t->a, t->ri, d, rg, (float *)f->ap);
  pack_rows(t->b, t->rj, d, 2 * w, (float *)f->bp);
  for (int64_t c = 0; c < npan * 2 * w; c++) ((float *)f->ynp)[c] = c < t->rj ? t->yn[c] : INFINITY;
  for (int64_t r = 0; r < groups * rg; r++) f->thrr[r] = r < t->ri ? carry_in(t, r, &f->L, r) : -INFINITY;
  /* b's rows' lists: their own carried candidates, or (sym: the same rows)
   * an empty second list under the row's threshold */
  for (int64_t c = 0; c < npan * 2 * w; c++)
    f->thrc[c] = c >= t->rj || xn == NULL ? -INFINITY : sym ? f->thrr[c] : carry_in(t, t->ri + c, &f->L, t->ri + c);
  for (int64_t r = 0; xn != NULL && r < groups * rg; r++) ((float *)f->xnp)[r] = r < t->ri ? xn[r] : INFINITY;
  return 0;
}

/* Moves list l2's entries into list l (a sym tile's row r: columns past r
 * in list r, rows before r in list ri + r; disjoint), each first cut to
 * its K smallest: 2K fit in B. The K smallest by (key, index) of the
 * union are those of the two cut lists. */
static void join(const lists *L, int64_t l, int64_t l2)
{
  if (L->cnt[l] > L->K) L->compact(L, l);
  if (L->cnt[l2] > L->K) L->compact(L, l2);
  memcpy(L->bk + l * L->B + L->cnt[l], L->bk + l2 * L->B, (size_t)L->cnt[l2] * sizeof(float));
  memcpy(L->bi + l * L->B + L->cnt[l], L->bi + l2 * L->B, (size_t)L->cnt[l2] * sizeof(int32_t));
  L->cnt[l] += L->cnt[l2], L->cnt[l2] = 0;
}

/* Writes each list's K smallest (any order; finish_row sorts) into t's
 * key/idx with global indices; unused places +inf and −1. */
static void unpack(const tsr_k_knn_tile *t, const fused *f)
{
  int64_t nl = t->ri + (t->xn != NULL ? t->rj : 0);
  for (int64_t l = 0; l < nl; l++) {
    if (f->sym) join(&f->L, l, t->ri + l);
    if (f->L.cnt[l] > t->K) f->L.compact(&f->L, l);
    const float *k = f->L.bk + l * f->L.B;
    const int32_t *ix = f->L.bi + l * f->L.B;
    for (int i = 0; i < t->K; i++) {
      bool used = i < f->L.cnt[l];
      t->key[l * t->K + i] = used ? k[i] : INFINITY;
      t->idx[l * t->K + i] = used ? ix[i] : -1;
    }
  }
}

int tsr_k_knn_fused_f32(const tsr_k_knn_tile *t)
{
  tsr_k_isa isa = tsr_k_isa_resolve(TSR_K_ISA_BEST);
  bool wide = isa == TSR_K_ISA_AVX512;
  if (!wide && !(isa == TSR_K_ISA_AVX2 && __builtin_cpu_supports("fma"))) return 1;
  if (t->row0 + t->ri > INT32_MAX || t->col0 + t->rj > INT32_MAX) return 1;  /* lists hold int32 global indices */
  /* A block against itself: each pair's product once, scanned both ways
   * (half the GEMM; the same keys, bit for bit, as the full square). */
  bool sym = t->xn == NULL && t->row0 == t->col0 && t->ri == t->rj &&
             (t->a == t->b || memcmp(t->a, t->b, (size_t)(t->ri * t->d) * sizeof(float)) == 0);
  fused f;
  int rc = pack(t, wide ? 16 : 8, wide ? 12 : 6, sym, &f);
  if (rc == 0 && wide) f.xnp != NULL ? both_avx512(&f) : rows_avx512(&f);
  if (rc == 0 && !wide) f.xnp != NULL ? both_avx2(&f) : rows_avx2(&f);
  if (rc == 0) unpack(t, &f);
  free((void *)f.ap), free((void *)f.bp), free((void *)f.ynp), free((void *)f.xnp), free(f.thrr), free(f.thrc);
  free(f.L.bk), free(f.L.bi), free(f.L.cnt);
  return rc;
}
#else
int tsr_k_knn_fused_f32(const tsr_k_knn_tile *t)
{
  (void)t;
  return 1;
}
#endif
