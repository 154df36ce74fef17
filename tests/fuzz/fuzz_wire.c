/* tests/fuzz/fuzz_wire.c — libFuzzer target: one control frame from
 * outside through common/wire exactly as the daemons read it: the
 * allocation-free validator (tsr_reader_init), then every message, and on
 * each map the decoders the scheduler and workers apply to peer input:
 * the chunk header of the data plane, dtype + shape, a params map (decoded
 * and then read back), and the scalar/array accessors. Everything decoded
 * is used (summed into a sink), so the compiler keeps every read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "wire/wire.h"

static volatile uint64_t sink;

static void use_params(const tsr_params *params)
{
  for (size_t i = 0; i < params->n; i++) {
    const tsr_param *p = &params->items[i];
    sink += strlen(p->name) + p->n;
    int64_t iv;
    double fv;
    const char *s;
    if (tsr_params_get_int(params, p->name, &iv, NULL) == 0) sink += (uint64_t)iv;
    if (tsr_params_get_float(params, p->name, &fv, NULL) == 0) sink += (uint64_t)(fv == fv);
    if (tsr_params_get_str(params, p->name, &s, NULL) == 0) sink += strlen(s);
  }
}

static void decode_map(const msgpack_object *map)
{
  tsr_errbuf err = {{0}};
  tsr_chunk_header hdr;
  if (tsr_chunk_header_decode(map, &hdr, &err) == 0) sink += hdr.nbytes + strlen(hdr.key) + (uint64_t)hdr.meta.ndim;
  else sink += strlen(err.text);
  tsr_meta meta;
  if (tsr_wire_meta(map, &meta, &err) == 0) sink += (uint64_t)meta.ndim + (uint64_t)meta.dtype;
  const msgpack_object *pm;
  if (tsr_wire_map(map, "params", &pm, &err) == 0) {
    tsr_params params = {0};
    if (tsr_wire_params(pm, &params, &err) == 0) use_params(&params);
    tsr_params_clear(&params);
    char *bytes;
    size_t len;
    if (tsr_wire_encode_object(pm, &bytes, &len) == 0) {
      sink += len;
      free(bytes);
    }
  }
  const char *s;
  size_t len, n;
  uint64_t u;
  const msgpack_object *items;
  if (tsr_wire_str(map, "key", TSR_MAX_KEY_LEN, &s, &len, &err) == 0 && len > 0) sink += (uint8_t)s[len - 1];
  if (tsr_wire_opt_uint(map, "nbytes", 0, &u, &err) == 0) sink += u;
  if (tsr_wire_opt_array(map, "keys", TSR_MAX_BATCH_TASKS, &items, &n, &err) == 0)
    for (size_t i = 0; i < n; i++)
      if (tsr_obj_str(&items[i], TSR_MAX_KEY_LEN, &s, &len, NULL) == 0) sink += len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  tsr_errbuf err = {{0}};
  tsr_reader rd;
  if (tsr_reader_init(&rd, data, size, &err) == 0) {
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    int rc;
    while ((rc = tsr_reader_next(&rd, &map, op, &err)) == 1) {
      sink += strlen(op);
      decode_map(map);
    }
  } else {
    sink += strlen(err.text);
  }
  tsr_reader_done(&rd);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  tsr_log_set_level(TSR_LOG_OFF);
  return 0;
}
