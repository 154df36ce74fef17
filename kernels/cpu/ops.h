/* kernels/cpu/ops.h — the op definitions the registry lists, and the
 * helpers the CPU kernels share for reading params and writing messages.
 *
 * Conventions of every op here: a message starts with the op's name
 * ("add: ..."); infer() refuses whatever it can see is wrong so that cpu()
 * fails only on what depends on the data (integer division by zero) or on
 * the outside world (files). Missing required params are TSR_EINVAL. */
#ifndef TSR_KERNELS_CPU_OPS_H
#define TSR_KERNELS_CPU_OPS_H

#include <math.h>
#include <stdint.h>

#include "kernels.h"

/* Ops (one tsr_op_def each; the registry lists them in this order). */
extern const tsr_op_def tsr_op_random_uniform;
extern const tsr_op_def tsr_op_random_normal;
extern const tsr_op_def tsr_op_randint;
extern const tsr_op_def tsr_op_full;
extern const tsr_op_def tsr_op_add;
extern const tsr_op_def tsr_op_mul;
extern const tsr_op_def tsr_op_sub;
extern const tsr_op_def tsr_op_div;
extern const tsr_op_def tsr_op_scale;
extern const tsr_op_def tsr_op_astype;
extern const tsr_op_def tsr_op_sum;
extern const tsr_op_def tsr_op_matmul;
extern const tsr_op_def tsr_op_load_npy;
extern const tsr_op_def tsr_op_save_npy;
extern const tsr_op_def tsr_op_noop;
extern const tsr_op_def tsr_op_transpose;
extern const tsr_op_def tsr_op_slice;
extern const tsr_op_def tsr_op_assemble;
extern const tsr_op_def tsr_op_view;
extern const tsr_op_def tsr_op_qr;
extern const tsr_op_def tsr_op_svd;
extern const tsr_op_def tsr_op_bmul;
extern const tsr_op_def tsr_op_signs;
extern const tsr_op_def tsr_op_matmul_random;
extern const tsr_op_def tsr_op_pack2bit;     /* pack2bit.c */
extern const tsr_op_def tsr_op_unpack2bit;
extern const tsr_op_def tsr_op_matmul_2bit;
extern const tsr_op_def tsr_op_randint_packed;
extern const tsr_op_def tsr_op_csr_from_dense;   /* csr.c */
extern const tsr_op_def tsr_op_csr_densify;
extern const tsr_op_def tsr_op_counts_synth;        /* counts_synth.c */
extern const tsr_op_def tsr_op_counts_synth_types;
extern const tsr_op_def tsr_op_csr_sum;      /* csr_stats.c */
extern const tsr_op_def tsr_op_csr_map;      /* csr_map.c */
extern const tsr_op_def tsr_op_csr_normalize_rows;
extern const tsr_op_def tsr_op_csr_gather;
extern const tsr_op_def tsr_op_mask_from_runs;
extern const tsr_op_def tsr_op_clip;
extern const tsr_op_def tsr_op_values_f64;
extern const tsr_op_def tsr_op_csr_matmul;   /* csr_matmul.c */
extern const tsr_op_def tsr_op_knn_tile;        /* knn.c */
extern const tsr_op_def tsr_op_knn_merge;
extern const tsr_op_def tsr_op_knn_chain;
extern const tsr_op_def tsr_op_knn_finish;
extern const tsr_op_def tsr_op_umap_membership;   /* knn_graph.c */
extern const tsr_op_def tsr_op_umap_union;
extern const tsr_op_def tsr_op_knn_distances_csr;
extern const tsr_op_def tsr_op_community;        /* community_ops.c */
extern const tsr_op_def tsr_op_modularity;
extern const tsr_op_def tsr_op_kmeans_partial;   /* kmeans.c */
extern const tsr_op_def tsr_op_kmeans_combine;
extern const tsr_op_def tsr_op_kmeans_pp;
extern const tsr_op_def tsr_op_kmeans_centers;
extern const tsr_op_def tsr_op_kmeans_init;     /* kmeans_step.c */
extern const tsr_op_def tsr_op_kmeans_step;
extern const tsr_op_def tsr_op_kmeans_update;
extern const tsr_op_def tsr_op_kmeans_labels;
extern const tsr_op_def tsr_op_kmeans_loop;
extern const tsr_op_def tsr_op_kmeans_model;
extern const tsr_op_def tsr_op_fillnan;      /* convert.c */
extern const tsr_op_def tsr_op_ufunc;        /* ufunc.c */
extern const tsr_op_def tsr_op_matmul_chain; /* matmul_chain.c */
extern const tsr_op_def tsr_op_blosc_compress;   /* blosc.c */
extern const tsr_op_def tsr_op_blosc_decompress;
extern const tsr_op_def tsr_op_zarr_read;    /* zarr_read.c */
extern const tsr_op_def tsr_op_zarr_write;   /* zarr_write.c */
extern const tsr_op_def tsr_op_read_bed;     /* plink.c */
extern const tsr_op_def tsr_op_tiff_read;    /* tiff_read.c */
extern const tsr_op_def tsr_op_tile_stats;   /* tiles.c */
extern const tsr_op_def tsr_op_tile_filter;  /* tiles.c */
extern const tsr_op_def tsr_op_tile_thumb;   /* tiles.c */
extern const tsr_op_def tsr_op_tenx_h5_read; /* tenx_h5.c */
extern const tsr_op_def tsr_op_mtx_read;     /* mtx_read.c */
extern const tsr_op_def tsr_op_umap_spectral; /* umap_spectral.c */
extern const tsr_op_def tsr_op_umap_prepare;  /* umap.c */
extern const tsr_op_def tsr_op_umap_layout;
/* Test-only (test_only = true). */
extern const tsr_op_def tsr_op_crash;
extern const tsr_op_def tsr_op_fail;
extern const tsr_op_def tsr_op_sleep;

