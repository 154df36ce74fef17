/* kernels/cpu/csr_build.h — making a CSR chunk canonical (csr.h) after
 * filling it from a file whose rows may be unsorted, repeat a column, or
 * store zeros: the readers of 10x HDF5 and Matrix Market files
 * (tenx_h5.c, mtx_read.c). */
#ifndef TSR_KERNELS_CPU_CSR_BUILD_H
#define TSR_KERNELS_CPU_CSR_BUILD_H

#include "csr.h"

/* v (f32 values) has indptr and each row's indices and values in any
 * order. Sorts each row by column, sums repeated columns (in the order of
 * their values, so any file order gives the same bytes), drops zeros, and
 * packs the rows down, rewriting indptr. The caller then shrinks the chunk
 * to *nnz_p values (tsr_k_csr_shrink). 0, or TSR_ENOMEM for the sort's
 * scratch (one row). */
int tsr_k_csr_canonical_f32(tsr_k_csr *v, int64_t *nnz_p, tsr_errbuf *err);

#endif
