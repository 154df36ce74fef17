/* kernels/cuda/community.cu — CUDA variants of `community` (Leiden,
 * Louvain) and `modularity` (kernels/cpu/community_ops.c): the parallel
 * scheme of kernels/cpu/community_par.h, transcribed loop for loop from
 * its plain-C emulation tests/unit/test_community_par.c (each of its loops
 * is one kernel here). docs/cluster.md, "Community detection on the GPU".
 *
 * The loops' state lives on the device. The algorithm is iterative
 * (sweeps until no gain, levels until nothing merges, passes until Q stops
 * rising); one-thread control kernels record on the device when a loop
 * has converged and the sizes of each coarse graph (struct ctl), and the
 * host reads that block back (peek: a wait for this op's own stream) once
 * per sweep, refinement round and level, so it stops each loop when it
 * ends and sizes every grid, memset, scan and the edge sort for the
 * current level's graph. (It used to enqueue the whole fixed schedule,
 * CPAR_MAX_PASSES x CPAR_MAX_LEVELS x CPAR_MAX_SWEEPS, with kernels of
 * finished loops returning at once and sorts at the input's size: on 1.3M
 * nodes that schedule cost more than the work.) Buffers stay sized for the
 * input graph. The CSR chunks' headers are read on the device; the host
 * only bounds nnz from the chunks' bytes until the first peek.
 *
 * Determinism. Weights become 64-bit fixed point (community_par.h), so
 * strengths, community weights and aggregated edges are exact integer sums
 * that atomics compute to the same bits in any order; the only float sum,
 * Σ K_c² for the modularity, runs in a fixed tree over a fixed grid. Each
 * vertex's choice is the maximum of a total order (gain, staying, smaller
 * id), so the hash tables' slot order does not matter. The same graph and
 * seed give the same labels on every run on a given GPU. They are not the
 * CPU op's labels (a different, parallel algorithm); the modularity is
 * within 1% of the CPU op's (test_community_par checks the scheme).
 *
 * Bad input (a chunk that is no CSR chunk, rows that do not add up to n,
 * a negative or non-finite weight, a label out of range) fails the task
 * through tsr_cuda_defer_flags (TSR_EPROTO), the CPU op's checks as
 * flags. */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common.cuh"

extern "C" {
#include "cpu/community_par.h"
#include "cpu/csr.h"
#include "csr_dev.cuh"
}

namespace {

#define CPAR_MAX_CHUNKS 128 /* chunks per launch of the header and stacking kernels */
#define SQ_BLOCKS 256       /* the fixed grid of the modularity's Σ K² */
#define THREADS 256

enum { BAD_HEADER = 1, BAD_ROWS = 2, BAD_WEIGHT = 4, BAD_LABEL = 8, BAD_INDEX = 16, BAD_EMPTY = 32 };
#define NFLAGS 6
const char *const kFlagNames[] = {
  "a graph chunk on the device is not a CSR chunk of f32 or f64 weights (header or size)",
  "the graph's chunks do not add up to n x n",
  "an edge weight is negative or not finite (weights must be finite and >= 0)",
  "a label is outside 0..n-1",
  "a graph chunk's indptr or column index is out of range",
  "the graph has no edges",
};

/* The device's control block: the loops' state and the sizes the host
 * does not know. */
struct ctl {
  int64_t n0, nnz0;        /* the input graph */
  int64_t n, nnz;          /* the current level's graph */
  unsigned long long total, in;  /* 2m and Σ in-community weight (fixed point) */
  unsigned long long maxw; /* the largest weight's bits (f64) */
  int ex, flags;
  double gam, q, q2, best_q;
  int fails, kept, accept, use_ref;
  int stop;      /* no more passes */
  int pass_over; /* this pass's levels are done */
  int lm_over, ref_over;
  unsigned long long moves;
  int nruns;
  int64_t nc, nr;
};

struct dgraph {
  int64_t *ptr;
  int32_t *adj;
  int64_t *w, *k;
};

struct chunks {
  const unsigned char *p[CPAR_MAX_CHUNKS];
  int64_t bytes[CPAR_MAX_CHUNKS];
  int first, count;
};

/* ---------- loading: headers, stacking, fixed point ---------- */

/* hdr[3 i..3 i+2] = rows, nnz, dtype of chunk i (bad: flags). */
__global__ void k_headers(chunks c, int64_t *hdr, ctl *s)
{
  int i = threadIdx.x;
  if (i >= c.count) return;
  int64_t *h = hdr + 3 * (c.first + i);
  h[0] = h[1] = 0, h[2] = 0;
  dcsr v;
  bool ok = dcsr_parse(c.p[i], c.bytes[i], &v) && (v.dt == TSR_F32 || v.dt == TSR_F64) && v.cols == s->n0;
  if (ok) h[0] = v.rows, h[1] = v.nnz, h[2] = v.dt;
  if (!ok) atomicOr(&s->flags, BAD_HEADER);
}

/* Row and edge offsets of the chunks (one thread): hdr[3 i], hdr[3 i + 1]
 * become offsets, off[2 nch] = totals. */
__global__ void k_offsets(int64_t *hdr, int nch, int64_t *off, ctl *s)
{
  int64_t r = 0, e = 0;
  for (int i = 0; i < nch; i++) off[2 * i] = r, off[2 * i + 1] = e, r += hdr[3 * i], e += hdr[3 * i + 1];
  if (r != s->n0) atomicOr(&s->flags, BAD_ROWS);
  if (e > s->nnz0) atomicOr(&s->flags, BAD_HEADER);  /* nnz0 holds the host's bound until here */
  s->nnz0 = s->nnz = e, s->n = s->n0;
}

/* Copies the chunks' indptr (shifted), indices and weights (as f64 in w's
 * bytes for now) into g; blockIdx.y is the chunk. */
__global__ void k_stack(chunks c, const int64_t *hdr, const int64_t *off, dgraph g, ctl *s)
{
  int i = blockIdx.y;
  if (i >= c.count || s->flags != 0) return;
  const int64_t *h = hdr + 3 * (c.first + i), *o = off + 2 * (c.first + i);
  int64_t rows = h[0], nnz = h[1], r0 = o[0], e0 = o[1];
  dcsr v;
  dcsr_sections(c.p[i], rows, nnz, &v);  /* k_headers checked the header */
  const int64_t *indptr = v.indptr;
  const int32_t *indices = v.indices;
  const unsigned char *values = v.values;
  int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t r = tid; r <= rows; r += step) {
    int64_t x = indptr[r];
    if (x < 0 || x > nnz || (r == 0 && x != 0) || (r == rows && x != nnz) || (r > 0 && x < indptr[r - 1]))
      atomicOr(&s->flags, BAD_INDEX);
    g.ptr[r0 + r] = e0 + x;  /* r = rows: the next chunk's first entry, the same value */
  }
  for (int64_t e = tid; e < nnz; e += step) {
    int32_t col = indices[e];
    double x = h[2] == TSR_F32 ? (double)((const float *)values)[e] : ((const double *)values)[e];
    if (col < 0 || col >= s->n0) atomicOr(&s->flags, BAD_INDEX), col = 0;
    if (!(x >= 0.0) || isinf(x)) atomicOr(&s->flags, BAD_WEIGHT), x = 0.0;
    g.adj[e0 + e] = col;
    ((double *)g.w)[e0 + e] = x;
    atomicMax(&s->maxw, (unsigned long long)__double_as_longlong(x));  /* >= 0: bits order as values */
  }
}

