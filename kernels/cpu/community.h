/* kernels/cpu/community.h — Leiden and Louvain on an in-memory weighted
 * undirected graph (community.c), used by the community ops
 * (community_ops.c). Arrays only, no hash maps: a community's id is an
 * int in 0..n, per-community scratch is indexed by it. */
#ifndef TSR_KERNELS_CPU_COMMUNITY_H
#define TSR_KERNELS_CPU_COMMUNITY_H

#include <stdint.h>

/* A symmetric weighted graph in CSR: row i's neighbours adj[ptr[i]..ptr[i+1])
 * with weights w; a self-loop (i, i) holds the weight inside an aggregated
 * node. k[i] = Σ_j w(i, j) (the strength), total = Σ_i k[i] (= 2m). */
typedef struct cgraph {
  int64_t n;
  int64_t *ptr;
  int32_t *adj;
  double *w;
  double *k;
  double total;
} cgraph;

typedef struct community_opts {
  int leiden;          /* 1 Leiden, 0 Louvain */
  double resolution;
  uint64_t seed;
  int n_iterations;    /* Leiden: < 0 until no improvement */
  double theta;
} community_opts;

/* Computes labels[0..g->n) (renumbered by decreasing size, ties by the
 * smallest member). 0 or TSR_ENOMEM. g is not changed. */
int community_detect(const cgraph *g, const community_opts *o, int32_t *labels);
/* Modularity with resolution of labels (any ints in 0..n) on g. */
double community_modularity(const cgraph *g, const int32_t *labels, double resolution);
void cgraph_free(cgraph *g);

#endif
