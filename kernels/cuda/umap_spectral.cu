/* kernels/cuda/umap_spectral.cu — umap_spectral's CUDA variant: the CPU
 * op's block subspace iteration (kernels/cpu/umap_spectral.c) with the
 * block row-major and Cholesky-QR for the orthonormalization
 * (kernels/cpu/umap_spectral.h says why both give the CPU op's iterates up
 * to rounding; tests/unit/test_umap_spectral_par.c emulates this file's
 * scheme in C). docs/umap.md, "umap_spectral on the GPU".
 *
 * No synchronization: the host enqueues the CPU op's whole schedule
 * (max_iter iterations, a Ritz step every 10th and at the last) and
 * one-block control kernels record on the device when the two wanted Ritz
 * pairs have converged (ctl.done); every later kernel returns at once.
 * The convergence step writes the output (done_at = that iteration).
 *
 * Determinism: no atomics on floats. Each output row of A X is one thread
 * per (row, vector) summing its edges in the CSR order (the CPU op's
 * order); every reduction is a fixed grid (NB blocks over fixed row
 * ranges) summed in a fixed tree, then the partials in block order.
 *
 * Bad input (no CSR chunk of f32, rows that do not add up to n, an index
 * out of range) fails the task through tsr_cuda_defer_flags (TSR_EPROTO),
 * as does a block that lost rank (the CPU op draws a fresh column there;
 * it does not happen on graphs of >= SPEC_MIN_N vertices in practice).
 * Graphs under SPEC_MIN_N vertices run on the CPU (TSR_ENODEV). */
#include "common.cuh"

extern "C" {
#include "cpu/csr.h"
#include "csr_dev.cuh"
#include "cpu/umap_spectral.h"
}

namespace {

#define M TSR_SPEC_BLOCK
#define MAX_CHUNKS 128 /* chunks per launch of the header and stacking kernels */
#define NB 240         /* the reductions' fixed grid */
#define THREADS 256
#define SPEC_MIN_N 256

enum { BAD_HEADER = 1, BAD_ROWS = 2, BAD_INDEX = 4, BAD_RANK = 8 };
#define NFLAGS 4
const char *const kFlagNames[] = {
  "a graph chunk on the device is not a CSR chunk of f32 weights with n columns (header or size)",
  "the graph's chunks do not add up to n rows",
  "a graph chunk's indptr or column index is out of range",
  "the iteration block lost rank (a vanished direction); run it on the CPU",
};

struct ctl {
  int64_t n, nnz_bound;
  int flags, done;
  int64_t done_at;
  double nrm;              /* Σ degrees */
  double c[M], t[M * M];   /* the current orthonormalization pass */
  double q[M * M], ev[M];  /* the current Ritz step */
};

struct chunks {
  const unsigned char *p[MAX_CHUNKS];
  int64_t bytes[MAX_CHUNKS];
  int first, count;
};

struct graph {
  int64_t *ptr;
  int32_t *adj;
  float *w;
  double *isd, *v0;
};

__device__ __forceinline__ bool idle(const ctl *s) { return s->flags != 0 || s->done != 0; }

/* ---------- loading ---------- */

/* hdr[2 i], hdr[2 i + 1] = rows, nnz of chunk i (bad: flags). */
__global__ void k_headers(chunks c, int64_t *hdr, ctl *s)
{
  int i = threadIdx.x;
  if (i >= c.count) return;
  int64_t *h = hdr + 2 * (c.first + i);
  h[0] = h[1] = 0;
  dcsr v;
  bool ok = dcsr_parse(c.p[i], c.bytes[i], &v) && v.dt == TSR_F32 && v.cols == s->n;
  if (ok) h[0] = v.rows, h[1] = v.nnz;
  if (!ok) atomicOr(&s->flags, BAD_HEADER);
}

/* Row and edge offsets of the chunks (one thread). */
__global__ void k_offsets(const int64_t *hdr, int nch, int64_t *off, ctl *s)
{
  int64_t r = 0, e = 0;
  for (int i = 0; i < nch; i++) off[2 * i] = r, off[2 * i + 1] = e, r += hdr[2 * i], e += hdr[2 * i + 1];
  if (r != s->n) atomicOr(&s->flags, BAD_ROWS);
  if (e > s->nnz_bound) atomicOr(&s->flags, BAD_HEADER);
}

/* Copies the chunks' indptr (shifted), indices and weights into g;
 * blockIdx.y is the chunk. */
__global__ void k_stack(chunks c, const int64_t *hdr, const int64_t *off, graph g, ctl *s)
{
  int i = blockIdx.y;
  if (i >= c.count || s->flags != 0) return;
  const int64_t *h = hdr + 2 * (c.first + i), *o = off + 2 * (c.first + i);
  int64_t rows = h[0], nnz = h[1], r0 = o[0], e0 = o[1];
  dcsr v;
  dcsr_sections(c.p[i], rows, nnz, &v);  /* k_headers checked the header */
  const int64_t *indptr = v.indptr;
  const int32_t *indices = v.indices;
  const float *values = (const float *)v.values;
  int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t r = tid; r <= rows; r += step) {
    int64_t x = indptr[r];
    if (x < 0 || x > nnz || (r == 0 && x != 0) || (r == rows && x != nnz) || (r > 0 && x < indptr[r - 1]))
      atomicOr(&s->flags, BAD_INDEX);
    g.ptr[r0 + r] = e0 + x;  /* r = rows: the next chunk's first entry, the same value */
  }
  for (int64_t e = tid; e < nnz; e += step) {
    int32_t col = indices[e];
    if (col < 0 || col >= s->n) atomicOr(&s->flags, BAD_INDEX), col = 0;
    g.adj[e0 + e] = col;
    g.w[e0 + e] = values[e];
  }
}

