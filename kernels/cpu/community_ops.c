/* kernels/cpu/community_ops.c — the community ops over a graph held as CSR
 * row chunks (community.c has the algorithms).
 *
 * community (inputs: every row chunk of an n x n CSR graph, f32 or f64
 *   values, in row order; params method "leiden" | "louvain", resolution,
 *   seed, n_iterations, theta): labels i32 [n]. One task over the whole
 *   graph: the algorithms are global. The graph is taken as symmetric
 *   (scanpy's connectivities are); row sums are the strengths.
 * modularity (inputs: the graph's n_graph chunks, then the labels' chunks,
 *   integers; params n_graph, resolution): f64 [1]. */
#include <stdlib.h>
#include <string.h>

#include "community.h"
#include "csr.h"
#include "ops.h"

/* Stacks the CSR chunks in[0..n_in) into one cgraph. */
static int load_graph(const char *op, const tsr_buf *in, int n_in, cgraph *g, tsr_errbuf *err)
{
  memset(g, 0, sizeof *g);
  tsr_k_csr *v = malloc((size_t)n_in * sizeof *v);
  int64_t n = 0, nnz = 0;
  int rc = v ? 0 : tsr_fail(err, TSR_ENOMEM, "%s: out of memory", op);
  for (int i = 0; rc == 0 && i < n_in; i++) {
    tsr_errbuf why;
    if ((rc = tsr_k_csr_view(&in[i], true, &v[i], &why)) != 0) rc = tsr_fail(err, rc, "%s: graph chunk %d: %s", op, i, why.text);
    else if (v[i].dtype != TSR_F32 && v[i].dtype != TSR_F64)
      rc = tsr_fail(err, TSR_ESHAPE, "%s: graph chunk %d holds dtype %d, not f32 or f64 weights", op, i, (int)v[i].dtype);
    else n += v[i].rows, nnz += v[i].nnz;
  }
  for (int i = 0; rc == 0 && i < n_in; i++)
    if (v[i].cols != n) rc = tsr_fail(err, TSR_ESHAPE, "%s: the graph is %lld x %lld, not square", op, (long long)n, (long long)v[i].cols);
  if (rc == 0 && n >= INT32_MAX) rc = tsr_fail(err, TSR_ELIMIT, "%s: %lld nodes is too many", op, (long long)n);
  if (rc == 0) {
    g->n = n;
    g->ptr = malloc((size_t)(n + 1) * sizeof *g->ptr);
    g->adj = malloc((size_t)(nnz + 1) * sizeof *g->adj);
    g->w = malloc((size_t)(nnz + 1) * sizeof *g->w);
    g->k = calloc((size_t)n + 1, sizeof *g->k);
    if (!g->ptr || !g->adj || !g->w || !g->k) rc = tsr_fail(err, TSR_ENOMEM, "%s: out of memory for %lld edges", op, (long long)nnz);
  }
  int64_t row = 0, e = 0;
  for (int i = 0; rc == 0 && i < n_in; i++)
    for (int64_t r = 0; r < v[i].rows; r++, row++) {
      g->ptr[row] = e;
      for (int64_t q = v[i].indptr[r]; q < v[i].indptr[r + 1]; q++) {
        double x = v[i].dtype == TSR_F32 ? ((const float *)v[i].values)[q] : ((const double *)v[i].values)[q];
        if (!(x >= 0.0) || isinf(x)) {
          rc = tsr_fail(err, TSR_EINVAL, "%s: edge (%lld, %d) has weight %g (weights must be finite and >= 0)", op,
                        (long long)row, v[i].indices[q], x);
          break;
        }
        if (x == 0.0) continue;
        g->adj[e] = v[i].indices[q], g->w[e++] = x, g->k[row] += x, g->total += x;
      }
      if (rc != 0) break;
    }
  if (rc == 0) g->ptr[n] = e;
  if (rc == 0 && !(g->total > 0)) rc = tsr_fail(err, TSR_EINVAL, "%s: the graph has no edges", op);
  free(v);
  if (rc != 0) cgraph_free(g);
  return rc;
}

