/* tests/fuzz/fuzz_tsv.c — libFuzzer target: the .tsv files beside a 10x
 * Matrix Market matrix (graphs/tenx.c tenx_tsv_read: barcodes.tsv, and
 * features.tsv / genes.tsv), plain or gzip, as tsr_from_10x_mtx reads
 * them. The first input byte's low bit picks the role (0: barcodes, one
 * column; 1: features, one to three columns); the rest is the file,
 * written to a temporary path. Every string of an accepted file is read. */
#include <stdint.h>
#include <string.h>

#include "fuzz_tmp.h"
#include "tenx_int.h"
#include "tessera/tessera.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1) return 0;
  bool features = data[0] & 1;
  fuzz_write("t.tsv", data + 1, size - 1);
  char path[128];
  tenx_tsv t;
  int rc = features ? tenx_tsv_read(fuzz_path("t.tsv", path, sizeof path), "features", 1, 3, &t)
                    : tenx_tsv_read(fuzz_path("t.tsv", path, sizeof path), "barcodes", 1, 1, &t);
  if (rc != 0) {
    if (tsr_errmsg()[0] == '\0') abort();  /* every refusal must say why */
    fuzz_say("tenx_tsv_read", tsr_errmsg());
    return 0;
  }
  if (t.ncols < 1 || t.ncols > (features ? 3 : 1) || t.n < 1) abort();
  for (int c = 0; c < t.ncols; c++) {
    if (t.cols[c].n != t.n) abort();  /* every line has every kept column */
    for (int64_t i = 0; i < t.n; i++) sink += strlen(t.cols[c].bytes + t.cols[c].offs[i]);
  }
  tenx_tsv_clear(&t);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fuzz_tmp_init();
  return 0;
}
