/* kernels/cpu/reduce.c — sum, over one axis or over everything.
 *
 * Output dtype: integers → i64 (accumulated in 64-bit, wrapping modulo
 * 2^64), floats keep theirs (accumulated in double, rounded once at the
 * end). The order of additions is fixed, so results are deterministic:
 * along an axis, in index order; over a contiguous run (the total, or the
 * last axis), eight interleaved partial sums combined pairwise.
 *
 * The input is viewed as [outer, n, inner] with n the summed axis; the
 * total is [1, count, 1].
 *
 * Missing values (params): `skipna` true skips NaN of a float input, int
 * `missing` skips that value of an integer input (a genotype's 3), and
 * `count` true counts the elements not skipped instead of summing them
 * (output i64). So nansum is sum with skipna/missing, and a nanmean is
 * the nansum over the count.
 *
 * A 2-bit packed input (param `cols`: its logical column count; values
 * 0..3) sums over axis 0 straight from the packed bytes: per-column
 * accumulators, a table lookup per genotype, no unpacked copy (the column
 * statistics of a genotype matrix). Output i64 [cols]. */
#include <math.h>
#include <string.h>

#include "ops.h"

#define TILE 1024

static bool is_int(tsr_dtype dt)
{
  return dt == TSR_U8 || dt == TSR_I32 || dt == TSR_I64;
}

/* Which elements count and what is summed (see the top). */
typedef struct sum_mode {
  bool skipna, has_missing, count;
  int64_t missing;
} sum_mode;

static int sum_mode_parse(const tsr_params *p, sum_mode *m, tsr_errbuf *err)
{
  *m = (sum_mode){false, tsr_params_find(p, "missing") != NULL, false, 0};
  int rc = tsr_params_find(p, "skipna") ? tsr_params_get_bool(p, "skipna", &m->skipna, err) : 0;
  if (rc == 0 && tsr_params_find(p, "count")) rc = tsr_params_get_bool(p, "count", &m->count, err);
  if (rc == 0 && m->has_missing) rc = tsr_params_get_int(p, "missing", &m->missing, err);
  return rc == 0 ? 0 : tsr_k_param_fail("sum", rc, err);
}

/* Applies the mode to a loaded tile: skipped elements become 0, and with
 * count every other one 1. */
static void mask_f64(const sum_mode *sm, double *t, size_t m)
{
  for (size_t i = 0; i < m; i++) {
    bool skip = (sm->skipna || sm->count) && isnan(t[i]);
    t[i] = skip ? 0.0 : sm->count ? 1.0 : t[i];
  }
}

static void mask_i64(const sum_mode *sm, int64_t *t, size_t m)
{
  for (size_t i = 0; i < m; i++) {
    bool skip = sm->has_missing && t[i] == sm->missing;
    t[i] = skip ? 0 : sm->count ? 1 : t[i];
  }
}

static bool masks(const sum_mode *sm) { return sm->skipna || sm->has_missing || sm->count; }

static int sum_axis(const tsr_params *p, int ndim, int64_t *axis_p, tsr_errbuf *err)
{
  int rc = tsr_params_opt_int(p, "axis", -1, axis_p, err);
  if (rc != 0) return tsr_k_param_fail("sum", rc, err);
  if (*axis_p != -1 && (*axis_p < 0 || *axis_p >= ndim))
    return ndim == 0 ? tsr_fail(err, TSR_EINVAL, "sum: axis %lld is out of range for a 0-d input (only -1)",
                                (long long)*axis_p)
                     : tsr_fail(err, TSR_EINVAL, "sum: axis %lld is out of range for %d-d input (expected -1 or 0..%d)",
                                (long long)*axis_p, ndim, ndim - 1);
  return 0;
}

/* ---------- a packed input (param cols) ---------- */

