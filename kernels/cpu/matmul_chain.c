/* kernels/cpu/matmul_chain.c — matmul_chain: a product with a stored
 * block X whose elements pass through a chain of per-column elementwise
 * steps on the way in, so that the transformed matrix Z is never stored.
 * This is how a standardized genotype matrix enters an SVD: Z =
 * fillnan((astype(X, f64) − μ) / σ, 0) with μ, σ one value per column
 * (graphs/matmul.c finds such chains behind a matmul's operand).
 *
 * Inputs: X, B, then the chain's vectors. X is u8/i32/i64/f32/f64 as
 * stored, or 2-bit packed (param `cols` = its logical column count). B is
 * f64 (Z is computed in f64). Params:
 *   side        "xb": Z @ B (B [c, n]); "xtb": Zᵀ @ B (B [r, n]);
 *               "bx": B @ Z (B [m, r]); "btx": Bᵀ @ Z (B [r, m])
 *   missing     int: X's missing-value sentinel, loaded as NaN
 *   steps       ints, one code per step (enum below), applied in order
 *   step_inputs ints: the input index (>= 2) of a step's vector (one f64
 *               value per column of X), or -1
 *   step_values floats, two per step: the scalars of scale (factor,
 *               offset) and fillnan (value)
 * Each element is computed exactly as the elementwise ops would (one IEEE
 * f64 operation per step, in order), so Z's values equal the stored
 * chain's to the bit. The product then runs on the skinny kernels (each
 * output one in-order fma chain: the same bytes for u8, packed or any
 * other form of the same values, and for every tiling) when B is at most
 * 64 wide, else on dgemm over row panels of Z. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define PANEL_ELEMS ((int64_t)1 << 20)

/* A task's parsed chain and what its tiles read. */
typedef struct chain {
  tsr_k_chain k;
  const tsr_buf *x;
  const double *vec[TSR_K_CHAIN_MAX];  /* a step's vector (per column of X), or NULL */
  double *lut;                         /* packed X: Z's 4 possible values per column, [cols][4] */
} chain;

static int64_t packed_len(int64_t c) { return c / 4 + (c % 4 != 0); }

/* ---------- parsing (shared with the CUDA variant: ops.h) ---------- */

static int parse_side(const tsr_params *p, int *side_p, tsr_errbuf *err)
{
  static const char *const sides[] = {"xb", "xtb", "bx", "btx"};
  const char *side;
  int rc = tsr_params_get_str(p, "side", &side, err);
  if (rc != 0) return tsr_k_param_fail("matmul_chain", rc, err);
  for (int i = 0; i < 4; i++)
    if (strcmp(side, sides[i]) == 0) {
      *side_p = i;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "matmul_chain: side '%s' is not xb, xtb, bx or btx", side);
}

/* X's logical shape and form: packed when `cols` is given. */
static int parse_x(const tsr_params *p, const tsr_meta *x, tsr_k_chain *ch, tsr_errbuf *err)
{
  ch->packed = tsr_params_find(p, "cols") != NULL;
  if (x->ndim != 2) return tsr_fail(err, TSR_ESHAPE, "matmul_chain: X must be 2-D, got %s", tsr_k_str(x).s);
  ch->rows = x->shape[0];
  ch->cols = x->shape[1];
  if (ch->packed) {
    int rc = tsr_params_get_int(p, "cols", &ch->cols, err);
    if (rc != 0) return tsr_k_param_fail("matmul_chain", rc, err);
    if (x->dtype != TSR_U8 || ch->cols < 0 || x->shape[1] != packed_len(ch->cols))
      return tsr_fail(err, TSR_ESHAPE, "matmul_chain: a packed X of %lld columns must be u8 [r, %lld], got %s",
                      (long long)ch->cols, (long long)packed_len(ch->cols), tsr_k_str(x).s);
  }
  ch->has_missing = tsr_params_find(p, "missing") != NULL;
  int rc = ch->has_missing ? tsr_params_get_int(p, "missing", &ch->missing, err) : 0;
  return rc == 0 ? 0 : tsr_k_param_fail("matmul_chain", rc, err);
}

