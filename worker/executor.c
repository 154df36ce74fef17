/* The executor pool. Each thread: pop the most urgent task, run it with
 * tsr_wtask_run_on() (on its own GPU slot in a GPU worker), push the task
 * pointer to the main thread. OpenBLAS gets one thread per executor thread:
 * the pool is the parallelism, and N pools of N BLAS threads would only
 * fight over the cores. */
#include "util/rttrace.h"
#include "exec_int.h"
#include "fused.h"
#include "share.h"
#include "tiers.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

/* OpenBLAS's own entry point; declared here to avoid pulling cblas.h (and
 * its include path) into the worker for one function. */
extern void openblas_set_num_threads(int num_threads);

typedef struct exec_thread {
  struct tsr_wexec *exec;
  tsr_wgpu_slot *slot;     /* GPU worker: this thread's stream and handles */
} exec_thread;

struct tsr_wexec {
  tsr_wexec_opts opts;
  char done_endpoint[TSR_MAX_ADDR_LEN];
  char worker_name[TSR_MAX_NAME_LEN + 1];
  char data_address[TSR_MAX_ADDR_LEN];
  tsr_wstore *store;
  tsr_wqueue *queue;
  tsr_wfetch_group fetches;
  pthread_t *threads;
  exec_thread *per_thread;
  int n_threads;           /* started */
  atomic_uint running;
  atomic_uint handed;      /* pushed to the main thread and not yet taken (tsr_wexec_taken) */
  pthread_mutex_t exit_lock;
  pthread_cond_t exit_cond;
  int exited;              /* under exit_lock */
};

/* ---------- running one task ---------- */

/* Fetches input i from its `from` peer and keeps it as a replica. */
static int fetch_input(tsr_wtask *task, size_t i, tsr_wstore *store, tsr_wfetcher *fetcher, tsr_chunk **chunk_p,
                       tsr_errbuf *err)
{
  tsr_winput *in = &task->inputs[i];
  tsr_chunk_header hdr;
  tsr_xfer_data data = {.sink = tsr_wshare_sink(fetcher->share)};
  uint64_t t0 = tsr_now_us();
  int rc = tsr_wfetcher_get(fetcher, in->from, in->key, &hdr, &data, err);
  if (rc != 0) return rc;
  uint64_t t_got = tsr_now_us();
  if (data.on_device) {
    rc = tsr_wshare_adopt(fetcher->share, fetcher->gpu_slot, store, in->key, &hdr.meta, &data, chunk_p, err);
    if (rc != 0) return rc;
  } else if ((rc = tsr_chunk_new_xfer(store, in->key, &hdr.meta, &data, chunk_p)) != 0) {
    tsr_xfer_data_release(&data);
    return tsr_fail(err, rc, "out of memory");
  }
  in->fetched = true;
  /* A stale epoch just means the copy is not kept; this task still uses it. */
  tsr_wstore_put(store, *chunk_p, task->epoch, NULL);
  uint64_t t_end = tsr_now_us();
  TSR_DEBUG("task %s: fetched input '%s' (%zu bytes) from %s in %.3f ms (%.3f ms to keep it)", task->key, in->key,
            (*chunk_p)->nbytes, in->from, (double)(t_end - t0) / 1e3, (double)(t_end - t_got) / 1e3);
  return 0;
}

/* True when input i was made on this worker (and so, not in the store,
 * was dropped or lost here rather than not yet fetched). */
static bool input_is_ours(const tsr_wtask *task, size_t i, const tsr_wfetcher *fetcher)
{
  return fetcher != NULL && fetcher->self_address != NULL && strcmp(task->inputs[i].from, fetcher->self_address) == 0;
}

/* Gets input i from the store, or from its peer. When another thread is
 * already fetching the same key, waits for it and takes its copy. */
