/* kernels/cuda/sparse.cu — CUDA variants of the sparse ops (kernels/cpu/
 * csr_map.c, csr_stats.c, csr_matmul.c): csr_map, csr_normalize_rows,
 * csr_sum and csr_matmul. csr_gather, csr_from_dense (their outputs shrink
 * to a size only the data knows) stay on the host (kernels.h).
 *
 * Sizes. A variant never synchronizes, so the host never reads a chunk's
 * header. What it needs comes from the task: rows and cols (`shape`), the
 * chunk's bytes (its meta), and for csr_map / csr_normalize_rows the
 * values' dtype (`in_dtype`, which makes their output exactly the input's
 * size). nnz and the value dtype are read from the header by the kernels
 * themselves; the host sizes grids and scratch with the bound
 * tsr_k_csr_nnz_bound(bytes, rows, 1) and the kernels stop at the real nnz.
 *
 * Bad chunks. Every kernel checks the header against the task (magic,
 * version, rows, cols, dtype, nnz against the bytes, indptr's ends) and
 * guards every index it follows, so a malformed chunk never makes a kernel
 * read or write outside its buffers; what it finds is ORed into a status
 * word that tsr_cuda_defer_flags hands to tsr_cuda_deferred_check, which
 * fails the task with the CPU op's kind of message. The output of such a
 * task is garbage and is not kept.
 *
 * Results (docs/singlecell.md): every output element is computed by one
 * thread in the CPU op's order, with the CPU op's expression (--fmad=false),
 * so csr_normalize_rows, csr_sum, csr_matmul and csr_map with fn "none" give
 * the CPU's bytes. csr_map's log1p/expm1 use CUDA's libm (log1pf: 1 ulp),
 * not glibc's: within 2 ulp of the CPU.
 *
 * Per-column work (csr_sum axis 0, csr_matmul's Xᵀ·C) needs the stored
 * values column by column in row order: a stable radix sort (CUB) of the
 * positions by column builds that order without float atomics, so each
 * column's sum is one thread's loop in the CPU's order. Scratch: about
 * 20 bytes per stored value. cuSPARSE SpMM is not used: it takes 32-bit or
 * 64-bit indptr and indices together (ours are 64 and 32), it cannot apply
 * the per-column affine steps, and its sums are not in the CPU's order;
 * for PCA's skinny B (k <= a few hundred) the hand kernels read X once per
 * output row / column anyway. */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "csr_dev.cuh"

extern "C" {
#include "cpu/csr_ops.h"
}

namespace {

enum { BAD_HEADER = 1, BAD_INDPTR = 2, BAD_COLUMN = 4 };
const char *const kFlagNames[] = {
  "the CSR chunk on the device does not match the task (header, shape, dtype or size)",
  "CSR chunk: indptr decreases or leaves 0..nnz",
  "CSR chunk: a column index is outside 0..cols-1",
};

/* ---------- the chunk on the device ---------- */

/* The view of the chunk at p (nbytes) if its header says rows x cols and
 * fits the bytes, with indptr running from 0 to nnz; false otherwise. */
__device__ bool dcsr_view(const unsigned char *p, int64_t nbytes, int64_t rows, int64_t cols, dcsr *v)
{
  return dcsr_parse(p, nbytes, v) && v->rows == rows && v->cols == cols && v->indptr[0] == 0 &&
         v->indptr[rows] == v->nnz;
}

/* Value i as double, like tsr_k_csr_value. */
__device__ __forceinline__ double dcsr_value(const dcsr &v, int64_t i)
{
  switch (v.dt) {
  case TSR_F32: return ((const float *)v.values)[i];
  case TSR_F64: return ((const double *)v.values)[i];
  case TSR_I32: return ((const int32_t *)v.values)[i];
  case TSR_I64: return (double)((const int64_t *)v.values)[i];
  default: return v.values[i];
  }
}

/* Row r's range [lo, hi), or false (flagged) when indptr is broken there. */
__device__ __forceinline__ bool dcsr_row(const dcsr &v, int64_t r, int64_t *lo, int64_t *hi, int *status)
{
  *lo = v.indptr[r], *hi = v.indptr[r + 1];
  if (*lo < 0 || *hi < *lo || *hi > v.nnz) {
    atomicOr(status, BAD_INDPTR);
    return false;
  }
  return true;
}

#define VIEW_OR_FLAG(p, nbytes, rows, cols, v, status)                              \
  dcsr v;                                                                          \
  if (!dcsr_view((p), (nbytes), (rows), (cols), &v)) {                             \
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr((status), BAD_HEADER);       \
    return;                                                                        \
  }

/* The chunk's geometry as the host knows it. */
struct host_csr {
  const unsigned char *p;
  int64_t nbytes, rows, cols, nnz_bound;
};

/* Scratch status word, zeroed on the stream. */
int status_word(tsr_scratch &s, const tsr_gpu_ctx *gpu, int **w, tsr_errbuf *err)
{
  int rc = s.get<int>(1, w, "the CSR status word", err);
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(*w, 0, sizeof(int), tsr_stream(gpu)), err);
  return rc;
}