__global__ void k_exponent(ctl *s)
{
  s->ex = cpar_exponent(__longlong_as_double((long long)s->maxw), s->nnz0);
  s->total = 0;
}

/* Weights to fixed point, strengths k (one thread per row: an integer sum). */
__global__ void k_fixed(dgraph g, ctl *s)
{
  if (s->flags != 0) return;
  TSR_GRID_STRIDE(v, s->n0)
  {
    int64_t kv = 0;
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; e++) {
      int64_t q = cpar_fixed(((double *)g.w)[e], s->ex);
      g.w[e] = q, kv += q;
    }
    g.k[v] = kv;
    atomicAdd(&s->total, (unsigned long long)kv);
  }
}

__global__ void k_gamma(ctl *s, double gamma)
{
  if (s->total == 0) atomicOr(&s->flags, BAD_EMPTY);
  s->gam = s->total > 0 ? gamma / (double)s->total : 0.0;
}

/* ---------- shared steps ---------- */

__device__ __forceinline__ bool level_idle(const ctl *s) { return s->flags || s->stop || s->pass_over; }
__device__ __forceinline__ bool lm_idle(const ctl *s) { return level_idle(s) || s->lm_over; }

/* K[c] += k[v] over part[v] = c (K zeroed before; integer atomics). */
__global__ void k_strength(dgraph g, const int32_t *part, int64_t *K, const ctl *s, int mode)
{
  if (mode == 0 ? lm_idle(s) : level_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n) atomicAdd((unsigned long long *)&K[part[v]], (unsigned long long)g.k[v]);
}

/* s->in += the weight inside part's communities. */
__global__ void k_inside(dgraph g, const int32_t *part, ctl *s, int mode)
{
  if (mode == 0 ? lm_idle(s) : level_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n)
  {
    int64_t in = 0;
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; e++)
      if (part[g.adj[e]] == part[v]) in += g.w[e];
    if (in) atomicAdd(&s->in, (unsigned long long)in);
  }
}

/* Σ K² in a fixed tree: block b sums c = b·T + t + k·(SQ_BLOCKS·T) per
 * thread, then a tree; partial[b]. The grid is always SQ_BLOCKS. */
