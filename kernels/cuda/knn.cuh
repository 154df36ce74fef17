/* kernels/cuda/knn.cuh — what knn.cu (the cuBLAS tile path, the re-rank,
 * knn_merge) and knn_tc.cu (the TF32 tensor-core tile path) share: the
 * lane-spread sorted list, the tile's parsed params, the CPU's exact
 * distance, and the two entry points between the files. Contracts of the
 * ops: kernels/cpu/knn.c and docs/cluster.md. */
#ifndef TSR_KERNELS_CUDA_KNN_CUH
#define TSR_KERNELS_CUDA_KNN_CUH

#include <math.h>

#include "common.cuh"

#define KNN_MARGIN 8    /* as kernels/cpu/knn.c */
#define MAX_LIST 64     /* two slots a lane */
#define WARPS 8         /* warps a block of the warp-per-row kernels */

static const unsigned FULL = 0xffffffffu;

/* ---------- the lane-spread sorted list ---------- */

/* n (<= 32·J) entries sorted ascending, slot s = lane + 32j in key[j] of
 * that lane; slots >= n hold (+inf, -1). LEX: entries ordered by (key,
 * idx) and a new entry goes before equal ones with a larger index; else
 * by key only and a new entry goes after equal keys (the CPU scan's
 * rule: columns arrive in increasing order). All lanes call every method
 * (warp-uniform arguments). */
template <class K, class I, int J, bool LEX>
struct wlist {
  K key[J];
  I idx[J];

  __device__ void init()
  {
#pragma unroll
    for (int j = 0; j < J; j++) key[j] = (K)INFINITY, idx[j] = (I)-1;
  }
  __device__ void load(const K *sk, const I *si, int n, int lane)
  {
#pragma unroll
    for (int j = 0; j < J; j++) {
      int s = lane + 32 * j;
      key[j] = s < n ? sk[s] : (K)INFINITY;
      idx[j] = s < n ? si[s] : (I)-1;
    }
  }
  __device__ void store(K *sk, I *si, int n, int lane) const
  {
#pragma unroll
    for (int j = 0; j < J; j++) {
      int s = lane + 32 * j;
      if (s < n) sk[s] = key[j], si[s] = idx[j];
    }
  }
  /* The entry at slot n - 1 (the one a new entry must beat), to all lanes. */
  __device__ void tail(int n, K *tk, I *ti) const
  {
    int jt = (n - 1) >> 5;
    K k = key[0];
    I i = idx[0];
#pragma unroll
    for (int j = 1; j < J; j++)
      if (j == jt) k = key[j], i = idx[j];
    *tk = __shfl_sync(FULL, k, (n - 1) & 31);
    *ti = __shfl_sync(FULL, i, (n - 1) & 31);
  }
  /* Whether (v, vi) enters a list whose last entry is (tk, ti). */
  static __device__ bool beats(K v, I vi, K tk, I ti) { return v < tk || (LEX && v == tk && vi < ti); }
  /* Offers each lane's (v, vi) where ok, in lane order: those that beat
   * the tail (tk, ti; kept current) enter. */
  __device__ void offer(K v, I vi, bool ok, int n, K *tk, I *ti, int lane)
  {
    unsigned hits = __ballot_sync(FULL, ok && beats(v, vi, *tk, *ti));
    while (hits != 0) {
      int b = __ffs(hits) - 1;
      hits &= hits - 1;
      K vb = __shfl_sync(FULL, v, b);
      I ib = __shfl_sync(FULL, vi, b);
      if (!beats(vb, ib, *tk, *ti)) continue;
      insert(vb, ib, n, lane);
      tail(n, tk, ti);
    }
  }
  /* Inserts (v, vi), which beats the tail: the entries before it keep
   * their slots, the later ones move up one, the last falls off. */
  __device__ void insert(K v, I vi, int n, int lane)
  {
    int p = 0;
#pragma unroll
    for (int j = 0; j < J; j++) {
      int s = lane + 32 * j;
      bool before = LEX ? key[j] < v || (key[j] == v && idx[j] < vi) : key[j] <= v;
      p += __popc(__ballot_sync(FULL, s < n && before));
    }
    K upk[J], wrk[J];
    I upi[J], wri[J];
#pragma unroll
    for (int j = 0; j < J; j++) {
      upk[j] = __shfl_up_sync(FULL, key[j], 1), upi[j] = __shfl_up_sync(FULL, idx[j], 1);
      wrk[j] = __shfl_sync(FULL, key[j], 31), wri[j] = __shfl_sync(FULL, idx[j], 31);
    }
#pragma unroll
    for (int j = 0; j < J; j++) {
      int s = lane + 32 * j;
      if (s >= n || s < p) continue;
      if (s == p) {
        key[j] = v, idx[j] = vi;
      } else if (lane > 0) {
        key[j] = upk[j], idx[j] = upi[j];
      } else if (j > 0) {  /* slot 32j - 1 is lane 31's previous slot */
        key[j] = wrk[j - 1], idx[j] = wri[j - 1];
      }
    }
  }
};

struct tile_task {
  int64_t k, metric, row0, col0;
  int64_t ri, rj, d, m;
  int K;
  bool cosine;
  tsr_dtype dtype;
};

/* The CPU's exact_dist: f64, squared euclidean or 1 − cos. */
template <class T>
__device__ double exact_dist(const T *a, const T *b, int64_t d, bool cosine)
{
  double s = 0, xx = 0, yy = 0;
  for (int64_t c = 0; c < d; c++) {
    double u = (double)a[c], v = (double)b[c];
    if (cosine) {
      s += u * v, xx += u * u, yy += v * v;
    } else {
      double e = u - v;
      s += e * e;
    }
  }
  if (!cosine) return s;
  return xx > 0 && yy > 0 ? 1.0 - s / (sqrt(xx) * sqrt(yy)) : 1.0;
}

/* The certificate knn_finish checks for a TF32 tile (knn_tc.cu): the
 * splits' lists are the best TC_LIST approximate keys (key = |y|² − 2x·y,
 * or 1 − 2x̂·ŷ for cosine) of their columns, each within E of the exact
 * key; a row whose m-th exact key lies more than E below every full
 * list's last approximate key has its exact best m among the candidates.
 * Rows that fail are appended to flagged (count in *nflag) with their
 * band: every column that may be among their best m has an approximate
 * key at or below it. */
struct knn_cert {
  const float *skey;   /* the lists' approximate keys, [ri][splits · 32]; NULL: no certificate */
  const float *ymax;   /* max |y| over the tile's columns (the packed ones) */
  int splits, ksteps;  /* lists a row; k-steps of 8 of the TF32 products */
  int *nflag, *flagged;
  float *band;
};

/* knn.cu: the re-rank (step 4) of rows' K candidates (sidx: columns of the
 * tile, -1 unused; the row's own column is skipped) into out, checking
 * cert when cert.skey is set. */
int knn_finish_launch(const tile_task *t, const void *x, const void *y, const int *sidx, int K, knn_cert cert,
                      double *out, cudaStream_t s, tsr_errbuf *err);

/* knn_tc.cu: whether the TF32 path takes this tile, and the path itself
 * (a, b: the rows as compared — the normalized copies for cosine). */
bool knn_tc_fits(const tile_task *t, tsr_dtype dt);
int knn_tc_run(const tile_task *t, const float *x, const float *y, const float *a, const float *b, double *out,
               const tsr_gpu_ctx *gpu, tsr_errbuf *err);

#endif
