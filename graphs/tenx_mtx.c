/* graphs/tenx_mtx.c — Matrix Market in (tessera/tenx.h): tsr_from_mtx,
 * tsr_from_mtx_transposed and tsr_from_10x_mtx (a Cell Ranger directory).
 *
 * Why the client scans the whole file once: a Matrix Market file may list
 * its entries in any order, so no row chunk's entries can be found
 * without reading everything. The scan here checks every line (so a bad
 * entry is refused at once, naming FILE:LINE, not later on a worker),
 * counts each chunk's entries (its task's output is then sized exactly)
 * and notes the byte range of the decompressed text holding them. Each
 * `mtx_read` task (kernels/cpu/mtx_read.c) then parses only that range:
 * for Cell Ranger's files, sorted by cell, its own cells; for a file in
 * no order, the whole file again. The simpler alternative — one task
 * reading the whole matrix and others splitting it — would hold the whole
 * matrix in one worker's memory at once. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "tenx_int.h"
#include "util/mtx.h"

#define TSR_API __attribute__((visibility("default")))
#define LINE_CAP (64 << 10)

typedef struct mtx_src {
  const char *who, *path;      /* for messages */
  char *abs;                   /* what the workers open */
  bool transpose;
  tsr_mtx_header h;
  int64_t out_rows, out_cols, rpc, nchunks;
  int64_t *count, *begin, *end, *line0;  /* per chunk */
} mtx_src;

typedef struct mtx_lines {
  gzFile f;
  char *buf;
  int64_t lineno;
} mtx_lines;

static void src_clear(mtx_src *s)
{
  free(s->abs), free(s->count), free(s->begin), free(s->end), free(s->line0);
  s->abs = NULL, s->count = s->begin = s->end = s->line0 = NULL;
}

/* ---------- lines (as kernels/cpu/mtx_read.c reads them) ---------- */

/* The next line into l->buf: 1, 0 at the end, or an error. A comment
 * longer than the buffer is read to its end; any other line is an error. */
static int next_line(mtx_lines *l, const mtx_src *s)
{
  if (gzgets(l->f, l->buf, LINE_CAP) == NULL) {
    int zerr = 0;
    const char *msg = gzerror(l->f, &zerr);
    if (zerr != Z_OK && zerr != Z_BUF_ERROR)
      return client_fail(TSR_EIO, "%s: %s: reading after line %lld: %s", s->who, s->path, (long long)l->lineno, msg);
    return 0;
  }
  l->lineno++;
  size_t len = strlen(l->buf);
  if ((len > 0 && l->buf[len - 1] == '\n') || gzeof(l->f)) return 1;
  if (l->buf[0] != '%')
    return client_fail(TSR_EINVAL, "%s: %s:%lld: the line is longer than %d bytes", s->who, s->path, (long long)l->lineno, LINE_CAP);
  char rest[1024];
  while (gzgets(l->f, rest, sizeof rest) != NULL && strchr(rest, '\n') == NULL) {}
  return 1;
}

/* ---------- the header ---------- */

static int read_header(mtx_lines *l, mtx_src *s)
{
  tsr_errbuf why;
  int rc = next_line(l, s);
  if (rc == 0) return client_fail(TSR_EINVAL, "%s: %s is empty, not a Matrix Market file", s->who, s->path);
  if (rc < 0) return rc;
  if (tsr_mtx_banner(l->buf, &s->h, &why) != 0) return client_fail(TSR_EINVAL, "%s: %s:1: %s", s->who, s->path, why.text);
  while ((rc = next_line(l, s)) == 1 && tsr_mtx_skip(l->buf)) {}
  if (rc < 0) return rc;
  if (rc == 0) return client_fail(TSR_EINVAL, "%s: %s: no size line 'rows columns entries' after the header", s->who, s->path);
  if ((rc = tsr_mtx_size(l->buf, &s->h, &why)) != 0)
    return client_fail(rc, "%s: %s:%lld: %s", s->who, s->path, (long long)l->lineno, why.text);
  if (s->h.rows == 0 || s->h.cols == 0)
    return client_fail(TSR_EINVAL, "%s: %s:%lld: the matrix is %lld x %lld: empty", s->who, s->path, (long long)l->lineno,
                       (long long)s->h.rows, (long long)s->h.cols);
  return 0;
}

/* The chunking, and the per-chunk tallies of the scan. */
static int plan_chunks(mtx_src *s, int64_t row_chunk)
{
  s->out_rows = s->transpose ? s->h.cols : s->h.rows;
  s->out_cols = s->transpose ? s->h.rows : s->h.cols;
  s->rpc = tenx_row_chunk(row_chunk, s->out_rows, s->h.entries);
  s->nchunks = (s->out_rows + s->rpc - 1) / s->rpc;
  size_t n = (size_t)s->nchunks;
  s->count = calloc(n, 8), s->begin = calloc(n, 8), s->end = calloc(n, 8), s->line0 = calloc(n, 8);
  if (s->count == NULL || s->begin == NULL || s->end == NULL || s->line0 == NULL)
    return client_fail(TSR_ENOMEM, "%s: out of memory for %lld chunks", s->who, (long long)s->nchunks);
  for (size_t c = 0; c < n; c++) s->begin[c] = INT64_MAX;
  return 0;
}