__global__ void k_squares(const int64_t *K, const ctl *s, int64_t n, double *partial, int mode)
{
  __shared__ double sh[THREADS];
  if (mode == 0 ? lm_idle(s) : mode == 1 ? level_idle(s) : false) return;
  double x = 0;
  for (int64_t c = (int64_t)blockIdx.x * THREADS + threadIdx.x; c < n; c += (int64_t)SQ_BLOCKS * THREADS)
    x += (double)K[c] * (double)K[c];
  sh[threadIdx.x] = x;
  __syncthreads();
  for (int h = THREADS / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

/* The modularity from s->in and the partials (one block of THREADS = SQ_BLOCKS). */
__device__ double modularity_of(ctl *s, const double *partial)
{
  __shared__ double sh[SQ_BLOCKS];
  sh[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (int h = SQ_BLOCKS / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  double t = (double)s->total;
  return (double)s->in / t - s->gam * sh[0] / t;
}

/* One warp per vertex: w(v, c) for the communities c = comm[u] of v's
 * neighbours u != v (with only[u] == only[v] when only != NULL) in a hash
 * table of 2·deg slots at 2·ptr[v], keys -1 when empty. Returns after
 * __syncwarp; the table is read with __ldcg (written by atomics). */
__device__ void gather_warp(dgraph g, int64_t v, const int32_t *comm, const int32_t *only, int32_t *hkey, int64_t *hval,
                            int lane)
{
  int64_t b = g.ptr[v], deg = g.ptr[v + 1] - b, size = 2 * deg;
  int32_t *key = hkey + 2 * b;
  int64_t *val = hval + 2 * b;
  for (int64_t i = lane; i < size; i += 32) key[i] = -1, val[i] = 0;
  __syncwarp();
  int32_t ov = only ? only[v] : 0;
  for (int64_t e = b + lane; e < b + deg; e += 32) {
    int32_t u = g.adj[e];
    int64_t w = g.w[e];
    if (u == v || w == 0 || (only && only[u] != ov)) continue;
    int32_t c = comm[u];
    int64_t h = (int64_t)(cpar_mix((uint64_t)c) % (uint64_t)size);
    for (;;) {
      int32_t prev = atomicCAS(&key[h], -1, c);
      if (prev == -1 || prev == c) {
        atomicAdd((unsigned long long *)&val[h], (unsigned long long)w);
        break;
      }
      h = h + 1 == size ? 0 : h + 1;
    }
  }
  __syncwarp();
}

/* The warp's best (gain, c) under cpar_better. */
__device__ void warp_best(double *gain, int32_t *c, int32_t own)
{
  for (int o = 16; o > 0; o /= 2) {
    double g2 = __shfl_xor_sync(0xffffffffu, *gain, o);
    int32_t c2 = __shfl_xor_sync(0xffffffffu, *c, o);
    if (cpar_better(g2, c2, *gain, *c, own)) *gain = g2, *c = c2;
  }
}

__device__ int64_t warp_sum(int64_t x)
{
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

#define WARP_LOOP(v, n)                                                                           \
  int lane = threadIdx.x & 31;                                                                     \
  for (int64_t v = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; v < (n); v += (int64_t)gridDim.x * blockDim.x / 32)

/* ---------- local moving ---------- */

__global__ void k_move(dgraph g, const int32_t *part, const int64_t *K, int32_t *next, int32_t *hkey, int64_t *hval,
                       const ctl *s, int sweep)
{
  if (lm_idle(s)) return;
  WARP_LOOP(v, s->n)
  {
    gather_warp(g, v, part, nullptr, hkey, hval, lane);
    int64_t b = 2 * g.ptr[v], size = 2 * (g.ptr[v + 1] - g.ptr[v]), kv = g.k[v];
    int32_t own = part[v];
    int64_t wown = 0;
    for (int64_t i = lane; i < size; i += 32)
      if (__ldcg(&hkey[b + i]) == own) wown = __ldcg(&hval[b + i]);
    wown = warp_sum(wown);
    double best_gain = cpar_gain(wown, kv, K[own] - kv, s->gam);
    int32_t best = own;
    for (int64_t i = lane; i < size; i += 32) {
      int32_t c = __ldcg(&hkey[b + i]);
      if (c < 0 || c == own || !cpar_allowed(sweep, own, c)) continue;
      double gain = cpar_gain(__ldcg(&hval[b + i]), kv, K[c], s->gam);
      if (cpar_better(gain, c, best_gain, best, own)) best_gain = gain, best = c;
    }
    warp_best(&best_gain, &best, own);
    if (lane == 0) next[v] = best;
    __syncwarp();
  }
}

/* mode 0: the level's starting Q; 1: a sweep's Q — keep it or not. */
__global__ void k_decide(ctl *s, const double *partial, int mode)
{
  if (lm_idle(s)) return;
  double q = modularity_of(s, partial);
  if (threadIdx.x != 0) return;
  s->in = 0;
  if (mode == 0) {
    s->q = q, s->fails = 0, s->kept = 0;
    return;
  }
  s->accept = q > s->q + CPAR_TOL;
  if (s->accept) s->q = q, s->fails = 0, s->kept = 1;
  else if (++s->fails >= 2) s->lm_over = 1;
}

__global__ void k_accept(int32_t *part, const int32_t *next, const ctl *s)
{
  if (lm_idle(s) || !s->accept) return;
  TSR_GRID_STRIDE(v, s->n) part[v] = next[v];
}

/* ---------- relabelling ---------- */

__global__ void k_flag(const int32_t *ids, int32_t *used, const ctl *s)
{
  if (level_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n) used[ids[v]] = 1;
}

/* ids[v] = map[ids[v]]; *count = map[n] (one thread writes it). */
__global__ void k_renumber(int32_t *ids, const int32_t *map, ctl *s, int which)
{
  if (level_idle(s)) return;
  int64_t n = s->n;
  TSR_GRID_STRIDE(v, n) ids[v] = map[ids[v]];
  if (blockIdx.x == 0 && threadIdx.x == 0) (which == 0 ? s->nc : s->nr) = map[n];
}

/* After local moving: the level ends the pass when nothing merged. */
__global__ void k_level_check(ctl *s, int leiden)
{
  if (level_idle(s)) return;
  if (s->nc == s->n || (!leiden && !s->kept)) s->pass_over = 1;
}

/* ---------- refinement ---------- */

__global__ void k_ref_init(dgraph g, const int32_t *part, int32_t *ref, int64_t *vext, ctl *s)
{
  if (level_idle(s)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) s->ref_over = 0, s->moves = 0;
  TSR_GRID_STRIDE(v, s->n)
  {
    int64_t x = 0;
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; e++)
      if (g.adj[e] != v && part[g.adj[e]] == part[v]) x += g.w[e];
    ref[v] = (int32_t)v, vext[v] = x;
  }
}

__device__ __forceinline__ bool ref_idle(const ctl *s) { return level_idle(s) || s->ref_over; }

__global__ void k_ref_stats(dgraph g, const int32_t *part, const int32_t *ref, int64_t *rk, int32_t *rsize, int64_t *ext,
                            const ctl *s)
{
  if (ref_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n)
  {
    int32_t c = ref[v];
    int64_t x = 0;
    for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; e++) {
      int32_t u = g.adj[e];
      if (part[u] == part[v] && ref[u] != c) x += g.w[e];
    }
    atomicAdd((unsigned long long *)&rk[c], (unsigned long long)g.k[v]);
    atomicAdd(&rsize[c], 1);
    if (x) atomicAdd((unsigned long long *)&ext[c], (unsigned long long)x);
  }
}

__global__ void k_ref_move(dgraph g, const int32_t *part, const int32_t *ref, const int64_t *K, const int64_t *rk,
                           const int32_t *rsize, const int64_t *ext, const int64_t *vext, int32_t *tgt, int32_t *hkey,
                           int64_t *hval, ctl *s, uint64_t seed, int r)
{
  if (ref_idle(s)) return;
  WARP_LOOP(v, s->n)
  {
    int32_t own = ref[v], S = part[v];
    int64_t kv = g.k[v], ks = K[S];
    bool mover = rsize[own] == 1 && cpar_bit(seed, v, r) && cpar_well(vext[v], kv, ks, s->gam);
    if (!mover) {  /* uniform across the warp: v is the warp's */
      if (lane == 0) tgt[v] = own;
      continue;
    }
    gather_warp(g, v, ref, part, hkey, hval, lane);
    int64_t b = 2 * g.ptr[v], size = 2 * (g.ptr[v + 1] - g.ptr[v]);
    double best_gain = 0;
    int32_t best = own;
    for (int64_t i = lane; i < size; i += 32) {
      int32_t c = __ldcg(&hkey[b + i]);
      if (c < 0 || c == own || (rsize[c] == 1 && cpar_bit(seed, c, r)) || !cpar_well(ext[c], rk[c], ks, s->gam)) continue;
      double gain = cpar_gain(__ldcg(&hval[b + i]), kv, rk[c], s->gam);
      if (cpar_better(gain, c, best_gain, best, own)) best_gain = gain, best = c;
    }
    warp_best(&best_gain, &best, own);
    if (lane == 0) {
      tgt[v] = best;
      if (best != own) atomicAdd(&s->moves, 1ull);
    }
    __syncwarp();
  }
}

__global__ void k_ref_apply(int32_t *ref, const int32_t *tgt, const ctl *s)
{
  if (ref_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n) ref[v] = tgt[v];
}

__global__ void k_ref_check(ctl *s)
{
  if (ref_idle(s)) return;
  if (s->moves == 0) s->ref_over = 1;
  s->moves = 0;
}

/* Aggregate on ref when the refinement merged anything, else on part
 * (nr = nc); one thread, before k_choose. */
__global__ void k_choose_ctl(ctl *s, int leiden)
{
  if (level_idle(s)) return;
  s->use_ref = leiden && s->nr < s->n;
  if (!s->use_ref) s->nr = s->nc;
}

__global__ void k_choose(int32_t *agg, const int32_t *part, const int32_t *ref, const ctl *s)
{
  if (level_idle(s)) return;
  bool use_ref = s->use_ref;
  TSR_GRID_STRIDE(v, s->n) agg[v] = use_ref ? ref[v] : part[v];
}

/* ---------- aggregation ---------- */

/* keys (agg[i] << b | agg[j]) and weights of the edges; pad past nnz. */
__global__ void k_keys(dgraph g, const int32_t *agg, uint64_t *keys, int64_t *vals, int64_t cap, int b, const ctl *s)
{
  if (level_idle(s)) return;
  uint64_t pad = (b * 2 >= 64) ? ~0ull : (1ull << (2 * b)) - 1;
  TSR_GRID_STRIDE(v, s->n)
  for (int64_t e = g.ptr[v]; e < g.ptr[v + 1]; e++)
    keys[e] = (uint64_t)agg[v] << b | (uint32_t)agg[g.adj[e]], vals[e] = g.w[e];
  for (int64_t e = s->nnz + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < cap; e += (int64_t)gridDim.x * blockDim.x)
    keys[e] = pad, vals[e] = 0;
}

/* The coarse graph's ptr by lower bounds of the run keys, its edges, and
 * the new sizes (nnz = runs less the padding run). */
__global__ void k_build(const uint64_t *ukeys, const int64_t *usum, dgraph o, int b, ctl *s)
{
  if (level_idle(s)) return;
  uint64_t pad = (b * 2 >= 64) ? ~0ull : (1ull << (2 * b)) - 1, mask = (1ull << b) - 1;
  int64_t runs = s->nruns;
  if (runs > 0 && ukeys[runs - 1] == pad) runs--;
  int64_t nr = s->nr;
  TSR_GRID_STRIDE(c, nr + 1)
  {
    int64_t lo = 0, hi = runs;
    uint64_t want = (uint64_t)c << b;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (ukeys[mid] < want) lo = mid + 1;
      else hi = mid;
    }
    o.ptr[c] = lo;
  }
  TSR_GRID_STRIDE(r, runs) o.adj[r] = (int32_t)(ukeys[r] & mask), o.w[r] = usum[r];
}

__global__ void k_coarse_k(dgraph g, const int32_t *agg, dgraph o, const int32_t *part, int32_t *cpart, const ctl *s)
{
  if (level_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n)
  {
    atomicAdd((unsigned long long *)&o.k[agg[v]], (unsigned long long)g.k[v]);
    cpart[agg[v]] = part[v];  /* every member of agg[v] has the same part */
  }
}

__global__ void k_node(int32_t *node, const int32_t *agg, const ctl *s)
{
  if (level_idle(s)) return;
  TSR_GRID_STRIDE(v, s->n0) node[v] = agg[node[v]];
}

/* The next level's sizes; part = cpart. */
__global__ void k_next_level(int32_t *part, const int32_t *cpart, ctl *s)
{
  if (level_idle(s)) return;
  int64_t nr = s->nr;
  TSR_GRID_STRIDE(c, nr) part[c] = cpart[c];
}

__global__ void k_next_sizes(ctl *s)
{
  if (level_idle(s)) return;
  int64_t runs = s->nruns;
  s->n = s->nr, s->nnz = runs;  /* corrected below when the last run was padding */
  s->lm_over = 0;
}

__global__ void k_fix_nnz(const dgraph o, ctl *s)
{
  if (level_idle(s)) return;
  s->nnz = o.ptr[s->n];
}

/* ---------- passes ---------- */

/* One thread, then k_pass_init: the pass starts on the input graph. */
__global__ void k_pass_start(ctl *s)
{
  if (s->flags || s->stop) return;
  s->n = s->n0, s->nnz = s->nnz0, s->pass_over = 0, s->lm_over = 0;
}

__global__ void k_pass_init(int32_t *part, int32_t *node, const int32_t *labels, const ctl *s)
{
  if (s->flags || s->stop) return;
  TSR_GRID_STRIDE(v, s->n0) part[v] = labels[v], node[v] = (int32_t)v;
}

__global__ void k_pass_labels(int32_t *labels, const int32_t *part, const int32_t *node, const ctl *s)
{
  if (s->flags || s->stop) return;
  TSR_GRID_STRIDE(v, s->n0) labels[v] = part[node[v]];
}

/* Before the pass's Q (whether or not its levels ended by themselves):
 * n = n0 and pass_over cleared so the Q kernels run. */
__global__ void k_pass_q_setup(ctl *s)
{
  if (s->flags || s->stop) return;
  s->pass_over = 0, s->n = s->n0, s->in = 0;
}

/* Keeps the pass when Q rose; otherwise no more passes (stop). */
__global__ void k_pass_decide(ctl *s, const double *partial)
{
  if (s->flags || s->stop) return;
  double q = modularity_of(s, partial);
  if (threadIdx.x != 0) return;
  s->in = 0;
  s->accept = q > s->best_q;
  if (s->accept) s->best_q = q;
  else s->stop = 1;
}

__global__ void k_pass_keep(int32_t *best, const int32_t *labels, const ctl *s)
{
  if (s->flags || s->stop || !s->accept) return;
  TSR_GRID_STRIDE(v, s->n0) best[v] = labels[v];
}

/* ---------- labels by decreasing size ---------- */

__global__ void k_size(const int32_t *labels, int32_t *size, int32_t *minm, const ctl *s)
{
  TSR_GRID_STRIDE(v, s->n0) atomicAdd(&size[labels[v]], 1), atomicMin(&minm[labels[v]], (int32_t)v);
}

__global__ void k_size_keys(const int32_t *size, const int32_t *minm, uint64_t *keys, int32_t *ids, int b, const ctl *s)
{
  uint64_t pad = (1ull << (2 * b)) - 1;
  TSR_GRID_STRIDE(c, s->n0)
  keys[c] = size[c] > 0 ? (uint64_t)(s->n0 - size[c]) << b | (uint64_t)minm[c] : pad, ids[c] = (int32_t)c;
}

__global__ void k_rank(const int32_t *ids, int32_t *map, const ctl *s)
{
  TSR_GRID_STRIDE(i, s->n0) map[ids[i]] = (int32_t)i;
}

__global__ void k_final(const int32_t *best, const int32_t *map, int32_t *out, const ctl *s)
{
  TSR_GRID_STRIDE(v, s->n0) out[v] = map[best[v]];
}

/* ---------- the host side ---------- */

/* Carves one scratch block into 256-byte aligned pieces. */
struct carver {
  char *base = nullptr;
  size_t used = 0;
  template <class T>
  T *take(int64_t count)
  {
    size_t at = (used + 255) / 256 * 256;
    used = at + (size_t)(count > 0 ? count : 1) * sizeof(T);
    return base ? (T *)(base + at) : nullptr;
  }
};

struct bufs {
  ctl *s;
  int64_t *hdr, *off;
  dgraph g0, ga, gb;
  int32_t *part, *next, *ref, *tgt, *agg, *used, *map, *node, *labels, *best, *cpart, *rsize, *hkey, *ids, *ids2;
  int64_t *K, *Kn, *rk, *ext, *vext, *hval, *vals, *vals2, *usum;
  uint64_t *keys, *keys2, *ukeys;
  double *partial;
  void *cub;
  size_t cub_bytes;
};

static void layout(carver &c, bufs &b, int64_t n, int64_t nnz, int nch, size_t cub_bytes)
{
  b.s = c.take<ctl>(1);
  b.hdr = c.take<int64_t>(3 * (int64_t)nch), b.off = c.take<int64_t>(2 * (int64_t)nch + 2);
  dgraph *gs[] = {&b.g0, &b.ga, &b.gb};
  for (dgraph *g : gs) g->ptr = c.take<int64_t>(n + 1), g->adj = c.take<int32_t>(nnz), g->w = c.take<int64_t>(nnz), g->k = c.take<int64_t>(n);
  int32_t **i32[] = {&b.part, &b.next, &b.ref, &b.tgt, &b.agg, &b.node, &b.labels, &b.best, &b.cpart, &b.rsize, &b.ids, &b.ids2};
  for (int32_t **p : i32) *p = c.take<int32_t>(n);
  b.used = c.take<int32_t>(n + 1), b.map = c.take<int32_t>(n + 1);
  int64_t **i64[] = {&b.K, &b.Kn, &b.rk, &b.ext, &b.vext};
  for (int64_t **p : i64) *p = c.take<int64_t>(n);
  b.hkey = c.take<int32_t>(2 * nnz), b.hval = c.take<int64_t>(2 * nnz);
  int64_t nk = nnz > n ? nnz : n;  /* the edge sort, and by_size's sort of n keys */
  b.keys = c.take<uint64_t>(nk), b.keys2 = c.take<uint64_t>(nk), b.ukeys = c.take<uint64_t>(nnz);
  b.vals = c.take<int64_t>(nnz), b.vals2 = c.take<int64_t>(nnz), b.usum = c.take<int64_t>(nnz);
  b.partial = c.take<double>(SQ_BLOCKS);
  b.cub = c.take<char>((int64_t)cub_bytes), b.cub_bytes = cub_bytes;
}

/* The scratch CUB needs for the sorts, the scan and the reduction. */
static size_t cub_need(int64_t n, int64_t nnz)
{
  size_t a = 0, b = 0, c = 0, d = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, a, (uint64_t *)nullptr, (uint64_t *)nullptr, (int64_t *)nullptr,
                                  (int64_t *)nullptr, (int)nnz);
  cub::DeviceRadixSort::SortPairs(nullptr, b, (uint64_t *)nullptr, (uint64_t *)nullptr, (int32_t *)nullptr,
                                  (int32_t *)nullptr, (int)n);
  cub::DeviceScan::ExclusiveSum(nullptr, c, (int32_t *)nullptr, (int32_t *)nullptr, (int)(n + 1));
  cub::DeviceReduce::ReduceByKey(nullptr, d, (uint64_t *)nullptr, (uint64_t *)nullptr, (int64_t *)nullptr,
                                 (int64_t *)nullptr, (int *)nullptr, cuda::std::plus<int64_t>{}, (int)nnz);
  size_t m = a > b ? a : b;
  m = m > c ? m : c;
  return m > d ? m : d;
}

struct run {
  const tsr_gpu_ctx *gpu;
  cudaStream_t st;
  bufs b;
  int64_t n, nnz;
  int bits;  /* 2^bits > n */
  /* The current level's graph, as last read from the device (peek): the
   * grids, memsets, scans and the edge sort are sized for it. */
  int64_t cn, cnnz;
  int cbits;        /* 2^cbits > cn */
  unsigned gv, gw;  /* grids for cn: thread per vertex, warp per vertex */
  tsr_errbuf *err;
  int rc = 0;
  /* TSR_COMMUNITY_TRACE=1: one stderr line per level and pass with the
   * time since the op began (a diagnostic for tuning; off by default) */
  bool trace = false;
  double t0 = 0;
};

static double wall_ms()
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void trace(const run &r, const char *what, int at, const ctl &h)
{
  if (!r.trace) return;
  fprintf(stderr, "community: %8.1f ms  %s %d: n %lld, nnz %lld, q %.6f, best %.6f\n", wall_ms() - r.t0, what, at,
          (long long)h.n, (long long)h.nnz, h.q, h.best_q);
}

#define LAUNCH(r, name, grid, ...)                                                  \
  do {                                                                              \
    if ((r).rc == 0) {                                                              \
      name<<<(grid), THREADS, 0, (r).st>>>(__VA_ARGS__);                            \
      (r).rc = TSR_CUDA_LAUNCHED(#name, (r).err);                                   \
    }                                                                               \
  } while (0)

/* Sizes every launch of the level for a graph of n nodes and nnz edges. */
static void size_for(run &r, int64_t n, int64_t nnz)
{
  r.cn = n, r.cnnz = nnz < 1 ? 1 : nnz;
  r.cbits = 1;
  while (((int64_t)1 << r.cbits) <= n) r.cbits++;
  r.gv = tsr_grid(n, THREADS), r.gw = tsr_grid(n * 32, THREADS);
}

/* The control block, read back once the stream has reached this point:
 * the one place the op waits for its stream. The loops' ends and the
 * coarse graphs' sizes are only known on the device; without reading them
 * the host would have to enqueue the whole fixed schedule (4 passes x 24
 * levels x 40 sweeps) with grids and sorts sized for the input graph,
 * which on 1.3M nodes cost more than the work itself. A synchronization
 * of its own stream blocks only this executor thread, which waits for the
 * stream right after the op anyway (kernels.h). false on a CUDA error or
 * when the input was bad (flags: nothing more to do). */
static bool peek(run &r, ctl *h)
{
  if (r.rc == 0) r.rc = TSR_CUDA_CHECK(cudaMemcpyAsync(h, r.b.s, sizeof *h, cudaMemcpyDeviceToHost, r.st), r.err);
  if (r.rc == 0) r.rc = TSR_CUDA_CHECK(cudaStreamSynchronize(r.st), r.err);
  return r.rc == 0 && h->flags == 0;
}

static void zero(run &r, void *p, size_t bytes)
{
  if (r.rc == 0) r.rc = TSR_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, r.st), r.err);
}

