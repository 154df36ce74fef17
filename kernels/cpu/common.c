/* kernels/cpu/common.c — param parsing and message helpers shared by the
 * CPU ops (see ops.h for the contracts). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

int tsr_k_param_fail(const char *op, int rc, tsr_errbuf *err)
{
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (err == NULL) return rc;
  char text[TSR_ERRMSG_LEN];
  snprintf(text, sizeof text, "%s", err->text);
  return tsr_fail(err, rc, "%s: %s", op, text);
}

void tsr_k_meta_set(tsr_meta *meta, tsr_dtype dtype, int ndim, const int64_t *shape)
{
  memset(meta, 0, sizeof *meta);
  meta->dtype = dtype;
  meta->ndim = ndim;
  for (int d = 0; d < ndim; d++) meta->shape[d] = shape[d];
}

tsr_k_str_buf tsr_k_str(const tsr_meta *meta)
{
  tsr_k_str_buf b;
  tsr_meta_format(meta, b.s, sizeof b.s);
  return b;
}

tsr_k_str_buf tsr_k_dims_str(const int64_t *dims, int n)
{
  tsr_k_str_buf b;
  size_t used = (size_t)snprintf(b.s, sizeof b.s, "[");
  for (int d = 0; d < n && used < sizeof b.s; d++)
    used += (size_t)snprintf(b.s + used, sizeof b.s - used, d ? ",%" PRId64 : "%" PRId64, dims[d]);
  if (used < sizeof b.s) snprintf(b.s + used, sizeof b.s - used, "]");
  return b;
}

int tsr_k_shape_param(const char *op, const tsr_params *params, const char *name, int64_t shape[TSR_MAX_NDIM],
                      int *ndim_p, tsr_errbuf *err)
{
  const int64_t *dims;
  size_t n;
  if (tsr_params_find(params, name) == NULL)
    return tsr_fail(err, TSR_ENOTFOUND, "%s: missing parameter '%s'", op, name);
  int rc = tsr_params_get_ints(params, name, &dims, &n, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  if (n > TSR_MAX_NDIM)
    return tsr_fail(err, TSR_ESHAPE, "%s: '%s' has %zu dimensions, at most %d are supported", op, name, n,
                    TSR_MAX_NDIM);
  for (size_t d = 0; d < n; d++) {
    if (dims[d] < 0)
      return tsr_fail(err, TSR_ESHAPE, "%s: '%s' %s has a negative entry", op, name,
                      tsr_k_dims_str(dims, (int)n).s);
    shape[d] = dims[d];
  }
  *ndim_p = (int)n;
  return 0;
}

/* Reads an optional per-dimension list that must have ndim entries. */
static int grid_list(const char *op, const tsr_params *params, const char *name, int ndim, int64_t *dims,
                     tsr_errbuf *err)
{
  int64_t got[TSR_MAX_NDIM];
  int n = 0;
  if (tsr_params_find(params, name) == NULL) return 0;  /* keep the caller's default */
  int rc = tsr_k_shape_param(op, params, name, got, &n, err);
  if (rc != 0) return rc;
  if (n != ndim)
    return tsr_fail(err, TSR_ESHAPE, "%s: '%s' %s has %d dimensions but 'shape' has %d", op, name,
                    tsr_k_dims_str(got, n).s, n, ndim);
  memcpy(dims, got, (size_t)n * sizeof *dims);
  return 0;
}

