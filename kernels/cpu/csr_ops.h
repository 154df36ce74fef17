/* kernels/cpu/csr_ops.h — what the sparse ops (csr_stats.c, csr_map.c,
 * csr_matmul.c) share: reading a CSR input against the logical shape its
 * task's params give, a value as double, and an output bound.
 *
 * Every sparse op takes the param `shape` [rows, cols]: the logical shape
 * of its (first) CSR input, known to the builder, so infer() can size the
 * output before the bytes exist; cpu() checks the header against it. */
#ifndef TSR_KERNELS_CPU_CSR_OPS_H
#define TSR_KERNELS_CPU_CSR_OPS_H

#include "csr.h"
#include "ops.h"

/* Reads `shape` [rows, cols] and checks that in is a 1-D u8 chunk. */
int tsr_k_csr_shape_param(const char *op, const tsr_params *p, const tsr_meta *in, int64_t *rows_p, int64_t *cols_p,
                          tsr_errbuf *err);
/* Views b as CSR and checks it is rows x cols, indptr nondecreasing and
 * every column index in range (O(rows + nnz)); the message names op. */
int tsr_k_csr_input(const char *op, const tsr_buf *b, int64_t rows, int64_t cols, tsr_k_csr *v, tsr_errbuf *err);
/* An upper bound of the nnz of a CSR chunk of `bytes` bytes and `rows`
 * rows whose values take es bytes (the pads only lower the real count). */
int64_t tsr_k_csr_nnz_bound(int64_t bytes, int64_t rows, size_t es);

/* csr_map / csr_normalize_rows: *in_p = the task's `in_dtype` when it is
 * given together with `dtype` and as wide as the output's (the output then
 * has exactly the input's bytes), else TSR_DTYPE_NONE. 0 or TSR_EINVAL. */
int tsr_k_csr_same_width(const char *op, const tsr_params *p, tsr_dtype *in_p, tsr_errbuf *err);

/* Value i of v as double. */
static inline double tsr_k_csr_value(const tsr_k_csr *v, int64_t i)
{
  switch (v->dtype) {
  case TSR_F32: return ((const float *)v->values)[i];
  case TSR_F64: return ((const double *)v->values)[i];
  case TSR_I32: return ((const int32_t *)v->values)[i];
  case TSR_I64: return (double)((const int64_t *)v->values)[i];
  default: return ((const uint8_t *)v->values)[i];
  }
}

#endif
