/* graphs/plink.c — PLINK 1 binary genotypes in (tessera/plink.h). Here, on
 * the client: the .fam and .bim are read, the .bed's header and size are
 * checked against them, and one `read_bed` task per chunk is recorded;
 * the workers read and transpose the chunks (kernels/cpu/plink.c).
 *
 * The text files are read whole and split in place: every string of an
 * info points into one of two buffers the info owns, so a million samples
 * cost one read and a few arrays, not a million allocations.
 *
 * Invariants: an info is complete and never changes once returned; an
 * array from tsr_from_plink is TSR_ENC_PACKED2 with missing value
 * TSR_GENO_MISSING, and its tasks name the .bed by its absolute path. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graphs.h"
#include "tessera/plink.h"

#define TSR_API __attribute__((visibility("default")))
#define PLINK_FIELDS 6
#define BED_HEADER 3
/* Default chunks (plink.h): packed bytes a chunk aims at, and bounds on
 * its variants. 64 MiB is 2,684 variants of 100,000 samples. */
#define CHUNK_BYTES ((int64_t)64 << 20)
#define CHUNK_MIN_VARIANTS 256
#define CHUNK_MAX_VARIANTS 8192

typedef struct plink_info {
  tsr_plink_info pub;  /* first: what the caller sees */
  char *fam_text, *bim_text;
  const char **fid, **iid, **chrom, **vid, **a1, **a2;
  double *cm;
  int64_t *bp;
} plink_info;

static int64_t packed_len(int64_t c)
{
  return c / 4 + (c % 4 != 0);
}

/* ---------- text files ---------- */

/* The whole file at path, NUL-terminated, into *text_p (the caller's). */
static int read_text(const char *path, char **text_p, size_t *len_p)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return client_fail(TSR_EIO, "plink: cannot open %s: %s", path, strerror(errno));
  struct stat st;
  int rc = fstat(fd, &st) == 0 ? 0 : client_fail(TSR_EIO, "plink: cannot stat %s: %s", path, strerror(errno));
  size_t len = rc == 0 ? (size_t)st.st_size : 0, got = 0;
  char *text = rc == 0 ? malloc(len + 1) : NULL;
  if (rc == 0 && text == NULL) rc = client_fail(TSR_ENOMEM, "plink: cannot allocate %zu bytes for %s", len + 1, path);
  while (rc == 0 && got < len) {
    ssize_t n = read(fd, text + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) rc = client_fail(TSR_EIO, "plink: reading %s: %s", path, n < 0 ? strerror(errno) : "it shrank while read");
    else got += (size_t)n;
  }
  close(fd);
  const char *nul = rc == 0 ? memchr(text, '\0', len) : NULL;
  if (nul != NULL)
    rc = client_fail(TSR_EINVAL, "plink: %s is not a text file (a NUL byte at offset %zu)", path, (size_t)(nul - text));
  if (rc != 0) {
    free(text);
    return rc;
  }
  text[len] = '\0';
  *text_p = text;
  *len_p = len;
  return 0;
}

static bool is_sep(char c)
{
  return c == ' ' || c == '\t' || c == '\r';
}

/* Splits the NUL-terminated line at p in place: fields end in NULs, the
 * first PLINK_FIELDS go to f. Returns the number of fields. */
static int split_line(char *p, char **f)
{
  int n = 0;
  while (*p != '\0') {
    while (is_sep(*p)) p++;
    if (*p == '\0') break;
    if (n < PLINK_FIELDS) f[n] = p;
    n++;
    while (*p != '\0' && !is_sep(*p)) p++;
    if (*p != '\0') *p++ = '\0';
  }
  return n;
}

typedef int (*line_fn)(plink_info *info, int64_t index, char **f, const char *path, int64_t lineno);

/* Calls fn for each non-blank line of text (len bytes), which must have
 * PLINK_FIELDS fields (what names them); the count goes to *count_p. */
