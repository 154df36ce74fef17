/* kernels/cpu/create.c — full (a constant chunk) and noop (an empty u8[0]
 * result that depends on any inputs, for ordering and barriers). */
#include <math.h>
#include <string.h>

#include "ops.h"

typedef struct fill {
  tsr_meta meta;
  bool exact;     /* value came as an int param: use ival */
  int64_t ival;
  double fval;
} fill;

/* Reads shape, dtype (default f64) and value; refuses a value the dtype
 * cannot hold (a float value for an integer dtype truncates toward 0). */
static int full_params(const tsr_params *p, fill *f, tsr_errbuf *err)
{
  int64_t shape[TSR_MAX_NDIM];
  int ndim;
  tsr_dtype dt;
  int rc = tsr_k_shape_param("full", p, "shape", shape, &ndim, err);
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (rc == 0) rc = tsr_k_dtype_param("full", p, TSR_F64, &dt, err);
  if (rc != 0) return rc;
  const tsr_param *v = tsr_params_find(p, "value");
  memset(f, 0, sizeof *f);
  f->exact = v != NULL && v->type == TSR_PARAM_INT;
  if (f->exact) f->ival = v->i;
  else if ((rc = tsr_params_get_float(p, "value", &f->fval, err)) != 0) return tsr_k_param_fail("full", rc, err);
  tsr_k_meta_set(&f->meta, dt, ndim, shape);
  if (dt == TSR_F32 || dt == TSR_F64) return 0;
  int64_t lo = dt == TSR_U8 ? 0 : dt == TSR_I32 ? INT32_MIN : INT64_MIN;
  int64_t hi = dt == TSR_U8 ? 255 : dt == TSR_I32 ? INT32_MAX : INT64_MAX;
  /* hi + 1 is a power of two, so the double bound is exact. */
  double x = trunc(f->fval), hi_excl = (double)(hi / 2 + 1) * 2.0;
  bool fits = f->exact ? f->ival >= lo && f->ival <= hi : x >= (double)lo && x < hi_excl;
  if (!fits)
    return tsr_fail(err, TSR_EINVAL, "full: value %.17g does not fit %s", f->exact ? (double)f->ival : f->fval,
                    tsr_dtype_name(dt));
  if (!f->exact) f->ival = (int64_t)x;
  return 0;
}

static int full_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  fill f;
  int rc = full_params(p, &f, err);
  if (rc == 0) *out = f.meta;
  return rc;
}

static int full_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  fill f;
  int rc = full_params(p, &f, err);
  if (rc != 0) return rc;
  double x = f.exact ? (double)f.ival : f.fval;
  size_t count = out->nbytes / tsr_dtype_size(out->meta.dtype);
  switch (out->meta.dtype) {
  case TSR_U8: memset(out->data, (int)f.ival, count); break;
  case TSR_I32: for (size_t i = 0; i < count; i++) ((int32_t *)out->data)[i] = (int32_t)f.ival; break;
  case TSR_I64: for (size_t i = 0; i < count; i++) ((int64_t *)out->data)[i] = f.ival; break;
  case TSR_F32: for (size_t i = 0; i < count; i++) ((float *)out->data)[i] = (float)x; break;
  default: for (size_t i = 0; i < count; i++) ((double *)out->data)[i] = x; break;
  }
  return 0;
}

static int noop_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p, (void)in, (void)n, (void)err;
  int64_t zero = 0;
  tsr_k_meta_set(out, TSR_U8, 1, &zero);
  return 0;
}

static int noop_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)in, (void)n, (void)out, (void)err;
  return 0;
}

const tsr_op_def tsr_op_full = {"full", 0, 0, full_infer, full_cpu, false, NULL};
const tsr_op_def tsr_op_noop = {"noop", 0, -1, noop_infer, noop_cpu, false, NULL};
