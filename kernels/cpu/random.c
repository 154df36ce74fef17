/* kernels/cpu/random.c — random_uniform, random_normal and randint: chunks
 * of random arrays whose values depend only on (seed, global element index
 * L), per docs/random.md.
 *
 * Speed: a chunk is walked run by run (a row of the last dimension, or
 * several whole rows, whose elements are consecutive in L), so the hot loop
 * has no per-element division. With AVX-512 (philox_simd.c) a run's whole
 * Philox blocks go straight to values; the rest — a partial block at either
 * end, normal values, CPUs without AVX-512 — goes through words produced
 * four per Philox call (8 calls at once with AVX2) into a small stack
 * buffer, which a tight loop then maps to values. */
#include <string.h>

#include "../philox.h"
#include "ops.h"

/* Words per stack batch; a multiple of 4 (blocks) and of 2 (f64 pairs). */
#define BATCH_WORDS 1024

/* Blocks b0 .. b0+n-1 of the stream into out[0 .. 4n): SIMD for most,
 * scalar for the rest. */
static void philox_blocks(uint64_t seed, uint64_t b0, size_t n, uint32_t *out)
{
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (size_t i = tsr_k_philox_blocks_isa(TSR_K_ISA_BEST, seed, b0, n, out); i < n; i++) {
    uint64_t b = b0 + i;
    uint32_t c[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0, 0};
    tsr_philox4x32_10(c, k0, k1);
    memcpy(out + 4 * i, c, sizeof c);
  }
}

/* Words w0 .. w0+n-1 of the stream into out[0 .. n). */
static void philox_words(uint64_t seed, uint64_t w0, size_t n, uint32_t *out)
{
  uint32_t tmp[4];
  size_t i = 0;
  unsigned lane = (unsigned)(w0 % 4);
  uint64_t b = w0 / 4;
  if (lane != 0) {
    tsr_philox_block(seed, b++, tmp);
    for (; lane < 4 && i < n; lane++) out[i++] = tmp[lane];
  }
  size_t full = (n - i) / 4;
  philox_blocks(seed, b, full, out + i);
  i += 4 * full;
  b += full;
  if (i < n) {
    tsr_philox_block(seed, b, tmp);
    for (lane = 0; i < n; lane++) out[i++] = tmp[lane];
  }
}

/* Maps a batch of words to n values of g's kind and dtype at out. */
static void map_words(const tsr_k_gen *g, const uint32_t *w, size_t n, void *out)
{
  if (g->kind == TSR_K_GEN_UNIFORM && g->dtype == TSR_F32) {
    float *o = out;
    for (size_t i = 0; i < n; i++) o[i] = tsr_u01_f32(w[i]);
  } else if (g->kind == TSR_K_GEN_UNIFORM) {
    double *o = out;
    for (size_t i = 0; i < n; i++) o[i] = tsr_u01_f64(w[2 * i], w[2 * i + 1]);
  } else if (g->kind == TSR_K_GEN_NORMAL && g->dtype == TSR_F32) {
    float *o = out;
    for (size_t i = 0; i < n; i++) o[i] = (float)tsr_normal_f64(w + 4 * i);
  } else if (g->kind == TSR_K_GEN_NORMAL) {
    double *o = out;
    for (size_t i = 0; i < n; i++) o[i] = tsr_normal_f64(w + 4 * i);
  } else if (g->range == (uint64_t)1 << 32) {
    /* (w * 2^32) >> 32 is w itself: keeps the product below 2^64 below. */
    for (size_t i = 0; i < n; i++) {
      int64_t v = (int64_t)((uint64_t)g->low + w[i]);
      if (g->dtype == TSR_U8) ((uint8_t *)out)[i] = (uint8_t)v;
      else if (g->dtype == TSR_I32) ((int32_t *)out)[i] = (int32_t)v;
      else ((int64_t *)out)[i] = v;
    }
  } else if (g->dtype == TSR_U8) {
    uint8_t *o = out;
    uint32_t r = (uint32_t)g->range, low = (uint32_t)g->low;
    for (size_t i = 0; i < n; i++) o[i] = (uint8_t)(low + (uint32_t)(((uint64_t)w[i] * r) >> 32));
  } else if (g->dtype == TSR_I32) {
    int32_t *o = out;
    uint32_t r = (uint32_t)g->range, low = (uint32_t)g->low;
    for (size_t i = 0; i < n; i++) o[i] = (int32_t)(low + (uint32_t)(((uint64_t)w[i] * r) >> 32));
  } else {
    int64_t *o = out;
    uint32_t r = (uint32_t)g->range;
    for (size_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)g->low + (((uint64_t)w[i] * r) >> 32));
  }
}

