/* tessera/cluster.h — exact k nearest neighbours, scanpy's UMAP kNN graph,
 * Leiden and Louvain community detection, and k-means, over chunked arrays
 * (tessera/array.h). docs/cluster.md tells the algorithms and what each is
 * checked against.
 *
 * Which parts are task graphs of many tasks and which are one task:
 * - tsr_knn: a tile task per (row block, column block) pair — distances by
 *   GEMM and a per-row top-k — then a merge task per row block.
 * - tsr_knn_graph: a task per row block (the fuzzy union of a row block
 *   reads every row block's memberships: the transpose's entries).
 * - tsr_leiden / tsr_louvain / tsr_modularity: ONE task over all row chunks
 *   of the graph (community detection is global; the task takes every
 *   chunk as an input).
 * - tsr_kmeans: per Lloyd iteration, a task per row chunk (assignment and
 *   partial sums) and a tree of combine tasks; the loop runs here, one
 *   small graph an iteration.
 *
 * Outputs are new arrays of the context (array.h for ownership); errors as
 * in tessera.h with tsr_errmsg() naming the argument and the problem. */
#ifndef TESSERA_CLUSTER_H
#define TESSERA_CLUSTER_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tsr_metric {
  TSR_METRIC_EUCLIDEAN = 0,  /* distance sqrt(sum (x - y)^2), as sklearn */
  TSR_METRIC_COSINE = 1,     /* distance 1 - x·y / (|x| |y|); a zero row has distance 1 to all */
} tsr_metric;

/* Exact k nearest neighbours of every row of x (n x d, f32 or f64, dense
 * or any encoding; row chunks, columns rechunked to one chunk if needed)
 * among all rows of x. indices: i64 n x k, distances: f32 n x k, both with
 * x's row chunks (at most 16384 rows a chunk: larger ones are rechunked).
 * Row i lists i itself first at distance 0 (as scanpy and umap-learn count
 * n_neighbors), then the others by increasing distance, ties by smaller
 * index. Candidates are chosen by a GEMM in x's dtype and their distances
 * recomputed exactly in f64 (docs/cluster.md: rounding and ties).
 * Errors: TSR_EINVAL for k < 1 or k > n ("k = 20 > 10 rows"), an unknown
 * metric, or an integer dtype; a NaN or infinity in x fails the tile
 * tasks with TSR_EINVAL naming the row. */
int tsr_knn(tsr_array_ctx *ctx, const tsr_array *x, int k, tsr_metric metric, tsr_array **indices_p,
            tsr_array **distances_p);

/* scanpy's neighbors graph from a kNN result (indices/distances as
 * tsr_knn gives them; k counts the point itself): connectivities is
 * umap-learn's fuzzy_simplicial_set (local_connectivity 1, set_op_mix_ratio
 * 1: P + Pᵀ - P∘Pᵀ), distances_graph the kNN distances without the self
 * column (scanpy's obsp['distances']). Both CSR (TSR_ENC_CSR) n x n f32
 * with the row chunks of indices. Either out-param may be NULL. */
int tsr_knn_graph(tsr_array_ctx *ctx, const tsr_array *indices, const tsr_array *distances,
                  tsr_array **connectivities_p, tsr_array **distances_graph_p);

/* Community detection on a weighted undirected graph (CSR or dense n x n,
 * f32 or f64, symmetric; row chunks). The quality is modularity with a
 * resolution (leidenalg's RBConfigurationVertexPartition, scanpy's
 * default): Q = 1/2m Σ_ij (A_ij - γ k_i k_j / 2m) δ(c_i, c_j). */
typedef struct tsr_community_opts {
  double resolution;   /* γ; default 1 */
  uint64_t seed;       /* default 0; the result depends only on it and the graph */
  int n_iterations;    /* Leiden: passes; -1 (default) until a pass changes nothing, as scanpy */
  double theta;        /* Leiden refinement randomness; default 0.01 as leidenalg */
} tsr_community_opts;

#define TSR_COMMUNITY_OPTS_DEFAULT {1.0, 0, -1, 0.01}

/* labels: i32 (n), one chunk; communities numbered 0.. by decreasing size
 * (ties by smallest member), as scanpy. opts may be NULL. */
int tsr_leiden(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_community_opts *opts, tsr_array **labels_p);
int tsr_louvain(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_community_opts *opts, tsr_array **labels_p);
/* Computes the modularity (with resolution) of labels (integer, n) on
 * graph: leidenalg's partition.modularity for resolution 1. */
int tsr_modularity(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_array *labels, double resolution,
                   int timeout_ms, double *modularity_p);

/* Adjusted Rand index of two labelings of n items (any integers >= 0;
 * computed here, no cluster needed). NaN when n < 2. */
double tsr_adjusted_rand_index(const int32_t *a, const int32_t *b, int64_t n);

/* k-means as scikit-learn's KMeans(algorithm="lloyd"). */
typedef struct tsr_kmeans_opts {
  int k;                  /* clusters; required (>= 1, <= rows) */
  int n_init;             /* k-means++ runs, the lowest inertia kept; default 1 (ignored with init) */
  int max_iter;           /* default 300 */
  double tol;             /* default 1e-4, times the mean variance of x's columns, as sklearn */
  uint64_t seed;          /* k-means++ seed; default 0 */
  const double *init;     /* k x d initial centers (C order), or NULL for k-means++ */
  int timeout_ms;         /* per graph; default -1 (forever) */
} tsr_kmeans_opts;

#define TSR_KMEANS_OPTS_DEFAULT {0, 1, 300, 1e-4, 0, NULL, -1}

/* Runs k-means on x (n x d, float; row chunks). labels: i32 (n) with x's
 * row chunks; centers: f64 k x d; *inertia_p the sum of squared distances
 * to the assigned centers. Any out-param may be NULL. An empty cluster is
 * moved to the point farthest from its center, as sklearn does. */
int tsr_kmeans(tsr_array_ctx *ctx, const tsr_array *x, const tsr_kmeans_opts *opts, tsr_array **labels_p,
               tsr_array **centers_p, double *inertia_p);

#ifdef __cplusplus
}
#endif
#endif
