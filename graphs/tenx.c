/* graphs/tenx.c — the parts the 10x / Matrix Market readers share
 * (tenx_int.h): string lists, .tsv files (plain or gzip, through zlib,
 * which reads both), the default chunking, and recording one read task
 * per row chunk of a CSR array. Also tsr_tenx_info_free. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tenx_int.h"

#define TSR_API __attribute__((visibility("default")))

/* ---------- string lists ---------- */

int tenx_strs_add(tenx_strs *l, const char *s, size_t len)
{
  if (l->len + len + 1 > l->cap) {
    size_t cap = l->cap ? l->cap : 4096;
    while (cap < l->len + len + 1) cap *= 2;
    char *b = realloc(l->bytes, cap);
    if (b == NULL) return client_fail(TSR_ENOMEM, "10x: out of memory for %zu bytes of names", cap);
    l->bytes = b, l->cap = cap;
  }
  if (l->n == l->cap_n) {
    int64_t cap_n = l->cap_n ? 2 * l->cap_n : 1024;
    size_t *o = realloc(l->offs, (size_t)cap_n * sizeof *o);
    if (o == NULL) return client_fail(TSR_ENOMEM, "10x: out of memory for %lld names", (long long)cap_n);
    l->offs = o, l->cap_n = cap_n;
  }
  memcpy(l->bytes + l->len, s, len);
  l->bytes[l->len + len] = '\0';
  l->offs[l->n++] = l->len;
  l->len += len + 1;
  return 0;
}

char **tenx_strs_finish(tenx_strs *l)
{
  size_t ptrs = (size_t)l->n * sizeof(char *);
  char **out = malloc(ptrs + l->len + 1);
  if (out == NULL) client_fail(TSR_ENOMEM, "10x: out of memory for %lld names", (long long)l->n);
  if (out != NULL) {
    char *text = (char *)out + ptrs;
    if (l->len > 0) memcpy(text, l->bytes, l->len);
    for (int64_t i = 0; i < l->n; i++) out[i] = text + l->offs[i];
  }
  tenx_strs_clear(l);
  return out;
}

void tenx_strs_clear(tenx_strs *l)
{
  free(l->bytes), free(l->offs);
  memset(l, 0, sizeof *l);
}

TSR_API void tsr_tenx_info_free(tsr_tenx_info *info)
{
  if (info == NULL) return;
  free(info->barcodes), free(info->gene_ids), free(info->gene_names), free(info->feature_types), free(info->genomes);
  memset(info, 0, sizeof *info);
}

/* ---------- .tsv files ---------- */

/* The whole (decompressed) file, NUL-terminated, into *text_p. */
static int read_all(const char *path, const char *what, char **text_p, size_t *len_p)
{
  errno = 0;
  gzFile f = gzopen(path, "rb");
  if (f == NULL)
    return client_fail(TSR_EIO, "10x: cannot open %s (%s): %s", path, what, strerror(errno ? errno : ENOMEM));
  size_t len = 0, cap = 1 << 16;
  char *text = malloc(cap);
  int rc = text != NULL ? 0 : client_fail(TSR_ENOMEM, "10x: out of memory reading %s", path);
  for (int got = 1; rc == 0 && got > 0; len += (size_t)(got > 0 ? got : 0)) {
    if (cap - len < (1 << 15)) {
      char *t = realloc(text, cap * 2);
      if (t == NULL) rc = client_fail(TSR_ENOMEM, "10x: out of memory reading %s", path);
      else text = t, cap *= 2;
    }
    got = rc == 0 ? gzread(f, text + len, (unsigned)(cap - len - 1)) : 0;
    if (got < 0) rc = client_fail(TSR_EIO, "10x: reading %s (%s): %s", path, what, gzerror(f, &got));
  }
  gzclose(f);
  if (rc != 0) {
    free(text);
    return rc;
  }
  text[len] = '\0';
  *text_p = text, *len_p = len;
  return 0;
}

/* Splits line (NUL-terminated, no newline) at tabs in place: up to max
 * fields into f, returns how many there are. */
