/* kernels — the op registry: named chunk operations with a CPU (and later a
 * CUDA) implementation each.
 *
 * The rule of the registry: every op is deterministic. The same params and
 * the same input bytes give the same output bytes, on any worker, any
 * thread count and any run. The scheduler relies on this to recompute a lost
 * or evicted chunk instead of storing it (docs/memory.md: a worker under
 * memory pressure drops recomputable chunks rather than spilling them).
 * Ops that read files are deterministic while the file is unchanged.
 *
 * Kernels get their inputs and an output buffer the caller allocated, own
 * nothing, allocate nothing that outlives the call, and never print: a
 * failure is a negative TSR_E* code plus a message in err.
 *
 * Threading: the registry is immutable after tsr_ops_init(); ops may run on
 * any number of threads at once. */
#ifndef TSR_KERNELS_H
#define TSR_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

#include "util/util.h"

/* A chunk as kernels see it: metadata plus bytes in C order. */
typedef struct tsr_buf {
  tsr_meta meta;
  void *data;
  size_t nbytes;
} tsr_buf;

/* What a CUDA variant gets besides its buffers: the executor slot's
 * stream and library handles, and stream-ordered scratch memory from the
 * worker's device pool (counted against its device memory limit). The
 * handles are void * so this header needs no CUDA header. A variant
 * launches its work on `stream`, checks the launch, and returns: it never
 * synchronizes the device and never calls cudaMalloc itself. It may wait
 * for its own stream where the host must learn what only the device knows
 * to go on (community: when a loop ends, the coarse graph's size): that
 * blocks only the executor thread, which waits for the stream after the
 * variant anyway. */
typedef struct tsr_gpu_ctx {
  int device;
  void *stream;      /* cudaStream_t */
  void *cublas;      /* cublasHandle_t, bound to stream */
  void *cusolver;    /* cusolverDnHandle_t, bound to stream */
  /* Scratch valid until the stream reaches the matching scratch_free; NULL
   * when the device limit would be exceeded. */
  void *(*scratch_alloc)(void *pool, size_t bytes);
  void (*scratch_free)(void *pool, void *ptr);
  void *pool;
} tsr_gpu_ctx;

/* A CUDA variant: like cpu, but in[].data and out->data are device
 * pointers on gpu->device, and the work is only enqueued on gpu->stream. */
typedef int (*tsr_cuda_fn)(const tsr_params *params, const tsr_buf *in, int n_in, tsr_buf *out,
                           const tsr_gpu_ctx *gpu, tsr_errbuf *err);

typedef struct tsr_op_def {
  const char *name;
  int min_inputs;
  int max_inputs;  /* -1: unbounded */
  /* Infers the output's metadata from params and the inputs' metadata, and
   * checks everything that can be checked before running (shapes, dtypes,
   * parameter ranges). 0 or TSR_ESHAPE / TSR_EINVAL with a message. */
  int (*infer)(const tsr_params *params, const tsr_meta *in, int n_in, tsr_meta *out, tsr_errbuf *err);
  /* Runs on the CPU. out->meta is what infer returned and out->data holds
   * out->nbytes bytes (64-byte aligned, contents undefined). 0 or error.
   * An op whose output size depends on the data (a compressed chunk)
   * infers an upper bound and may lower out->meta.shape[0] before it
   * returns; tsr_op_run_cpu then keeps that many bytes. Such an op has
   * no CUDA variant. */
  int (*cpu)(const tsr_params *params, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err);
  bool test_only;  /* registered only when TESSERA_TEST_OPS=1 */
  /* The CUDA variant, or NULL (set by the registry when the CUDA kernels
   * were built: kernels/cuda/; see tsr_ops_have_cuda). */
  tsr_cuda_fn cuda;
} tsr_op_def;

/* True when this build contains the CUDA variants (a CUDA compiler was
 * found at configure time). Says nothing about whether a GPU is present. */
bool tsr_ops_have_cuda(void);

/* What a CUDA variant could only find out on the device, checked once its
 * stream has finished: call it after every CUDA variant (succeeded or not),
 * on the thread that ran the variant, after synchronizing its stream.
 * Returns 0, or the failure the variant left behind — qr and svd: a
 * cuSOLVER routine reported info != 0 (no convergence, a bad argument) —
 * with a message naming the routine and info; knn_tile: an input row is
 * not finite, naming the row; a failed task's output is
 * NaN and must not be kept. Clears what it checked. Always 0 in a build
 * without CUDA. */
int tsr_cuda_deferred_check(tsr_errbuf *err);

/* Builds the registry; idempotent. test_ops adds the ops marked test_only
 * (crash, fail, sleep) that the integration tests use; a later call with
 * false hides them again. The regular ops are findable even before the
 * first call. Call before other threads use the registry. */
void tsr_ops_init(bool test_ops);
/* Adds an op defined at run time (a worker's plugin ops, worker/plugins.c)
 * after the built-in ones; op must live until exit. Call before other
 * threads use the registry, after tsr_ops_init. TSR_EEXIST when the name is
 * taken, TSR_EINVAL, TSR_ELIMIT (256 added ops). */
int tsr_ops_add(const tsr_op_def *op, tsr_errbuf *err);
/* NULL when no op has that name. */
const tsr_op_def *tsr_op_find(const char *name);
size_t tsr_op_count(void);
const tsr_op_def *tsr_op_at(size_t i);

/* Runs an op end to end on the CPU: validates the input count and each
 * input's nbytes against its meta, infers, allocates the output (64-byte
 * aligned, never NULL even for 0 bytes, free with free()), runs. On
 * success *out is filled and owned by the caller; on failure *out is
 * untouched and nothing is left allocated. params may be NULL (no params);
 * infer() and cpu() themselves always get a non-NULL params. Convenience
 * for tests and the worker alike. */
int tsr_op_run_cpu(const tsr_op_def *op, const tsr_params *params, const tsr_buf *in, int n_in, tsr_buf *out,
                   tsr_errbuf *err);

#endif
