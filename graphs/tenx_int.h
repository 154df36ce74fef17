/* graphs/tenx_int.h — what the 10x / Matrix Market readers
 * (tessera/tenx.h) share: lists of strings, .tsv files, the chunking and
 * the recording of one read task per row chunk (tenx.c); the readers
 * themselves are tenx_h5.c and tenx_mtx.c. */
#ifndef TSR_GRAPHS_TENX_INT_H
#define TSR_GRAPHS_TENX_INT_H

#include "graphs.h"
#include "tessera/tenx.h"

/* Values a default chunk aims at (tenx.h: 4 Mi, about 32 MiB of CSR). */
#define TENX_CHUNK_VALUES ((int64_t)4 << 20)

/* A growing list of strings that becomes one allocation: n pointers then
 * the bytes they point into, so tsr_tenx_info_free frees each list with
 * one free(). */
typedef struct tenx_strs {
  char *bytes;
  size_t len, cap;
  size_t *offs;
  int64_t n, cap_n;
} tenx_strs;

/* Appends len bytes of s (NUL added). 0 or TSR_ENOMEM (message set). */
int tenx_strs_add(tenx_strs *l, const char *s, size_t len);
/* The finished list in one block (the caller frees it), or NULL for
 * TSR_ENOMEM (message set); l is cleared either way. */
char **tenx_strs_finish(tenx_strs *l);
void tenx_strs_clear(tenx_strs *l);

/* Columns of a tab-separated text file, plain or gzip. Blank lines are
 * skipped; the first line fixes how many of the first max_cols columns
 * are kept (at least min_cols) and every line must have them. */
typedef struct tenx_tsv {
  int ncols;              /* columns kept */
  int64_t n;              /* lines */
  tenx_strs cols[3];
} tenx_tsv;
/* what names the file's role in messages ("barcodes", "features"). 0, or
 * TSR_EIO (unreadable) / TSR_EINVAL (FILE:LINE: too few columns, empty). */
int tenx_tsv_read(const char *path, const char *what, int min_cols, int max_cols, tenx_tsv *t);
void tenx_tsv_clear(tenx_tsv *t);

/* Rows per chunk for row_chunk as tenx.h says, given the shape and nnz. */
int64_t tenx_row_chunk(int64_t row_chunk, int64_t rows, int64_t nnz);

/* Adds the read op's params for rows [row0, row0 + rows) to args. */
typedef int (*tenx_chunk_fn)(const void *arg, int64_t chunk, int64_t row0, int64_t rows, tsr_args *args);
/* Records a rows x cols f32 CSR array whose chunk c (rows_per_chunk
 * rows, fewer at the end) is one `op` task with fn's params. */
int tenx_record(tsr_array_ctx *ctx, const char *op, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                tenx_chunk_fn fn, const void *arg, tsr_array **out_p);

/* The file's absolute path (the caller frees it), or TSR_EIO naming the
 * file and errno (who prefixes the message: "10x_h5"). */
int tenx_abs_path(const char *who, const char *path, char **abs_p);

#endif
