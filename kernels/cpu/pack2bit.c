/* kernels/cpu/pack2bit.c — 2-bit genotype packing: pack2bit, unpack2bit and
 * matmul_2bit, a product with a packed matrix that is unpacked a row panel
 * at a time, never whole. Four genotypes a byte, so a 200 GB u8 genotype
 * matrix lives in 50 GB.
 *
 * Format: the last axis of a u8 array, of length c, packs into ceil(c/4)
 * bytes; element j goes to byte j/4, bits 2(j%4) and 2(j%4)+1 (the first
 * element in the low bits). pack2bit stores values above 3 as 3 (3 is
 * "missing" in the usual genotype codings) and zeroes the pad bits of a
 * row's last byte; unpack2bit ignores pad bits. So unpack2bit(pack2bit(x))
 * == x exactly whenever every x is 0..3.
 *
 * matmul_2bit: input 0 the packed X [r, ceil(c/4)] with param cols = c,
 * input 1 B (f32 or f64), param side; the output has B's dtype:
 *   "xb"  (default): X @ B,  B [c, n] → [r, n]
 *   "btx":           Bᵀ @ X, B [r, m] → [m, c]
 * Here computed in f64 (row panels through dgemm), rounded once to f32
 * for an f32 B. The CUDA variant sums exactly on int8 tensor cores with B
 * quantized per column (22 bits for f32, 30 for f64): within f32 GEMM
 * accuracy of this for f32, within 2^-31 of each column's largest |B| for
 * f64; not the same bytes (docs/kernels-cuda.md). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* f64 elements of unpacked X per panel (8 MB). */
#define PANEL_ELEMS ((int64_t)1 << 20)

static int64_t packed_len(int64_t c)
{
  return c / 4 + (c % 4 != 0);
}

/* ---------- pack2bit / unpack2bit ---------- */

static int pack_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "pack2bit: takes 1 input, got %d", n);
  if (in[0].dtype != TSR_U8 || in[0].ndim < 1)
    return tsr_fail(err, TSR_ESHAPE, "pack2bit: input must be u8 with at least 1 dimension, got %s",
                    tsr_k_str(&in[0]).s);
  *out = in[0];
  out->shape[out->ndim - 1] = packed_len(in[0].shape[in[0].ndim - 1]);
  return 0;
}

static int pack_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n, (void)err;
  const tsr_meta *m = &in[0].meta;
  int64_t c = m->shape[m->ndim - 1], cb = packed_len(c);
  int64_t rows = c == 0 ? 0 : tsr_meta_count(m) / c;
  const uint8_t *x = in[0].data;
  uint8_t *y = out->data;
  for (int64_t r = 0; r < rows; r++, x += c, y += cb)
    for (int64_t j = 0; j < cb; j++) {
      unsigned b = 0;
      for (int s = 0; s < 4 && 4 * j + s < c; s++) {
        unsigned v = x[4 * j + s];
        b |= (v > 3 ? 3u : v) << (2 * s);
      }
      y[j] = (uint8_t)b;
    }
  return 0;
}

/* Reads cols (>= 0) and checks the packed input's last dimension. */
static int unpack_check(const char *op, const tsr_params *p, const tsr_meta *x, int64_t *cols_p, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, "cols", cols_p, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  if (*cols_p < 0) return tsr_fail(err, TSR_EINVAL, "%s: cols must be >= 0, got %lld", op, (long long)*cols_p);
  if (x->dtype != TSR_U8 || x->ndim < 1 || x->shape[x->ndim - 1] != packed_len(*cols_p))
    return tsr_fail(err, TSR_ESHAPE, "%s: packed input must be u8 with a last dimension of ceil(%lld/4) = %lld, got %s",
                    op, (long long)*cols_p, (long long)packed_len(*cols_p), tsr_k_str(x).s);
  return 0;
}

static int unpack_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t cols;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "unpack2bit: takes 1 input, got %d", n);
  int rc = unpack_check("unpack2bit", p, &in[0], &cols, err);
  if (rc != 0) return rc;
  *out = in[0];
  out->shape[out->ndim - 1] = cols;
  return 0;
}

static int unpack_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n, (void)err;
  const tsr_meta *m = &out->meta;
  int64_t c = m->shape[m->ndim - 1], cb = packed_len(c);
  int64_t rows = c == 0 ? 0 : tsr_meta_count(m) / c;
  const uint8_t *x = in[0].data;
  uint8_t *y = out->data;
  for (int64_t r = 0; r < rows; r++, x += cb, y += c)
    for (int64_t j = 0; j < c; j++) y[j] = (uint8_t)((x[j / 4] >> (2 * (j % 4))) & 3u);
  return 0;
}

/* ---------- matmul_2bit ---------- */

typedef struct mm2_plan {
  bool btx;
  int64_t r, c, k;  /* X is r x c; k is n (xb) or m (btx) */
} mm2_plan;

