/* Running a task on a GPU worker's slot.
 *
 * An op with a CUDA variant: inputs already on the device are used in
 * place; host inputs (computed here by a CPU variant, or fetched from a
 * peer) are copied up into device buffers, which replace the host chunk in
 * the store while the device has room (promote_inputs) and are otherwise
 * freed when the task ends.
 * The output is allocated from the device pool (counted against the
 * limit: a chunk that does not fit fails the task with TSR_ELIMIT naming
 * the chunk and the limit), the variant enqueues its work on the slot's
 * stream, and the stream (not the device) is synchronized before the
 * result is stored and reported. The output stays on the device until a
 * consumer elsewhere asks for it.
 *
 * An op without one runs on the host as on a CPU worker, its device inputs
 * copied down first; its output is a host chunk. So does an op whose CUDA
 * variant declines these inputs (TSR_ENODEV before enqueuing anything:
 * integer div, whose zero divisor must fail the task naming the element).
 *
 * After the stream has finished, tsr_cuda_deferred_check reports what a
 * variant could only find out on the device (qr/svd: cuSOLVER's info), so
 * such a task fails with that message instead of storing NaN.
 *
 * A CUDA error that leaves the context unusable ends the process (exit
 * 70): the scheduler sees a lost worker and recomputes its results
 * elsewhere, as after a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_int.h"

#define EXIT_GPU_BROKEN 70

typedef struct gpu_run {
  tsr_wtask *task;
  tsr_wgpu_slot *slot;
  size_t n;
  tsr_buf *in;
  void **staged;          /* device copies of host inputs (transient), or NULL */
  tsr_buf out;
  tsr_errbuf err;
} gpu_run;

static void exit_if_broken(tsr_wgpu_slot *slot, const tsr_wtask *task, const char *why)
{
  tsr_wgpu *gpu = tsr_wgpu_slot_gpu(slot);
  if (!tsr_wgpu_broken(gpu)) return;
  TSR_ERROR("task %s: %s; the CUDA context of gpu:%d is unusable, exiting so the scheduler recomputes elsewhere",
            task->key, why, tsr_wgpu_device(gpu));
  _exit(EXIT_GPU_BROKEN);
}

/* Input count, each input's bytes against its meta, then the output meta. */
static int prepare(gpu_run *r, tsr_chunk **chunks)
{
  const tsr_op_def *op = r->task->op;
  int n = (int)r->n;
  if (n < op->min_inputs || (op->max_inputs >= 0 && n > op->max_inputs))
    return tsr_fail(&r->err, TSR_EINVAL, "takes %d to %d inputs, got %d", op->min_inputs, op->max_inputs, n);
  tsr_meta *metas = calloc(r->n ? r->n : 1, sizeof *metas);
  if (metas == NULL) return tsr_fail(&r->err, TSR_ENOMEM, "out of memory");
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < r->n; i++) {
    metas[i] = chunks[i]->meta;
    r->in[i] = (tsr_buf){chunks[i]->meta, chunks[i]->data, chunks[i]->nbytes};
    if ((int64_t)chunks[i]->nbytes != tsr_meta_nbytes(&chunks[i]->meta))
      rc = tsr_fail(&r->err, TSR_ESHAPE, "input %zu has %zu bytes, its meta says %lld", i, chunks[i]->nbytes,
                    (long long)tsr_meta_nbytes(&chunks[i]->meta));
  }
  memset(&r->out.meta, 0, sizeof r->out.meta);
  if (rc == 0) rc = op->infer(&r->task->params, metas, n, &r->out.meta, &r->err);
  free(metas);
  tsr_errbuf why;
  if (rc == 0 && (rc = tsr_meta_check(&r->out.meta, &why)) != 0)
    return tsr_fail(&r->err, rc, "output: %s", why.text);
  if (rc == 0) r->out.nbytes = (size_t)tsr_meta_nbytes(&r->out.meta);
  return rc;
}

