/* kernels/cuda/reduce.cu — sum on the GPU, over one axis or everything.
 *
 * Same accumulation types as the CPU op: integers in 64-bit wrapping
 * arithmetic (→ i64; addition modulo 2^64 is associative, so these are the
 * CPU's bytes), floats in double rounded once to their dtype. The order of
 * the double additions differs from the CPU's fixed order: f64 sums agree
 * within about 1e-15 of the sum of magnitudes (documented bound 1e-12
 * relative), f32 sums are the CPU's almost always (the double sums differ
 * far below f32's rounding). The GPU order is itself fixed — it depends on
 * the shape only, never on the device — so results are deterministic.
 *
 * The input is [outer, n, inner] with n the summed axis (total: [1, count,
 * 1]). Two passes: partial sums over S segments of n into scratch, then a
 * sum of the S partials in order; S = 1 writes the output directly.
 *   inner == 1 (rows): a warp per (row, segment), lanes strided, warp tree.
 *   inner > 1 (columns): a thread per (segment, output), coalesced over j.
 * Missing values as the CPU op's params say (sum_mask): skipped integers
 * equal to `missing`, skipped NaN (`skipna`), or a count of the values
 * not skipped (`count`, output i64). */
#include "common.cuh"

template <class T>
struct acc_of {
  typedef double type;
};
template <>
struct acc_of<uint8_t> {
  typedef uint64_t type;
};
template <>
struct acc_of<int32_t> {
  typedef uint64_t type;
};
template <>
struct acc_of<int64_t> {
  typedef uint64_t type;
};

/* What is skipped and whether values are counted (cpu/reduce.c). */
struct sum_mask {
  int skipna, has_missing, count;
  int64_t missing;
};

/* One element's contribution. */
template <class T, class A>
__device__ __forceinline__ A term(T x, const sum_mask &m)
{
  bool skip;
  if constexpr (tsr_is_int<T>::value) skip = m.has_missing && (int64_t)x == m.missing;
  else skip = (m.skipna || m.count) && isnan((double)x);
  return skip ? (A)0 : m.count ? (A)1 : (A)x;
}

/* The output element from an accumulator: i64 for integers and counts,
 * else the input's float dtype. */
template <class T, class A>
__device__ __forceinline__ void store_sum(void *out, int64_t k, A acc, const sum_mask &m)
{
  if (tsr_is_int<T>::value || m.count) ((int64_t *)out)[k] = (int64_t)acc;
  else ((T *)out)[k] = (T)acc;
}

struct sum_shape {
  int64_t outer, n, inner;
  int64_t segs, seg_len;  /* S segments of n, each seg_len long (the last shorter) */
};

/* Rows: warp w sums segment w % S of row w / S. */
template <class T>
__global__ void sum_rows_kernel(const T *x, sum_shape sh, void *dst, int partial, sum_mask m)
{
  typedef typename acc_of<T>::type A;
  int lane = threadIdx.x & 31;
  int64_t warps = sh.outer * sh.segs, stride = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < warps; w += stride) {
    int64_t row = w / sh.segs, s = w - row * sh.segs, a0 = s * sh.seg_len;
    int64_t a1 = a0 + sh.seg_len < sh.n ? a0 + sh.seg_len : sh.n;
    const T *src = x + row * sh.n;
    A acc = 0;
    for (int64_t a = a0 + lane; a < a1; a += 32) acc += term<T, A>(src[a], m);
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane != 0) continue;
    if (partial) ((A *)dst)[w] = acc;
    else store_sum<T, A>(dst, row, acc, m);
  }
}

