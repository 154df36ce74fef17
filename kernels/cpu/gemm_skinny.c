/* kernels/cpu/gemm_skinny.c — f64 products where one side is skinny (a few
 * dozen columns), the shapes of randomized linear algebra: X @ B with B
 * [c, n] and Bᵀ @ X with B [r, m], n and m small, X a tile of a big
 * block. BLAS packs both operands for every call, which costs more than
 * the arithmetic at these shapes; these kernels read X once, in place.
 *
 * Contract (what makes results identical on every CPU): each output
 * element is updated as c = fma(a, b, c), once per term, in increasing
 * order of the inner index, whatever the ISA or the register blocking. So
 * the AVX-512 path, the AVX2+FMA build of the portable loops and the
 * portable loops themselves give the same bytes (fma rounds once on every
 * CPU; without hardware FMA the portable path is slow but still exact).
 *
 * AVX-512 blocking:
 * - btx: C[m, cols] += Bᵀ X. A block is 5 rows of C by 32 columns (20
 *   accumulators); per row of X: 4 vector loads of X, 5 broadcasts of B,
 *   20 FMAs. Leftover rows of C go one at a time, leftover columns 8 at a
 *   time, the last partial 8 under a mask.
 * - xb: C[rows, n] += X B. A block is 8 rows of C by up to 24 columns (3
 *   vectors, the last masked when n is not a multiple of 8); per column of
 *   X: up to 3 vector loads of B, 8 broadcasts of X, 24 FMAs. */
#include <math.h>

#include "ops.h"

/* The portable loops, in the contract's order. */
static inline __attribute__((always_inline)) void btx_loops(int64_t rows, int64_t cols, int64_t m,
                                                            const double *b, int64_t ldb, const double *x,
                                                            int64_t ldx, double *c, int64_t ldc)
{
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < m; i++) {
      double bi = b[r * ldb + i];
      const double *restrict xr = x + r * ldx;
      double *restrict ci = c + i * ldc;
      for (int64_t j = 0; j < cols; j++) ci[j] = fma(bi, xr[j], ci[j]);
    }
}

static inline __attribute__((always_inline)) void xb_loops(int64_t rows, int64_t cols, int64_t n, const double *x,
                                                           int64_t ldx, const double *b, int64_t ldb, double *c,
                                                           int64_t ldc)
{
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols; k++) {
      double xk = x[r * ldx + k];
      const double *restrict bk = b + k * ldb;
      double *restrict cr = c + r * ldc;
      for (int64_t j = 0; j < n; j++) cr[j] = fma(xk, bk[j], cr[j]);
    }
}

static void btx_portable(int64_t rows, int64_t cols, int64_t m, const double *b, int64_t ldb, const double *x,
                         int64_t ldx, double *c, int64_t ldc)
{
  btx_loops(rows, cols, m, b, ldb, x, ldx, c, ldc);
}

static void xb_portable(int64_t rows, int64_t cols, int64_t n, const double *x, int64_t ldx, const double *b,
                        int64_t ldb, double *c, int64_t ldc)
{
  xb_loops(rows, cols, n, x, ldx, b, ldb, c, ldc);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline))
/* -O2 leaves loops of a constant 5 or 8 rolled; the accumulators must be
 * registers, so the block loops are unrolled by hand. */
#define UNROLL _Pragma("GCC unroll 8")

/* The portable loops with fma() as an instruction (and vectorized). */
__attribute__((target("avx2,fma"))) static void btx_fma(int64_t rows, int64_t cols, int64_t m, const double *b,
                                                        int64_t ldb, const double *x, int64_t ldx, double *c,
                                                        int64_t ldc)
{
  btx_loops(rows, cols, m, b, ldb, x, ldx, c, ldc);
}

__attribute__((target("avx2,fma"))) static void xb_fma(int64_t rows, int64_t cols, int64_t n, const double *x,
                                                       int64_t ldx, const double *b, int64_t ldb, double *c,
                                                       int64_t ldc)
{
  xb_loops(rows, cols, n, x, ldx, b, ldb, c, ldc);
}

/* Vector q of NV at p: the last one masked when MASKED (never reads past
 * the row's end). */
