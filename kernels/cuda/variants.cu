/* kernels/cuda/variants.cu — the CUDA variant table the registry merges
 * into the op definitions (see variants.h). Ops missing here run on the CPU
 * variant also on GPU workers: load_npy and save_npy (files), and the ops
 * whose output shrinks to a size only the data knows (csr_gather,
 * csr_from_dense; kernels.h). */
#include "common.cuh"

#define V(name) {#name, tsr_cuda_##name}

extern "C" const tsr_cuda_variant tsr_cuda_variants[] = {
  V(random_uniform), V(random_normal), V(randint), V(full),      V(add),           V(mul),
  V(sub),            V(div),           V(scale),   V(astype),    V(sum),           V(matmul),
  V(noop),           V(transpose),     V(slice),   V(assemble),  V(view),          V(qr),
  V(svd),            V(bmul),          V(signs),   V(pack2bit),  V(unpack2bit),    V(matmul_2bit),
  V(matmul_random),  V(matmul_chain),  V(randint_packed), V(umap_layout), V(umap_spectral),
  V(csr_map),        V(csr_normalize_rows), V(csr_sum),   V(csr_matmul),
  V(knn_tile),       V(knn_merge),  V(community),  V(modularity),  V(tiff_read),  V(tile_stats),
};

extern "C" const size_t tsr_cuda_variant_count = sizeof tsr_cuda_variants / sizeof tsr_cuda_variants[0];

extern "C" bool tsr_ops_have_cuda(void)
{
  return true;
}
