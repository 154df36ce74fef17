/* kernels/cpu/csr.c — the sparse chunk (csr.h): checking a chunk, and the
 * two conversions every sparse array needs.
 *
 * csr_from_dense: a dense 2-D chunk → its CSR chunk (zeros dropped; NaN
 *   is a value). The output is inferred at the dense size and shrunk to the
 *   real nnz.
 * csr_densify: a CSR chunk → the dense 2-D chunk of its dtype; params
 *   `dtype`, `shape` (the logical [rows, cols], checked against the
 *   header). */
#include <stdlib.h>

#include "csr.h"
#include "ops.h"

int tsr_k_csr_view(const tsr_buf *b, bool full, tsr_k_csr *v, tsr_errbuf *err)
{
  const unsigned char *p = b->data;
  if (b->meta.dtype != TSR_U8 || b->meta.ndim != 1 || b->nbytes < TSR_CSR_HEADER || memcmp(p, "TCSR", 4) != 0 ||
      p[4] != 1 || p[6] != 4)
    return tsr_fail(err, TSR_EPROTO, "not a CSR chunk (version 1, 32-bit indices): %s", tsr_k_str(&b->meta).s);
  memcpy(&v->rows, p + 8, 8), memcpy(&v->cols, p + 16, 8), memcpy(&v->nnz, p + 24, 8);
  v->dtype = (tsr_dtype)p[5];
  int64_t want = tsr_k_csr_bytes(v->rows, v->nnz, v->dtype);
  if (want < 0 || v->cols < 0 || v->cols > INT32_MAX || (size_t)want != b->nbytes)
    return tsr_fail(err, TSR_EPROTO, "CSR chunk of %lld x %lld with %lld values of dtype %d does not fit its %zu bytes",
                    (long long)v->rows, (long long)v->cols, (long long)v->nnz, (int)v->dtype, b->nbytes);
  tsr_k_csr_parts(b->data, v->rows, v->nnz, v);
  if (v->indptr[0] != 0 || v->indptr[v->rows] != v->nnz)
    return tsr_fail(err, TSR_EPROTO, "CSR chunk: indptr runs from %lld to %lld, not 0 to nnz %lld",
                    (long long)v->indptr[0], (long long)v->indptr[v->rows], (long long)v->nnz);
  for (int64_t r = 0; full && r < v->rows; r++) {
    if (v->indptr[r + 1] < v->indptr[r])
      return tsr_fail(err, TSR_EPROTO, "CSR chunk: indptr decreases at row %lld", (long long)r);
    for (int64_t i = v->indptr[r]; i < v->indptr[r + 1]; i++)
      if (v->indices[i] < 0 || v->indices[i] >= v->cols || (i > v->indptr[r] && v->indices[i] <= v->indices[i - 1]))
        return tsr_fail(err, TSR_EPROTO, "CSR chunk: row %lld has column %d out of order or outside 0..%lld",
                        (long long)r, v->indices[i], (long long)v->cols - 1);
  }
  return 0;
}

void tsr_k_csr_shrink(tsr_buf *out, tsr_k_csr *v, int64_t nnz)
{
  size_t es = tsr_dtype_size(v->dtype);
  tsr_k_csr moved;
  tsr_k_csr_parts(out->data, v->rows, nnz, &moved);
  memmove(moved.values, v->values, (size_t)nnz * es);  /* values start earlier: fewer indices */
  int64_t rows = v->rows, cols = v->cols;
  tsr_dtype dtype = v->dtype;
  tsr_k_csr_init(out->data, rows, cols, nnz, dtype, v);  /* rewrites the header and the pads */
  out->meta.shape[0] = tsr_k_csr_bytes(rows, nnz, dtype);
}

/* ---------- csr_from_dense ---------- */

static int from_dense_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "csr_from_dense: takes 1 input, got %d", n);
  if (in[0].ndim != 2) return tsr_fail(err, TSR_ESHAPE, "csr_from_dense: needs a 2-D chunk, got %s", tsr_k_str(&in[0]).s);
  int64_t bytes = tsr_k_csr_bytes(in[0].shape[0], in[0].shape[0] * in[0].shape[1], in[0].dtype);
  if (bytes < 0 || in[0].shape[1] > INT32_MAX)
    return tsr_fail(err, TSR_ELIMIT, "csr_from_dense: %s is too large for a CSR chunk", tsr_k_str(&in[0]).s);
  tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return 0;
}

