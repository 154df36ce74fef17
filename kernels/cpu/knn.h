/* kernels/cpu/knn.h — pieces shared by knn.c (the ops) and knn_fused.c
 * (the fused GEMM + candidate scan of a knn_tile). */
#ifndef TSR_KERNELS_CPU_KNN_H
#define TSR_KERNELS_CPU_KNN_H

#include <stdint.h>

/* Whether (v, j) ranks before the last of a sorted list (key, index). */
static inline int tsr_k_knn_before_last(const float *key, const int64_t *idx, int K, float v, int64_t j)
{
  return v < key[K - 1] || (v == key[K - 1] && (idx[K - 1] < 0 || j < idx[K - 1]));
}

/* Inserts (v, j) into a row's list of K keys and global columns sorted by
 * (key, index) (columns may arrive in any order: a knn_chain tile's list
 * starts with other blocks' candidates). The caller checked
 * tsr_k_knn_before_last. */
static inline void tsr_k_knn_insert(float *key, int64_t *idx, int K, float v, int64_t j)
{
  int p = K - 1;
  while (p > 0 && (key[p - 1] > v || (key[p - 1] == v && (idx[p - 1] < 0 || idx[p - 1] > j)))) {
    key[p] = key[p - 1];
    idx[p] = idx[p - 1];
    p--;
  }
  key[p] = v;
  idx[p] = j;
}

/* One f32 tile for the fused scan: rows a [ri, d] (global first row row0)
 * against rows b [rj, d] (global first row col0). */
typedef struct tsr_k_knn_tile {
  const float *a, *b;
  int64_t ri, rj, d, row0, col0;
  const float *yn;  /* [rj]: b's key offsets (|y|², or 1 for cosine) */
  const float *xn;  /* [ri]: a's, when both ways; NULL: rows of a only */
  float *key;       /* [ri (+ rj), K] lists, K = their length: in, the candidates */
  int64_t *idx;     /* kept so far (idx −1: none); out, the K smallest by (key, index) */
  int K;
} tsr_k_knn_tile;

/* The candidate scan of one f32 tile, fused with its GEMM: for each row r
 * of a, the keys yn[c] − 2 a_r·b_c of the rows c of b (global row ≠ r's)
 * are offered to row r's list key/idx + r·K (global column col0 + c).
 * With xn, also for each row c of b the keys xn[r] − 2 a_r·b_c to its
 * list key/idx + (ri + c)·K (global index row0 + r): the tile and its
 * transpose from one product. The products are formed in registers and
 * compared there against the list's current worst key; only the rare keys
 * below it leave the registers. Each list ends with the K smallest by
 * (key, global index) of what it held and what was offered (any order). Returns 0, 1 when this CPU has no fused
 * kernel (the caller runs GEMM + scan), or TSR_ENOMEM for its packing
 * buffers (about (ri + rj)·d floats). */
int tsr_k_knn_fused_f32(const tsr_k_knn_tile *t);

#endif
