/* worker/exec_int — what executor.c and executor_gpu.c share: recording a
 * task's failure and storing its output. Executor threads only. */
#ifndef TSR_WORKER_EXEC_INT_H
#define TSR_WORKER_EXEC_INT_H

#include "executor.h"

/* Marks the task erred with "<op>: <text>" (unless text already leads with
 * the op's name). */
void tsr_wexec_erred(tsr_wtask *task, const char *text);
/* Puts chunk (the task's output) into the store under the task's epoch and
 * cancel flag, and sets the task's result: DONE, or CANCELLED when the put
 * is refused. Drops the caller's reference either way. */
void tsr_wexec_store(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunk_p);
/* Runs the op of a task on the host; chunks are its resolved inputs. */
void tsr_wexec_run_cpu(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks);
/* Runs the op of a task on a GPU worker's slot (see tsr_wtask_run_on);
 * chunks are its resolved inputs, in order. */
void tsr_wexec_run_gpu(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks, tsr_wgpu_slot *slot);

#endif
