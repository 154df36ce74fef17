/* kernels/cpu/matmul_random.c — matmul_random: a product with a random
 * chunk X that is never stored whole. X is described by a random op's
 * params (`dist` names the op; seed, dtype, shape, global_shape, offset,
 * low, high as for it) and generated piece by piece, with exactly the
 * values the random op would give; B is input 0.
 *
 *   side "xb":  X @ B    X [r, c], B [c, n] → [r, n]
 *   side "xtb": Xᵀ @ B   X [r, c], B [r, n] → [c, n]
 *   side "bx":  B @ X    B [m, r], X [r, c] → [m, c]
 *   side "btx": Bᵀ @ X   B [r, m], X [r, c] → [m, c]
 *
 * dtype: B's when B is float, else X's when X is float, else f64; two
 * float dtypes must match (as for matmul). An integer B is converted whole
 * (B is the small operand here).
 *
 * f64 products (the randomized-SVD case) generate X a small tile at a time
 * straight as f64 (random.c converts integers on the fly) and feed each
 * tile, still in cache, to the skinny kernels of gemm_skinny.c. Each output
 * element is then one fma chain over the inner index in order, so the bytes
 * depend on neither the tiling nor the CPU. f32 products generate row
 * panels of about PANEL_BYTES, convert integer panels, and go through BLAS.
 * Either way memory stays bounded whatever X's size, and the blocking
 * depends only on the shapes, so results are deterministic. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* f32: rows per BLAS panel (about this many bytes of X). */
#define PANEL_BYTES ((size_t)8 << 20)
/* f64: X tiles (rows x cols) per kernel call; constants, so the blocking
 * depends on nothing but the shapes (results do not depend on it at all,
 * see gemm_skinny.c). */
#define XB_TILE_ROWS 32
#define XB_TILE_COLS 256
#define BTX_TILE_ROWS 64
#define BTX_TILE_COLS 512
#define XBT_TILE_ROWS 64
#define XBT_TILE_COLS 128

typedef enum { SIDE_XB, SIDE_XTB, SIDE_BX, SIDE_BTX } mr_side;

typedef struct mr_plan {
  mr_side side;
  tsr_k_gen x;
  tsr_dtype dtype;  /* of the product */
  int64_t m, n;     /* output shape */
} mr_plan;

static int mr_side_param(const tsr_params *p, mr_side *side_p, tsr_errbuf *err)
{
  static const char *names[] = {"xb", "xtb", "bx", "btx"};
  const char *side;
  int rc = tsr_params_get_str(p, "side", &side, err);
  if (rc != 0) return tsr_k_param_fail("matmul_random", rc, err);
  for (int i = 0; i < 4; i++)
    if (strcmp(side, names[i]) == 0) {
      *side_p = (mr_side)i;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "matmul_random: side '%s' is not one of xb, xtb, bx, btx", side);
}

/* Parses side, dist and X, and checks B against X. */
static int mr_plan_make(const tsr_params *p, const tsr_meta *b, mr_plan *pl, tsr_errbuf *err)
{
  const char *dist;
  int rc = mr_side_param(p, &pl->side, err);
  if (rc == 0 && (rc = tsr_params_get_str(p, "dist", &dist, err)) != 0) rc = tsr_k_param_fail("matmul_random", rc, err);
  if (rc == 0 && (rc = tsr_k_gen_parse(dist, p, &pl->x, err)) != 0) rc = tsr_k_param_fail("matmul_random", rc, err);
  if (rc != 0) return rc;
  tsr_meta xm;
  tsr_k_meta_set(&xm, pl->x.dtype, pl->x.grid.ndim, pl->x.grid.shape);
  if (xm.ndim != 2 || b->ndim != 2)
    return tsr_fail(err, TSR_ESHAPE, "matmul_random: X %s and B %s must be 2-D", tsr_k_str(&xm).s, tsr_k_str(b).s);
  bool fx = tsr_k_is_float(xm.dtype), fb = tsr_k_is_float(b->dtype);
  if (fx && fb && xm.dtype != b->dtype)
    return tsr_fail(err, TSR_ESHAPE, "matmul_random: X is %s but B is %s (float dtypes must match)",
                    tsr_k_str(&xm).s, tsr_k_str(b).s);
  pl->dtype = fb ? b->dtype : fx ? xm.dtype : TSR_F64;
  int64_t r = xm.shape[0], c = xm.shape[1];
  bool x_left = pl->side == SIDE_XB || pl->side == SIDE_XTB;
  int64_t x_inner = pl->side == SIDE_XB ? c : r, b_inner = pl->side == SIDE_BX ? b->shape[1] : b->shape[0];
  if (x_inner != b_inner)
    return tsr_fail(err, TSR_ESHAPE, "matmul_random: inner dimensions differ: %s%s @ %s", tsr_k_str(x_left ? &xm : b).s,
                    pl->side == SIDE_XTB || pl->side == SIDE_BTX ? ".T" : "", tsr_k_str(x_left ? b : &xm).s);
  pl->m = pl->side == SIDE_XB ? r : pl->side == SIDE_XTB ? c : pl->side == SIDE_BX ? b->shape[0] : b->shape[1];
  pl->n = x_left ? b->shape[1] : c;
  if (r > INT_MAX || c > INT_MAX || b->shape[0] > INT_MAX || b->shape[1] > INT_MAX)
    return tsr_fail(err, TSR_ESHAPE, "matmul_random: a dimension of X %s or B %s exceeds BLAS's int range",
                    tsr_k_str(&xm).s, tsr_k_str(b).s);
  return 0;
}

