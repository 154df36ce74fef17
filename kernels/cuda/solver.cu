/* kernels/cuda/solver.cu — qr and svd on the GPU through cuSOLVER, packed
 * like the CPU ops (cpu/lapack.c):
 *   qr:  m×n → (m+n)×n, reduced Q (m×n, zero columns past min(m,n)) on top
 *        of R (n×n, zero rows past min(m,n)); geqrf then orgqr.
 *   svd: m×n → m·r + r + r·n, r = min(m,n): U (m×r), S (r, descending), Vt.
 * Integer inputs are converted to f64 first, as on the CPU.
 *
 * cuSOLVER is column-major. A row-major m×n matrix read column-major is
 * its transpose, so the SVD works on the tall one of A and Aᵀ — T, p×q with
 * p >= q, column-major — and maps T = U_T S V_Tᵀ back:
 *   m > n:  T = A (one transpose in):     U = U_T,  Vt = V_Tᵀ
 *   m <= n: T = Aᵀ (A's bytes as they are): U = V_T,  Vt = U_Tᵀ
 * Algorithms for T (param `algo`, default "auto" = qr_gesvdj, from the
 * measurements in docs/kernels-cuda.md): "gesvd", "gesvdj" (Jacobi),
 * "qr_gesvd" and "qr_gesvdj" (T = QR, the SVD of the q×q R, U_T = Q·U_R).
 *
 * Failure without synchronizing: every routine writes its info into a
 * device array; a last kernel fills the whole output with NaN when any
 * info is nonzero (no convergence, a bad argument), and the array is
 * copied to pinned host memory for tsr_cuda_deferred_check, which the
 * worker calls after the stream has finished: the task then fails naming
 * the routine and its info, rather than storing NaN. Param `max_sweeps`
 * (svd, default 100) bounds gesvdj's sweeps. Signs of Q's columns
 * and of singular vectors are cuSOLVER's; the same input gives the same
 * bytes on one GPU model. */
#include <string.h>

#include "common.cuh"

/* ---------- cuSOLVER by type ---------- */

