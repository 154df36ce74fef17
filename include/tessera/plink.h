/* tessera/plink.h — PLINK 1 binary genotypes (PREFIX.bed, .bim, .fam) as a
 * chunked array, and the names of their samples and variants.
 *
 * The array is samples x variants: row i is the .fam's i-th sample, column
 * j the .bim's j-th variant (SNP). Its dtype is u8 and its values are the
 * dosage of allele A1 (the .bim's 5th column), as PLINK 1.9's --recode A
 * writes them: .bed code 00 (homozygous A1) → 2, 10 (heterozygous) → 1,
 * 11 (homozygous A2) → 0, and 01 (missing) → TSR_GENO_MISSING (3).
 *
 * Representation: tsr_array_encoding() is TSR_ENC_PACKED2 and
 * tsr_array_missing() is TSR_GENO_MISSING. A chunk of r samples x c
 * variants lives on the workers as u8 [r, ceil(c/4)] in pack2bit's layout:
 * element j of a row in byte j/4, bits 2(j%4) and 2(j%4)+1 (the first
 * element in the low bits), pad bits zero. It is read straight into that
 * form, one `read_bed` task per chunk on the workers (a 2-bit transpose of
 * the SNP-major file): no genotype is ever a byte of its own there, so the
 * array takes the .bed's size in worker memory. Builders decode chunks
 * where an op needs elements; tsr_compute returns the u8 values.
 * docs/plink.md has the details.
 *
 * Files: the workers read PREFIX.bed at the absolute path the client
 * resolves, so it must be visible to them there (a shared or local file
 * system). The .fam and .bim are read here, on the client.
 *
 * Errors: as in tessera.h. tsr_errmsg() names the file and the problem
 * (FILE:LINE for a malformed .fam or .bim line). */
#ifndef TESSERA_PLINK_H
#define TESSERA_PLINK_H

#include "tessera/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The samples of a .fam and the variants of a .bim, in file order. Every
 * pointer is owned by the info and lives until tsr_plink_info_destroy;
 * nothing in it changes after tsr_plink_info_read, so any number of threads
 * may read it at once. Strings are NUL-terminated fields of the files. */
typedef struct tsr_plink_info {
  int64_t n_samples;             /* lines of the .fam (blank lines skipped) */
  int64_t n_variants;            /* lines of the .bim (blank lines skipped) */
  const char *const *fid;        /* [n_samples] family ID (.fam column 1) */
  const char *const *iid;        /* [n_samples] individual ID (.fam column 2) */
  const char *const *chrom;      /* [n_variants] chromosome code (.bim column 1) */
  const char *const *variant_id; /* [n_variants] variant ID (.bim column 2) */
  const double *cm;              /* [n_variants] position in centimorgans (column 3) */
  const int64_t *bp;             /* [n_variants] base-pair coordinate (column 4) */
  const char *const *allele1;    /* [n_variants] A1, the allele counted (column 5) */
  const char *const *allele2;    /* [n_variants] A2 (column 6) */
} tsr_plink_info;

/* Reads PREFIX.fam and PREFIX.bim (not the .bed). Each non-blank line must
 * have exactly 6 fields separated by spaces or tabs; a .bim's cM must be
 * a number and its bp an integer. A file with no lines is an error.
 * On success *info_p is the caller's (free with tsr_plink_info_destroy).
 * Errors: TSR_EINVAL (prefix NULL or empty, a malformed line: FILE:LINE),
 * TSR_EIO (a file is missing or unreadable), TSR_ENOMEM. */
int tsr_plink_info_read(const char *prefix, tsr_plink_info **info_p);
/* Frees the info and sets *info_p to NULL; NULL or *NULL is a no-op. */
void tsr_plink_info_destroy(tsr_plink_info **info_p);

/* The genotypes of PREFIX.bed as a samples x variants array (above),
 * recorded in ctx; nothing runs until the array is computed. Reads the
 * .fam and .bim (tsr_plink_info_read's checks) and the .bed's header and
 * size here: the .bed must start 6c 1b 01 (SNP-major) and hold exactly
 * 3 + ceil(n_samples/4) x n_variants bytes.
 *
 * chunks: NULL for the default (all samples x as many variants as fill
 * 64 MiB packed, between 4 and 8192 and a multiple of 4; the samples too
 * are split when even 256 variants of all of them exceed 64 MiB), or 2
 * entries (samples, variants) as in tsr_random_uniform: an entry <= 0 or
 * >= that axis's length means one chunk along it. Any chunking gives the
 * same values.
 *
 * When a chunk is read, its task re-checks the .bed's header and size
 * (the file may have changed since) and fails with a message naming the
 * file; the future's error message carries it.
 *
 * Errors: TSR_EINVAL (a NULL argument, an empty prefix, a malformed .fam or
 * .bim), TSR_EIO (a missing or unreadable file; a .bed with a wrong magic,
 * in individual-major mode, or of the wrong size: the message gives both
 * the size and what the .fam and .bim counts need), TSR_ENOMEM. */
int tsr_from_plink(tsr_array_ctx *ctx, const char *prefix, const int64_t *chunks, tsr_array **out_p);

#ifdef __cplusplus
}
#endif
#endif