/* Fills n elements with consecutive global indices from L0 through the
 * word batches (any kind, any alignment). as_f64: written as f64, the
 * values converted as tsr_k_to_float does. */
static void fill_batches(const tsr_k_gen *g, uint64_t L0, size_t n, char *out, bool as_f64)
{
  uint32_t w[BATCH_WORDS];
  double conv[BATCH_WORDS];
  size_t per = g->kind == TSR_K_GEN_NORMAL ? 4 : (g->kind == TSR_K_GEN_UNIFORM && g->dtype == TSR_F64) ? 2 : 1;
  bool convert = as_f64 && g->dtype != TSR_F64;
  size_t esize = as_f64 ? sizeof(double) : tsr_dtype_size(g->dtype), step = BATCH_WORDS / per;
  for (size_t done = 0; done < n; done += step) {
    size_t m = n - done < step ? n - done : step;
    if (per == 4) philox_blocks(g->seed, L0 + done, m, w);
    else philox_words(g->seed, (L0 + done) * per, m * per, w);
    map_words(g, w, m, convert ? (void *)conv : out + done * esize);
    if (convert) tsr_k_to_float(TSR_F64, g->dtype, conv, m, out + done * esize);
  }
}

/* The SIMD map for g's values (as f64 when as_f64) in *v and the values
 * per block, or 0 when there is none (normal, f32 as f64). */
static size_t simd_vals(const tsr_k_gen *g, bool as_f64, tsr_k_vals *v)
{
  v->seed = g->seed, v->low = g->low, v->range = g->range;
  if (g->kind == TSR_K_GEN_UNIFORM && g->dtype == TSR_F64) return v->kind = TSR_K_VALS_U01_F64, 2;
  if (g->kind == TSR_K_GEN_UNIFORM && !as_f64) return v->kind = TSR_K_VALS_U01_F32, 4;
  if (g->kind != TSR_K_GEN_RANDINT) return 0;
  v->kind = as_f64 ? TSR_K_VALS_INT_F64
            : g->dtype == TSR_U8 ? TSR_K_VALS_INT_U8
            : g->dtype == TSR_I32 ? TSR_K_VALS_INT_I32
                                  : TSR_K_VALS_INT_I64;
  return 4;
}

/* Fills n elements with consecutive global indices from L0: whole blocks
 * straight from SIMD values where there is a map, the partial blocks at
 * either end (and everything else) through the word batches. */
static void fill_row(const tsr_k_gen *g, uint64_t L0, size_t n, char *out, bool as_f64)
{
  tsr_k_vals v;
  size_t per = simd_vals(g, as_f64, &v), done = 0;
  size_t esize = as_f64 ? sizeof(double) : tsr_dtype_size(g->dtype);
  if (per > 0 && n >= per) {
    size_t head = (per - L0 % per) % per;
    fill_batches(g, L0, head, out, as_f64);
    size_t got = tsr_k_philox_values_isa(TSR_K_ISA_BEST, &v, (L0 + head) / per, (n - head) / per, out + head * esize);
    done = head + got * per;
  }
  fill_batches(g, L0 + done, n - done, out + done * esize, as_f64);
}

/* Walks the chunk's runs of consecutive L: a run is the last dimension,
 * extended over the trailing dimensions the chunk spans whole (a chunk of
 * full rows is one run). Each run starts at L0, its global row-major index. */
static void fill_chunk(const tsr_k_gen *g, char *out, bool as_f64)
{
  const tsr_k_grid *gr = &g->grid;
  int nd = gr->ndim, j = nd - 1;
  while (j > 0 && gr->shape[j] == gr->global[j]) j--;
  int64_t run = 1, runs = 1;
  for (int d = 0; d < nd; d++) {
    if (d < j) runs *= gr->shape[d];
    else run *= gr->shape[d];
  }
  if (run == 0 || runs == 0) return;
  size_t run_bytes = (size_t)run * (as_f64 ? sizeof(double) : tsr_dtype_size(g->dtype));
  int64_t idx[TSR_MAX_NDIM] = {0};
  for (int64_t r = 0; r < runs; r++) {
    uint64_t L0 = 0;
    for (int d = 0; d < nd; d++)
      L0 = L0 * (uint64_t)gr->global[d] + (uint64_t)(gr->offset[d] + (d < j ? idx[d] : 0));
    fill_row(g, L0, (size_t)run, out + (size_t)r * run_bytes, as_f64);
    for (int d = j - 1; d >= 0; d--) {
      if (++idx[d] < gr->shape[d]) break;
      idx[d] = 0;
    }
  }
}

