/* tsr_umap (tessera/embed.h): three tasks over the whole graph, the ops of
 * kernels/cpu/umap.h:
 *   umap_spectral(graph chunks)                 -> init (when none is given)
 *   umap_prepare(graph chunks, init chunks)     -> the plan: kept edges,
 *                                                  epochs_per_sample, start
 *   umap_layout(plan)                           -> the n x 2 embedding
 * then the embedding cut into the graph's row chunks. The epochs' count,
 * a and b are resolved here and in the op so every worker runs the same
 * numbers. */
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/embed.h"

#define TSR_API __attribute__((visibility("default")))

static int check_opts(const tsr_umap_opts *o, int64_t n)
{
  if (n < 3) return client_fail(TSR_EINVAL, "umap: the graph has %lld vertices, at least 3 are needed", (long long)n);
  if (!(o->spread > 0) || !(o->min_dist >= 0) || !(o->a >= 0) || !(o->b >= 0) || !(o->learning_rate > 0) || !(o->gamma >= 0))
    return client_fail(TSR_EINVAL, "umap: spread %g must be > 0, min_dist %g, a %g, b %g, gamma %g >= 0, learning_rate %g > 0",
                       o->spread, o->min_dist, o->a, o->b, o->gamma, o->learning_rate);
  if (o->n_epochs < 0 || o->n_epochs > 100000 || o->negative_sample_rate < 0 || o->negative_sample_rate > 100 ||
      o->spectral_max_iter < 1)
    return client_fail(TSR_EINVAL, "umap: n_epochs %d (0..100000), negative_sample_rate %d (0..100) or spectral_max_iter %d (>= 1) out of range",
                       o->n_epochs, o->negative_sample_rate, o->spectral_max_iter);
  if (o->scheme != TSR_UMAP_SYNCHRONOUS && o->scheme != TSR_UMAP_SEQUENTIAL)
    return client_fail(TSR_EINVAL, "umap: unknown scheme %d", (int)o->scheme);
  return 0;
}

/* The graph as f32 CSR row chunks spanning all columns. */
static int sparse_graph(tsr_array_ctx *ctx, const tsr_array *g, const tsr_array **out_p)
{
  int rc = garray_check_2d(g, "umap");
  if (rc != 0) return rc;
  if (g->shape[0] != g->shape[1])
    return client_fail(TSR_ESHAPE, "umap: the graph must be square (n x n), got %lld x %lld", (long long)g->shape[0],
                       (long long)g->shape[1]);
  if (g->encoding == TSR_ENC_CSR && g->dtype == TSR_F32 && g->nchunks[1] == 1) {
    *out_p = g;
    return 0;
  }
  if (g->encoding == TSR_ENC_CSR && g->nchunks[1] == 1)
    return client_fail(TSR_ESHAPE, "umap: a sparse graph must hold f32 values, got %s", gdtype_name(g->dtype));
  tsr_array *d = NULL, *one = NULL, *f = NULL, *s = NULL;
  int64_t want[2] = {-1, 0};
  rc = tsr_decompress(ctx, g, &d);
  if (rc == 0) rc = tsr_rechunk(ctx, d, want, &one);
  if (rc == 0) rc = tsr_astype(ctx, one, TSR_F32, &f);
  if (rc == 0) rc = tsr_sparse(ctx, f, &s);
  if (rc == 0) *out_p = s;
  return rc;
}

/* init as dense float row chunks of one column chunk. */
static int dense_init(tsr_array_ctx *ctx, const tsr_array *init, int64_t n, const tsr_array **out_p)
{
  int rc = garray_check_2d(init, "umap init");
  if (rc != 0) return rc;
  if (init->shape[0] != n || init->shape[1] != 2)
    return client_fail(TSR_ESHAPE, "umap: init must be %lld x 2, got %lld x %lld", (long long)n, (long long)init->shape[0],
                       (long long)init->shape[1]);
  tsr_array *one = NULL, *f = NULL;
  int64_t want[2] = {-1, 0};
  rc = garray_dense(ctx, init, &init);
  if (rc == 0 && init->nchunks[1] != 1) rc = tsr_rechunk(ctx, init, want, &one), init = one;
  if (rc == 0 && init->dtype != TSR_F32 && init->dtype != TSR_F64) rc = tsr_astype(ctx, init, TSR_F32, &f), init = f;
  if (rc == 0) *out_p = init;
  return rc;
}

static int add_spectral(tsr_array_ctx *ctx, const tsr_array *g, const tsr_umap_opts *o, char *key, size_t cap)
{
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_int(args, "n", g->shape[0]);
  if (rc == 0) rc = tsr_args_int(args, "seed", (int64_t)o->seed);
  if (rc == 0) rc = tsr_args_int(args, "max_iter", o->spectral_max_iter);
  if (rc == 0) rc = gtask_add_tmp(ctx, "umap-spectral", "umap_spectral", args, (const char *const *)g->keys, g->nblocks, key, cap);
  tsr_args_destroy(&args);
  return rc;
}

