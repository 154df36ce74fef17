/* kernels/cpu/ufunc.c — ufunc: one-argument math applied elementwise
 * (NumPy's np.sqrt, np.log1p, ...), named by the string param `fn`:
 * sqrt, log, log1p, exp, expm1, abs, square.
 *
 * A float input keeps its dtype; an integer input gives f64 (as NumPy
 * promotes np.sqrt of an int array). Each value is computed in double with
 * the C library's function and stored in the output dtype (f32 rounded
 * once), so a worker's results depend only on its libm: glibc's are
 * correctly rounded or within 1 ulp, and the same on every x86-64 worker
 * of one image. NaN stays NaN: a missing value stays missing. */
#include <math.h>
#include <string.h>

#include "ops.h"

#define TILE 1024

typedef double (*math_fn)(double);

static double square(double x) { return x * x; }

static const struct {
  const char *name;
  math_fn fn;
} fns[] = {
  {"sqrt", sqrt}, {"log", log}, {"log1p", log1p}, {"exp", exp}, {"expm1", expm1}, {"abs", fabs}, {"square", square},
};

static int ufunc_fn(const tsr_params *p, math_fn *fn_p, tsr_errbuf *err)
{
  const char *name;
  int rc = tsr_params_get_str(p, "fn", &name, err);
  if (rc != 0) return tsr_k_param_fail("ufunc", rc, err);
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (strcmp(fns[i].name, name) == 0) {
      *fn_p = fns[i].fn;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "ufunc: unknown fn '%s' (sqrt, log, log1p, exp, expm1, abs, square)", name);
}

static int ufunc_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  math_fn fn;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "ufunc: takes 1 input, got %d", n);
  int rc = ufunc_fn(p, &fn, err);
  if (rc != 0) return rc;
  *out = in[0];
  if (!tsr_k_is_float(in[0].dtype)) out->dtype = TSR_F64;
  return 0;
}

static int ufunc_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  math_fn fn;
  int rc = ufunc_fn(p, &fn, err);
  if (rc != 0) return rc;
  tsr_dtype from = in[0].meta.dtype, to = out->meta.dtype;
  size_t count = (size_t)tsr_meta_count(&out->meta), fs = tsr_dtype_size(from), ts = tsr_dtype_size(to);
  double t[TILE];
  for (size_t at = 0; at < count; at += TILE) {
    size_t m = count - at < TILE ? count - at : TILE;
    tsr_k_load_f64(from, (const char *)in[0].data + at * fs, m, t);
    for (size_t i = 0; i < m; i++) t[i] = fn(t[i]);
    tsr_k_store_f64(to, t, m, (char *)out->data + at * ts);
  }
  return 0;
}

const tsr_op_def tsr_op_ufunc = {"ufunc", 1, 1, ufunc_infer, ufunc_cpu, false, NULL};
