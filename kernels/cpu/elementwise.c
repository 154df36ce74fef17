/* kernels/cpu/elementwise.c — add, mul (n-ary), sub, div. (scale and
 * astype, which convert, are in convert.c.)
 *
 * Semantics, for every dtype:
 * - add/mul/sub on integers wrap modulo 2^bits (done in the unsigned type
 *   of the same width, so there is no signed overflow); on floats IEEE.
 * - div on integers is C division (truncates toward zero); a zero divisor
 *   fails the task naming the element; INT_MIN / -1 gives INT_MIN (the
 *   wrapped quotient). On floats IEEE (x/0 is ±inf or NaN).
 * n-ary ops go a tile at a time so the running result stays in cache.
 *
 * Broadcasting (NumPy's rules for a matrix and a vector): with param
 * `bcast` "row", input 1 holds one value per column of input 0 (its
 * element count is input 0's last dimension), "col" one value per row
 * (the count of input 0's rows, every axis but the last), "scalar" one
 * value. Only two inputs then; with `swap` true the vector is the left
 * operand (v - x, v / x). The output has the matrix's meta. */
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

typedef enum { BC_NONE = 0, BC_ROW, BC_COL, BC_SCALAR } bcast_kind;

/* Reads `bcast` and `swap`. */
static int bcast_params(const char *op, const tsr_params *p, bcast_kind *kind_p, bool *swap_p, tsr_errbuf *err)
{
  const char *name = "none";
  *swap_p = false;
  int rc = tsr_params_find(p, "bcast") ? tsr_params_get_str(p, "bcast", &name, err) : 0;
  if (rc == 0 && tsr_params_find(p, "swap")) rc = tsr_params_get_bool(p, "swap", swap_p, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  static const char *const names[] = {"none", "row", "col", "scalar"};
  for (int k = 0; k < 4; k++)
    if (strcmp(name, names[k]) == 0) {
      *kind_p = (bcast_kind)k;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "%s: bcast '%s' is not none, row, col or scalar", op, name);
}

/* Elements of the vector a bcast kind needs against matrix m. */
static int64_t bcast_len(bcast_kind kind, const tsr_meta *m)
{
  int64_t count = tsr_meta_count(m), last = m->ndim > 0 ? m->shape[m->ndim - 1] : 1;
  if (kind == BC_ROW) return last;
  if (kind == BC_COL) return last == 0 ? 0 : count / last;
  return 1;
}

static int bcast_infer(const char *op, bcast_kind kind, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "%s: a broadcast takes 2 inputs, got %d", op, n);
  if (in[1].dtype != in[0].dtype)
    return tsr_fail(err, TSR_ESHAPE, "%s: dtypes %s and %s differ", op, tsr_k_str(&in[0]).s, tsr_k_str(&in[1]).s);
  int64_t want = bcast_len(kind, &in[0]);
  if (tsr_meta_count(&in[1]) != want)
    return tsr_fail(err, TSR_ESHAPE, "%s: broadcasting %s over %s needs %lld values, got %s", op,
                    kind == BC_ROW ? "a row" : kind == BC_COL ? "a column" : "a scalar", tsr_k_str(&in[0]).s,
                    (long long)want, tsr_k_str(&in[1]).s);
  *out = in[0];
  return 0;
}

/* All inputs must have input 0's meta (or, with `bcast`, input 1 is the
 * vector); the output has input 0's. */
static int same_meta_infer(const char *op, const tsr_params *p, int min, const tsr_meta *in, int n, tsr_meta *out,
                           tsr_errbuf *err)
{
  bcast_kind kind;
  bool swap;
  int rc = bcast_params(op, p, &kind, &swap, err);
  if (rc != 0) return rc;
  if (kind != BC_NONE) return bcast_infer(op, kind, in, n, out, err);
  if (n < min) return tsr_fail(err, TSR_EINVAL, "%s: takes at least %d inputs, got %d", op, min, n);
  for (int i = 1; i < n; i++)
    if (!tsr_meta_equal(&in[i], &in[0]))
      return tsr_fail(err, TSR_ESHAPE, "%s: input %d is %s but input 0 is %s", op, i, tsr_k_str(&in[i]).s,
                      tsr_k_str(&in[0]).s);
  *out = in[0];
  return 0;
}

/* The vector operand of a broadcast for `count` elements starting at
 * element `at` of the matrix, as a pointer fn can read: the vector itself
 * for a row (at is a row start), else `fill` (TILE elements) filled with
 * the one value that applies (a tile never crosses a row for "col"). */