static int packed_cols(const tsr_params *p, const tsr_meta *in, int64_t axis, int64_t *cols_p, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, "cols", cols_p, err);
  if (rc != 0) return tsr_k_param_fail("sum", rc, err);
  int64_t cb = *cols_p / 4 + (*cols_p % 4 != 0);
  if (in->dtype != TSR_U8 || in->ndim != 2 || *cols_p < 0 || in->shape[1] != cb || axis != 0)
    return tsr_fail(err, TSR_ESHAPE, "sum: a packed input of %lld columns is u8 [r, %lld] summed over axis 0, got %s axis %lld",
                    (long long)*cols_p, (long long)cb, tsr_k_str(in).s, (long long)axis);
  return 0;
}

/* out[j] = the sum over rows of what code x of column j contributes. */
static void packed_sum(const sum_mode *sm, const uint8_t *x, int64_t rows, int64_t cols, int64_t *out)
{
  int64_t add[4], cb = cols / 4 + (cols % 4 != 0);
  for (int v = 0; v < 4; v++) add[v] = sm->has_missing && v == sm->missing ? 0 : sm->count ? 1 : v;
  memset(out, 0, (size_t)cols * sizeof *out);
  for (int64_t r = 0; r < rows; r++, x += cb) {
    int64_t j = 0;
    for (; j + 4 <= cols; j += 4) {
      unsigned b = x[j / 4];
      out[j] += add[b & 3u], out[j + 1] += add[(b >> 2) & 3u], out[j + 2] += add[(b >> 4) & 3u], out[j + 3] += add[b >> 6];
    }
    for (; j < cols; j++) out[j] += add[(x[j / 4] >> (2 * (j % 4))) & 3u];
  }
}

static int sum_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t axis, cols;
  sum_mode sm;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "sum: takes 1 input, got %d", n);
  if (tsr_params_find(p, "cols") != NULL) {
    int rc = tsr_params_opt_int(p, "axis", -1, &axis, err);
    if (rc == 0) rc = sum_mode_parse(p, &sm, err);
    if (rc == 0) rc = packed_cols(p, &in[0], axis, &cols, err);
    if (rc == 0) tsr_k_meta_set(out, TSR_I64, 1, &cols);
    return rc;
  }
  int rc = sum_axis(p, in[0].ndim, &axis, err);
  if (rc == 0) rc = sum_mode_parse(p, &sm, err);
  if (rc != 0) return rc;
  tsr_dtype dt = is_int(in[0].dtype) || sm.count ? TSR_I64 : in[0].dtype;
  if (axis == -1) {
    tsr_k_meta_set(out, dt, 0, NULL);
    return 0;
  }
  int64_t shape[TSR_MAX_NDIM];
  int k = 0;
  for (int d = 0; d < in[0].ndim; d++)
    if (d != axis) shape[k++] = in[0].shape[d];
  tsr_k_meta_set(out, dt, k, shape);
  return 0;
}

