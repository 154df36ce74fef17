/* tessera/array.h — chunked arrays over libtessera, like dask.array.
 *
 * An array is a grid of chunks; each chunk is one task of the cluster. The
 * builders below only record tasks (nothing runs) in the array context;
 * tsr_compute / tsr_persist submit the tasks an array needs and gather or
 * keep the result. Chunks are regular per axis with a smaller last chunk,
 * as in Dask: an axis of 10 with chunk 4 has chunks 4, 4, 2.
 *
 * Random arrays follow docs/random.md: their values depend only on the seed
 * and the element's global index, never on the chunking.
 *
 * Ownership: arrays belong to their context and live until
 * tsr_array_ctx_destroy (tsr_array_free drops one early). Builders never
 * take ownership of their input arrays.
 * Threading: a context and its arrays belong to one thread at a time.
 * Errors: as in tessera.h; tsr_errmsg() says which argument was wrong. */
#ifndef TESSERA_ARRAY_H
#define TESSERA_ARRAY_H

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_array_ctx tsr_array_ctx;
typedef struct tsr_array tsr_array;

/* The context records tasks for arrays computed through client (borrowed:
 * the client must outlive the context). */
int tsr_array_ctx_new(tsr_client *client, tsr_array_ctx **ctx_p);
/* Releases persisted chunks and frees every array of the context. */
void tsr_array_ctx_destroy(tsr_array_ctx **ctx_p);
void tsr_array_free(tsr_array_ctx *ctx, tsr_array **array_p);

/* ---------- metadata ---------- */

/* How an array's chunks are held on the workers. dtype and shape are
 * always the logical ones; the encoding says what bytes a chunk key holds.
 * Builders decode chunks where an op needs the elements (the scheduler
 * fuses the decode into that op: no decoded copy is stored), and pick the
 * ops that read an encoding directly where they exist (products with
 * 2-bit packed genotypes). */
typedef enum tsr_encoding {
  TSR_ENC_DENSE = 0,    /* the elements, C order */
  TSR_ENC_PACKED2 = 1,  /* u8 values 0..3, four to a byte along the last
                         * axis (element j in bits 2(j%4).. of byte j/4),
                         * a chunk [.., c] held as [.., ceil(c/4)] */
  TSR_ENC_BLOSC = 2,    /* each chunk one c-blosc frame of its dense bytes */
  TSR_ENC_CSR = 3,      /* 2-D: each chunk a CSR matrix (indptr, indices,
                         * values) in one u8 chunk: kernels/cpu/csr.h */
} tsr_encoding;

/* The value of a genotype array (dtype u8, values 0, 1, 2 = dosage of
 * the first allele) that marks a missing genotype. Arrays read from PLINK
 * files report it through tsr_array_missing; reductions that skip missing
 * values skip it, and astype to a float dtype turns it into NaN. */
#define TSR_GENO_MISSING 3

tsr_encoding tsr_array_encoding(const tsr_array *a);
/* A view of integer array a (the same chunks; nothing runs) whose value
 * `missing` marks missing elements, or with none for missing = -1: how a
 * .npy or Zarr genotype matrix that codes missing calls as 3 says so.
 * TSR_EINVAL for a float array or a value outside the dtype. */
int tsr_with_missing(tsr_array_ctx *ctx, const tsr_array *a, int missing, tsr_array **out_p);
/* The integer value marking a missing element of an integer array, or -1
 * when it has none (float arrays mark missing elements with NaN). */
int tsr_array_missing(const tsr_array *a);
tsr_dtype tsr_array_dtype(const tsr_array *a);
int tsr_array_ndim(const tsr_array *a);
/* Length of axis (0 <= axis < ndim). */
int64_t tsr_array_dim(const tsr_array *a, int axis);
/* Chunk size along axis (the regular size; the last may be smaller). */
int64_t tsr_array_chunk(const tsr_array *a, int axis);
/* Number of chunks along axis. */
int64_t tsr_array_nchunks(const tsr_array *a, int axis);
int64_t tsr_array_size(const tsr_array *a);    /* elements */
/* Key of chunk at grid index idx (ndim entries); static until freed. */
const char *tsr_array_chunk_key(const tsr_array *a, const int64_t *idx);

/* ---------- creation ---------- */
int tsr_random_uniform(tsr_array_ctx *ctx, uint64_t seed, tsr_dtype dtype, int ndim, const int64_t *shape,
                       const int64_t *chunks, tsr_array **out_p);
int tsr_random_normal(tsr_array_ctx *ctx, uint64_t seed, tsr_dtype dtype, int ndim, const int64_t *shape,
                      const int64_t *chunks, tsr_array **out_p);
/* Integers in [low, high) into an integer dtype; high - low <= 2^32. */
int tsr_randint(tsr_array_ctx *ctx, uint64_t seed, int64_t low, int64_t high, tsr_dtype dtype, int ndim,
                const int64_t *shape, const int64_t *chunks, tsr_array **out_p);