static int resolve_input(tsr_wtask *task, size_t i, tsr_wstore *store, tsr_wfetcher *fetcher, tsr_chunk **chunk_p,
                         tsr_errbuf *err)
{
  const char *key = task->inputs[i].key;
  for (;;) {
    if (tsr_wstore_get(store, key, chunk_p) == 0) return 0;
    if (fetcher == NULL) return tsr_fail(err, TSR_ENOTFOUND, "'%s' is not in the store", key);
    if (input_is_ours(task, i, fetcher))
      return tsr_fail(err, TSR_ENOTFOUND, "'%s' is no longer on this worker (dropped to be made again, or lost)", key);
    if (fetcher->group == NULL) return fetch_input(task, i, store, fetcher, chunk_p, err);
    if (tsr_wfetch_claim(fetcher->group, key)) break;
  }
  int rc = fetch_input(task, i, store, fetcher, chunk_p, err);
  tsr_wfetch_release(fetcher->group, key);
  return rc;
}

static void release_inputs(tsr_chunk **chunks, size_t n)
{
  for (size_t i = 0; i < n; i++) tsr_chunk_unref(&chunks[i]);
  free(chunks);
}

void tsr_wexec_erred(tsr_wtask *task, const char *text)
{
  size_t op_len = strlen(task->op_name);
  if (strncmp(text, task->op_name, op_len) == 0 && text[op_len] == ':')
    tsr_wtask_erred(task, "%s", text);
  else
    tsr_wtask_erred(task, "%s: %s", task->op_name, text);
}

void tsr_wexec_store(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunk_p)
{
  tsr_chunk *chunk = *chunk_p;
  if (task->keep_p != NULL) {
    /* a part of a fused task: its runner keeps the output (fused.c) */
    task->status = TSR_WTASK_DONE;
    task->out_meta = chunk->meta;
    task->out_nbytes = chunk->nbytes;
    *task->keep_p = chunk;
    *chunk_p = NULL;
    return;
  }
  /* The scheduler says whether the output may be dropped (recomputed when
   * needed) rather than spilled; an older scheduler says nothing, and then
   * outputs of tasks without inputs (random data, file reads, constants)
   * are taken as cheaper to recompute than to spill, but not a fused
   * task's: its parts may be many steps. */
  chunk->recompute = task->recompute == TSR_WTASK_RECOMPUTE_UNSET ? task->n_inputs == 0 && task->parts == NULL
                                                                  : task->recompute == TSR_WTASK_RECOMPUTE_DROP;
  /* A chunk nobody has read yet is evicted last, and on a GPU copied down
   * rather than dropped, so that a fresh chunk is not lost before its
   * waiting reader runs. When no task waits for it (only a client wants
   * it, as after a persist) there is no such reader: it counts as read. */
  if (task->unawaited) atomic_store(&chunk->read, true);
  /* Moves recorded for an older chunk of this key are not this one's. */
  if (tsr_wstore_tiers(store) != NULL) tsr_tiers_forget_moves(tsr_wstore_tiers(store), task->key);
  if (tsr_wstore_put(store, chunk, task->epoch, &task->cancelled) != 0) {
    task->status = TSR_WTASK_CANCELLED;
  } else {
    task->status = TSR_WTASK_DONE;
    task->out_meta = chunk->meta;
    task->out_nbytes = chunk->nbytes;
  }
  tsr_chunk_unref(chunk_p);
}

/* Stores the kernel's output under the task's key; sets the result. */
static void keep_output(tsr_wtask *task, tsr_wstore *store, tsr_buf *out)
{
  tsr_chunk *chunk;
  uint64_t limit = tsr_wstore_memory_limit(store);
  if (limit != 0 && out->nbytes > limit) {
    char size[32], lim[32];
    free(out->data);
    tsr_wtask_erred(task, "chunk '%s' is %s, larger than the worker's memory limit of %s", task->key,
                    tsr_format_bytes(out->nbytes, size, sizeof size), tsr_format_bytes(limit, lim, sizeof lim));
    return;
  }
  if (tsr_chunk_new_malloc(store, task->key, &out->meta, out->data, out->nbytes, &chunk) != 0) {
    free(out->data);
    tsr_wexec_erred(task, "out of memory storing the output");
    return;
  }
  tsr_wexec_store(task, store, &chunk);
}