static const void *bcast_operand(bcast_kind kind, const tsr_buf *v, size_t es, size_t at, size_t row_len,
                                 size_t count, char *fill)
{
  if (kind == BC_ROW) return v->data;
  size_t index = kind == BC_COL ? at / row_len : 0;
  for (size_t i = 0; i < count; i++) memcpy(fill + i * es, (const char *)v->data + index * es, es);
  return fill;
}

/* o[i] = a[i] OP b[i] for n elements of dtype; 0 or an error (div). */
typedef int (*apply_fn)(const bin_fn *fns, tsr_dtype dt, const void *a, const void *b, void *o, size_t n,
                        tsr_errbuf *err);

static int apply_table(const bin_fn *fns, tsr_dtype dt, const void *a, const void *b, void *o, size_t n,
                       tsr_errbuf *err)
{
  (void)err;
  fns[dt](a, b, o, n);
  return 0;
}

/* out = x OP v (or v OP x with swap), a row (or a tile of one) at a time. */
static int bcast_cpu(apply_fn apply, const bin_fn *fns, bcast_kind kind, bool swap, const tsr_buf *in, tsr_buf *out,
                     tsr_errbuf *err)
{
  size_t es = tsr_dtype_size(out->meta.dtype), count = out->nbytes / es;
  size_t row_len = out->meta.ndim > 0 ? (size_t)out->meta.shape[out->meta.ndim - 1] : 1;
  char fill[TILE * 8];
  int rc = 0;
  for (size_t r0 = 0; r0 < count && rc == 0; r0 += row_len)
    for (size_t c0 = 0; c0 < row_len && rc == 0; c0 += TILE) {
      size_t m = row_len - c0 < TILE ? row_len - c0 : TILE, at = r0 + c0;
      const char *x = (const char *)in[0].data + at * es;
      const char *v = bcast_operand(kind, &in[1], es, at, row_len, m, fill);
      if (kind == BC_ROW) v += c0 * es;
      rc = apply(fns, out->meta.dtype, swap ? v : x, swap ? x : v, (char *)out->data + at * es, m, err);
    }
  return rc;
}

/* out = in0 OP in1 OP in2 ..., left to right, a tile at a time. */
static int nary_cpu(const bin_fn *fns, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out,
                    tsr_errbuf *err)
{
  bcast_kind kind;
  bool swap;
  int rc = bcast_params("elementwise", p, &kind, &swap, err);
  if (rc != 0) return rc;
  if (kind != BC_NONE) return out->nbytes == 0 ? 0 : bcast_cpu(apply_table, fns, kind, swap, in, out, err);
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
  return same_meta_infer("add", p, 2, in, n, out, err);
}
static int add_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  return nary_cpu(add_fns, p, in, n, out, err);
}
static int mul_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  return same_meta_infer("mul", p, 2, in, n, out, err);
}
static int mul_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  return nary_cpu(mul_fns, p, in, n, out, err);
}
static int sub_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "sub: takes 2 inputs, got %d", n);
  return same_meta_infer("sub", p, 2, in, n, out, err);
}
static int sub_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  return nary_cpu(sub_fns, p, in, n, out, err);
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
  if (n != 2) return tsr_fail(err, TSR_EINVAL, "div: takes 2 inputs, got %d", n);
  return same_meta_infer("div", p, 2, in, n, out, err);
}

static int apply_div(const bin_fn *fns, tsr_dtype dt, const void *a, const void *b, void *o, size_t n,
                     tsr_errbuf *err)
{
  (void)fns;
  if (dt == TSR_F32) div_f32(a, b, o, n);
  else if (dt == TSR_F64) div_f64(a, b, o, n);
  else return div_int(dt, a, b, o, n, err);
  return 0;
}

static int div_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  bcast_kind kind;
  bool swap;
  int rc = bcast_params("div", p, &kind, &swap, err);
  if (rc != 0 || out->nbytes == 0) return rc;
  if (kind != BC_NONE) return bcast_cpu(apply_div, NULL, kind, swap, in, out, err);
  tsr_dtype dt = out->meta.dtype;
  return apply_div(NULL, dt, in[0].data, in[1].data, out->data, out->nbytes / tsr_dtype_size(dt), err);
}

const tsr_op_def tsr_op_add = {"add", 2, -1, add_infer, add_cpu, false, NULL};
const tsr_op_def tsr_op_mul = {"mul", 2, -1, mul_infer, mul_cpu, false, NULL};
const tsr_op_def tsr_op_sub = {"sub", 2, 2, sub_infer, sub_cpu, false, NULL};
const tsr_op_def tsr_op_div = {"div", 2, 2, div_infer, div_cpu, false, NULL};
