/* kernels/cpu/elementwise.c — add, mul (n-ary), sub, div. (scale and
 * astype, which convert, are in convert.c.)
 *
 * Semantics, for every dtype:
 * - add/mul/sub on integers wrap modulo 2^bits (done in the unsigned type
 *   of the same width, so there is no signed overflow); on floats IEEE.
 * - div on integers is C division (truncates toward zero); a zero divisor
 *   fails the task naming the element; INT_MIN / -1 gives INT_MIN (the
 *   wrapped quotient). On floats IEEE (x/0 is ±inf or NaN).
 * n-ary ops go a tile at a time so the running result stays in cache. */
#include <string.h>

#include "ops.h"

#define TILE 4096

typedef void (*bin_fn)(const void *a, const void *b, void *out, size_t n);

/* o[i] = a[i] OP b[i] over T; o may alias a. */
#define BINARY_LOOP(NAME, T, OP)                                     \
  static void NAME(const void *a_, const void *b_, void *o_, size_t n) \
  {                                                                  \
    const T *a = a_, *b = b_;                                        \
    T *o = o_;                                                       \
    for (size_t i = 0; i < n; i++) o[i] = (T)(a[i] OP b[i]);         \
  }

BINARY_LOOP(add_u8, uint8_t, +)
BINARY_LOOP(add_u32, uint32_t, +)
BINARY_LOOP(add_u64, uint64_t, +)
BINARY_LOOP(add_f32, float, +)
BINARY_LOOP(add_f64, double, +)
BINARY_LOOP(mul_u8, uint8_t, *)
BINARY_LOOP(mul_u32, uint32_t, *)
BINARY_LOOP(mul_u64, uint64_t, *)
BINARY_LOOP(mul_f32, float, *)
BINARY_LOOP(mul_f64, double, *)
BINARY_LOOP(sub_u8, uint8_t, -)
BINARY_LOOP(sub_u32, uint32_t, -)
BINARY_LOOP(sub_u64, uint64_t, -)
BINARY_LOOP(sub_f32, float, -)
BINARY_LOOP(sub_f64, double, -)
BINARY_LOOP(div_f32, float, /)
BINARY_LOOP(div_f64, double, /)

/* Indexed by tsr_dtype; signed ints use the unsigned type of their width. */
static const bin_fn add_fns[] = {NULL, add_u8, add_u32, add_u64, add_f32, add_f64};
static const bin_fn mul_fns[] = {NULL, mul_u8, mul_u32, mul_u64, mul_f32, mul_f64};
static const bin_fn sub_fns[] = {NULL, sub_u8, sub_u32, sub_u64, sub_f32, sub_f64};

/* All inputs must have input 0's meta; the output has it too. */
static int same_meta_infer(const char *op, int min, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  if (n < min) return tsr_fail(err, TSR_EINVAL, "%s: takes at least %d inputs, got %d", op, min, n);
  for (int i = 1; i < n; i++)
    if (!tsr_meta_equal(&in[i], &in[0]))
      return tsr_fail(err, TSR_ESHAPE, "%s: input %d is %s but input 0 is %s", op, i, tsr_k_str(&in[i]).s,
                      tsr_k_str(&in[0]).s);
  *out = in[0];
  return 0;
}

/* out = in0 OP in1 OP in2 ..., left to right, a tile at a time. */
static int nary_cpu(const bin_fn *fns, const tsr_buf *in, int n_in, tsr_buf *out)
{
  size_t es = tsr_dtype_size(out->meta.dtype), count = out->nbytes / es;
  bin_fn fn = fns[out->meta.dtype];
  char *o = out->data;
  for (size_t at = 0; at < count; at += TILE) {
    size_t m = count - at < TILE ? count - at : TILE, off = at * es;
    fn((const char *)in[0].data + off, (const char *)in[1].data + off, o + off, m);
    for (int k = 2; k < n_in; k++) fn(o + off, (const char *)in[k].data + off, o + off, m);
  }
  return 0;
}

static int add_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  return same_meta_infer("add", 2, in, n, out, err);
}
static int add_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)err;
  return nary_cpu(add_fns, in, n, out);
}
static int mul_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  return same_meta_infer("mul", 2, in, n, out, err);
}
static int mul_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)err;
  return nary_cpu(mul_fns, in, n, out);
}
static int sub_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "sub: takes 2 inputs, got %d", n);
  return same_meta_infer("sub", 2, in, n, out, err);
}
static int sub_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)err;
  return nary_cpu(sub_fns, in, n, out);
}

static int div_zero(size_t i, tsr_errbuf *err)
{
  return tsr_fail(err, TSR_EINVAL, "div: integer division by zero (element %zu of input 1 is 0)", i);
}

/* C division with the two undefined cases made defined (see the top). */
static int div_int(tsr_dtype dtype, const void *a_, const void *b_, void *o_, size_t n, tsr_errbuf *err)
{
  if (dtype == TSR_U8) {
    const uint8_t *a = a_, *b = b_;
    uint8_t *o = o_;
    for (size_t i = 0; i < n; i++) {
      if (b[i] == 0) return div_zero(i, err);
      o[i] = (uint8_t)(a[i] / b[i]);
    }
  } else if (dtype == TSR_I32) {
    const int32_t *a = a_, *b = b_;
    int32_t *o = o_;
    for (size_t i = 0; i < n; i++) {
      if (b[i] == 0) return div_zero(i, err);
      o[i] = b[i] == -1 ? (int32_t)(0u - (uint32_t)a[i]) : a[i] / b[i];
    }
  } else {
    const int64_t *a = a_, *b = b_;
    int64_t *o = o_;
    for (size_t i = 0; i < n; i++) {
      if (b[i] == 0) return div_zero(i, err);
      o[i] = b[i] == -1 ? (int64_t)(0u - (uint64_t)a[i]) : a[i] / b[i];
    }
  }
  return 0;
}

static int div_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "div: takes 2 inputs, got %d", n);
  return same_meta_infer("div", 2, in, n, out, err);
}

static int div_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n;
  tsr_dtype dt = out->meta.dtype;
  size_t count = out->nbytes / tsr_dtype_size(dt);
  if (dt == TSR_F32) div_f32(in[0].data, in[1].data, out->data, count);
  else if (dt == TSR_F64) div_f64(in[0].data, in[1].data, out->data, count);
  else return div_int(dt, in[0].data, in[1].data, out->data, count, err);
  return 0;
}

const tsr_op_def tsr_op_add = {"add", 2, -1, add_infer, add_cpu, false, NULL};
const tsr_op_def tsr_op_mul = {"mul", 2, -1, mul_infer, mul_cpu, false, NULL};
const tsr_op_def tsr_op_sub = {"sub", 2, 2, sub_infer, sub_cpu, false, NULL};
const tsr_op_def tsr_op_div = {"div", 2, 2, div_infer, div_cpu, false, NULL};