/* Reads the chunks in[0..nch) into b.g0 (fixed point) and sets ctl. */
static void load(run &r, const tsr_buf *in, int nch, double gamma)
{
  bufs &b = r.b;
  ctl init = {};
  init.n0 = init.n = r.n;
  init.nnz0 = r.nnz;  /* the bound, until k_offsets */
  init.best_q = -INFINITY;
  if (r.rc == 0) r.rc = TSR_CUDA_CHECK(cudaMemcpyAsync(b.s, &init, sizeof init, cudaMemcpyHostToDevice, r.st), r.err);
  for (int f = 0; f < nch; f += CPAR_MAX_CHUNKS) {
    chunks c = {};
    c.first = f, c.count = nch - f < CPAR_MAX_CHUNKS ? nch - f : CPAR_MAX_CHUNKS;
    for (int i = 0; i < c.count; i++) c.p[i] = (const unsigned char *)in[f + i].data, c.bytes[i] = (int64_t)in[f + i].nbytes;
    if (r.rc == 0) {
      k_headers<<<1, CPAR_MAX_CHUNKS, 0, r.st>>>(c, b.hdr, b.s);
      r.rc = TSR_CUDA_LAUNCHED("k_headers", r.err);
    }
  }
  if (r.rc == 0) {
    k_offsets<<<1, 1, 0, r.st>>>(b.hdr, nch, b.off, b.s);
    r.rc = TSR_CUDA_LAUNCHED("k_offsets", r.err);
  }
  for (int f = 0; f < nch; f += CPAR_MAX_CHUNKS) {
    chunks c = {};
    c.first = f, c.count = nch - f < CPAR_MAX_CHUNKS ? nch - f : CPAR_MAX_CHUNKS;
    for (int i = 0; i < c.count; i++) c.p[i] = (const unsigned char *)in[f + i].data, c.bytes[i] = (int64_t)in[f + i].nbytes;
    if (r.rc == 0) {
      k_stack<<<dim3(64, (unsigned)c.count), THREADS, 0, r.st>>>(c, b.hdr, b.off, b.g0, b.s);
      r.rc = TSR_CUDA_LAUNCHED("k_stack", r.err);
    }
  }
  if (r.rc == 0) {
    k_exponent<<<1, 1, 0, r.st>>>(b.s);
    r.rc = TSR_CUDA_LAUNCHED("k_exponent", r.err);
  }
  LAUNCH(r, k_fixed, r.gv, b.g0, b.s);
  if (r.rc == 0) {
    k_gamma<<<1, 1, 0, r.st>>>(b.s, gamma);
    r.rc = TSR_CUDA_LAUNCHED("k_gamma", r.err);
  }
}