/* Degrees (the CPU op's order): isd = D^-1/2, v0 = d for now. */
__global__ void k_degrees(graph g, ctl *s)
{
  if (s->flags != 0) return;
  TSR_GRID_STRIDE(j, s->n)
  {
    double d = 0;
    for (int64_t e = g.ptr[j]; e < g.ptr[j + 1]; e++) d += g.w[e];
    g.isd[j] = d > 0 ? 1 / sqrt(d) : 0.0;
    g.v0[j] = d;
  }
}

__global__ void k_v0(graph g, ctl *s)
{
  if (s->flags != 0) return;
  double nrm = s->nrm;
  TSR_GRID_STRIDE(j, s->n) g.v0[j] = nrm > 0 ? sqrt(g.v0[j]) / sqrt(nrm) : 1 / sqrt((double)s->n);
}

/* The start block, row-major. */
__global__ void k_start(double *x, ctl *s, uint64_t seed)
{
  if (s->flags != 0) return;
  TSR_GRID_STRIDE(i, s->n * M) x[i] = tsr_spec_start(seed, (int)(i % M), s->n, i / M);
}

/* ---------- the iteration ---------- */

/* ax = A x = (x + D^-1/2 W D^-1/2 x) / 2: thread (row j, vector k). */
__global__ void k_apply(graph g, const double *x, double *ax, ctl *s)
{
  if (idle(s)) return;
  TSR_GRID_STRIDE(t, s->n * M)
  {
    int64_t j = t / M, k = t % M;
    double acc = 0;
    for (int64_t e = g.ptr[j]; e < g.ptr[j + 1]; e++) {
      int32_t col = g.adj[e];
      acc += (double)g.w[e] * g.isd[col] * x[(int64_t)col * M + k];
    }
    ax[t] = 0.5 * (x[t] + g.isd[j] * acc);
  }
}

enum { R_DEG, R_ORTH, R_RITZ, R_RES };

template <int MODE>
struct nvals {
  static const int v = MODE == R_DEG ? 1 : MODE == R_ORTH ? TSR_SPEC_NORTH : MODE == R_RITZ ? M * M : 2;
};

/* partial[b * NV + v]: block b's sums over its fixed row range (threads in
 * a fixed stride, then a fixed tree). */
