/* Elementwise builders: one task per block. Operands have the same shape
 * (the second is rechunked to the first's chunks when they differ), or
 * one is a row vector, a column vector or a scalar broadcast against the
 * other (NumPy's rules for 2-D; the vector is rechunked to match). Dtypes
 * promote as NumPy's do, through astype tasks. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

/* NumPy's promotion for the dtypes we have: a float wins over an integer
 * (f32 only against u8, as NumPy keeps u8 + f32 in f32), the wider wins
 * among floats and among integers (u8 < i32 < i64). An integer array with
 * a missing-value sentinel computes in a float type, so its missing values
 * become NaN and stay missing. */
static tsr_dtype promote(const tsr_array *a, const tsr_array *b)
{
  tsr_dtype x = a->dtype, y = b->dtype;
  bool fx = x == TSR_F32 || x == TSR_F64, fy = y == TSR_F32 || y == TSR_F64;
  if (fx && fy) return x == TSR_F64 || y == TSR_F64 ? TSR_F64 : TSR_F32;
  if (fx || fy) {
    tsr_dtype f = fx ? x : y, i = fx ? y : x;
    return f == TSR_F32 && i == TSR_U8 ? TSR_F32 : TSR_F64;
  }
  if (a->missing >= 0 || b->missing >= 0) return TSR_F64;
  return x > y ? x : y;  /* TSR_U8 < TSR_I32 < TSR_I64 */
}

/* a converted to dtype (missing values to NaN), or a itself. */
static int convert(tsr_array_ctx *ctx, const tsr_array *a, tsr_dtype dtype, const tsr_array **out_p)
{
  *out_p = a;
  if (a->dtype == dtype) return 0;
  tsr_array *c = NULL;
  int rc = tsr_astype(ctx, a, dtype, &c);
  if (rc == 0) *out_p = c;
  return rc;
}

typedef enum { BC_NONE = 0, BC_ROW, BC_COL, BC_SCALAR } bcast_kind;
static const char *const bcast_names[] = {"none", "row", "col", "scalar"};

/* How b broadcasts against the matrix m (NumPy's rules, for a vector of
 * one value per column or per row, or a scalar), or -1 when it does not. */
static int bcast_of(const tsr_array *m, const tsr_array *v)
{
  int64_t count = 1, last = m->ndim > 0 ? m->shape[m->ndim - 1] : 1;
  int non1 = -1, n_non1 = 0;
  for (int d = 0; d < v->ndim; d++) {
    count *= v->shape[d];
    if (v->shape[d] != 1) non1 = d, n_non1++;
  }
  if (v->ndim > m->ndim) return -1;
  if (count == 1) return BC_SCALAR;
  if (n_non1 != 1) return -1;
  if (non1 == v->ndim - 1 && v->shape[non1] == last) return BC_ROW;
  if (m->ndim == 2 && v->ndim == 2 && non1 == 0 && v->shape[0] == m->shape[0]) return BC_COL;
  return -1;
}

static bool same_shape(const tsr_array *a, const tsr_array *b)
{
  bool same = a->ndim == b->ndim;
  for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
  return same;
}

static int shape_error(const char *op, const tsr_array *a, const tsr_array *b)
{
  char sa[64] = "", sb[64] = "";
  for (int d = 0; d < a->ndim; d++) snprintf(sa + strlen(sa), sizeof sa - strlen(sa), d ? ",%" PRId64 : "%" PRId64, a->shape[d]);
  for (int d = 0; d < b->ndim; d++) snprintf(sb + strlen(sb), sizeof sb - strlen(sb), d ? ",%" PRId64 : "%" PRId64, b->shape[d]);
  return client_fail(TSR_ESHAPE, "%s: shapes (%s) and (%s) do not broadcast", op, sa, sb);
}

/* The operands of a binary op, aligned: m the (larger) matrix, v the other
 * with chunks matching m's along the broadcast axis. */
typedef struct operands {
  const tsr_array *m, *v;
  bcast_kind kind;
  bool swap;          /* v is the left operand */
} operands;

