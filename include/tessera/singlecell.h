/* tessera/singlecell.h — sparse matrix primitives and scanpy-style
 * preprocessing over tessera/array.h (docs/singlecell.md).
 *
 * Expression matrices are cells x genes, TSR_ENC_CSR (tsr_sparse), chunked
 * along rows only: one column chunk across all genes. The builders below
 * take such an array (a dense array or a CSR one with several column
 * chunks is converted first) and return new arrays of the same context
 * (array.h says who owns them). Statistics are f64 and summed per row
 * chunk, then tree-reduced across chunks like tsr_sum.
 *
 * Builders whose result shape depends on the data (filters, HVG, the
 * median of normalize_total) compute the small per-row or per-gene vectors
 * they need and wait for them (timeout_ms; -1 forever); the matrix itself
 * stays on the workers. Errors: as in tessera.h; tsr_errmsg() says which
 * argument was wrong. */
#ifndef TESSERA_SINGLECELL_H
#define TESSERA_SINGLECELL_H

#include "tessera/array.h"
#include "tessera/linalg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------- sparse primitives (graphs/sparse.c) ---------- */

typedef enum tsr_sparse_stat {
  TSR_SPARSE_SUM = 0,   /* Σ x */
  TSR_SPARSE_NNZ = 1,   /* stored values (nonzeros) */
  TSR_SPARSE_SUMSQ = 2, /* Σ x² */
} tsr_sparse_stat;

/* Per column (axis 0: f64 [cols], one chunk) or per row (axis 1: f64
 * [rows], x's row chunks) of a 2-D array read sparse. */
int tsr_sparse_reduce(tsr_array_ctx *ctx, const tsr_array *x, int axis, tsr_sparse_stat stat, tsr_array **out_p);
/* Column means and variances with ddof (scanpy: 1), f64 [cols]. Two
 * passes, the second summing (x − mean)² with the implicit zeros (as
 * scanpy's sparse_mean_variance_axis). Either out may be NULL. */
int tsr_sparse_mean_var(tsr_array_ctx *ctx, const tsr_array *x, int ddof, tsr_array **mean_p, tsr_array **var_p);
/* fn(x·factor) on the stored values (fn "none", "log1p", "expm1"),
 * values of dtype (TSR_F32 or TSR_F64; TSR_DTYPE_NONE: x's if float, else
 * f32). The pattern is kept (fn(0) = 0 for these). */
int tsr_sparse_map(tsr_array_ctx *ctx, const tsr_array *x, const char *fn, double factor, tsr_dtype dtype,
                   tsr_array **out_p);
/* Row i divided by totals[i] / target (a row with total 0 is kept as is);
 * totals: f64 [rows] (tsr_sparse_reduce axis 1). f32 values divide in f32
 * as scanpy does. */
int tsr_sparse_normalize_rows(tsr_array_ctx *ctx, const tsr_array *x, const tsr_array *totals, double target,
                              tsr_dtype dtype, tsr_array **out_p);
/* The rows where row_mask[i] != 0 and the columns where col_mask[j] != 0,
 * in their order (a NULL mask keeps everything), rechunked to row_chunk
 * rows (<= 0: x's row chunk). The masks are read here (client memory,
 * borrowed for the call); they are sent as runs, so masks of long runs
 * cost little. TSR_ESHAPE when nothing is kept. */
int tsr_sparse_select(tsr_array_ctx *ctx, const tsr_array *x, const uint8_t *row_mask, const uint8_t *col_mask,
                      int64_t row_chunk, tsr_array **out_p);
/* A dense float array clipped to [lo, hi] (±INFINITY: no bound). */
int tsr_clip(tsr_array_ctx *ctx, const tsr_array *a, double lo, double hi, tsr_array **out_p);
/* The f64 vector values[0..n) as a one-chunk array (sent in the task). */
int tsr_from_values(tsr_array_ctx *ctx, const double *values, int64_t n, tsr_array **out_p);
/* x read sparse: x itself when CSR with one column chunk, else converted. */
int tsr_as_csr_rows(tsr_array_ctx *ctx, const tsr_array *x, tsr_array **out_p);

/* Products: tsr_matmul reads a CSR operand (and one behind per-column
 * affine steps, x − μ or (x − μ)/σ built with tsr_sub / tsr_div against a
 * row vector, after tsr_astype to f64) through `csr_matmul` in f64
 * products: X·B, Xᵀ·C, B·X, Bᵀ·X without a dense copy of X. So every
 * tsr_svd_compressed of such an array is an implicitly centered PCA. */

/* ---------- scanpy-style preprocessing (graphs/singlecell.c) ---------- */

/* Rows (cells) indices kept, or columns (genes): malloc'd, free() them. */
typedef struct tsr_sc_kept {
  int64_t *index;
  int64_t n;
} tsr_sc_kept;

/* sc.pp.filter_cells(min_genes=...): keeps cells with at least min_genes
 * stored values. *kept_p gets the kept row indices (ascending). */
int tsr_filter_cells(tsr_array_ctx *ctx, const tsr_array *x, int64_t min_genes, int timeout_ms, tsr_array **out_p,
                     tsr_sc_kept *kept_p);
/* sc.pp.filter_genes(min_cells=...): keeps genes stored in at least
 * min_cells cells. */