static int each_line(char *text, size_t len, const char *path, const char *what, plink_info *info, line_fn fn,
                     int64_t *count_p)
{
  int64_t lineno = 0, index = 0;
  for (char *p = text, *end = text + len; p < end; lineno++) {
    char *nl = memchr(p, '\n', (size_t)(end - p)), *f[PLINK_FIELDS];
    if (nl == NULL) nl = end;
    *nl = '\0';
    int n = split_line(p, f);
    if (n != 0 && n != PLINK_FIELDS)
      return client_fail(TSR_EINVAL, "plink: %s:%lld: expected %d fields (%s), found %d", path, (long long)lineno + 1,
                         PLINK_FIELDS, what, n);
    if (n != 0) {
      int rc = fn(info, index++, f, path, lineno + 1);
      if (rc != 0) return rc;
    }
    p = nl + 1;
  }
  if (index == 0) return client_fail(TSR_EINVAL, "plink: %s has no lines (%s)", path, what);
  *count_p = index;
  return 0;
}

/* Upper bound on the lines of text: its newlines, plus an unended last line. */
static size_t max_lines(const char *text, size_t len)
{
  size_t n = 1;
  for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p++) n++;
  return n;
}

/* ---------- .fam and .bim ---------- */

static int fam_line(plink_info *info, int64_t i, char **f, const char *path, int64_t lineno)
{
  (void)path, (void)lineno;
  info->fid[i] = f[0];
  info->iid[i] = f[1];
  return 0;
}

static int bim_line(plink_info *info, int64_t i, char **f, const char *path, int64_t lineno)
{
  char *end;
  errno = 0;
  double cm = strtod(f[2], &end);
  if (*end != '\0' || errno == ERANGE)
    return client_fail(TSR_EINVAL, "plink: %s:%lld: the cM position '%s' is not a number", path, (long long)lineno, f[2]);
  errno = 0;
  long long bp = strtoll(f[3], &end, 10);
  if (*end != '\0' || errno == ERANGE)
    return client_fail(TSR_EINVAL, "plink: %s:%lld: the bp coordinate '%s' is not an integer", path, (long long)lineno,
                       f[3]);
  info->chrom[i] = f[0], info->vid[i] = f[1], info->a1[i] = f[4], info->a2[i] = f[5];
  info->cm[i] = cm;
  info->bp[i] = bp;
  return 0;
}

static int read_fam(plink_info *info, const char *path)
{
  size_t len, lines;
  int rc = read_text(path, &info->fam_text, &len);
  if (rc != 0) return rc;
  lines = max_lines(info->fam_text, len);
  info->fid = malloc(lines * sizeof *info->fid);
  info->iid = malloc(lines * sizeof *info->iid);
  if (info->fid == NULL || info->iid == NULL) return client_fail(TSR_ENOMEM, "plink: out of memory for %s", path);
  return each_line(info->fam_text, len, path, "FID IID father mother sex phenotype", info, fam_line,
                   &info->pub.n_samples);
}

static int read_bim(plink_info *info, const char *path)
{
  size_t len, lines;
  int rc = read_text(path, &info->bim_text, &len);
  if (rc != 0) return rc;
  lines = max_lines(info->bim_text, len);
  const char ***arrays[] = {&info->chrom, &info->vid, &info->a1, &info->a2};
  for (size_t i = 0; i < 4; i++)
    if ((*arrays[i] = malloc(lines * sizeof **arrays[i])) == NULL) rc = TSR_ENOMEM;
  info->cm = malloc(lines * sizeof *info->cm);
  info->bp = malloc(lines * sizeof *info->bp);
  if (rc != 0 || info->cm == NULL || info->bp == NULL) return client_fail(TSR_ENOMEM, "plink: out of memory for %s", path);
  return each_line(info->bim_text, len, path, "chromosome ID cM bp A1 A2", info, bim_line, &info->pub.n_variants);
}

