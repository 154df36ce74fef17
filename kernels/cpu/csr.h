/* kernels/cpu/csr.h — the sparse chunk: a CSR matrix in one u8 chunk.
 *
 * An array with encoding TSR_ENC_CSR (tessera/array.h) holds in each chunk
 * key a 1-D u8 chunk laid out as below; the array's dtype is the values'
 * dtype and its shape the logical (dense) one. Because it is one ordinary
 * u8 chunk, a sparse chunk travels, spills, compresses, persists and is
 * recomputed like any other: nothing below the kernels knows about it.
 *
 *   bytes 0..7    "TCSR" (4 bytes), u8 version (1), u8 value dtype
 *                 (tsr_dtype), u8 index bytes (4), u8 0
 *   bytes 8..31   int64 rows, int64 cols, int64 nnz
 *   then          int64 indptr[rows + 1]        (indptr[0] = 0, nondecreasing, indptr[rows] = nnz)
 *   then          int32 indices[nnz], padded with zeros to a multiple of 8 bytes
 *                 (column of each value, in [0, cols), increasing within a row)
 *   then          values[nnz] of the value dtype, padded to 8 bytes
 * All little-endian (the workers' byte order). Within a row the column
 * indices are strictly increasing: the canonical form, so equal matrices
 * are equal bytes and ops that merge rows can rely on order.
 *
 * An op producing a CSR chunk whose nnz depends on the data infers the
 * upper bound tsr_k_csr_bytes(rows, max_nnz, dtype) and shrinks its
 * output to the real size (kernels.h: cpu() may lower out->meta.shape[0]).
 *
 * Helpers are static inline so CUDA code (kernels/cuda/) can use them too. */
#ifndef TSR_KERNELS_CPU_CSR_H
#define TSR_KERNELS_CPU_CSR_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define TSR_CSR_HEADER 32
#define TSR_CSR_MAX_NNZ ((int64_t)1 << 40)

/* A CSR chunk's parts (pointers into its bytes). */
typedef struct tsr_k_csr {
  int64_t rows, cols, nnz;
  tsr_dtype dtype;
  int64_t *indptr;
  int32_t *indices;
  void *values;
} tsr_k_csr;

static inline int64_t tsr_k_csr_pad8(int64_t n) { return (n + 7) / 8 * 8; }

/* Bytes of a CSR chunk of rows and nnz values of dtype; -1 when too large. */
static inline int64_t tsr_k_csr_bytes(int64_t rows, int64_t nnz, tsr_dtype dtype)
{
  size_t es = tsr_dtype_size(dtype);
  if (rows < 0 || nnz < 0 || nnz > TSR_CSR_MAX_NNZ || rows > TSR_CSR_MAX_NNZ || es == 0) return -1;
  return TSR_CSR_HEADER + 8 * (rows + 1) + tsr_k_csr_pad8(4 * nnz) + tsr_k_csr_pad8((int64_t)es * nnz);
}

/* The parts of a chunk whose header says rows, nnz and dtype (bytes at
 * data), without checking: for a chunk just written by tsr_k_csr_init. */
static inline void tsr_k_csr_parts(void *data, int64_t rows, int64_t nnz, tsr_k_csr *v)
{
  char *p = (char *)data;
  v->indptr = (int64_t *)(p + TSR_CSR_HEADER);
  v->indices = (int32_t *)(p + TSR_CSR_HEADER + 8 * (rows + 1));
  v->values = p + TSR_CSR_HEADER + 8 * (rows + 1) + tsr_k_csr_pad8(4 * nnz);
}

/* Writes the header of a chunk of rows x cols with nnz values of dtype
 * into data (tsr_k_csr_bytes(rows, nnz, dtype) bytes, zeroing the pads)
 * and fills v with its parts; the caller writes indptr, indices, values. */
static inline void tsr_k_csr_init(void *data, int64_t rows, int64_t cols, int64_t nnz, tsr_dtype dtype, tsr_k_csr *v)
{
  unsigned char *p = (unsigned char *)data;
  memcpy(p, "TCSR", 4);
  p[4] = 1, p[5] = (unsigned char)dtype, p[6] = 4, p[7] = 0;
  memcpy(p + 8, &rows, 8), memcpy(p + 16, &cols, 8), memcpy(p + 24, &nnz, 8);
  v->rows = rows, v->cols = cols, v->nnz = nnz, v->dtype = dtype;
  tsr_k_csr_parts(data, rows, nnz, v);
  int64_t ib = tsr_k_csr_pad8(4 * nnz), vb = tsr_k_csr_pad8((int64_t)tsr_dtype_size(dtype) * nnz);
  memset((char *)v->indices + 4 * nnz, 0, (size_t)(ib - 4 * nnz));
  memset((char *)v->values + tsr_dtype_size(dtype) * (size_t)nnz, 0, (size_t)(vb - (int64_t)tsr_dtype_size(dtype) * nnz));
}

/* Reads and checks a chunk's header against its size (and, with `full`,
 * indptr's shape and every column index: O(nnz), for data from outside).
 * 0, or TSR_EPROTO/TSR_ESHAPE with a message naming what is wrong. */
int tsr_k_csr_view(const tsr_buf *b, bool full, tsr_k_csr *v, tsr_errbuf *err);

/* Shrinks a CSR output chunk written with nnz_bound room to its real nnz:
 * moves the values down behind the real indices, rewrites the header and
 * lowers out->meta.shape[0] (kernels.h). */
void tsr_k_csr_shrink(tsr_buf *out, tsr_k_csr *v, int64_t nnz);

#endif