int defer_status(const char *op, const int *w, const tsr_gpu_ctx *gpu, tsr_errbuf *err)
{
  return tsr_cuda_defer_flags(op, w, kFlagNames, 3, tsr_stream(gpu), err);
}

/* rows, cols from `shape`; the bound of nnz from the bytes. */
int host_view(const char *op, const tsr_params *p, const tsr_buf *b, host_csr *h, tsr_errbuf *err)
{
  int rc = tsr_k_csr_shape_param(op, p, &b->meta, &h->rows, &h->cols, err);
  if (rc != 0) return rc;
  h->p = (const unsigned char *)b->data, h->nbytes = (int64_t)b->nbytes;
  h->nnz_bound = tsr_k_csr_nnz_bound(h->nbytes, h->rows, 1);
  /* 32-bit positions and rows in the sort and the row ids. */
  if (h->rows >= INT32_MAX || h->nnz_bound >= INT32_MAX) return TSR_ENODEV;
  return 0;
}

/* ---------- csr_map, csr_normalize_rows ---------- */

/* Header, indptr, indices and the values' pad of the output, which has the
 * input's layout (same nnz, values of the same width). */
__global__ void copy_pattern_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int out_dt,
                                    unsigned char *out, int *status)
{
  VIEW_OR_FLAG(in, nbytes, rows, cols, v, status);
  int64_t es = dcsr_es(v.dt);
  if (blockIdx.x == 0 && threadIdx.x < TSR_CSR_HEADER) out[threadIdx.x] = threadIdx.x == 5 ? (unsigned char)out_dt : in[threadIdx.x];
  int64_t *indptr = (int64_t *)(out + TSR_CSR_HEADER);
  int32_t *indices = (int32_t *)(out + TSR_CSR_HEADER + 8 * (rows + 1));
  unsigned char *values = out + TSR_CSR_HEADER + 8 * (rows + 1) + dcsr_pad8(4 * v.nnz);
  TSR_GRID_STRIDE(r, rows + 1) {
    indptr[r] = v.indptr[r];
    if (r < rows && v.indptr[r + 1] < v.indptr[r]) atomicOr(status, BAD_INDPTR);
  }
  TSR_GRID_STRIDE(i, dcsr_pad8(4 * v.nnz) / 4) {
    int32_t c = i < v.nnz ? v.indices[i] : 0;
    if (c < 0 || c >= cols) atomicOr(status, BAD_COLUMN);
    indices[i] = c;
  }
  TSR_GRID_STRIDE(b, dcsr_pad8(es * v.nnz) - es * v.nnz) values[es * v.nnz + b] = 0;
}

__global__ void map_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int out_dt, int fn,
                           double factor, unsigned char *out, int *status)
{
  VIEW_OR_FLAG(in, nbytes, rows, cols, v, status);
  void *values = out + (v.values - in);  /* same layout */
  TSR_GRID_STRIDE(i, v.nnz) {
    double x = dcsr_value(v, i) * factor;
    if (out_dt == TSR_F32) {
      float f = (float)x;
      ((float *)values)[i] = fn == 1 ? log1pf(f) : fn == 2 ? expm1f(f) : f;
    } else {
      ((double *)values)[i] = fn == 1 ? log1p(x) : fn == 2 ? expm1(x) : x;
    }
  }
}

