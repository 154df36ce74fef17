/* kernels/cuda/common.cuh — what the CUDA variants share: the C headers
 * (included as C), error checks that report the failed call's text and
 * file:line, scratch memory from the worker's pool, launch geometry, dtype
 * dispatch, and the value conversions of the CPU ops as device functions.
 *
 * Rules for every variant (kernels.h): in[].data and out->data are device
 * pointers on gpu->device, which the caller made current; work is only
 * enqueued on gpu->stream (library handles are bound to it); no device
 * synchronization, no cudaMalloc — temporaries come from gpu->scratch_alloc
 * and go back with scratch_free once enqueued (stream-ordered). A variant
 * may assume out->meta is what the op's infer() returned for these inputs;
 * it re-reads only the params it needs.
 *
 * A variant that cannot handle some inputs on the GPU (integer div: a zero
 * divisor must fail the task, which a kernel cannot report without a
 * synchronization) returns TSR_ENODEV before enqueuing anything: the caller
 * then runs the CPU variant. */
#ifndef TSR_KERNELS_CUDA_COMMON_CUH
#define TSR_KERNELS_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <stdint.h>

extern "C" {
#include "cpu/ops.h"
#include "cuda/variants.h"
}
#include "philox.h"

/* ---------- errors ---------- */

/* 0 when the status is success; otherwise writes "CALL failed: NAME: TEXT
 * (FILE:LINE)" into err and returns TSR_ENOMEM for allocation failures,
 * TSR_EINTERNAL for the rest. Use through TSR_CUDA_CHECK, which evaluates
 * to that int and never returns from its caller:
 *   int rc = TSR_CUDA_CHECK(cudaMemsetAsync(p, 0, n, s), err); */
int tsr_cuda_status(cudaError_t e, const char *call, const char *file, int line, tsr_errbuf *err);
int tsr_cuda_status(cublasStatus_t e, const char *call, const char *file, int line, tsr_errbuf *err);
int tsr_cuda_status(cusolverStatus_t e, const char *call, const char *file, int line, tsr_errbuf *err);
#define TSR_CUDA_CHECK(call, err) tsr_cuda_status((call), #call, __FILE__, __LINE__, (err))
/* After a <<<...>>> launch: the launch's own error (bad configuration, no
 * kernel image for this GPU), reported with the kernel's name. */
#define TSR_CUDA_LAUNCHED(kernel, err) tsr_cuda_status(cudaGetLastError(), kernel "<<<>>>", __FILE__, __LINE__, (err))

/* For a variant's failure rc: prefixes err's text with "op: " (like the
 * CPU ops' messages) and returns rc. */
int tsr_cuda_fail_op(const char *op, int rc, tsr_errbuf *err);

/* ---------- scratch ---------- */

/* Stream-ordered temporaries from the worker's pool, freed (in reverse
 * order) when the holder goes out of scope — after the variant enqueued
 * the work that uses them, which is what scratch_free allows. */
class tsr_scratch {
 public:
  explicit tsr_scratch(const tsr_gpu_ctx *gpu) : gpu_(gpu) {}
  ~tsr_scratch();
  tsr_scratch(const tsr_scratch &) = delete;
  tsr_scratch &operator=(const tsr_scratch &) = delete;
  /* At least `bytes` (never a NULL pointer for 0): 0, or TSR_ENOMEM with
   * a message naming what. */
  int get(size_t bytes, void **p, const char *what, tsr_errbuf *err);
  template <class T>
  int get(int64_t count, T **p, const char *what, tsr_errbuf *err)
  {
    void *v = nullptr;
    int rc = get((size_t)count * sizeof(T), &v, what, err);
    if (rc == 0) *p = (T *)v;
    return rc;
  }

 private:
  static const int kMax = 12;
  const tsr_gpu_ctx *gpu_;
  void *ptrs_[kMax] = {};
  int n_ = 0;
};

/* ---------- launch helpers ---------- */

static inline cudaStream_t tsr_stream(const tsr_gpu_ctx *gpu)
{
  return (cudaStream_t)gpu->stream;
}

/* Blocks for a grid-stride loop over n items: enough to fill any GPU,
 * capped so that huge n costs no launch overhead. At least 1. */
