/* kernels/cpu/community.c — Louvain (Blondel et al. 2008) and Leiden
 * (Traag, Waltman & van Eck 2019) for modularity with a resolution γ
 * (leidenalg's RBConfigurationVertexPartition):
 *   Q = 1/2m Σ_ij (A_ij − γ k_i k_j / 2m) δ(c_i, c_j).
 *
 * Both use the queue-based local moving of the Leiden paper: every node in
 * a random order; a node goes to the neighbouring (or an empty) community
 * with the largest gain w(v, C) − γ k_v K_C / 2m if it beats staying; when
 * it moves, its neighbours outside its new community are queued again.
 * Louvain then aggregates on the communities; Leiden first refines each
 * community (nodes still alone and well connected merge, at random with
 * probability ∝ exp(ΔH / θ), into well-connected sub-communities, H
 * unnormalized as in the paper) and aggregates on the refined partition,
 * starting the aggregate from the unrefined one. Leiden repeats whole
 * passes from its last partition until the modularity stops increasing
 * (n_iterations < 0, scanpy's default) or n_iterations times.
 *
 * Everything random comes from one splitmix64 stream of the seed, and all
 * loops run in a fixed order: the same graph and seed give the same
 * labels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "community.h"
#include "util/util.h"

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double rng_unif(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static void shuffled(int32_t *a, int64_t n, rng *r)
{
  for (int64_t i = 0; i < n; i++) a[i] = (int32_t)i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(((unsigned __int128)rng_next(r) * (uint64_t)(i + 1)) >> 64);
    int32_t t = a[i];
    a[i] = a[j], a[j] = t;
  }
}

void cgraph_free(cgraph *g)
{
  free(g->ptr), free(g->adj), free(g->w), free(g->k);
  memset(g, 0, sizeof *g);
}

/* Scratch shared by every step on graphs of at most n nodes. */
typedef struct work {
  double *nw;        /* weight from the current node to each community, 0 between uses */
  int32_t *touched;  /* communities with nw != 0 */
  double *tot;       /* community strengths */
  int64_t *size;
  int32_t *queue, *empty;
  char *queued;
  double *ext;       /* refinement: E(C, S − C) */
  int32_t *order;
} work;

static void work_free(work *w)
{
  free(w->nw), free(w->touched), free(w->tot), free(w->size), free(w->queue), free(w->empty), free(w->queued);
  free(w->ext), free(w->order);
}

static int work_alloc(work *w, int64_t n)
{
  size_t m = (size_t)n + 1;
  memset(w, 0, sizeof *w);
  w->nw = calloc(m, sizeof *w->nw);
  w->touched = malloc(m * sizeof *w->touched);
  w->tot = malloc(m * sizeof *w->tot);
  w->size = malloc(m * sizeof *w->size);
  w->queue = malloc(m * sizeof *w->queue);
  w->empty = malloc(m * sizeof *w->empty);
  w->queued = malloc(m);
  w->ext = malloc(m * sizeof *w->ext);
  w->order = malloc(m * sizeof *w->order);
  bool ok = w->nw && w->touched && w->tot && w->size && w->queue && w->empty && w->queued && w->ext && w->order;
  return ok ? 0 : TSR_ENOMEM;
}

/* nw[c] = Σ w(v, u) over v's neighbours u ≠ v in community comm[u]
 * (for which keep(u) holds); returns how many communities were touched. */
static int64_t gather(const cgraph *g, int64_t v, const int32_t *comm, const int32_t *only, int32_t only_value, work *w)
{
  int64_t nt = 0;
  for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) {
    int32_t u = g->adj[e];
    if (u == v || (only != NULL && only[u] != only_value)) continue;
    int32_t c = comm[u];
    if (w->nw[c] == 0.0) w->touched[nt++] = c;
    w->nw[c] += g->w[e];
    if (w->nw[c] == 0.0) w->nw[c] = 1e-300;  /* keep a touched entry distinguishable */
  }
  return nt;
}

static void clear(work *w, int64_t nt)
{
  for (int64_t i = 0; i < nt; i++) w->nw[w->touched[i]] = 0.0;
}

/* The best community for v (removed from its own, whose strength
 * w->tot no longer counts k_v): the largest gain, staying on ties. */