/* A warp per row: the row's divisor once, its values by the lanes. */
__global__ void normalize_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int out_dt,
                                 const double *tot, double target, unsigned char *out, int *status)
{
  VIEW_OR_FLAG(in, nbytes, rows, cols, v, status);
  void *values = out + (v.values - in);
  int lane = threadIdx.x & 31;
  for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
    int64_t lo, hi;
    if (!dcsr_row(v, r, &lo, &hi, status)) continue;
    float df = (float)tot[r] / (float)target;
    double dd = tot[r] / target;
    for (int64_t i = lo + lane; i < hi; i += 32) {
      double x = dcsr_value(v, i);
      if (out_dt == TSR_F32) ((float *)values)[i] = df == 0.0f ? (float)x : (float)x / df;
      else ((double *)values)[i] = dd == 0.0 ? x : x / dd;
    }
  }
}

/* The parts both ops share: the exact size (else ENODEV: the host runs
 * the CPU op, which knows the real size afterwards), the status word and
 * the pattern copy. */
int same_pattern_start(const char *op, const tsr_params *p, const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                       tsr_scratch &s, host_csr *h, tsr_dtype *out_dt, int **status, tsr_errbuf *err)
{
  tsr_dtype in_dt;
  int rc = host_view(op, p, &in[0], h, err);
  if (rc == 0) rc = tsr_k_csr_same_width(op, p, &in_dt, err);
  if (rc == 0 && (in_dt == TSR_DTYPE_NONE || out->nbytes != in[0].nbytes)) rc = TSR_ENODEV;
  if (rc == 0) rc = tsr_k_dtype_param(op, p, TSR_F32, out_dt, err);
  if (rc == 0) rc = status_word(s, gpu, status, err);
  if (rc != 0) return rc;
  h->nnz_bound = tsr_k_csr_nnz_bound(h->nbytes, h->rows, tsr_dtype_size(in_dt));
  int64_t n = h->rows + 1 > h->nnz_bound ? h->rows + 1 : h->nnz_bound;
  copy_pattern_kernel<<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>(h->p, h->nbytes, h->rows, h->cols, *out_dt,
                                                                     (unsigned char *)out->data, *status);
  return TSR_CUDA_LAUNCHED("copy_pattern_kernel", err);
}

}  // namespace

TSR_CUDA_VARIANT(csr_map)
{
  (void)n_in;
  host_csr h;
  tsr_dtype dt;
  int *status = nullptr;
  double factor = 1.0;
  tsr_scratch s(gpu);
  const tsr_param *q = tsr_params_find(p, "fn");
  const char *name = q != NULL && q->type == TSR_PARAM_STR ? q->s : "none";
  int fn = strcmp(name, "none") == 0 ? 0 : strcmp(name, "log1p") == 0 ? 1 : strcmp(name, "expm1") == 0 ? 2 : -1;
  if (fn < 0) return tsr_fail(err, TSR_EINVAL, "csr_map: unknown fn '%s' (none, log1p, expm1)", name);
  int rc = tsr_params_opt_float(p, "factor", 1.0, &factor, err);
  if (rc == 0) rc = same_pattern_start("csr_map", p, in, out, gpu, s, &h, &dt, &status, err);
  if (rc != 0) return rc;
  map_kernel<<<tsr_grid(h.nnz_bound, 256), 256, 0, tsr_stream(gpu)>>>(h.p, h.nbytes, h.rows, h.cols, dt, fn, factor,
                                                                      (unsigned char *)out->data, status);
  rc = TSR_CUDA_LAUNCHED("map_kernel", err);
  if (rc == 0) rc = defer_status("csr_map", status, gpu, err);
  return rc;
}

TSR_CUDA_VARIANT(csr_normalize_rows)
{
  (void)n_in;
  host_csr h;
  tsr_dtype dt;
  int *status = nullptr;
  double target = 1.0;
  tsr_scratch s(gpu);
  int rc = tsr_params_get_float(p, "target", &target, err);
  if (rc != 0) return tsr_k_param_fail("csr_normalize_rows", rc, err);
  rc = same_pattern_start("csr_normalize_rows", p, in, out, gpu, s, &h, &dt, &status, err);
  if (rc != 0) return rc;
  normalize_kernel<<<tsr_grid(h.rows * 32, 256), 256, 0, tsr_stream(gpu)>>>(
      h.p, h.nbytes, h.rows, h.cols, dt, (const double *)in[1].data, target, (unsigned char *)out->data, status);
  rc = TSR_CUDA_LAUNCHED("normalize_kernel", err);
  if (rc == 0) rc = defer_status("csr_normalize_rows", status, gpu, err);
  return rc;
}