/* The step list against the inputs' metas. */
static int parse_steps(const tsr_params *p, const tsr_meta *in, int n_in, tsr_k_chain *ch, tsr_errbuf *err)
{
  const int64_t *codes = NULL, *inputs = NULL;
  size_t n = 0, ni = 0;
  const tsr_param *vals = tsr_params_find(p, "step_values");
  int rc = tsr_params_find(p, "steps") ? tsr_params_get_ints(p, "steps", &codes, &n, err) : 0;
  if (rc == 0 && n > 0) rc = tsr_params_get_ints(p, "step_inputs", &inputs, &ni, err);
  if (rc != 0) return tsr_k_param_fail("matmul_chain", rc, err);
  if (n > TSR_K_CHAIN_MAX || ni != n || (n > 0 && (vals == NULL || vals->type != TSR_PARAM_FLOATS || vals->n != 2 * n)))
    return tsr_fail(err, TSR_EINVAL, "matmul_chain: %zu steps need as many step_inputs and twice as many step_values (at most %d steps)",
                    n, TSR_K_CHAIN_MAX);
  for (size_t i = 0; i < n; i++) {
    if (codes[i] < TSR_K_STEP_ADD || codes[i] > TSR_K_STEP_FILLNAN)
      return tsr_fail(err, TSR_EINVAL, "matmul_chain: step %zu has unknown code %lld", i, (long long)codes[i]);
    bool wants_vec = codes[i] <= TSR_K_STEP_RDIV;
    if (wants_vec != (inputs[i] >= 2) || inputs[i] >= n_in)
      return tsr_fail(err, TSR_EINVAL, "matmul_chain: step %zu's input %lld is not a vector input (2..%d)", i,
                      (long long)inputs[i], n_in - 1);
    if (wants_vec && (in[inputs[i]].dtype != TSR_F64 || tsr_meta_count(&in[inputs[i]]) != ch->cols))
      return tsr_fail(err, TSR_ESHAPE, "matmul_chain: step %zu needs an f64 vector of %lld values, got %s", i,
                      (long long)ch->cols, tsr_k_str(&in[inputs[i]]).s);
    ch->codes[i] = (int)codes[i];
    ch->vec_input[i] = wants_vec ? (int)inputs[i] : -1;
    ch->values[2 * i] = vals->floats[2 * i];
    ch->values[2 * i + 1] = vals->floats[2 * i + 1];
  }
  ch->n_steps = (int)n;
  return 0;
}

/* B's outer extent for the side; checks it against Z. */
static int check_b(tsr_k_chain *ch, const tsr_meta *b, tsr_errbuf *err)
{
  bool b_inner_rows = ch->side != TSR_K_SIDE_BX;  /* xb, xtb, btx: B [inner, outer] */
  int64_t inner = ch->side == TSR_K_SIDE_XB ? ch->cols : ch->rows;
  if (b->ndim != 2 || b->dtype != TSR_F64)
    return tsr_fail(err, TSR_ESHAPE, "matmul_chain: B must be 2-D f64, got %s", tsr_k_str(b).s);
  if ((b_inner_rows ? b->shape[0] : b->shape[1]) != inner)
    return tsr_fail(err, TSR_ESHAPE, "matmul_chain: B %s does not fit Z [%lld, %lld] for this side", tsr_k_str(b).s,
                    (long long)ch->rows, (long long)ch->cols);
  ch->outer = b_inner_rows ? b->shape[1] : b->shape[0];
  return 0;
}

int tsr_k_chain_parse(const tsr_params *p, const tsr_meta *in, int n_in, tsr_k_chain *ch, tsr_errbuf *err)
{
  memset(ch, 0, sizeof *ch);
  if (n_in < 2) return tsr_fail(err, TSR_EINVAL, "matmul_chain: takes X, B and the chain's vectors, got %d inputs", n_in);
  int rc = parse_side(p, &ch->side, err);
  if (rc == 0) rc = parse_x(p, &in[0], ch, err);
  if (rc == 0) rc = parse_steps(p, in, n_in, ch, err);
  if (rc == 0) rc = check_b(ch, &in[1], err);
  return rc;
}

static int chain_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  tsr_k_chain ch;
  int rc = tsr_k_chain_parse(p, in, n, &ch, err);
  if (rc != 0) return rc;
  /* xb [r, outer], xtb [c, outer], bx and btx [outer, c] */
  int64_t shape[2] = {ch.side == TSR_K_SIDE_XB ? ch.rows : ch.side == TSR_K_SIDE_XTB ? ch.cols : ch.outer,
                      ch.side <= TSR_K_SIDE_XTB ? ch.outer : ch.cols};
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

/* ---------- tiles of Z ---------- */

