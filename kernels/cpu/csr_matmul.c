/* kernels/cpu/csr_matmul.c — products of a sparse chunk and a dense one,
 * with implicit centering and scaling.
 *
 * csr_matmul: inputs [X (CSR), B (f64 2-D), step vectors...]; params
 *   `shape` [rows, cols] (X's), `side` "xb" / "xtb" / "bx" / "btx" and the
 *   chain steps of matmul_chain (`steps`, `step_inputs`, `step_values`,
 *   ops.h), limited to the affine ones: add, sub, mul, div, rsub, scale.
 *   Z is those steps applied to every element of X, the implicit zeros
 *   included, so per column z = x·a_j + b_j; the output is Z·B, Zᵀ·B, B·Z
 *   or Bᵀ·Z (f64) computed as
 *     Z·B   = X·(diag(a)·B) + 1·(bᵀ·B)
 *     Zᵀ·C  = diag(a)·(Xᵀ·C) + b·(1ᵀ·C)      (bx and btx: the transpose)
 *   touching only the stored values: PCA of (X − 1·μᵀ)·diag(1/σ) without
 *   a dense cells x genes copy. Every output element is one f64 sum in a
 *   fixed order: the same bytes on every run. */
#include <stdlib.h>

#include "csr_ops.h"

typedef struct csr_product {
  tsr_k_chain ch;     /* side, rows, cols, steps; outer = B's other extent */
  double *a, *b;      /* per column of X: z = x·a + b */
} csr_product;

/* The chain parser wants X as a dense 2-D meta: X's logical one. */
static int parse_product(const tsr_params *p, const tsr_meta *in, int n, tsr_k_chain *ch, tsr_errbuf *err)
{
  int64_t rows, cols;
  if (n < 2 || n > 2 + TSR_K_CHAIN_MAX) return tsr_fail(err, TSR_EINVAL, "csr_matmul: takes X, B and step vectors, got %d inputs", n);
  int rc = tsr_k_csr_shape_param("csr_matmul", p, &in[0], &rows, &cols, err);
  if (rc != 0) return rc;
  tsr_meta metas[2 + TSR_K_CHAIN_MAX];
  memcpy(metas, in, sizeof *in * (size_t)n);
  int64_t shape[2] = {rows, cols};
  tsr_k_meta_set(&metas[0], TSR_F64, 2, shape);
  rc = tsr_k_chain_parse(p, metas, n, ch, err);
  for (int i = 0; rc == 0 && i < ch->n_steps; i++)
    if (ch->codes[i] == TSR_K_STEP_RDIV || ch->codes[i] == TSR_K_STEP_FILLNAN)
      rc = tsr_fail(err, TSR_EINVAL, "csr_matmul: step %d (code %d) is not affine in x", i, ch->codes[i]);
  if (rc == 0 && tsr_params_find(p, "cols") != NULL) rc = tsr_fail(err, TSR_EINVAL, "csr_matmul: X is sparse, not 2-bit packed");
  return rc;
}

static int product_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  tsr_k_chain ch;
  int rc = parse_product(p, in, n, &ch, err);
  if (rc != 0) return rc;
  bool x_rows_out = ch.side == TSR_K_SIDE_XB;  /* [rows, outer] */
  bool outer_first = ch.side == TSR_K_SIDE_BX || ch.side == TSR_K_SIDE_BTX;
  int64_t shape[2];
  if (x_rows_out) shape[0] = ch.rows, shape[1] = ch.outer;
  else if (outer_first) shape[0] = ch.outer, shape[1] = ch.cols;
  else shape[0] = ch.cols, shape[1] = ch.outer;
  tsr_k_meta_set(out, TSR_F64, 2, shape);
  return 0;
}

/* a_j, b_j of z = x·a_j + b_j from the steps, innermost first. */
static void affine_columns(const tsr_k_chain *ch, const tsr_buf *in, double *a, double *b)
{
  for (int64_t j = 0; j < ch->cols; j++) {
    double aj = 1.0, bj = 0.0;
    for (int s = 0; s < ch->n_steps; s++) {
      double v = ch->vec_input[s] >= 0 ? ((const double *)in[ch->vec_input[s]].data)[j] : 0.0;
      switch (ch->codes[s]) {
      case TSR_K_STEP_ADD: bj += v; break;
      case TSR_K_STEP_SUB: bj -= v; break;
      case TSR_K_STEP_MUL: aj *= v, bj *= v; break;
      case TSR_K_STEP_DIV: aj /= v, bj /= v; break;
      case TSR_K_STEP_RSUB: aj = -aj, bj = v - bj; break;
      default: aj *= ch->values[2 * s], bj = bj * ch->values[2 * s] + ch->values[2 * s + 1]; break;
      }
    }
    a[j] = aj, b[j] = bj;
  }
}