template <int MODE>
__global__ void __launch_bounds__(THREADS) k_reduce(const double *x, const double *ax, const double *v0, double *partial,
                                                    ctl *s)
{
  const int NV = nvals<MODE>::v;
  if (MODE == R_DEG ? s->flags != 0 : idle(s)) return;
  __shared__ double sh[THREADS / 32][NV];
  double acc[NV];
  for (int v = 0; v < NV; v++) acc[v] = 0;
  int64_t n = s->n, r0 = n * blockIdx.x / NB, r1 = n * (blockIdx.x + 1) / NB;
  for (int64_t i = r0 + threadIdx.x; i < r1; i += THREADS) {
    if (MODE == R_DEG) {
      acc[0] += v0[i];
    } else if (MODE == R_ORTH) {
      double xi[M], vi = v0[i];
      for (int k = 0; k < M; k++) xi[k] = x[i * M + k];
      acc[0] += vi * vi;
      for (int k = 0; k < M; k++) acc[1 + k] += vi * xi[k];
#pragma unroll
      for (int a = 0; a < M; a++)
#pragma unroll
        for (int b = a; b < M; b++) acc[tsr_spec_pair(a, b)] += xi[a] * xi[b];
    } else if (MODE == R_RITZ) {
      double xi[M], ai[M];
      for (int k = 0; k < M; k++) xi[k] = x[i * M + k], ai[k] = ax[i * M + k];
#pragma unroll
      for (int a = 0; a < M; a++)
#pragma unroll
        for (int b = 0; b < M; b++) acc[a * M + b] += xi[a] * ai[b];
    } else {
      for (int k = 0; k < 2; k++) {
        double d = ax[i * M + k] - s->ev[k] * x[i * M + k];
        acc[k] += d * d;
      }
    }
  }
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int v = 0; v < NV; v++) {
    double a = acc[v];
    for (int o = 16; o > 0; o /= 2) a += __shfl_down_sync(0xffffffffu, a, o);
    if (lane == 0) sh[warp][v] = a;
  }
  __syncthreads();
  for (int v = threadIdx.x; v < NV; v += THREADS) {
    double a = 0;
    for (int w = 0; w < THREADS / 32; w++) a += sh[w][v];
    partial[blockIdx.x * NV + v] = a;
  }
}

/* tot[v] = Σ_b partial[b * NV + v] in block order (one block of 64). */
__device__ void total(const double *partial, int nv, double *tot)
{
  for (int v = threadIdx.x; v < nv; v += blockDim.x) {
    double a = 0;
    for (int b = 0; b < NB; b++) a += partial[b * nv + v];
    tot[v] = a;
  }
  __syncthreads();
}

__global__ void k_fin_deg(const double *partial, ctl *s)
{
  if (s->flags != 0) return;
  __shared__ double tot[1];
  total(partial, 1, tot);
  if (threadIdx.x == 0) s->nrm = tot[0];
}

__global__ void k_fin_orth(const double *partial, ctl *s)
{
  if (idle(s)) return;
  __shared__ double tot[TSR_SPEC_NORTH];
  total(partial, TSR_SPEC_NORTH, tot);
  if (threadIdx.x == 0 && !tsr_spec_cholqr(tot, s->c, s->t)) s->flags |= BAD_RANK;
}

__global__ void k_orth(double *x, const double *v0, ctl *s)
{
  if (idle(s)) return;
  __shared__ double c[M], t[M * M];
  if (threadIdx.x < M) c[threadIdx.x] = s->c[threadIdx.x];
  if (threadIdx.x < M * M) t[threadIdx.x] = s->t[threadIdx.x];
  __syncthreads();
  TSR_GRID_STRIDE(i, s->n)
  {
    double r[M];
    for (int k = 0; k < M; k++) r[k] = x[i * M + k];
    tsr_spec_orth_row(r, v0[i], c, t);
    for (int k = 0; k < M; k++) x[i * M + k] = r[k];
  }
}

__global__ void k_fin_ritz(const double *partial, ctl *s)
{
  if (idle(s)) return;
  __shared__ double tot[M * M];
  total(partial, M * M, tot);
  if (threadIdx.x != 0) return;
  double h[M * M];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < M; j++) h[i * M + j] = 0.5 * (tot[i * M + j] + tot[j * M + i]);
  tsr_spec_jacobi(M, h, s->ev, s->q);
}

__global__ void k_rotate(double *x, double *ax, ctl *s)
{
  if (idle(s)) return;
  __shared__ double q[M * M];
  if (threadIdx.x < M * M) q[threadIdx.x] = s->q[threadIdx.x];
  __syncthreads();
  TSR_GRID_STRIDE(i, s->n)
  {
    double r[M];
    for (int k = 0; k < M; k++) r[k] = x[i * M + k];
    tsr_spec_rotate_row(r, q);
    for (int k = 0; k < M; k++) x[i * M + k] = r[k];
    for (int k = 0; k < M; k++) r[k] = ax[i * M + k];
    tsr_spec_rotate_row(r, q);
    for (int k = 0; k < M; k++) ax[i * M + k] = r[k];
  }
}