static int opt_float(const char *op, const tsr_params *p, const char *name, double dflt, double *v, tsr_errbuf *err)
{
  *v = dflt;
  if (tsr_params_find(p, name) == NULL) return 0;
  int rc = tsr_params_get_float(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

static int opt_int(const char *op, const tsr_params *p, const char *name, int64_t dflt, int64_t *v, tsr_errbuf *err)
{
  *v = dflt;
  if (tsr_params_find(p, name) == NULL) return 0;
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

static int parse_opts(const tsr_params *p, community_opts *o, int64_t *n, tsr_errbuf *err)
{
  const char *method = "leiden";
  int64_t seed = 0, iters = -1;
  int rc = 0;
  if (tsr_params_find(p, "method") != NULL && (rc = tsr_params_get_str(p, "method", &method, err)) != 0)
    return tsr_k_param_fail("community", rc, err);
  if (strcmp(method, "leiden") != 0 && strcmp(method, "louvain") != 0)
    return tsr_fail(err, TSR_EINVAL, "community: unknown method '%s' (leiden or louvain)", method);
  o->leiden = strcmp(method, "leiden") == 0;
  rc = opt_float("community", p, "resolution", 1.0, &o->resolution, err);
  if (rc == 0) rc = opt_float("community", p, "theta", 0.01, &o->theta, err);
  if (rc == 0) rc = opt_int("community", p, "seed", 0, &seed, err);
  if (rc == 0) rc = opt_int("community", p, "n_iterations", -1, &iters, err);
  if (rc == 0) rc = opt_int("community", p, "n", -1, n, err);
  if (rc != 0) return rc;
  if (!(o->resolution > 0) || !(o->theta > 0))
    return tsr_fail(err, TSR_EINVAL, "community: resolution and theta must be > 0");
  if (*n < 1) return tsr_fail(err, TSR_EINVAL, "community: missing parameter 'n' (the number of nodes)");
  o->seed = (uint64_t)seed, o->n_iterations = (int)iters;
  return 0;
}

static int comm_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  community_opts o;
  int64_t n;
  int rc = parse_opts(p, &o, &n, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n_in; i++)
    if (in[i].dtype != TSR_U8 || in[i].ndim != 1)
      return tsr_fail(err, TSR_ESHAPE, "community: input %d is %s, not a CSR chunk", i, tsr_k_str(&in[i]).s);
  tsr_k_meta_set(out, TSR_I32, 1, &n);
  return 0;
}

static int comm_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  community_opts o;
  int64_t n;
  cgraph g;
  int rc = parse_opts(p, &o, &n, err);
  if (rc == 0) rc = load_graph("community", in, n_in, &g, err);
  if (rc != 0) return rc;
  if (g.n != n) rc = tsr_fail(err, TSR_ESHAPE, "community: the graph has %lld rows, expected %lld", (long long)g.n, (long long)n);
  if (rc == 0 && community_detect(&g, &o, out->data) != 0) rc = tsr_fail(err, TSR_ENOMEM, "community: out of memory");
  cgraph_free(&g);
  return rc;
}

/* ---------- modularity ---------- */

static int mod_infer(const tsr_params *p, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err)
{
  int64_t ng = 0;
  double res;
  int rc = opt_int("modularity", p, "n_graph", 0, &ng, err);
  if (rc == 0) rc = opt_float("modularity", p, "resolution", 1.0, &res, err);
  if (rc != 0) return rc;
  if (ng < 1 || ng >= n_in) return tsr_fail(err, TSR_EINVAL, "modularity: n_graph %lld does not split %d inputs", (long long)ng, n_in);
  for (int i = (int)ng; i < n_in; i++)
    if (in[i].ndim != 1 || tsr_k_is_float(in[i].dtype))
      return tsr_fail(err, TSR_ESHAPE, "modularity: labels chunk %s is not a 1-D integer chunk", tsr_k_str(&in[i]).s);
  int64_t one = 1;
  tsr_k_meta_set(out, TSR_F64, 1, &one);
  return 0;
}

static int mod_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  int64_t ng = 0, n = 0;
  double res = 1.0;
  opt_int("modularity", p, "n_graph", 0, &ng, err);
  opt_float("modularity", p, "resolution", 1.0, &res, err);
  cgraph g;
  int rc = load_graph("modularity", in, (int)ng, &g, err);
  if (rc != 0) return rc;
  for (int i = (int)ng; i < n_in; i++) n += in[i].meta.shape[0];
  int32_t *lab = malloc((size_t)n * sizeof *lab + 4);
  int64_t *tmp = malloc((size_t)n * sizeof *tmp + 8);
  if (lab == NULL || tmp == NULL) rc = tsr_fail(err, TSR_ENOMEM, "modularity: out of memory");
  if (rc == 0 && n != g.n) rc = tsr_fail(err, TSR_ESHAPE, "modularity: %lld labels for %lld nodes", (long long)n, (long long)g.n);
  for (int i = (int)ng, at = 0; rc == 0 && i < n_in; i++) {
    tsr_k_load_i64(in[i].meta.dtype, in[i].data, (size_t)in[i].meta.shape[0], tmp + at);
    at += (int)in[i].meta.shape[0];
  }
  for (int64_t v = 0; rc == 0 && v < n; v++) {
    if (tmp[v] < 0 || tmp[v] >= n) rc = tsr_fail(err, TSR_EINVAL, "modularity: label %lld of node %lld outside 0..%lld", (long long)tmp[v], (long long)v, (long long)n - 1);
    else lab[v] = (int32_t)tmp[v];
  }
  if (rc == 0) *(double *)out->data = community_modularity(&g, lab, res);
  free(lab), free(tmp);
  cgraph_free(&g);
  return rc;
}

const tsr_op_def tsr_op_community = {"community", 1, -1, comm_infer, comm_cpu, false, NULL};
const tsr_op_def tsr_op_modularity = {"modularity", 2, -1, mod_infer, mod_cpu, false, NULL};