static int mr_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  mr_plan pl;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "matmul_random: takes 1 input, got %d", n);
  int rc = mr_plan_make(p, &in[0], &pl, err);
  if (rc != 0) return rc;
  int64_t shape[2] = {pl.m, pl.n};
  tsr_k_meta_set(out, pl.dtype, 2, shape);
  return 0;
}

/* ---- f32 products: X a row panel at a time through BLAS ---- */

/* Rows [r0, r0+w) of X into xp (in the product dtype; raw is scratch for
 * an X of another dtype). */
static void mr_panel(const mr_plan *pl, int64_t r0, int64_t w, void *raw, void *xp)
{
  tsr_k_gen g = pl->x;
  g.grid.offset[0] += r0;
  g.grid.shape[0] = w;
  if (g.dtype == pl->dtype) {
    tsr_k_gen_fill(&g, xp);
    return;
  }
  tsr_k_gen_fill(&g, raw);
  tsr_k_to_float(pl->dtype, g.dtype, raw, (size_t)(w * g.grid.shape[1]), xp);
}

/* One panel's contribution to C; beta 0 on the first accumulating panel. */
static void mr_gemm(const mr_plan *pl, const void *xp, int64_t r0, int64_t w, const tsr_meta *bm, const char *b,
                    char *c)
{
  int64_t xc = pl->x.grid.shape[1], bc = bm->shape[1];
  size_t es = tsr_dtype_size(pl->dtype);
  double beta = r0 == 0 ? 0.0 : 1.0;
  switch (pl->side) {
  case SIDE_XB:
    tsr_k_gemm(pl->dtype, false, false, w, pl->n, xc, xp, xc, b, bc, 0.0, c + (size_t)(r0 * pl->n) * es, pl->n);
    break;
  case SIDE_XTB:
    tsr_k_gemm(pl->dtype, true, false, pl->m, pl->n, w, xp, xc, b + (size_t)(r0 * bc) * es, bc, beta, c, pl->n);
    break;
  case SIDE_BX:
    tsr_k_gemm(pl->dtype, false, false, pl->m, pl->n, w, b + (size_t)r0 * es, bc, xp, xc, beta, c, pl->n);
    break;
  case SIDE_BTX:
    tsr_k_gemm(pl->dtype, true, false, pl->m, pl->n, w, b + (size_t)(r0 * bc) * es, bc, xp, xc, beta, c, pl->n);
    break;
  }
}

static int mr_panels(const mr_plan *pl, const tsr_meta *bm, const char *b, char *c, tsr_errbuf *err)
{
  int64_t xr = pl->x.grid.shape[0], xc = pl->x.grid.shape[1];
  size_t es = tsr_dtype_size(pl->dtype);
  int64_t rows = (int64_t)(PANEL_BYTES / ((size_t)xc * es));
  rows = rows < 1 ? 1 : rows > xr ? xr : rows;
  size_t panel = (size_t)(rows * xc);
  void *xp = malloc(panel * es), *raw = pl->x.dtype != pl->dtype ? malloc(panel * tsr_dtype_size(pl->x.dtype)) : NULL;
  if (xp == NULL || (pl->x.dtype != pl->dtype && raw == NULL)) {
    free(xp), free(raw);
    return tsr_fail(err, TSR_ENOMEM, "matmul_random: out of memory for a %lld-row panel", (long long)rows);
  }
  for (int64_t r0 = 0; r0 < xr; r0 += rows) {
    int64_t w = xr - r0 < rows ? xr - r0 : rows;
    mr_panel(pl, r0, w, raw, xp);
    mr_gemm(pl, xp, r0, w, bm, b, c);
  }
  free(xp), free(raw);
  return 0;
}

