/* kernels/cuda/random.cu — random_uniform, random_normal and randint on the
 * GPU, with the words of docs/random.md from kernels/philox.h itself, so
 * uniform and integer chunks are bit-identical with the CPU's.
 *
 * Normals: z = sqrt(-2 ln(1 - u1)) cos(θ) from the same words and the same
 * θ = fl(2π·u2), evaluated in double-double and rounded once (normal.cuh),
 * so f64 normals are within 2 ulp of the CPU's (glibc's log and cos are off
 * by about half an ulp) and f32 normals, rounded from that double, within 1
 * (docs/kernels-cuda.md has the measured distribution).
 *
 * Layout of the work: a chunk is a set of runs of consecutive global index
 * L (as in cpu/random.c: the last dimension, extended over trailing
 * dimensions the chunk spans whole). Thread i of the flattened (run, Philox
 * block) space computes one Philox block — 4 words, i.e. 4 f32 uniforms or
 * randints, 2 f64 uniforms or 1 normal — and writes the values of it that
 * fall inside its run. */
#include <string.h>

#include "common.cuh"
#include "normal.cuh"

/* What the kernel needs of a tsr_k_gen, by value. */
struct gen_dev {
  int kind;       /* tsr_k_gen_kind */
  int f64;        /* uniform/normal in double (else f32) */
  int per;        /* values per Philox block: 4, 2 (f64 uniform) or 1 (normal) */
  int nd, j;      /* runs start at axis j */
  uint64_t seed;
  int64_t low;
  uint64_t range;
  int64_t run, runs, nbr;  /* run length, run count, Philox blocks per run slot */
  int64_t L0;              /* the first run's start (all of it when runs == 1) */
  int64_t shape[TSR_MAX_NDIM], global[TSR_MAX_NDIM], offset[TSR_MAX_NDIM];
};

/* L of the first element of run r (unrolled, so idx stays in registers). */
__device__ __forceinline__ int64_t run_start(const gen_dev &g, int64_t r)
{
  int64_t idx[TSR_MAX_NDIM], L = 0;
#pragma unroll
  for (int d = TSR_MAX_NDIM - 1; d >= 0; d--) {
    idx[d] = 0;
    if (d < g.j) idx[d] = r % g.shape[d], r /= g.shape[d];
  }
#pragma unroll
  for (int d = 0; d < TSR_MAX_NDIM; d++)
    if (d < g.nd) L = L * g.global[d] + g.offset[d] + idx[d];
  return L;
}

/* Value e (0 .. per-1) of a block's words, converted to Out like
 * tsr_k_to_float (Out is the chunk's dtype or a float dtype). */
template <class Out>
__device__ __forceinline__ Out gen_value(const gen_dev &g, const uint32_t w[4], int e)
{
  if (g.kind == TSR_K_GEN_RANDINT) return (Out)tsr_randint_map(w[e], g.low, g.range);
  if (g.kind == TSR_K_GEN_NORMAL) return g.f64 ? (Out)tsr_normal_f64_dd(w) : (Out)(float)tsr_normal_f64_dd(w);
  return g.f64 ? (Out)tsr_u01_f64(w[(2 * e) & 3], w[(2 * e + 1) & 3]) : (Out)tsr_u01_f32(w[e]);
}

/* Four values to dst as one or two 16-byte-or-smaller stores when dst is
 * aligned for them, else one by one. */
template <class Out>
__device__ __forceinline__ void store4(Out *dst, const Out (&v)[4])
{
  constexpr size_t BYTES = 4 * sizeof(Out), ALIGN = BYTES < 16 ? BYTES : 16;
  struct alignas(ALIGN) piece {
    Out x[ALIGN / sizeof(Out)];
  };
  if ((uintptr_t)dst % ALIGN != 0) {
    for (int e = 0; e < 4; e++) dst[e] = v[e];
    return;
  }
#pragma unroll
  for (int h = 0; h < (int)(BYTES / ALIGN); h++) {
    piece p;
#pragma unroll
    for (int e = 0; e < (int)(ALIGN / sizeof(Out)); e++) p.x[e] = v[h * (ALIGN / sizeof(Out)) + e];
    ((piece *)dst)[h] = p;
  }
}

template <class Out>
__global__ void gen_kernel(gen_dev g, Out *out)
{
  TSR_GRID_STRIDE(i, g.runs * g.nbr)
  {
    int64_t r = 0, k = i;
    if (g.runs > 1) r = i / g.nbr, k = i - r * g.nbr;
    const int64_t L0 = g.runs == 1 ? g.L0 : run_start(g, r), L1 = L0 + g.run;
    const uint64_t b = (uint64_t)L0 / g.per + k;
    const int64_t first = (int64_t)b * g.per;
    if (first >= L1) continue;
    uint32_t w[4];
    tsr_philox_block(g.seed, b, w);
    Out *dst = out + r * g.run - L0 + first;  /* value e goes to dst[e] */
    if (g.per == 4 && first >= L0 && first + 4 <= L1) {
      Out v[4];
#pragma unroll
      for (int e = 0; e < 4; e++) v[e] = gen_value<Out>(g, w, e);
      store4<Out>(dst, v);
    } else {
#pragma unroll
      for (int e = 0; e < 4; e++)  /* unrolled so w stays in registers */
        if (e < g.per && first + e >= L0 && first + e < L1) dst[e] = gen_value<Out>(g, w, e);
    }
  }
}