static int32_t best_comm(const cgraph *g, int64_t v, int32_t cv, int64_t nt, double gam, const work *w)
{
  double kv = g->k[v], best_gain = w->nw[cv] - gam * kv * w->tot[cv];
  int32_t best = cv;
  for (int64_t i = 0; i < nt; i++) {
    int32_t c = w->touched[i];
    double gain = w->nw[c] - gam * kv * w->tot[c];
    if (gain > best_gain) best_gain = gain, best = c;
  }
  if (best_gain < 0.0 && w->size[cv] > 0) best = -1;  /* an empty community (gain 0) beats all */
  return best;
}

/* Queue-based local moving of comm (ids in 0..n) on g; returns the moves. */
static int64_t local_move(const cgraph *g, int32_t *comm, double gamma, rng *r, work *w)
{
  int64_t n = g->n, n_empty = 0, moves = 0, head = 0, count = n;
  double gam = gamma / g->total;
  for (int64_t c = 0; c < n; c++) w->tot[c] = 0.0, w->size[c] = 0;
  for (int64_t v = 0; v < n; v++) w->tot[comm[v]] += g->k[v], w->size[comm[v]]++;
  for (int64_t c = n - 1; c >= 0; c--)
    if (w->size[c] == 0) w->empty[n_empty++] = (int32_t)c;
  shuffled(w->queue, n, r);
  for (int64_t v = 0; v < n; v++) w->queued[v] = 1;
  while (count > 0) {
    int32_t v = w->queue[head];
    head = head + 1 == n ? 0 : head + 1, count--;
    w->queued[v] = 0;
    int32_t cv = comm[v];
    int64_t nt = gather(g, v, comm, NULL, 0, w);
    w->tot[cv] -= g->k[v], w->size[cv]--;
    int32_t best = best_comm(g, v, cv, nt, gam, w);
    if (best < 0) best = w->empty[--n_empty];
    w->tot[best] += g->k[v], w->size[best]++;
    clear(w, nt);
    if (best == cv) continue;
    if (w->size[cv] == 0) w->empty[n_empty++] = cv;
    comm[v] = best, moves++;
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) {
      int32_t u = g->adj[e];
      if (w->queued[u] || comm[u] == best) continue;
      w->queued[u] = 1, count++;
      w->queue[(head + count - 1) % n] = u;
    }
  }
  return moves;
}

/* Renumbers comm to 0..nc−1 in order of first appearance; returns nc. */
static int64_t relabel(int32_t *comm, int64_t n, int32_t *map)
{
  for (int64_t i = 0; i < n; i++) map[i] = -1;
  int64_t nc = 0;
  for (int64_t i = 0; i < n; i++) {
    if (map[comm[i]] < 0) map[comm[i]] = (int32_t)nc++;
    comm[i] = map[comm[i]];
  }
  return nc;
}

/* The graph of part's nc communities: w(C, D) = Σ w(i, j), i ∈ C, j ∈ D. */
static int aggregate(const cgraph *g, const int32_t *part, int64_t nc, work *w, cgraph *out)
{
  int64_t n = g->n, nnz = g->ptr[n];
  memset(out, 0, sizeof *out);
  out->n = nc, out->total = g->total;
  out->ptr = malloc((size_t)(nc + 1) * sizeof *out->ptr);
  out->adj = malloc((size_t)(nnz + 1) * sizeof *out->adj);
  out->w = malloc((size_t)(nnz + 1) * sizeof *out->w);
  out->k = calloc((size_t)nc + 1, sizeof *out->k);
  int64_t *start = calloc((size_t)nc + 2, sizeof *start);
  int32_t *members = malloc((size_t)(n + 1) * sizeof *members);
  if (!out->ptr || !out->adj || !out->w || !out->k || !start || !members) {
    free(start), free(members);
    return TSR_ENOMEM;
  }
  for (int64_t i = 0; i < n; i++) start[part[i] + 2]++;
  for (int64_t c = 0; c < nc; c++) start[c + 2] += start[c + 1];
  for (int64_t i = 0; i < n; i++) members[start[part[i] + 1]++] = (int32_t)i;
  int64_t e_out = 0;
  for (int64_t c = 0; c < nc; c++) {
    out->ptr[c] = e_out;
    int64_t nt = 0;
    for (int64_t q = start[c]; q < start[c + 1]; q++) {
      int32_t i = members[q];
      out->k[c] += g->k[i];
      for (int64_t e = g->ptr[i]; e < g->ptr[i + 1]; e++) {
        int32_t d = part[g->adj[e]];
        if (w->nw[d] == 0.0) w->touched[nt++] = d;
        w->nw[d] += g->w[e];
        if (w->nw[d] == 0.0) w->nw[d] = 1e-300;
      }
    }
    for (int64_t t = 0; t < nt; t++) out->adj[e_out] = w->touched[t], out->w[e_out++] = w->nw[w->touched[t]];
    clear(w, nt);
  }
  out->ptr[nc] = e_out;
  free(start), free(members);
  return 0;
}

