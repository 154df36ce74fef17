/* kernels/cpu/plink.c — read_bed: one chunk of a PLINK 1 .bed file, kept
 * 2-bit packed (docs/plink.md).
 *
 * The file: the magic bytes 6c 1b 01 (01: SNP-major), then one record of
 * ceil(n/4) bytes per variant (SNP), sample i in byte i/4, bits 2(i%4)
 * and 2(i%4)+1, the first sample in the low bits. Codes: 00 homozygous
 * A1, 01 missing, 10 heterozygous, 11 homozygous A2.
 *
 * The chunk: samples [row0, row0+rows) are its rows, variants [col0,
 * col0+cols) its columns, held the way pack2bit holds a u8 [rows, cols]
 * array: u8 [rows, ceil(cols/4)], element j of a row in byte j/4, bits
 * 2(j%4).., pad bits zero. The values are dosages of allele A1 (PLINK 1.9's
 * --recode A): code 00 → 2, 10 → 1, 11 → 0, and 01 → 3 (TSR_GENO_MISSING).
 *
 * So a chunk is a 2-bit transpose of the records plus a remap of every
 * code, done on 4 x 4 blocks of codes in a 32-bit word; no genotype is
 * ever a byte of its own. The remap is a bitwise function of each code's
 * two bits (high' = !high, low' = low ^ high), applied to the whole word:
 * the map a 256-entry byte table would give, without the table's loads.
 * A chunk whose first sample is not a multiple of 4 needs no shifting:
 * the blocks are those of the file, and the rows before row0 are dropped
 * when the block is stored.
 *
 * Invariants: every size is checked against the file's size before
 * anything is allocated or read. infer() and cpu() each check the magic
 * and the exact size, so a file that changed after the graph was built
 * fails the task with a message that names the file. Reads are batches of
 * whole records, one pread each, or, where a chunk skips more than
 * TSR_K_BED_IO_DEFAULT's skip_bytes of each record (a slice of a very
 * large sample), one pread of just the bytes it needs per record. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops.h"

#define BED_HEADER 3
/* Transpose tiles: TILE_K bytes of each of 4·TILE_J records in, 4·TILE_K
 * rows of TILE_J bytes out. Measured on 100,000 samples x 2,684 variants
 * (docs/plink.md): 128 x 8 ran at 1.6-1.7 GB/s, 64 x 16 at 0.85. */
#define TILE_K 128
#define TILE_J 8

static int64_t packed_len(int64_t c)
{
  return c / 4 + (c % 4 != 0);
}

/* ---------- the transpose ---------- */

/* .bed codes to A1 dosages in every 2-bit field: 00→10, 01→11, 10→01, 11→00. */
static inline uint32_t remap_codes(uint32_t w)
{
  uint32_t hi = w & 0xAAAAAAAAu, lo = w & 0x55555555u;
  return (hi ^ 0xAAAAAAAAu) | (lo ^ (hi >> 1));
}

/* Byte s of w holds samples 0..3 of variant s; returns byte i holding
 * variants 0..3 of sample i. Two delta swaps: the off-diagonal elements of
 * each 2 x 2 block, then the off-diagonal 2 x 2 blocks. */
static inline uint32_t transpose4x4(uint32_t w)
{
  uint32_t t = (w ^ (w >> 6)) & 0x00CC00CCu;
  w ^= t ^ (t << 6);
  t = (w ^ (w >> 12)) & 0x0000F0F0u;
  return w ^ t ^ (t << 12);
}

typedef struct bed_xpose {
  const uint8_t *in;
  size_t istride;
  int64_t q, rows, cols, full;  /* full: groups of 4 whole variants */
  uint8_t *out;
  size_t ostride;
} bed_xpose;

/* Block (group j, sample byte k) remapped and transposed; a last group of
 * n < 4 variants gets zero codes (pad bits) for the absent ones. */
