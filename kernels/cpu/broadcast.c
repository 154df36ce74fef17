/* kernels/cpu/broadcast.c — bmul (a 2-D chunk times a vector broadcast
 * along rows or columns) and signs (+1 / −1 per element); together they
 * flip singular vectors to Dask's sign convention.
 *
 * bmul: axis 1 scales column j by v[j] (len v = columns), axis 0 scales row
 * i by v[i] (len v = rows). The output has input 0's meta; v may have any
 * dtype. Products are computed in double and stored like astype from f64,
 * so f32·f32 and f64·f64 are the correctly rounded products and integer
 * results truncate and clamp.
 * signs: +1 where x >= 0, −1 elsewhere (NaN gives −1, −0.0 gives +1), same
 * dtype; u8 is all ones. */
#include "ops.h"

#define TILE 1024

static int bmul_check(const tsr_params *p, const tsr_meta *in, int n, int64_t *axis_p, tsr_errbuf *err)
{
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "bmul: takes 2 inputs, got %d", n);
  int rc = tsr_params_get_int(p, "axis", axis_p, err);
  if (rc != 0) return tsr_k_param_fail("bmul", rc, err);
  if (*axis_p != 0 && *axis_p != 1)
    return tsr_fail(err, TSR_EINVAL, "bmul: axis must be 0 or 1, got %lld", (long long)*axis_p);
  if (in[0].ndim != 2 || in[1].ndim != 1)
    return tsr_fail(err, TSR_ESHAPE, "bmul: needs a 2-D input 0 and a 1-D input 1, got %s and %s",
                    tsr_k_str(&in[0]).s, tsr_k_str(&in[1]).s);
  int64_t want = in[0].shape[*axis_p == 1 ? 1 : 0];
  if (in[1].shape[0] != want)
    return tsr_fail(err, TSR_ESHAPE, "bmul: axis %lld needs a vector of %lld (the %s of %s), got %s",
                    (long long)*axis_p, (long long)want, *axis_p == 1 ? "columns" : "rows", tsr_k_str(&in[0]).s,
                    tsr_k_str(&in[1]).s);
  return 0;
}

static int bmul_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t axis;
  int rc = bmul_check(p, in, n, &axis, err);
  if (rc == 0) *out = in[0];
  return rc;
}

static int bmul_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  int64_t axis;
  tsr_meta metas[2] = {in[0].meta, in[1].meta};
  int rc = bmul_check(p, metas, n, &axis, err);
  if (rc != 0) return rc;
  tsr_dtype dt = metas[0].dtype, vt = metas[1].dtype;
  size_t es = tsr_dtype_size(dt), vs = tsr_dtype_size(vt);
  int64_t rows = metas[0].shape[0], cols = metas[0].shape[1];
  double x[TILE], v[TILE];
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j0 = 0; j0 < cols; j0 += TILE) {
      size_t m = (size_t)(cols - j0 < TILE ? cols - j0 : TILE), at = (size_t)(i * cols + j0);
      tsr_k_load_f64(dt, (const char *)in[0].data + at * es, m, x);
      if (axis == 1) {
        tsr_k_load_f64(vt, (const char *)in[1].data + (size_t)j0 * vs, m, v);
        for (size_t k = 0; k < m; k++) x[k] *= v[k];
      } else {
        tsr_k_load_f64(vt, (const char *)in[1].data + (size_t)i * vs, 1, v);
        for (size_t k = 0; k < m; k++) x[k] *= v[0];
      }
      tsr_k_store_f64(dt, x, m, (char *)out->data + at * es);
    }
  return 0;
}

static int signs_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "signs: takes 1 input, got %d", n);
  *out = in[0];
  return 0;
}

static int signs_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n, (void)err;
  size_t count = out->nbytes / tsr_dtype_size(out->meta.dtype);
  const void *x = in[0].data;
  void *y = out->data;
  switch (out->meta.dtype) {
  case TSR_U8:
    for (size_t i = 0; i < count; i++) ((uint8_t *)y)[i] = 1;
    break;
  case TSR_I32:
    for (size_t i = 0; i < count; i++) ((int32_t *)y)[i] = ((const int32_t *)x)[i] >= 0 ? 1 : -1;
    break;
  case TSR_I64:
    for (size_t i = 0; i < count; i++) ((int64_t *)y)[i] = ((const int64_t *)x)[i] >= 0 ? 1 : -1;
    break;
  case TSR_F32:
    for (size_t i = 0; i < count; i++) ((float *)y)[i] = ((const float *)x)[i] >= 0 ? 1.0f : -1.0f;
    break;
  default:
    for (size_t i = 0; i < count; i++) ((double *)y)[i] = ((const double *)x)[i] >= 0 ? 1.0 : -1.0;
    break;
  }
  return 0;
}

const tsr_op_def tsr_op_bmul = {"bmul", 2, 2, bmul_infer, bmul_cpu, false, NULL};
const tsr_op_def tsr_op_signs = {"signs", 1, 1, signs_infer, signs_cpu, false, NULL};