int tsr_k_grid_parse(const char *op, const tsr_params *params, tsr_k_grid *grid_p, tsr_errbuf *err)
{
  tsr_k_grid g;
  memset(&g, 0, sizeof g);
  int rc = tsr_k_shape_param(op, params, "shape", g.shape, &g.ndim, err);
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (rc != 0) return rc;
  memcpy(g.global, g.shape, sizeof g.global);
  rc = grid_list(op, params, "global_shape", g.ndim, g.global, err);
  if (rc == 0) rc = grid_list(op, params, "offset", g.ndim, g.offset, err);
  if (rc != 0) return rc;
  for (int d = 0; d < g.ndim; d++) {
    if (g.offset[d] > g.global[d] - g.shape[d])
      return tsr_fail(err, TSR_ESHAPE, "%s: chunk %s at offset %s exceeds global_shape %s", op,
                      tsr_k_dims_str(g.shape, g.ndim).s, tsr_k_dims_str(g.offset, g.ndim).s,
                      tsr_k_dims_str(g.global, g.ndim).s);
  }
  tsr_meta whole;
  tsr_k_meta_set(&whole, TSR_U8, g.ndim, g.global);
  g.global_count = tsr_meta_count(&whole);
  if (g.global_count < 0)
    return tsr_fail(err, TSR_ESHAPE, "%s: global_shape %s overflows a 64-bit element count", op,
                    tsr_k_dims_str(g.global, g.ndim).s);
  *grid_p = g;
  return 0;
}

int tsr_k_dtype_param(const char *op, const tsr_params *params, tsr_dtype fallback, tsr_dtype *dtype_p,
                      tsr_errbuf *err)
{
  const char *name;
  if (tsr_params_find(params, "dtype") == NULL) {
    *dtype_p = fallback;
    return 0;
  }
  int rc = tsr_params_get_str(params, "dtype", &name, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  tsr_dtype dtype = tsr_dtype_parse(name);
  if (dtype == TSR_DTYPE_NONE)
    return tsr_fail(err, TSR_EINVAL, "%s: unknown dtype '%s' (expected u8, i32, i64, f32 or f64)", op, name);
  *dtype_p = dtype;
  return 0;
}

uint8_t tsr_k_f2u8(double x)
{
  if (isnan(x) || x <= 0.0) return 0;
  if (x >= 255.0) return 255;
  return (uint8_t)x;
}

int32_t tsr_k_f2i32(double x)
{
  if (isnan(x)) return 0;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return (int32_t)x;
}

int64_t tsr_k_f2i64(double x)
{
  /* 2^63 is exact in double; every double below it converts. */
  if (isnan(x)) return 0;
  if (x >= 9223372036854775808.0) return INT64_MAX;
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}

void tsr_k_load_i64(tsr_dtype dt, const void *src, size_t n, int64_t *t)
{
  if (dt == TSR_U8)
    for (size_t i = 0; i < n; i++) t[i] = ((const uint8_t *)src)[i];
  else if (dt == TSR_I32)
    for (size_t i = 0; i < n; i++) t[i] = ((const int32_t *)src)[i];
  else
    memcpy(t, src, n * sizeof *t);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* u8 and i32 → f64 with AVX-512 (exact, as the scalar loops); each returns
 * how many leading elements it converted. These conversions feed integer
 * matmuls, where the scalar loops cost as much as the arithmetic. */
__attribute__((target("avx512f"))) static size_t u8_f64_avx512(const uint8_t *s, size_t n, double *t)
{
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
    _mm512_storeu_pd(t + i, _mm512_cvtepi32_pd(_mm512_castsi512_si256(w)));
    _mm512_storeu_pd(t + i + 8, _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(w, 1)));
  }
  return i;
}

__attribute__((target("avx512f"))) static size_t i32_f64_avx512(const int32_t *s, size_t n, double *t)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm512_storeu_pd(t + i, _mm512_cvtepi32_pd(_mm256_loadu_si256((const __m256i *)(s + i))));
  return i;
}

static size_t int_f64_simd(tsr_dtype dt, const void *src, size_t n, double *t)
{
  if (n < 16 || !__builtin_cpu_supports("avx512f")) return 0;
  return dt == TSR_U8 ? u8_f64_avx512(src, n, t) : i32_f64_avx512(src, n, t);
}
#else
static size_t int_f64_simd(tsr_dtype dt, const void *src, size_t n, double *t)
{
  (void)dt, (void)src, (void)n, (void)t;
  return 0;
}
#endif

