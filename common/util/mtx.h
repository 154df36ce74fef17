/* common/util/mtx.h — Matrix Market coordinate files, one line at a time.
 *
 * Shared by the client (graphs/tenx_mtx.c reads the header and scans the
 * entries once) and the workers (kernels/cpu/mtx_read.c reads a chunk's
 * entries), so both refuse exactly the same files with the same words.
 * Only parsing lives here (libc only); each side reads the lines itself
 * (through zlib, which reads plain and gzip files alike).
 *
 * Supported: "%%MatrixMarket matrix coordinate real|integer general"
 * (the words case-insensitive, as the format says), comment lines
 * starting with '%', then "rows cols entries", then one "i j value" line
 * per entry, 1-based. Messages never name the file: callers prefix
 * "FILE:LINE: ". */
#ifndef TSR_COMMON_MTX_H
#define TSR_COMMON_MTX_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

/* Rows and columns are stored as int32 column indices of CSR chunks
 * (either axis may become the columns); entries as int64. */
#define TSR_MTX_MAX_DIM ((int64_t)INT32_MAX)
#define TSR_MTX_MAX_ENTRIES ((int64_t)1 << 40)

typedef struct tsr_mtx_header {
  int64_t rows, cols, entries;  /* the size line */
  bool integer;                 /* field "integer" (else "real") */
} tsr_mtx_header;

/* The first line. 0, or TSR_EINVAL with a message saying what it should be. */
int tsr_mtx_banner(const char *line, tsr_mtx_header *h, tsr_errbuf *err);
/* True for a comment ('%') or blank line, which readers skip. */
bool tsr_mtx_skip(const char *line);
/* The size line "rows cols entries" into h (the banner already parsed). 0
 * or TSR_EINVAL (not three integers) / TSR_ELIMIT (beyond the limits). */
int tsr_mtx_size(const char *line, tsr_mtx_header *h, tsr_errbuf *err);
/* An entry line "i j value": 0-based row and column, each checked against
 * h, and the value (an integer field's must be an integer). 0 or
 * TSR_EINVAL naming what is wrong. */
int tsr_mtx_entry(const char *line, const tsr_mtx_header *h, int64_t *i_p, int64_t *j_p, double *v_p,
                  tsr_errbuf *err);

#endif
