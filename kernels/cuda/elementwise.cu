/* kernels/cuda/elementwise.cu — full, add, mul, sub, div, scale, astype,
 * bmul and signs on the GPU, with the CPU ops' semantics to the bit:
 *
 * - add/mul/sub wrap on integers (computed in the unsigned type of the
 *   width) and are single IEEE operations on floats, applied left to right
 *   like the CPU's n-ary loop: the same bytes.
 * - div on floats is IEEE division (the same bytes). Integer div returns
 *   TSR_ENODEV: a zero divisor must fail the task with the element's index,
 *   which a kernel cannot report without synchronizing, so integer
 *   division runs on the CPU variant.
 * - scale computes x·factor + offset in double with explicit __dmul_rn /
 *   __dadd_rn (never contracted to an fma, like the CPU build's
 *   -ffp-contract=off), bmul x·v in double; both store like astype from f64.
 * - astype: integers wrap, int → float rounds to nearest, float → int
 *   truncates and clamps, NaN → 0 (common.cuh, from cpu/common.c); an
 *   integer's `missing` value becomes NaN in a float output.
 *
 * - add/mul/sub/div broadcast a row, column or scalar like the CPU ops
 *   (`bcast`, `swap`), one IEEE operation per element: the same bytes.
 *
 * All kernels are grid-stride loops over 64-bit indices. */
#include <math.h>

#include "common.cuh"

/* The type elementwise arithmetic runs in: signed integers wrap as the
 * unsigned type of their width. */
template <class T>
struct arith {
  typedef T type;
};
template <>
struct arith<int32_t> {
  typedef uint32_t type;
};
template <>
struct arith<int64_t> {
  typedef uint64_t type;
};

/* ---------- full ---------- */

template <class T>
__global__ void fill_kernel(T *out, T v, int64_t n)
{
  TSR_GRID_STRIDE(i, n) out[i] = v;
}

TSR_CUDA_VARIANT(full)
{
  (void)in, (void)n_in;
  /* infer() checked that value fits the dtype; an int value is exact. */
  const tsr_param *v = tsr_params_find(p, "value");
  double x = 0.0;
  int64_t iv = 0;
  if (v != nullptr && v->type == TSR_PARAM_INT) {
    iv = v->i, x = (double)v->i;
  } else {
    int rc = tsr_params_get_float(p, "value", &x, err);
    if (rc != 0) return tsr_k_param_fail("full", rc, err);
    iv = (int64_t)trunc(x);
  }
  int64_t n = tsr_meta_count(&out->meta);
  if (n == 0) return 0;
  int rc = tsr_with_dtype(out->meta.dtype, [&](auto t) {
    using T = decltype(t);
    T value = tsr_is_int<T>::value ? (T)iv : (T)x;
    fill_kernel<T><<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>((T *)out->data, value, n);
    return TSR_CUDA_LAUNCHED("fill_kernel", err);
  });
  return rc == 0 ? 0 : tsr_cuda_fail_op("full", rc, err);
}

/* ---------- add, mul, sub (n-ary, left to right) ---------- */

enum { OP_ADD, OP_MUL, OP_SUB };
#define NARY_MAX 8

/* Up to NARY_MAX inputs of one launch; acc starts from in[0] when first,
 * else from out (the running result of the previous launch). */
struct nary_args {
  const void *in[NARY_MAX];
  int n;
  int first;
};

template <class T, int OP>
__global__ void nary_kernel(nary_args a, T *out, int64_t n)
{
  typedef typename arith<T>::type U;
  TSR_GRID_STRIDE(i, n)
  {
    U acc = a.first ? (U)((const T *)a.in[0])[i] : (U)out[i];
    for (int k = a.first; k < a.n; k++) {
      U x = (U)((const T *)a.in[k])[i];
      acc = OP == OP_ADD ? (U)(acc + x) : OP == OP_MUL ? (U)(acc * x) : (U)(acc - x);
    }
    out[i] = (T)acc;
  }
}

/* ---------- broadcasting (cpu/elementwise.c: `bcast` row, col, scalar; `swap`) ---------- */

enum { OP_DIV = OP_SUB + 1 };
enum { BC_ROW = 1, BC_COL, BC_SCALAR };