namespace {

/* ---------- the column order (CSC permutation) ---------- */

/* Column-major order of the stored values: perm[colptr[j] .. colptr[j+1])
 * are the positions of column j in increasing row order; rowid[i] is the
 * row of position i. */
struct csc_order {
  const int32_t *perm, *colptr, *rowid;
};

/* key[i] = column of position i (cols for positions past nnz and bad
 * columns, which sort last and fall outside every column), pos[i] = i. */
__global__ void csc_keys_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int64_t bound,
                                uint32_t *key, int32_t *pos, int *status)
{
  dcsr v;
  bool ok = dcsr_view(in, nbytes, rows, cols, &v);
  if (!ok && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(status, BAD_HEADER);
  TSR_GRID_STRIDE(i, bound) {
    int32_t c = ok && i < v.nnz ? v.indices[i] : (int32_t)cols;
    if (ok && i < v.nnz && (c < 0 || c >= cols)) atomicOr(status, BAD_COLUMN), c = (int32_t)cols;
    key[i] = (uint32_t)c;
    pos[i] = (int32_t)i;
  }
}

/* rowid of every stored value: a warp per row. */
__global__ void rowid_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int32_t *rowid,
                             int *status)
{
  VIEW_OR_FLAG(in, nbytes, rows, cols, v, status);
  int lane = threadIdx.x & 31;
  for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
    int64_t lo, hi;
    if (!dcsr_row(v, r, &lo, &hi, status)) continue;
    for (int64_t i = lo + lane; i < hi; i += 32) rowid[i] = (int32_t)r;
  }
}

/* colptr[j] = first sorted position whose key is >= j (binary search). */
__global__ void colptr_kernel(const uint32_t *key, int64_t bound, int64_t cols, int32_t *colptr)
{
  TSR_GRID_STRIDE(j, cols + 1) {
    int64_t lo = 0, hi = bound;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (key[mid] < (uint32_t)j) lo = mid + 1;
      else hi = mid;
    }
    colptr[j] = (int32_t)lo;
  }
}

int build_csc(const host_csr &h, const tsr_gpu_ctx *gpu, tsr_scratch &s, int *status, csc_order *o, tsr_errbuf *err)
{
  cudaStream_t st = tsr_stream(gpu);
  int64_t n = h.nnz_bound > 0 ? h.nnz_bound : 1;
  uint32_t *key = nullptr, *key_sorted = nullptr;
  int32_t *pos = nullptr, *perm = nullptr, *colptr = nullptr, *rowid = nullptr;
  int bits = 1;
  while (bits < 32 && ((int64_t)1 << bits) <= h.cols) bits++;
  size_t temp_bytes = 0;
  int rc = TSR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key, key_sorted, pos, perm, (int)n, 0, bits, st), err);
  void *temp = nullptr;
  if (rc == 0) rc = s.get<uint32_t>(n, &key, "CSR column keys", err);
  if (rc == 0) rc = s.get<uint32_t>(n, &key_sorted, "CSR column keys", err);
  if (rc == 0) rc = s.get<int32_t>(n, &pos, "CSR positions", err);
  if (rc == 0) rc = s.get<int32_t>(n, &perm, "CSR column order", err);
  if (rc == 0) rc = s.get<int32_t>(n, &rowid, "CSR row ids", err);
  if (rc == 0) rc = s.get<int32_t>(h.cols + 1, &colptr, "CSR column starts", err);
  if (rc == 0) rc = s.get(temp_bytes, &temp, "the CUB radix sort", err);
  /* Row 0 where a broken indptr leaves a position unassigned: in bounds. */
  if (rc == 0) rc = TSR_CUDA_CHECK(cudaMemsetAsync(rowid, 0, sizeof(int32_t) * (size_t)n, st), err);
  if (rc != 0) return rc;
  csc_keys_kernel<<<tsr_grid(n, 256), 256, 0, st>>>(h.p, h.nbytes, h.rows, h.cols, n, key, pos, status);
  rc = TSR_CUDA_LAUNCHED("csc_keys_kernel", err);
  if (rc == 0) {
    rowid_kernel<<<tsr_grid(h.rows * 32, 256), 256, 0, st>>>(h.p, h.nbytes, h.rows, h.cols, rowid, status);
    rc = TSR_CUDA_LAUNCHED("rowid_kernel", err);
  }
  /* LSD radix sort is stable: within a column, positions (rows) stay in order. */
  if (rc == 0) rc = TSR_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, key, key_sorted, pos, perm, (int)n, 0, bits, st), err);
  if (rc == 0) {
    colptr_kernel<<<tsr_grid(h.cols + 1, 256), 256, 0, st>>>(key_sorted, n, h.cols, colptr);
    rc = TSR_CUDA_LAUNCHED("colptr_kernel", err);
  }
  o->perm = perm, o->colptr = colptr, o->rowid = rowid;
  return rc;
}