static cusolverStatus_t geqrf_bs(cusolverDnHandle_t h, int m, int n, float *a, int lda, int *lw)
{
  return cusolverDnSgeqrf_bufferSize(h, m, n, a, lda, lw);
}
static cusolverStatus_t geqrf_bs(cusolverDnHandle_t h, int m, int n, double *a, int lda, int *lw)
{
  return cusolverDnDgeqrf_bufferSize(h, m, n, a, lda, lw);
}
static cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, float *a, int lda, float *tau, float *w, int lw,
                              int *info)
{
  return cusolverDnSgeqrf(h, m, n, a, lda, tau, w, lw, info);
}
static cusolverStatus_t geqrf(cusolverDnHandle_t h, int m, int n, double *a, int lda, double *tau, double *w, int lw,
                              int *info)
{
  return cusolverDnDgeqrf(h, m, n, a, lda, tau, w, lw, info);
}
static cusolverStatus_t orgqr_bs(cusolverDnHandle_t h, int m, int n, int k, float *a, int lda, float *tau, int *lw)
{
  return cusolverDnSorgqr_bufferSize(h, m, n, k, a, lda, tau, lw);
}
static cusolverStatus_t orgqr_bs(cusolverDnHandle_t h, int m, int n, int k, double *a, int lda, double *tau, int *lw)
{
  return cusolverDnDorgqr_bufferSize(h, m, n, k, a, lda, tau, lw);
}
static cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, float *a, int lda, float *tau, float *w,
                              int lw, int *info)
{
  return cusolverDnSorgqr(h, m, n, k, a, lda, tau, w, lw, info);
}
static cusolverStatus_t orgqr(cusolverDnHandle_t h, int m, int n, int k, double *a, int lda, double *tau, double *w,
                              int lw, int *info)
{
  return cusolverDnDorgqr(h, m, n, k, a, lda, tau, w, lw, info);
}
static cusolverStatus_t gesvd_bs(cusolverDnHandle_t h, int m, int n, float *, int *lw)
{
  return cusolverDnSgesvd_bufferSize(h, m, n, lw);
}
static cusolverStatus_t gesvd_bs(cusolverDnHandle_t h, int m, int n, double *, int *lw)
{
  return cusolverDnDgesvd_bufferSize(h, m, n, lw);
}
static cusolverStatus_t gesvd(cusolverDnHandle_t h, int m, int n, float *a, float *s, float *u, float *vt, float *w,
                              int lw, float *rw, int *info)
{
  return cusolverDnSgesvd(h, 'S', 'S', m, n, a, m, s, u, m, vt, n, w, lw, rw, info);
}
static cusolverStatus_t gesvd(cusolverDnHandle_t h, int m, int n, double *a, double *s, double *u, double *vt,
                              double *w, int lw, double *rw, int *info)
{
  return cusolverDnDgesvd(h, 'S', 'S', m, n, a, m, s, u, m, vt, n, w, lw, rw, info);
}
static cusolverStatus_t gesvdj_bs(cusolverDnHandle_t h, int m, int n, float *a, float *s, float *u, float *v, int *lw,
                                  gesvdjInfo_t j)
{
  return cusolverDnSgesvdj_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, a, m, s, u, m, v, n, lw, j);
}
static cusolverStatus_t gesvdj_bs(cusolverDnHandle_t h, int m, int n, double *a, double *s, double *u, double *v,
                                  int *lw, gesvdjInfo_t j)
{
  return cusolverDnDgesvdj_bufferSize(h, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, a, m, s, u, m, v, n, lw, j);
}
static cusolverStatus_t gesvdj(cusolverDnHandle_t h, int m, int n, float *a, float *s, float *u, float *v, float *w,
                               int lw, int *info, gesvdjInfo_t j)
{
  return cusolverDnSgesvdj(h, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, a, m, s, u, m, v, n, w, lw, info, j);
}
static cusolverStatus_t gesvdj(cusolverDnHandle_t h, int m, int n, double *a, double *s, double *u, double *v,
                               double *w, int lw, int *info, gesvdjInfo_t j)
{
  return cusolverDnDgesvdj(h, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, a, m, s, u, m, v, n, w, lw, info, j);
}

/* gesvdj's settings (the defaults: tolerance machine epsilon, 100
 * sweeps), one per thread and never freed: cuSOLVER may still write its
 * residual into it after the call returns, so it must outlive the work. */
static gesvdjInfo_t jacobi_params(int max_sweeps)
{
  static thread_local gesvdjInfo_t params = nullptr;
  if (params == nullptr && cusolverDnCreateGesvdjInfo(&params) != CUSOLVER_STATUS_SUCCESS) params = nullptr;
  if (params != nullptr && cusolverDnXgesvdjSetMaxSweeps(params, max_sweeps) != CUSOLVER_STATUS_SUCCESS) return nullptr;
  return params;
}

/* ---------- small kernels ---------- */

/* dst row-major (rows × cols, row stride ldd) from col-major src (ld lds):
 * dst[i, j] = src[i + j·lds] for j < keep, 0 for keep <= j < cols; with
 * upper, only j >= i is taken (R's triangle), the rest 0. */
template <class T>
__global__ void from_colmajor_kernel(const T *src, int64_t lds, T *dst, int64_t ldd, int64_t rows, int64_t cols,
                                     int64_t keep, int64_t keep_rows, int upper)
{
  TSR_GRID_STRIDE(e, rows * cols)
  {
    int64_t i = e / cols, j = e - i * cols;
    bool in = j < keep && i < keep_rows && (!upper || j >= i);
    dst[i * ldd + j] = in ? src[i + j * lds] : (T)0;
  }
}

template <class T>
__global__ void poison_kernel(const int *info, int ninfo, T *data, int64_t n)
{
  bool bad = false;
  for (int k = 0; k < ninfo; k++) bad |= info[k] != 0;
  if (!bad) return;
  TSR_GRID_STRIDE(i, n) data[i] = (T)NAN;
}