/* A chunk of a larger array, as creation ops describe it: this chunk's
 * shape, the whole array's global shape and the chunk's offset in it.
 * Invariant after tsr_k_grid_parse: 0 <= offset[d], offset[d] + shape[d]
 * <= global[d], and global_count (the whole array's element count) fits
 * int64. */
typedef struct tsr_k_grid {
  int ndim;
  int64_t shape[TSR_MAX_NDIM];
  int64_t global[TSR_MAX_NDIM];
  int64_t offset[TSR_MAX_NDIM];
  int64_t global_count;
} tsr_k_grid;

/* Reads `shape` (required), `global_shape` (default shape) and `offset`
 * (default 0s) and checks them against each other. 0 or TSR_EINVAL /
 * TSR_ESHAPE with a message that names op. */
int tsr_k_grid_parse(const char *op, const tsr_params *params, tsr_k_grid *grid_p, tsr_errbuf *err);

/* Reads the int array param `name` as a shape (0..TSR_MAX_NDIM entries,
 * each >= 0). 0, TSR_ENOTFOUND when absent (message set), or TSR_EINVAL /
 * TSR_ESHAPE. */
int tsr_k_shape_param(const char *op, const tsr_params *params, const char *name, int64_t shape[TSR_MAX_NDIM],
                      int *ndim_p, tsr_errbuf *err);

/* Reads the optional string param `dtype`; absent gives fallback. An
 * unknown name is TSR_EINVAL. Callers check which dtypes they accept. */
int tsr_k_dtype_param(const char *op, const tsr_params *params, tsr_dtype fallback, tsr_dtype *dtype_p,
                      tsr_errbuf *err);

/* For a getter's failure rc: prefixes err's message with "op: " and maps
 * TSR_ENOTFOUND (a missing required param) to TSR_EINVAL. Returns the code. */
int tsr_k_param_fail(const char *op, int rc, tsr_errbuf *err);

/* Fills meta with dtype and shape[0..ndim). */
void tsr_k_meta_set(tsr_meta *meta, tsr_dtype dtype, int ndim, const int64_t *shape);

/* "f64[3,4]" by value, for messages: tsr_k_str(&m).s lives until the end
 * of the full expression that calls tsr_k_str. */
typedef struct tsr_k_str_buf {
  char s[112];
} tsr_k_str_buf;
tsr_k_str_buf tsr_k_str(const tsr_meta *meta);
/* "[3,4]" for a bare list of dims. */
tsr_k_str_buf tsr_k_dims_str(const int64_t *dims, int n);