/* Columns: thread i sums segment i / outputs of output i % outputs. */
template <class T>
__global__ void sum_cols_kernel(const T *x, sum_shape sh, void *dst, int partial, sum_mask m)
{
  typedef typename acc_of<T>::type A;
  int64_t outputs = sh.outer * sh.inner;
  TSR_GRID_STRIDE(i, outputs * sh.segs)
  {
    int64_t s = i / outputs, q = i - s * outputs, o = q / sh.inner, j = q - o * sh.inner;
    int64_t a0 = s * sh.seg_len, a1 = a0 + sh.seg_len < sh.n ? a0 + sh.seg_len : sh.n;
    const T *src = x + o * sh.n * sh.inner + j;
    A acc = 0;
    for (int64_t a = a0; a < a1; a++) acc += term<T, A>(src[a * sh.inner], m);
    if (partial) ((A *)dst)[i] = acc;
    else store_sum<T, A>(dst, q, acc, m);
  }
}

/* out[q] = the S partials of output q, summed in segment order. rows
 * layout: partial[q * S + s]; columns: partial[s * outputs + q]. */
template <class T>
__global__ void sum_finish_kernel(const typename acc_of<T>::type *part, int64_t outputs, int64_t segs, int rows,
                                  void *out, sum_mask m)
{
  typedef typename acc_of<T>::type A;
  TSR_GRID_STRIDE(q, outputs)
  {
    A acc = 0;
    for (int64_t s = 0; s < segs; s++) acc += rows ? part[q * segs + s] : part[s * outputs + q];
    store_sum<T, A>(out, q, acc, m);
  }
}

/* S from the shape alone (never the device), so the order is fixed. */
static sum_shape plan(int64_t outer, int64_t n, int64_t inner)
{
  sum_shape sh = {outer, n, inner, 1, n};
  int64_t outputs = outer * inner, want;
  if (inner == 1) want = outer >= 4096 ? 1 : (n + 8191) / 8192;
  else want = outputs >= 131072 ? 1 : (131072 + outputs - 1) / outputs;
  want = want > 1024 ? 1024 : want > n ? n : want;
  sh.segs = want < 1 ? 1 : want;
  sh.seg_len = (n + sh.segs - 1) / sh.segs;
  sh.segs = sh.seg_len == 0 ? 1 : (n + sh.seg_len - 1) / sh.seg_len;
  return sh;
}

template <class T>
static int sum_launch(const T *x, const sum_shape &sh, const sum_mask &m, void *out, const tsr_gpu_ctx *gpu,
                      tsr_errbuf *err)
{
  typedef typename acc_of<T>::type A;
  cudaStream_t s = tsr_stream(gpu);
  int64_t outputs = sh.outer * sh.inner;
  tsr_scratch scratch(gpu);
  A *part = nullptr;
  int partial = sh.segs > 1;
  if (partial) {
    int rc = scratch.get(outputs * sh.segs, &part, "sum partials", err);
    if (rc != 0) return rc;
  }
  void *dst = partial ? (void *)part : out;
  if (sh.inner == 1)
    sum_rows_kernel<T><<<tsr_grid(outputs * sh.segs * 32, 256), 256, 0, s>>>(x, sh, dst, partial, m);
  else
    sum_cols_kernel<T><<<tsr_grid(outputs * sh.segs, 256), 256, 0, s>>>(x, sh, dst, partial, m);
  int rc = TSR_CUDA_LAUNCHED("sum_kernel", err);
  if (rc != 0 || !partial) return rc;
  sum_finish_kernel<T><<<tsr_grid(outputs, 256), 256, 0, s>>>(part, outputs, sh.segs, sh.inner == 1, out, m);
  return TSR_CUDA_LAUNCHED("sum_finish_kernel", err);
}

/* ---------- a 2-bit packed input over axis 0 (cpu/reduce.c: param cols) ---------- */

/* Thread (byte column q, row segment y): the 4 columns of byte q over its
 * rows, added into out with integer atomics (order-free: the CPU's sums). */