/* Copies host inputs to transient device buffers. */
static int stage_inputs(gpu_run *r, tsr_chunk **chunks)
{
  for (size_t i = 0; i < r->n; i++) {
    if (tsr_chunk_on_device(chunks[i])) continue;
    char what[TSR_MAX_KEY_LEN * 2 + 48];
    snprintf(what, sizeof what, "input '%s' of task '%s'", chunks[i]->key, r->task->key);
    int rc = tsr_wgpu_alloc(r->slot, chunks[i]->nbytes, what, true, &r->staged[i], &r->err);
    if (rc == 0) rc = tsr_wgpu_upload(r->slot, r->staged[i], chunks[i]->data, chunks[i]->nbytes, &r->err);
    if (rc != 0) return rc;
    r->in[i].data = r->staged[i];
  }
  return 0;
}

/* Promotion: a host input copied up for a CUDA task stays on the device in
 * its chunk's place (tsr_wstore_promote), so the next task on this GPU uses
 * it in place instead of copying it up again. Without it, an input that
 * many tasks read — the whole X of a kNN, sliced by 53 row-block tasks — crossed
 * PCIe once a task (13 GB for a 260 MB X). Only while the device is at
 * most half full (PROMOTE_LIMIT_SHARE): under memory pressure the device
 * tier would move the copy straight back down, costing a copy down more
 * than the transient copy up it saves. Tasks still reading the host chunk
 * keep it until they are done (tsr_wstore_promote). */
#define PROMOTE_LIMIT_SHARE 2

static void promote_inputs(gpu_run *r, tsr_wstore *store, tsr_chunk **chunks)
{
  tsr_wgpu *gpu = tsr_wgpu_slot_gpu(r->slot);
  for (size_t i = 0; i < r->n; i++) {
    if (r->staged[i] == NULL || tsr_wgpu_used(gpu) > tsr_wgpu_limit(gpu) / PROMOTE_LIMIT_SHARE) continue;
    tsr_chunk *fresh;
    tsr_wgpu_keep(r->slot, chunks[i]->nbytes);
    if (tsr_chunk_new_device(store, chunks[i]->key, &chunks[i]->meta, r->staged[i], chunks[i]->nbytes,
                             tsr_wgpu_device(gpu), tsr_wgpu_release, gpu, &fresh) != 0) {
      tsr_wgpu_release(gpu, r->staged[i], chunks[i]->nbytes);
      r->staged[i] = NULL;
      continue;
    }
    r->staged[i] = NULL;  /* fresh's now: its last unref frees it */
    if (tsr_wstore_promote(store, chunks[i], fresh))
      TSR_DEBUG("task %s: input '%s' (%zu bytes) now stays on gpu:%d", r->task->key, chunks[i]->key,
                chunks[i]->nbytes, tsr_wgpu_device(gpu));
    tsr_chunk_unref(&fresh);
  }
}

static void unstage_inputs(gpu_run *r, tsr_chunk **chunks)
{
  for (size_t i = 0; i < r->n; i++)
    if (r->staged[i] != NULL) tsr_wgpu_free(r->slot, r->staged[i], chunks[i]->nbytes, true);
}

/* Enqueues the variant and waits for the slot's stream. */
static int launch(gpu_run *r)
{
  uint64_t t0 = tsr_now_us();
  int rc = r->task->op->cuda(&r->task->params, r->in, (int)r->n, &r->out, tsr_wgpu_slot_ctx(r->slot), &r->err);
  /* Even after a failed launch: whatever was enqueued must finish before
   * buffers are freed or reused. */
  tsr_errbuf sync_err = {{0}}, check_err = {{0}};
  int sync_rc = tsr_wgpu_sync(r->slot, &sync_err);
  int check_rc = tsr_cuda_deferred_check(&check_err);  /* always: it also clears */
  r->task->duration_us = tsr_now_us() - t0;
  if (rc == 0 && sync_rc != 0) {
    rc = sync_rc;
    r->err = sync_err;
  } else if (rc == 0 && check_rc != 0) {
    rc = check_rc;
    r->err = check_err;
  }
  return rc;
}

/* Returns TSR_ENODEV, having reported nothing, when the variant declined
 * the task (the caller then runs it on the host); otherwise 0. */