/* Converts a double to an integer dtype the way astype does: truncation
 * toward zero, clamped to the dtype's range, NaN to 0 (C leaves
 * out-of-range conversions undefined; clamping makes them deterministic). */
uint8_t tsr_k_f2u8(double x);
int32_t tsr_k_f2i32(double x);
int64_t tsr_k_f2i64(double x);

/* Reads n elements of dtype at src into t: as int64 (integer dtypes only)
 * or as double (any dtype; exact except i64 beyond 2^53). */
void tsr_k_load_i64(tsr_dtype dt, const void *src, size_t n, int64_t *t);
void tsr_k_load_f64(tsr_dtype dt, const void *src, size_t n, double *t);
/* Stores n doubles into dtype at dst like astype from f64 (integers
 * truncate and clamp, NaN → 0). */
void tsr_k_store_f64(tsr_dtype dt, const double *t, size_t n, void *dst);

/* Converts n elements of any dtype at src to the float dtype `to` (f32 or
 * f64) at dst, as C converts each value (i64 → f32 rounds once). */
void tsr_k_to_float(tsr_dtype to, tsr_dtype from, const void *src, size_t n, void *dst);
bool tsr_k_is_float(tsr_dtype dt);

/* Copies an N-D block of extent block[0..nd) of es-byte elements from the
 * C-order array src (shape src_shape) at src_start to the C-order array dst
 * (shape dst_shape) at dst_start. Callers checked the bounds. */
void tsr_k_copy_block(size_t es, int nd, const int64_t *block, const void *src, const int64_t *src_shape,
                      const int64_t *src_start, void *dst, const int64_t *dst_shape, const int64_t *dst_start);

/* C = op(A)·op(B) + beta·C in dt (f32 or f64) through CBLAS, row-major;
 * every dimension is > 0 and fits int (callers check). */
