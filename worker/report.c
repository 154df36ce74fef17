/* What the worker tells the scheduler (docs/protocol.md, "Worker ->
 * scheduler"), each message appended to the iteration's outbound batch. */
#include <stdio.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kernels.h"
#include "worker_int.h"

/* A GPU worker's ops with a variant native to its device: those with a
 * CUDA variant (the others it runs on the host). */
static void pack_native_ops(msgpack_packer *pk)
{
  size_t n = tsr_op_count(), native = 0;
  for (size_t i = 0; i < n; i++) native += tsr_op_at(i)->cuda != NULL;
  tsr_pack_str(pk, "native_ops");
  /* `fused` too: a fused task runs its parts where each one is native */
  msgpack_pack_array(pk, native + 1);
  tsr_pack_str(pk, "fused");
  for (size_t i = 0; i < n; i++)
    if (tsr_op_at(i)->cuda != NULL) tsr_pack_str(pk, tsr_op_at(i)->name);
}

/* hello's `chunks`: [[key, nbytes, dtype, shape]] of the results held,
 * packed and counted in one pass under the store's lock (a spill load may
 * add a chunk at any moment), then appended behind the array header. */
typedef struct chunk_list {
  msgpack_sbuffer buf;
  msgpack_packer pk;
  size_t n;
} chunk_list;

static void pack_chunk(void *arg, const tsr_chunk *chunk)
{
  chunk_list *l = arg;
  msgpack_pack_array(&l->pk, 4);
  tsr_pack_str(&l->pk, chunk->key);
  msgpack_pack_uint64(&l->pk, chunk->nbytes);
  msgpack_pack_uint64(&l->pk, (uint64_t)chunk->meta.dtype);
  msgpack_pack_array(&l->pk, (size_t)chunk->meta.ndim);
  for (int d = 0; d < chunk->meta.ndim; d++) msgpack_pack_int64(&l->pk, chunk->meta.shape[d]);
  l->n++;
}

static void pack_chunks(tsr_worker *w, msgpack_packer *pk)
{
  chunk_list l = {.n = 0};
  msgpack_sbuffer_init(&l.buf);
  msgpack_packer_init(&l.pk, &l.buf, msgpack_sbuffer_write);
  tsr_wstore_each(w->store, pack_chunk, &l);
  tsr_pack_str(pk, "chunks");
  msgpack_pack_array(pk, l.n);
  if (l.buf.size > 0) tsr_pack_raw(pk, l.buf.data, l.buf.size);
  msgpack_sbuffer_destroy(&l.buf);
}