static inline unsigned tsr_grid(int64_t n, int threads)
{
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

/* The multiprocessor count of the current device (1 if unknown). */
int tsr_cuda_sm_count(void);

#define TSR_GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Calls f(T{}) with T the C type of dt; TSR_EINVAL for an unknown dtype. */
template <class F>
static int tsr_with_dtype(tsr_dtype dt, F &&f)
{
  switch (dt) {
  case TSR_U8: return f(uint8_t{});
  case TSR_I32: return f(int32_t{});
  case TSR_I64: return f(int64_t{});
  case TSR_F32: return f(float{});
  case TSR_F64: return f(double{});
  default: return TSR_EINVAL;
  }
}

/* ---------- the CPU ops' conversions (cpu/common.c), on the device ---------- */

template <class T>
struct tsr_is_int {
  static const bool value = false;
};
template <>
struct tsr_is_int<uint8_t> {
  static const bool value = true;
};
template <>
struct tsr_is_int<int32_t> {
  static const bool value = true;
};
template <>
struct tsr_is_int<int64_t> {
  static const bool value = true;
};

/* A double into T like tsr_k_store_f64: floats round to nearest, integers
 * truncate toward zero and clamp, NaN gives 0. */
template <class T>
__device__ __forceinline__ T tsr_from_f64(double x)
{
  if constexpr (tsr_is_int<T>::value) {
    if (isnan(x)) return 0;
    if constexpr (sizeof(T) == 1) return x <= 0.0 ? 0 : x >= 255.0 ? 255 : (T)x;
    else if constexpr (sizeof(T) == 4) return x >= 2147483647.0 ? INT32_MAX : x <= -2147483648.0 ? INT32_MIN : (T)x;
    else return x >= 9223372036854775808.0 ? INT64_MAX : x <= -9223372036854775808.0 ? INT64_MIN : (T)x;
  } else {
    return (T)x;
  }
}

/* astype's conversion From → To: integers wrap, int → float rounds to
 * nearest, float → int through tsr_from_f64. */
template <class To, class From>
__device__ __forceinline__ To tsr_convert(From x)
{
  if constexpr (tsr_is_int<From>::value && tsr_is_int<To>::value) return (To)(uint64_t)(int64_t)x;
  else if constexpr (tsr_is_int<From>::value) return (To)x;
  else return tsr_from_f64<To>((double)x);
}

/* ---------- entry points shared between files ---------- */

/* dst[n] = astype(src[n]) from `from` to `to` (elementwise.cu). */
int tsr_cuda_convert(tsr_dtype to, tsr_dtype from, const void *src, void *dst, int64_t n, cudaStream_t s,
                     tsr_errbuf *err);
/* The rows x cols window of a row-major matrix (row stride ld elements)
 * converted to `to` into a dense rows x cols dst (elementwise.cu). */
int tsr_cuda_convert_2d(tsr_dtype to, tsr_dtype from, const void *src, int64_t ld, int64_t rows, int64_t cols,
                        void *dst, cudaStream_t s, tsr_errbuf *err);
/* dst [C, R] = transpose of src [R, C], both row-major, es-byte elements
 * (1, 4 or 8) (layout.cu). */
int tsr_cuda_transpose(const void *src, void *dst, int64_t R, int64_t C, size_t es, cudaStream_t s, tsr_errbuf *err);
/* Copies an N-D block like tsr_k_copy_block, device to device (layout.cu). */
int tsr_cuda_copy_block(size_t es, int nd, const int64_t *block, const void *src, const int64_t *src_shape,
                        const int64_t *src_start, void *dst, const int64_t *dst_shape, const int64_t *dst_start,
                        cudaStream_t s, tsr_errbuf *err);
/* Row-major C = op(A)·op(B) + beta·C in dt (f32/f64) through cuBLAS;
 * dimensions > 0 and within int. tf32: TF32 tensor-core math allowed for
 * f32; otherwise full f32/f64 math whatever the handle's math mode
 * (blas.cu). */
int tsr_cuda_gemm(const tsr_gpu_ctx *gpu, tsr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc, bool tf32,
                  tsr_errbuf *err);
/* Writes the chunk g describes into out as out_dtype (g's dtype, or a
 * float dtype: values converted as tsr_k_to_float does) (random.cu). */
int tsr_cuda_gen_fill(const tsr_k_gen *g, tsr_dtype out_dtype, void *out, cudaStream_t s, tsr_errbuf *err);
/* The fused genotype products (genotype.cu): X is r x c genotypes, u8
 * (epb 1, rows of c bytes) or 2-bit packed (epb 4, rows of ceil(c/4)
 * bytes); B is f32 or f64 (bdt), row-major; out has B's dtype, row-major
 * (genotype.cuh: f32 with f32 GEMM accuracy, f64 within 2^-31 of each
 * column's largest |B|).
 *   xb:  out [r, n] = X · B,  B [c, n]
 *   btx: out [m, c] = Bᵀ · X, B [r, m]
 * X is read once per 32 columns of B and never converted whole. */
int tsr_cuda_geno_xb(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                     tsr_dtype bdt, int64_t n, void *out, tsr_errbuf *err);
int tsr_cuda_geno_btx(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                      tsr_dtype bdt, int64_t m, void *out, tsr_errbuf *err);
/* The same reading X through a mode (genotype.cuh, geno_mode): the
 * missing value made 0, or only the mask of missing values. */
int tsr_cuda_geno_xb_mode(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                          tsr_dtype bdt, int64_t n, void *out, int mode, int missing, tsr_errbuf *err);
int tsr_cuda_geno_btx_mode(const tsr_gpu_ctx *gpu, const uint8_t *x, int epb, int64_t r, int64_t c, const void *b,
                           tsr_dtype bdt, int64_t m, void *out, int mode, int missing, tsr_errbuf *err);
/* Test hook: true makes tsr_cuda_geno_xb use the narrow configuration
 * that GPUs with less shared memory get. Not for production use. */
extern "C" void tsr_cuda_geno_test_narrow(bool on);
/* Fills a device buffer of n elements of dt (f32/f64) with NaN when any of
 * info[0 .. ninfo) is nonzero — how a solver's failure shows without a
 * synchronization (solver.cu). */
int tsr_cuda_poison_on_info(const int *info, int ninfo, tsr_dtype dt, void *data, int64_t n, cudaStream_t s,
                            tsr_errbuf *err);

/* ---------- deferred checks (kernels.h: tsr_cuda_deferred_check) ---------- */

/* Copies the device status words info[0 .. ninfo) (ninfo <= 8) into pinned
 * host memory at this point of stream s, for tsr_cuda_deferred_check to
 * read once the stream has finished: a nonzero word fails the task as
 * "OP: cuSOLVER NAMES[k] reported info N". op and names must be string
 * literals (kept until the check). One pending check per thread. */
int tsr_cuda_defer_info(const char *op, const int *info, int ninfo, const char *const *names, cudaStream_t s,
                        tsr_errbuf *err);
/* The same for input rows a kernel found bad: rows[0 .. nrows) (nrows <=
 * 8) are device words, each all ones (-1) when nothing was found, else
 * the first bad global row (atomicMin as unsigned). A word >= 0 fails the
 * task as "OP: row R of the input WHAT" (TSR_EINVAL); op and what must be
 * string literals. Independent of a pending defer_info (both are checked). */
int tsr_cuda_defer_rows(const char *op, const int64_t *rows, int nrows, const char *what, cudaStream_t s,
                        tsr_errbuf *err);

/* The same for a status word that kernels OR flags into (bit k set: the
 * input was bad as what[k] says, nbits <= 8): a nonzero word fails the task
 * as "OP: WHAT" naming the lowest bit set, TSR_EPROTO — how a kernel
 * reports a malformed input chunk without a synchronization
 * (sparse.cu). op and what must be string literals. */
int tsr_cuda_defer_flags(const char *op, const int *word, const char *const *what, int nbits, cudaStream_t s,
                         tsr_errbuf *err);

/* ---------- the variants (tsr_cuda_fn each; variants.cu lists them) ---------- */

#define TSR_CUDA_VARIANT(name)                                                                            \
  extern "C" int tsr_cuda_##name(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, \
                                 const tsr_gpu_ctx *gpu, tsr_errbuf *err)