AVX512 INLINE __m512d load(const double *p, int q, int NV, bool MASKED, __mmask8 tail)
{
  return MASKED && q == NV - 1 ? _mm512_maskz_loadu_pd(tail, p + 8 * q) : _mm512_loadu_pd(p + 8 * q);
}

AVX512 INLINE void store(double *p, int q, int NV, bool MASKED, __mmask8 tail, __m512d v)
{
  if (MASKED && q == NV - 1) _mm512_mask_storeu_pd(p + 8 * q, tail, v);
  else _mm512_storeu_pd(p + 8 * q, v);
}

/* C[0..MG, 0..8·NV) += B[:, 0..MG]ᵀ X[:, 0..8·NV) over `rows` rows; MG,
 * NV, MASKED are constants at every call, so acc stays in registers. */
AVX512 INLINE void btx_block(int MG, int NV, bool MASKED, __mmask8 tail, int64_t rows, const double *b, int64_t ldb,
                             const double *x, int64_t ldx, double *c, int64_t ldc)
{
  __m512d acc[5][4];
  UNROLL for (int i = 0; i < MG; i++)
    UNROLL for (int q = 0; q < NV; q++) acc[i][q] = load(c + i * ldc, q, NV, MASKED, tail);
  for (int64_t r = 0; r < rows; r++) {
    __m512d xv[4];
    UNROLL for (int q = 0; q < NV; q++) xv[q] = load(x + r * ldx, q, NV, MASKED, tail);
    UNROLL for (int i = 0; i < MG; i++) {
      __m512d bb = _mm512_set1_pd(b[r * ldb + i]);
      UNROLL for (int q = 0; q < NV; q++) acc[i][q] = _mm512_fmadd_pd(bb, xv[q], acc[i][q]);
    }
  }
  UNROLL for (int i = 0; i < MG; i++)
    UNROLL for (int q = 0; q < NV; q++) store(c + i * ldc, q, NV, MASKED, tail, acc[i][q]);
}

/* All m rows of C for one column strip of 8·NV columns. */
AVX512 INLINE void btx_strip(int NV, bool MASKED, __mmask8 tail, int64_t rows, int64_t m, const double *b,
                             int64_t ldb, const double *x, int64_t ldx, double *c, int64_t ldc)
{
  int64_t i = 0;
  for (; i + 5 <= m; i += 5) btx_block(5, NV, MASKED, tail, rows, b + i, ldb, x, ldx, c + i * ldc, ldc);
  for (; i < m; i++) btx_block(1, NV, MASKED, tail, rows, b + i, ldb, x, ldx, c + i * ldc, ldc);
}

AVX512 static void btx_avx512(int64_t rows, int64_t cols, int64_t m, const double *b, int64_t ldb, const double *x,
                              int64_t ldx, double *c, int64_t ldc)
{
  int64_t j = 0;
  for (; j + 32 <= cols; j += 32) btx_strip(4, false, 0xFF, rows, m, b, ldb, x + j, ldx, c + j, ldc);
  for (; j + 8 <= cols; j += 8) btx_strip(1, false, 0xFF, rows, m, b, ldb, x + j, ldx, c + j, ldc);
  if (j < cols) btx_strip(1, true, (__mmask8)((1u << (cols - j)) - 1), rows, m, b, ldb, x + j, ldx, c + j, ldc);
}

/* C[0..RG, 0..8·NV) += X[0..RG, :] B[:, 0..8·NV) over `cols` columns of X. */
AVX512 INLINE void xb_block(int RG, int NV, bool MASKED, __mmask8 tail, int64_t cols, const double *x, int64_t ldx,
                            const double *b, int64_t ldb, double *c, int64_t ldc)
{
  __m512d acc[8][3];
  UNROLL for (int i = 0; i < RG; i++)
    UNROLL for (int q = 0; q < NV; q++) acc[i][q] = load(c + i * ldc, q, NV, MASKED, tail);
  for (int64_t k = 0; k < cols; k++) {
    __m512d bv[3];
    UNROLL for (int q = 0; q < NV; q++) bv[q] = load(b + k * ldb, q, NV, MASKED, tail);
    UNROLL for (int i = 0; i < RG; i++) {
      __m512d xx = _mm512_set1_pd(x[i * ldx + k]);
      UNROLL for (int q = 0; q < NV; q++) acc[i][q] = _mm512_fmadd_pd(xx, bv[q], acc[i][q]);
    }
  }
  UNROLL for (int i = 0; i < RG; i++)
    UNROLL for (int q = 0; q < NV; q++) store(c + i * ldc, q, NV, MASKED, tail, acc[i][q]);
}

