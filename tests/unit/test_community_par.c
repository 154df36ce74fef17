/* tests/unit/test_community_par.c — a plain-C emulation of the CUDA
 * community variant (kernels/cuda/community.cu): the same synchronous
 * scheme, array for array and step for step (each loop below is one
 * kernel there; kernels/cpu/community_par.h has the shared decisions), run
 * on the CPU so the algorithm's quality is tested without a GPU.
 *
 * Checked: on planted-partition graphs and (when given as argv[1], a file
 * written by tests/unit/community_par_graph.py) a scanpy UMAP graph, the
 * emulation's modularity is within 1% of the CPU op's (community_detect),
 * Leiden and Louvain, and two runs with one seed give the same labels. */
#include <stdint.h>

#include "cpu/community.h"
#include "cpu/community_par.h"
#include "kit.h"

/* The fixed-point graph one level works on. */
typedef struct pgraph {
  int64_t n, nnz;
  int64_t *ptr;
  int32_t *adj;
  int64_t *w, *k;
} pgraph;

typedef struct pstate {
  int64_t n0, nnz0, total;
  double gam;
  int leiden;
  uint64_t seed, pseed;  /* the option; this pass's (cpar_pass_seed) */
  pgraph g, g2;
  int32_t *part, *next, *ref, *tgt, *agg, *map, *node, *labels, *best_labels;
  int64_t *K, *Kn, *rk, *ext, *vext;
  int32_t *rsize;
  uint64_t *keys;
  int64_t *vals;
  int64_t *order;
} pstate;

static void *cal(int64_t n, size_t es) { return calloc((size_t)n + 1, es); }

static void pgraph_alloc(pgraph *g, int64_t n, int64_t nnz)
{
  g->ptr = cal(n + 1, 8), g->adj = cal(nnz, 4), g->w = cal(nnz, 8), g->k = cal(n, 8);
}

static void pgraph_free(pgraph *g) { free(g->ptr), free(g->adj), free(g->w), free(g->k); }

/* Load: the f64 cgraph into fixed point (the GPU reads the f32 chunks). */
static void load(pstate *s, const cgraph *c, double gamma)
{
  int64_t n = c->n, nnz = c->ptr[n];
  double maxw = 0;
  for (int64_t e = 0; e < nnz; e++) maxw = c->w[e] > maxw ? c->w[e] : maxw;
  int ex = cpar_exponent(maxw, nnz);
  s->n0 = n, s->nnz0 = nnz;
  pgraph_alloc(&s->g, n, nnz), pgraph_alloc(&s->g2, n, nnz);
  s->g.n = n, s->g.nnz = nnz, s->total = 0;
  for (int64_t v = 0; v <= n; v++) s->g.ptr[v] = c->ptr[v];
  for (int64_t v = 0; v < n; v++)
    for (int64_t e = c->ptr[v]; e < c->ptr[v + 1]; e++)
      s->g.adj[e] = c->adj[e], s->g.w[e] = cpar_fixed(c->w[e], ex), s->g.k[v] += s->g.w[e];
  for (int64_t v = 0; v < n; v++) s->total += s->g.k[v];
  s->gam = gamma / (double)s->total;
  int32_t **i32[] = {&s->part, &s->next, &s->ref, &s->tgt, &s->agg, &s->map, &s->node, &s->labels, &s->best_labels, &s->rsize};
  for (size_t i = 0; i < sizeof i32 / sizeof *i32; i++) *i32[i] = cal(n, 4);
  int64_t **i64[] = {&s->K, &s->Kn, &s->rk, &s->ext, &s->vext};
  for (size_t i = 0; i < sizeof i64 / sizeof *i64; i++) *i64[i] = cal(n, 8);
  s->keys = cal(nnz, 8), s->vals = cal(nnz, 8), s->order = cal(nnz, 8);
}

