/* kernels/cpu/community_par.h — the decisions of the parallel (synchronous)
 * Leiden / Louvain that the CUDA `community` variant runs
 * (kernels/cuda/community.cu), shared with its plain-C emulation
 * (tests/unit/test_community_par.c) so both make the same choices.
 *
 * The scheme (docs/cluster.md, "Community detection on the GPU"):
 *  - Weights are fixed point: w·2^e rounded to int64, e chosen from the
 *    largest weight and nnz so that every sum of weights fits in 2^62.
 *    Every strength and aggregated weight is then an exact integer sum, so
 *    integer atomics give the same bits in any order: no float atomics.
 *  - Local moving is synchronous: every vertex picks its best community
 *    from the same snapshot; in even sweeps only moves to a larger
 *    community id are allowed, in odd sweeps only to a smaller one (the
 *    oscillation guard of cuGraph). A sweep that does not raise the
 *    modularity by more than CPAR_TOL is undone; two undone sweeps in a
 *    row end the level.
 *  - Leiden's refinement: vertices start alone inside their community; in
 *    each round a vertex still alone whose hash bit (seed, vertex, round)
 *    is set joins the neighbouring well-connected sub-community with the
 *    largest ΔH >= 0 (greedy: leidenalg's θ = 0.01 is nearly greedy),
 *    and only sub-communities with more than one member or whose vertex's
 *    bit is clear may be joined: no chains within a round.
 *  - Aggregation on the refined partition, the aggregate starting from the
 *    unrefined one; Louvain skips the refinement.
 * Ties are broken by a total order (gain, staying, smaller id), so the
 * choice does not depend on the order in which neighbours are seen. */
#ifndef TSR_KERNELS_CPU_COMMUNITY_PAR_H
#define TSR_KERNELS_CPU_COMMUNITY_PAR_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CPAR_FN static __host__ __device__ __forceinline__
#else
#define CPAR_FN static inline
#endif

#define CPAR_MAX_SWEEPS 40  /* local-moving sweeps per level at most */
#define CPAR_REFINE_ROUNDS 12
#define CPAR_MAX_LEVELS 24
#define CPAR_MAX_PASSES 4   /* Leiden: passes until Q stops rising, at most this many */
#define CPAR_TOL 1e-7       /* a sweep must raise Q by more than this */

/* The fixed-point exponent: 2^e · maxw · nnz <= 2^62 (e in -60..60). */
CPAR_FN int cpar_exponent(double maxw, int64_t nnz)
{
  double bound = maxw * (double)(nnz > 0 ? nnz : 1);
  int e = bound > 0 ? 62 - (int)ceil(log2(bound)) : 0;
  return e < -60 ? -60 : e > 60 ? 60 : e;
}

CPAR_FN int64_t cpar_fixed(double w, int e) { return (int64_t)llrint(ldexp(w, e)); }

CPAR_FN uint64_t cpar_mix(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The seed of pass p's refinement bits. */
CPAR_FN uint64_t cpar_pass_seed(uint64_t seed, int p) { return cpar_mix(seed ^ 0x6c656964656e2121ull) + (uint64_t)p; }

/* The refinement's bit of vertex v in round r. */
CPAR_FN int cpar_bit(uint64_t seed, int64_t v, int r)
{
  return (int)(cpar_mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)v * 0xd1b54a32d192ed03ull + (uint64_t)r + 1) >> 63);
}

/* Moving v (strength kv) into community c with strength kc (v not in it)
 * from the weight wvc between them: the modularity gain times 2m (all in
 * fixed-point units; gam = γ / 2m). */
CPAR_FN double cpar_gain(int64_t wvc, int64_t kv, int64_t kc, double gam)
{
  return (double)wvc - gam * (double)kv * (double)kc;
}

/* Whether (gain, c) beats the best so far (best_gain, best) for a vertex
 * now in own: larger gain, then staying, then the smaller id. */
CPAR_FN int cpar_better(double gain, int32_t c, double best_gain, int32_t best, int32_t own)
{
  if (gain != best_gain) return gain > best_gain;
  if (best == own) return 0;
  return c == own || c < best;
}

/* The oscillation guard: sweep s may move a vertex from own to c. */
CPAR_FN int cpar_allowed(int s, int32_t own, int32_t c) { return (s & 1) ? c < own : c > own; }

/* Well connected inside a community of strength ks: a part of strength
 * x with weight ext to the rest of it (Leiden's R and T sets). */
CPAR_FN int cpar_well(int64_t ext, int64_t x, int64_t ks, double gam)
{
  return (double)ext >= gam * (double)x * (double)(ks - x);
}

#endif