TSR_CUDA_VARIANT(random_uniform);
TSR_CUDA_VARIANT(umap_layout);  /* umap.cu */
TSR_CUDA_VARIANT(umap_spectral);  /* umap_spectral.cu */
TSR_CUDA_VARIANT(random_normal);
TSR_CUDA_VARIANT(randint);
TSR_CUDA_VARIANT(full);
TSR_CUDA_VARIANT(add);
TSR_CUDA_VARIANT(mul);
TSR_CUDA_VARIANT(sub);
TSR_CUDA_VARIANT(div);
TSR_CUDA_VARIANT(scale);
TSR_CUDA_VARIANT(astype);
TSR_CUDA_VARIANT(bmul);
TSR_CUDA_VARIANT(signs);
TSR_CUDA_VARIANT(sum);
TSR_CUDA_VARIANT(noop);
TSR_CUDA_VARIANT(transpose);
TSR_CUDA_VARIANT(slice);
TSR_CUDA_VARIANT(assemble);
TSR_CUDA_VARIANT(view);
TSR_CUDA_VARIANT(matmul);
TSR_CUDA_VARIANT(matmul_random);
TSR_CUDA_VARIANT(qr);
TSR_CUDA_VARIANT(svd);
TSR_CUDA_VARIANT(pack2bit);
TSR_CUDA_VARIANT(unpack2bit);
TSR_CUDA_VARIANT(matmul_2bit);
TSR_CUDA_VARIANT(matmul_chain);
TSR_CUDA_VARIANT(randint_packed);
TSR_CUDA_VARIANT(csr_map);
TSR_CUDA_VARIANT(csr_normalize_rows);
TSR_CUDA_VARIANT(csr_sum);
TSR_CUDA_VARIANT(csr_matmul);
TSR_CUDA_VARIANT(knn_tile);
TSR_CUDA_VARIANT(knn_merge);
TSR_CUDA_VARIANT(community);   /* community.cu */
TSR_CUDA_VARIANT(modularity);
TSR_CUDA_VARIANT(tiff_read);   /* tiles.cu */
TSR_CUDA_VARIANT(tile_stats);

#endif
