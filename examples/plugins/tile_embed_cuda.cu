/* examples/plugins/tile_embed_cuda.cu — the CUDA entry of the tile_embed
 * plugin (tessera/plugin.h: data pointers are device pointers, the work is
 * only enqueued on the worker's stream). A block per output k: its threads
 * make the 3 x 64 sign words in shared memory, sum r x and r over their
 * share of the pixels as integers, and reduce; integer sums are exact in
 * any order, so the result is the CPU entry's bytes (tile_embed.h). */
#include <cuda_runtime.h>

#include "tile_embed.h"

#define THREADS 256

__global__ void embed_kernel(const uint8_t *x, int64_t npx, uint64_t seed, float *e)
{
  __shared__ uint64_t bits[3][64];
  __shared__ long long part_x[THREADS], part_1[THREADS];
  int64_t k = blockIdx.x;
  for (int t = threadIdx.x; t < 3 * 64; t += blockDim.x) bits[t / 64][t % 64] = tile_embed_signs(seed, k, t / 64, t % 64);
  __syncthreads();
  long long sx = 0, s1 = 0;
  for (int64_t i = threadIdx.x; i < npx; i += blockDim.x) {
    int64_t j = i & 4095;
    for (int c = 0; c < 3; c++) {
      int r = (bits[c][j >> 6] >> (j & 63)) & 1 ? 1 : -1;
      sx += r * x[i * 3 + c], s1 += r;
    }
  }
  part_x[threadIdx.x] = sx, part_1[threadIdx.x] = s1;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) part_x[threadIdx.x] += part_x[threadIdx.x + w], part_1[threadIdx.x] += part_1[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) e[k] = tile_embed_value(part_x[0], part_1[0], npx);
}

extern "C" int tile_embed_cuda(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in,
                               int n, tsr_plugin_array *out, void *stream, char *err, size_t len)
{
  (void)n;
  int64_t dim, seed;
  if (tile_embed_params(h, p, &dim, &seed, err, len) != 0) return -1;
  int64_t npx = in[0].shape[0] * in[0].shape[1];
  embed_kernel<<<(unsigned)dim, THREADS, 0, (cudaStream_t)stream>>>((const uint8_t *)in[0].data, npx,
                                                                     (uint64_t)seed, (float *)out->data);
  cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) return snprintf(err, len, "launch: %s", cudaGetErrorString(rc)), -1;
  return 0;
}
