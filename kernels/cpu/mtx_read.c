/* kernels/cpu/mtx_read.c — mtx_read: one row chunk of a Matrix Market
 * coordinate file (plain or gzip) as a CSR chunk of f32 (csr.h).
 *
 * A Matrix Market file lists its entries in any order, so a row chunk's
 * entries may be anywhere in it. The client scanned the file once
 * (graphs/tenx_mtx.c): it knows how many entries each chunk gets (`nnz`,
 * so the output is sized exactly) and the byte range of the
 * (decompressed) text holding them, [begin, end), with the number of the
 * line at begin (`line0`, for messages). A task reads only that range —
 * for Cell Ranger's files, sorted by cell, that is just its own cells —
 * keeps the entries whose output row is in [row0, row0 + rows), and
 * builds the chunk: counting sort by row, then tsr_k_csr_canonical_f32.
 * With `transpose` the output row is the file's column (a genes x cells
 * file read as cells x genes).
 *
 * Params: path str, transpose bool, file_rows, file_cols, entries int
 * (the size line, re-checked: a file changed since the scan fails the
 * task), row0, rows, nnz, begin, end, line0 int. Output: u8 CSR chunk of
 * rows x (transpose ? file_rows : file_cols). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "csr_build.h"
#include "util/mtx.h"
#include "ops.h"

#define LINE_CAP (64 << 10)
#define GZ_BUFFER (256 << 10)

typedef struct mtx_task {
  const char *path;
  bool transpose;
  int64_t file_rows, file_cols, entries, row0, rows, nnz, begin, end, line0;
} mtx_task;

typedef struct mtx_lines {
  gzFile f;
  char *buf;
  int64_t lineno;  /* of the line in buf */
} mtx_lines;

static int task_parse(const tsr_params *p, mtx_task *t, tsr_errbuf *err)
{
  static const char *const names[] = {"file_rows", "file_cols", "entries", "row0", "rows", "nnz", "begin", "end", "line0"};
  int64_t *dst[] = {&t->file_rows, &t->file_cols, &t->entries, &t->row0, &t->rows, &t->nnz, &t->begin, &t->end, &t->line0};
  int rc = tsr_params_get_str(p, "path", &t->path, err);
  if (rc == 0) rc = tsr_params_get_bool(p, "transpose", &t->transpose, err);
  for (size_t i = 0; rc == 0 && i < sizeof names / sizeof names[0]; i++)
    if ((rc = tsr_params_get_int(p, names[i], dst[i], err)) == 0 && *dst[i] < 0)
      return tsr_fail(err, TSR_EINVAL, "mtx_read: '%s' must be >= 0, got %lld", names[i], (long long)*dst[i]);
  if (rc != 0) return tsr_k_param_fail("mtx_read", rc, err);
  int64_t out_rows = t->transpose ? t->file_cols : t->file_rows, out_cols = t->transpose ? t->file_rows : t->file_cols;
  if (t->rows > out_rows - t->row0 || out_cols > TSR_MTX_MAX_DIM || t->nnz > t->entries)
    return tsr_fail(err, TSR_ESHAPE, "mtx_read: %s: rows [%lld, +%lld) with %lld entries do not fit %lld x %lld with %lld",
                    t->path, (long long)t->row0, (long long)t->rows, (long long)t->nnz, (long long)out_rows,
                    (long long)out_cols, (long long)t->entries);
  return 0;
}

static int mtx_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  mtx_task t;
  int rc = task_parse(p, &t, err);
  int64_t bytes = rc == 0 ? tsr_k_csr_bytes(t.rows, t.nnz, TSR_F32) : 0;
  if (rc == 0 && bytes < 0) rc = tsr_fail(err, TSR_ELIMIT, "mtx_read: %lld entries are too many for a chunk", (long long)t.nnz);
  if (rc == 0) tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return rc;
}

/* ---------- lines ---------- */