void tsr_k_gemm(tsr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* Instruction sets of the SIMD kernels. BEST is the widest this CPU has,
 * the others exist so tests can check each path. tsr_k_isa_resolve maps
 * BEST (or an isa the CPU lacks, to SCALAR) to what will run. */
typedef enum { TSR_K_ISA_BEST = 0, TSR_K_ISA_SCALAR, TSR_K_ISA_AVX2, TSR_K_ISA_AVX512 } tsr_k_isa;
tsr_k_isa tsr_k_isa_resolve(tsr_k_isa isa);

/* Skinny f64 products (gemm_skinny.c), accumulating into C:
 *   btx: C[m, cols] += B[rows, m]ᵀ · X[rows, cols]
 *   xb:  C[rows, n] += X[rows, cols] · B[cols, n]
 * ld* are row strides in elements. Each element of C is updated as
 * c = fma(a, b, c) once per term in increasing order of the inner index,
 * on every isa, so every isa gives the same bytes; BEST picks the fastest
 * this CPU has. Fast when m or n is small (tens); any size works. */
void tsr_k_gemm_btx_f64(tsr_k_isa isa, int64_t rows, int64_t cols, int64_t m, const double *b, int64_t ldb,
                        const double *x, int64_t ldx, double *c, int64_t ldc);
void tsr_k_gemm_xb_f64(tsr_k_isa isa, int64_t rows, int64_t cols, int64_t n, const double *x, int64_t ldx,
                       const double *b, int64_t ldb, double *c, int64_t ldc);

/* matmul's skinny path (linalg_skinny.c): C [m, n] = op(A) op(B) in f64
 * when one operand is an integer array and the other an f64 one at most 64
 * wide on its non-inner side. 1 when done, 0 when the shapes or dtypes are
 * not this path's (nothing written), or TSR_ENOMEM. */
int tsr_k_matmul_skinny(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const tsr_buf *a, const tsr_buf *b,
                        double *c, tsr_errbuf *err);

/* Where the skinny path reads X [rows, cols] (as stored) from: load()
 * writes the f64 tile of rows [r0, r0+nr) and columns [c0, c0+nc) to tile
 * (row-major, nc per row). c0 is a multiple of 256. */
typedef struct tsr_k_xsrc {
  int64_t rows, cols;
  void (*load)(const struct tsr_k_xsrc *x, int64_t r0, int64_t nr, int64_t c0, int64_t nc, double *tile);
  const void *arg;
} tsr_k_xsrc;
/* The skinny path over a tile source: X is operand A (x_is_a) or B of
 * C = op(A) op(B), w the other operand (f64), k the inner dimension.
 * Same returns as tsr_k_matmul_skinny (0: w is not f64 or is too wide). */
int tsr_k_skinny_x(const tsr_k_xsrc *x, bool x_is_a, bool ta, bool tb, int64_t k, const tsr_buf *w, double *c,
                   tsr_errbuf *err);

/* ---------- matmul_chain (matmul_chain.c; CUDA: cuda/chain.cu) ---------- */

#define TSR_K_CHAIN_MAX 16
enum {
  TSR_K_STEP_ADD = 1,   /* z + v */
  TSR_K_STEP_SUB = 2,   /* z − v */
  TSR_K_STEP_MUL = 3,   /* z · v */
  TSR_K_STEP_DIV = 4,   /* z / v */
  TSR_K_STEP_RSUB = 5,  /* v − z */
  TSR_K_STEP_RDIV = 6,  /* v / z */
  TSR_K_STEP_SCALE = 7, /* z · a + b */
  TSR_K_STEP_FILLNAN = 8, /* a where z is NaN */
};
enum { TSR_K_SIDE_XB = 0, TSR_K_SIDE_XTB, TSR_K_SIDE_BX, TSR_K_SIDE_BTX };

/* A matmul_chain task's params checked against its inputs' metas. */
typedef struct tsr_k_chain {
  int side;                             /* TSR_K_SIDE_* */
  int64_t rows, cols;                   /* X's logical shape */
  bool packed, has_missing;
  int64_t missing;                      /* X's missing value (loaded as NaN) */
  int64_t outer;                        /* B's extent that is not the inner dimension */
  int n_steps;
  int codes[TSR_K_CHAIN_MAX];
  int vec_input[TSR_K_CHAIN_MAX];       /* the input holding a step's vector, or -1 */
  double values[2 * TSR_K_CHAIN_MAX];   /* a step's scalars (a, b) */
} tsr_k_chain;
int tsr_k_chain_parse(const tsr_params *p, const tsr_meta *in, int n_in, tsr_k_chain *ch, tsr_errbuf *err);

#ifdef __CUDACC__
#define TSR_K_HD __host__ __device__
#else
#define TSR_K_HD
#endif
/* One step on one value (v: the step's vector value for this column). */
static inline TSR_K_HD double tsr_k_chain_step(int code, double z, double v, double a, double b)
{
  switch (code) {
  case TSR_K_STEP_ADD: return z + v;
  case TSR_K_STEP_SUB: return z - v;
  case TSR_K_STEP_MUL: return z * v;
  case TSR_K_STEP_DIV: return z / v;
  case TSR_K_STEP_RSUB: return v - z;
  case TSR_K_STEP_RDIV: return v / z;
  case TSR_K_STEP_SCALE: return z * a + b;
  default: return isnan(z) ? a : z;
  }
}

/* A random op's chunk, parsed (random.c): dist is "random_uniform",
 * "random_normal" or "randint". tsr_k_gen_fill writes the chunk described
 * by g->grid; callers may narrow grid.shape/offset to a sub-block of it
 * (matmul_random generates tiles this way). */
typedef enum { TSR_K_GEN_UNIFORM, TSR_K_GEN_NORMAL, TSR_K_GEN_RANDINT } tsr_k_gen_kind;
typedef struct tsr_k_gen {
  tsr_k_gen_kind kind;
  tsr_dtype dtype;
  uint64_t seed;
  int64_t low;     /* randint only */
  uint64_t range;  /* randint only: high - low, 1..2^32 */
  tsr_k_grid grid;
} tsr_k_gen;
int tsr_k_gen_parse(const char *dist, const tsr_params *params, tsr_k_gen *g, tsr_errbuf *err);
void tsr_k_gen_fill(const tsr_k_gen *g, void *out);
/* The same values written as f64 (converted as tsr_k_to_float does). */
void tsr_k_gen_fill_f64(const tsr_k_gen *g, double *out);
/* A 2-D chunk's f64 values transposed (out[c·rows + r] = X[r, c]), where
 * tsr_k_gen_fill_f64_t_ok says there is a SIMD path for g's kind, CPU and
 * shape (uniform f64 or randint; AVX-512; rows starting alike in a block);
 * the same values as tsr_k_gen_fill_f64. */
bool tsr_k_gen_fill_f64_t_ok(const tsr_k_gen *g);
void tsr_k_gen_fill_f64_t(const tsr_k_gen *g, double *out);

/* SIMD Philox (philox_simd.c): what tsr_k_philox_values_isa writes for
 * each block (4 words) of the stream, per docs/random.md: the words themselves (u32), 2 f64 uniforms,
 * 4 f32 uniforms, or 4 randint values low + ((w·range) >> 32) as
 * u8 / i32 / i64 / f64 (the f64 being the integer converted exactly). */
typedef enum {
  TSR_K_VALS_WORDS,
  TSR_K_VALS_U01_F64,
  TSR_K_VALS_U01_F32,
  TSR_K_VALS_INT_U8,
  TSR_K_VALS_INT_I32,
  TSR_K_VALS_INT_I64,
  TSR_K_VALS_INT_F64,
} tsr_k_vals_kind;
typedef struct tsr_k_vals {
  tsr_k_vals_kind kind;
  uint64_t seed;
  int64_t low;     /* INT_* only */
  uint64_t range;  /* INT_* only: 1..2^32 */
} tsr_k_vals;

/* Writes the values of blocks b0, b0+1, ... of v->seed's stream into out
 * (in stream order) for a prefix of the n blocks and returns its length:
 * all n with AVX-512; whole groups of 8 and words only with AVX2; 0 on
 * other CPUs and builds, and for INT_* kinds whose values do not all fit
 * int32. The caller computes the remaining blocks with philox.h. */
size_t tsr_k_philox_values_isa(tsr_k_isa isa, const tsr_k_vals *v, uint64_t b0, size_t n, void *out);
/* f64 values (kind U01_F64 or INT_F64) of a rows x cols block of a 2-D
 * random array whose row r starts at element L0 + r·stride, transposed:
 * out[c·ldo + r] is element L0 + r·stride + c. Lanes are rows, so no
 * shuffles put values in order. false, writing nothing, where there is no
 * SIMD path (no AVX-512, another kind, or rows that start at different
 * places in a block: stride not a multiple of the values per block). */
bool tsr_k_philox_tile_t_isa(tsr_k_isa isa, const tsr_k_vals *v, uint64_t L0, uint64_t stride, size_t rows,
                             size_t cols, double *out, size_t ldo);
/* The words of blocks b0.. into out: tsr_k_philox_values_isa with WORDS. */
size_t tsr_k_philox_blocks_isa(tsr_k_isa isa, uint64_t seed, uint64_t b0, size_t n, uint32_t *out);

/* PLINK 1 .bed chunks (plink.c; the format and the chunk layout are in
 * its top comment and docs/plink.md). A chunk: samples [row0, row0+rows)
 * x variants [col0, col0+cols) of a file of n_samples x n_variants. */
typedef struct tsr_k_bed_slice {
  const char *path;                /* for messages; borrowed */
  int64_t n_samples, n_variants;   /* the file's */
  int64_t row0, rows, col0, cols;  /* the chunk */
} tsr_k_bed_slice;

/* The chunk's packed A1 dosages from SNP-major codes: in points at the
 * byte holding sample q (0..3) of the chunk's first variant, variant c's
 * bytes start at in + c·istride, and (q + rows + 3) / 4 bytes of each are
 * read. Row r of out (at out + r·ostride) gets ceil(cols/4) bytes: the
 * pack2bit layout of the dosages (00→2, 10→1, 11→0, 01→3), pad bits
 * zero. Bits of in outside the chunk are ignored. */
void tsr_k_bed_transpose(const uint8_t *in, size_t istride, int q, int64_t rows, int64_t cols, uint8_t *out,
                         size_t ostride);
/* Checks fd's magic (6c 1b 01), mode and exact size against s's counts.
 * 0 or TSR_EIO with a message that names s->path and the problem. */
int tsr_k_bed_check(int fd, const tsr_k_bed_slice *s, tsr_errbuf *err);
/* How tsr_k_bed_read reads: whole records, at most batch_bytes of them
 * (and at least 4) per pread; or, when a chunk would skip more than
 * skip_bytes of each record, one pread per record of just its bytes.
 * The defaults, measured here (docs/plink.md): a pread into 64 MiB of
 * fresh pages took 37-82 ms (the kernel faults each page in during the
 * copy), the same 67 MB through a reused 8 MiB buffer 4-9 ms; a pread per
 * record costs as much as copying some kilobytes (957-sample records read
 * one pread each for chunks of 3 or 4 samples took 1.2-2 s a matrix). */
typedef struct tsr_k_bed_io {
  size_t batch_bytes;
  uint64_t skip_bytes;
} tsr_k_bed_io;
#define TSR_K_BED_IO_DEFAULT {(size_t)8 << 20, (uint64_t)64 << 10}
/* Reads s's chunk from fd (checked) into out, u8 [rows, ceil(cols/4)].
 * 0, TSR_EIO (the file is shorter than its check said) or TSR_ENOMEM. */
int tsr_k_bed_read(int fd, const tsr_k_bed_slice *s, const tsr_k_bed_io *io, uint8_t *out, tsr_errbuf *err);

/* Whole-slide tile statistics (tiles.c; docs/tiles.md). The order is the
 * public one of tessera/tiles.h (TSR_TILE_*): keep them equal. */
enum {
  TSR_K_TS_MIN, TSR_K_TS_MAX, TSR_K_TS_P5, TSR_K_TS_P50,
  TSR_K_TS_MEAN_R, TSR_K_TS_MEAN_G, TSR_K_TS_MEAN_B,
  TSR_K_TS_MEAN_GRAY, TSR_K_TS_STD_GRAY, TSR_K_TS_MEAN_SAT, TSR_K_TS_FRAC_BG, TSR_K_TS_PIXELS,
  TSR_K_TS_N
};
/* The statistics of n RGB pixels (tile_stats without the op around it);
 * gray_scratch holds n doubles. */
void tsr_k_tile_stats(const uint8_t *px, size_t n, double *gray_scratch, double out[TSR_K_TS_N]);
/* tile_stats's sub-tile: th x tw from its param `tile` (at most the chunk's sides), or the chunk's
 * whole in's h x w without it; 0 or a named error. */
int tsr_k_tile_size(const tsr_params *p, const tsr_meta *in, int64_t *th_p, int64_t *tw_p, tsr_errbuf *err);

/* The compressed JPEG blocks (tiles or strips) a `tiff_read` region
 * overlaps, for a GPU decoder (kernels/cuda/tiff_read.cu, nvJPEG): each
 * a complete JPEG stream — a TIFF's shared JPEGTables (Aperio) spliced in
 * front of the block's abbreviated stream. tsr_k_tiff_jpeg_blocks returns
 * TSR_ENODEV when the directory is not JPEG-compressed 8-bit grey or RGB
 * (the CPU variant decodes it then), other errors as tiff_read's. */
typedef struct tsr_k_jpeg_blocks {
  int64_t x0, y0, w, h;          /* the region, as the params gave it */
  uint32_t block_w, block_h;     /* the directory's tile (strip: width x rows) */
  int spp;                       /* 1 grey, 3 RGB */
  int ycbcr;                     /* 1: YCbCr colour (convert); 0: RGB stored as is */
  size_t n;                      /* blocks */
  int64_t *bx, *by;              /* each block's top-left pixel */
  unsigned char **data;          /* each block's JPEG stream */
  size_t *len;
  char path[256];                /* for messages */
} tsr_k_jpeg_blocks;
int tsr_k_tiff_jpeg_blocks(const tsr_params *p, tsr_k_jpeg_blocks *blocks, tsr_errbuf *err);
void tsr_k_jpeg_blocks_free(tsr_k_jpeg_blocks *blocks);

#endif