/* A required int param, failing with a message that names op. */
static int need_int(const char *op, const tsr_params *params, const char *name, int64_t *value_p, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(params, name, value_p, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

/* The seed's 64 bits as given: a negative int64 seed is just a large one. */
static int get_seed(const char *op, const tsr_params *params, uint64_t *seed_p, tsr_errbuf *err)
{
  int64_t seed;
  int rc = need_int(op, params, "seed", &seed, err);
  if (rc == 0) *seed_p = (uint64_t)seed;
  return rc;
}

/* Uniform and normal: seed, dtype f32/f64 and the grid. */
static int parse_real(const char *op, tsr_k_gen_kind kind, const tsr_params *params, tsr_k_gen *g, tsr_errbuf *err)
{
  memset(g, 0, sizeof *g);
  g->kind = kind;
  int rc = get_seed(op, params, &g->seed, err);
  if (rc == 0) rc = tsr_k_dtype_param(op, params, TSR_F64, &g->dtype, err);
  if (rc != 0) return rc;
  if (g->dtype != TSR_F32 && g->dtype != TSR_F64)
    return tsr_fail(err, TSR_EINVAL, "%s: dtype must be f32 or f64, not %s", op, tsr_dtype_name(g->dtype));
  /* Normal element L uses block L and uniform f64 words 2L, 2L+1: both fit
   * the 64-bit counter for any element count that fits int64. */
  return tsr_k_grid_parse(op, params, &g->grid, err);
}

static int check_randint_range(int64_t low, int64_t high, tsr_dtype dtype, tsr_errbuf *err)
{
  if (high <= low)
    return tsr_fail(err, TSR_EINVAL, "randint: high (%lld) must be greater than low (%lld)", (long long)high,
                    (long long)low);
  uint64_t range = (uint64_t)high - (uint64_t)low;
  if (range > (uint64_t)1 << 32)
    return tsr_fail(err, TSR_EINVAL, "randint: high - low (%llu) must be at most 2^32", (unsigned long long)range);
  int64_t lo = dtype == TSR_U8 ? 0 : dtype == TSR_I32 ? INT32_MIN : INT64_MIN;
  int64_t hi = dtype == TSR_U8 ? 255 : dtype == TSR_I32 ? INT32_MAX : INT64_MAX;
  if (low < lo || high - 1 > hi)
    return tsr_fail(err, TSR_EINVAL, "randint: values in [%lld, %lld) do not fit %s (%lld..%lld)", (long long)low,
                    (long long)high, tsr_dtype_name(dtype), (long long)lo, (long long)hi);
  return 0;
}

static int parse_randint(const tsr_params *params, tsr_k_gen *g, tsr_errbuf *err)
{
  int64_t high;
  memset(g, 0, sizeof *g);
  g->kind = TSR_K_GEN_RANDINT;
  int rc = get_seed("randint", params, &g->seed, err);
  if (rc == 0) rc = need_int("randint", params, "low", &g->low, err);
  if (rc == 0) rc = need_int("randint", params, "high", &high, err);
  if (rc == 0) rc = tsr_k_dtype_param("randint", params, TSR_I64, &g->dtype, err);
  if (rc != 0) return rc;
  if (g->dtype != TSR_U8 && g->dtype != TSR_I32 && g->dtype != TSR_I64)
    return tsr_fail(err, TSR_EINVAL, "randint: dtype must be u8, i32 or i64, not %s", tsr_dtype_name(g->dtype));
  rc = check_randint_range(g->low, high, g->dtype, err);
  if (rc != 0) return rc;
  g->range = (uint64_t)high - (uint64_t)g->low;
  return tsr_k_grid_parse("randint", params, &g->grid, err);
}

int tsr_k_gen_parse(const char *dist, const tsr_params *params, tsr_k_gen *g, tsr_errbuf *err)
{
  if (strcmp(dist, "randint") == 0) return parse_randint(params, g, err);
  if (strcmp(dist, "random_normal") == 0) return parse_real(dist, TSR_K_GEN_NORMAL, params, g, err);
  if (strcmp(dist, "random_uniform") == 0) return parse_real(dist, TSR_K_GEN_UNIFORM, params, g, err);
  return tsr_fail(err, TSR_EINVAL, "unknown random dist '%s' (random_uniform, random_normal or randint)", dist);
}

void tsr_k_gen_fill(const tsr_k_gen *g, void *out)
{
  fill_chunk(g, out, false);
}

void tsr_k_gen_fill_f64(const tsr_k_gen *g, double *out)
{
  fill_chunk(g, (char *)out, true);
}

/* The SIMD map for g's values as f64 in the transposed tiles, or 0. */
static size_t tile_t_vals(const tsr_k_gen *g, tsr_k_vals *v)
{
  v->seed = g->seed, v->low = g->low, v->range = g->range;
  if (g->kind == TSR_K_GEN_UNIFORM && g->dtype == TSR_F64) return v->kind = TSR_K_VALS_U01_F64, 2;
  if (g->kind == TSR_K_GEN_RANDINT) return v->kind = TSR_K_VALS_INT_F64, 4;
  return 0;
}

bool tsr_k_gen_fill_f64_t_ok(const tsr_k_gen *g)
{
  tsr_k_vals v;
  size_t per = tile_t_vals(g, &v);
  const tsr_k_grid *gr = &g->grid;
  return gr->ndim == 2 && per > 0 && tsr_k_isa_resolve(TSR_K_ISA_BEST) == TSR_K_ISA_AVX512 &&
         (gr->global[1] % (int64_t)per == 0 || gr->shape[0] <= 1);
}

void tsr_k_gen_fill_f64_t(const tsr_k_gen *g, double *out)
{
  tsr_k_vals v;
  tile_t_vals(g, &v);
  const tsr_k_grid *gr = &g->grid;
  uint64_t L0 = (uint64_t)gr->offset[0] * (uint64_t)gr->global[1] + (uint64_t)gr->offset[1];
  tsr_k_philox_tile_t_isa(TSR_K_ISA_BEST, &v, L0, (uint64_t)gr->global[1], (size_t)gr->shape[0],
                          (size_t)gr->shape[1], out, (size_t)gr->shape[0]);
}

static int gen_infer(const char *op, const tsr_params *params, tsr_meta *out, tsr_errbuf *err)
{
  tsr_k_gen g;
  int rc = tsr_k_gen_parse(op, params, &g, err);
  if (rc != 0) return rc;
  tsr_k_meta_set(out, g.dtype, g.grid.ndim, g.grid.shape);
  return 0;
}

static int gen_cpu(const char *op, const tsr_params *params, tsr_buf *out, tsr_errbuf *err)
{
  tsr_k_gen g;
  int rc = tsr_k_gen_parse(op, params, &g, err);
  if (rc != 0) return rc;
  tsr_meta want;
  tsr_k_meta_set(&want, g.dtype, g.grid.ndim, g.grid.shape);
  if (!tsr_meta_equal(&want, &out->meta))
    return tsr_fail(err, TSR_ESHAPE, "%s: output buffer is %s but params say %s", op, tsr_k_str(&out->meta).s,
                    tsr_k_str(&want).s);
  fill_chunk(&g, out->data, false);
  return 0;
}

static int uniform_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  return gen_infer("random_uniform", p, out, err);
}
static int uniform_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  return gen_cpu("random_uniform", p, out, err);
}
static int normal_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  return gen_infer("random_normal", p, out, err);
}
static int normal_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  return gen_cpu("random_normal", p, out, err);
}
static int randint_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  return gen_infer("randint", p, out, err);
}
static int randint_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  return gen_cpu("randint", p, out, err);
}

const tsr_op_def tsr_op_random_uniform = {"random_uniform", 0, 0, uniform_infer, uniform_cpu, false, NULL};
const tsr_op_def tsr_op_random_normal = {"random_normal", 0, 0, normal_infer, normal_cpu, false, NULL};
const tsr_op_def tsr_op_randint = {"randint", 0, 0, randint_infer, randint_cpu, false, NULL};