static void unload(pstate *s)
{
  pgraph_free(&s->g), pgraph_free(&s->g2);
  void *p[] = {s->part, s->next, s->ref, s->tgt, s->agg, s->map, s->node, s->labels, s->best_labels, s->rsize,
               s->K, s->Kn, s->rk, s->ext, s->vext, s->keys, s->vals, s->order};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
}

/* kernel: K[c] = Σ k[v] over part[v] = c (integer atomics on the GPU). */
static void strengths(const pgraph *g, const int32_t *part, int64_t *K)
{
  for (int64_t c = 0; c < g->n; c++) K[c] = 0;
  for (int64_t v = 0; v < g->n; v++) K[part[v]] += g->k[v];
}

/* kernel: Q·2m... as a double: in/2m − γ Σ K²/(2m)² (the GPU: an integer
 * atomic for `in`, a fixed-tree sum for Σ K²). */
static double modularity(const pstate *s, const pgraph *g, const int32_t *part, const int64_t *K)
{
  int64_t in = 0;
  double sq = 0;
  for (int64_t v = 0; v < g->n; v++)
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++)
      if (part[g->adj[e]] == part[v]) in += g->w[e];
  for (int64_t c = 0; c < g->n; c++) sq += (double)K[c] * (double)K[c];
  double t = (double)s->total;
  return (double)in / t - s->gam * sq / t;
}

/* kernel (one warp per vertex on the GPU, a hash table of its
 * neighbours' communities): v's best community in sweep sw. */
static int32_t best_move(const pstate *s, const pgraph *g, const int32_t *part, const int64_t *K, int64_t v, int sw,
                         int64_t *nw, int32_t *touched)
{
  int32_t own = part[v];
  int64_t nt = 0, kv = g->k[v];
  for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) {
    int32_t u = g->adj[e], c = part[u];
    if (u == v) continue;
    if (nw[c] < 0) nw[c] = 0, touched[nt++] = c;
    nw[c] += g->w[e];
  }
  int64_t wown = nw[own] < 0 ? 0 : nw[own];
  double best_gain = cpar_gain(wown, kv, K[own] - kv, s->gam);
  int32_t best = own;
  for (int64_t i = 0; i < nt; i++) {
    int32_t c = touched[i];
    if (c == own || !cpar_allowed(sw, own, c)) continue;
    double gain = cpar_gain(nw[c], kv, K[c], s->gam);
    if (cpar_better(gain, c, best_gain, best, own)) best_gain = gain, best = c;
  }
  for (int64_t i = 0; i < nt; i++) nw[touched[i]] = -1;
  return best;
}

/* Local moving of s->part on g; returns whether any sweep was kept. */
static int local_moving(pstate *s, const pgraph *g, int64_t *nw, int32_t *touched)
{
  strengths(g, s->part, s->K);
  double q = modularity(s, g, s->part, s->K);
  int fails = 0, kept = 0;
  for (int sw = 0; sw < CPAR_MAX_SWEEPS && fails < 2; sw++) {
    strengths(g, s->part, s->K);
    for (int64_t v = 0; v < g->n; v++) s->next[v] = best_move(s, g, s->part, s->K, v, sw, nw, touched);
    strengths(g, s->next, s->Kn);
    double q2 = modularity(s, g, s->next, s->Kn);
    if (q2 > q + CPAR_TOL) {  /* accept: the GPU's one-thread control kernel */
      q = q2, fails = 0, kept = 1;
      for (int64_t v = 0; v < g->n; v++) s->part[v] = s->next[v];
    } else {
      fails++;
    }
  }
  return kept;
}

/* kernels: flags, exclusive scan, map — ids renumbered densely in order
 * of id; returns the count. */
static int64_t relabel(int32_t *ids, int64_t n, int32_t *map)
{
  for (int64_t c = 0; c < n; c++) map[c] = 0;
  for (int64_t v = 0; v < n; v++) map[ids[v]] = 1;
  int64_t nc = 0;
  for (int64_t c = 0; c < n; c++) {
    int32_t f = map[c];
    map[c] = (int32_t)nc, nc += f;
  }
  for (int64_t v = 0; v < n; v++) ids[v] = map[ids[v]];
  return nc;
}

