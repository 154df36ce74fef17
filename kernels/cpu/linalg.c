/* kernels/cpu/linalg.c — matmul: C = op(A) · op(B) for 2-D chunks through
 * CBLAS (OpenBLAS) in row-major order; op(X) is X or Xᵀ per the trans_a /
 * trans_b params. OpenBLAS's own threading is left as the process set it
 * (the worker decides).
 *
 * dtypes: two float inputs must match and C has their dtype. An integer
 * input (u8/i32/i64) takes the other input's float dtype (f64 when both are
 * integers) and is converted a k-panel at a time — C accumulates
 * op(A)[:, k0:k1] · op(B)[k0:k1, :] — so no whole float copy is made. An
 * integer operand times a narrow f64 one (a genotype block times a sketch)
 * goes through linalg_skinny.c instead: small converted tiles into the
 * skinny kernels, the same bytes on every CPU.
 *
 * Determinism: OpenBLAS gives the same bytes for the same inputs, shapes
 * and thread count on one CPU model; across CPU models its kernels may
 * differ in the last bits, the one place results can depend on the worker. */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* Bytes of converted input per k-panel (both operands together). */
#define PANEL_BYTES ((size_t)16 << 20)

void tsr_k_gemm(tsr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
  enum CBLAS_TRANSPOSE ca = ta ? CblasTrans : CblasNoTrans, cb = tb ? CblasTrans : CblasNoTrans;
  if (dt == TSR_F64)
    cblas_dgemm(CblasRowMajor, ca, cb, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
  else
    cblas_sgemm(CblasRowMajor, ca, cb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, (float)beta, c,
                (int)ldc);
}

typedef struct mm_dims {
  bool ta, tb;
  int64_t m, n, k;
  tsr_dtype dtype;  /* of C */
} mm_dims;

static int mm_flag(const tsr_params *p, const char *name, bool *flag_p, tsr_errbuf *err)
{
  *flag_p = false;
  if (tsr_params_find(p, name) == NULL) return 0;
  int rc = tsr_params_get_bool(p, name, flag_p, err);
  return rc == 0 ? 0 : tsr_k_param_fail("matmul", rc, err);
}

/* Checks the pair and works out m, n, k of op(A)[m,k] · op(B)[k,n]. */
static int mm_check(const tsr_params *p, const tsr_meta *a, const tsr_meta *b, mm_dims *d, tsr_errbuf *err)
{
  int rc = mm_flag(p, "trans_a", &d->ta, err);
  if (rc == 0) rc = mm_flag(p, "trans_b", &d->tb, err);
  if (rc != 0) return rc;
  if (a->ndim != 2 || b->ndim != 2)
    return tsr_fail(err, TSR_ESHAPE, "matmul: inputs must be 2-D: %s @ %s", tsr_k_str(a).s, tsr_k_str(b).s);
  bool fa = tsr_k_is_float(a->dtype), fb = tsr_k_is_float(b->dtype);
  if (fa && fb && a->dtype != b->dtype)
    return tsr_fail(err, TSR_ESHAPE, "matmul: float inputs must have one dtype: %s @ %s", tsr_k_str(a).s,
                    tsr_k_str(b).s);
  d->dtype = fa ? a->dtype : fb ? b->dtype : TSR_F64;
  int64_t ka = d->ta ? a->shape[0] : a->shape[1], kb = d->tb ? b->shape[1] : b->shape[0];
  if (ka != kb)
    return tsr_fail(err, TSR_ESHAPE, "matmul: inner dimensions differ: %s%s @ %s%s", tsr_k_str(a).s,
                    d->ta ? ".T" : "", tsr_k_str(b).s, d->tb ? ".T" : "");
  d->m = d->ta ? a->shape[1] : a->shape[0];
  d->n = d->tb ? b->shape[0] : b->shape[1];
  d->k = ka;
  for (int i = 0; i < 2; i++)
    if (a->shape[i] > INT_MAX || b->shape[i] > INT_MAX)
      return tsr_fail(err, TSR_ESHAPE, "matmul: a dimension of %s @ %s exceeds BLAS's int range", tsr_k_str(a).s,
                      tsr_k_str(b).s);
  return 0;
}

static int matmul_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  mm_dims d;
  if (n_in != 2) return tsr_fail(err, TSR_EINVAL, "matmul: takes 2 inputs, got %d", n_in);
  int rc = mm_check(p, &in[0], &in[1], &d, err);
  if (rc != 0) return rc;
  int64_t shape[2] = {d.m, d.n};
  tsr_k_meta_set(out, d.dtype, 2, shape);
  return 0;
}