/* v's wanted chunks for kind (one chunk where it broadcasts). */
static void vector_chunks(const operands *o, int64_t *chunks)
{
  for (int d = 0; d < o->v->ndim; d++) chunks[d] = o->v->shape[d];
  if (o->kind == BC_ROW) chunks[o->v->ndim - 1] = o->m->chunk[o->m->ndim - 1];
  if (o->kind == BC_COL) chunks[0] = o->m->chunk[0];
}

static int align(tsr_array_ctx *ctx, operands *o)
{
  int64_t want[TSR_MAX_NDIM];
  if (o->kind == BC_NONE) memcpy(want, o->m->chunk, sizeof want);
  else vector_chunks(o, want);
  bool same = true;
  for (int d = 0; d < o->v->ndim; d++) same = same && (o->v->chunk[d] == want[d] || (want[d] >= o->v->shape[d] && o->v->nchunks[d] == 1));
  if (same) return 0;
  tsr_array *re = NULL;
  int rc = tsr_rechunk(ctx, o->v, want, &re);
  if (rc == 0) o->v = re;
  return rc;
}

static int plan_operands(tsr_array_ctx *ctx, const char *op, const tsr_array *a, const tsr_array *b, operands *o)
{
  if (same_shape(a, b)) *o = (operands){a, b, BC_NONE, false};
  else {
    int ka = bcast_of(a, b), kb = bcast_of(b, a);
    if (ka < 0 && kb < 0) return shape_error(op, a, b);
    if (ka >= 0) *o = (operands){a, b, (bcast_kind)ka, false};
    else *o = (operands){b, a, (bcast_kind)kb, true};
  }
  return align(ctx, o);
}

/* The key of v's block matching m's block b. */
static const char *vector_key(const operands *o, size_t b)
{
  if (o->kind == BC_NONE) return o->v->keys[b];
  if (o->kind == BC_SCALAR) return o->v->keys[0];
  int64_t idx[TSR_MAX_NDIM];
  garray_index(o->m, b, idx);
  return o->v->keys[o->kind == BC_ROW ? idx[o->m->ndim - 1] : idx[0]];
}

static int bcast_args(const operands *o, tsr_args **args_p)
{
  *args_p = NULL;
  if (o->kind == BC_NONE) return 0;
  int rc = tsr_args_new(args_p);
  if (rc == 0) rc = tsr_args_str(*args_p, "bcast", bcast_names[o->kind]);
  if (rc == 0 && o->swap) rc = tsr_args_bool(*args_p, "swap", true);
  return rc;
}

static int binary(tsr_array_ctx *ctx, const char *op, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  if (a == NULL || b == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "%s: array is NULL", op);
  tsr_dtype dtype = promote(a, b);
  const tsr_array *da = NULL, *db = NULL;
  int rc = garray_dense(ctx, a, &da);
  if (rc == 0) rc = garray_dense(ctx, b, &db);
  if (rc == 0) rc = convert(ctx, da, dtype, &da);
  if (rc == 0) rc = convert(ctx, db, dtype, &db);
  operands o = {NULL, NULL, BC_NONE, false};
  if (rc == 0) rc = plan_operands(ctx, op, da, db, &o);
  if (rc != 0) return rc;
  tsr_args *args = NULL;
  tsr_array *out = NULL;
  rc = bcast_args(&o, &args);
  if (rc == 0) rc = garray_new(ctx, op, dtype, o.m->ndim, o.m->shape, o.m->chunk, &out);
  for (size_t i = 0; rc == 0 && i < out->nblocks; i++) {
    const char *inputs[2] = {o.m->keys[i], vector_key(&o, i)};
    rc = gtask_add(ctx, out->keys[i], op, args, inputs, 2);
  }
  tsr_args_destroy(&args);
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}

TSR_API int tsr_add(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  return binary(ctx, "add", a, b, out_p);
}

TSR_API int tsr_sub(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  return binary(ctx, "sub", a, b, out_p);
}

TSR_API int tsr_mul(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  return binary(ctx, "mul", a, b, out_p);
}