/* Q of part on g into ctl (mode 0: the level's start; 1: a sweep). */
static void sweep_q(run &r, const dgraph &g, const int32_t *part, int64_t *K, int mode)
{
  bufs &b = r.b;
  LAUNCH(r, k_inside, r.gv, g, part, b.s, 0);
  if (r.rc == 0) {
    k_squares<<<SQ_BLOCKS, THREADS, 0, r.st>>>(K, b.s, r.cn, b.partial, 0);
    r.rc = TSR_CUDA_LAUNCHED("k_squares", r.err);
  }
  if (r.rc == 0) {
    k_decide<<<1, SQ_BLOCKS, 0, r.st>>>(b.s, b.partial, mode);
    r.rc = TSR_CUDA_LAUNCHED("k_decide", r.err);
  }
}

static void local_moving(run &r, const dgraph &g)
{
  bufs &b = r.b;
  size_t kb = (size_t)r.cn * sizeof(int64_t);
  zero(r, b.K, kb);
  LAUNCH(r, k_strength, r.gv, g, b.part, b.K, b.s, 0);
  sweep_q(r, g, b.part, b.K, 0);
  ctl h;
  int sw = 0;
  for (; sw < CPAR_MAX_SWEEPS && peek(r, &h) && !h.lm_over; sw++) {
    zero(r, b.K, kb);
    LAUNCH(r, k_strength, r.gv, g, b.part, b.K, b.s, 0);
    LAUNCH(r, k_move, r.gw, g, b.part, b.K, b.next, b.hkey, b.hval, b.s, sw);
    zero(r, b.Kn, kb);
    LAUNCH(r, k_strength, r.gv, g, b.next, b.Kn, b.s, 0);
    sweep_q(r, g, b.next, b.Kn, 1);
    LAUNCH(r, k_accept, r.gv, b.part, b.next, b.s);
  }
  trace(r, "  local moving, sweeps", sw, h);
}