/* ---- f64 products: X a tile at a time into the skinny kernels ---- */

/* Tile [r0, r0+nr) x [c0, c0+nc) of X as f64, contiguous (row stride nc). */
static void mr_tile(const mr_plan *pl, int64_t r0, int64_t nr, int64_t c0, int64_t nc, double *tile)
{
  tsr_k_gen g = pl->x;
  g.grid.offset[0] += r0;
  g.grid.offset[1] += c0;
  g.grid.shape[0] = nr;
  g.grid.shape[1] = nc;
  tsr_k_gen_fill_f64(&g, tile);
}

/* C[m, xc] (row stride ldc) += B[xr, m]ᵀ X, tile by tile: row tiles in
 * order, so each element of C sums X's rows in order. */
static void mr_btx(const mr_plan *pl, int64_t m, const double *b, double *c, int64_t ldc, double *tile)
{
  int64_t xr = pl->x.grid.shape[0], xc = pl->x.grid.shape[1];
  for (int64_t r0 = 0; r0 < xr; r0 += BTX_TILE_ROWS)
    for (int64_t c0 = 0; c0 < xc; c0 += BTX_TILE_COLS) {
      int64_t nr = xr - r0 < BTX_TILE_ROWS ? xr - r0 : BTX_TILE_ROWS;
      int64_t nc = xc - c0 < BTX_TILE_COLS ? xc - c0 : BTX_TILE_COLS;
      mr_tile(pl, r0, nr, c0, nc, tile);
      tsr_k_gemm_btx_f64(TSR_K_ISA_BEST, nr, nc, m, b + r0 * m, m, tile, nc, c + c0, ldc);
    }
}

/* a [r, c] transposed into t [c, r]. */
static void transpose_f64(const double *a, int64_t r, int64_t c, double *t)
{
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) t[j * r + i] = a[i * c + j];
}

/* C[xr, n] = X B through Cᵀ = Bᵀ Xᵀ: X tiles generated transposed (rows in
 * SIMD lanes) go to the btx kernel, which keeps all its lanes busy where
 * xb's 20-wide rows leave some idle. Column tiles in order within a row
 * tile: each element is the same fma chain as mr_xb's. ct: n x xr scratch. */
static void mr_xb_t(const mr_plan *pl, const double *b, double *c, double *tile, double *ct)
{
  int64_t xr = pl->x.grid.shape[0], xc = pl->x.grid.shape[1], n = pl->n;
  for (int64_t r0 = 0; r0 < xr; r0 += XBT_TILE_ROWS)
    for (int64_t c0 = 0; c0 < xc; c0 += XBT_TILE_COLS) {
      int64_t nr = xr - r0 < XBT_TILE_ROWS ? xr - r0 : XBT_TILE_ROWS;
      int64_t nc = xc - c0 < XBT_TILE_COLS ? xc - c0 : XBT_TILE_COLS;
      tsr_k_gen g = pl->x;
      g.grid.offset[0] += r0, g.grid.offset[1] += c0;
      g.grid.shape[0] = nr, g.grid.shape[1] = nc;
      tsr_k_gen_fill_f64_t(&g, tile);
      tsr_k_gemm_btx_f64(TSR_K_ISA_BEST, nc, nr, n, b + c0 * n, n, tile, nr, ct + r0, xr);
    }
  transpose_f64(ct, n, xr, c);
}

/* C[xr, n] += X B, tile by tile: column tiles in order within a row tile,
 * so each element of C sums X's columns in order. */