TSR_API int tsr_div(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  return binary(ctx, "div", a, b, out_p);
}

/* One task per block: op(params; block), output dtype out_dtype. */
static int unary(tsr_array_ctx *ctx, const char *op, const tsr_args *params, const tsr_array *a, tsr_dtype out_dtype,
                 tsr_array **out_p)
{
  if (a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "%s: array is NULL", op);
  int rc = garray_dense(ctx, a, &a);
  if (rc != 0) return rc;
  tsr_array *out = NULL;
  rc = garray_new(ctx, op, out_dtype, a->ndim, a->shape, a->chunk, &out);
  for (size_t i = 0; rc == 0 && i < out->nblocks; i++) {
    const char *in = a->keys[i];
    rc = gtask_add(ctx, out->keys[i], op, params, &in, 1);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}

TSR_API int tsr_scale(tsr_array_ctx *ctx, const tsr_array *a, double factor, double offset, tsr_array **out_p)
{
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_float(args, "factor", factor);
  if (rc == 0) rc = tsr_args_float(args, "offset", offset);
  if (rc == 0) rc = unary(ctx, "scale", args, a, a ? a->dtype : TSR_F64, out_p);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_astype(tsr_array_ctx *ctx, const tsr_array *a, tsr_dtype dtype, tsr_array **out_p)
{
  if (tsr_dtype_size(dtype) == 0) return client_fail(TSR_EINVAL, "astype: unknown dtype %d", (int)dtype);
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_str(args, "dtype", gdtype_name(dtype));
  bool to_float = dtype == TSR_F32 || dtype == TSR_F64;
  if (rc == 0 && a != NULL && a->missing >= 0 && to_float) rc = tsr_args_int(args, "missing", a->missing);
  if (rc == 0) rc = unary(ctx, "astype", args, a, dtype, out_p);
  if (rc == 0 && !to_float) (*out_p)->missing = a->missing;  /* an integer keeps its sentinel's value */
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_fillnan(tsr_array_ctx *ctx, const tsr_array *a, double value, tsr_array **out_p)
{
  if (a != NULL && a->dtype != TSR_F32 && a->dtype != TSR_F64)
    return client_fail(TSR_ESHAPE, "fillnan: needs a float array, got %s (astype first)", gdtype_name(a->dtype));
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_float(args, "value", value);
  if (rc == 0) rc = unary(ctx, "fillnan", args, a, a ? a->dtype : TSR_F64, out_p);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_ufunc(tsr_array_ctx *ctx, const tsr_array *a, const char *fn, tsr_array **out_p)
{
  static const char *const known[] = {"sqrt", "log", "log1p", "exp", "expm1", "abs", "square"};
  bool ok = false;
  for (size_t i = 0; fn != NULL && i < sizeof known / sizeof known[0]; i++) ok = ok || strcmp(fn, known[i]) == 0;
  if (!ok) return client_fail(TSR_EINVAL, "ufunc: unknown fn '%s' (sqrt, log, log1p, exp, expm1, abs, square)", fn ? fn : "(null)");
  const tsr_array *fa = a;
  int rc = a != NULL && a->missing >= 0 ? convert(ctx, a, TSR_F64, &fa) : 0;  /* missing values become NaN */
  tsr_args *args = NULL;
  if (rc == 0) rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_str(args, "fn", fn);
  tsr_dtype dt = fa != NULL && fa->dtype == TSR_F32 ? TSR_F32 : TSR_F64;
  if (rc == 0) rc = unary(ctx, "ufunc", args, fa, dt, out_p);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_map_blocks(tsr_array_ctx *ctx, const char *op, const tsr_args *params, const tsr_array *a,
                           tsr_dtype out_dtype, tsr_array **out_p)
{
  if (op == NULL || op[0] == '\0') return client_fail(TSR_EINVAL, "map_blocks: op name is empty");
  if (tsr_dtype_size(out_dtype) == 0) return client_fail(TSR_EINVAL, "map_blocks: unknown dtype %d", (int)out_dtype);
  return unary(ctx, op, params, a, out_dtype, out_p);
}
