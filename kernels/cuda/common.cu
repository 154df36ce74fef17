/* kernels/cuda/common.cu — error reporting, scratch and device queries for
 * the CUDA variants (contracts in common.cuh). */
#include <stdio.h>
#include <string.h>

#include "common.cuh"

/* The path from "kernels/" on, so messages do not carry the build host's
 * checkout directory. */
static const char *short_path(const char *file)
{
  const char *k = strstr(file, "kernels/");
  return k != nullptr ? k : file;
}

static int report(int rc, const char *call, const char *name, const char *text, const char *file, int line,
                  tsr_errbuf *err)
{
  return tsr_fail(err, rc, "%s failed: %s: %s (%s:%d)", call, name, text, short_path(file), line);
}

int tsr_cuda_status(cudaError_t e, const char *call, const char *file, int line, tsr_errbuf *err)
{
  if (e == cudaSuccess) return 0;
  int rc = e == cudaErrorMemoryAllocation ? TSR_ENOMEM : TSR_EINTERNAL;
  return report(rc, call, cudaGetErrorName(e), cudaGetErrorString(e), file, line, err);
}

int tsr_cuda_status(cublasStatus_t e, const char *call, const char *file, int line, tsr_errbuf *err)
{
  if (e == CUBLAS_STATUS_SUCCESS) return 0;
  int rc = e == CUBLAS_STATUS_ALLOC_FAILED ? TSR_ENOMEM : TSR_EINTERNAL;
  return report(rc, call, cublasGetStatusName(e), cublasGetStatusString(e), file, line, err);
}

static const char *cusolver_name(cusolverStatus_t e)
{
  switch (e) {
  case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
  case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
  case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
  case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
  case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
  case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
  case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
  default: return "CUSOLVER_STATUS_(other)";
  }
}

int tsr_cuda_status(cusolverStatus_t e, const char *call, const char *file, int line, tsr_errbuf *err)
{
  if (e == CUSOLVER_STATUS_SUCCESS) return 0;
  int rc = e == CUSOLVER_STATUS_ALLOC_FAILED ? TSR_ENOMEM : TSR_EINTERNAL;
  char code[32];
  snprintf(code, sizeof code, "status %d", (int)e);
  return report(rc, call, cusolver_name(e), code, file, line, err);
}

int tsr_cuda_fail_op(const char *op, int rc, tsr_errbuf *err)
{
  if (err == nullptr) return rc;
  char text[TSR_ERRMSG_LEN];
  snprintf(text, sizeof text, "%s", err->text);
  return tsr_fail(err, rc, "%s: %s", op, text);
}

tsr_scratch::~tsr_scratch()
{
  while (n_ > 0) gpu_->scratch_free(gpu_->pool, ptrs_[--n_]);
}

int tsr_scratch::get(size_t bytes, void **p, const char *what, tsr_errbuf *err)
{
  if (n_ == kMax) return tsr_fail(err, TSR_EINTERNAL, "more than %d scratch buffers for %s", kMax, what);
  void *q = gpu_->scratch_alloc(gpu_->pool, bytes < 256 ? 256 : bytes);
  if (q == nullptr)
    return tsr_fail(err, TSR_ENOMEM, "no device scratch of %zu bytes for %s (device memory limit)", bytes, what);
  ptrs_[n_++] = q;
  *p = q;
  return 0;
}

int tsr_cuda_sm_count(void)
{
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 1;
  return sms > 0 ? sms : 1;
}

/* ---------- deferred checks ---------- */

#define DEFER_MAX 8

/* The thread's pending check: pinned words the stream fills, and what they
 * mean. The pinned buffer lives as long as the thread (one per executor
 * slot), like gesvdj's settings in solver.cu. */
struct deferred {
  int *words = nullptr;
  int n = 0;
  const char *op = nullptr;
  const char *names[DEFER_MAX] = {};
  int nbits = 0;
  bool flags = false;  /* one word of flag bits (tsr_cuda_defer_flags), not cuSOLVER infos */
  long long *rows = nullptr;  /* tsr_cuda_defer_rows: pinned, DEFER_MAX */
  int nrows = 0;
  const char *rows_op = nullptr, *rows_what = nullptr;
};
static thread_local deferred pending;