/* Z·B: B [cols, k] → out [rows, k]. */
static void product_xb(const csr_product *pr, const tsr_k_csr *x, const double *bm, double *out)
{
  int64_t k = pr->ch.outer;
  double *c0 = out;  /* row 0 holds bᵀ·B until it is copied to every row */
  memset(out, 0, sizeof *out * (size_t)(x->rows * k));
  if (x->rows == 0) return;
  for (int64_t j = 0; j < x->cols; j++)
    if (pr->b[j] != 0.0)
      for (int64_t t = 0; t < k; t++) c0[t] += pr->b[j] * bm[j * k + t];
  for (int64_t r = x->rows - 1; r >= 0; r--) {
    double *o = out + r * k;
    if (r > 0) memcpy(o, c0, sizeof *o * (size_t)k);
    for (int64_t i = x->indptr[r]; i < x->indptr[r + 1]; i++) {
      int64_t j = x->indices[i];
      double w = tsr_k_csr_value(x, i) * pr->a[j];
      for (int64_t t = 0; t < k; t++) o[t] += w * bm[j * k + t];
    }
  }
}

/* Zᵀ·C with C(i, t) = c[i·si + t·st] (i over X's rows, t < k), written to
 * out(j, t) = out[j·oj + t·ot]. acc: cols·k + k doubles of scratch. */
static void product_xtc(const csr_product *pr, const tsr_k_csr *x, const double *c, int64_t si, int64_t st, double *out,
                        int64_t oj, int64_t ot, double *acc)
{
  int64_t k = pr->ch.outer;
  double *colsum = acc + x->cols * k;
  memset(acc, 0, sizeof *acc * (size_t)(x->cols * k + k));
  for (int64_t r = 0; r < x->rows; r++) {
    for (int64_t t = 0; t < k; t++) colsum[t] += c[r * si + t * st];
    for (int64_t i = x->indptr[r]; i < x->indptr[r + 1]; i++) {
      double v = tsr_k_csr_value(x, i);
      double *row = acc + (int64_t)x->indices[i] * k;
      for (int64_t t = 0; t < k; t++) row[t] += v * c[r * si + t * st];
    }
  }
  for (int64_t j = 0; j < x->cols; j++)
    for (int64_t t = 0; t < k; t++) out[j * oj + t * ot] = pr->a[j] * acc[j * k + t] + pr->b[j] * colsum[t];
}

static int product_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  csr_product pr;
  tsr_meta metas[2 + TSR_K_CHAIN_MAX];
  tsr_k_csr x;
  for (int i = 0; i < n && i < 2 + TSR_K_CHAIN_MAX; i++) metas[i] = in[i].meta;
  int rc = parse_product(p, metas, n, &pr.ch, err);
  if (rc == 0) rc = tsr_k_csr_input("csr_matmul", &in[0], pr.ch.rows, pr.ch.cols, &x, err);
  if (rc != 0) return rc;
  int64_t k = pr.ch.outer, side = pr.ch.side;
  size_t scratch = 2 * (size_t)x.cols + (side == TSR_K_SIDE_XB ? 0 : (size_t)(x.cols * k + k));
  pr.a = malloc(sizeof(double) * (scratch + 1));
  if (pr.a == NULL) return tsr_fail(err, TSR_ENOMEM, "csr_matmul: out of memory");
  pr.b = pr.a + x.cols;
  affine_columns(&pr.ch, in, pr.a, pr.b);
  const double *bm = in[1].data;
  double *o = out->data, *acc = pr.b + x.cols;
  if (side == TSR_K_SIDE_XB) product_xb(&pr, &x, bm, o);
  else if (side == TSR_K_SIDE_XTB) product_xtc(&pr, &x, bm, k, 1, o, k, 1, acc);          /* B [rows, k] → [cols, k] */
  else if (side == TSR_K_SIDE_BTX) product_xtc(&pr, &x, bm, k, 1, o, 1, x.cols, acc);     /* → [k, cols] */
  else product_xtc(&pr, &x, bm, 1, x.rows, o, 1, x.cols, acc);                            /* B [k, rows] → [k, cols] */
  free(pr.a);
  return 0;
}

const tsr_op_def tsr_op_csr_matmul = {"csr_matmul", 2, 2 + TSR_K_CHAIN_MAX, product_infer, product_cpu, false, NULL};
