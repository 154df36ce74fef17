/* kernels/cuda/variants.h — how the registry learns the CUDA variants: a
 * table of (op name, variant) pairs, one per op that has a CUDA
 * implementation.
 *
 * Exactly one of two files defines the table: kernels/cuda/variants.cu when
 * CMake found a CUDA compiler (and TSR_CUDA is ON), kernels/cuda_none.c
 * (an empty table) otherwise. The same pair defines tsr_ops_have_cuda(), so
 * no source needs an #ifdef. The table is constant: safe from any thread. */
#ifndef TSR_KERNELS_CUDA_VARIANTS_H
#define TSR_KERNELS_CUDA_VARIANTS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_cuda_variant {
  const char *op;   /* the op's registry name */
  tsr_cuda_fn fn;   /* never NULL for the first tsr_cuda_variant_count entries */
} tsr_cuda_variant;

extern const tsr_cuda_variant tsr_cuda_variants[];
extern const size_t tsr_cuda_variant_count;

#ifdef __cplusplus
}
#endif

#endif