/* Leiden's refinement of s->part (dense, strengths s->K) into s->ref. */
static void refine(pstate *s, const pgraph *g, int64_t *nw, int32_t *touched)
{
  int64_t n = g->n;
  for (int64_t v = 0; v < n; v++) {
    s->ref[v] = (int32_t)v, s->vext[v] = 0;
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++)
      if (g->adj[e] != v && s->part[g->adj[e]] == s->part[v]) s->vext[v] += g->w[e];
  }
  for (int r = 0; r < CPAR_REFINE_ROUNDS; r++) {
    /* kernel: rk, rsize, ext of the sub-communities */
    for (int64_t c = 0; c < n; c++) s->rk[c] = 0, s->rsize[c] = 0, s->ext[c] = 0;
    for (int64_t v = 0; v < n; v++) {
      int32_t c = s->ref[v];
      s->rk[c] += g->k[v], s->rsize[c]++;
      for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) {
        int32_t u = g->adj[e];
        if (s->part[u] == s->part[v] && s->ref[u] != c) s->ext[c] += g->w[e];
      }
    }
    int64_t moves = 0;
    for (int64_t v = 0; v < n; v++) {  /* kernel: warp per vertex */
      int32_t own = s->ref[v], S = s->part[v];
      int64_t kv = g->k[v], ks = s->K[S];
      s->tgt[v] = own;
      if (s->rsize[own] != 1 || !cpar_bit(s->pseed, v, r) || !cpar_well(s->vext[v], kv, ks, s->gam)) continue;
      int64_t nt = 0;
      for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) {
        int32_t u = g->adj[e], c = s->ref[u];
        if (u == v || s->part[u] != S) continue;
        if (nw[c] < 0) nw[c] = 0, touched[nt++] = c;
        nw[c] += g->w[e];
      }
      double best_gain = 0;
      int32_t best = own;
      for (int64_t i = 0; i < nt; i++) {
        int32_t c = touched[i];
        if (c == own || (s->rsize[c] == 1 && cpar_bit(s->pseed, c, r)) || !cpar_well(s->ext[c], s->rk[c], ks, s->gam)) continue;
        double gain = cpar_gain(nw[c], kv, s->rk[c], s->gam);
        if (cpar_better(gain, c, best_gain, best, own)) best_gain = gain, best = c;
      }
      for (int64_t i = 0; i < nt; i++) nw[touched[i]] = -1;
      s->tgt[v] = best, moves += best != own;
    }
    for (int64_t v = 0; v < n; v++) s->ref[v] = s->tgt[v];
    if (moves == 0) break;  /* the GPU: a device flag that makes later rounds no-ops */
  }
}

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Builds g2 = the graph of agg's nr communities (the GPU: radix sort of
 * (agg[i], agg[j]) keys, reduce by key, lower bounds for ptr). */
static void aggregate(pstate *s, const pgraph *g, int64_t nr)
{
  pgraph *o = &s->g2;
  int64_t nnz = g->ptr[g->n];
  for (int64_t v = 0; v < g->n; v++)
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) s->keys[e] = (uint64_t)s->agg[v] << 32 | (uint32_t)s->agg[g->adj[e]];
  /* key and weight together in order: sort (key, w) pairs through keys of 128 bits */
  typedef struct kv { uint64_t k; int64_t w; } kv;
  kv *p = malloc((size_t)(nnz + 1) * sizeof *p);
  for (int64_t e = 0; e < nnz; e++) p[e].k = s->keys[e], p[e].w = g->w[e];
  qsort(p, (size_t)nnz, sizeof *p, cmp_u64);
  int64_t m = 0;
  for (int64_t e = 0; e < nnz; e++) {
    if (m > 0 && s->keys[m - 1] == p[e].k) s->vals[m - 1] += p[e].w;
    else s->keys[m] = p[e].k, s->vals[m++] = p[e].w;
  }
  free(p);
  o->n = nr, o->nnz = m;
  int64_t r = 0;
  for (int64_t c = 0; c <= nr; c++) {
    while (r < m && (int64_t)(s->keys[r] >> 32) < c) r++;
    o->ptr[c] = r;
  }
  for (int64_t q = 0; q < m; q++) o->adj[q] = (int32_t)(s->keys[q] & 0xffffffffu), o->w[q] = s->vals[q];
  for (int64_t c = 0; c < nr; c++) o->k[c] = 0;
  for (int64_t v = 0; v < g->n; v++) o->k[s->agg[v]] += g->k[v];
}

