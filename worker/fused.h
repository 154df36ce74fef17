/* worker/fused — a fused task (task_op "fused", docs/protocol.md): the
 * parts the scheduler fused into one task, decoded from the compute's
 * params, and running them in order on one executor slot.
 *
 * Values are numbered: 0 .. n_inputs-1 are the task's inputs (fetched as
 * for any task), n_inputs + j is the output of part j. A part reads only
 * values before its own. The last part's output is the task's output,
 * stored under the task's key (the last part's key); every other part's
 * output is an intermediate: a chunk object that never enters the store,
 * is never sent anywhere, and is dropped right after its last reader ran.
 *
 * Threading: decode and free on the main thread (with the task); run on
 * the executor thread that owns the task. */
#ifndef TSR_WORKER_FUSED_H
#define TSR_WORKER_FUSED_H

#include "gpu.h"
#include "store.h"
#include "task.h"

typedef struct tsr_wpart {
  char *key;               /* owned */
  char *op_name;           /* owned */
  const tsr_op_def *op;    /* NULL: this worker has no such op (the task fails when it runs) */
  tsr_params params;
  uint32_t *refs;          /* its inputs, as value numbers (above) */
  size_t n_refs;
  size_t last_use;         /* index of the last part reading this part's output */
} tsr_wpart;

/* Decodes params {parts: [{key, op, params, inputs: [ref]}]} into
 * task->parts; the task's inputs must already be decoded. 0, TSR_EPROTO
 * with a message naming the field (e.g. "params.parts[2].inputs[0]: ..."),
 * or TSR_ENOMEM. On error the task keeps what was decoded (freed with it). */
int tsr_wfused_decode(const msgpack_object *params, tsr_wtask *task, tsr_errbuf *err);
/* Frees task->parts; called by tsr_wtask_free. */
void tsr_wfused_free(tsr_wtask *task);
/* Runs the parts of a fused task whose inputs are resolved (chunks[i] for
 * input i), on a GPU slot's stream or the host (slot NULL), and sets the
 * task's result as tsr_wtask_run does. A part's failure fails the task with
 * a message naming the part's key and op. */
void tsr_wfused_run(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks, tsr_wgpu_slot *slot,
                    const char *worker_name);

#endif
