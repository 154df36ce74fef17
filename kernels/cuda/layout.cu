/* kernels/cuda/layout.cu — ops that move elements without changing them:
 * transpose, slice, assemble, view, and noop; plus the transpose and
 * block-copy helpers the solvers use. Byte moves only, so every result is
 * the CPU's bytes. */
#include <string.h>

#include "common.cuh"

/* ---------- transpose ---------- */

#define TT 32  /* tile edge */

/* dst [C, R] = src [R, C]ᵀ through a padded shared tile, so reads and
 * writes are both coalesced. Block (32, 8); tiles strided over y. */
template <class T>
__global__ void transpose_kernel(const T *src, T *dst, int64_t R, int64_t C)
{
  __shared__ T tile[TT][TT + 1];
  int64_t c0 = (int64_t)blockIdx.x * TT;
  for (int64_t r0 = (int64_t)blockIdx.y * TT; r0 < R; r0 += (int64_t)gridDim.y * TT) {
    for (int k = threadIdx.y; k < TT; k += 8) {
      int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < R && c < C) tile[k][threadIdx.x] = src[r * C + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < TT; k += 8) {
      int64_t c = c0 + k, r = r0 + threadIdx.x;
      if (r < R && c < C) dst[c * R + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

template <class T>
static int transpose_as(const void *src, void *dst, int64_t R, int64_t C, cudaStream_t s, tsr_errbuf *err)
{
  int64_t ty = (R + TT - 1) / TT;
  dim3 grid((unsigned)((C + TT - 1) / TT), (unsigned)(ty > 65535 ? 65535 : ty));
  transpose_kernel<T><<<grid, dim3(TT, 8), 0, s>>>((const T *)src, (T *)dst, R, C);
  return TSR_CUDA_LAUNCHED("transpose_kernel", err);
}

int tsr_cuda_transpose(const void *src, void *dst, int64_t R, int64_t C, size_t es, cudaStream_t s, tsr_errbuf *err)
{
  if (R == 0 || C == 0) return 0;
  if (es == 1) return transpose_as<uint8_t>(src, dst, R, C, s, err);
  if (es == 4) return transpose_as<uint32_t>(src, dst, R, C, s, err);
  return transpose_as<uint64_t>(src, dst, R, C, s, err);
}

TSR_CUDA_VARIANT(transpose)
{
  (void)p, (void)n_in;
  int rc = tsr_cuda_transpose(in[0].data, out->data, in[0].meta.shape[0], in[0].meta.shape[1],
                              tsr_dtype_size(in[0].meta.dtype), tsr_stream(gpu), err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("transpose", rc, err);
}

/* ---------- block copies (slice, assemble) ---------- */

/* A block as runs of contiguous elements: the last dimension plus the
 * trailing dimensions the block spans whole in both arrays. Offsets of
 * run r come from its index over the dimensions before j. */
struct block_dev {
  int nd, j;
  int64_t run, runs;
  int64_t block[TSR_MAX_NDIM];
  int64_t src_shape[TSR_MAX_NDIM], src_start[TSR_MAX_NDIM];
  int64_t dst_shape[TSR_MAX_NDIM], dst_start[TSR_MAX_NDIM];
};

template <class T>
__global__ void copy_block_kernel(const T *src, T *dst, block_dev b)
{
  for (int64_t r = blockIdx.y; r < b.runs; r += gridDim.y) {
    int64_t idx[TSR_MAX_NDIM] = {0}, q = r, so = 0, to = 0;
    for (int d = b.j - 1; d >= 0; d--) {
      idx[d] = q % b.block[d];
      q /= b.block[d];
    }
    for (int d = 0; d < b.nd; d++) {
      so = so * b.src_shape[d] + b.src_start[d] + idx[d];
      to = to * b.dst_shape[d] + b.dst_start[d] + idx[d];
    }
    TSR_GRID_STRIDE(i, b.run) dst[to + i] = src[so + i];
  }
}

int tsr_cuda_copy_block(size_t es, int nd, const int64_t *block, const void *src, const int64_t *src_shape,
                        const int64_t *src_start, void *dst, const int64_t *dst_shape, const int64_t *dst_start,
                        cudaStream_t s, tsr_errbuf *err)
{
  block_dev b;
  memset(&b, 0, sizeof b);
  b.nd = nd;
  b.j = nd - 1;
  while (b.j > 0 && block[b.j] == src_shape[b.j] && block[b.j] == dst_shape[b.j]) b.j--;
  b.run = 1, b.runs = 1;
  for (int d = 0; d < nd; d++) {
    if (block[d] == 0) return 0;
    if (d < b.j) b.runs *= block[d];
    else b.run *= block[d];
    b.block[d] = block[d];
    b.src_shape[d] = src_shape[d], b.src_start[d] = src_start[d];
    b.dst_shape[d] = dst_shape[d], b.dst_start[d] = dst_start[d];
  }
  /* Dimensions from j on are whole or the last: a run starts at index 0
   * of the dims after j, so the offsets above only need idx before j. */
  /* About 16K blocks in all, spread over the runs first. */
  unsigned gy = (unsigned)(b.runs > 65535 ? 65535 : b.runs), gx = tsr_grid(b.run, 256), cap = 16384 / gy;
  dim3 grid(gx < cap ? gx : cap < 1 ? 1 : cap, gy);
  if (es == 1) copy_block_kernel<uint8_t><<<grid, 256, 0, s>>>((const uint8_t *)src, (uint8_t *)dst, b);
  else if (es == 4) copy_block_kernel<uint32_t><<<grid, 256, 0, s>>>((const uint32_t *)src, (uint32_t *)dst, b);
  else copy_block_kernel<uint64_t><<<grid, 256, 0, s>>>((const uint64_t *)src, (uint64_t *)dst, b);
  return TSR_CUDA_LAUNCHED("copy_block_kernel", err);
}

TSR_CUDA_VARIANT(slice)
{
  (void)n_in;
  const tsr_meta *m = &in[0].meta;
  int64_t start[TSR_MAX_NDIM], zero[TSR_MAX_NDIM] = {0};
  int ns = 0;
  int rc = tsr_k_shape_param("slice", p, "start", start, &ns, err);
  if (rc != 0) return rc == TSR_ENOTFOUND ? TSR_EINVAL : rc;
  if (ns != m->ndim) return tsr_fail(err, TSR_ESHAPE, "slice: start needs one entry per axis of %s", tsr_k_str(m).s);
  rc = tsr_cuda_copy_block(tsr_dtype_size(m->dtype), m->ndim, out->meta.shape, in[0].data, m->shape, start,
                           out->data, out->meta.shape, zero, tsr_stream(gpu), err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("slice", rc, err);
}

TSR_CUDA_VARIANT(assemble)
{
  int64_t grid[TSR_MAX_NDIM], zero[TSR_MAX_NDIM] = {0};
  int ng = 0, nd = in[0].meta.ndim;
  int rc = tsr_k_shape_param("assemble", p, "grid", grid, &ng, err);
  if (rc != 0) return rc == TSR_ENOTFOUND ? TSR_EINVAL : rc;
  if (ng != nd) return tsr_fail(err, TSR_ESHAPE, "assemble: grid has %d dimensions, pieces %d", ng, nd);
  for (int i = 0; i < n_in && rc == 0; i++) {
    /* The piece's grid coordinates, then its start: the extents of the
     * pieces before it along each axis (infer() checked they agree). */
    int64_t c[TSR_MAX_NDIM], at[TSR_MAX_NDIM] = {0}, q = i, stride[TSR_MAX_NDIM];
    for (int d = nd - 1; d >= 0; d--) {
      c[d] = q % grid[d];
      q /= grid[d];
    }
    for (int d = nd - 1, acc = 1; d >= 0; d--) stride[d] = acc, acc *= (int)grid[d];
    for (int d = 0; d < nd; d++)
      for (int64_t g = 0; g < c[d]; g++) at[d] += in[g * stride[d]].meta.shape[d];
    rc = tsr_cuda_copy_block(tsr_dtype_size(in[i].meta.dtype), nd, in[i].meta.shape, in[i].data, in[i].meta.shape,
                             zero, out->data, out->meta.shape, at, tsr_stream(gpu), err);
  }
  return rc == 0 ? 0 : tsr_cuda_fail_op("assemble", rc, err);
}

/* ---------- view, noop ---------- */

TSR_CUDA_VARIANT(view)
{
  (void)n_in;
  int64_t offset;
  int rc = tsr_params_get_int(p, "offset", &offset, err);
  if (rc != 0) return tsr_k_param_fail("view", rc, err);
  if (out->nbytes == 0) return 0;
  const char *src = (const char *)in[0].data + (size_t)offset * tsr_dtype_size(in[0].meta.dtype);
  rc = TSR_CUDA_CHECK(cudaMemcpyAsync(out->data, src, out->nbytes, cudaMemcpyDeviceToDevice, tsr_stream(gpu)), err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("view", rc, err);
}

TSR_CUDA_VARIANT(noop)
{
  (void)p, (void)in, (void)n_in, (void)out, (void)gpu, (void)err;
  return 0;
}