void tsr_report_hello(tsr_worker *w)
{
  msgpack_packer *pk = &w->out.pk;
  /* The disk speeds go in the hello too: the scheduler prices its first
   * recompute-or-spill decisions with them, before any heartbeat. */
  tsr_tiers_stats tiers = {0};
  if (tsr_wstore_tiers(w->store) != NULL) tsr_tiers_stats_get(tsr_wstore_tiers(w->store), &tiers);
  uint64_t write_bps = tsr_tiers_stats_write_bps(&tiers), read_bps = tsr_tiers_stats_read_bps(&tiers);
  tsr_wbuf_begin(&w->out, "hello", (w->gpu ? 14 : 11) + (write_bps > 0) + (read_bps > 0));
  pack_chunks(w, pk);
  if (write_bps > 0) tsr_pack_kv_uint(pk, "spill_write_bps", write_bps);
  if (read_bps > 0) tsr_pack_kv_uint(pk, "spill_read_bps", read_bps);
  tsr_pack_kv_uint(pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(pk, "role", "worker");
  tsr_pack_kv_str(pk, "name", w->opts.name);
  tsr_pack_kv_uint(pk, "pid", (uint64_t)getpid());
  tsr_pack_kv_uint(pk, "threads", (uint64_t)w->opts.threads);
  tsr_pack_kv_uint(pk, "memory_limit", w->opts.memory_limit);
  tsr_pack_kv_str(pk, "data_address", w->data_address);
  char device[32];
  snprintf(device, sizeof device, "gpu:%d", w->opts.gpu);
  tsr_pack_kv_str(pk, "device", w->gpu ? device : "cpu");
  tsr_pack_str(pk, "ops");
  size_t n = tsr_op_count();
  msgpack_pack_array(pk, n + 1);
  for (size_t i = 0; i < n; i++) tsr_pack_str(pk, tsr_op_at(i)->name);
  tsr_pack_str(pk, "fused");  /* it runs fused tasks (fused.h) */
  if (w->gpu == NULL) return;
  pack_native_ops(pk);
  tsr_pack_kv_str(pk, "gpu_name", tsr_wgpu_name(w->gpu));
  tsr_pack_kv_uint(pk, "device_memory_limit", tsr_wgpu_limit(w->gpu));
}

#define USAGE_FIELDS 6

/* The worker's use of its resources since start, for efficiency reports
 * (docs/report.md): CPU time of the whole process (executor threads,
 * fetches, spill I/O), the most bytes each tier held, fetched input bytes
 * and the time fetches took. USAGE_FIELDS entries. */
static void pack_usage(tsr_worker *w, uint64_t disk_bytes)
{
  msgpack_packer *pk = &w->out.pk;
  struct rusage ru;
  uint64_t cpu_us = 0;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    cpu_us = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u + (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  /* spill files change only between heartbeats' samples: a peak between two is missed */
  if (disk_bytes > w->disk_peak) w->disk_peak = disk_bytes;
  tsr_wexec_fetch_stats fetch = {0};
  if (w->exec != NULL) tsr_wexec_fetch_stats_get(w->exec, &fetch);
  tsr_pack_kv_uint(pk, "cpu_us", cpu_us);
  tsr_pack_kv_uint(pk, "memory_peak", tsr_wstore_peak_bytes(w->store));
  tsr_pack_kv_uint(pk, "disk_peak", w->disk_peak);
  tsr_pack_kv_uint(pk, "device_memory_peak", tsr_wstore_device_peak_bytes(w->store));
  tsr_pack_kv_uint(pk, "fetch_bytes", fetch.bytes);
  tsr_pack_kv_uint(pk, "fetch_us", fetch.us);
}

void tsr_report_heartbeat(tsr_worker *w)
{
  msgpack_packer *pk = &w->out.pk;
  /* one NVML sample a heartbeat (~1 Hz): the dashboard's GPU row and /metrics */
  tsr_wgpu_nvml(w->gpu, &w->nvml);
  int util = w->nvml.util;
  int nvml_fields = (w->nvml.mem_total >= 0) * 2 + (w->nvml.power_mw >= 0);
  tsr_tiers_stats tiers = {0};
  if (tsr_wstore_tiers(w->store) != NULL) tsr_tiers_stats_get(tsr_wstore_tiers(w->store), &tiers);
  uint64_t write_bps = tsr_tiers_stats_write_bps(&tiers), read_bps = tsr_tiers_stats_read_bps(&tiers);
  tsr_wbuf_begin(&w->out, "heartbeat",
                 9 + 3 * (w->gpu != NULL) + (util >= 0) + nvml_fields + (write_bps > 0) + (read_bps > 0) +
                     USAGE_FIELDS);
  tsr_pack_kv_uint(pk, "memory_used", tsr_wstore_bytes(w->store));
  tsr_pack_kv_uint(pk, "tasks_running", w->exec ? tsr_wexec_running(w->exec) : 0);
  tsr_pack_kv_uint(pk, "tasks_done", w->tasks_done);
  tsr_pack_kv_uint(pk, "chunks", tsr_wstore_count(w->store));
  tsr_pack_kv_uint(pk, "disk_bytes", tiers.disk_bytes);
  tsr_pack_kv_uint(pk, "bytes_spilled", tiers.bytes_spilled);
  tsr_pack_kv_uint(pk, "bytes_dropped", tiers.bytes_dropped);
  tsr_pack_kv_bool(pk, "paused", tsr_wstore_tiers(w->store) != NULL && tsr_tiers_paused(tsr_wstore_tiers(w->store), w->store));
  if (w->gpu != NULL) {
    tsr_devtier_stats dev = {0};
    if (w->devtier != NULL) tsr_devtier_stats_get(w->devtier, &dev);
    tsr_pack_kv_uint(pk, "device_memory_used", tsr_wgpu_used(w->gpu));
    tsr_pack_kv_uint(pk, "device_bytes_moved", dev.bytes_moved);
    tsr_pack_kv_uint(pk, "device_bytes_dropped", dev.bytes_dropped);
  }
  if (util >= 0) tsr_pack_kv_uint(pk, "gpu_util", (uint64_t)util);
  if (w->nvml.mem_total >= 0) {
    tsr_pack_kv_uint(pk, "gpu_memory_used", (uint64_t)w->nvml.mem_used);
    tsr_pack_kv_uint(pk, "gpu_memory_total", (uint64_t)w->nvml.mem_total);
  }
  if (w->nvml.power_mw >= 0) tsr_pack_kv_uint(pk, "gpu_power_mw", (uint64_t)w->nvml.power_mw);
  /* measured spill throughput: the scheduler's spill cost (policy_evict.h) */
  if (write_bps > 0) tsr_pack_kv_uint(pk, "spill_write_bps", write_bps);
  if (read_bps > 0) tsr_pack_kv_uint(pk, "spill_read_bps", read_bps);
  pack_usage(w, tiers.disk_bytes);
}

static void pack_moved(msgpack_packer *pk, const char *field, const tsr_tier_moved *moved, size_t n, tsr_tier_move m)
{
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += moved[i].move == m;
  tsr_pack_str(pk, field);
  msgpack_pack_array(pk, count);
  for (size_t i = 0; i < n; i++)
    if (moved[i].move == m) tsr_pack_str(pk, moved[i].key);
}

void tsr_report_moves(tsr_worker *w, const char *skip_key)
{
  tsr_tiers *tiers = tsr_wstore_tiers(w->store);
  tsr_tier_moved *moved = NULL;
  size_t n = tiers != NULL ? tsr_tiers_take_moves(tiers, skip_key, &moved) : 0;
  if (n == 0) {
    tsr_tiers_moved_free(&moved, 0);  /* every move was held back: the array is still ours */
    return;
  }
  tsr_wbuf_begin(&w->out, "chunks_moved", 4);
  pack_moved(&w->out.pk, "spilled", moved, n, TSR_TIER_SPILLED);
  pack_moved(&w->out.pk, "loaded", moved, n, TSR_TIER_LOADED);
  pack_moved(&w->out.pk, "dropped", moved, n, TSR_TIER_DROPPED);
  tsr_tiers_moved_free(&moved, n);
}

static uint64_t wall_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void report_done(tsr_worker *w, const tsr_wtask *task)
{
  msgpack_packer *pk = &w->out.pk;
  tsr_wbuf_begin(&w->out, "task_done", 9);
  tsr_pack_kv_uint(pk, "id", task->id);
  tsr_pack_kv_str(pk, "key", task->key);
  tsr_pack_kv_uint(pk, "nbytes", task->out_nbytes);
  tsr_pack_meta(pk, &task->out_meta);
  tsr_pack_kv_uint(pk, "duration_us", task->duration_us);
  /* the dashboard's task stream: when it ran (wall clock; reported just
   * after it ended) and on which executor thread or stream */
  uint64_t now = wall_us();
  tsr_pack_kv_uint(pk, "start_us", now > task->duration_us ? now - task->duration_us : 0);
  tsr_pack_kv_uint(pk, "lane", task->lane);
}

static void report_missing(tsr_worker *w, const tsr_wtask *task)
{
  const tsr_winput *in = &task->inputs[task->missing_input];
  msgpack_packer *pk = &w->out.pk;
  tsr_wbuf_begin(&w->out, "missing_input", 5);
  tsr_pack_kv_uint(pk, "id", task->id);
  tsr_pack_kv_str(pk, "key", task->key);
  tsr_pack_kv_str(pk, "input", in->key);
  tsr_pack_kv_str(pk, "from", in->from);
}

void tsr_report_task_erred(tsr_worker *w, uint64_t id, const char *key, const char *message)
{
  msgpack_packer *pk = &w->out.pk;
  tsr_wbuf_begin(&w->out, "task_erred", 4);
  tsr_pack_kv_uint(pk, "id", id);
  tsr_pack_kv_str(pk, "key", key);
  tsr_pack_kv_str(pk, "message", message);
}

void tsr_report_task(tsr_worker *w, const tsr_wtask *task)
{
  switch (task->status) {
  case TSR_WTASK_DONE: report_done(w, task); break;
  case TSR_WTASK_ERRED:
    tsr_report_task_erred(w, task->id, task->key, task->message ? task->message : "failed (out of memory)");
    break;
  case TSR_WTASK_MISSING: report_missing(w, task); break;
  default: break;
  }
}

void tsr_report_error(tsr_worker *w, int code, const char *message, const char *ref)
{
  msgpack_packer *pk = &w->out.pk;
  tsr_wbuf_begin(&w->out, "error", ref ? 4 : 3);
  tsr_pack_kv_int(pk, "code", code);
  tsr_pack_kv_str(pk, "message", message);
  if (ref) tsr_pack_kv_str(pk, "ref", ref);
}

void tsr_report_goodbye(tsr_worker *w) { tsr_wbuf_begin(&w->out, "goodbye", 1); }
