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
 * a QR per row chunk, a tree of QRs over the stacked R factors (as many
 * a QR as keep it within 2^22 elements, 16 to 1024), Q assembled per chunk. Q has A's row chunks; R is
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

/* How the range finder iterates (n_power_iter times): POWER and QR as
 * Dask's svd_compressed (QR re-orthonormalizes after every product);
 * KRYLOV keeps every iterate and spans them all, l·(n_power_iter + 1)
 * columns for the same passes over A (block Krylov, as FastPCA and PLINK
 * 2's --pca approx): far more accurate when the spectrum has a flat tail
 * (genotype matrices do). */
typedef enum { TSR_SVD_POWER = 0, TSR_SVD_QR = 1, TSR_SVD_KRYLOV = 2 } tsr_svd_iterator;

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

/* ---------- genotype standardization and PCA ---------- */

/* How tsr_standardize treats each column j (a variant) of a samples x
 * variants array X, with μ_j the mean of its values that are not missing
 * (for dosages 0/1/2, μ = 2p with p the allele frequency):
 *   BINOM2: (x − μ) / sqrt(μ (1 − μ/2)) = (x − 2p) / sqrt(2p(1−p)), the
 *           standardization of PLINK's --pca, flashpca and EIGENSOFT;
 *   CENTER: x − μ;
 *   NONE:   x itself.
 * Missing values (tsr_array_missing, or NaN) become μ before the
 * transformation: 0 after BINOM2 or CENTER (mean imputation). A column
 * without variance becomes all 0. */
typedef enum tsr_standardize_mode {
  TSR_STANDARDIZE_NONE = 0,
  TSR_STANDARDIZE_CENTER = 1,
  TSR_STANDARDIZE_BINOM2 = 2,
} tsr_standardize_mode;

/* Z, an f64 array of x's shape and chunks, built from tsr_nanmean,
 * tsr_sub, tsr_div and tsr_fillnan. Products with Z (tsr_matmul, and so
 * the SVDs) read x as stored — 2-bit packed or u8 — and apply the
 * standardization tile by tile inside the product: Z is never stored.
 * Other builders compute its chunks where they need them. */
int tsr_standardize(tsr_array_ctx *ctx, const tsr_array *x, tsr_standardize_mode mode, tsr_array **z_p);

typedef enum tsr_pca_method { TSR_PCA_COMPRESSED = 0, TSR_PCA_EXACT = 1 } tsr_pca_method;

typedef struct tsr_pca_opts {
  int k;                            /* components; default 10 */
  tsr_pca_method method;            /* default TSR_PCA_COMPRESSED */
  tsr_standardize_mode standardize; /* default TSR_STANDARDIZE_BINOM2 */
  tsr_svd_opts svd;                 /* the compressed method's (default: block Krylov, 2 iterations, 90
                                     * oversamples: a 300-column span for k = 10) */
} tsr_pca_opts;

#define TSR_PCA_OPTS_DEFAULT {10, TSR_PCA_COMPRESSED, TSR_STANDARDIZE_BINOM2, {10, 6, TSR_SVD_KRYLOV, 0, true}}

/* PCA of a samples x variants array x (n x m) as PLINK's --pca means it:
 * Z = tsr_standardize(x), Z = U S Vᵀ. Returns eigvec (n x k: U's first k
 * columns, the eigenvectors of the genomic relationship matrix Z Zᵀ / m),
 * eigval (k: its eigenvalues, s²/m, descending) and loadings (m x k: V's
 * first k columns). Signs: each column of loadings sums to >= 0, its
 * eigenvector flipped with it. COMPRESSED is tsr_svd_compressed on Z;
 * EXACT the exact SVD of Zᵀ (TSR_ESHAPE when n > m, or n above the exact
 * SVD's column limit). opts may be NULL (defaults). */
int tsr_pca(tsr_array_ctx *ctx, const tsr_array *x, const tsr_pca_opts *opts, tsr_array **eigvec_p,
            tsr_array **eigval_p, tsr_array **loadings_p);

#ifdef __cplusplus
}
#endif
#endif