/* ---------- the scan ---------- */

/* One entry line at [pos, end) (line lineno): checked and tallied. */
static int tally(mtx_src *s, const char *line, int64_t lineno, int64_t pos, int64_t end)
{
  tsr_errbuf why;
  int64_t i, j;
  double v;
  if (tsr_mtx_entry(line, &s->h, &i, &j, &v, &why) != 0)
    return client_fail(TSR_EINVAL, "%s: %s:%lld: %s", s->who, s->path, (long long)lineno, why.text);
  int64_t c = (s->transpose ? j : i) / s->rpc;
  s->count[c]++;
  if (pos < s->begin[c]) s->begin[c] = pos, s->line0[c] = lineno;
  s->end[c] = end;
  return 0;
}

static int scan_entries(mtx_lines *l, mtx_src *s)
{
  int64_t seen = 0, size_line = l->lineno;
  for (;;) {
    int64_t pos = gztell(l->f);
    int rc = next_line(l, s);
    if (rc <= 0) {
      if (rc == 0 && seen < s->h.entries)
        rc = client_fail(TSR_EINVAL, "%s: %s has %lld entries but its size line (line %lld) declares %lld: the file is truncated",
                         s->who, s->path, (long long)seen, (long long)size_line, (long long)s->h.entries);
      return rc;
    }
    if (tsr_mtx_skip(l->buf)) continue;
    if (++seen > s->h.entries)
      return client_fail(TSR_EINVAL, "%s: %s:%lld: more entries than the %lld its size line (line %lld) declares", s->who,
                         s->path, (long long)l->lineno, (long long)s->h.entries, (long long)size_line);
    if ((rc = tally(s, l->buf, l->lineno, pos, gztell(l->f))) != 0) return rc;
  }
}

static int scan(mtx_src *s, int64_t row_chunk)
{
  int rc = tenx_abs_path(s->who, s->path, &s->abs);
  if (rc != 0) return rc;
  errno = 0;
  mtx_lines l = {gzopen(s->abs, "rb"), malloc(LINE_CAP), 0};
  if (l.f == NULL) rc = client_fail(TSR_EIO, "%s: cannot open %s: %s", s->who, s->path, strerror(errno ? errno : ENOMEM));
  else if (l.buf == NULL) rc = client_fail(TSR_ENOMEM, "%s: out of memory reading %s", s->who, s->path);
  if (rc == 0) gzbuffer(l.f, 256 << 10);
  if (rc == 0) rc = read_header(&l, s);
  if (rc == 0) rc = plan_chunks(s, row_chunk);
  if (rc == 0) rc = scan_entries(&l, s);
  if (l.f != NULL) gzclose(l.f);
  free(l.buf);
  return rc;
}

/* ---------- the array ---------- */

static int chunk_args(const void *arg, int64_t c, int64_t row0, int64_t rows, tsr_args *a)
{
  const mtx_src *s = arg;
  bool none = s->count[c] == 0;
  int rc = tsr_args_str(a, "path", s->abs);
  if (rc == 0) rc = tsr_args_bool(a, "transpose", s->transpose);
  if (rc == 0) rc = tsr_args_int(a, "file_rows", s->h.rows);
  if (rc == 0) rc = tsr_args_int(a, "file_cols", s->h.cols);
  if (rc == 0) rc = tsr_args_int(a, "entries", s->h.entries);
  if (rc == 0) rc = tsr_args_int(a, "row0", row0);
  if (rc == 0) rc = tsr_args_int(a, "rows", rows);
  if (rc == 0) rc = tsr_args_int(a, "nnz", s->count[c]);
  if (rc == 0) rc = tsr_args_int(a, "begin", none ? 0 : s->begin[c]);
  if (rc == 0) rc = tsr_args_int(a, "end", none ? 0 : s->end[c]);
  if (rc == 0) rc = tsr_args_int(a, "line0", none ? 0 : s->line0[c]);
  return rc;
}

/* Scans s->path and records the array; the header into info. */
static int read_mtx(tsr_array_ctx *ctx, mtx_src *s, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info)
{
  int rc = scan(s, row_chunk);
  if (rc == 0) rc = tenx_record(ctx, "mtx_read", s->out_rows, s->out_cols, s->rpc, chunk_args, s, x_p);
  if (rc == 0) info->n_cells = s->out_rows, info->n_genes = s->out_cols, info->nnz = s->h.entries;
  src_clear(s);
  return rc;
}

static int from_mtx(tsr_array_ctx *ctx, const char *who, const char *path, bool transpose, int64_t row_chunk,
                    tsr_array **x_p, tsr_tenx_info *info)
{
  if (ctx == NULL || path == NULL || x_p == NULL) return client_fail(TSR_EINVAL, "%s: NULL argument", who);
  mtx_src s = {.who = who, .path = path, .transpose = transpose};
  tsr_tenx_info got = {0};
  int rc = read_mtx(ctx, &s, row_chunk, x_p, &got);
  if (rc == 0 && info != NULL) *info = got;
  return rc;
}