int tsr_cuda_poison_on_info(const int *info, int ninfo, tsr_dtype dt, void *data, int64_t n, cudaStream_t s,
                            tsr_errbuf *err)
{
  if (dt == TSR_F32) poison_kernel<float><<<tsr_grid(n, 256), 256, 0, s>>>(info, ninfo, (float *)data, n);
  else poison_kernel<double><<<tsr_grid(n, 256), 256, 0, s>>>(info, ninfo, (double *)data, n);
  return TSR_CUDA_LAUNCHED("poison_kernel", err);
}

/* A row-major copy of the input in T (converted from an integer dtype),
 * in scratch: the solvers overwrite their input. */
template <class T>
static int input_copy(const tsr_buf *in, tsr_scratch &scr, T **a_p, cudaStream_t s, tsr_errbuf *err)
{
  int64_t n = tsr_meta_count(&in->meta);
  int rc = scr.get(n, a_p, "a copy of the input", err);
  return rc != 0 ? rc : tsr_cuda_convert(sizeof(T) == 8 ? TSR_F64 : TSR_F32, in->meta.dtype, in->data, *a_p, n, s, err);
}

/* ---------- qr ---------- */

template <class T>
static int qr_run(const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  cusolverDnHandle_t h = (cusolverDnHandle_t)gpu->cusolver;
  cudaStream_t s = tsr_stream(gpu);
  int m = (int)in->meta.shape[0], n = (int)in->meta.shape[1], k = m < n ? m : n, lw1 = 0, lw2 = 0;
  tsr_scratch scr(gpu);
  T *a = nullptr, *acm = nullptr, *tau = nullptr, *work = nullptr;
  int *info = nullptr;
  int rc = input_copy<T>(in, scr, &a, s, err);
  if (rc == 0) rc = scr.get((int64_t)m * n, &acm, "qr's column-major copy", err);
  if (rc == 0) rc = scr.get(k, &tau, "qr's tau", err);
  if (rc == 0) rc = scr.get(2, &info, "qr's info", err);
  if (rc == 0) rc = tsr_cuda_transpose(a, acm, m, n, sizeof(T), s, err);
  if (rc == 0) rc = TSR_CUDA_CHECK(geqrf_bs(h, m, n, acm, m, &lw1), err);
  if (rc == 0) rc = TSR_CUDA_CHECK(orgqr_bs(h, m, k, k, acm, m, tau, &lw2), err);
  if (rc == 0) rc = scr.get(lw1 > lw2 ? lw1 : lw2, &work, "qr's workspace", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(info, 0, 2 * sizeof(int), s), err);
  if (rc == 0) rc = TSR_CUDA_CHECK(geqrf(h, m, n, acm, m, tau, work, lw1 > lw2 ? lw1 : lw2, info), err);
  T *q = (T *)out->data, *r = q + (int64_t)m * n;
  if (rc == 0) {  /* R: the upper triangle of the first k rows, zero below */
    from_colmajor_kernel<T><<<tsr_grid((int64_t)n * n, 256), 256, 0, s>>>(acm, m, r, n, n, n, n, k, 1);
    rc = TSR_CUDA_LAUNCHED("from_colmajor_kernel", err);
  }
  if (rc == 0) rc = TSR_CUDA_CHECK(orgqr(h, m, k, k, acm, m, tau, work, lw1 > lw2 ? lw1 : lw2, info + 1), err);
  if (rc == 0) {  /* Q: k columns, zero padding up to n */
    from_colmajor_kernel<T><<<tsr_grid((int64_t)m * n, 256), 256, 0, s>>>(acm, m, q, n, m, n, k, m, 0);
    rc = TSR_CUDA_LAUNCHED("from_colmajor_kernel", err);
  }
  if (rc == 0) rc = tsr_cuda_poison_on_info(info, 2, sizeof(T) == 8 ? TSR_F64 : TSR_F32, out->data,
                                           tsr_meta_count(&out->meta), s, err);
  static const char *const names[2] = {"geqrf", "orgqr"};
  if (rc == 0) rc = tsr_cuda_defer_info("qr", info, 2, names, s, err);
  return rc;
}

