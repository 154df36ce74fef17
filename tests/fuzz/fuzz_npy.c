/* tests/fuzz/fuzz_npy.c — libFuzzer target: a .npy file's header
 * (common/util/npy.c), as load_npy and the client's tsr_from_npy parse it
 * from an open file (here an in-memory FILE). The parsed shape and data
 * offset are used the way a reader uses them: the element count and the
 * byte size must be computable without overflow when the parse succeeds,
 * and the header is written back and parsed again to the same meta. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/npy.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size == 0) return 0;
  FILE *f = fmemopen((void *)data, size, "rb");
  if (f == NULL) return 0;
  tsr_npy_info info;
  tsr_errbuf err = {{0}};
  int rc = tsr_npy_parse(f, &info, &err);
  fclose(f);
  if (rc != 0) {
    if (err.text[0] == '\0') abort();  /* every refusal must say why */
    return 0;
  }
  if (info.data_offset < 10 || info.data_offset > size) abort();  /* the header was read from these bytes */
  if (tsr_meta_check(&info.meta, NULL) != 0) abort();
  volatile uint64_t bytes = tsr_meta_nbytes(&info.meta);
  (void)bytes;
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  if (w == NULL) return 0;
  rc = tsr_npy_write_header(w, &info.meta, NULL);
  fclose(w);
  FILE *r = rc == 0 ? fmemopen(buf, len, "rb") : NULL;
  tsr_npy_info again;
  if (r != NULL && (tsr_npy_parse(r, &again, NULL) != 0 || again.meta.dtype != info.meta.dtype ||
                    again.meta.ndim != info.meta.ndim ||
                    memcmp(again.meta.shape, info.meta.shape, sizeof(int64_t) * (size_t)info.meta.ndim) != 0))
    abort();  /* what we write, we must read back */
  if (r != NULL) fclose(r);
  free(buf);
  return 0;
}