TSR_API int tsr_from_mtx(tsr_array_ctx *ctx, const char *path, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info)
{
  return from_mtx(ctx, "mtx", path, false, row_chunk, x_p, info);
}

TSR_API int tsr_from_mtx_transposed(tsr_array_ctx *ctx, const char *path, int64_t row_chunk, tsr_array **x_p,
                                    tsr_tenx_info *info)
{
  return from_mtx(ctx, "mtx", path, true, row_chunk, x_p, info);
}

/* ---------- a Cell Ranger directory ---------- */

/* dir/name for the first name that exists, into out (cap bytes). */
static int find_file(const char *dir, const char *const *names, size_t n, char *out, size_t cap)
{
  struct stat st;
  for (size_t i = 0; i < n; i++) {
    if ((size_t)snprintf(out, cap, "%s/%s", dir, names[i]) >= cap)
      return client_fail(TSR_EINVAL, "10x_mtx: the directory name is too long: %.100s...", dir);
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) return 0;
  }
  char list[300] = "";
  for (size_t i = 0; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
  return client_fail(TSR_EIO, "10x_mtx: %s has none of %s", dir, list);
}

/* A list of n strings copied from src (names = ids for a one-column genes.tsv). */
static char **copy_strs(char *const *src, int64_t n)
{
  tenx_strs l = {0};
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < n; i++) rc = tenx_strs_add(&l, src[i], strlen(src[i]));
  char **out = rc == 0 ? tenx_strs_finish(&l) : NULL;
  tenx_strs_clear(&l);
  return out;
}

static int read_barcodes(const char *path, tsr_tenx_info *info, const char *mtx)
{
  tenx_tsv t;
  int rc = tenx_tsv_read(path, "barcodes", 1, 1, &t);
  if (rc == 0 && t.n != info->n_cells)
    rc = client_fail(TSR_EINVAL, "10x_mtx: %s has %lld barcodes but %s has %lld cells (columns)", path, (long long)t.n,
                     mtx, (long long)info->n_cells);
  if (rc == 0 && (info->barcodes = tenx_strs_finish(&t.cols[0])) == NULL) rc = TSR_ENOMEM;
  tenx_tsv_clear(&t);
  return rc;
}

static int read_features(const char *path, tsr_tenx_info *info, const char *mtx)
{
  tenx_tsv t;
  int rc = tenx_tsv_read(path, "gene id, gene name, feature type", 1, 3, &t);
  if (rc == 0 && t.n != info->n_genes)
    rc = client_fail(TSR_EINVAL, "10x_mtx: %s has %lld features but %s has %lld genes (rows)", path, (long long)t.n, mtx,
                     (long long)info->n_genes);
  if (rc == 0 && (info->gene_ids = tenx_strs_finish(&t.cols[0])) == NULL) rc = TSR_ENOMEM;
  if (rc == 0 && t.ncols >= 2 && (info->gene_names = tenx_strs_finish(&t.cols[1])) == NULL) rc = TSR_ENOMEM;
  if (rc == 0 && t.ncols == 1 && (info->gene_names = copy_strs(info->gene_ids, t.n)) == NULL) rc = TSR_ENOMEM;
  if (rc == 0 && t.ncols >= 3 && (info->feature_types = tenx_strs_finish(&t.cols[2])) == NULL) rc = TSR_ENOMEM;
  tenx_tsv_clear(&t);
  return rc;
}

TSR_API int tsr_from_10x_mtx(tsr_array_ctx *ctx, const char *dir, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info)
{
  static const char *const mtx_names[] = {"matrix.mtx", "matrix.mtx.gz"};
  static const char *const bc_names[] = {"barcodes.tsv", "barcodes.tsv.gz"};
  static const char *const feat_names[] = {"features.tsv", "features.tsv.gz", "genes.tsv", "genes.tsv.gz"};
  if (ctx == NULL || dir == NULL || x_p == NULL) return client_fail(TSR_EINVAL, "10x_mtx: NULL argument");
  char mtx[PATH_MAX], bc[PATH_MAX], feat[PATH_MAX];
  int rc = find_file(dir, mtx_names, 2, mtx, sizeof mtx);
  if (rc == 0) rc = find_file(dir, bc_names, 2, bc, sizeof bc);
  if (rc == 0) rc = find_file(dir, feat_names, 4, feat, sizeof feat);
  mtx_src s = {.who = "10x_mtx", .path = mtx, .transpose = true};
  tsr_tenx_info got = {0};
  tsr_array *x = NULL;
  if (rc == 0) rc = read_mtx(ctx, &s, row_chunk, &x, &got);
  if (rc == 0) rc = read_barcodes(bc, &got, mtx);
  if (rc == 0) rc = read_features(feat, &got, mtx);
  if (rc != 0) {
    tsr_array_free(ctx, &x);
    tsr_tenx_info_free(&got);
    return rc;
  }
  *x_p = x;
  if (info != NULL) *info = got;
  else tsr_tenx_info_free(&got);
  return 0;
}