/* Sum of n contiguous elements of dtype at src, as double. */
static double run_f64(const sum_mode *sm, tsr_dtype dt, const char *src, size_t n)
{
  double acc[8] = {0}, t[TILE];
  size_t es = tsr_dtype_size(dt);
  for (size_t at = 0; at < n; at += TILE) {
    size_t m = n - at < TILE ? n - at : TILE, i = 0;
    tsr_k_load_f64(dt, src + at * es, m, t);
    if (masks(sm)) mask_f64(sm, t, m);
    for (; i + 8 <= m; i += 8)
      for (int j = 0; j < 8; j++) acc[j] += t[i + j];
    for (; i < m; i++) acc[i % 8] += t[i];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Sum of n contiguous integer elements at src, wrapping modulo 2^64. */
static int64_t run_i64(const sum_mode *sm, tsr_dtype dt, const char *src, size_t n)
{
  uint64_t acc = 0;
  int64_t t[TILE];
  size_t es = tsr_dtype_size(dt);
  for (size_t at = 0; at < n; at += TILE) {
    size_t m = n - at < TILE ? n - at : TILE;
    tsr_k_load_i64(dt, src + at * es, m, t);
    if (masks(sm)) mask_i64(sm, t, m);
    for (size_t i = 0; i < m; i++) acc += (uint64_t)t[i];
  }
  return (int64_t)acc;
}

/* out[o, j] for j in [j0, j0+m): the sum over a of in[o, a, j], in a order. */
static void strided_tile(const sum_mode *sm, tsr_dtype dt, const char *src, size_t n, size_t inner, size_t j0,
                         size_t m, void *out)
{
  size_t es = tsr_dtype_size(dt);
  if (is_int(dt)) {
    uint64_t acc[TILE] = {0};
    int64_t t[TILE];
    for (size_t a = 0; a < n; a++) {
      tsr_k_load_i64(dt, src + (a * inner + j0) * es, m, t);
      if (masks(sm)) mask_i64(sm, t, m);
      for (size_t i = 0; i < m; i++) acc[i] += (uint64_t)t[i];
    }
    for (size_t i = 0; i < m; i++) ((int64_t *)out)[j0 + i] = (int64_t)acc[i];
    return;
  }
  double acc[TILE] = {0}, t[TILE];
  for (size_t a = 0; a < n; a++) {
    tsr_k_load_f64(dt, src + (a * inner + j0) * es, m, t);
    if (masks(sm)) mask_f64(sm, t, m);
    for (size_t i = 0; i < m; i++) acc[i] += t[i];
  }
  for (size_t i = 0; i < m; i++) {
    if (sm->count) ((int64_t *)out)[j0 + i] = (int64_t)acc[i];
    else if (dt == TSR_F32) ((float *)out)[j0 + i] = (float)acc[i];
    else ((double *)out)[j0 + i] = acc[i];
  }
}

/* Stores one contiguous run's sum as element k of out. */
static void store_run(const sum_mode *sm, tsr_dtype in_dt, const char *src, size_t n, void *out, size_t k)
{
  if (is_int(in_dt)) ((int64_t *)out)[k] = run_i64(sm, in_dt, src, n);
  else if (sm->count) ((int64_t *)out)[k] = (int64_t)run_f64(sm, in_dt, src, n);
  else if (in_dt == TSR_F32) ((float *)out)[k] = (float)run_f64(sm, in_dt, src, n);
  else ((double *)out)[k] = run_f64(sm, in_dt, src, n);
}

static int sum_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)n_in;
  int64_t axis;
  sum_mode sm;
  const tsr_meta *m = &in[0].meta;
  int rc = sum_axis(p, m->ndim, &axis, err);
  if (rc == 0) rc = sum_mode_parse(p, &sm, err);
  if (rc != 0) return rc;
  if (tsr_params_find(p, "cols") != NULL) {
    packed_sum(&sm, in[0].data, m->shape[0], out->meta.shape[0], out->data);
    return 0;
  }
  size_t count = (size_t)tsr_meta_count(m), outer = 1, n = count, inner = 1, es = tsr_dtype_size(m->dtype);
  if (axis >= 0) {
    n = (size_t)m->shape[axis];
    for (int d = 0; d < m->ndim; d++) {
      if (d < axis) outer *= (size_t)m->shape[d];
      if (d > axis) inner *= (size_t)m->shape[d];
    }
  }
  const char *src = in[0].data;
  for (size_t o = 0; o < outer; o++) {
    const char *block = src + o * n * inner * es;
    char *dst = (char *)out->data + o * inner * tsr_dtype_size(out->meta.dtype);
    if (inner == 1) store_run(&sm, m->dtype, block, n, dst, 0);
    else
      for (size_t j0 = 0; j0 < inner; j0 += TILE)
        strided_tile(&sm, m->dtype, block, n, inner, j0, inner - j0 < TILE ? inner - j0 : TILE, dst);
  }
  return 0;
}

const tsr_op_def tsr_op_sum = {"sum", 1, 1, sum_infer, sum_cpu, false, NULL};