/* ids renumbered densely (which 0: nc, 1: nr). */
static void relabel(run &r, int32_t *ids, int which)
{
  bufs &b = r.b;
  zero(r, b.used, (size_t)(r.cn + 1) * sizeof(int32_t));
  LAUNCH(r, k_flag, r.gv, ids, b.used, b.s);
  size_t bytes = b.cub_bytes;
  if (r.rc == 0) r.rc = TSR_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(b.cub, bytes, b.used, b.map, (int)(r.cn + 1), r.st), r.err);
  LAUNCH(r, k_renumber, r.gv, ids, b.map, b.s, which);
}

static void refine(run &r, const dgraph &g, uint64_t seed)
{
  bufs &b = r.b;
  size_t kb = (size_t)r.cn * sizeof(int64_t);
  zero(r, b.K, kb);
  LAUNCH(r, k_strength, r.gv, g, b.part, b.K, b.s, 1);
  LAUNCH(r, k_ref_init, r.gv, g, b.part, b.ref, b.vext, b.s);
  ctl h;
  for (int k = 0; k < CPAR_REFINE_ROUNDS && (k == 0 || (peek(r, &h) && !h.ref_over)); k++) {
    zero(r, b.rk, kb), zero(r, b.ext, kb), zero(r, b.rsize, (size_t)r.cn * sizeof(int32_t));
    LAUNCH(r, k_ref_stats, r.gv, g, b.part, b.ref, b.rk, b.rsize, b.ext, b.s);
    LAUNCH(r, k_ref_move, r.gw, g, b.part, b.ref, b.K, b.rk, b.rsize, b.ext, b.vext, b.tgt, b.hkey, b.hval, b.s, seed, k);
    LAUNCH(r, k_ref_apply, r.gv, b.ref, b.tgt, b.s);
    if (r.rc == 0) {
      k_ref_check<<<1, 1, 0, r.st>>>(b.s);
      r.rc = TSR_CUDA_LAUNCHED("k_ref_check", r.err);
    }
  }
}

