/* examples/plugins/tile_embed.h — what the CPU (tile_embed.c) and CUDA
 * (tile_embed_cuda.cu) entries of the tile_embed plugin share: the hash of
 * the signs and the one formula that turns the integer sums into the
 * output, so both give the same bytes. */
#ifndef TSR_EXAMPLE_TILE_EMBED_H
#define TSR_EXAMPLE_TILE_EMBED_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <tessera/plugin.h>

#ifdef __CUDACC__
#define TILE_EMBED_FN static inline __host__ __device__
#else
#define TILE_EMBED_FN static inline
#endif

TILE_EMBED_FN uint64_t tile_embed_mix(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Word w of the 4096 sign bits of output k, channel c (bit set: +1). */
TILE_EMBED_FN uint64_t tile_embed_signs(uint64_t seed, int64_t k, int c, int w)
{
  return tile_embed_mix(seed ^ tile_embed_mix((uint64_t)(k * 3 + c) * 64 + (uint64_t)w));
}

/* The params: dim in 1..4096 (required), seed (default 42). */
static inline int tile_embed_params(const tsr_plugin_host *h, const tsr_plugin_params *p, int64_t *dim,
                                    int64_t *seed, char *err, size_t len)
{
  if (h->get_int(p, "dim", dim) != 0 || *dim < 1 || *dim > 4096)
    return snprintf(err, len, "param 'dim' must be an integer in 1..4096"), -1;
  if (h->get_int(p, "seed", seed) != 0) *seed = 42;
  return 0;
}

/* e = (sx / 255 - s1 / 2) / sqrt(3 npx): sx = sum of r x, s1 = sum of r.
 * s1 / 2 is exact, so a contracted multiply-add rounds as the plain one. */
TILE_EMBED_FN float tile_embed_value(int64_t sx, int64_t s1, int64_t npx)
{
  double acc = (double)sx / 255.0 - 0.5 * (double)s1;
  return (float)(acc * (1.0 / sqrt(3.0 * (double)npx)));
}

#ifdef __cplusplus
extern "C"
#endif
int tile_embed_cuda(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                    tsr_plugin_array *out, void *stream, char *err, size_t len);

#endif