template <class T, int OP>
__global__ void bcast_kernel(const T *x, const T *v, T *out, int64_t n, int64_t row_len, int kind, bool swap)
{
  typedef typename arith<T>::type U;
  TSR_GRID_STRIDE(i, n)
  {
    int64_t at = kind == BC_ROW ? i % row_len : kind == BC_COL ? i / row_len : 0;
    U a = (U)x[i], b = (U)v[at];
    if (swap) {
      U t = a;
      a = b, b = t;
    }
    out[i] = (T)(OP == OP_ADD ? (U)(a + b) : OP == OP_MUL ? (U)(a * b) : OP == OP_SUB ? (U)(a - b) : (U)(a / b));
  }
}

/* The broadcast kind of p (0 when absent); -1 for a name it does not know. */
static int bcast_kind_of(const tsr_params *p, bool *swap_p)
{
  const char *name = "none";
  *swap_p = false;
  if (tsr_params_find(p, "bcast") != nullptr && tsr_params_get_str(p, "bcast", &name, nullptr) != 0) return -1;
  if (tsr_params_find(p, "swap") != nullptr && tsr_params_get_bool(p, "swap", swap_p, nullptr) != 0) return -1;
  if (strcmp(name, "none") == 0) return 0;
  return strcmp(name, "row") == 0 ? BC_ROW : strcmp(name, "col") == 0 ? BC_COL : strcmp(name, "scalar") == 0 ? BC_SCALAR : -1;
}

/* x OP v broadcast; infer() checked the shapes. Integer div never comes here. */
template <int OP>
static int bcast_cuda(const char *op, int kind, bool swap, const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                      tsr_errbuf *err)
{
  int64_t n = tsr_meta_count(&out->meta), row_len = out->meta.ndim > 0 ? out->meta.shape[out->meta.ndim - 1] : 1;
  if (n == 0) return 0;
  int rc = tsr_with_dtype(out->meta.dtype, [&](auto t) {
    using T = decltype(t);
    bcast_kernel<T, OP><<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>((const T *)in[0].data, (const T *)in[1].data,
                                                                       (T *)out->data, n, row_len, kind, swap);
    return TSR_CUDA_LAUNCHED("bcast_kernel", err);
  });
  return rc == 0 ? 0 : tsr_cuda_fail_op(op, rc, err);
}

/* Runs the broadcast form when p asks for one: 1 when it ran (or failed:
 * *rc_p says), 0 when p has no broadcast. */
template <int OP>
static int maybe_bcast(const char *op, const tsr_params *p, const tsr_buf *in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                       tsr_errbuf *err, int *rc_p)
{
  bool swap;
  int kind = bcast_kind_of(p, &swap);
  if (kind == 0) return 0;
  *rc_p = kind < 0 ? tsr_fail(err, TSR_EINVAL, "%s: bad bcast or swap param", op) : bcast_cuda<OP>(op, kind, swap, in, out, gpu, err);
  return 1;
}

template <int OP>
static int nary_cuda(const char *op, const tsr_buf *in, int n_in, tsr_buf *out, const tsr_gpu_ctx *gpu,
                     tsr_errbuf *err)
{
  int64_t n = tsr_meta_count(&out->meta);
  if (n == 0) return 0;
  int rc = 0;
  for (int k0 = 0; k0 < n_in && rc == 0; k0 += NARY_MAX) {
    nary_args a = {};
    a.first = k0 == 0;
    for (int k = k0; k < n_in && k < k0 + NARY_MAX; k++) a.in[a.n++] = in[k].data;
    rc = tsr_with_dtype(out->meta.dtype, [&](auto t) {
      using T = decltype(t);
      nary_kernel<T, OP><<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>(a, (T *)out->data, n);
      return TSR_CUDA_LAUNCHED("nary_kernel", err);
    });
  }
  return rc == 0 ? 0 : tsr_cuda_fail_op(op, rc, err);
}

TSR_CUDA_VARIANT(add)
{
  int rc;
  if (maybe_bcast<OP_ADD>("add", p, in, out, gpu, err, &rc)) return rc;
  return nary_cuda<OP_ADD>("add", in, n_in, out, gpu, err);
}

TSR_CUDA_VARIANT(mul)
{
  int rc;
  if (maybe_bcast<OP_MUL>("mul", p, in, out, gpu, err, &rc)) return rc;
  return nary_cuda<OP_MUL>("mul", in, n_in, out, gpu, err);
}

TSR_CUDA_VARIANT(sub)
{
  int rc;
  if (maybe_bcast<OP_SUB>("sub", p, in, out, gpu, err, &rc)) return rc;
  return nary_cuda<OP_SUB>("sub", in, n_in, out, gpu, err);
}

/* ---------- div ---------- */