/* All rows of C for one strip of C's columns (8·NV wide). */
AVX512 INLINE void xb_strip(int NV, bool MASKED, __mmask8 tail, int64_t rows, int64_t cols, const double *x,
                            int64_t ldx, const double *b, int64_t ldb, double *c, int64_t ldc)
{
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) xb_block(8, NV, MASKED, tail, cols, x + r * ldx, ldx, b, ldb, c + r * ldc, ldc);
  for (; r < rows; r++) xb_block(1, NV, MASKED, tail, cols, x + r * ldx, ldx, b, ldb, c + r * ldc, ldc);
}

AVX512 static void xb_avx512(int64_t rows, int64_t cols, int64_t n, const double *x, int64_t ldx, const double *b,
                             int64_t ldb, double *c, int64_t ldc)
{
  for (int64_t j = 0; j < n; j += 24) {
    int64_t w = n - j < 24 ? n - j : 24;
    __mmask8 tail = (__mmask8)((1u << (w % 8)) - 1);
    const double *bj = b + j;
    double *cj = c + j;
    switch (w % 8 == 0 ? w / 8 : 3 + (w + 7) / 8) {
    case 1: xb_strip(1, false, tail, rows, cols, x, ldx, bj, ldb, cj, ldc); break;
    case 2: xb_strip(2, false, tail, rows, cols, x, ldx, bj, ldb, cj, ldc); break;
    case 3: xb_strip(3, false, tail, rows, cols, x, ldx, bj, ldb, cj, ldc); break;
    case 4: xb_strip(1, true, tail, rows, cols, x, ldx, bj, ldb, cj, ldc); break;
    case 5: xb_strip(2, true, tail, rows, cols, x, ldx, bj, ldb, cj, ldc); break;
    default: xb_strip(3, true, tail, rows, cols, x, ldx, bj, ldb, cj, ldc); break;
    }
  }
}

static bool has_fma(void)
{
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

void tsr_k_gemm_btx_f64(tsr_k_isa isa, int64_t rows, int64_t cols, int64_t m, const double *b, int64_t ldb,
                        const double *x, int64_t ldx, double *c, int64_t ldc)
{
  isa = tsr_k_isa_resolve(isa);
  if (isa == TSR_K_ISA_AVX512) btx_avx512(rows, cols, m, b, ldb, x, ldx, c, ldc);
  else if (isa == TSR_K_ISA_AVX2 && has_fma()) btx_fma(rows, cols, m, b, ldb, x, ldx, c, ldc);
  else btx_portable(rows, cols, m, b, ldb, x, ldx, c, ldc);
}

void tsr_k_gemm_xb_f64(tsr_k_isa isa, int64_t rows, int64_t cols, int64_t n, const double *x, int64_t ldx,
                       const double *b, int64_t ldb, double *c, int64_t ldc)
{
  isa = tsr_k_isa_resolve(isa);
  if (isa == TSR_K_ISA_AVX512) xb_avx512(rows, cols, n, x, ldx, b, ldb, c, ldc);
  else if (isa == TSR_K_ISA_AVX2 && has_fma()) xb_fma(rows, cols, n, x, ldx, b, ldb, c, ldc);
  else xb_portable(rows, cols, n, x, ldx, b, ldb, c, ldc);
}

#else

void tsr_k_gemm_btx_f64(tsr_k_isa isa, int64_t rows, int64_t cols, int64_t m, const double *b, int64_t ldb,
                        const double *x, int64_t ldx, double *c, int64_t ldc)
{
  (void)isa;
  btx_portable(rows, cols, m, b, ldb, x, ldx, c, ldc);
}

void tsr_k_gemm_xb_f64(tsr_k_isa isa, int64_t rows, int64_t cols, int64_t n, const double *x, int64_t ldx,
                       const double *b, int64_t ldb, double *c, int64_t ldc)
{
  (void)isa;
  xb_portable(rows, cols, n, x, ldx, b, ldb, c, ldc);
}

#endif