int tsr_full(tsr_array_ctx *ctx, double value, tsr_dtype dtype, int ndim, const int64_t *shape,
             const int64_t *chunks, tsr_array **out_p);
int tsr_zeros(tsr_array_ctx *ctx, tsr_dtype dtype, int ndim, const int64_t *shape, const int64_t *chunks,
              tsr_array **out_p);
int tsr_ones(tsr_array_ctx *ctx, tsr_dtype dtype, int ndim, const int64_t *shape, const int64_t *chunks,
             tsr_array **out_p);
/* A sparse count matrix like a single-cell experiment's (cells x genes,
 * f32 counts, TSR_ENC_CSR, chunks of row_chunk cells): each cell is of one
 * of n_types types with its own marker genes, has a log-normal size factor,
 * and about density x genes nonzero counts. Values depend only on seed and
 * the cell's index (never on row_chunk). With types_p, also the cells'
 * true types (i32 [cells]) to score a clustering against. The model is in
 * kernels/cpu/counts_synth.c; the single-cell benchmarks use it. */
typedef struct tsr_random_counts_opts {
  int64_t n_types;  /* default 20 */
  double density;   /* default 0.03 */
} tsr_random_counts_opts;
#define TSR_RANDOM_COUNTS_OPTS_DEFAULT {20, 0.03}
int tsr_random_counts(tsr_array_ctx *ctx, uint64_t seed, int64_t n_cells, int64_t n_genes, int64_t row_chunk,
                      const tsr_random_counts_opts *opts, tsr_array **counts_p, tsr_array **types_p);
/* Reads a .npy file (read on the workers, chunk by chunk; the file must be
 * visible to them at the same path). The header is read here for shape and
 * dtype. */
int tsr_from_npy(tsr_array_ctx *ctx, const char *path, const int64_t *chunks, tsr_array **out_p);

/* A directory of chunk files: one .npy per chunk ("c_I_J.npy" for grid
 * index (I, J)) plus "tessera-chunks.txt" giving dtype, shape and chunks.
 * The workers read and write the chunk files, so dir must be visible to
 * them at the same path (a shared or local file system). */
int tsr_from_chunk_dir(tsr_array_ctx *ctx, const char *dir, tsr_array **out_p);
/* Computes a and writes it to dir (created if missing; existing chunk files
 * are overwritten). */
int tsr_to_chunk_dir(tsr_array_ctx *ctx, const tsr_array *a, const char *dir, int timeout_ms);

/* ---------- elementwise ----------
 * Binary ops take arrays of the same shape (chunks are unified by
 * rechunking the second), or broadcast as NumPy does in 2-D: a row vector
 * (shape (c,) or (1, c): one value per column), a column vector ((r, 1):
 * one value per row) or a one-element array (a scalar) against a matrix,
 * on either side. Dtypes promote as NumPy's: float over integer (u8 with
 * f32 stays f32), the wider float or integer. An integer array with a
 * missing-value sentinel (tsr_array_missing) computes in f64, so its
 * missing values become NaN and stay missing through the arithmetic.
 * Encoded inputs are decoded (see tsr_encoding). */
int tsr_add(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p);
int tsr_sub(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p);
int tsr_mul(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p);
int tsr_div(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p);
/* a * factor + offset */
int tsr_scale(tsr_array_ctx *ctx, const tsr_array *a, double factor, double offset, tsr_array **out_p);
/* To dtype; an integer array's missing values become NaN in a float one. */
int tsr_astype(tsr_array_ctx *ctx, const tsr_array *a, tsr_dtype dtype, tsr_array **out_p);
/* NaN (a missing value) of a float array replaced by value (mean
 * imputation of standardized data is tsr_fillnan(z, 0)). TSR_ESHAPE for
 * an integer array. */
int tsr_fillnan(tsr_array_ctx *ctx, const tsr_array *a, double value, tsr_array **out_p);
/* One-argument math elementwise, NumPy's ufuncs: fn is "sqrt", "log",
 * "log1p", "exp", "expm1", "abs" or "square". Float arrays keep their
 * dtype, integer ones give f64 (missing values NaN). */
int tsr_ufunc(tsr_array_ctx *ctx, const tsr_array *a, const char *fn, tsr_array **out_p);
/* Applies a named op chunk by chunk; params as for tsr_graph_add (may be
 * NULL). The op must keep each chunk's shape; out_dtype is its dtype. */
int tsr_map_blocks(tsr_array_ctx *ctx, const char *op, const tsr_args *params, const tsr_array *a,
                   tsr_dtype out_dtype, tsr_array **out_p);

/* ---------- structure ---------- */
int tsr_transpose(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p);
/* Matrix product of 2-D arrays; partial products summed in a tree. Integer
 * inputs are multiplied in double without materializing a float copy. */
int tsr_matmul(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p);
/* Sum along axis, or over everything with axis = -1 (0-d result). Partial
 * sums are combined split_every at a time (0: default 8). */
