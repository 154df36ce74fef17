/* tessera/linalg.h — chunked linear algebra over tessera/array.h:
 * tall-skinny QR (TSQR), exact tall-skinny SVD, and randomized SVD
 * (Halko, Martinsson & Tropp, as dask.array.linalg.svd_compressed).
 *
 * Outputs are new arrays of the same context (see array.h for ownership).
 * Floating-point arrays keep their precision (f32 stays f32); integer
 * inputs are computed in f64. */
#ifndef TESSERA_LINALG_H
#define TESSERA_LINALG_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A = Q R for a tall-skinny A (rows >= cols, one chunk across the columns):
 * a QR per row chunk, a tree of QRs over the stacked R factors (fan-in
 * TSR_TSQR_FAN_IN), Q assembled per chunk. Q has A's row chunks; R is
 * cols x cols. Errors: TSR_ESHAPE when A is not 2-D, has more columns than
 * rows, or has more than one column chunk (rechunk first, or use tsr_qr). */
int tsr_tsqr(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **q_p, tsr_array **r_p);
/* QR of any 2-D tall array: rechunks to one column chunk when needed, then
 * TSQR. TSR_ESHAPE for short-and-fat input. */
int tsr_qr(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **q_p, tsr_array **r_p);

/* Exact SVD of a tall-skinny array: TSQR, then the SVD of R, U assembled.
 * u: rows x cols (A's row chunks), s: cols, v: cols x cols (rows of v are
 * the right singular vectors), in Dask's sign convention (svd_flip, as
 * da.linalg.svd's coerce_signs=True): each row of v sums to >= 0, its
 * column of u flipped with it. Rechunks columns to one chunk when needed.
 * TSR_ESHAPE for more columns than rows ("too wide": name both sizes). */
int tsr_svd_tall_skinny(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **u_p, tsr_array **s_p,
                        tsr_array **v_p);

typedef enum { TSR_SVD_POWER = 0, TSR_SVD_QR = 1 } tsr_svd_iterator;

typedef struct tsr_svd_opts {
  int n_oversamples;          /* default 10 */
  int n_power_iter;           /* default 0 */
  tsr_svd_iterator iterator;  /* default TSR_SVD_POWER */
  uint64_t seed;              /* of the Gaussian test matrix; default 0 */
  bool coerce_signs;          /* Dask's sign convention; default true */
} tsr_svd_opts;

#define TSR_SVD_OPTS_DEFAULT {10, 0, TSR_SVD_POWER, 0, true}

/* Randomized SVD of any chunked 2-D array. The subspace size is
 * l = min(max(20, k + n_oversamples), min(rows, cols)) (Dask's
 * compression_level). Returns u (rows x k), s (k), v (k x cols); with
 * coerce_signs, each row of v whose sum is negative is negated together
 * with its column of u. opts may be NULL (defaults). */
int tsr_svd_compressed(tsr_array_ctx *ctx, const tsr_array *a, int k, const tsr_svd_opts *opts, tsr_array **u_p,
                       tsr_array **s_p, tsr_array **v_p);

#ifdef __cplusplus
}
#endif
#endif
