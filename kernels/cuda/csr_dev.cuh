/* kernels/cuda/csr_dev.cuh — a CSR chunk (kernels/cpu/csr.h's layout:
 * header, int64 indptr, int32 indices, values, each section padded to 8
 * bytes) as device code reads it. One parser for every CUDA op that takes
 * CSR chunks (sparse.cu, community.cu, umap_spectral.cu): csr.h's inline
 * helpers are host code, and three hand copies of the layout had drifted
 * apart in what they checked. */
#ifndef TSR_CUDA_CSR_DEV_CUH
#define TSR_CUDA_CSR_DEV_CUH

#include <stdint.h>

#include "cpu/csr.h"

struct dcsr {
  int64_t rows, cols, nnz;
  int dt;
  const int64_t *indptr;
  const int32_t *indices;
  const unsigned char *values;
};

static __device__ __forceinline__ int64_t dcsr_pad8(int64_t n) { return (n + 7) / 8 * 8; }

/* Bytes a value of dtype dt takes; 0 when CSR values cannot have it. */
static __device__ __forceinline__ int64_t dcsr_es(int dt)
{
  return dt == TSR_U8 ? 1 : dt == TSR_I32 || dt == TSR_F32 ? 4 : dt == TSR_I64 || dt == TSR_F64 ? 8 : 0;
}

/* The sections of a chunk at p of rows rows and nnz values (tsr_k_csr_parts). */
static __device__ __forceinline__ void dcsr_sections(const unsigned char *p, int64_t rows, int64_t nnz, dcsr *v)
{
  v->indptr = (const int64_t *)(p + TSR_CSR_HEADER);
  v->indices = (const int32_t *)(p + TSR_CSR_HEADER + 8 * (rows + 1));
  v->values = p + TSR_CSR_HEADER + 8 * (rows + 1) + dcsr_pad8(4 * nnz);
}

/* The header at p (nbytes), with tsr_k_csr_view's checks before indptr:
 * version 1 with 32-bit indices, a value dtype CSR allows, rows and nnz in
 * 0..TSR_CSR_MAX_NNZ, cols in 0..INT32_MAX, and sections that fill exactly
 * nbytes. True and v filled, or false. Every thread may call it (32
 * bytes, cached). */
static __device__ bool dcsr_parse(const unsigned char *p, int64_t nbytes, dcsr *v)
{
  if (nbytes < TSR_CSR_HEADER || p[0] != 'T' || p[1] != 'C' || p[2] != 'S' || p[3] != 'R' || p[4] != 1 || p[6] != 4)
    return false;
  const int64_t *h = (const int64_t *)(p + 8);
  v->rows = h[0], v->cols = h[1], v->nnz = h[2], v->dt = p[5];
  int64_t es = dcsr_es(v->dt);
  if (es == 0 || v->rows < 0 || v->rows > TSR_CSR_MAX_NNZ || v->nnz < 0 || v->nnz > TSR_CSR_MAX_NNZ || v->cols < 0 ||
      v->cols > INT32_MAX)
    return false;
  if (TSR_CSR_HEADER + 8 * (v->rows + 1) + dcsr_pad8(4 * v->nnz) + dcsr_pad8(es * v->nnz) != nbytes) return false;
  dcsr_sections(p, v->rows, v->nnz, v);
  return true;
}

#endif