void tsr_wexec_run_cpu(tsr_wtask *task, tsr_wstore *store, tsr_chunk **chunks)
{
  size_t n = task->n_inputs;
  tsr_buf *in = n ? calloc(n, sizeof *in) : NULL;
  if (n && in == NULL) {
    tsr_wexec_erred(task, "out of memory");
    return;
  }
  for (size_t i = 0; i < n; i++) in[i] = (tsr_buf){chunks[i]->meta, chunks[i]->data, chunks[i]->nbytes};
  tsr_errbuf err = {{0}};
  tsr_buf out = {0};
  uint64_t t0 = tsr_now_us();
  int rc = tsr_op_run_cpu(task->op, &task->params, in, (int)n, &out, &err);
  task->duration_us = tsr_now_us() - t0;
  free(in);
  if (rc != 0) {
    tsr_wexec_erred(task, err.text[0] ? err.text : tsr_strerror(rc));
    return;
  }
  keep_output(task, store, &out);
}

void tsr_wtask_run(tsr_wtask *task, tsr_wstore *store, tsr_wfetcher *fetcher, const char *worker_name)
{
  tsr_wtask_run_on(task, store, fetcher, worker_name, NULL);
}

void tsr_wtask_run_on(tsr_wtask *task, tsr_wstore *store, tsr_wfetcher *fetcher, const char *worker_name,
                      tsr_wgpu_slot *slot)
{
  if (atomic_load(&task->cancelled)) {
    task->status = TSR_WTASK_CANCELLED;
    return;
  }
  if (task->op == NULL && task->parts == NULL) {
    tsr_wtask_erred(task, "unknown op '%s' on worker %s", task->op_name, worker_name);
    return;
  }
  tsr_chunk **chunks = task->n_inputs ? calloc(task->n_inputs, sizeof *chunks) : NULL;
  if (task->n_inputs && chunks == NULL) {
    tsr_wexec_erred(task, "out of memory");
    return;
  }
  for (size_t i = 0; i < task->n_inputs; i++) {
    tsr_errbuf err = {{0}};
    if (resolve_input(task, i, store, fetcher, &chunks[i], &err) != 0) {
      /* A chunk this worker dropped on purpose (cheaper to make again than
       * to spill) is expected to be missing: the scheduler makes it again. */
      tsr_log(input_is_ours(task, i, fetcher) ? TSR_LOG_DEBUG : TSR_LOG_WARN,
              "task %s: input '%s' from %s is missing: %s", task->key, task->inputs[i].key, task->inputs[i].from,
              err.text);
      task->status = TSR_WTASK_MISSING;
      task->missing_input = i;
      release_inputs(chunks, task->n_inputs);
      return;
    }
  }
  if (task->parts != NULL)
    tsr_wfused_run(task, store, chunks, slot, worker_name);
  else if (slot != NULL)
    tsr_wexec_run_gpu(task, store, chunks, slot);
  else
    tsr_wexec_run_cpu(task, store, chunks);
  release_inputs(chunks, task->n_inputs);
  /* The output (and any fetched or reloaded input) may have pushed the
   * store over its thresholds; the inputs are unpinned now. */
  tsr_wstore_balance(store);
}

/* ---------- the threads ---------- */

static void thread_exited(tsr_wexec *exec)
{
  pthread_mutex_lock(&exec->exit_lock);
  exec->exited++;
  pthread_cond_broadcast(&exec->exit_cond);
  pthread_mutex_unlock(&exec->exit_lock);
}

/* Hands a finished task to the main thread; frees it when the main thread
 * is gone (shutdown), since nobody else would. */
static void send_done(tsr_wexec *exec, void *push, tsr_wtask *task)
{
  atomic_fetch_add(&exec->handed, 1);
  if (push != NULL && zmq_send(push, &task, sizeof task, ZMQ_DONTWAIT) == (int)sizeof task) return;
  atomic_fetch_sub(&exec->handed, 1);
  tsr_wtask_free(&task);
}

void tsr_wexec_taken(tsr_wexec *exec, unsigned n) { atomic_fetch_sub(&exec->handed, n); }

/* The executor thread may report task itself (opts.complete) when nothing
 * is queued behind it and nothing handed over before it is still on its
 * way: reports then leave in the order the tasks finished. */
static bool complete_here(tsr_wexec *exec, tsr_wtask *task)
{
  return exec->opts.complete != NULL && tsr_wqueue_length(exec->queue) == 0 && atomic_load(&exec->handed) == 0 &&
         exec->opts.complete(exec->opts.complete_arg, task);
}

