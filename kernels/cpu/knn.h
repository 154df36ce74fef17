/* kernels/cpu/knn.h — pieces shared by knn.c (the ops) and knn_fused.c
 * (the fused GEMM + candidate scan of a knn_tile). */
#ifndef TSR_KERNELS_CPU_KNN_H
#define TSR_KERNELS_CPU_KNN_H

#include <stdint.h>

/* Inserts (v, j) into a row's sorted list of K keys (ascending) and global
 * columns, after equal keys: columns come in increasing order, so equal
 * keys stay ordered by index. The caller checked v < key[K − 1]. */
static inline void tsr_k_knn_insert(float *key, int64_t *idx, int K, float v, int64_t j)
{
  int p = K - 1;
  while (p > 0 && key[p - 1] > v) {
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
  float *key;       /* [ri (+ rj), K] sorted lists, K = their length */
  int64_t *idx;     /* global indices, same shape */
  int K;
} tsr_k_knn_tile;

/* The candidate scan of one f32 tile, fused with its GEMM: for each row r
 * of a, the keys yn[c] − 2 a_r·b_c of the rows c of b (global row ≠ r's)
 * are offered to row r's list key/idx + r·K (global column col0 + c).
 * With xn, also for each row c of b the keys xn[r] − 2 a_r·b_c to its
 * list key/idx + (ri + c)·K (global index row0 + r): the tile and its
 * transpose from one product. The products are formed in registers and
 * compared there against the list's current worst key; only the rare keys
 * below it leave the registers. Returns 0, 1 when this CPU has no fused
 * kernel (the caller runs GEMM + scan), or TSR_ENOMEM for its packing
 * buffers (about (ri + rj)·d floats). */
int tsr_k_knn_fused_f32(const tsr_k_knn_tile *t);

#endif