static int split_tabs(char *line, char **f, int max)
{
  int n = 0;
  for (char *p = line;; p++) {
    if (n < max) f[n] = p;
    n++;
    p = strchr(p, '\t');
    if (p == NULL) return n;
    *p = '\0';
  }
}

static int tsv_line(tenx_tsv *t, char *line, const char *path, const char *what, int min_cols, int max_cols,
                    int64_t lineno)
{
  char *f[3];
  int n = split_tabs(line, f, max_cols);
  if (t->n == 0) t->ncols = n < max_cols ? n : max_cols;
  if (n < min_cols || n < t->ncols)
    return client_fail(TSR_EINVAL, "10x: %s:%lld: expected %d tab-separated column%s (%s), found %d", path,
                       (long long)lineno, t->ncols > min_cols ? t->ncols : min_cols, min_cols == 1 && t->ncols == 1 ? "" : "s",
                       what, n);
  for (int c = 0; c < t->ncols; c++) {
    int rc = tenx_strs_add(&t->cols[c], f[c], strlen(f[c]));
    if (rc != 0) return rc;
  }
  t->n++;
  return 0;
}

int tenx_tsv_read(const char *path, const char *what, int min_cols, int max_cols, tenx_tsv *t)
{
  memset(t, 0, sizeof *t);
  char *text = NULL;
  size_t len = 0;
  int rc = read_all(path, what, &text, &len);
  if (rc != 0) return rc;
  int64_t lineno = 0;
  for (char *p = text, *end = text + len; rc == 0 && p < end; p++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL) nl = end;
    *nl = '\0';
    lineno++;
    if (nl > p && nl[-1] == '\r') nl[-1] = '\0';
    if (*p != '\0') rc = tsv_line(t, p, path, what, min_cols, max_cols, lineno);
    p = nl;
  }
  free(text);
  if (rc == 0 && t->n == 0) rc = client_fail(TSR_EINVAL, "10x: %s (%s) has no lines", path, what);
  if (rc != 0) tenx_tsv_clear(t);
  return rc;
}

void tenx_tsv_clear(tenx_tsv *t)
{
  for (int c = 0; c < 3; c++) tenx_strs_clear(&t->cols[c]);
  t->n = 0, t->ncols = 0;
}

/* ---------- the array ---------- */

int64_t tenx_row_chunk(int64_t row_chunk, int64_t rows, int64_t nnz)
{
  if (row_chunk > 0) return row_chunk < rows ? row_chunk : rows;
  if (nnz <= 0 || rows <= 0) return rows > 0 ? rows : 1;
  /* rows * (values per chunk) / nnz, rounded up, without overflow */
  double want = (double)TENX_CHUNK_VALUES * (double)rows / (double)nnz;
  int64_t r = want >= (double)rows ? rows : (int64_t)want + 1;
  return r < 1 ? 1 : r;
}

int tenx_record(tsr_array_ctx *ctx, const char *op, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                tenx_chunk_fn fn, const void *arg, tsr_array **out_p)
{
  int64_t shape[2] = {rows, cols}, chunks[2] = {rows_per_chunk, cols};
  tsr_array *a = NULL;
  int rc = garray_new(ctx, "tenx", TSR_F32, 2, shape, chunks, &a);
  for (int64_t c = 0; rc == 0 && c < a->nchunks[0]; c++) {
    tsr_args *args = NULL;
    int64_t row0 = c * a->chunk[0], n = garray_chunk_len(a, 0, c);
    rc = tsr_args_new(&args);
    if (rc == 0) rc = fn(arg, c, row0, n, args);
    if (rc == TSR_ENOMEM) rc = client_fail(rc, "10x: out of memory for the params of chunk %lld", (long long)c);
    if (rc == 0) rc = gtask_add(ctx, a->keys[c], op, args, NULL, 0);
    tsr_args_destroy(&args);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &a);
    return rc;
  }
  a->encoding = TSR_ENC_CSR;
  *out_p = a;
  return 0;
}

int tenx_abs_path(const char *who, const char *path, char **abs_p)
{
  char *abs = realpath(path, NULL);
  if (abs == NULL) return client_fail(TSR_EIO, "%s: cannot open %s: %s", who, path, strerror(errno));
  *abs_p = abs;
  return 0;
}
