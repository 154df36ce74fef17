/* kernels/cuda/genotype.cuh — what the fused genotype products share
 * (genotype.cu, geno_xb.cu, geno_btx.cu): converting genotype bytes into
 * f16 tensor-core fragments, the MMA, asynchronous copies, and B's f16
 * parts.
 *
 * Numerics of the fused products. Genotypes (0..255) are exact in f16. B is
 * split per column into two f16 parts, B·2^e ≈ hi + lo, with the power of
 * two 2^e putting the column's largest |B| just under 2^14; hi + lo holds B
 * to about 2^-22 of that largest entry. Each product x·hi, x·lo is exact in
 * the f32 accumulators of mma.sync m16n8k16. Tensor cores add with
 * truncation, an error that grows with the number of MMAs summed into one
 * accumulator, so the kernels move the MMA accumulators into ordinary f32
 * totals (round to nearest) every 256 k: the result is then within f32
 * GEMM accuracy of the exact product (measured in docs/kernels-cuda.md),
 * not the CPU's bytes (which come from f64), and deterministic — a fixed
 * order that depends on the shapes only. */
#ifndef TSR_KERNELS_CUDA_GENOTYPE_CUH
#define TSR_KERNELS_CUDA_GENOTYPE_CUH

#include <cuda_fp16.h>

#include "common.cuh"

static inline int64_t tsr_packed_len(int64_t c)
{
  return c / 4 + (c % 4 != 0);
}

/* ---------- fragments ---------- */

#define HALF2_1024 0x64006400u  /* (1024, 1024) as f16x2 */

__device__ __forceinline__ uint32_t hsub2_1024(uint32_t x)
{
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(HALF2_1024));
  return d;
}

/* u8: two of w's bytes as f16x2 (sel puts them in the low bytes of each
 * half, 0x64 above: 1024 + x, then minus 1024). 0x4140: bytes 0,1; 0x4342:
 * bytes 2,3. */
__device__ __forceinline__ uint32_t u8_pair(uint32_t w, uint32_t sel)
{
  return hsub2_1024(__byte_perm(w, 0x64646464u, sel));
}

/* 2-bit: the genotypes at bits 2q and 2q+16 of w as f16x2. */
__device__ __forceinline__ uint32_t g2_pair(uint32_t w, int q)
{
  return hsub2_1024(((w >> (2 * q)) & 0x00030003u) | HALF2_1024);
}

__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word_of(const uint4 &v, int j)
{
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

/* ---------- asynchronous copies (sm_80+) ---------- */

/* BYTES (4, 8 or 16) from global to shared; only the first src_bytes are
 * read, the rest of the destination is zero-filled. */
template <int BYTES>
__device__ __forceinline__ void cp_async(void *smem, const void *gmem, int src_bytes)
{
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(gmem), "n"(BYTES), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit()
{
  asm volatile("cp.async.commit_group;\n" ::);
}
/* Waits until at most N of this thread's committed groups are pending. */
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Loads 16 bytes of a row at off (zero past cb), VEC bytes at a time; the
 * caller picked VEC so that every piece is wholly inside or outside. */
template <int VEC>
__device__ __forceinline__ uint4 tsr_geno_load16(const uint8_t *row, int64_t off, int64_t cb)
{
  uint4 v = make_uint4(0, 0, 0, 0);
  if constexpr (VEC == 16) {
    if (off < cb) v = __ldcs((const uint4 *)(row + off));
  } else if constexpr (VEC == 8) {
    uint2 a = off < cb ? __ldcs((const uint2 *)(row + off)) : make_uint2(0, 0);
    uint2 b = off + 8 < cb ? __ldcs((const uint2 *)(row + off + 8)) : make_uint2(0, 0);
    v = make_uint4(a.x, a.y, b.x, b.y);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      w[k] = 0;
      if constexpr (VEC == 4) {
        if (off + 4 * k < cb) w[k] = __ldcs((const unsigned *)(row + off + 4 * k));
      } else {
        for (int e = 0; e < 4; e++)
          if (off + 4 * k + e < cb) w[k] |= (uint32_t)row[off + 4 * k + e] << (8 * e);
      }
    }
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return v;
}

/* ---------- B's f16 parts (genotype.cu) ---------- */

/* B (nk × ncols, row-major) prepared for a kernel: [2][cols_tot][kp]
 * halves (hi, then lo; zero past B), scaled per column by 2^exps[col]. */
struct bsplit {
  __half *parts;
  int *exps;
  int64_t cols_tot, kp;
};

/* Prepares B in scratch; perm: the 2-bit xb kernel's k order (within each
 * 16 genotypes, storage position p holds genotype p/2 + 8·(p%2)). */
int tsr_geno_split_b(const void *b, tsr_dtype bdt, int64_t nk, int64_t ncols, int64_t cols_tot, int64_t kp, bool perm,
                     tsr_scratch &scr, cudaStream_t s, bsplit *out, tsr_errbuf *err);

/* out[i] = the sum over s < splits of part[s·stride + i], in split order. */
int tsr_geno_sum_splits(const float *part, int splits, int64_t stride, float *out, cudaStream_t s, tsr_errbuf *err);

/* Splits of the k chunks over blocks: enough blocks for any GPU, from the
 * shape alone (so the summation order never depends on the device).
 * Returns the split count; *per_split chunks each. */
int tsr_geno_split_count(int64_t blocks, int64_t chunks, int64_t want_blocks, int *per_split);

/* The widest load (a power of two up to widest) that every row start and
 * every piece allows. */
int tsr_geno_load_width(const void *x, int64_t cb, int widest);

#endif
