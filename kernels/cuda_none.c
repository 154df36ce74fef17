/* kernels/cuda_none.c — the CUDA variant table of a build without a CUDA
 * compiler (or configured with -DTSR_CUDA=OFF): empty, so every op's cuda
 * member stays NULL and GPU workers run the CPU variants. */
#include "cuda/variants.h"

/* C has no empty arrays; the count says the one entry is not there. */
const tsr_cuda_variant tsr_cuda_variants[1] = {{NULL, NULL}};
const size_t tsr_cuda_variant_count = 0;

bool tsr_ops_have_cuda(void)
{
  return false;
}

int tsr_cuda_deferred_check(tsr_errbuf *err)
{
  (void)err;
  return 0;
}
