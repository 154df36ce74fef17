/* tessera/embed.h — embeddings of a neighbour graph for looking at it:
 * UMAP, as scanpy's tl.umap computes it (umap-learn's
 * simplicial_set_embedding + optimize_layout_euclidean).
 *
 * The SGD is global (every vertex may pull any other), so tsr_umap records
 * ONE task over all the graph's row chunks (docs/umap.md): it scales to
 * what one worker's memory holds (1.3M points x 15 neighbours is ~0.5 GB)
 * and to one GPU. Ownership and threading as in tessera/array.h. */
#ifndef TESSERA_EMBED_H
#define TESSERA_EMBED_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the SGD moves the points.
 * SEQUENTIAL: umap-learn's order, edge by edge, each move seen by the next
 *   (single-threaded; CPU workers only).
 * SYNCHRONOUS: each epoch moves every vertex from the epoch's positions (a
 *   vertex's pulls and pushes summed), so vertices run in any order or all
 *   at once: the CUDA variant, one thread per vertex; a GPU worker runs it,
 *   a CPU worker too. Both give the same embedding bytes for the same
 *   inputs on a given device kind, whatever the thread count. */
typedef enum tsr_umap_scheme {
  TSR_UMAP_SYNCHRONOUS = 0,
  TSR_UMAP_SEQUENTIAL = 1,
} tsr_umap_scheme;

typedef struct tsr_umap_opts {
  double min_dist;          /* 0.5 (scanpy's default) */
  double spread;            /* 1.0 */
  double a, b;              /* 0: fitted from min_dist and spread (umap's find_ab_params) */
  int n_epochs;             /* 0: 500 for <= 10,000 points, else 200 (umap's default) */
  double learning_rate;     /* 1.0, lowered linearly to 0 over the epochs */
  double gamma;             /* repulsion strength, 1.0 */
  int negative_sample_rate; /* 5 */
  uint64_t seed;            /* 0 */
  tsr_umap_scheme scheme;   /* TSR_UMAP_SYNCHRONOUS */
  /* With an init array: scale it to max |coordinate| 10 and add N(0, 1e-4)
   * noise, as umap does for its PCA init (true), or use it as given. The
   * spectral init (init NULL) is always scaled. */
  bool scale_init;
  int spectral_max_iter;    /* 1000: subspace iterations of the spectral init */
} tsr_umap_opts;

#define TSR_UMAP_OPTS_DEFAULT {0.5, 1.0, 0.0, 0.0, 0, 1.0, 1.0, 5, 0, TSR_UMAP_SYNCHRONOUS, true, 1000}

/* The 2-D UMAP embedding (f32 n x 2, the graph's row chunks, one column
 * chunk) of graph: the n x n f32 connectivities (TSR_ENC_CSR, row chunks,
 * symmetric as scanpy's obsp['connectivities']; a dense array is made
 * sparse first). init: n x 2 f32/f64 starting positions (the first two
 * PCs, say), or NULL for umap's spectral init (eigenvectors 2 and 3 of the
 * normalized Laplacian). opts may be NULL (the defaults above). The same
 * graph, init, opts and seed give the same bytes.
 * TSR_ESHAPE: graph not square / init not n x 2; TSR_EINVAL: an option out
 * of range (n < 3, min_dist < 0, spread <= 0, ...). */
int tsr_umap(tsr_array_ctx *ctx, const tsr_array *graph, const tsr_array *init, const tsr_umap_opts *opts,
             tsr_array **embedding_p);

#ifdef __cplusplus
}
#endif
#endif