static void aggregate(run &r, const dgraph &g, const dgraph &o)
{
  bufs &b = r.b;
  /* cap = the level's nnz: no padding keys to sort */
  LAUNCH(r, k_keys, r.gv, g, b.agg, b.keys, b.vals, r.cnnz, r.cbits, b.s);
  size_t bytes = b.cub_bytes;
  if (r.rc == 0)
    r.rc = TSR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.cub, bytes, b.keys, b.keys2, b.vals, b.vals2, (int)r.cnnz, 0,
                                                          2 * r.cbits, r.st), r.err);
  bytes = b.cub_bytes;
  if (r.rc == 0)
    r.rc = TSR_CUDA_CHECK(cub::DeviceReduce::ReduceByKey(b.cub, bytes, b.keys2, b.ukeys, b.vals2, b.usum, &b.s->nruns,
                                                         cuda::std::plus<int64_t>{}, (int)r.cnnz, r.st), r.err);
  LAUNCH(r, k_build, r.gv, b.ukeys, b.usum, o, r.cbits, b.s);
  zero(r, o.k, (size_t)r.cn * sizeof(int64_t));
  LAUNCH(r, k_coarse_k, r.gv, g, b.agg, o, b.part, b.cpart, b.s);
  LAUNCH(r, k_node, r.gv, b.node, b.agg, b.s);
  LAUNCH(r, k_next_level, r.gv, b.part, b.cpart, b.s);
  if (r.rc == 0) {
    k_next_sizes<<<1, 1, 0, r.st>>>(b.s);
    r.rc = TSR_CUDA_LAUNCHED("k_next_sizes", r.err);
  }
  if (r.rc == 0) {
    k_fix_nnz<<<1, 1, 0, r.st>>>(o, b.s);
    r.rc = TSR_CUDA_LAUNCHED("k_fix_nnz", r.err);
  }
}

/* One pass from b.labels: levels until nothing merges (pass_over). */
static void one_pass(run &r, bool leiden, uint64_t seed)
{
  bufs &b = r.b;
  if (r.rc == 0) {
    k_pass_start<<<1, 1, 0, r.st>>>(b.s);
    r.rc = TSR_CUDA_LAUNCHED("k_pass_start", r.err);
  }
  LAUNCH(r, k_pass_init, r.gv, b.part, b.node, b.labels, b.s);
  dgraph cur = b.g0, outs[2] = {b.ga, b.gb};
  ctl h;
  for (int lev = 0; lev < CPAR_MAX_LEVELS && peek(r, &h) && !h.stop && !h.pass_over; lev++) {
    trace(r, "level", lev, h);
    size_for(r, h.n, h.nnz);
    local_moving(r, cur);
    relabel(r, b.part, 0);
    if (r.rc == 0) {
      k_level_check<<<1, 1, 0, r.st>>>(b.s, leiden);
      r.rc = TSR_CUDA_LAUNCHED("k_level_check", r.err);
    }
    if (!peek(r, &h) || h.pass_over) break;
    if (leiden) {
      refine(r, cur, seed);
      relabel(r, b.ref, 1);
    }
    if (r.rc == 0) {
      k_choose_ctl<<<1, 1, 0, r.st>>>(b.s, leiden ? 1 : 0);
      r.rc = TSR_CUDA_LAUNCHED("k_choose_ctl", r.err);
    }
    LAUNCH(r, k_choose, r.gv, b.agg, b.part, b.ref, b.s);
    aggregate(r, cur, outs[lev & 1]);
    cur = outs[lev & 1];
  }
}

/* pass_over ends a pass's levels; the pass's labels, its Q, keep or stop. */
static void pass_end(run &r)
{
  bufs &b = r.b;
  size_for(r, r.n, r.nnz);
  LAUNCH(r, k_pass_labels, r.gv, b.labels, b.part, b.node, b.s);
  if (r.rc == 0) {
    k_pass_q_setup<<<1, 1, 0, r.st>>>(b.s);
    r.rc = TSR_CUDA_LAUNCHED("k_pass_q_setup", r.err);
  }
  zero(r, b.K, (size_t)r.n * sizeof(int64_t));
  LAUNCH(r, k_strength, r.gv, b.g0, b.labels, b.K, b.s, 1);
  LAUNCH(r, k_inside, r.gv, b.g0, b.labels, b.s, 1);
  if (r.rc == 0) {
    k_squares<<<SQ_BLOCKS, THREADS, 0, r.st>>>(b.K, b.s, r.n, b.partial, 1);
    r.rc = TSR_CUDA_LAUNCHED("k_squares", r.err);
  }
  if (r.rc == 0) {
    k_pass_decide<<<1, SQ_BLOCKS, 0, r.st>>>(b.s, b.partial);
    r.rc = TSR_CUDA_LAUNCHED("k_pass_decide", r.err);
  }
  LAUNCH(r, k_pass_keep, r.gv, b.best, b.labels, b.s);
}

/* out = best's labels numbered by decreasing size, ties by smallest member. */
static void by_size(run &r, int32_t *out)
{
  bufs &b = r.b;
  int32_t *size = b.rsize, *minm = b.tgt;
  zero(r, size, (size_t)r.n * sizeof(int32_t));
  if (r.rc == 0) r.rc = TSR_CUDA_CHECK(cudaMemsetAsync(minm, 0x7f, (size_t)r.n * sizeof(int32_t), r.st), r.err);
  LAUNCH(r, k_size, r.gv, b.best, size, minm, b.s);
  LAUNCH(r, k_size_keys, r.gv, size, minm, b.keys, b.ids, r.bits, b.s);
  size_t bytes = b.cub_bytes;
  if (r.rc == 0)
    r.rc = TSR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(b.cub, bytes, b.keys, b.keys2, b.ids, b.ids2, (int)r.n, 0,
                                                          2 * r.bits, r.st), r.err);
  LAUNCH(r, k_rank, r.gv, b.ids2, b.map, b.s);
  LAUNCH(r, k_final, r.gv, b.best, b.map, out, b.s);
}

__global__ void k_identity(int32_t *labels, const ctl *s)
{
  TSR_GRID_STRIDE(v, s->n0) labels[v] = (int32_t)v;
}

/* nnz bound of the chunks from their bytes (a chunk of r rows and z f32
 * values takes at least 40 + 8 r + 8 z bytes). */
static int64_t nnz_bound(const tsr_buf *in, int nch)
{
  int64_t z = 0;
  for (int i = 0; i < nch; i++) z += in[i].nbytes > 40 ? (int64_t)(in[i].nbytes - 40) / 8 : 0;
  return z;
}

