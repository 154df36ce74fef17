/* Regression tests for what fuzz_compute (tests/fuzz, docs/fuzzing.md)
 * found in the worker, as plain unit tests; the crashing inputs are kept
 * in tests/fuzz/regressions/compute/.
 *
 * chunk_limit_infer_without_inputs (fuzz_compute, 2026-11-24): the
 * worker's --max-chunk-bytes check inferred the output of any task sent
 * without inputs, also of an op that needs inputs (`clip`), whose infer
 * then read in[0] of NULL. Only ops taking no inputs are inferred now; a
 * wrong input count is refused when the task runs. */
#include "kernels.h"
#include "kit.h"
#include "task.h"
#include "wire/wire.h"

/* A compute of op with no inputs and no params, decoded as the worker does. */
static tsr_wtask *compute_without_inputs(const char *op)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 6);
  tsr_pack_kv_uint(&wb.pk, "id", 1);
  tsr_pack_kv_str(&wb.pk, "key", "k");
  tsr_pack_kv_str(&wb.pk, "task_op", op);
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_map(&wb.pk, 0);
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, 0);
  tsr_pack_kv_int(&wb.pk, "priority", 0);
  tsr_reader rd;
  const msgpack_object *map;
  char name[TSR_MAX_NAME_LEN + 1];
  tsr_wtask *task = NULL;
  if (tsr_reader_init(&rd, wb.sbuf.data, wb.sbuf.size, NULL) == 0 && tsr_reader_next(&rd, &map, name, NULL) == 1)
    tsr_wtask_decode(map, &task, NULL);
  tsr_reader_done(&rd);
  tsr_wbuf_free(&wb);
  return task;
}

TEST(chunk_limit_infer_without_inputs)
{
  /* every registered op that needs inputs, sent without them */
  int checked = 0;
  for (size_t i = 0; tsr_op_at(i) != NULL; i++) {
    const tsr_op_def *op = tsr_op_at(i);
    if (op->min_inputs == 0) continue;
    tsr_wtask *task = compute_without_inputs(op->name);
    ASSERT_TRUE(task != NULL);
    tsr_errbuf err = {{0}};
    ASSERT_OK(tsr_wtask_check_chunk_limit(task, 1u << 20, &err));
    tsr_wtask_free(&task);
    checked++;
  }
  ASSERT_TRUE(checked > 10);
  /* an input-less op over the limit is still refused */
  tsr_wtask *task = compute_without_inputs("full");
  ASSERT_TRUE(task != NULL);
  tsr_params_add_str(&task->params, "dtype", "f64", 3);
  int64_t shape[2] = {1024, 1024};
  tsr_params_add_ints(&task->params, "shape", shape, 2);
  tsr_params_add_float(&task->params, "value", 1.0);
  tsr_errbuf err = {{0}};
  ASSERT_EQ(tsr_wtask_check_chunk_limit(task, 1u << 20, &err), TSR_ELIMIT);
  ASSERT_CONTAINS(err.text, "--max-chunk-bytes");
  tsr_wtask_free(&task);
}

int main(void)
{
  tsr_log_set_level(TSR_LOG_OFF);
  tsr_ops_init(false);
  RUN(chunk_limit_infer_without_inputs);
  return kit_summary();
}