static void *thread_main(void *arg)
{
  exec_thread *self = arg;
  tsr_wexec *exec = self->exec;
  openblas_set_num_threads(1);
  if (self->slot != NULL) tsr_wgpu_bind(tsr_wgpu_slot_gpu(self->slot));
  void *push = zmq_socket(exec->opts.zctx, ZMQ_PUSH);
  if (push != NULL) {
    tsr_net_socket_defaults(push);
    if (zmq_connect(push, exec->done_endpoint) != 0) {
      TSR_ERROR("executor: cannot connect %s: %s", exec->done_endpoint, zmq_strerror(zmq_errno()));
      zmq_close(push);
      push = NULL;
    }
  }
  tsr_wfetcher fetcher;
  tsr_wfetcher_init(&fetcher, exec->opts.zctx, exec->opts.fetch_timeout_ms);
  fetcher.group = &exec->fetches;
  fetcher.self_address = exec->opts.data_address;
  fetcher.curve = exec->opts.curve;
  if (self->slot != NULL && exec->opts.share != NULL) {
    fetcher.share = exec->opts.share;
    fetcher.gpu_slot = self->slot;
  }
  tsr_wtask *task;
  while ((task = tsr_wqueue_pop(exec->queue)) != NULL) {
    atomic_fetch_add(&exec->running, 1);
    task->lane = (uint32_t)(self - exec->per_thread);
    tsr_rt_stamp("w.exec_start");
    tsr_wtask_run_on(task, exec->store, &fetcher, exec->worker_name, self->slot);
    atomic_fetch_sub(&exec->running, 1);
    tsr_rt_stamp("w.exec_end");
    if (!complete_here(exec, task)) send_done(exec, push, task);
  }
  tsr_wfetcher_close(&fetcher);
  if (push != NULL) zmq_close(push);
  thread_exited(exec);
  return NULL;
}

void tsr_wexec_peer_gone(tsr_wexec *exec, const char *address)
{
  tsr_wfetch_gone(&exec->fetches, address, tsr_now_ms());
}

static void exec_free(tsr_wexec *exec)
{
  for (int i = 0; exec->per_thread != NULL && i < exec->opts.threads; i++)
    tsr_wgpu_slot_destroy(&exec->per_thread[i].slot);
  free(exec->per_thread);
  tsr_wqueue_destroy(&exec->queue);
  tsr_wfetch_group_destroy(&exec->fetches);
  pthread_cond_destroy(&exec->exit_cond);
  pthread_mutex_destroy(&exec->exit_lock);
  free(exec->threads);
  free(exec);
}

