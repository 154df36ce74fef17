/* Leiden, Louvain and modularity (tessera/cluster.h): ONE `community` or
 * `modularity` task over every row chunk of the graph (kernels/cpu/
 * community_ops.c); a dense graph is made sparse first. Also the adjusted
 * Rand index, computed here. */
#include <math.h>
#include <stdlib.h>

#include "graphs.h"
#include "tessera/cluster.h"

#define TSR_API __attribute__((visibility("default")))

static int graph_csr(tsr_array_ctx *ctx, const char *what, const tsr_array *g, const tsr_array **out_p)
{
  if (g == NULL) return client_fail(TSR_EINVAL, "%s: the graph is NULL", what);
  int rc = garray_check_2d(g, what);
  if (rc != 0) return rc;
  if (g->shape[0] != g->shape[1])
    return client_fail(TSR_ESHAPE, "%s: the graph must be square, got %lld x %lld", what, (long long)g->shape[0], (long long)g->shape[1]);
  if (g->dtype != TSR_F32 && g->dtype != TSR_F64)
    return client_fail(TSR_EINVAL, "%s: the graph's weights must be f32 or f64, got %s", what, gdtype_name(g->dtype));
  tsr_array *s = NULL;
  if (g->encoding == TSR_ENC_CSR && g->nchunks[1] == 1) {
    *out_p = g;
    return 0;
  }
  if (g->nchunks[1] != 1) {
    int64_t chunks[2] = {-1, 0};
    tsr_array *r = NULL;
    if ((rc = tsr_rechunk(ctx, g, chunks, &r)) != 0) return rc;
    g = r;
  }
  rc = tsr_sparse(ctx, g, &s);
  if (rc == 0) *out_p = s;
  return rc;
}

static int detect(tsr_array_ctx *ctx, const char *method, const tsr_array *graph, const tsr_community_opts *opts,
                  tsr_array **labels_p)
{
  tsr_community_opts o = TSR_COMMUNITY_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  if (ctx == NULL || labels_p == NULL) return client_fail(TSR_EINVAL, "%s: NULL argument", method);
  if (!(o.resolution > 0) || !(o.theta > 0))
    return client_fail(TSR_EINVAL, "%s: resolution %g and theta %g must be > 0", method, o.resolution, o.theta);
  int rc = graph_csr(ctx, method, graph, &graph);
  if (rc != 0) return rc;
  int64_t n = graph->shape[0];
  tsr_args *a = NULL;
  tsr_array *out = NULL;
  rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_str(a, "method", method);
  if (rc == 0) rc = tsr_args_float(a, "resolution", o.resolution);
  if (rc == 0) rc = tsr_args_int(a, "seed", (int64_t)o.seed);
  if (rc == 0) rc = tsr_args_int(a, "n_iterations", o.n_iterations);
  if (rc == 0) rc = tsr_args_float(a, "theta", o.theta);
  if (rc == 0) rc = tsr_args_int(a, "n", n);
  if (rc == 0) rc = garray_new(ctx, method, TSR_I32, 1, &n, &n, &out);
  if (rc == 0) rc = gtask_add(ctx, out->keys[0], "community", a, (const char *const *)graph->keys, graph->nblocks);
  tsr_args_destroy(&a);
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *labels_p = out;
  return 0;
}

TSR_API int tsr_leiden(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_community_opts *opts, tsr_array **labels_p)
{
  return detect(ctx, "leiden", graph, opts, labels_p);
}

TSR_API int tsr_louvain(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_community_opts *opts, tsr_array **labels_p)
{
  return detect(ctx, "louvain", graph, opts, labels_p);
}

TSR_API int tsr_modularity(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_array *labels, double resolution,
                           int timeout_ms, double *modularity_p)
{
  if (ctx == NULL || labels == NULL || modularity_p == NULL) return client_fail(TSR_EINVAL, "modularity: NULL argument");
  int rc = graph_csr(ctx, "modularity", graph, &graph);
  if (rc == 0) rc = garray_dense(ctx, labels, &labels);
  if (rc != 0) return rc;
  if (labels->ndim != 1 || labels->shape[0] != graph->shape[0] || gdtype_is_float(labels->dtype))
    return client_fail(TSR_ESHAPE, "modularity: labels must be %lld integers, one per node", (long long)graph->shape[0]);
  size_t n_in = graph->nblocks + labels->nblocks;
  const char **in = malloc(n_in * sizeof *in);
  if (in == NULL) return client_fail(TSR_ENOMEM, "modularity: out of memory");
  for (size_t i = 0; i < graph->nblocks; i++) in[i] = graph->keys[i];
  for (size_t i = 0; i < labels->nblocks; i++) in[graph->nblocks + i] = labels->keys[i];
  tsr_args *a = NULL;
  tsr_array *q = NULL;
  int64_t one = 1;
  rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_int(a, "n_graph", (int64_t)graph->nblocks);
  if (rc == 0) rc = tsr_args_float(a, "resolution", resolution);
  if (rc == 0) rc = garray_new(ctx, "modularity", TSR_F64, 1, &one, &one, &q);
  if (rc == 0) rc = gtask_add(ctx, q->keys[0], "modularity", a, in, n_in);
  if (rc == 0) rc = tsr_compute(ctx, q, modularity_p, sizeof *modularity_p, timeout_ms);
  tsr_args_destroy(&a);
  tsr_array_free(ctx, &q);
  free(in);
  return rc;
}

/* ARI from the contingency table (Hubert & Arabie), as sklearn. */
TSR_API double tsr_adjusted_rand_index(const int32_t *a, const int32_t *b, int64_t n)
{
  if (a == NULL || b == NULL || n < 2) return NAN;
  int32_t na = 0, nb = 0;
  for (int64_t i = 0; i < n; i++) {
    if (a[i] < 0 || b[i] < 0) return NAN;
    if (a[i] >= na) na = a[i] + 1;
    if (b[i] >= nb) nb = b[i] + 1;
  }
  int64_t *t = calloc((size_t)na * (size_t)nb, sizeof *t), *ra = calloc((size_t)na, sizeof *ra), *rb = calloc((size_t)nb, sizeof *rb);
  if (t == NULL || ra == NULL || rb == NULL) {
    free(t), free(ra), free(rb);
    return NAN;
  }
  for (int64_t i = 0; i < n; i++) t[(size_t)a[i] * (size_t)nb + (size_t)b[i]]++, ra[a[i]]++, rb[b[i]]++;
  double sij = 0, sa = 0, sb = 0;
  for (size_t i = 0; i < (size_t)na * (size_t)nb; i++) sij += (double)t[i] * (double)(t[i] - 1) / 2;
  for (int32_t i = 0; i < na; i++) sa += (double)ra[i] * (double)(ra[i] - 1) / 2;
  for (int32_t i = 0; i < nb; i++) sb += (double)rb[i] * (double)(rb[i] - 1) / 2;
  free(t), free(ra), free(rb);
  double pairs = (double)n * (double)(n - 1) / 2, expected = sa * sb / pairs, maxi = (sa + sb) / 2;
  return maxi == expected ? 1.0 : (sij - expected) / (maxi - expected);
}