void tsr_k_load_f64(tsr_dtype dt, const void *src, size_t n, double *t)
{
  if (dt == TSR_U8)
    for (size_t i = int_f64_simd(dt, src, n, t); i < n; i++) t[i] = ((const uint8_t *)src)[i];
  else if (dt == TSR_I32)
    for (size_t i = int_f64_simd(dt, src, n, t); i < n; i++) t[i] = ((const int32_t *)src)[i];
  else if (dt == TSR_I64)
    for (size_t i = 0; i < n; i++) t[i] = (double)((const int64_t *)src)[i];
  else if (dt == TSR_F32)
    for (size_t i = 0; i < n; i++) t[i] = ((const float *)src)[i];
  else
    memcpy(t, src, n * sizeof *t);
}

bool tsr_k_is_float(tsr_dtype dt)
{
  return dt == TSR_F32 || dt == TSR_F64;
}

void tsr_k_to_float(tsr_dtype to, tsr_dtype from, const void *src, size_t n, void *dst)
{
  if (to == TSR_F64) {
    tsr_k_load_f64(from, src, n, dst);
    return;
  }
  float *o = dst;
  if (from == TSR_U8)
    for (size_t i = 0; i < n; i++) o[i] = ((const uint8_t *)src)[i];
  else if (from == TSR_I32)
    for (size_t i = 0; i < n; i++) o[i] = (float)((const int32_t *)src)[i];
  else if (from == TSR_I64)
    for (size_t i = 0; i < n; i++) o[i] = (float)((const int64_t *)src)[i];
  else if (from == TSR_F32)
    memcpy(o, src, n * sizeof *o);
  else
    for (size_t i = 0; i < n; i++) o[i] = (float)((const double *)src)[i];
}

void tsr_k_copy_block(size_t es, int nd, const int64_t *block, const void *src, const int64_t *src_shape,
                      const int64_t *src_start, void *dst, const int64_t *dst_shape, const int64_t *dst_start)
{
  /* A run spans the last dim plus the trailing dims whole in all three. */
  int j = nd - 1;
  while (j > 0 && block[j] == src_shape[j] && block[j] == dst_shape[j]) j--;
  size_t run = es, runs = 1;
  for (int d = 0; d < nd; d++) {
    if (block[d] == 0) return;
    if (d < j) runs *= (size_t)block[d];
    else run *= (size_t)block[d];
  }
  int64_t idx[TSR_MAX_NDIM] = {0};
  for (size_t r = 0; r < runs; r++) {
    size_t s = 0, t = 0;  /* element offsets of the run's start */
    for (int d = 0; d < nd; d++) {
      int64_t i = d < j ? idx[d] : 0;
      s = s * (size_t)src_shape[d] + (size_t)(src_start[d] + i);
      t = t * (size_t)dst_shape[d] + (size_t)(dst_start[d] + i);
    }
    memcpy((char *)dst + t * es, (const char *)src + s * es, run);
    for (int d = j - 1; d >= 0; d--) {
      if (++idx[d] < block[d]) break;
      idx[d] = 0;
    }
  }
}

void tsr_k_store_f64(tsr_dtype dt, const double *t, size_t n, void *dst)
{
  if (dt == TSR_U8)
    for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = tsr_k_f2u8(t[i]);
  else if (dt == TSR_I32)
    for (size_t i = 0; i < n; i++) ((int32_t *)dst)[i] = tsr_k_f2i32(t[i]);
  else if (dt == TSR_I64)
    for (size_t i = 0; i < n; i++) ((int64_t *)dst)[i] = tsr_k_f2i64(t[i]);
  else if (dt == TSR_F32)
    for (size_t i = 0; i < n; i++) ((float *)dst)[i] = (float)t[i];
  else
    memcpy(dst, t, n * sizeof *t);
}