static inline uint32_t block_at(const bed_xpose *x, int64_t j, int64_t k)
{
  const uint8_t *p = x->in + (size_t)(4 * j) * x->istride + (size_t)k;
  size_t s1 = x->istride;
  if (j < x->full)
    return transpose4x4(remap_codes((uint32_t)p[0] | (uint32_t)p[s1] << 8 | (uint32_t)p[2 * s1] << 16 |
                                    (uint32_t)p[3 * s1] << 24));
  int n = (int)(x->cols - 4 * j);
  uint32_t w = 0;
  for (int s = 0; s < n; s++) w |= (uint32_t)p[(size_t)s * s1] << (8 * s);
  return transpose4x4(remap_codes(w) & ((1u << (8 * n)) - 1u));
}

/* Sample byte k holds rows 4k-q .. 4k-q+3; stores those inside the chunk. */
static void store_edge(const bed_xpose *x, int64_t k, int64_t j, uint32_t w)
{
  for (int i = 0; i < 4; i++) {
    int64_t r = 4 * k - x->q + i;
    if (r >= 0 && r < x->rows) x->out[(size_t)r * x->ostride + (size_t)j] = (uint8_t)(w >> (8 * i));
  }
}

/* Groups [j0, j1) of sample byte k, one block at a time. */
static void blocks_scalar(const bed_xpose *x, int64_t k, int64_t j0, int64_t j1)
{
  int64_t r = 4 * k - x->q;
  if (r < 0 || r + 4 > x->rows) {
    for (int64_t j = j0; j < j1; j++) store_edge(x, k, j, block_at(x, j, k));
    return;
  }
  uint8_t *o = x->out + (size_t)r * x->ostride;
  size_t s1 = x->ostride;
  for (int64_t j = j0; j < j1; j++) {
    uint32_t w = block_at(x, j, k);
    o[j] = (uint8_t)w;
    o[s1 + (size_t)j] = (uint8_t)(w >> 8);
    o[2 * s1 + (size_t)j] = (uint8_t)(w >> 16);
    o[3 * s1 + (size_t)j] = (uint8_t)(w >> 24);
  }
}

/* ---------- 16 variants x 32 samples at a time ----------
 * The same blocks, 4 to a 128-bit vector (GCC/Clang vector extensions, so
 * any target): 8 bytes of each of 16 records in, 32 rows of 4 bytes out,
 * bytes gathered and scattered by interleaving shuffles instead of one
 * load and one store per byte. Lanes are reinterpreted as bytes in memory
 * order, as on every little-endian target (x86-64, AArch64). */