template <class T>
__global__ void div_kernel(const T *a, const T *b, T *out, int64_t n)
{
  TSR_GRID_STRIDE(i, n) out[i] = a[i] / b[i];
}

TSR_CUDA_VARIANT(div)
{
  (void)n_in;
  tsr_dtype dt = out->meta.dtype;
  if (dt != TSR_F32 && dt != TSR_F64)
    return tsr_fail(err, TSR_ENODEV, "div: integer division runs on the CPU variant (a zero divisor must fail the task)");
  int brc;
  if (maybe_bcast<OP_DIV>("div", p, in, out, gpu, err, &brc)) return brc;
  int64_t n = tsr_meta_count(&out->meta);
  if (n == 0) return 0;
  cudaStream_t s = tsr_stream(gpu);
  if (dt == TSR_F32)
    div_kernel<float><<<tsr_grid(n, 256), 256, 0, s>>>((const float *)in[0].data, (const float *)in[1].data,
                                                       (float *)out->data, n);
  else
    div_kernel<double><<<tsr_grid(n, 256), 256, 0, s>>>((const double *)in[0].data, (const double *)in[1].data,
                                                        (double *)out->data, n);
  int rc = TSR_CUDA_LAUNCHED("div_kernel", err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("div", rc, err);
}

/* ---------- scale ---------- */

template <class T>
__global__ void scale_kernel(const T *x, T *y, double factor, double offset, int64_t n)
{
  TSR_GRID_STRIDE(i, n) y[i] = tsr_from_f64<T>(__dadd_rn(__dmul_rn((double)x[i], factor), offset));
}

TSR_CUDA_VARIANT(scale)
{
  (void)n_in;
  double factor, offset;
  int rc = tsr_params_get_float(p, "factor", &factor, err);
  if (rc == 0) rc = tsr_params_opt_float(p, "offset", 0.0, &offset, err);
  if (rc != 0) return tsr_k_param_fail("scale", rc, err);
  int64_t n = tsr_meta_count(&out->meta);
  if (n == 0) return 0;
  rc = tsr_with_dtype(out->meta.dtype, [&](auto t) {
    using T = decltype(t);
    scale_kernel<T><<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>((const T *)in[0].data, (T *)out->data, factor,
                                                                   offset, n);
    return TSR_CUDA_LAUNCHED("scale_kernel", err);
  });
  return rc == 0 ? 0 : tsr_cuda_fail_op("scale", rc, err);
}

/* ---------- astype and the conversions other files use ---------- */

template <class To, class From>
__global__ void convert_kernel(const From *src, To *dst, int64_t n)
{
  TSR_GRID_STRIDE(i, n) dst[i] = tsr_convert<To>(src[i]);
}

template <class To, class From>
__global__ void convert_2d_kernel(const From *src, int64_t ld, int64_t cols, To *dst, int64_t n)
{
  TSR_GRID_STRIDE(i, n)
  {
    int64_t r = i / cols, c = i - r * cols;
    dst[i] = tsr_convert<To>(src[r * ld + c]);
  }
}

int tsr_cuda_convert(tsr_dtype to, tsr_dtype from, const void *src, void *dst, int64_t n, cudaStream_t s,
                     tsr_errbuf *err)
{
  if (n == 0) return 0;
  if (to == from) return TSR_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * tsr_dtype_size(to), cudaMemcpyDeviceToDevice, s), err);
  return tsr_with_dtype(to, [&](auto t) {
    using To = decltype(t);
    return tsr_with_dtype(from, [&](auto f) {
      using From = decltype(f);
      convert_kernel<To, From><<<tsr_grid(n, 256), 256, 0, s>>>((const From *)src, (To *)dst, n);
      return TSR_CUDA_LAUNCHED("convert_kernel", err);
    });
  });
}

int tsr_cuda_convert_2d(tsr_dtype to, tsr_dtype from, const void *src, int64_t ld, int64_t rows, int64_t cols,
                        void *dst, cudaStream_t s, tsr_errbuf *err)
{
  int64_t n = rows * cols;
  if (n == 0) return 0;
  return tsr_with_dtype(to, [&](auto t) {
    using To = decltype(t);
    return tsr_with_dtype(from, [&](auto f) {
      using From = decltype(f);
      convert_2d_kernel<To, From><<<tsr_grid(n, 256), 256, 0, s>>>((const From *)src, ld, cols, (To *)dst, n);
      return TSR_CUDA_LAUNCHED("convert_2d_kernel", err);
    });
  });
}