/* An operand's k-panel [k0, k0+kp) as gemm wants it: the input itself when
 * it is already of dtype, else converted into buf. *ld_p is its leading
 * dimension. An operand is stored [k, x] (panel = rows k0..) when
 * k_is_rows, else [x, k] (panel = columns k0..). */
static const void *panel(const tsr_buf *in, tsr_dtype dt, bool k_is_rows, int64_t k0, int64_t kp, void *buf,
                         int64_t *ld_p)
{
  int64_t rows = in->meta.shape[0], cols = in->meta.shape[1];
  size_t es = tsr_dtype_size(in->meta.dtype), os = tsr_dtype_size(dt);
  const char *src = in->data;
  if (in->meta.dtype == dt) {
    *ld_p = cols;
    return src + (size_t)(k_is_rows ? k0 * cols : k0) * es;
  }
  if (k_is_rows) {
    tsr_k_to_float(dt, in->meta.dtype, src + (size_t)(k0 * cols) * es, (size_t)(kp * cols), buf);
    *ld_p = cols;
  } else {
    for (int64_t r = 0; r < rows; r++)
      tsr_k_to_float(dt, in->meta.dtype, src + (size_t)(r * cols + k0) * es, (size_t)kp, (char *)buf + r * kp * os);
    *ld_p = kp;
  }
  return buf;
}

static int matmul_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)n_in;
  mm_dims d;
  int rc = mm_check(p, &in[0].meta, &in[1].meta, &d, err);
  if (rc != 0) return rc;
  if (d.m == 0 || d.n == 0) return 0;
  if (d.k == 0) {
    memset(out->data, 0, out->nbytes);  /* BLAS refuses lda = 0 */
    return 0;
  }
  if (d.dtype == TSR_F64) {  /* an integer operand times a narrow f64 one */
    rc = tsr_k_matmul_skinny(d.ta, d.tb, d.m, d.n, d.k, &in[0], &in[1], out->data, err);
    if (rc != 0) return rc < 0 ? rc : 0;
  }
  bool conv_a = in[0].meta.dtype != d.dtype, conv_b = in[1].meta.dtype != d.dtype;
  size_t os = tsr_dtype_size(d.dtype), per_k = (size_t)((conv_a ? d.m : 0) + (conv_b ? d.n : 0)) * os;
  int64_t kp = !conv_a && !conv_b ? d.k : (int64_t)(PANEL_BYTES / per_k);
  kp = kp < 1 ? 1 : kp > d.k ? d.k : kp;
  void *buf_a = conv_a ? malloc((size_t)(kp * d.m) * os) : NULL;
  void *buf_b = conv_b ? malloc((size_t)(kp * d.n) * os) : NULL;
  if ((conv_a && buf_a == NULL) || (conv_b && buf_b == NULL)) {
    free(buf_a), free(buf_b);
    return tsr_fail(err, TSR_ENOMEM, "matmul: out of memory for a %lld-wide conversion panel", (long long)kp);
  }
  for (int64_t k0 = 0; k0 < d.k; k0 += kp) {
    int64_t w = d.k - k0 < kp ? d.k - k0 : kp, lda, ldb;
    const void *pa = panel(&in[0], d.dtype, d.ta, k0, w, buf_a, &lda);
    const void *pb = panel(&in[1], d.dtype, !d.tb, k0, w, buf_b, &ldb);
    tsr_k_gemm(d.dtype, d.ta, d.tb, d.m, d.n, w, pa, lda, pb, ldb, k0 == 0 ? 0.0 : 1.0, out->data, d.n);
  }
  free(buf_a), free(buf_b);
  return 0;
}

const tsr_op_def tsr_op_matmul = {"matmul", 2, 2, matmul_infer, matmul_cpu, false, NULL};