/* prefix + ext into buf (cap bytes), or an error for a prefix too long. */
static int file_path(const char *prefix, const char *ext, char *buf, size_t cap)
{
  if ((size_t)snprintf(buf, cap, "%s%s", prefix, ext) >= cap)
    return client_fail(TSR_EINVAL, "plink: the prefix is too long (%zu bytes): %.100s...", strlen(prefix), prefix);
  return 0;
}

TSR_API void tsr_plink_info_destroy(tsr_plink_info **info_p)
{
  if (info_p == NULL || *info_p == NULL) return;
  plink_info *info = (plink_info *)*info_p;
  free(info->fam_text), free(info->bim_text);
  free(info->fid), free(info->iid), free(info->chrom), free(info->vid), free(info->a1), free(info->a2);
  free(info->cm), free(info->bp);
  free(info);
  *info_p = NULL;
}

TSR_API int tsr_plink_info_read(const char *prefix, tsr_plink_info **info_p)
{
  if (prefix == NULL || prefix[0] == '\0' || info_p == NULL)
    return client_fail(TSR_EINVAL, "plink_info_read: the prefix is NULL or empty");
  char path[PATH_MAX];
  plink_info *info = calloc(1, sizeof *info);
  int rc = info != NULL ? file_path(prefix, ".fam", path, sizeof path) : client_fail(TSR_ENOMEM, "plink: out of memory");
  if (rc == 0) rc = read_fam(info, path);
  if (rc == 0) rc = file_path(prefix, ".bim", path, sizeof path);
  if (rc == 0) rc = read_bim(info, path);
  tsr_plink_info *pub = info != NULL ? &info->pub : NULL;
  if (rc != 0) {
    tsr_plink_info_destroy(&pub);
    return rc;
  }
  pub->fid = info->fid, pub->iid = info->iid;
  pub->chrom = info->chrom, pub->variant_id = info->vid, pub->allele1 = info->a1, pub->allele2 = info->a2;
  pub->cm = info->cm, pub->bp = info->bp;
  *info_p = pub;
  return 0;
}

/* ---------- .bed ---------- */

/* The header and exact size of the .bed at path against the counts. */
static int bed_check_fd(int fd, const char *path, const char *prefix, int64_t n, int64_t m)
{
  struct stat st;
  unsigned char magic[BED_HEADER];
  if (fstat(fd, &st) != 0) return client_fail(TSR_EIO, "plink: cannot stat %s: %s", path, strerror(errno));
  if (st.st_size < BED_HEADER || pread(fd, magic, BED_HEADER, 0) != BED_HEADER)
    return client_fail(TSR_EIO, "plink: %s is truncated: %lld bytes, shorter than the 3-byte header", path,
                       (long long)st.st_size);
  if (magic[0] != 0x6c || magic[1] != 0x1b)
    return client_fail(TSR_EIO, "plink: %s is not a PLINK .bed file: it starts %02x %02x, not 6c 1b", path, magic[0],
                       magic[1]);
  if (magic[2] == 0x00)
    return client_fail(TSR_EIO,
                       "plink: %s is an individual-major .bed, which is not supported: convert it with "
                       "plink --bfile %s --make-bed --out NEWPREFIX",
                       path, prefix);
  if (magic[2] != 0x01)
    return client_fail(TSR_EIO, "plink: %s has mode byte %02x; only 01 (SNP-major) is supported", path, magic[2]);
  int64_t need = BED_HEADER + packed_len(n) * m;
  if (st.st_size != need)
    return client_fail(TSR_EIO,
                       "plink: %s has %lld bytes but %lld samples (%s.fam) x %lld variants (%s.bim) need %lld "
                       "(3 + %lld per variant)%s",
                       path, (long long)st.st_size, (long long)n, prefix, (long long)m, prefix, (long long)need,
                       (long long)packed_len(n), st.st_size < need ? ": the file is truncated" : "");
  return 0;
}