static int from_dense_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n, (void)err;
  int64_t rows = in[0].meta.shape[0], cols = in[0].meta.shape[1];
  tsr_dtype dt = in[0].meta.dtype;
  size_t es = tsr_dtype_size(dt);
  static const unsigned char zero[8];
  tsr_k_csr v;
  tsr_k_csr_init(out->data, rows, cols, rows * cols, dt, &v);
  int64_t nnz = 0;
  const char *x = in[0].data;
  for (int64_t r = 0; r < rows; r++) {
    v.indptr[r] = nnz;
    for (int64_t c = 0; c < cols; c++, x += es)
      if (memcmp(x, zero, es) != 0 && !(dt == TSR_F64 && *(const double *)x == 0.0) && !(dt == TSR_F32 && *(const float *)x == 0.0f)) {
        v.indices[nnz] = (int32_t)c;
        memcpy((char *)v.values + (size_t)nnz * es, x, es);
        nnz++;
      }
  }
  v.indptr[rows] = nnz;
  tsr_k_csr_shrink(out, &v, nnz);
  return 0;
}

/* ---------- csr_densify ---------- */

static int densify_meta(const tsr_params *p, tsr_meta *m, tsr_errbuf *err)
{
  tsr_dtype dt;
  int64_t shape[TSR_MAX_NDIM];
  int ndim;
  int rc = tsr_k_dtype_param("csr_densify", p, TSR_DTYPE_NONE, &dt, err);
  if (rc == 0 && dt == TSR_DTYPE_NONE) rc = tsr_fail(err, TSR_EINVAL, "csr_densify: missing parameter 'dtype'");
  if (rc == 0) rc = tsr_k_shape_param("csr_densify", p, "shape", shape, &ndim, err);
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (rc == 0 && ndim != 2) rc = tsr_fail(err, TSR_EINVAL, "csr_densify: shape must have 2 entries, got %d", ndim);
  if (rc == 0) tsr_k_meta_set(m, dt, 2, shape);
  return rc;
}

static int densify_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "csr_densify: takes 1 input, got %d", n);
  if (in[0].dtype != TSR_U8 || in[0].ndim != 1)
    return tsr_fail(err, TSR_ESHAPE, "csr_densify: input must be a CSR chunk (1-D u8), got %s", tsr_k_str(&in[0]).s);
  return densify_meta(p, out, err);
}

static int densify_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n;
  tsr_k_csr v;
  tsr_errbuf why;
  int rc = tsr_k_csr_view(&in[0], false, &v, &why);
  if (rc != 0) return tsr_fail(err, rc, "csr_densify: %s", why.text);
  if (v.rows != out->meta.shape[0] || v.cols != out->meta.shape[1] || v.dtype != out->meta.dtype)
    return tsr_fail(err, TSR_ESHAPE, "csr_densify: the chunk is %lld x %lld of dtype %d, expected %s", (long long)v.rows,
                    (long long)v.cols, (int)v.dtype, tsr_k_str(&out->meta).s);
  size_t es = tsr_dtype_size(v.dtype);
  memset(out->data, 0, out->nbytes);
  for (int64_t r = 0; r < v.rows; r++)
    for (int64_t i = v.indptr[r]; i < v.indptr[r + 1]; i++) {
      if (v.indices[i] < 0 || v.indices[i] >= v.cols)
        return tsr_fail(err, TSR_EPROTO, "csr_densify: row %lld has column %d outside 0..%lld", (long long)r,
                        v.indices[i], (long long)v.cols - 1);
      memcpy((char *)out->data + ((size_t)r * (size_t)v.cols + (size_t)v.indices[i]) * es,
             (const char *)v.values + (size_t)i * es, es);
    }
  return 0;
}

const tsr_op_def tsr_op_csr_from_dense = {"csr_from_dense", 1, 1, from_dense_infer, from_dense_cpu, false, NULL};
const tsr_op_def tsr_op_csr_densify = {"csr_densify", 1, 1, densify_infer, densify_cpu, false, NULL};