/* One pass from s->labels (on the original graph): the level loop. */
static void one_pass(pstate *s, int64_t *nw, int32_t *touched)
{
  pgraph cur = s->g;
  int own_g = 0;
  for (int64_t v = 0; v < s->n0; v++) s->node[v] = (int32_t)v, s->part[v] = s->labels[v];
  for (int lev = 0; lev < CPAR_MAX_LEVELS; lev++) {
    int kept = local_moving(s, &cur, nw, touched);
    int64_t nc = relabel(s->part, cur.n, s->map);
    if (nc == cur.n || (!s->leiden && !kept)) break;
    int64_t nr = nc;
    for (int64_t v = 0; v < cur.n; v++) s->agg[v] = s->part[v];
    if (s->leiden) {
      strengths(&cur, s->part, s->K);
      refine(s, &cur, nw, touched);
      nr = relabel(s->ref, cur.n, s->map);
      if (nr < cur.n) for (int64_t v = 0; v < cur.n; v++) s->agg[v] = s->ref[v];
      else nr = nc;
    }
    aggregate(s, &cur, nr);
    for (int64_t v = 0; v < s->n0; v++) s->node[v] = s->agg[s->node[v]];
    for (int64_t v = 0; v < cur.n; v++) s->next[s->agg[v]] = s->part[v];  /* the aggregate starts from part */
    for (int64_t c = 0; c < nr; c++) s->part[c] = s->next[c];
    /* swap the graphs (the GPU: two buffers of the level-0 size) */
    pgraph t = s->g2;
    if (own_g) s->g2 = cur;
    else pgraph_alloc(&s->g2, s->n0, s->nnz0);
    cur = t, own_g = 1;
  }
  for (int64_t v = 0; v < s->n0; v++) s->labels[v] = s->part[s->node[v]];
  if (own_g) pgraph_free(&cur);
}

/* The whole variant: passes (Leiden: until Q stops rising, at most
 * max_passes), labels by decreasing size. */
static void par_detect(const cgraph *c, int leiden, double gamma, uint64_t seed, int max_passes, int32_t *out)
{
  pstate s = {0};
  s.leiden = leiden, s.seed = seed;
  load(&s, c, gamma);
  int64_t n = s.n0, *nw = malloc((size_t)(n + 1) * sizeof *nw);
  int32_t *touched = malloc((size_t)(n + 1) * sizeof *touched);
  for (int64_t v = 0; v < n; v++) nw[v] = -1, s.labels[v] = (int32_t)v;
  double best_q = -INFINITY;
  for (int p = 0; p < (leiden ? max_passes : 1); p++) {
    s.pseed = cpar_pass_seed(seed, p);
    one_pass(&s, nw, touched);
    strengths(&s.g, s.labels, s.K);
    double q = modularity(&s, &s.g, s.labels, s.K);
    if (!(q > best_q)) break;
    best_q = q;
    for (int64_t v = 0; v < n; v++) s.best_labels[v] = s.labels[v];
  }
  for (int64_t v = 0; v < n; v++) out[v] = s.best_labels[v];
  free(nw), free(touched);
  unload(&s);
}

/* ---------- graphs ---------- */

static uint64_t rs;
static uint64_t rnd(void) { return cpar_mix(rs += 0x9e3779b97f4a7c15ull); }