TSR_CUDA_VARIANT(qr)
{
  (void)p, (void)n_in;
  if (tsr_meta_count(&in[0].meta) == 0) {
    int rc = TSR_CUDA_CHECK(cudaMemsetAsync(out->data, 0, out->nbytes, tsr_stream(gpu)), err);
    return rc == 0 ? 0 : tsr_cuda_fail_op("qr", rc, err);
  }
  int rc = out->meta.dtype == TSR_F64 ? qr_run<double>(in, out, gpu, err) : qr_run<float>(in, out, gpu, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("qr", rc, err);
}

/* ---------- svd ---------- */

typedef enum { ALGO_AUTO, ALGO_GESVD, ALGO_GESVDJ, ALGO_QR_GESVD, ALGO_QR_GESVDJ } svd_algo;

/* What the SVD steps share. */
template <class T>
struct svd_job {
  const tsr_gpu_ctx *gpu;
  cusolverDnHandle_t h;
  cudaStream_t s;
  tsr_scratch *scr;
  int *info;  /* 4 slots, one per solver call */
  int sweeps; /* gesvdj's most sweeps */
};

/* gesvd or gesvdj of a (p×q column-major, p >= q, destroyed): s[q], u
 * (p×q column-major) and w (q×q column-major): V for gesvdj, Vᵀ for gesvd. */
template <class T>
static int svd_plain(const svd_job<T> &j, bool jacobi, int p, int q, T *a, T *sv, T *u, T *w, int *info,
                     tsr_errbuf *err)
{
  int lw = 0;
  T *work = nullptr, *rwork = nullptr;
  gesvdjInfo_t params = jacobi ? jacobi_params(j.sweeps) : nullptr;
  if (jacobi && params == nullptr) return tsr_fail(err, TSR_ENOMEM, "cusolverDnCreateGesvdjInfo failed");
  int rc = jacobi ? TSR_CUDA_CHECK(gesvdj_bs(j.h, p, q, a, sv, u, w, &lw, params), err)
                  : TSR_CUDA_CHECK(gesvd_bs(j.h, p, q, a, &lw), err);
  if (rc == 0) rc = j.scr->get(lw, &work, "the SVD's workspace", err);
  if (rc == 0 && !jacobi) rc = j.scr->get(q, &rwork, "gesvd's rwork", err);
  if (rc != 0) return rc;
  if (jacobi) return TSR_CUDA_CHECK(gesvdj(j.h, p, q, a, sv, u, w, work, lw, info, params), err);
  return TSR_CUDA_CHECK(gesvd(j.h, p, q, a, sv, u, w, work, lw, rwork, info), err);
}

/* The same through a QR first: a = QR; the buffer holding R row-major is
 * Rᵀ column-major, and Rᵀ = V_R S U_Rᵀ, so its SVD yields V (= V_R, into
 * w, column-major: no transposed variant) and U_R (or U_Rᵀ with gesvd);
 * then u = Q·U_R. */
template <class T>
static int svd_via_qr(const svd_job<T> &j, bool jacobi, int p, int q, T *a, T *sv, T *u, T *w, tsr_errbuf *err)
{
  int lw1 = 0, lw2 = 0;
  T *tau = nullptr, *work = nullptr, *r = nullptr, *ur = nullptr;
  int rc = j.scr->get(q, &tau, "tau", err);
  if (rc == 0) rc = j.scr->get((int64_t)q * q, &r, "R", err);
  if (rc == 0) rc = j.scr->get((int64_t)q * q, &ur, "R's singular vectors", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(geqrf_bs(j.h, p, q, a, p, &lw1), err);
  if (rc == 0) rc = TSR_CUDA_CHECK(orgqr_bs(j.h, p, q, q, a, p, tau, &lw2), err);
  int lw = lw1 > lw2 ? lw1 : lw2;
  if (rc == 0) rc = j.scr->get(lw, &work, "QR's workspace", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(geqrf(j.h, p, q, a, p, tau, work, lw, j.info + 1), err);
  if (rc == 0) {  /* r = R row-major, zero below the diagonal */
    from_colmajor_kernel<T><<<tsr_grid((int64_t)q * q, 256), 256, 0, j.s>>>(a, p, r, q, q, q, q, q, 1);
    rc = TSR_CUDA_LAUNCHED("from_colmajor_kernel", err);
  }
  if (rc == 0) rc = TSR_CUDA_CHECK(orgqr(j.h, p, q, q, a, p, tau, work, lw, j.info + 2), err);
  if (rc == 0) rc = svd_plain<T>(j, jacobi, q, q, r, sv, w, ur, j.info + 3, err);
  /* u (p×q column-major) is, row-major, [q][p] = U_Rᵀ · Qᵀ, and Q's bytes
   * row-major are Qᵀ; ur row-major is U_Rᵀ (gesvdj's U_R column-major) or
   * U_R (gesvd's U_Rᵀ column-major). */
  if (rc == 0)
    rc = tsr_cuda_gemm(j.gpu, sizeof(T) == 8 ? TSR_F64 : TSR_F32, !jacobi, false, q, p, q, ur, q, a, p, 0.0, u, p,
                       false, err);
  return rc;
}

/* The algorithm for T (p×q, p >= q) when the task does not name one.
 * Measured on an H200 (docs/kernels-cuda.md): QR then Jacobi on R is the
 * fastest or within 4% of it for every shape tried — far ahead for tall
 * T (100000×50 f64: 4.5 ms against 6.0 for plain Jacobi), even for square
 * ones (3000² f32: 530 ms against 543) — and gesvd (QR iteration) is 1.2
 * to 2.6 times slower everywhere. */
static svd_algo auto_algo(int64_t p, int64_t q)
{
  (void)p, (void)q;
  return ALGO_QR_GESVDJ;
}

static int svd_algo_param(const tsr_params *prm, svd_algo *algo_p, tsr_errbuf *err)
{
  static const char *names[] = {"auto", "gesvd", "gesvdj", "qr_gesvd", "qr_gesvdj"};
  const char *name = "auto";
  if (tsr_params_find(prm, "algo") != nullptr) {
    int rc = tsr_params_get_str(prm, "algo", &name, err);
    if (rc != 0) return tsr_k_param_fail("svd", rc, err);
  }
  for (int i = 0; i < 5; i++)
    if (strcmp(name, names[i]) == 0) {
      *algo_p = (svd_algo)i;
      return 0;
    }
  return tsr_fail(err, TSR_EINVAL, "svd: algo '%s' is not auto, gesvd, gesvdj, qr_gesvd or qr_gesvdj", name);
}

/* Writes U, S, Vt of A (m×n) from T's factors (see the top). */
template <class T>
static int svd_unpack(int m, int n, int p, int q, const T *u, const T *sv, const T *w, bool w_is_vt, T *out,
                      cudaStream_t s, tsr_errbuf *err)
{
  T *U = out, *S = U + (int64_t)m * q, *Vt = S + q;
  size_t es = sizeof(T);
  int rc = TSR_CUDA_CHECK(cudaMemcpyAsync(S, sv, (size_t)q * es, cudaMemcpyDeviceToDevice, s), err);
  bool wide = m <= n;
  T *w_dst = wide ? U : Vt;  /* V_T row-major is U when wide, V_Tᵀ row-major is Vt when tall */
  if (rc == 0 && w_is_vt == wide)
    rc = TSR_CUDA_CHECK(cudaMemcpyAsync(w_dst, w, (size_t)q * q * es, cudaMemcpyDeviceToDevice, s), err);
  else if (rc == 0)
    rc = tsr_cuda_transpose(w, w_dst, q, q, es, s, err);
  if (rc == 0 && wide)  /* Vt = U_Tᵀ: u's bytes row-major */
    rc = TSR_CUDA_CHECK(cudaMemcpyAsync(Vt, u, (size_t)p * q * es, cudaMemcpyDeviceToDevice, s), err);
  else if (rc == 0)  /* U = U_T row-major */
    rc = tsr_cuda_transpose(u, U, q, p, es, s, err);
  return rc;
}

template <class T>
static int svd_run(const tsr_buf *in, tsr_buf *out, svd_algo algo, int sweeps, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  int m = (int)in->meta.shape[0], n = (int)in->meta.shape[1], p = m > n ? m : n, q = m > n ? n : m;
  tsr_scratch scr(gpu);
  svd_job<T> j = {gpu, (cusolverDnHandle_t)gpu->cusolver, tsr_stream(gpu), &scr, nullptr, sweeps};
  T *a = nullptr, *t = nullptr, *u = nullptr, *sv = nullptr, *w = nullptr;
  int rc = input_copy<T>(in, scr, &a, j.s, err);
  if (rc == 0 && m > n) rc = scr.get((int64_t)p * q, &t, "the SVD's column-major input", err);
  if (rc == 0 && m > n) rc = tsr_cuda_transpose(a, t, m, n, sizeof(T), j.s, err);
  if (m <= n) t = a;
  if (rc == 0) rc = scr.get((int64_t)p * q, &u, "U", err);
  if (rc == 0) rc = scr.get(q, &sv, "S", err);
  if (rc == 0) rc = scr.get((int64_t)q * q, &w, "V", err);
  if (rc == 0) rc = scr.get(4, &j.info, "the SVD's info", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(j.info, 0, 4 * sizeof(int), j.s), err);
  if (rc != 0) return rc;
  if (algo == ALGO_AUTO) algo = auto_algo(p, q);
  bool jacobi = algo == ALGO_GESVDJ || algo == ALGO_QR_GESVDJ, via_qr = algo == ALGO_QR_GESVD || algo == ALGO_QR_GESVDJ;
  rc = via_qr ? svd_via_qr<T>(j, jacobi, p, q, t, sv, u, w, err) : svd_plain<T>(j, jacobi, p, q, t, sv, u, w, j.info, err);
  if (rc == 0) rc = svd_unpack<T>(m, n, p, q, u, sv, w, !via_qr && !jacobi, (T *)out->data, j.s, err);
  if (rc == 0) rc = tsr_cuda_poison_on_info(j.info, 4, sizeof(T) == 8 ? TSR_F64 : TSR_F32, out->data,
                                           tsr_meta_count(&out->meta), j.s, err);
  static const char *const names[2][4] = {{"gesvd", "geqrf", "orgqr", "gesvd (of R)"},
                                          {"gesvdj", "geqrf", "orgqr", "gesvdj (of R)"}};
  if (rc == 0) rc = tsr_cuda_defer_info("svd", j.info, 4, names[jacobi], j.s, err);
  return rc;
}

TSR_CUDA_VARIANT(svd)
{
  (void)n_in;
  svd_algo algo = ALGO_AUTO;
  int64_t sweeps = 100;  /* cuSOLVER's default */
  int rc = svd_algo_param(p, &algo, err);
  if (rc == 0 && tsr_params_find(p, "max_sweeps") != nullptr && (rc = tsr_params_get_int(p, "max_sweeps", &sweeps, err)) != 0)
    return tsr_k_param_fail("svd", rc, err);
  if (rc == 0 && (sweeps < 1 || sweeps > 1000000))
    return tsr_fail(err, TSR_EINVAL, "svd: max_sweeps must be 1 to 1000000, got %lld", (long long)sweeps);
  if (rc != 0 || out->nbytes == 0) return rc;
  rc = out->meta.dtype == TSR_F64 ? svd_run<double>(in, out, algo, (int)sweeps, gpu, err)
                                  : svd_run<float>(in, out, algo, (int)sweeps, gpu, err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("svd", rc, err);
}
