/* Elementwise builders: one task per block. Operands must have the same
 * shape; when their chunks differ the second is rechunked to the first's. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

static bool same_chunks(const tsr_array *a, const tsr_array *b)
{
  for (int d = 0; d < a->ndim; d++)
    if (a->chunk[d] != b->chunk[d]) return false;
  return true;
}

static int check_same_shape(const char *op, const tsr_array *a, const tsr_array *b)
{
  if (a == NULL || b == NULL) return client_fail(TSR_EINVAL, "%s: array is NULL", op);
  bool same = a->ndim == b->ndim;
  for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
  if (!same) {
    char sa[64] = "", sb[64] = "";
    for (int d = 0; d < a->ndim; d++) snprintf(sa + strlen(sa), sizeof sa - strlen(sa), d ? ",%" PRId64 : "%" PRId64, a->shape[d]);
    for (int d = 0; d < b->ndim; d++) snprintf(sb + strlen(sb), sizeof sb - strlen(sb), d ? ",%" PRId64 : "%" PRId64, b->shape[d]);
    return client_fail(TSR_ESHAPE, "%s: shapes (%s) and (%s) differ", op, sa, sb);
  }
  if (a->dtype != b->dtype)
    return client_fail(TSR_ESHAPE, "%s: dtypes %s and %s differ (astype one first)", op, gdtype_name(a->dtype),
                       gdtype_name(b->dtype));
  return 0;
}

static int binary(tsr_array_ctx *ctx, const char *op, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  int rc = check_same_shape(op, a, b);
  if (rc != 0) return rc;
  const tsr_array *bb = b;
  tsr_array *rechunked = NULL;
  if (!same_chunks(a, b)) {
    rc = tsr_rechunk(ctx, b, a->chunk, &rechunked);
    if (rc != 0) return rc;
    bb = rechunked;
  }
  tsr_array *out = NULL;
  rc = garray_new(ctx, op, a->dtype, a->ndim, a->shape, a->chunk, &out);
  for (size_t i = 0; rc == 0 && i < out->nblocks; i++) {
    const char *inputs[2] = {a->keys[i], bb->keys[i]};
    rc = gtask_add(ctx, out->keys[i], op, NULL, inputs, 2);
  }
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
  tsr_array *out = NULL;
  int rc = garray_new(ctx, op, out_dtype, a->ndim, a->shape, a->chunk, &out);
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
  if (rc == 0) rc = unary(ctx, "astype", args, a, dtype, out_p);
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