static void mr_xb(const mr_plan *pl, const double *b, double *c, double *tile)
{
  int64_t xr = pl->x.grid.shape[0], xc = pl->x.grid.shape[1], n = pl->n;
  for (int64_t r0 = 0; r0 < xr; r0 += XB_TILE_ROWS)
    for (int64_t c0 = 0; c0 < xc; c0 += XB_TILE_COLS) {
      int64_t nr = xr - r0 < XB_TILE_ROWS ? xr - r0 : XB_TILE_ROWS;
      int64_t nc = xc - c0 < XB_TILE_COLS ? xc - c0 : XB_TILE_COLS;
      mr_tile(pl, r0, nr, c0, nc, tile);
      tsr_k_gemm_xb_f64(TSR_K_ISA_BEST, nr, nc, n, tile, nc, b + c0 * n, n, c + r0 * n, n);
    }
}

/* xb goes through btx where X can be generated transposed (mr_xb_t);
 * xtb and bx go through btx: Xᵀ B = (Bᵀ X)ᵀ, computed into a scratch Cᵀ,
 * and B X = (Bᵀ)ᵀ X with B transposed first. Either way each element is
 * the same fma chain a direct kernel would compute. */
static int mr_tiles(const mr_plan *pl, const tsr_meta *bm, const double *b, double *c, tsr_errbuf *err)
{
  int64_t xr = pl->x.grid.shape[0], xc = pl->x.grid.shape[1];
  bool xb_t = pl->side == SIDE_XB && tsr_k_gen_fill_f64_t_ok(&pl->x);
  size_t tile_n = (size_t)(xb_t                  ? XBT_TILE_ROWS * XBT_TILE_COLS
                           : pl->side == SIDE_XB ? XB_TILE_ROWS * XB_TILE_COLS
                                                 : BTX_TILE_ROWS * BTX_TILE_COLS);
  size_t scratch_n = xb_t                  ? (size_t)(pl->n * xr)
                     : pl->side == SIDE_XTB ? (size_t)(pl->n * xc)
                     : pl->side == SIDE_BX  ? (size_t)(xr * pl->m)
                                            : 1;
  double *tile = malloc(tile_n * sizeof *tile), *scratch = calloc(scratch_n, sizeof *scratch);
  if (tile == NULL || scratch == NULL) {
    free(tile), free(scratch);
    return tsr_fail(err, TSR_ENOMEM, "matmul_random: out of memory for a tile");
  }
  memset(c, 0, (size_t)(pl->m * pl->n) * sizeof *c);
  switch (pl->side) {
  case SIDE_XB:
    if (xb_t) mr_xb_t(pl, b, c, tile, scratch);
    else mr_xb(pl, b, c, tile);
    break;
  case SIDE_BTX: mr_btx(pl, pl->m, b, c, xc, tile); break;
  case SIDE_BX:
    transpose_f64(b, bm->shape[0], bm->shape[1], scratch);
    mr_btx(pl, pl->m, scratch, c, xc, tile);
    break;
  case SIDE_XTB:
    mr_btx(pl, pl->n, b, scratch, xc, tile);
    transpose_f64(scratch, pl->n, xc, c);
    break;
  }
  free(tile), free(scratch);
  return 0;
}

static int mr_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)n_in;
  mr_plan pl;
  int rc = mr_plan_make(p, &in[0].meta, &pl, err);
  if (rc != 0) return rc;
  int64_t xr = pl.x.grid.shape[0], xc = pl.x.grid.shape[1];
  size_t es = tsr_dtype_size(pl.dtype), bcount = (size_t)tsr_meta_count(&in[0].meta);
  if (xr == 0 || xc == 0 || bcount == 0) {
    memset(out->data, 0, out->nbytes);  /* an empty inner dimension sums to 0 */
    return 0;
  }
  void *bconv = in[0].meta.dtype != pl.dtype ? malloc(bcount * es) : NULL;
  if (in[0].meta.dtype != pl.dtype && bconv == NULL)
    return tsr_fail(err, TSR_ENOMEM, "matmul_random: out of memory converting B");
  if (bconv != NULL) tsr_k_to_float(pl.dtype, in[0].meta.dtype, in[0].data, bcount, bconv);
  const char *b = bconv != NULL ? bconv : in[0].data;
  if (pl.dtype == TSR_F64) rc = mr_tiles(&pl, &in[0].meta, (const double *)b, out->data, err);
  else rc = mr_panels(&pl, &in[0].meta, b, out->data, err);
  free(bconv);
  return rc;
}

const tsr_op_def tsr_op_matmul_random = {"matmul_random", 1, 1, mr_infer, mr_cpu, false, NULL};
