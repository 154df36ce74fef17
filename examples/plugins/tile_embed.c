/* examples/plugins/tile_embed.c — an op plugin (tessera/plugin.h,
 * docs/plugins.md): `tile_embed`, a per-tile embedding for tsr-tiles
 * --embed, standing in for a model. It is a fixed seeded random
 * projection: e[k] = sum over pixels p and channels c of
 * (x[p,c] / 255 - 0.5) * r(seed, k, c, p mod 4096) / sqrt(3 n), with r = +1 or -1 from
 * a splitmix64 hash, so the same tile gives the same bytes anywhere.
 *
 *   in: u8 [h, w, 3]; params: dim int (1..4096), seed int (default 42)
 *   out: f32 [1, 1, dim]
 *
 * Build: cc -shared -fPIC -O2 -I/usr/local/include tile_embed.c -o libtsr_tile_embed.so -lm
 * Run:   tessera-worker --op-plugin /path/libtsr_tile_embed.so ... */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tessera/plugin.h>

static uint64_t splitmix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static int params(const tsr_plugin_host *h, const tsr_plugin_params *p, int64_t *dim, int64_t *seed, char *err,
                  size_t len)
{
  if (h->get_int(p, "dim", dim) != 0 || *dim < 1 || *dim > 4096)
    return snprintf(err, len, "param 'dim' must be an integer in 1..4096"), -1;
  if (h->get_int(p, "seed", seed) != 0) *seed = 42;
  return 0;
}

static int embed_infer(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                       tsr_plugin_array *out, char *err, size_t len)
{
  int64_t dim, seed;
  if (params(h, p, &dim, &seed, err, len) != 0) return -1;
  if (n != 1 || in[0].dtype != TSR_U8 || in[0].ndim != 3 || in[0].shape[2] != 3)
    return snprintf(err, len, "input must be a u8 [h, w, 3] tile"), -1;
  out->dtype = TSR_F32, out->ndim = 3;
  out->shape[0] = 1, out->shape[1] = 1, out->shape[2] = dim;
  return 0;
}

/* Signs for one (k, c): 4096 of them, one bit each, from 64 hashes. */
static void sign_bits(uint64_t seed, int64_t k, int c, uint64_t bits[64])
{
  for (int w = 0; w < 64; w++) bits[w] = splitmix64(seed ^ splitmix64((uint64_t)(k * 3 + c) * 64 + (uint64_t)w));
}

static int embed_cpu(const tsr_plugin_host *h, const tsr_plugin_params *p, const tsr_plugin_array *in, int n,
                     tsr_plugin_array *out, char *err, size_t len)
{
  (void)n;
  int64_t dim, seed;
  if (params(h, p, &dim, &seed, err, len) != 0) return -1;
  const uint8_t *x = in[0].data;
  size_t npx = (size_t)(in[0].shape[0] * in[0].shape[1]);
  float *e = out->data;
  double norm = 1.0 / sqrt(3.0 * (double)npx);
  for (int64_t k = 0; k < dim; k++) {
    double acc = 0;
    for (int c = 0; c < 3; c++) {
      uint64_t bits[64];
      sign_bits((uint64_t)seed, k, c, bits);
      for (size_t i = 0; i < npx; i++) {
        size_t j = i & 4095;
        double v = x[i * 3 + c] / 255.0 - 0.5;
        acc += (bits[j >> 6] >> (j & 63)) & 1 ? v : -v;
      }
    }
    e[k] = (float)(acc * norm);
  }
  return 0;
}

static const tsr_plugin_op ops[] = {{"tile_embed", 1, 1, embed_infer, embed_cpu, NULL}};

__attribute__((visibility("default"))) int tsr_plugin_abi_version(void) { return TSR_PLUGIN_ABI_VERSION; }

__attribute__((visibility("default"))) const tsr_plugin_op *tsr_plugin_ops(size_t *n_p)
{
  *n_p = sizeof ops / sizeof ops[0];
  return ops;
}