static int setup(run &r, const tsr_gpu_ctx *gpu, int64_t n, const tsr_buf *in, int nch, tsr_scratch &scratch,
                 const char *op, tsr_errbuf *err)
{
  r.gpu = gpu, r.st = tsr_stream(gpu), r.err = err, r.n = n, r.nnz = nnz_bound(in, nch);
  if (r.nnz < 1) r.nnz = 1;
  if (r.nnz >= INT32_MAX / 2 || n >= INT32_MAX / 2)
    return tsr_fail(err, TSR_ENODEV, "%s: %lld nodes / %lld edges exceed the GPU variant's int sizes", op, (long long)n,
                    (long long)r.nnz);
  r.bits = 1;
  while (((int64_t)1 << r.bits) <= n) r.bits++;
  size_for(r, n, r.nnz);
  carver c;
  size_t cub_bytes = cub_need(n, r.nnz);
  layout(c, r.b, n, r.nnz, nch, cub_bytes);
  void *base = nullptr;
  int rc = scratch.get(c.used + 256, &base, "the community detection's buffers", err);
  if (rc != 0) return rc;
  carver real;
  real.base = (char *)(((uintptr_t)base + 255) / 256 * 256);
  layout(real, r.b, n, r.nnz, nch, cub_bytes);
  return 0;
}

}  // namespace

extern "C" int tsr_cuda_community(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                                  tsr_errbuf *err)
{
  const char *method = "leiden";
  double gamma = 1.0;
  int64_t seed = 0, iters = -1, n = out->meta.shape[0];
  if (tsr_params_find(p, "method") != NULL) tsr_params_get_str(p, "method", &method, err);
  if (tsr_params_find(p, "resolution") != NULL) tsr_params_get_float(p, "resolution", &gamma, err);
  if (tsr_params_find(p, "seed") != NULL) tsr_params_get_int(p, "seed", &seed, err);
  if (tsr_params_find(p, "n_iterations") != NULL) tsr_params_get_int(p, "n_iterations", &iters, err);
  bool leiden = strcmp(method, "leiden") == 0;
  int passes = !leiden ? 1 : iters < 0 || iters > CPAR_MAX_PASSES ? CPAR_MAX_PASSES : (int)iters;
  if (leiden && iters == 0) passes = 0;
  tsr_scratch scratch(gpu);
  run r;
  r.rc = setup(r, gpu, n, in, n_in, scratch, "community", err);
  if (r.rc != 0) return r.rc == TSR_ENODEV ? r.rc : tsr_cuda_fail_op("community", r.rc, err);
  load(r, in, n_in, gamma);
  LAUNCH(r, k_identity, r.gv, r.b.labels, r.b.s);
  LAUNCH(r, k_identity, r.gv, r.b.best, r.b.s);
  ctl h;
  r.trace = getenv("TSR_COMMUNITY_TRACE") != NULL, r.t0 = wall_ms();
  for (int ps = 0; ps < passes && peek(r, &h) && !h.stop; ps++) {
    trace(r, "pass", ps, h);
    one_pass(r, leiden, cpar_pass_seed((uint64_t)seed, ps));
    pass_end(r);
  }
  if (peek(r, &h)) trace(r, "done, passes", passes, h);
  size_for(r, r.n, r.nnz);
  by_size(r, (int32_t *)out->data);
  if (r.rc == 0) r.rc = tsr_cuda_defer_flags("community", &r.b.s->flags, kFlagNames, NFLAGS, r.st, err);
  return r.rc == 0 ? 0 : tsr_cuda_fail_op("community", r.rc, err);
}

namespace {

/* labels (any integer dtype) into part, checked against n0. */
template <class T>
__global__ void k_labels(const T *x, int64_t count, int64_t at, int32_t *part, ctl *s)
{
  TSR_GRID_STRIDE(i, count)
  {
    int64_t l = (int64_t)x[i];
    if (l < 0 || l >= s->n0) atomicOr(&s->flags, BAD_LABEL), l = 0;
    part[at + i] = (int32_t)l;
  }
}

__global__ void k_mod_out(ctl *s, const double *partial, double *out)
{
  double q = modularity_of(s, partial);
  if (threadIdx.x == 0) *out = s->flags ? NAN : q;
}

}  // namespace

extern "C" int tsr_cuda_modularity(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                                   tsr_errbuf *err)
{
  int64_t ng = 0, n = 0;
  double gamma = 1.0;
  tsr_params_get_int(p, "n_graph", &ng, err);
  if (tsr_params_find(p, "resolution") != NULL) tsr_params_get_float(p, "resolution", &gamma, err);
  for (int i = (int)ng; i < n_in; i++) n += in[i].meta.shape[0];
  tsr_scratch scratch(gpu);
  run r;
  r.rc = setup(r, gpu, n, in, (int)ng, scratch, "modularity", err);
  if (r.rc != 0) return r.rc == TSR_ENODEV ? r.rc : tsr_cuda_fail_op("modularity", r.rc, err);
  load(r, in, (int)ng, gamma);
  int64_t at = 0;
  for (int i = (int)ng; r.rc == 0 && i < n_in; i++) {
    int64_t cnt = in[i].meta.shape[0];
    int rc = tsr_with_dtype(in[i].meta.dtype, [&](auto t) {
      using T = decltype(t);
      k_labels<T><<<tsr_grid(cnt, THREADS), THREADS, 0, r.st>>>((const T *)in[i].data, cnt, at, r.b.labels, r.b.s);
      return TSR_CUDA_LAUNCHED("k_labels", err);
    });
    r.rc = rc == TSR_EINVAL ? tsr_fail(err, TSR_EINVAL, "labels chunk of dtype %d", (int)in[i].meta.dtype) : rc;
    at += cnt;
  }
  zero(r, r.b.K, (size_t)n * sizeof(int64_t));
  LAUNCH(r, k_strength, r.gv, r.b.g0, r.b.labels, r.b.K, r.b.s, 1);
  LAUNCH(r, k_inside, r.gv, r.b.g0, r.b.labels, r.b.s, 1);
  if (r.rc == 0) {
    k_squares<<<SQ_BLOCKS, THREADS, 0, r.st>>>(r.b.K, r.b.s, n, r.b.partial, 2);
    r.rc = TSR_CUDA_LAUNCHED("k_squares", err);
  }
  if (r.rc == 0) {
    k_mod_out<<<1, SQ_BLOCKS, 0, r.st>>>(r.b.s, r.b.partial, (double *)out->data);
    r.rc = TSR_CUDA_LAUNCHED("k_mod_out", err);
  }
  if (r.rc == 0) r.rc = tsr_cuda_defer_flags("modularity", &r.b.s->flags, kFlagNames, NFLAGS, r.st, err);
  return r.rc == 0 ? 0 : tsr_cuda_fail_op("modularity", r.rc, err);
}
