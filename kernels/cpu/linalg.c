/* kernels/cpu/linalg.c — matmul: C = op(A) · op(B) for 2-D f32/f64 chunks
 * through CBLAS (OpenBLAS) in row-major order; op(X) is X or Xᵀ per the
 * trans_a / trans_b params. OpenBLAS's own threading is left as configured
 * by the process (the worker decides).
 *
 * Determinism: OpenBLAS gives the same bytes for the same inputs, shapes
 * and thread count on one CPU model; across CPU models its kernels may
 * differ in the last bits, which is the one place results can depend on
 * the worker. */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "ops.h"

typedef struct mm_dims {
  bool ta, tb;
  int64_t m, n, k;
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
  if ((a->dtype != TSR_F32 && a->dtype != TSR_F64) || a->dtype != b->dtype)
    return tsr_fail(err, TSR_ESHAPE, "matmul: inputs must both be f32 or both f64: %s @ %s", tsr_k_str(a).s,
                    tsr_k_str(b).s);
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
  tsr_k_meta_set(out, in[0].dtype, 2, shape);
  return 0;
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
  enum CBLAS_TRANSPOSE ta = d.ta ? CblasTrans : CblasNoTrans, tb = d.tb ? CblasTrans : CblasNoTrans;
  int m = (int)d.m, n = (int)d.n, k = (int)d.k;
  int lda = (int)in[0].meta.shape[1], ldb = (int)in[1].meta.shape[1];
  if (out->meta.dtype == TSR_F64)
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, in[0].data, lda, in[1].data, ldb, 0.0, out->data, n);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, in[0].data, lda, in[1].data, ldb, 0.0f, out->data, n);
  return 0;
}

const tsr_op_def tsr_op_matmul = {"matmul", 2, 2, matmul_infer, matmul_cpu, false};
