/* tests/fuzz/fuzz_mtx.c — libFuzzer target: a Matrix Market file, read
 * twice as Tessera reads one: first line by line through the shared
 * parser (common/util/mtx.c: banner, comments, size line, entries), the
 * client's scan in graphs/tenx_mtx.c; then, when the scan accepts the
 * file, the workers' mtx_read op (kernels/cpu/mtx_read.c) on the same
 * bytes written to a temporary file, over the byte range the scan found,
 * and its CSR chunk is checked (row pointers, column bounds, entry count).
 * The first input byte's low bit picks `transpose`; the rest is the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/csr.h"
#include "fuzz_tmp.h"
#include "kernels.h"
#include "util/mtx.h"

#define MAX_OP_ROWS 4096   /* keep one op run small: the parse is the target */

typedef struct scan {
  tsr_mtx_header h;
  int64_t begin, line0, nnz;
} scan;

/* The client's scan over text (NUL-terminated copy): 0 when accepted. */
static int scan_text(char *text, size_t len, scan *s)
{
  tsr_errbuf err = {{0}};
  int64_t lineno = 0, state = 0;
  char *p = text, *end = text + len;
  memset(s, 0, sizeof *s);
  while (p < end) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *next = nl ? nl + 1 : end;
    if (nl) *nl = '\0';
    lineno++;
    int rc = 0;
    int64_t i, j;
    double v;
    if (state == 0) rc = tsr_mtx_banner(p, &s->h, &err), state = 1;
    else if (tsr_mtx_skip(p)) rc = 0;
    else if (state == 1) rc = tsr_mtx_size(p, &s->h, &err), state = 2, s->begin = next - text, s->line0 = lineno + 1;
    else if ((rc = tsr_mtx_entry(p, &s->h, &i, &j, &v, &err)) == 0) s->nnz++;
    if (nl) *nl = '\n';
    if (rc != 0) {
      if (err.text[0] == '\0') abort();  /* every refusal must say why */
      fuzz_say("mtx scan", err.text);
      return rc;
    }
    p = next;
  }
  return state == 2 && s->nnz == s->h.entries ? 0 : -1;
}

static void run_op(const scan *s, bool transpose, size_t file_len)
{
  char path[128];
  int64_t out_rows = transpose ? s->h.cols : s->h.rows, out_cols = transpose ? s->h.rows : s->h.cols;
  if (out_rows > MAX_OP_ROWS) return;
  tsr_params p = TSR_PARAMS_INIT;
  fuzz_path("m.mtx", path, sizeof path);
  tsr_params_add_str(&p, "path", path, strlen(path));
  tsr_params_add_bool(&p, "transpose", transpose);
  const char *names[] = {"file_rows", "file_cols", "entries", "row0", "rows", "nnz", "begin", "end", "line0"};
  int64_t vals[] = {s->h.rows, s->h.cols, s->h.entries, 0, out_rows, s->nnz, s->begin, (int64_t)file_len, s->line0};
  for (int i = 0; i < 9; i++) tsr_params_add_int(&p, names[i], vals[i]);
  tsr_buf out;
  tsr_errbuf err = {{0}};
  int rc = tsr_op_run_cpu(tsr_op_find("mtx_read"), &p, NULL, 0, &out, &err);
  tsr_params_clear(&p);
  if (rc != 0) {
    if (err.text[0] == '\0') abort();
    fuzz_say("mtx_read", err.text);
    return;
  }
  fuzz_say("mtx_read", "accepted");
  tsr_k_csr v;
  if (tsr_k_csr_view(&out, true, &v, &err) != 0 || v.indptr[out_rows] > s->nnz) abort();
  for (int64_t r = 0; r < out_rows; r++)
    for (int64_t k = v.indptr[r]; k < v.indptr[r + 1]; k++)
      if (v.indices[k] < 0 || v.indices[k] >= out_cols) abort();  /* the chunk must be well formed */
  free(out.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > (1 << 20)) return 0;
  bool transpose = data[0] & 1;
  size_t len = size - 1;
  char *text = malloc(len + 1);
  if (text == NULL) return 0;
  memcpy(text, data + 1, len);
  text[len] = '\0';
  scan s;
  if (memchr(text, '\0', len) == NULL && scan_text(text, len, &s) == 0) {
    fuzz_write("m.mtx", data + 1, len);
    run_op(&s, transpose, len);
  }
  free(text);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  tsr_log_set_level(TSR_LOG_OFF);
  tsr_ops_init(false);
  fuzz_tmp_init();
  return 0;
}