int tsr_cuda_defer_info(const char *op, const int *info, int ninfo, const char *const *names, cudaStream_t s,
                        tsr_errbuf *err)
{
  if (ninfo > DEFER_MAX) return tsr_fail(err, TSR_EINTERNAL, "%s: %d status words, at most %d", op, ninfo, DEFER_MAX);
  if (pending.words == nullptr) {
    int rc = TSR_CUDA_CHECK(cudaMallocHost(&pending.words, DEFER_MAX * sizeof(int)), err);
    if (rc != 0) return rc;
  }
  pending.n = 0;
  int rc = TSR_CUDA_CHECK(cudaMemcpyAsync(pending.words, info, (size_t)ninfo * sizeof(int), cudaMemcpyDeviceToHost, s), err);
  if (rc != 0) return rc;
  pending.n = ninfo, pending.op = op, pending.flags = false;
  for (int k = 0; k < ninfo; k++) pending.names[k] = names[k];
  return 0;
}

int tsr_cuda_defer_flags(const char *op, const int *word, const char *const *what, int nbits, cudaStream_t s,
                         tsr_errbuf *err)
{
  if (nbits > DEFER_MAX) return tsr_fail(err, TSR_EINTERNAL, "%s: %d flag bits, at most %d", op, nbits, DEFER_MAX);
  int rc = tsr_cuda_defer_info(op, word, 1, what, s, err);
  if (rc != 0) return rc;
  for (int k = 0; k < nbits; k++) pending.names[k] = what[k];
  pending.flags = true, pending.nbits = nbits;
  return 0;
}

int tsr_cuda_defer_rows(const char *op, const int64_t *rows, int nrows, const char *what, cudaStream_t s,
                        tsr_errbuf *err)
{
  if (nrows > DEFER_MAX) return tsr_fail(err, TSR_EINTERNAL, "%s: %d row words, at most %d", op, nrows, DEFER_MAX);
  if (pending.rows == nullptr) {
    int rc = TSR_CUDA_CHECK(cudaMallocHost(&pending.rows, DEFER_MAX * sizeof(long long)), err);
    if (rc != 0) return rc;
  }
  pending.nrows = 0;
  int rc = TSR_CUDA_CHECK(
      cudaMemcpyAsync(pending.rows, rows, (size_t)nrows * sizeof(long long), cudaMemcpyDeviceToHost, s), err);
  if (rc != 0) return rc;
  pending.nrows = nrows, pending.rows_op = op, pending.rows_what = what;
  return 0;
}

/* The first bad row a pending defer_rows recorded, or 0. */
static int check_rows(tsr_errbuf *err)
{
  int n = pending.nrows;
  pending.nrows = 0;
  for (int k = 0; k < n; k++)
    if (pending.rows[k] >= 0)
      return tsr_fail(err, TSR_EINVAL, "%s: row %lld of the input %s", pending.rows_op, pending.rows[k],
                      pending.rows_what);
  return 0;
}

extern "C" int tsr_cuda_deferred_check(tsr_errbuf *err)
{
  int rows_rc = check_rows(err);
  int n = pending.n;
  pending.n = 0;
  if (rows_rc != 0) return rows_rc;
  if (n > 0 && pending.flags) {
    unsigned word = (unsigned)pending.words[0];
    for (int k = 0; k < pending.nbits; k++)
      if (word & (1u << k)) return tsr_fail(err, TSR_EPROTO, "%s: %s", pending.op, pending.names[k]);
    return word != 0 ? tsr_fail(err, TSR_EPROTO, "%s: bad input (flags %#x)", pending.op, word) : 0;
  }
  for (int k = 0; k < n; k++) {
    int info = pending.words[k];
    if (info == 0) continue;
    if (info < 0)
      return tsr_fail(err, TSR_EINTERNAL, "%s: cuSOLVER %s rejected argument %d (info %d)", pending.op,
                      pending.names[k], -info, info);
    return tsr_fail(err, TSR_EINVAL, "%s: cuSOLVER %s did not converge (info %d)", pending.op, pending.names[k], info);
  }
  return 0;
}
