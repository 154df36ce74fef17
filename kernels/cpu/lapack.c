/* kernels/cpu/lapack.c — qr and svd of one 2-D chunk through LAPACKE
 * (row-major), packed into one output chunk each because a task has one
 * output; the graph unpacks with slice/view.
 *
 * qr:  m×n → (m+n)×n: reduced Q (m×n) on top of R (n×n), A = Q·R. For
 *      m < n, LAPACK's Q is m×m and R m×n; Q is padded with zero columns and
 *      R with zero rows, which keeps A = Q·R (TSQR stacks such blocks).
 * svd: m×n → 1-D m·r + r + r·n with r = min(m, n): U (m×r), S (r,
 *      descending), Vt (r×n), from ?gesdd (divide and conquer).
 * dtypes: f32 stays f32, f64 stays f64; integer inputs are converted to f64
 * (the array graphs declare f64 results for integer arrays). Signs of Q's
 * columns and of singular vectors are whatever LAPACK returns; the same
 * input gives the same bytes. */
#include <lapacke.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static int factor_input(const char *op, const tsr_meta *in, int n, tsr_dtype *dt_p, tsr_errbuf *err)
{
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "%s: takes 1 input, got %d", op, n);
  if (in[0].ndim != 2) return tsr_fail(err, TSR_ESHAPE, "%s: input must be 2-D, got %s", op, tsr_k_str(&in[0]).s);
  if (in[0].shape[0] > INT_MAX / 2 || in[0].shape[1] > INT_MAX / 2)
    return tsr_fail(err, TSR_ESHAPE, "%s: %s exceeds LAPACK's int range", op, tsr_k_str(&in[0]).s);
  *dt_p = tsr_k_is_float(in[0].dtype) ? in[0].dtype : TSR_F64;
  return 0;
}

static int lapack_fail(const char *op, const char *routine, lapack_int info, const tsr_meta *m, tsr_errbuf *err)
{
  if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
    return tsr_fail(err, TSR_ENOMEM, "%s: out of memory in LAPACK %s on %s", op, routine, tsr_k_str(m).s);
  if (info > 0)
    return tsr_fail(err, TSR_EINVAL, "%s: LAPACK %s did not converge on %s (info %d)", op, routine, tsr_k_str(m).s,
                    (int)info);
  return tsr_fail(err, TSR_EINTERNAL, "%s: LAPACK %s rejected argument %d for %s", op, routine, (int)-info,
                  tsr_k_str(m).s);
}

static int qr_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  tsr_dtype dt;
  int rc = factor_input("qr", in, n, &dt, err);
  if (rc != 0) return rc;
  int64_t shape[2] = {in[0].shape[0] + in[0].shape[1], in[0].shape[1]};
  tsr_k_meta_set(out, dt, 2, shape);
  return 0;
}

/* geqrf then orgqr on the Q block (m×n, ld n) in place; R's upper
 * triangle copied out in between. */
static lapack_int qr_in_place(tsr_dtype dt, int m, int n, void *q, void *r, void *tau, const char **routine_p)
{
  int k = m < n ? m : n;
  size_t es = tsr_dtype_size(dt);
  *routine_p = dt == TSR_F64 ? "dgeqrf" : "sgeqrf";
  lapack_int info = dt == TSR_F64 ? LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, m, n, q, n, tau)
                                  : LAPACKE_sgeqrf(LAPACK_ROW_MAJOR, m, n, q, n, tau);
  if (info != 0) return info;
  for (int i = 0; i < k; i++)
    memcpy((char *)r + ((size_t)i * n + i) * es, (char *)q + ((size_t)i * n + i) * es, (size_t)(n - i) * es);
  *routine_p = dt == TSR_F64 ? "dorgqr" : "sorgqr";
  info = dt == TSR_F64 ? LAPACKE_dorgqr(LAPACK_ROW_MAJOR, m, k, k, q, n, tau)
                       : LAPACKE_sorgqr(LAPACK_ROW_MAJOR, m, k, k, q, n, tau);
  for (int i = 0; info == 0 && k < n && i < m; i++)  /* m < n: zero the padding columns */
    memset((char *)q + ((size_t)i * n + k) * es, 0, (size_t)(n - k) * es);
  return info;
}

static int qr_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n_in;
  const tsr_meta *a = &in[0].meta;
  tsr_dtype dt = out->meta.dtype;
  int m = (int)a->shape[0], n = (int)a->shape[1];
  size_t es = tsr_dtype_size(dt);
  memset(out->data, 0, out->nbytes);
  if (m == 0 || n == 0) return 0;
  char *q = out->data, *r = q + (size_t)m * n * es;
  tsr_k_to_float(dt, a->dtype, in[0].data, (size_t)m * n, q);
  void *tau = malloc((size_t)(m < n ? m : n) * es);
  if (tau == NULL) return tsr_fail(err, TSR_ENOMEM, "qr: out of memory for %s", tsr_k_str(a).s);
  const char *routine = "";
  lapack_int info = qr_in_place(dt, m, n, q, r, tau, &routine);
  free(tau);
  return info == 0 ? 0 : lapack_fail("qr", routine, info, a, err);
}

static int svd_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  tsr_dtype dt;
  int rc = factor_input("svd", in, n, &dt, err);
  if (rc != 0) return rc;
  int64_t m = in[0].shape[0], k = in[0].shape[1], r = m < k ? m : k, len = m * r + r + r * k;
  tsr_k_meta_set(out, dt, 1, &len);
  return 0;
}

static int svd_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n_in;
  const tsr_meta *a = &in[0].meta;
  tsr_dtype dt = out->meta.dtype;
  int m = (int)a->shape[0], n = (int)a->shape[1], r = m < n ? m : n;
  size_t es = tsr_dtype_size(dt);
  if (r == 0) return 0;
  void *work = malloc((size_t)m * n * es);  /* gesdd destroys its input */
  if (work == NULL) return tsr_fail(err, TSR_ENOMEM, "svd: out of memory for a copy of %s", tsr_k_str(a).s);
  tsr_k_to_float(dt, a->dtype, in[0].data, (size_t)m * n, work);
  char *u = out->data, *s = u + (size_t)m * r * es, *vt = s + (size_t)r * es;
  lapack_int info = dt == TSR_F64
                        ? LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', m, n, work, n, (double *)s, (double *)u, r,
                                         (double *)vt, n)
                        : LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'S', m, n, work, n, (float *)s, (float *)u, r,
                                         (float *)vt, n);
  free(work);
  return info == 0 ? 0 : lapack_fail("svd", dt == TSR_F64 ? "dgesdd" : "sgesdd", info, a, err);
}

const tsr_op_def tsr_op_qr = {"qr", 1, 1, qr_infer, qr_cpu, false, NULL};
const tsr_op_def tsr_op_svd = {"svd", 1, 1, svd_infer, svd_cpu, false, NULL};
