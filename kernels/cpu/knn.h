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

/* The candidate scan of one f32 tile, fused with its GEMM: for each row r
 * of a [ri, d], the keys yn[c] − 2 a_r·b_c of the rows c of b [rj, d]
 * (c ≠ r + diag) are offered to row r's list key/idx + r·K (ascending, K
 * long, global column col0 + c). The products are formed in registers and
 * compared there against the row's current worst key; only the rare keys
 * below it leave the registers. Returns 0, 1 when this CPU has no fused
 * kernel (the caller runs GEMM + scan), or TSR_ENOMEM for its packing
 * buffers (about (ri + rj)·d floats). */
int tsr_k_knn_fused_f32(const float *a, int64_t ri, const float *b, int64_t rj, int64_t d, const float *yn,
                        int64_t diag, int64_t col0, float *key, int64_t *idx, int K);

#endif