__global__ void k_fin_res(const double *partial, ctl *s, int64_t it, int last)
{
  if (idle(s)) return;
  __shared__ double tot[2];
  total(partial, 2, tot);
  if (threadIdx.x == 0 && (fmax(sqrt(tot[0]), sqrt(tot[1])) < TSR_SPEC_TOL || last)) s->done = 1, s->done_at = it;
}

/* The result, written once: at the step that converged. */
__global__ void k_emit(const double *x, float *y, const ctl *s, int64_t it)
{
  if (s->flags != 0 || s->done_at != it) return;
  TSR_GRID_STRIDE(i, s->n) y[2 * i] = (float)x[i * M], y[2 * i + 1] = (float)x[i * M + 1];
}

__global__ void k_poison(float *y, const ctl *s)
{
  if (s->flags == 0) return;
  TSR_GRID_STRIDE(i, 2 * s->n) y[i] = NAN;
}

struct run {
  cudaStream_t st;
  tsr_errbuf *err;
  int rc;
  int64_t n;
  unsigned gv, gm;
  ctl *s;
  graph g;
  double *partial;
};

#define LAUNCH(r, kernel, grid, ...)                                      \
  do {                                                                    \
    if ((r).rc == 0) {                                                    \
      kernel<<<(grid), THREADS, 0, (r).st>>>(__VA_ARGS__);                \
      (r).rc = TSR_CUDA_LAUNCHED(#kernel, (r).err);                       \
    }                                                                     \
  } while (0)
#define LAUNCH1(r, kernel, ...)                                           \
  do {                                                                    \
    if ((r).rc == 0) {                                                    \
      kernel<<<1, 64, 0, (r).st>>>(__VA_ARGS__);                          \
      (r).rc = TSR_CUDA_LAUNCHED(#kernel, (r).err);                       \
    }                                                                     \
  } while (0)

static void load(run &r, const tsr_buf *in, int nch, int64_t *hdr, int64_t *off)
{
  for (int pass = 0; pass < 2; pass++) {
    for (int f = 0; f < nch; f += MAX_CHUNKS) {
      chunks c = {};
      c.first = f, c.count = nch - f < MAX_CHUNKS ? nch - f : MAX_CHUNKS;
      for (int i = 0; i < c.count; i++) c.p[i] = (const unsigned char *)in[f + i].data, c.bytes[i] = (int64_t)in[f + i].nbytes;
      if (r.rc != 0) return;
      if (pass == 0) k_headers<<<1, MAX_CHUNKS, 0, r.st>>>(c, hdr, r.s);
      else k_stack<<<dim3(64, (unsigned)c.count), THREADS, 0, r.st>>>(c, hdr, off, r.g, r.s);
      r.rc = TSR_CUDA_LAUNCHED("k_headers / k_stack", r.err);
    }
    if (pass == 0 && r.rc == 0) {
      k_offsets<<<1, 1, 0, r.st>>>(hdr, nch, off, r.s);
      r.rc = TSR_CUDA_LAUNCHED("k_offsets", r.err);
    }
  }
  LAUNCH(r, k_degrees, r.gv, r.g, r.s);
  LAUNCH(r, k_reduce<R_DEG>, NB, nullptr, nullptr, r.g.v0, r.partial, r.s);
  LAUNCH1(r, k_fin_deg, r.partial, r.s);
  LAUNCH(r, k_v0, r.gv, r.g, r.s);
}

/* The CPU op's spec_orth: two passes of projected Cholesky-QR. */
static void orth(run &r, double *x)
{
  for (int pass = 0; pass < 2; pass++) {
    LAUNCH(r, k_reduce<R_ORTH>, NB, x, nullptr, r.g.v0, r.partial, r.s);
    LAUNCH1(r, k_fin_orth, r.partial, r.s);
    LAUNCH(r, k_orth, r.gv, x, r.g.v0, r.s);
  }
}

/* The CPU op's spec_iterate. */
static void iterate(run &r, double *x, double *ax, float *y, int64_t seed, int64_t max_iter)
{
  LAUNCH(r, k_start, r.gm, x, r.s, (uint64_t)seed);
  orth(r, x);
  for (int64_t it = 1; it <= max_iter && r.rc == 0; it++) {
    LAUNCH(r, k_apply, r.gm, r.g, x, ax, r.s);
    if (it % 10 == 0 || it == max_iter) {
      LAUNCH(r, k_reduce<R_RITZ>, NB, x, ax, nullptr, r.partial, r.s);
      LAUNCH1(r, k_fin_ritz, r.partial, r.s);
      LAUNCH(r, k_rotate, r.gv, x, ax, r.s);
      LAUNCH(r, k_reduce<R_RES>, NB, x, ax, nullptr, r.partial, r.s);
      LAUNCH1(r, k_fin_res, r.partial, r.s, it, it == max_iter);
      LAUNCH(r, k_emit, r.gv, x, y, r.s, it);
    }
    double *sw = x;  /* x <- A x (the next A x overwrites the old block) */
    x = ax, ax = sw;
    orth(r, x);
  }
}

/* nnz bound of the chunks from their bytes (a chunk of r rows and z f32
 * values takes at least 40 + 8 r + 8 z bytes). */
static int64_t nnz_bound(const tsr_buf *in, int nch)
{
  int64_t z = 0;
  for (int i = 0; i < nch; i++) z += in[i].nbytes > 40 ? (int64_t)(in[i].nbytes - 40) / 8 : 0;
  return z < 1 ? 1 : z;
}

}  // namespace

extern "C" int tsr_cuda_umap_spectral(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out,
                                      const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  int64_t n = out->meta.shape[0], seed = 0, max_iter = 1000;
  if (tsr_params_find(p, "seed") != NULL) tsr_params_get_int(p, "seed", &seed, err);
  if (tsr_params_find(p, "max_iter") != NULL) tsr_params_get_int(p, "max_iter", &max_iter, err);
  if (n < SPEC_MIN_N) return tsr_fail(err, TSR_ENODEV, "umap_spectral: %lld vertices run on the CPU", (long long)n);
  if (n >= INT32_MAX / M) return tsr_fail(err, TSR_ENODEV, "umap_spectral: %lld vertices exceed the GPU variant", (long long)n);
  int64_t nnz = nnz_bound(in, n_in);
  /* One carved allocation: ctl, headers, offsets, partials, ptr, isd, v0,
   * two blocks, adj, w (8-byte sections first). */
  size_t sz[] = {sizeof(ctl), (size_t)n_in * 16, (size_t)n_in * 16 + 16, (size_t)NB * M * M * 8, (size_t)(n + 1) * 8,
                 (size_t)n * 8, (size_t)n * 8, (size_t)n * M * 8, (size_t)n * M * 8, (size_t)nnz * 4, (size_t)nnz * 4};
  const int ns = (int)(sizeof sz / sizeof sz[0]);
  size_t at[sizeof sz / sizeof sz[0]], used = 0;
  for (int i = 0; i < ns; i++) at[i] = used, used += (sz[i] + 255) / 256 * 256;
  tsr_scratch scratch(gpu);
  char *base = nullptr;
  int rc = scratch.get((int64_t)used, &base, "umap_spectral: the graph and the iteration blocks", err);
  if (rc != 0) return rc;
  run r;
  r.st = tsr_stream(gpu), r.err = err, r.rc = 0, r.n = n;
  r.gv = tsr_grid(n, THREADS), r.gm = tsr_grid(n * M, THREADS);
  r.s = (ctl *)(base + at[0]);
  r.partial = (double *)(base + at[3]);
  r.g.ptr = (int64_t *)(base + at[4]);
  r.g.isd = (double *)(base + at[5]), r.g.v0 = (double *)(base + at[6]);
  r.g.adj = (int32_t *)(base + at[9]), r.g.w = (float *)(base + at[10]);
  ctl init = {};
  init.n = n, init.nnz_bound = nnz, init.done_at = -1;
  r.rc = TSR_CUDA_CHECK(cudaMemcpyAsync(r.s, &init, sizeof init, cudaMemcpyHostToDevice, r.st), err);
  load(r, in, n_in, (int64_t *)(base + at[1]), (int64_t *)(base + at[2]));
  iterate(r, (double *)(base + at[7]), (double *)(base + at[8]), (float *)out->data, seed, max_iter);
  LAUNCH(r, k_poison, tsr_grid(2 * n, THREADS), (float *)out->data, r.s);
  if (r.rc == 0) r.rc = tsr_cuda_defer_flags("umap_spectral", &r.s->flags, kFlagNames, NFLAGS, r.st, err);
  return r.rc == 0 ? 0 : tsr_cuda_fail_op("umap_spectral", r.rc, err);
}