/* Leiden's refinement of part on g into ref (ids in 0..n). */
static void refine(const cgraph *g, const int32_t *part, double gamma, double theta, rng *r, work *w, int32_t *ref)
{
  int64_t n = g->n;
  double gam = gamma / g->total;
  double *ks = w->tot;           /* strength of part's communities */
  double *rk = malloc((size_t)(n + 1) * sizeof *rk);  /* strength of refined communities */
  double *prob = malloc((size_t)(n + 1) * sizeof *prob);
  if (rk == NULL || prob == NULL) {  /* no memory: the refinement stays singletons (still a valid partition) */
    for (int64_t v = 0; v < n; v++) ref[v] = (int32_t)v;
    free(rk), free(prob);
    return;
  }
  for (int64_t c = 0; c < n; c++) ks[c] = 0.0;
  for (int64_t v = 0; v < n; v++) ks[part[v]] += g->k[v];
  for (int64_t v = 0; v < n; v++) {
    ref[v] = (int32_t)v, rk[v] = g->k[v], w->size[v] = 1, w->ext[v] = 0.0;
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++)
      if (g->adj[e] != v && part[g->adj[e]] == part[v]) w->ext[v] += g->w[e];
  }
  shuffled(w->order, n, r);
  for (int64_t q = 0; q < n; q++) {
    int32_t v = w->order[q], own = ref[v];
    double kv = g->k[v], kS = ks[part[v]];
    if (w->size[own] != 1 || w->ext[v] < gam * kv * (kS - kv)) continue;
    int64_t nt = gather(g, v, ref, part, part[v], w);
    double top = 0.0, sum = 0.0;
    for (int64_t i = 0; i < nt; i++) {
      int32_t c = w->touched[i];
      double dh = w->nw[c] - gamma * kv * rk[c] / g->total;
      bool ok = c != own && dh >= 0.0 && w->ext[c] >= gam * rk[c] * (kS - rk[c]);
      prob[i] = ok ? dh : -1.0;
      if (ok && dh > top) top = dh;
    }
    sum = exp((0.0 - top) / theta);  /* staying alone: ΔH = 0 */
    for (int64_t i = 0; i < nt; i++) sum += prob[i] >= 0.0 ? exp((prob[i] - top) / theta) : 0.0;
    double x = rng_unif(r) * sum, acc = exp((0.0 - top) / theta);
    int32_t to = own;
    for (int64_t i = 0; i < nt && acc <= x; i++)
      if (prob[i] >= 0.0) acc += exp((prob[i] - top) / theta), to = w->touched[i];
    if (to != own) {
      w->ext[to] += w->ext[v] - 2.0 * w->nw[to];
      rk[to] += kv, rk[own] = 0.0;
      w->size[to]++, w->size[own] = 0;
      ref[v] = to;
    }
    clear(w, nt);
  }
  free(rk), free(prob);
}

double community_modularity(const cgraph *g, const int32_t *labels, double resolution)
{
  int64_t n = g->n;
  double *kc = calloc((size_t)n + 1, sizeof *kc), in = 0.0, sq = 0.0;
  if (kc == NULL) return NAN;
  for (int64_t v = 0; v < n; v++) {
    if (labels[v] < 0 || labels[v] >= n) {
      free(kc);
      return NAN;
    }
    kc[labels[v]] += g->k[v];
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++)
      if (labels[g->adj[e]] == labels[v]) in += g->w[e];
  }
  for (int64_t c = 0; c < n; c++) sq += kc[c] * kc[c];
  free(kc);
  return in / g->total - resolution * sq / (g->total * g->total);
}