/* ---------- csr_sum ---------- */

enum { STAT_SUM, STAT_NNZ, STAT_SUMSQ, STAT_SQDEV };

__device__ __forceinline__ double stat_term(int stat, double x) { return stat == STAT_NNZ ? 1.0 : stat == STAT_SUM ? x : x * x; }

/* Per row: one thread, the row's values in order (the CPU's sum). */
__global__ void sum_rows_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int stat, double *out,
                                int *status)
{
  VIEW_OR_FLAG(in, nbytes, rows, cols, v, status);
  TSR_GRID_STRIDE(r, rows) {
    int64_t lo, hi;
    double acc = 0.0;
    if (dcsr_row(v, r, &lo, &hi, status))
      for (int64_t i = lo; i < hi; i++) {
        if (v.indices[i] < 0 || v.indices[i] >= cols) atomicOr(status, BAD_COLUMN);  /* as the CPU op checks */
        acc += stat_term(stat, dcsr_value(v, i));
      }
    out[r] = acc;
  }
}

/* Per column: one thread, the column's values in row order (the CPU adds
 * them in that order too); sqdev adds the implicit zeros' mu² after. */
__global__ void sum_cols_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, int stat, csc_order o,
                                const double *mu, double *out)
{
  dcsr v;
  if (!dcsr_view(in, nbytes, rows, cols, &v)) return;  /* flagged by csc_keys_kernel */
  TSR_GRID_STRIDE(j, cols) {
    double acc = 0.0;
    for (int32_t k = o.colptr[j]; k < o.colptr[j + 1]; k++) {
      double x = dcsr_value(v, o.perm[k]);
      if (stat == STAT_SQDEV) x -= mu[j];
      acc += stat == STAT_SQDEV ? x * x : stat_term(stat, x);
    }
    if (stat == STAT_SQDEV) acc += (double)(rows - (int64_t)(o.colptr[j + 1] - o.colptr[j])) * mu[j] * mu[j];
    out[j] = acc;
  }
}

}  // namespace

TSR_CUDA_VARIANT(csr_sum)
{
  static const char *const names[] = {"sum", "nnz", "sumsq", "sqdev"};
  host_csr h;
  int64_t axis = 0;
  int *status = nullptr;
  tsr_scratch s(gpu);
  const tsr_param *q = tsr_params_find(p, "stat");
  const char *name = q != NULL && q->type == TSR_PARAM_STR ? q->s : "sum";
  int stat = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(name, names[i]) == 0) stat = i;
  if (stat < 0) return tsr_fail(err, TSR_EINVAL, "csr_sum: unknown stat '%s' (sum, nnz, sumsq, sqdev)", name);
  int rc = tsr_params_opt_int(p, "axis", 0, &axis, err);
  if (rc == 0) rc = host_view("csr_sum", p, &in[0], &h, err);
  if (rc == 0 && stat == STAT_SQDEV && n_in != 2) rc = tsr_fail(err, TSR_EINVAL, "csr_sum: sqdev takes mu as input 1");
  if (rc == 0) rc = status_word(s, gpu, &status, err);
  if (rc != 0) return rc;
  cudaStream_t st = tsr_stream(gpu);
  double *o = (double *)out->data;
  if (axis == 1) {
    sum_rows_kernel<<<tsr_grid(h.rows, 128), 128, 0, st>>>(h.p, h.nbytes, h.rows, h.cols, stat, o, status);
    rc = TSR_CUDA_LAUNCHED("sum_rows_kernel", err);
  } else {
    csc_order c;
    rc = build_csc(h, gpu, s, status, &c, err);
    if (rc == 0) {
      const double *mu = stat == STAT_SQDEV ? (const double *)in[1].data : nullptr;
      sum_cols_kernel<<<tsr_grid(h.cols, 128), 128, 0, st>>>(h.p, h.nbytes, h.rows, h.cols, stat, c, mu, o);
      rc = TSR_CUDA_LAUNCHED("sum_cols_kernel", err);
    }
  }
  if (rc == 0) rc = defer_status("csr_sum", status, gpu, err);
  return rc;
}