/* Row r's columns [c0, c0+nc) of X as f64, missing values NaN. */
static void load_row(const chain *ch, int64_t r, int64_t c0, int64_t nc, double *t)
{
  if (ch->k.packed) {
    const uint8_t *row = (const uint8_t *)ch->x->data + r * packed_len(ch->k.cols);
    for (int64_t j = 0; j < nc; j++) t[j] = (double)((row[(c0 + j) / 4] >> (2 * ((c0 + j) % 4))) & 3u);
  } else {
    size_t es = tsr_dtype_size(ch->x->meta.dtype);
    tsr_k_load_f64(ch->x->meta.dtype, (const char *)ch->x->data + (size_t)(r * ch->k.cols + c0) * es, (size_t)nc, t);
  }
  if (ch->k.has_missing)
    for (int64_t j = 0; j < nc; j++)
      if (t[j] == (double)ch->k.missing) t[j] = NAN;
}

/* The steps over one row's columns [c0, c0+nc), in order. */
static void apply_steps(const chain *ch, int64_t c0, int64_t nc, double *t)
{
  for (int s = 0; s < ch->k.n_steps; s++) {
    int code = ch->k.codes[s];
    double a = ch->k.values[2 * s], b = ch->k.values[2 * s + 1];
    const double *v = ch->vec[s] != NULL ? ch->vec[s] + c0 : NULL;
    if (v != NULL)
      for (int64_t j = 0; j < nc; j++) t[j] = tsr_k_chain_step(code, t[j], v[j], a, b);
    else
      for (int64_t j = 0; j < nc; j++) t[j] = tsr_k_chain_step(code, t[j], 0.0, a, b);
  }
}

/* A packed X through a table: each column takes 4 values, so the steps
 * run once a task on those 4 (the same operations on the same inputs as
 * per element: the same bytes), and each element is one lookup. */
#define LUT_COLS 256

static double *make_lut(chain *ch)
{
  int64_t c = ch->k.cols;
  double *lut = malloc((size_t)(4 * (c > 0 ? c : 1)) * sizeof *lut), row[4][LUT_COLS];
  for (int64_t c0 = 0; lut != NULL && c0 < c; c0 += LUT_COLS) {
    int64_t nc = c - c0 < LUT_COLS ? c - c0 : LUT_COLS;
    for (int v = 0; v < 4; v++) {
      double x = ch->k.has_missing && v == ch->k.missing ? NAN : (double)v;
      for (int64_t j = 0; j < nc; j++) row[v][j] = x;
      apply_steps(ch, c0, nc, row[v]);
    }
    for (int64_t j = 0; j < nc; j++)
      for (int v = 0; v < 4; v++) lut[4 * (c0 + j) + v] = row[v][j];
  }
  return lut;
}

static void load_tile_packed(const chain *ch, int64_t r0, int64_t nr, int64_t c0, int64_t nc, double *tile)
{
  int64_t cb = packed_len(ch->k.cols);
  const double *lut = ch->lut + 4 * c0;
  for (int64_t r = 0; r < nr; r++) {
    const uint8_t *bytes = (const uint8_t *)ch->x->data + (r0 + r) * cb + c0 / 4;
    double *t = tile + r * nc;
    int64_t j = 0;
    for (; j + 4 <= nc; j += 4) {  /* c0 is a multiple of 4: a byte is 4 columns */
      unsigned b = bytes[j / 4];
      t[j] = lut[4 * j + (b & 3u)];
      t[j + 1] = lut[4 * j + 4 + ((b >> 2) & 3u)];
      t[j + 2] = lut[4 * j + 8 + ((b >> 4) & 3u)];
      t[j + 3] = lut[4 * j + 12 + (b >> 6)];
    }
    for (; j < nc; j++) t[j] = lut[4 * j + ((bytes[j / 4] >> (2 * (j % 4))) & 3u)];
  }
}

static void load_tile(const tsr_k_xsrc *x, int64_t r0, int64_t nr, int64_t c0, int64_t nc, double *tile)
{
  const chain *ch = x->arg;
  if (ch->lut != NULL) {
    load_tile_packed(ch, r0, nr, c0, nc, tile);
    return;
  }
  for (int64_t r = 0; r < nr; r++) {
    load_row(ch, r0 + r, c0, nc, tile + r * nc);
    apply_steps(ch, c0, nc, tile + r * nc);
  }
}

/* ---------- the product ---------- */

