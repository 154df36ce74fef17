/* examples/plugins/tile_embed.c — an op plugin (tessera/plugin.h,
 * docs/plugins.md): `tile_embed`, a per-tile embedding for tsr-tiles
 * --embed, standing in for a model. It is a fixed seeded random
 * projection: e[k] = sum over pixels p and channels c of
 * (x[p,c] / 255 - 0.5) * r(seed, k, c, p mod 4096) / sqrt(3 n), with r = +1 or -1 from
 * a splitmix64 hash, so the same tile gives the same bytes anywhere.
 * It is computed as (S / 255 - T / 2) / sqrt(3 n) from the integer sums
 * S = sum r x and T = sum r, which are exact in any order: the CUDA entry
 * (tile_embed_cuda.cu, built when CUDA is) sums on many threads and still
 * gives the CPU entry's bytes.
 *
 *   in: u8 [h, w, 3]; params: dim int (1..4096), seed int (default 42)
 *   out: f32 [1, 1, dim]
 *
 * Build: cc -shared -fPIC -O2 -I/usr/local/include tile_embed.c -o libtsr_tile_embed.so -lm
 *        (with CUDA: add tile_embed_cuda.cu, -DTSR_PLUGIN_CUDA, -lcudart)
 * Run:   tessera-worker --op-plugin /path/libtsr_tile_embed.so ... */
#include <stdio.h>
#include <string.h>

#include <tessera/plugin.h>

#include "tile_embed.h"

static int embed_infer(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                       tsr_plugin_array *out, char *err, size_t len)
{
  int64_t dim, seed;
  if (tile_embed_params(h, p, &dim, &seed, err, len) != 0) return -1;
  if (n != 1 || in[0].dtype != TSR_U8 || in[0].ndim != 3 || in[0].shape[2] != 3)
    return snprintf(err, len, "input must be a u8 [h, w, 3] tile"), -1;
  out->dtype = TSR_F32, out->ndim = 3;
  out->shape[0] = 1, out->shape[1] = 1, out->shape[2] = dim;
  return 0;
}

static int embed_cpu(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                     tsr_plugin_array *out, char *err, size_t len)
{
  (void)n;
  int64_t dim, seed;
  if (tile_embed_params(h, p, &dim, &seed, err, len) != 0) return -1;
  const uint8_t *x = in[0].data;
  size_t npx = (size_t)(in[0].shape[0] * in[0].shape[1]);
  float *e = out->data;
  for (int64_t k = 0; k < dim; k++) {
    int64_t sx = 0, s1 = 0;
    for (int c = 0; c < 3; c++) {
      uint64_t bits[64];
      for (int w = 0; w < 64; w++) bits[w] = tile_embed_signs((uint64_t)seed, k, c, w);
      for (size_t i = 0; i < npx; i++) {
        size_t j = i & 4095;
        int r = (bits[j >> 6] >> (j & 63)) & 1 ? 1 : -1;
        sx += r * x[i * 3 + c], s1 += r;
      }
    }
    e[k] = tile_embed_value(sx, s1, (int64_t)npx);
  }
  return 0;
}

#ifdef TSR_PLUGIN_CUDA
static const tsr_plugin_op ops[] = {{"tile_embed", 1, 1, embed_infer, embed_cpu, tile_embed_cuda}};
#else
static const tsr_plugin_op ops[] = {{"tile_embed", 1, 1, embed_infer, embed_cpu, NULL}};
#endif

__attribute__((visibility("default"))) int tsr_plugin_abi_version(void) { return TSR_PLUGIN_ABI_VERSION; }

__attribute__((visibility("default"))) const tsr_plugin_op *tsr_plugin_ops(size_t *n_p)
{
  *n_p = sizeof ops / sizeof ops[0];
  return ops;
}
