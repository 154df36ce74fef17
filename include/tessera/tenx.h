/* tessera/tenx.h — single-cell count matrices in: 10x Genomics (Cell
 * Ranger) HDF5 files and Matrix Market directories, and plain Matrix
 * Market (.mtx) files, as sparse chunked arrays.
 *
 * The arrays: f32 values (the counts), encoding TSR_ENC_CSR
 * (tessera/array.h), 2-D, chunked along rows only (one column chunk
 * spanning all columns). The 10x readers give cells x genes, as scanpy's
 * sc.read_10x_h5 / sc.read_10x_mtx do. Every chunk is canonical: column
 * indices strictly increasing within a row (a file that repeats an entry
 * gets the sum, as scipy's toarray() gives, and explicit zeros are
 * dropped). tsr_decompress gives the dense matrix.
 *
 * Where the work happens: the client reads the small parts here (the
 * header, the row pointers or a scan of the entries, barcodes and
 * features); each row chunk is one task on a worker that reads its own
 * rows from the file (docs/tenx.md). So the file must be visible to the
 * workers at the absolute path the client resolves (a shared or local
 * file system). A chunk task re-checks what the client saw and fails,
 * naming the file, if the file changed since.
 *
 * row_chunk: rows per chunk; <= 0 picks rows so that a chunk holds about
 * 4 Mi values (at least 1 row), and >= the rows gives one chunk.
 *
 * info: may be NULL. Otherwise it is written on success only, and its
 * arrays are the caller's: free them with tsr_tenx_info_free. Strings are
 * NUL-terminated fields as the file stores them (no uniquifying of
 * repeated gene names, unlike scanpy's make_unique; no filtering by
 * feature type, unlike scanpy's gex_only: feature_types says which are
 * "Gene Expression").
 *
 * Errors (tsr_errmsg() names the file and the problem, FILE:LINE for a
 * text file): TSR_EINVAL (a NULL argument; a file that is not what it
 * should be: an HDF5 file without the 10x datasets, a Matrix Market
 * header other than coordinate real/integer general, an entry out of
 * range, barcodes or features whose count differs from the matrix's
 * shape, ...), TSR_EIO (a missing or unreadable file), TSR_ELIMIT (a
 * dimension beyond 2^31 - 1), TSR_ENOMEM.
 *
 * Threading: as tessera/array.h. The HDF5 library must be its
 * thread-safe build if other threads of the program use HDF5 at once. */
#ifndef TESSERA_TENX_H
#define TESSERA_TENX_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a reader found besides the matrix. An array member is NULL where
 * the file has no such thing; otherwise it has n_cells (barcodes) or
 * n_genes (the rest) strings. */
typedef struct tsr_tenx_info {
  int64_t n_cells;        /* rows of the array */
  int64_t n_genes;        /* columns of the array */
  int64_t nnz;            /* entries stored in the file (before dropping zeros / summing repeats) */
  char **barcodes;        /* [n_cells] cell barcodes */
  char **gene_ids;        /* [n_genes] Ensembl ids: v3 features/id, v2 genes, column 1 of genes/features.tsv */
  char **gene_names;      /* [n_genes] symbols: v3 features/name, v2 gene_names, column 2 of the .tsv
                           * (column 1 when it has only one) */
  char **feature_types;   /* [n_genes] v3 features/feature_type, column 3 of features.tsv; else NULL */
  char **genomes;         /* [n_genes] v3 features/genome (when present), v2 the genome group's name; else NULL */
} tsr_tenx_info;

/* Frees info's arrays and zeroes it; NULL, or a zeroed info, is a no-op. */
void tsr_tenx_info_free(tsr_tenx_info *info);

/* A Cell Ranger HDF5 file (filtered_feature_bc_matrix.h5): v3 layout
 * /matrix/{data,indices,indptr,shape,barcodes,features/{id,name,
 * feature_type[,genome]}}, or the v2 (Cell Ranger 1.x/2.x) layout
 * /<genome>/{data,indices,indptr,shape,barcodes,genes,gene_names} with
 * exactly one genome group. The file holds genes x cells in CSC, which
 * is cells x genes in CSR: each chunk task reads its slice of indptr,
 * then its values and indices with hyperslabs. Values of any numeric
 * type are converted to f32. */
int tsr_from_10x_h5(tsr_array_ctx *ctx, const char *path, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info);

/* A Cell Ranger Matrix Market directory: matrix.mtx, barcodes.tsv and
 * features.tsv (v3) or genes.tsv (v1/v2), each plain or .gz. The matrix
 * there is genes x cells; the array is its transpose, cells x genes.
 * barcodes: the first tab-separated field of each line; genes/features:
 * id, name[, feature type] as above. */
int tsr_from_10x_mtx(tsr_array_ctx *ctx, const char *dir, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info);

/* A Matrix Market file (plain or gzip: detected by content), coordinate
 * real or integer general: the array is rows x cols as in the file
 * (sc.read_mtx). info gets n_cells = rows, n_genes = cols, nnz and no
 * names. */
int tsr_from_mtx(tsr_array_ctx *ctx, const char *path, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info);
/* The same, transposed: cols x rows (a genes x cells file read as cells x
 * genes, sc.read_mtx(path).T); info's n_cells is the file's cols. */
int tsr_from_mtx_transposed(tsr_array_ctx *ctx, const char *path, int64_t row_chunk, tsr_array **x_p,
                            tsr_tenx_info *info);

#ifdef __cplusplus
}
#endif
#endif