/* A planted partition: n nodes in nblock blocks (sizes uneven), each with
 * about deg_in neighbours inside its block and deg_out outside, weights
 * in (0, 1]; symmetric, no duplicates, like a kNN connectivities graph. */
static void planted(cgraph *g, int64_t n, int nblock, int deg_in, int deg_out, uint64_t seed, int32_t *truth)
{
  rs = seed;
  int64_t m = n * (int64_t)(deg_in + deg_out), *ei = malloc((size_t)m * 2 * sizeof *ei);
  double *ew = malloc((size_t)m * sizeof *ew);
  int64_t *start = malloc((size_t)(nblock + 1) * sizeof *start);
  start[0] = 0;
  for (int b = 0; b < nblock; b++) start[b + 1] = start[b] + (n - start[b]) / (nblock - b) * (b % 3 + 1) / 2;
  start[nblock] = n;
  for (int b = 0; b < nblock; b++)
    for (int64_t v = start[b]; v < start[b + 1]; v++) truth[v] = b;
  int64_t q = 0;
  for (int64_t v = 0; v < n; v++) {
    int b = truth[v];
    int64_t bs = start[b + 1] - start[b];
    for (int j = 0; j < deg_in + deg_out; j++) {
      int64_t u = j < deg_in ? start[b] + (int64_t)(rnd() % (uint64_t)bs) : (int64_t)(rnd() % (uint64_t)n);
      if (u == v) continue;
      ei[2 * q] = v, ei[2 * q + 1] = u, ew[q++] = (double)(rnd() >> 11) * 0x1.0p-53 * 0.9 + 0.1;
    }
  }
  /* symmetric dense-free build: count, fill both directions, merge duplicates by max */
  int64_t *deg = calloc((size_t)n + 1, sizeof *deg);
  for (int64_t e = 0; e < q; e++) deg[ei[2 * e]]++, deg[ei[2 * e + 1]]++;
  g->n = n, g->ptr = malloc((size_t)(n + 1) * sizeof *g->ptr);
  g->ptr[0] = 0;
  for (int64_t v = 0; v < n; v++) g->ptr[v + 1] = g->ptr[v] + deg[v], deg[v] = g->ptr[v];
  g->adj = malloc((size_t)(2 * q + 1) * sizeof *g->adj), g->w = malloc((size_t)(2 * q + 1) * sizeof *g->w);
  for (int64_t e = 0; e < q; e++) {
    int64_t a = ei[2 * e], b = ei[2 * e + 1];
    g->adj[deg[a]] = (int32_t)b, g->w[deg[a]++] = ew[e];
    g->adj[deg[b]] = (int32_t)a, g->w[deg[b]++] = ew[e];
  }
  g->k = calloc((size_t)n + 1, sizeof *g->k), g->total = 0;
  for (int64_t v = 0; v < n; v++)
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) g->k[v] += g->w[e], g->total += g->w[e];
  free(ei), free(ew), free(start), free(deg);
}

/* A graph file of community_par_graph.py: n, nnz, indptr, indices, f32 data. */
static int read_graph(const char *path, cgraph *g)
{
  FILE *f = fopen(path, "rb");
  int64_t h[2];
  if (f == NULL || fread(h, 8, 2, f) != 2) return -1;
  int64_t n = h[0], nnz = h[1];
  g->n = n, g->ptr = malloc((size_t)(n + 1) * 8), g->adj = malloc((size_t)nnz * 4 + 4), g->w = malloc((size_t)nnz * 8 + 8);
  float *x = malloc((size_t)nnz * 4 + 4);
  int ok = fread(g->ptr, 8, (size_t)n + 1, f) == (size_t)n + 1 && fread(g->adj, 4, (size_t)nnz, f) == (size_t)nnz &&
           fread(x, 4, (size_t)nnz, f) == (size_t)nnz;
  fclose(f);
  g->k = calloc((size_t)n + 1, sizeof *g->k), g->total = 0;
  for (int64_t v = 0; v < n; v++)
    for (int64_t e = g->ptr[v]; e < g->ptr[v + 1]; e++) g->w[e] = x[e], g->k[v] += x[e], g->total += x[e];
  free(x);
  return ok ? 0 : -1;
}

