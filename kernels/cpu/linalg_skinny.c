/* kernels/cpu/linalg_skinny.c — matmul's path for an integer operand X
 * (u8/i32/i64, typically a big genotype block) times a narrow f64 operand
 * W (at most SKINNY_MAX wide, e.g. a 20-column sketch). X is converted a
 * small tile at a time and fed, still in cache, to the skinny kernels of
 * gemm_skinny.c; BLAS would pack a converted panel for every call instead.
 *
 * Every case is one of the two kernels on X as stored (row-major R x Cc):
 *   xb  (X's columns are the inner dimension): out [R, w]  = X  · Wk
 *   btx (X's rows are the inner dimension):    out [w, Cc] = Wkᵀ · X
 * with Wk the narrow operand as k x w (transposed first when stored the
 * other way), and out being C or Cᵀ (transposed at the end). Each element
 * of C is then one fma chain over k in order: the same bytes on every CPU
 * and for every tiling. */
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* The widest narrow operand this path takes (beyond it BLAS does better). */
#define SKINNY_MAX 64
/* X tiles: rows x columns of X as stored, converted to f64 (128 KiB). */
#define TILE_ROWS 64
#define TILE_COLS 256

/* a [r, c] transposed into t [c, r]. */
static void transpose(const double *a, int64_t r, int64_t c, double *t)
{
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) t[j * r + i] = a[i * c + j];
}

/* X [xr, xc] as stored, tile by tile in order of the inner dimension. */
static void run_tiles(const tsr_k_xsrc *x, bool xb, const double *wk, int64_t w, double *out, double *tile)
{
  int64_t xr = x->rows, xc = x->cols;
  for (int64_t r0 = 0; r0 < xr; r0 += TILE_ROWS)
    for (int64_t c0 = 0; c0 < xc; c0 += TILE_COLS) {
      int64_t nr = xr - r0 < TILE_ROWS ? xr - r0 : TILE_ROWS, nc = xc - c0 < TILE_COLS ? xc - c0 : TILE_COLS;
      x->load(x, r0, nr, c0, nc, tile);
      if (xb) tsr_k_gemm_xb_f64(TSR_K_ISA_BEST, nr, nc, w, tile, nc, wk + c0 * w, w, out + r0 * w, w);
      else tsr_k_gemm_btx_f64(TSR_K_ISA_BEST, nr, nc, w, wk + r0 * w, w, tile, nc, out + c0, xc);
    }
}

int tsr_k_skinny_x(const tsr_k_xsrc *x, bool x_is_a, bool ta, bool tb, int64_t k, const tsr_buf *wb, double *c,
                   tsr_errbuf *err)
{
  int64_t w = x_is_a ? (tb ? wb->meta.shape[0] : wb->meta.shape[1]) : (ta ? wb->meta.shape[1] : wb->meta.shape[0]);
  if (wb->meta.dtype != TSR_F64 || w > SKINNY_MAX) return 0;
  bool xb = x_is_a ? !ta : tb, out_t = x_is_a ? ta : tb, w_t = x_is_a ? tb : !ta;
  int64_t xr = x->rows, xc = x->cols;
  size_t out_n = (size_t)(xb ? xr * w : w * xc);
  double *tile = malloc(TILE_ROWS * TILE_COLS * sizeof *tile);
  double *wk = w_t ? malloc((size_t)(k * w) * sizeof *wk) : NULL;
  double *out = out_t ? calloc(out_n, sizeof *out) : c;
  if (tile == NULL || (w_t && wk == NULL) || out == NULL) {
    free(tile), free(wk);
    if (out != c) free(out);
    return tsr_fail(err, TSR_ENOMEM, "matmul: out of memory for a %lld-wide skinny product", (long long)w);
  }
  if (w_t) transpose(wb->data, w, k, wk);  /* W stored [w, k] */
  if (!out_t) memset(c, 0, out_n * sizeof *c);
  run_tiles(x, xb, w_t ? wk : wb->data, w, out, tile);
  if (out_t) transpose(out, xb ? xr : w, xb ? w : xc, c);
  free(tile), free(wk);
  if (out != c) free(out);
  return 1;
}

/* A stored integer chunk's tile, converted as astype to f64 does. */
static void load_plain(const tsr_k_xsrc *x, int64_t r0, int64_t nr, int64_t c0, int64_t nc, double *tile)
{
  const tsr_buf *b = x->arg;
  size_t es = tsr_dtype_size(b->meta.dtype);
  for (int64_t r = 0; r < nr; r++)
    tsr_k_load_f64(b->meta.dtype, (const char *)b->data + (size_t)((r0 + r) * x->cols + c0) * es, (size_t)nc,
                   tile + r * nc);
}

int tsr_k_matmul_skinny(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const tsr_buf *a, const tsr_buf *b,
                        double *c, tsr_errbuf *err)
{
  (void)m, (void)n;
  bool x_is_a = !tsr_k_is_float(a->meta.dtype) && b->meta.dtype == TSR_F64;
  bool x_is_b = !tsr_k_is_float(b->meta.dtype) && a->meta.dtype == TSR_F64;
  if (!x_is_a && !x_is_b) return 0;
  const tsr_buf *x = x_is_a ? a : b;
  tsr_k_xsrc src = {x->meta.shape[0], x->meta.shape[1], load_plain, x};
  return tsr_k_skinny_x(&src, x_is_a, ta, tb, k, x_is_a ? b : a, c, err);
}
