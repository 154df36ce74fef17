/* tests/fuzz/fuzz_zarr.c — libFuzzer target: a Zarr array's metadata as
 * tsr_from_zarr reads it (graphs/zarr_meta.c, through jansson): the first
 * input byte's low bit picks the file (0: format 2 `.zarray`, 1: format 3
 * `zarr.json`), the rest is its JSON, written to a temporary directory
 * and read with zmeta_read(). An accepted metadata is then held to
 * zarr_meta.h's invariants (ndim, chunk shapes, shard division, chunk
 * bytes) and used as the reader uses it: the key of the last chunk. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmp.h"
#include "tessera/tessera.h"
#include "zarr_meta.h"

static volatile uint64_t sink;

static void check_meta(const zmeta *m)
{
  if (m->ndim < 0 || m->ndim > TSR_MAX_NDIM) abort();
  int64_t bytes = (int64_t)tsr_dtype_size(m->dtype), idx[TSR_MAX_NDIM];
  for (int d = 0; d < m->ndim; d++) {
    if (m->chunk[d] < 1 || m->shape[d] < 0) abort();
    if (m->sharded && (m->inner[d] < 1 || m->chunk[d] % m->inner[d] != 0)) abort();
    bytes *= m->sharded ? m->inner[d] : m->chunk[d];
    if (bytes > TSR_ZMETA_MAX_CHUNK_BYTES) abort();
    idx[d] = m->shape[d] == 0 ? 0 : (m->shape[d] - 1) / m->chunk[d];
  }
  char key[512];
  if (zmeta_chunk_key(m->key_prefix_c, m->sep, m->ndim, idx, key, sizeof key)) sink += strlen(key);
  sink += m->fill_bits + strlen(m->pipe.codecs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1) return 0;
  bool v3 = data[0] & 1;
  char path[128];
  unlink(fuzz_path(".zarray", path, sizeof path));
  unlink(fuzz_path("zarr.json", path, sizeof path));
  fuzz_write(v3 ? "zarr.json" : ".zarray", data + 1, size - 1);
  zmeta *m = malloc(sizeof *m);
  if (m == NULL) return 0;
  if (zmeta_read(fuzz_dir, m) == 0) {
    fuzz_say("zmeta_read", "accepted");
    check_meta(m);
  } else {
    if (tsr_errmsg()[0] == '\0') abort();  /* every refusal must say why */
    fuzz_say("zmeta_read", tsr_errmsg());
  }
  free(m);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  fuzz_tmp_init();
  return 0;
}