/* Wide B: Z a row panel at a time into dgemm. */
/* Rows [r0, r0+w) of Z into the panel zp (c per row), through the tiles. */
static void load_panel(const tsr_k_xsrc *src, int64_t r0, int64_t w, double *zp, double *tile)
{
  int64_t c = src->cols;
  for (int64_t c0 = 0; c0 < c; c0 += LUT_COLS) {
    int64_t nc = c - c0 < LUT_COLS ? c - c0 : LUT_COLS;
    for (int64_t i0 = 0; i0 < w; i0 += 64) {
      int64_t ni = w - i0 < 64 ? w - i0 : 64;
      src->load(src, r0 + i0, ni, c0, nc, tile);
      for (int64_t i = 0; i < ni; i++) memcpy(zp + (i0 + i) * c + c0, tile + i * nc, (size_t)nc * sizeof *tile);
    }
  }
}

static int panels(const chain *ch, const tsr_k_xsrc *src, const tsr_buf *b, double *out, tsr_errbuf *err)
{
  int64_t r = ch->k.rows, c = ch->k.cols, pr = PANEL_ELEMS / (c > 0 ? c : 1);
  pr = pr < 1 ? 1 : pr > r ? r : pr;
  double *zp = malloc((size_t)(pr * c) * sizeof *zp), *tile = malloc(64 * LUT_COLS * sizeof *tile);
  if (zp == NULL || tile == NULL) {
    free(zp), free(tile);
    return tsr_fail(err, TSR_ENOMEM, "matmul_chain: out of memory for a %lld-row panel", (long long)pr);
  }
  const double *bd = b->data;
  int64_t bw = b->meta.shape[1];
  for (int64_t r0 = 0; r0 < r; r0 += pr) {
    int64_t w = r - r0 < pr ? r - r0 : pr;
    load_panel(src, r0, w, zp, tile);
    double beta = r0 == 0 ? 0.0 : 1.0;
    int side = ch->k.side;
    if (side == TSR_K_SIDE_XB)
      tsr_k_gemm(TSR_F64, false, false, w, bw, c, zp, c, bd, bw, 0.0, out + r0 * bw, bw);
    else if (side == TSR_K_SIDE_XTB)
      tsr_k_gemm(TSR_F64, true, false, c, bw, w, zp, c, bd + r0 * bw, bw, beta, out, bw);
    else if (side == TSR_K_SIDE_BX)
      tsr_k_gemm(TSR_F64, false, false, b->meta.shape[0], c, w, bd + r0, r, zp, c, beta, out, c);
    else
      tsr_k_gemm(TSR_F64, true, false, bw, c, w, bd + r0 * bw, bw, zp, c, beta, out, c);
  }
  free(zp), free(tile);
  return 0;
}

static int chain_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  chain ch;
  tsr_meta metas[2 + TSR_K_CHAIN_MAX];
  if (n > 2 + TSR_K_CHAIN_MAX) return tsr_fail(err, TSR_EINVAL, "matmul_chain: at most %d vector inputs", TSR_K_CHAIN_MAX);
  for (int i = 0; i < n; i++) metas[i] = in[i].meta;
  int rc = tsr_k_chain_parse(p, metas, n, &ch.k, err);
  if (rc != 0) return rc;
  ch.x = &in[0];
  ch.lut = NULL;
  for (int s = 0; s < ch.k.n_steps; s++) ch.vec[s] = ch.k.vec_input[s] >= 2 ? in[ch.k.vec_input[s]].data : NULL;
  if (out->nbytes == 0) return 0;
  if (ch.k.rows == 0 || ch.k.cols == 0 || ch.k.outer == 0) {
    memset(out->data, 0, out->nbytes);  /* an empty inner dimension sums to 0 */
    return 0;
  }
  if (ch.k.packed && (ch.lut = make_lut(&ch)) == NULL)
    return tsr_fail(err, TSR_ENOMEM, "matmul_chain: out of memory for the table of %lld columns", (long long)ch.k.cols);
  tsr_k_xsrc src = {ch.k.rows, ch.k.cols, load_tile, &ch};
  bool x_is_a = ch.k.side <= TSR_K_SIDE_XTB, ta = ch.k.side == TSR_K_SIDE_XTB || ch.k.side == TSR_K_SIDE_BTX;
  int64_t k = ch.k.side == TSR_K_SIDE_XB ? ch.k.cols : ch.k.rows;
  rc = tsr_k_skinny_x(&src, x_is_a, ta, false, k, &in[1], out->data, err);
  if (rc == 0) rc = panels(&ch, &src, &in[1], out->data, err);
  free(ch.lut);
  return rc < 0 ? rc : 0;
}

const tsr_op_def tsr_op_matmul_chain = {"matmul_chain", 2, 2 + TSR_K_CHAIN_MAX, chain_infer, chain_cpu, false, NULL};
