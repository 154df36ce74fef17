/* tests/fuzz/fuzz_compute.c — libFuzzer target: the worker's side of a
 * `compute` message (worker/task.c tsr_wtask_decode, fused parts in
 * worker/fused.c), and what the worker does with it before running it:
 * the op looked up, and --max-chunk-bytes checked, which runs the op's
 * infer on the (fuzzed) params of an op without inputs
 * (worker/chunk_limit.c), with a 1 MiB limit. The input is one frame; each
 * message in it is decoded as a compute, and every field of an accepted
 * task is read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "task.h"
#include "wire/wire.h"

static volatile uint64_t sink;

static void use_task(const tsr_wtask *task)
{
  sink += task->id + strlen(task->key) + strlen(task->op_name) + (uint64_t)task->priority + task->params.n;
  for (size_t i = 0; i < task->n_inputs; i++)
    sink += strlen(task->inputs[i].key) + strlen(task->inputs[i].from) + task->inputs[i].nbytes;
  tsr_errbuf err = {{0}};
  int rc = tsr_wtask_check_chunk_limit(task, 1u << 20, &err);
  if (rc != 0 && err.text[0] == '\0') abort();
  if (getenv("TSR_FUZZ_VERBOSE") != NULL) fprintf(stderr, "fuzz: compute %s: %s\n", task->op_name, rc ? err.text : "accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  tsr_errbuf err = {{0}};
  tsr_reader rd;
  if (tsr_reader_init(&rd, data, size, &err) == 0) {
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    while (tsr_reader_next(&rd, &map, op, &err) == 1) {
      tsr_wtask *task = NULL;
      err.text[0] = '\0';
      if (tsr_wtask_decode(map, &task, &err) == 0) {
        use_task(task);
        tsr_wtask_free(&task);
      } else {
        if (err.text[0] == '\0') abort();  /* every refusal must say why */
        if (getenv("TSR_FUZZ_VERBOSE") != NULL) fprintf(stderr, "fuzz: compute: %s\n", err.text);
        uint64_t id;
        char key[TSR_MAX_KEY_LEN + 1];
        if (tsr_wtask_ident(map, &id, key) == 0) sink += id + strlen(key);
      }
    }
  }
  tsr_reader_done(&rd);
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  tsr_log_set_level(TSR_LOG_OFF);
  tsr_ops_init(true);
  return 0;
}