int tsr_wexec_start(const tsr_wexec_opts *opts, tsr_wstore *store, tsr_wexec **exec_p, tsr_errbuf *err)
{
  tsr_wexec *exec = calloc(1, sizeof *exec);
  if (exec == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  exec->opts = *opts;
  snprintf(exec->done_endpoint, sizeof exec->done_endpoint, "%s", opts->done_endpoint);
  snprintf(exec->worker_name, sizeof exec->worker_name, "%s", opts->worker_name);
  exec->opts.done_endpoint = exec->done_endpoint;
  exec->opts.worker_name = exec->worker_name;
  snprintf(exec->data_address, sizeof exec->data_address, "%s", opts->data_address ? opts->data_address : "");
  exec->opts.data_address = exec->data_address[0] ? exec->data_address : NULL;
  exec->store = store;
  atomic_init(&exec->running, 0);
  pthread_mutex_init(&exec->exit_lock, NULL);
  pthread_cond_init(&exec->exit_cond, NULL);
  exec->queue = tsr_wqueue_new();
  exec->threads = calloc((size_t)(opts->threads > 0 ? opts->threads : 1), sizeof *exec->threads);
  exec->per_thread = calloc((size_t)(opts->threads > 0 ? opts->threads : 1), sizeof *exec->per_thread);
  if (exec->queue == NULL || exec->threads == NULL || exec->per_thread == NULL ||
      tsr_wfetch_group_init(&exec->fetches) != 0) {
    exec_free(exec);
    return tsr_fail(err, TSR_ENOMEM, "out of memory");
  }
  for (int i = 0; i < opts->threads; i++) {
    exec->per_thread[i].exec = exec;
    int rc = opts->gpu != NULL ? tsr_wgpu_slot_new(opts->gpu, &exec->per_thread[i].slot, err) : 0;
    if (rc != 0) {
      exec_free(exec);
      return rc;
    }
  }
  for (int i = 0; i < opts->threads; i++) {
    int rc = pthread_create(&exec->threads[i], NULL, thread_main, &exec->per_thread[i]);
    if (rc != 0) {
      tsr_fail(err, TSR_EINTERNAL, "cannot start executor thread %d: %s", i, strerror(rc));
      tsr_wexec_stop(&exec, -1);
      return TSR_EINTERNAL;
    }
    exec->n_threads++;
  }
  *exec_p = exec;
  return 0;
}

/* What the task's fetches will need, asked for now so that it is made
 * while the task waits in the queue (or while its thread is still being
 * woken), not inside the fetch (docs/transport.md, "Warming up"). Only
 * inputs fetched over UCX: the pool and the wire-up are UCX's. */
static void fetch_ahead(tsr_wexec *exec, const tsr_wtask *task)
{
  for (size_t i = 0; i < task->n_inputs; i++) {
    const tsr_winput *in = &task->inputs[i];
    if (in->from[0] == '\0' || strcmp(in->from, exec->data_address) == 0 || !tsr_xfer_fetches_over_ucx(in->from) ||
        tsr_wstore_has(exec->store, in->key))
      continue;
    /* each thread fetching into one, plus the last chunks not yet released */
    tsr_xfer_pool_warm(in->nbytes, (unsigned)exec->n_threads + 2);
    tsr_wfetch_warm(&exec->fetches, in->from, exec->opts.zctx, exec->opts.curve);
  }
}

int tsr_wexec_submit(tsr_wexec *exec, tsr_wtask *task)
{
  if (exec->opts.fetch_ahead) fetch_ahead(exec, task);
  return tsr_wqueue_push(exec->queue, task);
}

void tsr_wexec_conn_stats_get(tsr_wexec *exec, tsr_wexec_conn_stats *out)
{
  out->connects = atomic_load(&exec->fetches.connects);
  out->made_ahead = atomic_load(&exec->fetches.warm_made);
  out->taken_ahead = atomic_load(&exec->fetches.warm_taken);
}
unsigned tsr_wexec_running(const tsr_wexec *exec) { return atomic_load(&exec->running); }

void tsr_wexec_fetch_stats_get(tsr_wexec *exec, tsr_wexec_fetch_stats *out)
{
  out->fetches = atomic_load_explicit(&exec->fetches.fetches, memory_order_relaxed);
  out->failures = atomic_load_explicit(&exec->fetches.fetch_failures, memory_order_relaxed);
  out->bytes = atomic_load_explicit(&exec->fetches.fetch_bytes, memory_order_relaxed);
  out->us = atomic_load_explicit(&exec->fetches.fetch_us, memory_order_relaxed);
}
size_t tsr_wexec_queued(tsr_wexec *exec) { return tsr_wqueue_length(exec->queue); }

/* Waits until every started thread has left its loop, at most timeout_ms
 * (negative: forever). Returns true when they all have. */
static bool wait_exited(tsr_wexec *exec, int timeout_ms)
{
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&exec->exit_lock);
  int rc = 0;
  while (exec->exited < exec->n_threads && rc != ETIMEDOUT) {
    if (timeout_ms < 0)
      pthread_cond_wait(&exec->exit_cond, &exec->exit_lock);
    else
      rc = pthread_cond_timedwait(&exec->exit_cond, &exec->exit_lock, &deadline);
  }
  bool all = exec->exited >= exec->n_threads;
  pthread_mutex_unlock(&exec->exit_lock);
  return all;
}

int tsr_wexec_stop(tsr_wexec **exec_p, int timeout_ms)
{
  if (exec_p == NULL || *exec_p == NULL) return 0;
  tsr_wexec *exec = *exec_p;
  *exec_p = NULL;
  tsr_wqueue_close(exec->queue);
  if (!wait_exited(exec, timeout_ms)) {
    TSR_WARN("executor: %u task(s) still running at shutdown; not waiting for them", tsr_wexec_running(exec));
    return TSR_ETIMEDOUT;
  }
  for (int i = 0; i < exec->n_threads; i++) pthread_join(exec->threads[i], NULL);
  exec_free(exec);
  return 0;
}