static int run_cuda(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks, tsr_wgpu_slot *slot)
{
  gpu_run r = {.task = task, .slot = slot, .n = task->n_inputs};
  r.in = calloc(r.n ? r.n : 1, sizeof *r.in);
  r.staged = calloc(r.n ? r.n : 1, sizeof *r.staged);
  int rc = r.in && r.staged ? prepare(&r, chunks) : tsr_fail(&r.err, TSR_ENOMEM, "out of memory");
  if (rc == 0) rc = stage_inputs(&r, chunks);
  char what[TSR_MAX_KEY_LEN + 16];
  snprintf(what, sizeof what, "chunk '%s'", task->key);
  if (rc == 0) rc = tsr_wgpu_alloc(slot, r.out.nbytes, what, false, &r.out.data, &r.err);
  bool have_out = rc == 0;
  if (rc == 0) rc = launch(&r);
  else tsr_wgpu_sync(slot, NULL);
  if (rc == 0) promote_inputs(&r, store, chunks);
  if (r.staged) unstage_inputs(&r, chunks);
  tsr_wgpu_slot_reset(slot);
  free(r.in);
  free(r.staged);
  if (rc != 0) {
    if (have_out) tsr_wgpu_free(slot, r.out.data, r.out.nbytes, false);
    exit_if_broken(slot, task, r.err.text);
    if (rc == TSR_ENODEV && have_out) return TSR_ENODEV;  /* declined by the variant itself */
    tsr_wexec_erred(task, r.err.text[0] ? r.err.text : tsr_strerror(rc));
    return 0;
  }
  tsr_wgpu *gpu = tsr_wgpu_slot_gpu(slot);
  TSR_DEBUG("task %s: %s ran on gpu:%d", task->key, task->op_name, tsr_wgpu_device(gpu));
  tsr_chunk *chunk;
  if (tsr_chunk_new_device(store, task->key, &r.out.meta, r.out.data, r.out.nbytes, tsr_wgpu_device(gpu),
                           tsr_wgpu_release, gpu, &chunk) != 0) {
    tsr_wgpu_free(slot, r.out.data, r.out.nbytes, false);
    tsr_wexec_erred(task, "out of memory storing the output");
    return 0;
  }
  tsr_wexec_store(task, store, &chunk);
  return 0;
}

/* Host copies of device inputs, for an op that runs on the host. */
static int download_inputs(tsr_wgpu_slot *slot, tsr_chunk **chunks, size_t n, tsr_buf *in, void **copies,
                           tsr_errbuf *err)
{
  for (size_t i = 0; i < n; i++) {
    in[i] = (tsr_buf){chunks[i]->meta, chunks[i]->data, chunks[i]->nbytes};
    if (!tsr_chunk_on_device(chunks[i])) continue;
    copies[i] = malloc(chunks[i]->nbytes ? chunks[i]->nbytes : 1);
    if (copies[i] == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory copying input '%s' to the host", chunks[i]->key);
    int rc = tsr_wgpu_download(slot, copies[i], chunks[i]->data, chunks[i]->nbytes, err);
    if (rc != 0) return rc;
    in[i].data = copies[i];
  }
  return 0;
}

static void run_host(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks, tsr_wgpu_slot *slot)
{
  size_t n = task->n_inputs;
  tsr_buf *in = calloc(n ? n : 1, sizeof *in);
  void **copies = calloc(n ? n : 1, sizeof *copies);
  tsr_errbuf err = {{0}};
  tsr_buf out = {0};
  int rc = in && copies ? download_inputs(slot, chunks, n, in, copies, &err) : tsr_fail(&err, TSR_ENOMEM, "out of memory");
  if (rc == 0) {
    uint64_t t0 = tsr_now_us();
    rc = tsr_op_run_cpu(task->op, &task->params, in, (int)n, &out, &err);
    task->duration_us = tsr_now_us() - t0;
  }
  for (size_t i = 0; copies != NULL && i < n; i++) free(copies[i]);
  free(copies);
  free(in);
  if (rc != 0) {
    exit_if_broken(slot, task, err.text);
    tsr_wexec_erred(task, err.text[0] ? err.text : tsr_strerror(rc));
    return;
  }
  tsr_chunk *chunk;
  if (tsr_chunk_new_malloc(store, task->key, &out.meta, out.data, out.nbytes, &chunk) != 0) {
    free(out.data);
    tsr_wexec_erred(task, "out of memory storing the output");
    return;
  }
  tsr_wexec_store(task, store, &chunk);
}

void tsr_wexec_run_gpu(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks, tsr_wgpu_slot *slot)
{
  if (task->op->cuda == NULL || run_cuda(task, store, chunks, slot) == TSR_ENODEV) run_host(task, store, chunks, slot);
}
