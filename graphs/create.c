/* Array creation: random arrays (docs/random.md), constants, .npy files.
 * Each chunk is one task with no inputs that knows its offset in the whole
 * array, which is what makes random values independent of the chunking. */
#include <stdio.h>
#include <string.h>

#include "graphs.h"
#include "util/npy.h"

#define TSR_API __attribute__((visibility("default")))

/* Fills the per-chunk geometry params shared by every creation op. */
static int chunk_geometry(tsr_args *args, const tsr_array *a, size_t block)
{
  int64_t idx[TSR_MAX_NDIM], shape[TSR_MAX_NDIM], offset[TSR_MAX_NDIM];
  garray_index(a, block, idx);
  garray_block_shape(a, idx, shape);
  garray_block_offset(a, idx, offset);
  int rc = gargs_shape(args, "shape", a->ndim, shape);
  if (rc == 0) rc = gargs_shape(args, "offset", a->ndim, offset);
  if (rc == 0) rc = gargs_shape(args, "global_shape", a->ndim, a->shape);
  return rc;
}

typedef int (*fill_args_fn)(tsr_args *args, const void *spec);

/* Builds an array whose every chunk is op(geometry + fill(spec)). */
static int create(tsr_array_ctx *ctx, const char *op, tsr_dtype dtype, int ndim, const int64_t *shape,
                  const int64_t *chunks, fill_args_fn fill, const void *spec, tsr_array **out_p)
{
  if (ctx == NULL || out_p == NULL || (ndim > 0 && shape == NULL))
    return client_fail(TSR_EINVAL, "%s: NULL argument", op);
  tsr_array *a = NULL;
  int rc = garray_new(ctx, op, dtype, ndim, shape, chunks, &a);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    tsr_args *args = NULL;
    rc = tsr_args_new(&args);
    if (rc == 0) rc = chunk_geometry(args, a, b);
    if (rc == 0) rc = tsr_args_str(args, "dtype", gdtype_name(dtype));
    if (rc == 0) rc = fill(args, spec);
    if (rc == 0) rc = gtask_add(ctx, a->keys[b], op, args, NULL, 0);
    tsr_args_destroy(&args);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &a);
    return rc;
  }
  *out_p = a;
  return 0;
}

static int fill_seed(tsr_args *args, const void *spec) { return tsr_args_int(args, "seed", *(const int64_t *)spec); }

static bool is_float(tsr_dtype dtype) { return dtype == TSR_F32 || dtype == TSR_F64; }

TSR_API int tsr_random_uniform(tsr_array_ctx *ctx, uint64_t seed, tsr_dtype dtype, int ndim, const int64_t *shape,
                               const int64_t *chunks, tsr_array **out_p)
{
  if (!is_float(dtype)) return client_fail(TSR_EINVAL, "random_uniform: dtype must be f32 or f64");
  int64_t s = (int64_t)seed;
  return create(ctx, "random_uniform", dtype, ndim, shape, chunks, fill_seed, &s, out_p);
}

TSR_API int tsr_random_normal(tsr_array_ctx *ctx, uint64_t seed, tsr_dtype dtype, int ndim, const int64_t *shape,
                              const int64_t *chunks, tsr_array **out_p)
{
  if (!is_float(dtype)) return client_fail(TSR_EINVAL, "random_normal: dtype must be f32 or f64");
  int64_t s = (int64_t)seed;
  return create(ctx, "random_normal", dtype, ndim, shape, chunks, fill_seed, &s, out_p);
}

typedef struct randint_spec {
  int64_t seed, low, high;
} randint_spec;

static int fill_randint(tsr_args *args, const void *spec)
{
  const randint_spec *r = spec;
  int rc = tsr_args_int(args, "seed", r->seed);
  if (rc == 0) rc = tsr_args_int(args, "low", r->low);
  if (rc == 0) rc = tsr_args_int(args, "high", r->high);
  return rc;
}

TSR_API int tsr_randint(tsr_array_ctx *ctx, uint64_t seed, int64_t low, int64_t high, tsr_dtype dtype, int ndim,
                        const int64_t *shape, const int64_t *chunks, tsr_array **out_p)
{
  if (is_float(dtype)) return client_fail(TSR_EINVAL, "randint: dtype must be an integer type");
  if (high <= low || (uint64_t)(high - low) > (1ull << 32))
    return client_fail(TSR_EINVAL, "randint: need low < high and high - low <= 2^32 (got %lld, %lld)",
                       (long long)low, (long long)high);
  randint_spec spec = {(int64_t)seed, low, high};
  return create(ctx, "randint", dtype, ndim, shape, chunks, fill_randint, &spec, out_p);
}

static int fill_value(tsr_args *args, const void *spec) { return tsr_args_float(args, "value", *(const double *)spec); }

TSR_API int tsr_full(tsr_array_ctx *ctx, double value, tsr_dtype dtype, int ndim, const int64_t *shape,
                     const int64_t *chunks, tsr_array **out_p)
{
  return create(ctx, "full", dtype, ndim, shape, chunks, fill_value, &value, out_p);
}

static int fill_path(tsr_args *args, const void *spec) { return tsr_args_str(args, "path", spec); }

TSR_API int tsr_from_npy(tsr_array_ctx *ctx, const char *path, const int64_t *chunks, tsr_array **out_p)
{
  if (path == NULL) return client_fail(TSR_EINVAL, "from_npy: path is NULL");
  tsr_npy_info info;
  tsr_errbuf err = {{0}};
  int rc = tsr_npy_read_header(path, &info, &err);
  if (rc != 0) return client_fail(rc, "from_npy: %s", err.text);
  return create(ctx, "load_npy", info.meta.dtype, info.meta.ndim, info.meta.shape, chunks, fill_path, path, out_p);
}