/* Numbers communities by decreasing size, ties by smallest member. */
static int by_size(int32_t *labels, int64_t n)
{
  int64_t *size = calloc((size_t)n + 1, sizeof *size);
  int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids), *map = malloc(((size_t)n + 1) * sizeof *map);
  if (!size || !ids || !map) {
    free(size), free(ids), free(map);
    return TSR_ENOMEM;
  }
  int64_t nc = relabel(labels, n, map);  /* ids by first appearance = by smallest member */
  for (int64_t v = 0; v < n; v++) size[labels[v]]++;
  for (int64_t c = 0; c < nc; c++) ids[c] = (int32_t)c;
  /* insertion by size (stable: equal sizes keep first-appearance order); nc is small in practice */
  for (int64_t i = 1; i < nc; i++) {
    int32_t c = ids[i];
    int64_t p = i;
    while (p > 0 && size[ids[p - 1]] < size[c]) ids[p] = ids[p - 1], p--;
    ids[p] = c;
  }
  for (int64_t i = 0; i < nc; i++) map[ids[i]] = (int32_t)i;
  for (int64_t v = 0; v < n; v++) labels[v] = map[labels[v]];
  free(size), free(ids), free(map);
  return 0;
}

/* One pass of Louvain or Leiden from labels (on g's nodes), in place. */
static int one_pass(const cgraph *g0, const community_opts *o, rng *r, work *w, int32_t *labels)
{
  int64_t n0 = g0->n;
  int32_t *map = malloc((size_t)(n0 + 1) * sizeof *map), *node = malloc((size_t)(n0 + 1) * sizeof *node);
  int32_t *part = malloc((size_t)(n0 + 1) * sizeof *part), *ref = malloc((size_t)(n0 + 1) * sizeof *ref);
  int rc = map && node && part && ref ? 0 : TSR_ENOMEM;
  cgraph cur = *g0, next;
  bool own = false;  /* cur is an aggregate we allocated */
  for (int64_t v = 0; rc == 0 && v < n0; v++) node[v] = (int32_t)v, part[v] = labels[v];
  while (rc == 0) {
    int64_t moves = local_move(&cur, part, o->resolution, r, w);
    int64_t nc = relabel(part, cur.n, map);
    if (nc == cur.n || (!o->leiden && moves == 0)) break;
    int64_t nr = nc;
    const int32_t *agg_on = part;
    if (o->leiden) {
      refine(&cur, part, o->resolution, o->theta, r, w, ref);
      nr = relabel(ref, cur.n, map);
      if (nr < cur.n) agg_on = ref;  /* else the refinement merged nothing: aggregate on part */
      else nr = nc;
    }
    if ((rc = aggregate(&cur, agg_on, nr, w, &next)) != 0) break;
    for (int64_t v = 0; v < n0; v++) node[v] = agg_on[node[v]];
    for (int64_t v = 0; v < cur.n; v++) map[agg_on[v]] = part[v];  /* the aggregate starts from part */
    memcpy(part, map, (size_t)nr * sizeof *part);
    if (own) cgraph_free(&cur);
    cur = next, own = true;
  }
  for (int64_t v = 0; rc == 0 && v < n0; v++) labels[v] = part[node[v]];
  if (own) cgraph_free(&cur);
  free(map), free(node), free(part), free(ref);
  return rc;
}

int community_detect(const cgraph *g, const community_opts *o, int32_t *labels)
{
  work w;
  rng r = {o->seed ^ 0x6c656964656e2121ull};
  int rc = work_alloc(&w, g->n);
  int32_t *prev = malloc(((size_t)g->n + 1) * sizeof *prev);
  if (prev == NULL) rc = TSR_ENOMEM;
  for (int64_t v = 0; v < g->n; v++) labels[v] = (int32_t)v;
  int passes = o->leiden ? o->n_iterations : 1;
  double q = -INFINITY;
  for (int it = 0; rc == 0 && (passes < 0 || it < passes); it++) {
    memcpy(prev, labels, (size_t)g->n * sizeof *prev);
    rc = one_pass(g, o, &r, &w, labels);
    double q2 = rc == 0 ? community_modularity(g, labels, o->resolution) : q;
    if (passes < 0 && !(q2 > q)) {  /* no improvement: keep the better of the two */
      if (q2 < q) memcpy(labels, prev, (size_t)g->n * sizeof *prev);
      break;
    }
    q = q2;
  }
  if (rc == 0) rc = by_size(labels, g->n);
  work_free(&w);
  free(prev);
  return rc;
}
