/* kernels/cuda/genotype.cuh — what the fused genotype products share
 * (genotype.cu, geno_xb.cu, geno_btx.cu): the int8 tensor-core MMA,
 * asynchronous copies, and B's digits.
 *
 * Numerics of the fused products. The genotypes are the MMA's unsigned
 * 8-bit operand as they are (u8) or unpacked with a shift and a mask
 * (2-bit): no conversion to float at all. B is quantized per column:
 * q = round(B·2^e) with 2^e putting the column's largest |B| in
 * [2^(8D-3), 2^(8D-2)), written as D signed base-256 digits
 * q = d0 + 256·d1 + ... + 256^(D-1)·d(D-1), each an 8-bit operand.
 * mma.sync m16n8k32 sums x·d exactly in int32 (k per split is capped so
 * the sums cannot overflow); the D digit sums are combined exactly in
 * int64, scaled by 2^-e and rounded once to the output type. The output
 * has B's dtype, and the digit count follows it:
 *   f32 B: D = 3, 22-bit quantization, error <= 2^-23 of each column's
 *          largest |B| per element of B — f32 GEMM accuracy;
 *   f64 B: D = 4, 30-bit quantization, error <= 2^-31 (4.7e-10) of it,
 *          the result rounded once to f64.
 * The error does not depend on k or the summation order, and results are
 * bit-for-bit reproducible. */
#ifndef TSR_KERNELS_CUDA_GENOTYPE_CUH
#define TSR_KERNELS_CUDA_GENOTYPE_CUH

#include "common.cuh"

static inline int64_t tsr_packed_len(int64_t c)
{
  return c / 4 + (c % 4 != 0);
}

/* ---------- the MMA ---------- */

/* c += a·b for an m16n8k32 tile: a unsigned 8-bit (4 per register, row
 * layout), b signed 8-bit (column layout), c int32. */
__device__ __forceinline__ void imma16832(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The digit count for an output type: 3 for f32, 4 for f64 (above). */
template <class OutT>
struct geno_digits {
  static constexpr int D = sizeof(OutT) == 4 ? 3 : 4;
};

/* The digit sums s[0..D) of one result, (sum of 256^d·s[d])·2^-e: exact
 * in int64 (|s| < 2^31, so the sum is under 2^56), then rounded once. */
template <class OutT, int D>
__device__ __forceinline__ OutT digits_value(const int (&s)[D], int e)
{
  long long v = s[D - 1];
#pragma unroll
  for (int d = D - 2; d >= 0; d--) v = v * 256 + s[d];
  /* f32 (D = 3): |v| < 2^48 is exact in double, so one rounding, to f32;
   * f64: the conversion to double is the one rounding, 2^-e exact. */
  return (OutT)ldexp((double)v, -e);
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

/* ---------- what the products read of X ---------- */

/* An X byte (a genotype, after unpacking) as the MMA takes it: as it is
 * (GENO_RAW), with the missing value `miss` made 0 (GENO_ZERO_MISSING),
 * or 1 where X is missing and 0 elsewhere (GENO_MISSING_MASK) — the two
 * parts of a standardized product (chain.cu). Four bytes at a time;
 * miss4 is the missing byte in each of the four. */
enum { GENO_RAW = 0, GENO_ZERO_MISSING = 1, GENO_MISSING_MASK = 2 };

__device__ __forceinline__ uint32_t geno_mode(uint32_t w, int mode, uint32_t miss4)
{
  if (mode == GENO_RAW) return w;
  uint32_t eq = __vcmpeq4(w, miss4);
  return mode == GENO_ZERO_MISSING ? (w & ~eq) : (eq & 0x01010101u);
}

/* ---------- B's digits (genotype.cu) ---------- */

/* B (nk × ncols, row-major) prepared for a kernel: digits [D][cols_tot][kp]
 * (signed bytes, zero past B) of q = round(B·2^exps[col]); D = 3 for f32
 * B, 4 for f64 B (geno_digits). */
struct bdigits {
  int8_t *digits;
  int *exps;
  int64_t cols_tot, kp;
};

/* Prepares B in scratch; perm: the 2-bit xb kernel's k order (within each
 * 16 genotypes, storage position p holds genotype 4·(p%4) + p/4). */
int tsr_geno_digits(const void *b, tsr_dtype bdt, int64_t nk, int64_t ncols, int64_t cols_tot, int64_t kp, bool perm,
                    tsr_scratch &scr, cudaStream_t s, bdigits *out, tsr_errbuf *err);

/* out[i] = the sum over s < splits of part[s·stride + i], in split order;
 * dt (f32/f64) is the type of both. */
int tsr_geno_sum_splits(const void *part, int splits, int64_t stride, void *out, tsr_dtype dt, cudaStream_t s,
                        tsr_errbuf *err);

/* Splits of the k chunks over blocks: enough blocks for any GPU, from the
 * shape alone (so the summation order never depends on the device), and
 * at most max_per_split chunks each (int32 sums cannot overflow). Returns
 * the split count; *per_split chunks each. */
int tsr_geno_split_count(int64_t blocks, int64_t chunks, int64_t want_blocks, int64_t max_per_split, int *per_split);

/* The widest load (a power of two up to widest) that every row start and
 * every piece allows. */
int tsr_geno_load_width(const void *x, int64_t cb, int widest);

#endif