/* The next line into l->buf: 1, 0 at the end of the file, or an error. A
 * comment longer than the buffer is read to its end (only its start is
 * kept); any other line that long is an error. */
static int next_line(mtx_lines *l, const char *path, tsr_errbuf *err)
{
  if (gzgets(l->f, l->buf, LINE_CAP) == NULL) {
    int zerr = 0;
    const char *msg = gzerror(l->f, &zerr);
    if (zerr != Z_OK && zerr != Z_BUF_ERROR)
      return tsr_fail(err, TSR_EIO, "mtx_read: %s: reading after line %lld: %s", path, (long long)l->lineno, msg);
    return 0;
  }
  l->lineno++;
  size_t len = strlen(l->buf);
  if (len > 0 && l->buf[len - 1] == '\n') return 1;
  if (gzeof(l->f)) return 1;
  if (l->buf[0] != '%')
    return tsr_fail(err, TSR_EINVAL, "mtx_read: %s:%lld: the line is longer than %d bytes", path, (long long)l->lineno,
                    LINE_CAP);
  char rest[1024];
  while (gzgets(l->f, rest, sizeof rest) != NULL && strchr(rest, '\n') == NULL) {}
  return 1;
}

/* The banner and size line, which must say what the client read. */
static int check_header(mtx_lines *l, const mtx_task *t, tsr_mtx_header *h, tsr_errbuf *err)
{
  tsr_errbuf why;
  int rc = next_line(l, t->path, err);
  if (rc == 0) return tsr_fail(err, TSR_EINVAL, "mtx_read: %s is empty (did the file change?)", t->path);
  if (rc < 0) return rc;
  if (tsr_mtx_banner(l->buf, h, &why) != 0) return tsr_fail(err, TSR_EINVAL, "mtx_read: %s:1: %s", t->path, why.text);
  while ((rc = next_line(l, t->path, err)) == 1 && tsr_mtx_skip(l->buf)) {}
  if (rc < 0) return rc;
  if (rc == 0 || tsr_mtx_size(l->buf, h, &why) != 0)
    return tsr_fail(err, TSR_EINVAL, "mtx_read: %s:%lld: no size line (did the file change?)", t->path, (long long)l->lineno);
  if (h->rows != t->file_rows || h->cols != t->file_cols || h->entries != t->entries)
    return tsr_fail(err, TSR_EINVAL, "mtx_read: %s now says %lld x %lld with %lld entries, not %lld x %lld with %lld: the file changed",
                    t->path, (long long)h->rows, (long long)h->cols, (long long)h->entries, (long long)t->file_rows,
                    (long long)t->file_cols, (long long)t->entries);
  return 0;
}

/* ---------- the chunk ---------- */

typedef struct mtx_found {
  int32_t *row, *col;
  float *val;
  int64_t n;
} mtx_found;

/* The entries of the task's rows in [begin, end) into f. */
static int collect(mtx_lines *l, const mtx_task *t, const tsr_mtx_header *h, mtx_found *f, tsr_errbuf *err)
{
  if (gztell(l->f) < t->begin) {
    if (gzseek(l->f, (z_off_t)t->begin, SEEK_SET) < 0)
      return tsr_fail(err, TSR_EIO, "mtx_read: %s: cannot reach byte %lld (did the file change?)", t->path, (long long)t->begin);
    l->lineno = t->line0 - 1;
  }
  int rc = 0;
  while (rc == 0 && gztell(l->f) < t->end) {
    int got = next_line(l, t->path, err);
    if (got <= 0) return got < 0 ? got : tsr_fail(err, TSR_EINVAL, "mtx_read: %s ends at line %lld: the file changed", t->path, (long long)l->lineno);
    if (tsr_mtx_skip(l->buf)) continue;
    int64_t i, j;
    double v;
    tsr_errbuf why;
    if (tsr_mtx_entry(l->buf, h, &i, &j, &v, &why) != 0)
      return tsr_fail(err, TSR_EINVAL, "mtx_read: %s:%lld: %s", t->path, (long long)l->lineno, why.text);
    int64_t r = (t->transpose ? j : i) - t->row0, c = t->transpose ? i : j;
    if (r < 0 || r >= t->rows) continue;
    if (f->n == t->nnz) rc = -1;
    else f->row[f->n] = (int32_t)r, f->col[f->n] = (int32_t)c, f->val[f->n++] = (float)v;
  }
  if (rc != 0 || f->n != t->nnz)
    return tsr_fail(err, TSR_EINVAL, "mtx_read: %s: rows [%lld, +%lld) have %s %lld entries the scan found: the file changed",
                    t->path, (long long)t->row0, (long long)t->rows, rc != 0 ? "more than the" : "fewer than the",
                    (long long)t->nnz);
  return 0;
}