__global__ void packed_sum_kernel(const uint8_t *x, int64_t rows, int64_t cols, int64_t cb, int64_t seg, sum_mask m,
                                  unsigned long long *out)
{
  int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, r0 = (int64_t)blockIdx.y * seg;
  if (q >= cb) return;
  int64_t add[4], acc[4] = {0, 0, 0, 0};
  for (int v = 0; v < 4; v++) add[v] = m.has_missing && v == m.missing ? 0 : m.count ? 1 : v;
  for (int64_t r = r0; r < rows && r < r0 + seg; r++) {
    unsigned b = x[r * cb + q];
#pragma unroll
    for (int s = 0; s < 4; s++) acc[s] += add[(b >> (2 * s)) & 3u];
  }
  for (int s = 0; s < 4 && 4 * q + s < cols; s++) atomicAdd(&out[4 * q + s], (unsigned long long)acc[s]);
}

static int packed_sum(const tsr_params *p, const tsr_buf *in, tsr_buf *out, const sum_mask &m, const tsr_gpu_ctx *gpu,
                      tsr_errbuf *err)
{
  int64_t cols, rows = in[0].meta.shape[0], cb = in[0].meta.shape[1];
  int rc = tsr_params_get_int(p, "cols", &cols, err);
  if (rc != 0) return tsr_k_param_fail("sum", rc, err);
  cudaStream_t s = tsr_stream(gpu);
  rc = TSR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, out->nbytes, s), err);
  if (rc != 0 || rows == 0 || cb == 0) return rc;
  int64_t bx = (cb + 255) / 256, segs = (131072 + cb - 1) / cb;  /* about 128k threads in all */
  segs = segs > rows ? rows : segs > 65535 ? 65535 : segs;
  int64_t seg = (rows + segs - 1) / segs;
  segs = (rows + seg - 1) / seg;
  packed_sum_kernel<<<dim3((unsigned)bx, (unsigned)segs), 256, 0, s>>>((const uint8_t *)in[0].data, rows, cols, cb, seg, m,
                                                                      (unsigned long long *)out->data);
  return TSR_CUDA_LAUNCHED("packed_sum_kernel", err);
}

TSR_CUDA_VARIANT(sum)
{
  (void)n_in;
  const tsr_meta *m = &in[0].meta;
  int64_t axis;
  bool skipna = false, count = false;
  sum_mask mask = {0, tsr_params_find(p, "missing") != nullptr, 0, 0};
  int rc = tsr_params_opt_int(p, "axis", -1, &axis, err);
  if (rc == 0 && tsr_params_find(p, "skipna")) rc = tsr_params_get_bool(p, "skipna", &skipna, err);
  if (rc == 0 && tsr_params_find(p, "count")) rc = tsr_params_get_bool(p, "count", &count, err);
  if (rc == 0 && mask.has_missing) rc = tsr_params_get_int(p, "missing", &mask.missing, err);
  mask.skipna = skipna, mask.count = count;
  if (rc == 0 && tsr_params_find(p, "cols") != nullptr) {
    rc = packed_sum(p, in, out, mask, gpu, err);
    return rc == 0 ? 0 : tsr_cuda_fail_op("sum", rc, err);
  }
  if (rc != 0) return tsr_k_param_fail("sum", rc, err);
  if (axis < -1 || axis >= m->ndim) return tsr_fail(err, TSR_EINVAL, "sum: axis %lld is out of range", (long long)axis);
  int64_t outer = 1, n = tsr_meta_count(m), inner = 1;
  if (axis >= 0) {
    n = m->shape[axis];
    for (int d = 0; d < m->ndim; d++) {
      if (d < axis) outer *= m->shape[d];
      if (d > axis) inner *= m->shape[d];
    }
  }
  if (outer * inner == 0) return 0;
  if (n == 0) {
    rc = TSR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, out->nbytes, tsr_stream(gpu)), err);  /* 0 and 0.0 are all-zero bytes */
    return rc == 0 ? 0 : tsr_cuda_fail_op("sum", rc, err);
  }
  sum_shape sh = plan(outer, n, inner);
  rc = tsr_with_dtype(m->dtype, [&](auto t) {
    using T = decltype(t);
    return sum_launch<T>((const T *)in[0].data, sh, mask, out->data, gpu, err);
  });
  return rc == 0 ? 0 : tsr_cuda_fail_op("sum", rc, err);
}
