/* kernels/cpu/convert.c — astype, scale and fillnan, the ops that change
 * values' representation.
 *
 * astype follows C's conversions where C defines them and makes the rest
 * deterministic:
 * - int → int wraps modulo 2^bits (i64 → u8 keeps the low 8 bits);
 * - int → float and float → float round to nearest, as C does;
 * - float → int truncates toward zero and clamps to the target's range;
 *   NaN gives 0 (C leaves out-of-range float → int undefined);
 * - with int param `missing` (an integer input's missing-value sentinel,
 *   e.g. 3 for genotypes), that value becomes NaN in a float output (and
 *   stays as it is in an integer one).
 * fillnan replaces NaN (a missing value) of a float chunk with `value`.
 * scale computes y = x·factor + offset in double (no fused multiply-add, so
 * every build rounds alike) and stores y into x's dtype like astype does
 * from f64; integers beyond 2^53 therefore lose their low bits.
 * Both go a tile at a time through a small stack buffer. */
#include <math.h>
#include <string.h>

#include "ops.h"

#define TILE 1024

/* int64 values into dtype: wrapping for integers, C rounding for floats. */
static void store_i64(tsr_dtype dt, const int64_t *t, size_t n, void *dst)
{
  if (dt == TSR_U8)
    for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)t[i];
  else if (dt == TSR_I32)
    for (size_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)(uint32_t)t[i];
  else if (dt == TSR_I64)
    memcpy(dst, t, n * sizeof *t);
  else if (dt == TSR_F32)
    for (size_t i = 0; i < n; i++) ((float *)dst)[i] = (float)t[i];
  else
    for (size_t i = 0; i < n; i++) ((double *)dst)[i] = (double)t[i];
}

static bool is_int(tsr_dtype dt)
{
  return dt == TSR_U8 || dt == TSR_I32 || dt == TSR_I64;
}

static int one_input(const char *op, int n, tsr_errbuf *err)
{
  return n == 1 ? 0 : tsr_fail(err, TSR_EINVAL, "%s: takes 1 input, got %d", op, n);
}

static int astype_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  tsr_dtype dt;
  int rc = one_input("astype", n, err);
  if (rc == 0 && tsr_params_find(p, "dtype") == NULL)
    rc = tsr_fail(err, TSR_EINVAL, "astype: missing parameter 'dtype'");
  if (rc == 0) rc = tsr_k_dtype_param("astype", p, TSR_DTYPE_NONE, &dt, err);
  if (rc != 0) return rc;
  *out = in[0];
  out->dtype = dt;
  return 0;
}

/* Tile t of an integer input, as f64, with the sentinel made NaN. */
static void missing_to_nan(const int64_t *t, size_t m, int64_t missing, double *f)
{
  for (size_t i = 0; i < m; i++) f[i] = t[i] == missing ? NAN : (double)t[i];
}

static int astype_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t missing = 0;
  bool has_missing = tsr_params_find(p, "missing") != NULL;
  if (has_missing && tsr_params_get_int(p, "missing", &missing, err) != 0)
    return tsr_k_param_fail("astype", TSR_EINVAL, err);
  tsr_dtype from = in[0].meta.dtype, to = out->meta.dtype;
  size_t count = out->nbytes / tsr_dtype_size(to), fs = tsr_dtype_size(from), ts = tsr_dtype_size(to);
  if (from == to) {
    memcpy(out->data, in[0].data, out->nbytes);
    return 0;
  }
  for (size_t at = 0; at < count; at += TILE) {
    size_t m = count - at < TILE ? count - at : TILE;
    const char *src = (const char *)in[0].data + at * fs;
    char *dst = (char *)out->data + at * ts;
    if (is_int(from) && has_missing && !is_int(to)) {
      int64_t t[TILE];
      double f[TILE];
      tsr_k_load_i64(from, src, m, t);
      missing_to_nan(t, m, missing, f);
      tsr_k_store_f64(to, f, m, dst);
    } else if (is_int(from)) {
      int64_t t[TILE];
      tsr_k_load_i64(from, src, m, t);
      store_i64(to, t, m, dst);
    } else {
      double t[TILE];
      tsr_k_load_f64(from, src, m, t);
      tsr_k_store_f64(to, t, m, dst);
    }
  }
  return 0;
}

static int scale_params(const tsr_params *p, double *factor_p, double *offset_p, tsr_errbuf *err)
{
  int rc = tsr_params_get_float(p, "factor", factor_p, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "offset", 0.0, offset_p, err);
  return rc == 0 ? 0 : tsr_k_param_fail("scale", rc, err);
}

static int scale_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  double factor, offset;
  int rc = one_input("scale", n, err);
  if (rc == 0) rc = scale_params(p, &factor, &offset, err);
  if (rc != 0) return rc;
  *out = in[0];
  return 0;
}

static int scale_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  double factor, offset, t[TILE];
  int rc = scale_params(p, &factor, &offset, err);
  if (rc != 0) return rc;
  tsr_dtype dt = out->meta.dtype;
  size_t es = tsr_dtype_size(dt), count = out->nbytes / es;
  for (size_t at = 0; at < count; at += TILE) {
    size_t m = count - at < TILE ? count - at : TILE;
    tsr_k_load_f64(dt, (const char *)in[0].data + at * es, m, t);
    for (size_t i = 0; i < m; i++) t[i] = t[i] * factor + offset;
    tsr_k_store_f64(dt, t, m, (char *)out->data + at * es);
  }
  return 0;
}

static int fillnan_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  double value;
  int rc = one_input("fillnan", n, err);
  if (rc == 0 && (rc = tsr_params_get_float(p, "value", &value, err)) != 0) rc = tsr_k_param_fail("fillnan", rc, err);
  if (rc == 0 && is_int(in[0].dtype))
    rc = tsr_fail(err, TSR_ESHAPE, "fillnan: needs a float input, got %s", tsr_k_str(&in[0]).s);
  if (rc == 0) *out = in[0];
  return rc;
}

static int fillnan_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  double value;
  if (tsr_params_get_float(p, "value", &value, err) != 0) return tsr_k_param_fail("fillnan", TSR_EINVAL, err);
  size_t count = out->nbytes / tsr_dtype_size(out->meta.dtype);
  if (out->meta.dtype == TSR_F32) {
    const float *x = in[0].data;
    float *y = out->data, v = (float)value;
    for (size_t i = 0; i < count; i++) y[i] = isnan(x[i]) ? v : x[i];
  } else {
    const double *x = in[0].data;
    double *y = out->data;
    for (size_t i = 0; i < count; i++) y[i] = isnan(x[i]) ? value : x[i];
  }
  return 0;
}

const tsr_op_def tsr_op_fillnan = {"fillnan", 1, 1, fillnan_infer, fillnan_cpu, false, NULL};
const tsr_op_def tsr_op_astype = {"astype", 1, 1, astype_infer, astype_cpu, false, NULL};
const tsr_op_def tsr_op_scale = {"scale", 1, 1, scale_infer, scale_cpu, false, NULL};