namespace {

/* ---------- csr_matmul ---------- */

struct affine_steps {
  int n;
  int codes[TSR_K_CHAIN_MAX];
  const double *vec[TSR_K_CHAIN_MAX];  /* a step's vector (device), or NULL */
  double values[2 * TSR_K_CHAIN_MAX];
};

/* a_j, b_j of z = x·a_j + b_j, as csr_matmul.c's affine_columns. */
__global__ void affine_kernel(affine_steps st, int64_t cols, double *a, double *b)
{
  TSR_GRID_STRIDE(j, cols) {
    double aj = 1.0, bj = 0.0;
    for (int s = 0; s < st.n; s++) {
      double v = st.vec[s] != nullptr ? st.vec[s][j] : 0.0;
      switch (st.codes[s]) {
      case TSR_K_STEP_ADD: bj += v; break;
      case TSR_K_STEP_SUB: bj -= v; break;
      case TSR_K_STEP_MUL: aj *= v, bj *= v; break;
      case TSR_K_STEP_DIV: aj /= v, bj /= v; break;
      case TSR_K_STEP_RSUB: aj = -aj, bj = v - bj; break;
      default: aj *= st.values[2 * s], bj = bj * st.values[2 * s] + st.values[2 * s + 1]; break;
      }
    }
    a[j] = aj, b[j] = bj;
  }
}

/* c0[t] = Σ_j b_j·B[j, t] over b_j != 0, in j order (product_xb's row 0). */
__global__ void xb_offset_kernel(const double *bvec, const double *bm, int64_t cols, int64_t k, double *c0)
{
  TSR_GRID_STRIDE(t, k) {
    double acc = 0.0;
    for (int64_t j = 0; j < cols; j++)
      if (bvec[j] != 0.0) acc += bvec[j] * bm[j * k + t];
    c0[t] = acc;
  }
}

/* out[r, t] = c0[t] + Σ_i (x_i·a_j)·B[j, t] over row r in order: a thread
 * per (r, t), t fastest, so a warp shares a row's indices and reads B's
 * rows contiguously. */
__global__ void xb_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, const double *a,
                          const double *c0, const double *bm, int64_t k, double *out, int *status)
{
  VIEW_OR_FLAG(in, nbytes, rows, cols, v, status);
  TSR_GRID_STRIDE(e, rows * k) {
    int64_t r = e / k, t = e % k, lo, hi;
    double o = c0[t];
    if (dcsr_row(v, r, &lo, &hi, status))
      for (int64_t i = lo; i < hi; i++) {
        int32_t j = v.indices[i];
        if (j < 0 || j >= cols) {
          atomicOr(status, BAD_COLUMN);
          continue;
        }
        double w = dcsr_value(v, i) * a[j];
        o += w * bm[j * k + t];
      }
    out[e] = o;
  }
}

/* colsum[t] = Σ_r C(r, t) in row order. */
__global__ void colsum_kernel(const double *c, int64_t rows, int64_t si, int64_t st, int64_t k, double *colsum)
{
  TSR_GRID_STRIDE(t, k) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; r++) acc += c[r * si + t * st];
    colsum[t] = acc;
  }
}

/* out(j, t) = a_j·Σ_r x_rj·C(r, t) + b_j·colsum[t]: a thread per (j, t),
 * column j's values in row order (product_xtc's order). */
__global__ void xtc_kernel(const unsigned char *in, int64_t nbytes, int64_t rows, int64_t cols, csc_order o,
                           const double *a, const double *b, const double *colsum, const double *c, int64_t si,
                           int64_t st, int64_t k, double *out, int64_t oj, int64_t ot)
{
  dcsr v;
  if (!dcsr_view(in, nbytes, rows, cols, &v)) return;  /* flagged by csc_keys_kernel */
  TSR_GRID_STRIDE(e, cols * k) {
    int64_t j = e / k, t = e % k;
    double acc = 0.0;
    for (int32_t q = o.colptr[j]; q < o.colptr[j + 1]; q++) {
      int32_t i = o.perm[q];
      acc += dcsr_value(v, i) * c[(int64_t)o.rowid[i] * si + t * st];
    }
    out[j * oj + t * ot] = a[j] * acc + b[j] * colsum[t];
  }
}