/* An integer chunk to a float dtype with its missing value made NaN. */
template <class To, class From>
__global__ void missing_to_nan_kernel(const From *src, To *dst, int64_t missing, int64_t n)
{
  TSR_GRID_STRIDE(i, n) dst[i] = (int64_t)src[i] == missing ? (To)NAN : tsr_convert<To>(src[i]);
}

static int astype_missing(const tsr_buf *in, tsr_buf *out, int64_t missing, cudaStream_t s, tsr_errbuf *err)
{
  int64_t n = tsr_meta_count(&out->meta);
  if (n == 0) return 0;
  return tsr_with_dtype(in[0].meta.dtype, [&](auto f) {
    using From = decltype(f);
    if (out->meta.dtype == TSR_F32)
      missing_to_nan_kernel<float, From><<<tsr_grid(n, 256), 256, 0, s>>>((const From *)in[0].data, (float *)out->data, missing, n);
    else
      missing_to_nan_kernel<double, From><<<tsr_grid(n, 256), 256, 0, s>>>((const From *)in[0].data, (double *)out->data, missing, n);
    return TSR_CUDA_LAUNCHED("missing_to_nan_kernel", err);
  });
}

TSR_CUDA_VARIANT(astype)
{
  (void)n_in;
  int64_t missing;
  tsr_dtype from = in[0].meta.dtype, to = out->meta.dtype;
  bool ints = from == TSR_U8 || from == TSR_I32 || from == TSR_I64;
  if (ints && (to == TSR_F32 || to == TSR_F64) && tsr_params_get_int(p, "missing", &missing, nullptr) == 0) {
    int rc = astype_missing(in, out, missing, tsr_stream(gpu), err);
    return rc == 0 ? 0 : tsr_cuda_fail_op("astype", rc, err);
  }
  int rc = tsr_cuda_convert(out->meta.dtype, in[0].meta.dtype, in[0].data, out->data, tsr_meta_count(&out->meta),
                            tsr_stream(gpu), err);
  return rc == 0 ? 0 : tsr_cuda_fail_op("astype", rc, err);
}

/* ---------- bmul and signs ---------- */

template <class T, class V>
__global__ void bmul_kernel(const T *x, const V *v, T *y, int64_t cols, int axis, int64_t n)
{
  TSR_GRID_STRIDE(i, n)
  {
    int64_t r = i / cols;
    double f = (double)v[axis == 1 ? i - r * cols : r];
    y[i] = tsr_from_f64<T>(__dmul_rn((double)x[i], f));
  }
}

TSR_CUDA_VARIANT(bmul)
{
  (void)n_in;
  int64_t axis;
  int rc = tsr_params_get_int(p, "axis", &axis, err);
  if (rc != 0) return tsr_k_param_fail("bmul", rc, err);
  int64_t n = tsr_meta_count(&out->meta), cols = out->meta.shape[1];
  if (n == 0) return 0;
  rc = tsr_with_dtype(out->meta.dtype, [&](auto t) {
    using T = decltype(t);
    return tsr_with_dtype(in[1].meta.dtype, [&](auto vt) {
      using V = decltype(vt);
      bmul_kernel<T, V><<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>((const T *)in[0].data, (const V *)in[1].data,
                                                                       (T *)out->data, cols, (int)axis, n);
      return TSR_CUDA_LAUNCHED("bmul_kernel", err);
    });
  });
  return rc == 0 ? 0 : tsr_cuda_fail_op("bmul", rc, err);
}

/* +1 where x >= 0, else -1: NaN gives -1, -0.0 gives +1, u8 all ones. */
template <class T>
__global__ void signs_kernel(const T *x, T *y, int64_t n)
{
  TSR_GRID_STRIDE(i, n)
  {
    if constexpr (sizeof(T) == 1) y[i] = 1;
    else y[i] = x[i] >= (T)0 ? (T)1 : (T)-1;
  }
}

TSR_CUDA_VARIANT(signs)
{
  (void)p, (void)n_in;
  int64_t n = tsr_meta_count(&out->meta);
  if (n == 0) return 0;
  int rc = tsr_with_dtype(out->meta.dtype, [&](auto t) {
    using T = decltype(t);
    signs_kernel<T><<<tsr_grid(n, 256), 256, 0, tsr_stream(gpu)>>>((const T *)in[0].data, (T *)out->data, n);
    return TSR_CUDA_LAUNCHED("signs_kernel", err);
  });
  return rc == 0 ? 0 : tsr_cuda_fail_op("signs", rc, err);
}