typedef uint8_t v16b __attribute__((vector_size(16)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint32_t v4w __attribute__((vector_size(16)));
typedef uint64_t v2q __attribute__((vector_size(16)));

static inline v4w remap_v(v4w w)
{
  v4w hi = w & 0xAAAAAAAAu, lo = w & 0x55555555u;
  return (hi ^ 0xAAAAAAAAu) | (lo ^ (hi >> 1));
}

static inline v4w transpose4x4_v(v4w w)
{
  v4w t = (w ^ (w >> 6)) & 0x00CC00CCu;
  w ^= t ^ (t << 6);
  t = (w ^ (w >> 12)) & 0x0000F0F0u;
  return w ^ t ^ (t << 12);
}

/* Through a scalar, so the compiler loads straight into a register (a
 * memcpy into the vector went through the stack and stalled on store
 * forwarding). */
static inline v16b load8(const uint8_t *p)
{
  uint64_t u;
  memcpy(&u, p, 8);
  v2q v = {u, 0};
  return (v16b)v;
}

/* Sample bytes k..k+7 of the 4 records at p (stride s1): lane t of lo is
 * the transposed block of byte k+t, of hi that of byte k+4+t. */
static inline void group_blocks(const uint8_t *p, size_t s1, v4w *lo, v4w *hi)
{
  v16b a = load8(p), b = load8(p + s1), c = load8(p + 2 * s1), d = load8(p + 3 * s1);
  v8h ab = (v8h)__builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  v8h cd = (v8h)__builtin_shufflevector(c, d, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  *lo = transpose4x4_v(remap_v((v4w)__builtin_shufflevector(ab, cd, 0, 8, 1, 9, 2, 10, 3, 11)));
  *hi = transpose4x4_v(remap_v((v4w)__builtin_shufflevector(ab, cd, 4, 12, 5, 13, 6, 14, 7, 15)));
}

static inline void store4(uint8_t *o, size_t s1, v4w rows)
{
  for (int i = 0; i < 4; i++) {
    uint32_t v = rows[i];
    memcpy(o + (size_t)i * s1, &v, 4);
  }
}

/* g[0..3]: lane t of g[n] holds rows 4t..4t+3 of group n (one byte each);
 * writes those 16 rows, 4 bytes each (groups 0..3), at o, stride s1. */
static inline void store_groups(const v4w g[4], uint8_t *o, size_t s1)
{
  v16b b0 = (v16b)g[0], b1 = (v16b)g[1], b2 = (v16b)g[2], b3 = (v16b)g[3];
  v8h p01 = (v8h)__builtin_shufflevector(b0, b1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  v8h p23 = (v8h)__builtin_shufflevector(b2, b3, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  v8h q01 = (v8h)__builtin_shufflevector(b0, b1, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  v8h q23 = (v8h)__builtin_shufflevector(b2, b3, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  store4(o, s1, (v4w)__builtin_shufflevector(p01, p23, 0, 8, 1, 9, 2, 10, 3, 11));
  store4(o + 4 * s1, s1, (v4w)__builtin_shufflevector(p01, p23, 4, 12, 5, 13, 6, 14, 7, 15));
  store4(o + 8 * s1, s1, (v4w)__builtin_shufflevector(q01, q23, 0, 8, 1, 9, 2, 10, 3, 11));
  store4(o + 12 * s1, s1, (v4w)__builtin_shufflevector(q01, q23, 4, 12, 5, 13, 6, 14, 7, 15));
}

/* Groups j..j+3 (all whole) of sample bytes k..k+7 (rows all inside). */
static inline void blocks_16x32(const bed_xpose *x, int64_t j, int64_t k)
{
  v4w lo[4], hi[4];
  for (int g = 0; g < 4; g++)
    group_blocks(x->in + (size_t)(4 * (j + g)) * x->istride + (size_t)k, x->istride, &lo[g], &hi[g]);
  uint8_t *o = x->out + (size_t)(4 * k - x->q) * x->ostride + (size_t)j;
  store_groups(lo, o, x->ostride);
  store_groups(hi, o + 16 * x->ostride, x->ostride);
}

/* Sample bytes [k, k+8) whose 32 rows are all inside the chunk. */
static void band_fast(const bed_xpose *x, int64_t k, int64_t j0, int64_t j1)
{
  int64_t j = j0, jf = j1 < x->full ? j1 : x->full;
  for (; j + 4 <= jf; j += 4) blocks_16x32(x, j, k);
  for (int64_t kk = k; j < j1 && kk < k + 8; kk++) blocks_scalar(x, kk, j, j1);
}

static void transpose_tile(const bed_xpose *x, int64_t k0, int64_t k1, int64_t j0, int64_t j1)
{
  for (int64_t k = k0; k < k1; k += 8) {
    int64_t kend = k + 8 < k1 ? k + 8 : k1;
    if (kend - k == 8 && 4 * k - x->q >= 0 && 4 * kend - x->q <= x->rows) band_fast(x, k, j0, j1);
    else
      for (int64_t kk = k; kk < kend; kk++) blocks_scalar(x, kk, j0, j1);
  }
}

void tsr_k_bed_transpose(const uint8_t *in, size_t istride, int q, int64_t rows, int64_t cols, uint8_t *out,
                         size_t ostride)
{
  if (rows <= 0 || cols <= 0) return;
  bed_xpose x = {in, istride, q, rows, cols, cols / 4, out, ostride};
  int64_t kn = (q + rows + 3) / 4, jn = packed_len(cols);
  for (int64_t k0 = 0; k0 < kn; k0 += TILE_K)
    for (int64_t j0 = 0; j0 < jn; j0 += TILE_J)
      transpose_tile(&x, k0, k0 + TILE_K < kn ? k0 + TILE_K : kn, j0, j0 + TILE_J < jn ? j0 + TILE_J : jn);
}

/* ---------- the file ---------- */

/* The file's exact size for its counts (slice_parse keeps it in int64). */
static int64_t bed_size(const tsr_k_bed_slice *s)
{
  return BED_HEADER + packed_len(s->n_samples) * s->n_variants;
}

/* Reads exactly len bytes at off. */
static int read_exact(int fd, const char *path, void *dst, size_t len, int64_t off, tsr_errbuf *err)
{
  char *p = dst;
  while (len > 0) {
    ssize_t got = pread(fd, p, len, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return tsr_fail(err, TSR_EIO, "read_bed: reading %s: %s", path, strerror(errno));
    if (got == 0)
      return tsr_fail(err, TSR_EIO, "read_bed: %s ended at byte %lld, before the %zu bytes wanted there (did the file change?)",
                      path, (long long)off, len);
    p += got, len -= (size_t)got, off += got;
  }
  return 0;
}

int tsr_k_bed_check(int fd, const tsr_k_bed_slice *s, tsr_errbuf *err)
{
  struct stat st;
  uint8_t magic[BED_HEADER];
  if (fstat(fd, &st) != 0) return tsr_fail(err, TSR_EIO, "read_bed: cannot stat %s: %s", s->path, strerror(errno));
  if (st.st_size < BED_HEADER)
    return tsr_fail(err, TSR_EIO, "read_bed: %s is truncated: %lld bytes, shorter than the 3-byte header", s->path,
                    (long long)st.st_size);
  int rc = read_exact(fd, s->path, magic, sizeof magic, 0, err);
  if (rc != 0) return rc;
  if (magic[0] != 0x6c || magic[1] != 0x1b)
    return tsr_fail(err, TSR_EIO, "read_bed: %s is not a PLINK .bed file: it starts %02x %02x, not 6c 1b", s->path,
                    magic[0], magic[1]);
  if (magic[2] == 0x00)
    return tsr_fail(err, TSR_EIO,
                    "read_bed: %s is an individual-major .bed, which is not supported: convert it with "
                    "plink --bfile PREFIX --make-bed",
                    s->path);
  if (magic[2] != 0x01)
    return tsr_fail(err, TSR_EIO, "read_bed: %s has mode byte %02x; only 01 (SNP-major) is supported", s->path,
                    magic[2]);
  if (st.st_size != bed_size(s))
    return tsr_fail(err, TSR_EIO,
                    "read_bed: %s has %lld bytes but %lld samples x %lld variants need %lld (3 + %lld per variant)%s",
                    s->path, (long long)st.st_size, (long long)s->n_samples, (long long)s->n_variants,
                    (long long)bed_size(s), (long long)packed_len(s->n_samples),
                    st.st_size < bed_size(s) ? ": the file is truncated" : "");
  return 0;
}

/* Variants [c, c+nb) of the chunk into buf: whole records (stride bps) or
 * just the chunk's bytes of each (stride seg). */
static int read_records(int fd, const tsr_k_bed_slice *s, int64_t c, int64_t nb, int64_t stride, uint8_t *buf,
                        tsr_errbuf *err)
{
  int64_t bps = packed_len(s->n_samples), at = BED_HEADER + (s->col0 + c) * bps;
  if (stride == bps) return read_exact(fd, s->path, buf, (size_t)(nb * bps), at, err);
  for (int64_t i = 0; i < nb; i++) {
    int rc = read_exact(fd, s->path, buf + i * stride, (size_t)stride, at + i * bps + s->row0 / 4, err);
    if (rc != 0) return rc;
  }
  return 0;
}

int tsr_k_bed_read(int fd, const tsr_k_bed_slice *s, const tsr_k_bed_io *io, uint8_t *out, tsr_errbuf *err)
{
  if (s->rows == 0 || s->cols == 0) return 0;
  int64_t bps = packed_len(s->n_samples), q = s->row0 % 4, seg = (q + s->rows + 3) / 4;
  int64_t stride = (uint64_t)(bps - seg) > io->skip_bytes ? seg : bps;
  int64_t batch = (int64_t)(io->batch_bytes / (size_t)stride);
  batch -= batch % 4;
  batch = batch < 4 ? 4 : batch > s->cols ? s->cols : batch;
  uint8_t *buf = malloc((size_t)(batch * stride));
  if (buf == NULL)
    return tsr_fail(err, TSR_ENOMEM, "read_bed: %s: cannot allocate %lld bytes for %lld records", s->path,
                    (long long)(batch * stride), (long long)batch);
  const uint8_t *first = buf + (stride == bps ? s->row0 / 4 : 0);
  size_t ostride = (size_t)packed_len(s->cols);
  int rc = 0;
  for (int64_t c = 0; rc == 0 && c < s->cols; c += batch) {
    int64_t nb = s->cols - c < batch ? s->cols - c : batch;
    rc = read_records(fd, s, c, nb, stride, buf, err);
    if (rc == 0) tsr_k_bed_transpose(first, (size_t)stride, (int)q, s->rows, nb, out + c / 4, ostride);
  }
  free(buf);
  return rc;
}

/* ---------- the op ---------- */

/* path, the file's counts and the chunk, each checked against the others. */
static int slice_parse(const tsr_params *p, tsr_k_bed_slice *s, tsr_errbuf *err)
{
  static const char *const names[] = {"n_samples", "n_variants", "row0", "rows", "col0", "cols"};
  int64_t *dst[] = {&s->n_samples, &s->n_variants, &s->row0, &s->rows, &s->col0, &s->cols};
  int rc = tsr_params_get_str(p, "path", &s->path, err);
  if (rc != 0) return tsr_k_param_fail("read_bed", rc, err);
  if (s->path[0] == '\0') return tsr_fail(err, TSR_EINVAL, "read_bed: 'path' is empty");
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if ((rc = tsr_params_get_int(p, names[i], dst[i], err)) != 0) return tsr_k_param_fail("read_bed", rc, err);
    if (*dst[i] < 0)
      return tsr_fail(err, TSR_EINVAL, "read_bed: '%s' must be >= 0, got %lld", names[i], (long long)*dst[i]);
  }
  if (s->rows > s->n_samples - s->row0 || s->cols > s->n_variants - s->col0)
    return tsr_fail(err, TSR_ESHAPE,
                    "read_bed: %s: samples [%lld, +%lld) x variants [%lld, +%lld) exceed the file's %lld x %lld",
                    s->path, (long long)s->row0, (long long)s->rows, (long long)s->col0, (long long)s->cols,
                    (long long)s->n_samples, (long long)s->n_variants);
  int64_t bps = packed_len(s->n_samples);
  if (bps > 0 && s->n_variants > (INT64_MAX - BED_HEADER) / bps)
    return tsr_fail(err, TSR_ESHAPE, "read_bed: %s: %lld samples x %lld variants overflow a file size", s->path,
                    (long long)s->n_samples, (long long)s->n_variants);
  return 0;
}

/* Opens the file and checks its header and size; returns the fd or an error. */
static int bed_open(const tsr_k_bed_slice *s, tsr_errbuf *err)
{
  int fd = open(s->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return tsr_fail(err, TSR_EIO, "read_bed: cannot open %s: %s", s->path, strerror(errno));
  int rc = tsr_k_bed_check(fd, s, err);
  if (rc != 0) {
    close(fd);
    return rc;
  }
  return fd;
}

static int bed_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  tsr_k_bed_slice s;
  int rc = slice_parse(p, &s, err);
  int fd = rc == 0 ? bed_open(&s, err) : rc;
  if (fd < 0) return fd;
  close(fd);
  int64_t shape[2] = {s.rows, packed_len(s.cols)};
  tsr_k_meta_set(out, TSR_U8, 2, shape);
  return 0;
}

static int bed_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  tsr_k_bed_slice s;
  int rc = slice_parse(p, &s, err);
  if (rc != 0) return rc;
  if (out->meta.ndim != 2 || out->meta.shape[0] != s.rows || out->meta.shape[1] != packed_len(s.cols))
    return tsr_fail(err, TSR_ESHAPE, "read_bed: %s: the output is %s, not u8[%lld,%lld]", s.path,
                    tsr_k_str(&out->meta).s, (long long)s.rows, (long long)packed_len(s.cols));
  int fd = bed_open(&s, err);
  if (fd < 0) return fd;
  const tsr_k_bed_io io = TSR_K_BED_IO_DEFAULT;
  rc = tsr_k_bed_read(fd, &s, &io, out->data, err);
  close(fd);
  return rc;
}

const tsr_op_def tsr_op_read_bed = {"read_bed", 0, 0, bed_infer, bed_cpu, false, NULL};