static int mm2_side(const tsr_params *p, bool *btx_p, tsr_errbuf *err)
{
  const char *side = "xb";
  if (tsr_params_find(p, "side") != NULL) {
    int rc = tsr_params_get_str(p, "side", &side, err);
    if (rc != 0) return tsr_k_param_fail("matmul_2bit", rc, err);
  }
  if (strcmp(side, "xb") != 0 && strcmp(side, "btx") != 0)
    return tsr_fail(err, TSR_EINVAL, "matmul_2bit: side '%s' is not xb or btx", side);
  *btx_p = side[0] == 'b';
  return 0;
}

static int mm2_check(const tsr_params *p, const tsr_meta *in, int n, mm2_plan *pl, tsr_errbuf *err)
{
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "matmul_2bit: takes 2 inputs, got %d", n);
  int rc = mm2_side(p, &pl->btx, err);
  if (rc == 0) rc = unpack_check("matmul_2bit", p, &in[0], &pl->c, err);
  if (rc != 0) return rc;
  const tsr_meta *x = &in[0], *b = &in[1];
  if (x->ndim != 2 || b->ndim != 2 || !tsr_k_is_float(b->dtype))
    return tsr_fail(err, TSR_ESHAPE, "matmul_2bit: needs a 2-D packed X and a 2-D f32/f64 B, got %s and %s",
                    tsr_k_str(x).s, tsr_k_str(b).s);
  pl->r = x->shape[0];
  int64_t inner = pl->btx ? pl->r : pl->c;
  if (b->shape[0] != inner)
    return tsr_fail(err, TSR_ESHAPE, "matmul_2bit: side %s needs B with %lld rows (X is %lld x %lld), got %s",
                    pl->btx ? "btx" : "xb", (long long)inner, (long long)pl->r, (long long)pl->c, tsr_k_str(b).s);
  pl->k = b->shape[1];
  if (pl->r > INT_MAX || pl->c > INT_MAX || pl->k > INT_MAX)
    return tsr_fail(err, TSR_ESHAPE, "matmul_2bit: a dimension of X [%lld, %lld] or B %s exceeds BLAS's int range",
                    (long long)pl->r, (long long)pl->c, tsr_k_str(b).s);
  return 0;
}

static int mm2_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  mm2_plan pl;
  int rc = mm2_check(p, in, n, &pl, err);
  if (rc != 0) return rc;
  int64_t shape[2] = {pl.btx ? pl.k : pl.r, pl.btx ? pl.c : pl.k};
  tsr_k_meta_set(out, in[1].dtype == TSR_F64 ? TSR_F64 : TSR_F32, 2, shape);
  return 0;
}

/* Rows [r0, r0+w) of packed X (c columns) unpacked into xp as f64. */
static void unpack_panel(const uint8_t *x, int64_t c, int64_t r0, int64_t w, double *xp)
{
  int64_t cb = packed_len(c);
  for (int64_t r = 0; r < w; r++) {
    const uint8_t *row = x + (r0 + r) * cb;
    for (int64_t j = 0; j < c; j++) xp[r * c + j] = (double)((row[j / 4] >> (2 * (j % 4))) & 3u);
  }
}

/* n f64 sums into out as odt (f64 as they are, f32 rounded once). */
static void store_sums(const double *acc, int64_t n, tsr_dtype odt, void *out, int64_t at)
{
  if (odt == TSR_F64) memcpy((double *)out + at, acc, (size_t)n * sizeof *acc);
  else
    for (int64_t i = 0; i < n; i++) ((float *)out)[at + i] = (float)acc[i];
}

/* out[r, n] = X B, a row panel at a time (panels are output rows). */
static void mm2_xb(const mm2_plan *pl, const uint8_t *x, const double *b, int64_t rows, double *xp, double *cp,
                   tsr_dtype odt, void *out)
{
  for (int64_t r0 = 0; r0 < pl->r; r0 += rows) {
    int64_t w = pl->r - r0 < rows ? pl->r - r0 : rows;
    unpack_panel(x, pl->c, r0, w, xp);
    tsr_k_gemm(TSR_F64, false, false, w, pl->k, pl->c, xp, pl->c, b, pl->k, 0.0, cp, pl->k);
    store_sums(cp, w * pl->k, odt, out, r0 * pl->k);
  }
}

/* acc[m, c] = Bᵀ X accumulated over row panels; b is B [r, m] as f64. */
static void mm2_btx(const mm2_plan *pl, const uint8_t *x, const double *b, int64_t rows, double *xp, double *acc,
                    tsr_dtype odt, void *out)
{
  memset(acc, 0, (size_t)(pl->k * pl->c) * sizeof *acc);
  for (int64_t r0 = 0; r0 < pl->r; r0 += rows) {
    int64_t w = pl->r - r0 < rows ? pl->r - r0 : rows;
    unpack_panel(x, pl->c, r0, w, xp);
    tsr_k_gemm(TSR_F64, true, false, pl->k, pl->c, w, b + r0 * pl->k, pl->k, xp, pl->c, 1.0, acc, pl->c);
  }
  store_sums(acc, pl->k * pl->c, odt, out, 0);
}