static gen_dev gen_dev_of(const tsr_k_gen *g)
{
  gen_dev d;
  memset(&d, 0, sizeof d);
  d.kind = g->kind;
  d.f64 = g->dtype == TSR_F64;
  d.per = g->kind == TSR_K_GEN_NORMAL ? 1 : (g->kind == TSR_K_GEN_UNIFORM && d.f64) ? 2 : 4;
  d.seed = g->seed, d.low = g->low, d.range = g->range;
  const tsr_k_grid *gr = &g->grid;
  d.nd = gr->ndim;
  d.j = gr->ndim - 1;
  while (d.j > 0 && gr->shape[d.j] == gr->global[d.j]) d.j--;
  d.run = 1, d.runs = 1;
  for (int k = 0; k < gr->ndim; k++) {
    if (k < d.j) d.runs *= gr->shape[k];
    else d.run *= gr->shape[k];
    d.shape[k] = gr->shape[k], d.global[k] = gr->global[k], d.offset[k] = gr->offset[k];
  }
  /* A run of n values touches at most ceil(n / per) + 1 Philox blocks. */
  d.nbr = (d.run + d.per - 1) / d.per + 1;
  d.L0 = 0;
  for (int k = 0; k < gr->ndim; k++) d.L0 = d.L0 * gr->global[k] + gr->offset[k];
  return d;
}

int tsr_cuda_gen_fill(const tsr_k_gen *g, tsr_dtype out_dtype, void *out, cudaStream_t s, tsr_errbuf *err)
{
  gen_dev d = gen_dev_of(g);
  if (d.run == 0 || d.runs == 0) return 0;
  return tsr_with_dtype(out_dtype, [&](auto t) {
    using T = decltype(t);
    gen_kernel<T><<<tsr_grid(d.runs * d.nbr, 256), 256, 0, s>>>(d, (T *)out);
    return TSR_CUDA_LAUNCHED("gen_kernel", err);
  });
}

static int gen_cuda(const char *op, const tsr_params *p, tsr_buf *out, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  tsr_k_gen g;
  int rc = tsr_k_gen_parse(op, p, &g, err);
  if (rc != 0) return rc;
  tsr_meta want;
  tsr_k_meta_set(&want, g.dtype, g.grid.ndim, g.grid.shape);
  if (!tsr_meta_equal(&want, &out->meta))
    return tsr_fail(err, TSR_ESHAPE, "%s: output buffer is %s but params say %s", op, tsr_k_str(&out->meta).s,
                    tsr_k_str(&want).s);
  rc = tsr_cuda_gen_fill(&g, g.dtype, out->data, tsr_stream(gpu), err);
  return rc == 0 ? 0 : tsr_cuda_fail_op(op, rc, err);
}

TSR_CUDA_VARIANT(random_uniform)
{
  (void)in, (void)n_in;
  return gen_cuda("random_uniform", p, out, gpu, err);
}

TSR_CUDA_VARIANT(random_normal)
{
  (void)in, (void)n_in;
  return gen_cuda("random_normal", p, out, gpu, err);
}

TSR_CUDA_VARIANT(randint)
{
  (void)in, (void)n_in;
  return gen_cuda("randint", p, out, gpu, err);
}

/* ---------- randint_packed (cpu/pack2bit.c): randint 0..3 written 2-bit packed ---------- */

/* Thread i packs 16 values of a row (4 bytes of its packed row): row
 * r = i / words, values 16q.. of it, whose global indices start at the
 * row's start. Rows that start on a Philox block take 4 blocks a thread. */
__global__ void gen_packed_kernel(gen_dev g, uint8_t *out, int64_t c, int64_t cb)
{
  const int64_t words = (c + 15) / 16;
  TSR_GRID_STRIDE(i, g.runs * words)
  {
    int64_t r = i / words, q = i - r * words, L0 = run_start(g, r) + 16 * q, n = c - 16 * q < 16 ? c - 16 * q : 16;
    uint32_t word = 0, w[4];
    uint64_t have = ~(uint64_t)0;
    for (int e = 0; e < n; e++) {
      uint64_t L = (uint64_t)(L0 + e), b = L / 4;
      if (b != have) tsr_philox_block(g.seed, b, w), have = b;
      word |= (uint32_t)tsr_randint_map(w[L % 4], g.low, g.range) << (2 * e);
    }
    uint8_t *dst = out + r * cb + 4 * q;
    if (cb % 4 == 0) *(uint32_t *)dst = word;
    else
      for (int k = 0; k < 4 && 4 * q + k < cb; k++) dst[k] = (uint8_t)(word >> (8 * k));
  }
}

TSR_CUDA_VARIANT(randint_packed)
{
  (void)in, (void)n_in;
  tsr_k_gen g;
  int rc = tsr_k_gen_parse("randint", p, &g, err);
  if (rc == 0 && (g.dtype != TSR_U8 || g.low < 0 || g.low + (int64_t)g.range > 4 || g.grid.ndim < 1))
    rc = tsr_fail(err, TSR_EINVAL, "randint_packed: needs u8 values in 0..3 and at least 1 dimension");
  if (rc != 0) return rc;
  gen_dev d = gen_dev_of(&g);
  /* one run a row: the last axis, whatever the chunk spans */
  d.j = d.nd - 1;
  d.runs = 1;
  for (int k = 0; k < d.j; k++) d.runs *= d.shape[k];
  int64_t c = d.shape[d.j], cb = c / 4 + (c % 4 != 0);
  if (d.runs == 0 || c == 0) return 0;
  gen_packed_kernel<<<tsr_grid(d.runs * ((c + 15) / 16), 256), 256, 0, tsr_stream(gpu)>>>(d, (uint8_t *)out->data, c, cb);
  rc = TSR_CUDA_LAUNCHED("gen_packed_kernel", err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("randint_packed", rc, err);
}
