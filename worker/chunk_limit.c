/* --max-chunk-bytes on the worker (util/limits.h, docs/limits.md): a task
 * whose inputs, as the scheduler announced them, or whose output, as its
 * op infers it from the params, exceed the limit is refused before any
 * fetch or allocation, with a message naming the limit. The output is
 * inferred only for ops without inputs (creation ops and file readers,
 * whose size comes straight from a client's params); other outputs are
 * bounded by their inputs and the memory limit. */
#include <stdio.h>

#include "kernels.h"
#include "task.h"
#include "util/limits.h"

int tsr_wtask_check_chunk_limit(const tsr_wtask *task, uint64_t max_chunk_bytes, tsr_errbuf *err)
{
  char what[TSR_MAX_KEY_LEN + 64];
  for (size_t i = 0; i < task->n_inputs; i++)
    if (task->inputs[i].nbytes > max_chunk_bytes) {
      snprintf(what, sizeof what, "input '%.200s' bytes", task->inputs[i].key);
      return tsr_limit_fail(err, "max-chunk-bytes", what, task->inputs[i].nbytes, max_chunk_bytes);
    }
  /* only an op that takes no inputs may be inferred without them (fuzz_compute:
   * a `clip` sent without inputs made its infer read in[0] of NULL) */
  if (task->op == NULL || task->n_inputs > 0 || task->op->min_inputs > 0 || task->op->infer == NULL) return 0;
  tsr_meta out;
  tsr_errbuf ignored;
  /* a params error is reported by the run itself, with its own message */
  if (task->op->infer(&task->params, NULL, 0, &out, &ignored) != 0) return 0;
  int64_t nbytes = tsr_meta_nbytes(&out);
  if (nbytes >= 0 && (uint64_t)nbytes <= max_chunk_bytes) return 0;
  snprintf(what, sizeof what, "output bytes of %s", task->op_name);
  return tsr_limit_fail(err, "max-chunk-bytes", what, nbytes < 0 ? UINT64_MAX : (uint64_t)nbytes, max_chunk_bytes);
}