int tsr_filter_genes(tsr_array_ctx *ctx, const tsr_array *x, int64_t min_cells, int timeout_ms, tsr_array **out_p,
                     tsr_sc_kept *kept_p);
/* sc.pp.normalize_total(target_sum): each cell scaled to target_sum total
 * counts; target_sum <= 0 means scanpy's default, the median of the cells'
 * totals (computed here; written to *used_target_p when not NULL). Values
 * f32, divided in f32 as scanpy 1.11 does for a CSR matrix. */
int tsr_normalize_total(tsr_array_ctx *ctx, const tsr_array *x, double target_sum, int timeout_ms, tsr_array **out_p,
                        double *used_target_p);
/* sc.pp.log1p: log(1 + x) of the stored values (f32 stays f32). */
int tsr_log1p(tsr_array_ctx *ctx, const tsr_array *x, tsr_array **out_p);

typedef struct tsr_hvg_opts {
  int64_t n_top_genes;  /* default 2000; capped at the genes there are */
  int n_bins;           /* default 20 */
} tsr_hvg_opts;
#define TSR_HVG_OPTS_DEFAULT {2000, 20}

/* Per gene, as scanpy's adata.var columns; malloc'd, free with
 * tsr_hvg_result_free. */
typedef struct tsr_hvg_result {
  int64_t n_genes;
  double *means;            /* log1p of the mean of expm1(x) */
  double *dispersions;      /* log(var / mean), NaN where var = 0 */
  double *dispersions_norm; /* normalized per mean bin, NaN where undefined */
  uint8_t *highly_variable; /* 1 for the n_top_genes kept */
  int64_t n_highly_variable;
} tsr_hvg_result;
void tsr_hvg_result_free(tsr_hvg_result *r);

/* sc.pp.highly_variable_genes(flavor='seurat', n_top_genes=...) of
 * log1p-normalized data (x as tsr_log1p returns it): expm1, column
 * mean/var (ddof 1), dispersion = var / mean, log dispersion and log1p
 * mean, n_bins equal-width bins of the mean (pandas.cut), dispersion
 * normalized per bin by its mean and std (a bin with one gene: mean 0,
 * std = that gene's dispersion, so it normalizes to 1), and the genes
 * whose normalized dispersion reaches the n_top_genes-th highest.
 * opts may be NULL. Use tsr_sparse_select with highly_variable to subset. */
int tsr_highly_variable_genes(tsr_array_ctx *ctx, const tsr_array *x, const tsr_hvg_opts *opts, int timeout_ms,
                              tsr_hvg_result *result_p);

/* sc.pp.scale(zero_center, max_value): per gene (x − mean) / std (std with
 * ddof 1, 0 replaced by 1; without zero_center only the division), then
 * values above max_value (and below −max_value when centered) clipped;
 * max_value <= 0: no clipping. The result is DENSE f32 (scanpy densifies
 * too): meant for the HVG subset. Column statistics as tsr_sparse_mean_var
 * (scanpy's sparse path) — pass a CSR array for scanpy's sparse numbers. */
int tsr_sc_scale(tsr_array_ctx *ctx, const tsr_array *x, bool zero_center, double max_value, int timeout_ms,
                 tsr_array **out_p);

typedef enum tsr_sc_pca_solver { TSR_SC_PCA_RANDOMIZED = 0, TSR_SC_PCA_EXACT = 1 } tsr_sc_pca_solver;

typedef struct tsr_sc_pca_opts {
  int n_comps;              /* default 50 (capped at min(cells, genes) - 1 like scanpy) */
  tsr_sc_pca_solver solver; /* default randomized */
  uint64_t seed;            /* of the randomized range finder; default 0 */
  int n_oversamples;        /* randomized: default 10 */
  int n_power_iter;         /* randomized: default 7 (scikit-learn's randomized_svd) */
  bool zero_center;         /* default true: PCA of x − mean (implicit for CSR input) */
} tsr_sc_pca_opts;
#define TSR_SC_PCA_OPTS_DEFAULT {50, TSR_SC_PCA_RANDOMIZED, 0, 10, 7, true}

/* What scanpy stores: obsm['X_pca'], uns['pca']['variance'],
 * uns['pca']['variance_ratio'], varm['PCs']. */
typedef struct tsr_sc_pca_result {
  tsr_array *scores;          /* cells x n_comps f32: U·S */
  tsr_array *variance;        /* n_comps f64: S² / (cells − 1) */
  tsr_array *variance_ratio;  /* n_comps f64: variance / total variance of x */
  tsr_array *loadings;        /* genes x n_comps f64 */
} tsr_sc_pca_result;

/* sc.pp.pca: the top n_comps of the SVD of x − 1·meanᵀ. For CSR x the
 * centering is implicit (the products read the CSR chunks, no dense copy);
 * the exact solver decomposes the dense blocks (TSQR: genes ≤ 16384).
 * Signs as the rest of Tessera (svd_flip on the loadings: each loading
 * column sums to >= 0). opts may be NULL. Only records tasks. */
int tsr_sc_pca(tsr_array_ctx *ctx, const tsr_array *x, const tsr_sc_pca_opts *opts, tsr_sc_pca_result *result_p);

#ifdef __cplusplus
}
#endif
#endif