int tsr_sum(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p);
int tsr_mean(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p);
/* Like tsr_sum, skipping missing values: NaN of float arrays, the
 * sentinel of integer ones (tsr_array_missing), like np.nansum. */
int tsr_nansum(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p);
/* The number of values that are not missing, as i64, reduced like sum. */
int tsr_count_valid(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p);
/* tsr_nansum / tsr_count_valid in f64 (f32 for f32 input), like
 * np.nanmean: NaN where every value was missing. */
int tsr_nanmean(tsr_array_ctx *ctx, const tsr_array *a, int axis, int split_every, tsr_array **out_p);
int tsr_concatenate(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, int axis, tsr_array **out_p);
/* New regular chunk sizes (ndim entries; -1 keeps an axis's chunks, 0 makes
 * it one chunk). */
int tsr_rechunk(tsr_array_ctx *ctx, const tsr_array *a, const int64_t *chunks, tsr_array **out_p);
/* The sub-array [start, stop) along each axis (ndim entries each). */
int tsr_slice(tsr_array_ctx *ctx, const tsr_array *a, const int64_t *start, const int64_t *stop,
              tsr_array **out_p);

/* ---------- running ---------- */
/* Computes a and copies it, C order, into buf (cap bytes; must hold the
 * whole array). timeout_ms -1: forever. */
int tsr_compute(tsr_array_ctx *ctx, const tsr_array *a, void *buf, size_t cap, int timeout_ms);
/* Computes a and writes it as a .npy file here (on the client's host). */
int tsr_compute_npy(tsr_array_ctx *ctx, const tsr_array *a, const char *path, int timeout_ms);
/* How tsr_compress holds chunks. encoding TSR_ENC_BLOSC takes any array
 * (cname "blosclz", "lz4", "lz4hc", "zstd" or "zlib"; clevel 0..9;
 * shuffle "none", "byte" or "bit"); TSR_ENC_PACKED2 takes a u8 array of
 * values 0..3 (a genotype matrix; larger values would be stored as 3). */
typedef struct tsr_compress_opts {
  tsr_encoding encoding;
  const char *cname;
  int clevel;
  const char *shuffle;
} tsr_compress_opts;

#define TSR_COMPRESS_OPTS_DEFAULT {TSR_ENC_BLOSC, "zstd", 5, "bit"}

/* An array with a's values whose chunks are held encoded (the seed's
 * map_blocks(compress).persist(), done by the library): persist it to keep
 * them so on the workers — the memory tiers then count the encoded bytes.
 * Every builder reads it as a (decoding a chunk where it is needed, into
 * the op that reads it), and products read packed chunks directly. A
 * product over a packed or blosc-persisted array gives the same bytes as
 * over a plainly persisted one. opts may be NULL (blosc, zstd, level 5,
 * bit shuffle). TSR_EINVAL for an unknown codec, TSR_ESHAPE for a packed
 * encoding of anything but u8. */
int tsr_compress(tsr_array_ctx *ctx, const tsr_array *a, const tsr_compress_opts *opts, tsr_array **out_p);
/* a with dense chunks (a itself, as a new handle, when already dense). */
int tsr_decompress(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p);
/* A 2-D array's values held sparse (TSR_ENC_CSR: zeros dropped, NaN kept).
 * Builders read it as a; tsr_decompress makes it dense again. */
int tsr_sparse(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p);

/* The parts of one chunk of a TSR_ENC_CSR array as tsr_gather returns it
 * (the layout is kernels/cpu/csr.h's): pointers into bytes, valid while
 * they are. For a client that writes a sparse result out (a Matrix
 * Market file) without densifying it. TSR_EPROTO with a message when bytes
 * are not a well-formed CSR chunk (every index checked). */
typedef struct tsr_csr_parts {
  int64_t rows, cols, nnz;
  tsr_dtype dtype;           /* of values */
  const int64_t *indptr;     /* [rows + 1] */
  const int32_t *indices;    /* [nnz], increasing within a row */
  const void *values;        /* [nnz] of dtype */
} tsr_csr_parts;
int tsr_csr_chunk_parts(const void *bytes, size_t nbytes, tsr_csr_parts *parts_p);

/* Computes a's chunks and keeps them on the workers; *out_p is a new array
 * over the kept chunks (its tasks are not recomputed by later graphs).
 * The chunks are kept in a's encoding (tsr_compress). */
int tsr_persist(tsr_array_ctx *ctx, const tsr_array *a, int timeout_ms, tsr_array **out_p);

/* Like dask.persist(*arrays) / dask.compute(*arrays): one graph for all n
 * arrays, so work they share (the passes of an SVD over its input) runs
 * once. persist_many writes n new arrays to outs; compute_many copies array
 * i into bufs[i] (caps[i] bytes). */
int tsr_persist_many(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, int timeout_ms,
                     tsr_array **outs);
int tsr_compute_many(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, void *const *bufs,
                     const size_t *caps, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