static int mm2_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  mm2_plan pl;
  tsr_meta metas[2] = {in[0].meta, in[1].meta};
  int rc = mm2_check(p, metas, n, &pl, err);
  if (rc != 0) return rc;
  if (pl.r == 0 || pl.c == 0 || pl.k == 0) {
    memset(out->data, 0, out->nbytes);  /* an empty inner dimension sums to 0 */
    return 0;
  }
  int64_t rows = PANEL_ELEMS / pl.c < 1 ? 1 : PANEL_ELEMS / pl.c, bcount = tsr_meta_count(&metas[1]);
  rows = rows > pl.r ? pl.r : rows;
  bool conv = metas[1].dtype != TSR_F64;
  double *b64 = conv ? malloc((size_t)bcount * sizeof *b64) : NULL, *xp = malloc((size_t)(rows * pl.c) * sizeof *xp);
  size_t acc_n = (size_t)(pl.btx ? pl.k * pl.c : rows * pl.k);
  double *acc = malloc(acc_n * sizeof *acc);
  if ((conv && b64 == NULL) || xp == NULL || acc == NULL) {
    free(b64), free(xp), free(acc);
    return tsr_fail(err, TSR_ENOMEM, "matmul_2bit: out of memory for a %lld-row panel", (long long)rows);
  }
  if (conv) tsr_k_to_float(TSR_F64, metas[1].dtype, in[1].data, (size_t)bcount, b64);
  const double *b = conv ? b64 : in[1].data;
  if (pl.btx) mm2_btx(&pl, in[0].data, b, rows, xp, acc, out->meta.dtype, out->data);
  else mm2_xb(&pl, in[0].data, b, rows, xp, acc, out->meta.dtype, out->data);
  free(b64), free(xp), free(acc);
  return 0;
}

/* ---------- randint_packed ---------- */

/* randint's params (docs/random.md) for a u8 chunk of values 0..3, the
 * chunk written 2-bit packed: pack2bit(randint(...)) without the u8 chunk
 * in between (graphs/encode.c uses it for a packed random array). */
static int rp_parse(const tsr_params *p, tsr_k_gen *g, tsr_errbuf *err)
{
  int rc = tsr_k_gen_parse("randint", p, g, err);
  if (rc != 0) return tsr_k_param_fail("randint_packed", rc, err);
  if (g->dtype != TSR_U8 || g->low < 0 || g->low + (int64_t)g->range > 4 || g->grid.ndim < 1)
    return tsr_fail(err, TSR_EINVAL, "randint_packed: needs u8 values in 0..3 and at least 1 dimension");
  return 0;
}

static int rp_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  tsr_k_gen g;
  int rc = rp_parse(p, &g, err);
  if (rc != 0) return rc;
  tsr_k_meta_set(out, TSR_U8, g.grid.ndim, g.grid.shape);
  out->shape[g.grid.ndim - 1] = packed_len(g.grid.shape[g.grid.ndim - 1]);
  return 0;
}

/* A row (the last axis) at a time: generated into row, packed into out. */
static int rp_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  tsr_k_gen g, rowg;
  int rc = rp_parse(p, &g, err);
  if (rc != 0) return rc;
  int nd = g.grid.ndim;
  int64_t c = g.grid.shape[nd - 1], rows = c == 0 ? 0 : tsr_meta_count(&out->meta) / packed_len(c);
  uint8_t *row = malloc(c > 0 ? (size_t)c : 1);
  if (row == NULL) return tsr_fail(err, TSR_ENOMEM, "randint_packed: out of memory for a row of %lld", (long long)c);
  rowg = g;
  for (int64_t r = 0; r < rows; r++) {
    int64_t rest = r;
    for (int d = nd - 2; d >= 0; d--) {  /* row r's place in the chunk, then in the array */
      rowg.grid.shape[d] = 1;
      rowg.grid.offset[d] = g.grid.offset[d] + rest % g.grid.shape[d];
      rest /= g.grid.shape[d];
    }
    tsr_k_gen_fill(&rowg, row);
    tsr_buf rb = {out->meta, row, (size_t)c}, ob = {out->meta, (uint8_t *)out->data + r * packed_len(c), 0};
    rb.meta.ndim = 1, rb.meta.shape[0] = c;
    pack_cpu(NULL, &rb, 1, &ob, NULL);
  }
  free(row);
  return 0;
}

const tsr_op_def tsr_op_randint_packed = {"randint_packed", 0, 0, rp_infer, rp_cpu, false, NULL};
const tsr_op_def tsr_op_pack2bit = {"pack2bit", 1, 1, pack_infer, pack_cpu, false, NULL};
const tsr_op_def tsr_op_unpack2bit = {"unpack2bit", 1, 1, unpack_infer, unpack_cpu, false, NULL};
const tsr_op_def tsr_op_matmul_2bit = {"matmul_2bit", 2, 2, mm2_infer, mm2_cpu, false, NULL};