/* csr_matmul's parse (csr_matmul.c: parse_product) without the checks
 * infer() already made. */
int matmul_parse(const tsr_params *p, const tsr_buf *in, int n, tsr_k_chain *ch, tsr_errbuf *err)
{
  int64_t rows, cols;
  tsr_meta metas[2 + TSR_K_CHAIN_MAX];
  if (n < 2 || n > 2 + TSR_K_CHAIN_MAX) return tsr_fail(err, TSR_EINVAL, "csr_matmul: takes X, B and step vectors, got %d inputs", n);
  int rc = tsr_k_csr_shape_param("csr_matmul", p, &in[0].meta, &rows, &cols, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n; i++) metas[i] = in[i].meta;
  int64_t shape[2] = {rows, cols};
  tsr_k_meta_set(&metas[0], TSR_F64, 2, shape);
  return tsr_k_chain_parse(p, metas, n, ch, err);
}

}  // namespace

TSR_CUDA_VARIANT(csr_matmul)
{
  tsr_k_chain ch{};
  host_csr h{};
  int *status = nullptr;
  double *a = nullptr, *b = nullptr, *aux = nullptr;
  tsr_scratch s(gpu);
  int rc = matmul_parse(p, in, n_in, &ch, err);
  if (rc == 0) rc = host_view("csr_matmul", p, &in[0], &h, err);
  int64_t k = ch.outer;
  if (rc == 0) rc = status_word(s, gpu, &status, err);
  if (rc == 0) rc = s.get<double>(2 * h.cols + 1, &a, "the affine steps", err);
  if (rc == 0) rc = s.get<double>(k + 1, &aux, "the constant term", err);
  if (rc != 0) return rc;
  b = a + h.cols;
  affine_steps steps;
  steps.n = ch.n_steps;
  for (int i = 0; i < ch.n_steps; i++) {
    steps.codes[i] = ch.codes[i];
    steps.vec[i] = ch.vec_input[i] >= 0 ? (const double *)in[ch.vec_input[i]].data : nullptr;
    steps.values[2 * i] = ch.values[2 * i], steps.values[2 * i + 1] = ch.values[2 * i + 1];
  }
  cudaStream_t st = tsr_stream(gpu);
  const double *bm = (const double *)in[1].data;
  double *o = (double *)out->data;
  affine_kernel<<<tsr_grid(h.cols, 256), 256, 0, st>>>(steps, h.cols, a, b);
  rc = TSR_CUDA_LAUNCHED("affine_kernel", err);
  if (rc != 0) return rc;
  if (ch.side == TSR_K_SIDE_XB) {
    xb_offset_kernel<<<tsr_grid(k, 64), 64, 0, st>>>(b, bm, h.cols, k, aux);
    rc = TSR_CUDA_LAUNCHED("xb_offset_kernel", err);
    if (rc == 0 && h.rows * k > 0) {
      xb_kernel<<<tsr_grid(h.rows * k, 256), 256, 0, st>>>(h.p, h.nbytes, h.rows, h.cols, a, aux, bm, k, o, status);
      rc = TSR_CUDA_LAUNCHED("xb_kernel", err);
    }
  } else {
    /* C(i, t) = c[i·si + t·st] and out(j, t) = out[j·oj + t·ot], as csr_matmul.c. */
    int64_t si = ch.side == TSR_K_SIDE_BX ? 1 : k, sst = ch.side == TSR_K_SIDE_BX ? h.rows : 1;
    int64_t oj = ch.side == TSR_K_SIDE_XTB ? k : 1, ot = ch.side == TSR_K_SIDE_XTB ? 1 : h.cols;
    csc_order c;
    rc = build_csc(h, gpu, s, status, &c, err);
    if (rc == 0) {
      colsum_kernel<<<tsr_grid(k, 64), 64, 0, st>>>(bm, h.rows, si, sst, k, aux);
      rc = TSR_CUDA_LAUNCHED("colsum_kernel", err);
    }
    if (rc == 0 && h.cols * k > 0) {
      xtc_kernel<<<tsr_grid(h.cols * k, 256), 256, 0, st>>>(h.p, h.nbytes, h.rows, h.cols, c, a, b, aux, bm, si, sst, k,
                                                             o, oj, ot);
      rc = TSR_CUDA_LAUNCHED("xtc_kernel", err);
    }
  }
  if (rc == 0) rc = defer_status("csr_matmul", status, gpu, err);
  return rc;
}