/* Counting sort of the found entries by row into v, then canonical rows. */
static int build(const mtx_found *f, tsr_k_csr *v, int64_t *nnz_p, tsr_errbuf *err)
{
  memset(v->indptr, 0, (size_t)(v->rows + 1) * sizeof *v->indptr);
  for (int64_t k = 0; k < f->n; k++) v->indptr[f->row[k] + 1]++;
  for (int64_t r = 0; r < v->rows; r++) v->indptr[r + 1] += v->indptr[r];
  float *val = v->values;
  for (int64_t k = 0; k < f->n; k++) {
    int64_t at = v->indptr[f->row[k]]++;
    v->indices[at] = f->col[k], val[at] = f->val[k];
  }
  for (int64_t r = v->rows; r > 0; r--) v->indptr[r] = v->indptr[r - 1];  /* back to row starts */
  v->indptr[0] = 0;
  return tsr_k_csr_canonical_f32(v, nnz_p, err);
}

static int read_chunk(mtx_lines *l, const mtx_task *t, tsr_buf *out, tsr_errbuf *err)
{
  tsr_mtx_header h;
  int rc = check_header(l, t, &h, err);
  if (rc != 0) return rc;
  size_t n = t->nnz > 0 ? (size_t)t->nnz : 1;
  mtx_found f = {malloc(n * 4), malloc(n * 4), malloc(n * 4), 0};
  if (f.row == NULL || f.col == NULL || f.val == NULL)
    rc = tsr_fail(err, TSR_ENOMEM, "mtx_read: %s: cannot allocate %lld entries", t->path, (long long)t->nnz);
  if (rc == 0) rc = collect(l, t, &h, &f, err);
  tsr_k_csr v;
  int64_t nnz = 0;
  if (rc == 0) {
    tsr_k_csr_init(out->data, t->rows, t->transpose ? t->file_rows : t->file_cols, t->nnz, TSR_F32, &v);
    rc = build(&f, &v, &nnz, err);
  }
  if (rc == 0 && nnz != t->nnz) tsr_k_csr_shrink(out, &v, nnz);
  free(f.row), free(f.col), free(f.val);
  return rc;
}

static int mtx_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  mtx_task t;
  int rc = task_parse(p, &t, err);
  if (rc != 0) return rc;
  mtx_lines l = {gzopen(t.path, "rb"), malloc(LINE_CAP), 0};
  if (l.f == NULL) rc = tsr_fail(err, TSR_EIO, "mtx_read: cannot open %s: %s", t.path, strerror(errno ? errno : ENOMEM));
  else if (l.buf == NULL) rc = tsr_fail(err, TSR_ENOMEM, "mtx_read: %s: out of memory for a line", t.path);
  if (rc == 0) gzbuffer(l.f, GZ_BUFFER);
  if (rc == 0) rc = read_chunk(&l, &t, out, err);
  if (l.f != NULL) gzclose(l.f);
  free(l.buf);
  return rc;
}

const tsr_op_def tsr_op_mtx_read = {"mtx_read", 0, 0, mtx_infer, mtx_cpu, false, NULL};