static int add_prepare(tsr_array_ctx *ctx, const tsr_array *g, char **init_keys, size_t n_init, bool scale, int epochs,
                       uint64_t seed, char *key, size_t cap)
{
  size_t n_in = g->nblocks + n_init;
  const char **in = malloc(n_in * sizeof *in);
  tsr_args *args = NULL;
  int rc = in == NULL ? client_fail(TSR_ENOMEM, "umap: out of memory") : tsr_args_new(&args);
  for (size_t i = 0; rc == 0 && i < n_in; i++) in[i] = i < g->nblocks ? g->keys[i] : init_keys[i - g->nblocks];
  if (rc == 0) rc = tsr_args_int(args, "n", g->shape[0]);
  if (rc == 0) rc = tsr_args_int(args, "n_epochs", epochs);
  if (rc == 0) rc = tsr_args_int(args, "graph_chunks", (int64_t)g->nblocks);
  if (rc == 0) rc = tsr_args_int(args, "seed", (int64_t)seed);
  if (rc == 0) rc = tsr_args_bool(args, "scale_init", scale);
  if (rc == 0) rc = gtask_add_tmp(ctx, "umap-plan", "umap_prepare", args, in, n_in, key, cap);
  tsr_args_destroy(&args);
  free(in);
  return rc;
}

static int add_layout(tsr_array_ctx *ctx, int64_t n, const tsr_umap_opts *o, int epochs, const char *plan, const char *key)
{
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_int(args, "n", n);
  if (rc == 0) rc = tsr_args_int(args, "n_epochs", epochs);
  if (rc == 0) rc = tsr_args_int(args, "seed", (int64_t)o->seed);
  if (rc == 0) rc = tsr_args_float(args, "min_dist", o->min_dist);
  if (rc == 0) rc = tsr_args_float(args, "spread", o->spread);
  if (rc == 0 && o->a > 0 && o->b > 0) rc = tsr_args_float(args, "a", o->a);
  if (rc == 0 && o->a > 0 && o->b > 0) rc = tsr_args_float(args, "b", o->b);
  if (rc == 0) rc = tsr_args_float(args, "gamma", o->gamma);
  if (rc == 0) rc = tsr_args_float(args, "learning_rate", o->learning_rate);
  if (rc == 0) rc = tsr_args_int(args, "negative_sample_rate", o->negative_sample_rate);
  if (rc == 0) rc = tsr_args_str(args, "scheme", o->scheme == TSR_UMAP_SEQUENTIAL ? "sequential" : "synchronous");
  if (rc == 0) rc = gtask_add(ctx, key, "umap_layout", args, &plan, 1);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_umap(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_array *init, const tsr_umap_opts *opts,
                     tsr_array **embedding_p)
{
  tsr_umap_opts o = TSR_UMAP_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  if (ctx == NULL || graph == NULL || embedding_p == NULL) return client_fail(TSR_EINVAL, "umap: NULL argument");
  const tsr_array *g = NULL, *x = NULL;
  int rc = sparse_graph(ctx, graph, &g);
  if (rc == 0) rc = check_opts(&o, g->shape[0]);
  if (rc == 0 && init != NULL) rc = dense_init(ctx, init, g->shape[0], &x);
  if (rc != 0) return rc;
  int64_t n = g->shape[0];
  int epochs = o.n_epochs > 0 ? o.n_epochs : (n <= 10000 ? 500 : 200);
  char spec[256], plan[256];
  char *spec_key = spec;
  if (x == NULL) rc = add_spectral(ctx, g, &o, spec, sizeof spec);
  if (rc == 0)
    rc = x == NULL ? add_prepare(ctx, g, &spec_key, 1, true, epochs, o.seed, plan, sizeof plan)
                   : add_prepare(ctx, g, x->keys, x->nblocks, o.scale_init, epochs, o.seed, plan, sizeof plan);
  tsr_array *whole = NULL, *out = NULL;
  int64_t shape[2] = {n, 2}, chunks[2] = {g->chunk[0], 2};
  if (rc == 0) rc = garray_new(ctx, "umap", TSR_F32, 2, shape, shape, &whole);
  if (rc == 0) rc = add_layout(ctx, n, &o, epochs, plan, whole->keys[0]);
  if (rc == 0) rc = g->nchunks[0] == 1 ? (out = whole, 0) : tsr_rechunk(ctx, whole, chunks, &out);
  if (rc != 0) return rc;
  *embedding_p = out;
  return 0;
}