static int64_t count_labels(const int32_t *l, int64_t n)
{
  int32_t mx = -1;
  for (int64_t v = 0; v < n; v++) mx = l[v] > mx ? l[v] : mx;
  return mx + 1;
}

/* The emulation against the CPU op on g: Q within 1%, same labels twice. */
static int compare(const char *what, const cgraph *g, int leiden, uint64_t seed)
{
  int64_t n = g->n;
  int32_t *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
  community_opts o = {leiden, 1.0, seed, -1, 0.01};
  community_detect(g, &o, c);
  par_detect(g, leiden, 1.0, seed, CPAR_MAX_PASSES, a);
  par_detect(g, leiden, 1.0, seed, CPAR_MAX_PASSES, b);
  double qc = community_modularity(g, c, 1.0), qp = community_modularity(g, a, 1.0);
  fprintf(stderr, "  %s %s: cpu Q %.5f (%lld clusters), parallel Q %.5f (%lld clusters), ratio %.4f\n", what,
          leiden ? "leiden" : "louvain", qc, (long long)count_labels(c, n), qp, (long long)count_labels(a, n), qp / qc);
  int ok = qp >= 0.99 * qc && memcmp(a, b, (size_t)n * 4) == 0;
  free(a), free(b), free(c);
  return ok;
}

TEST(planted_partition_matches_cpu)
{
  int64_t n = 20000;
  cgraph g;
  int32_t *truth = malloc((size_t)n * 4);
  planted(&g, n, 12, 12, 4, 42, truth);
  for (int leiden = 1; leiden >= 0; leiden--) ASSERT_TRUE(compare("planted 20000 x 16", &g, leiden, 7));
  cgraph_free(&g);
  free(truth);
}

/* Two 5-cliques and one weak bridge: both methods split them exactly. */
TEST(two_cliques_exact)
{
  cgraph g = {0};
  g.n = 10, g.ptr = calloc(11, 8), g.adj = malloc(42 * 4), g.w = malloc(42 * 8), g.k = calloc(10, 8);
  int64_t z = 0;
  for (int r = 0; r < 10; r++) {
    for (int c = 0; c < 10; c++) {
      int same = c / 5 == r / 5 && c != r, bridge = (r == 4 && c == 5) || (r == 5 && c == 4);
      if (same || bridge) g.adj[z] = c, g.w[z] = same ? 1.0 : 0.1, g.k[r] += g.w[z++];
    }
    g.ptr[r + 1] = z, g.total += g.k[r];
  }
  int32_t l[10];
  for (int leiden = 0; leiden < 2; leiden++) {
    par_detect(&g, leiden, 1.0, 0, CPAR_MAX_PASSES, l);
    for (int v = 0; v < 10; v++) ASSERT_EQ(l[v], l[v / 5 * 5]);
    ASSERT_TRUE(l[0] != l[5]);
  }
  cgraph_free(&g);
}

static const char *graph_path;

TEST(umap_graph_matches_cpu)
{
  cgraph g;
  if (graph_path == NULL) {
    fprintf(stderr, "  no graph file given (argv[1]): planted graphs only\n");
    return;
  }
  ASSERT_OK(read_graph(graph_path, &g));
  for (int leiden = 1; leiden >= 0; leiden--) ASSERT_TRUE(compare(graph_path, &g, leiden, 0));
  cgraph_free(&g);
}

int main(int argc, char **argv)
{
  graph_path = argc > 1 ? argv[1] : NULL;
  RUN(planted_partition_matches_cpu);
  RUN(two_cliques_exact);
  RUN(umap_graph_matches_cpu);
  return kit_summary();
}