/* Checks PREFIX.bed and returns its absolute path (the caller frees it). */
static int bed_check(const char *prefix, const tsr_plink_info *info, char **abs_p)
{
  char path[PATH_MAX];
  int rc = file_path(prefix, ".bed", path, sizeof path);
  if (rc != 0) return rc;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return client_fail(TSR_EIO, "plink: cannot open %s: %s", path, strerror(errno));
  rc = bed_check_fd(fd, path, prefix, info->n_samples, info->n_variants);
  close(fd);
  char *abs = rc == 0 ? realpath(path, NULL) : NULL;
  if (rc == 0 && abs == NULL) rc = client_fail(TSR_EIO, "plink: cannot resolve %s: %s", path, strerror(errno));
  if (rc == 0) *abs_p = abs;
  return rc;
}

/* ---------- the array ---------- */

static void default_chunks(int64_t n, int64_t chunks[2])
{
  int64_t rows = n;
  if (packed_len(n) > CHUNK_BYTES / CHUNK_MIN_VARIANTS) rows = CHUNK_BYTES / CHUNK_MIN_VARIANTS * 4;
  int64_t cols = CHUNK_BYTES / packed_len(rows);
  cols = cols > CHUNK_MAX_VARIANTS ? CHUNK_MAX_VARIANTS : cols - cols % 4;
  chunks[0] = rows;
  chunks[1] = cols < 4 ? 4 : cols;
}

/* read_bed's params for block b of a. */
static int block_args(const tsr_array *a, size_t b, const char *bed, tsr_args **args_p)
{
  int64_t idx[2], off[2], shape[2];
  garray_index(a, b, idx);
  garray_block_offset(a, idx, off);
  garray_block_shape(a, idx, shape);
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_str(args, "path", bed);
  if (rc == 0) rc = tsr_args_int(args, "n_samples", a->shape[0]);
  if (rc == 0) rc = tsr_args_int(args, "n_variants", a->shape[1]);
  if (rc == 0) rc = tsr_args_int(args, "row0", off[0]);
  if (rc == 0) rc = tsr_args_int(args, "rows", shape[0]);
  if (rc == 0) rc = tsr_args_int(args, "col0", off[1]);
  if (rc == 0) rc = tsr_args_int(args, "cols", shape[1]);
  if (rc != 0) {
    tsr_args_destroy(&args);
    return client_fail(rc, "from_plink: out of memory");
  }
  *args_p = args;
  return 0;
}

static int record_reads(tsr_array_ctx *ctx, const char *bed, int64_t n, int64_t m, const int64_t *chunks,
                        tsr_array **out_p)
{
  int64_t shape[2] = {n, m}, dflt[2];
  if (chunks == NULL) default_chunks(n, dflt);
  tsr_array *a = NULL;
  int rc = garray_new(ctx, "plink", TSR_U8, 2, shape, chunks != NULL ? chunks : dflt, &a);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    tsr_args *args = NULL;
    rc = block_args(a, b, bed, &args);
    if (rc == 0) rc = gtask_add(ctx, a->keys[b], "read_bed", args, NULL, 0);
    tsr_args_destroy(&args);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &a);
    return rc;
  }
  a->encoding = TSR_ENC_PACKED2;
  a->missing = TSR_GENO_MISSING;
  *out_p = a;
  return 0;
}

TSR_API int tsr_from_plink(tsr_array_ctx *ctx, const char *prefix, const int64_t *chunks, tsr_array **out_p)
{
  if (ctx == NULL || prefix == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "from_plink: NULL argument");
  tsr_plink_info *info = NULL;
  char *bed = NULL;
  int rc = tsr_plink_info_read(prefix, &info);
  if (rc == 0) rc = bed_check(prefix, info, &bed);
  if (rc == 0) rc = record_reads(ctx, bed, info->n_samples, info->n_variants, chunks, out_p);
  free(bed);
  tsr_plink_info_destroy(&info);
  return rc;
}
