/* Messages the scheduler originates (docs/protocol.md): `compute` to
 * workers; `key_done`, `key_erred`, `key_lost`, `status_reply` to clients;
 * `heartbeat` to everyone. They are appended to the peer's outbox and go
 * out in one frame per peer at the end of the loop iteration. */
#include "policy_evict.h"
#include "progress.h"
#include "sched.h"

#include <stdio.h>
#include <string.h>

void sched_emit_compute(sched_state *st, uint32_t id, uint16_t w)
{
  const sched_task *t = &st->tasks[id];
  tsr_wbuf *wb = sched_out(st, st->workers[w].peer);
  msgpack_packer *pk = &wb->pk;
  tsr_wbuf_begin(wb, "compute", 9);
  tsr_pack_kv_uint(pk, "id", id);
  tsr_pack_kv_strn(pk, "key", t->key, t->key_len);
  tsr_pack_kv_str(pk, "task_op", st->ops[t->op].name);
  tsr_pack_str(pk, "params");
  if (t->params_len > 0) tsr_pack_raw(pk, t->params, t->params_len);
  else msgpack_pack_map(pk, 0);
  tsr_pack_str(pk, "inputs");
  msgpack_pack_array(pk, t->ndeps);
  for (uint32_t i = 0; i < t->ndeps; i++) {
    const sched_task *d = &st->tasks[t->deps[i]];
    msgpack_pack_array(pk, 3);
    tsr_pack_strn(pk, d->key, d->key_len);
    tsr_pack_str(pk, d->who_has != SCHED_NO_WORKER ? st->workers[d->who_has].address : "");
    msgpack_pack_uint64(pk, d->nbytes);
  }
  tsr_pack_kv_int(pk, "priority", t->priority);
  /* may the worker drop it (recomputed when needed) rather than spill it */
  bool drop = sched_evict_may_drop(st, id, w);
  tsr_pack_kv_bool(pk, "recompute", drop);
  /* does a reader wait for the output? Not when only a client wants it and
   * it runs for the first time, as in a persist: then the worker may drop
   * it before any read. A recomputation always has one (a task, or the
   * client whose gather found it missing: dropping it again before that
   * gather looped). */
  tsr_pack_kv_bool(pk, "awaited", t->nneeded > 0 || (t->evict & SCHED_EV_RAN));
  TSR_DEBUG("task '%s': compute on worker '%s'%s", t->key, st->workers[w].name, drop ? " (may be dropped)" : "");
}

static bool client_wants(const sched_state *st, uint32_t c, uint32_t id, uint32_t only)
{
  const sched_client *cl = &st->clients[c];
  return cl->alive && (only == SCHED_NONE || only == c) && sched_idset_has(&cl->wants, id);
}

void sched_notify_done(sched_state *st, uint32_t id, uint32_t only)
{
  const sched_task *t = &st->tasks[id];
  tsr_meta meta = {.dtype = (tsr_dtype)t->dtype, .ndim = t->ndim};
  memcpy(meta.shape, t->shape, sizeof meta.shape);
  for (uint32_t c = 0; c < st->nclients_slots; c++) {
    if (!client_wants(st, c, id, only)) continue;
    tsr_wbuf *wb = sched_out(st, st->clients[c].peer);
    tsr_wbuf_begin(wb, "key_done", 6);
    tsr_pack_kv_strn(&wb->pk, "key", t->key, t->key_len);
    tsr_pack_kv_uint(&wb->pk, "nbytes", t->nbytes);
    tsr_pack_meta(&wb->pk, &meta);
    tsr_pack_str(&wb->pk, "where");
    msgpack_pack_array(&wb->pk, 1);
    tsr_pack_str(&wb->pk, t->who_has != SCHED_NO_WORKER ? st->workers[t->who_has].address : "");
  }
}

void sched_error_text(const sched_state *st, uint32_t id, char *buf, size_t cap)
{
  const sched_task *t = &st->tasks[id];
  const sched_error *e = t->ext ? t->ext->error : NULL;
  if (e == NULL) snprintf(buf, cap, "task '%s' failed (no message)", t->key);
  else if (e->key_len == t->key_len && memcmp(e->key, t->key, t->key_len) == 0) snprintf(buf, cap, "%s", e->message);
  else snprintf(buf, cap, "dependency '%s' failed: %s", e->key, e->message);
}

void sched_notify_erred(sched_state *st, uint32_t id, uint32_t only)
{
  const sched_task *t = &st->tasks[id];
  char text[TSR_MAX_TEXT_LEN];
  bool formatted = false;
  for (uint32_t c = 0; c < st->nclients_slots; c++) {
    if (!client_wants(st, c, id, only)) continue;
    if (!formatted) sched_error_text(st, id, text, sizeof text);
    formatted = true;
    tsr_wbuf *wb = sched_out(st, st->clients[c].peer);
    tsr_wbuf_begin(wb, "key_erred", 3);
    tsr_pack_kv_strn(&wb->pk, "key", t->key, t->key_len);
    tsr_pack_kv_str(&wb->pk, "message", text);
  }
}

void sched_notify_lost(sched_state *st, uint32_t id)
{
  const sched_task *t = &st->tasks[id];
  for (uint32_t c = 0; c < st->nclients_slots; c++) {
    if (!client_wants(st, c, id, SCHED_NONE)) continue;
    tsr_wbuf *wb = sched_out(st, st->clients[c].peer);
    tsr_wbuf_begin(wb, "key_lost", 2);
    tsr_pack_kv_strn(&wb->pk, "key", t->key, t->key_len);
  }
}

static void pack_worker(msgpack_packer *pk, const sched_worker *w)
{
  msgpack_pack_map(pk, 21 + (w->gpu_util >= 0) + sched_usage_nfields(&w->usage));
  tsr_pack_kv_str(pk, "name", w->name);
  tsr_pack_kv_str(pk, "address", w->address);
  tsr_pack_kv_str(pk, "device", w->device);
  tsr_pack_kv_uint(pk, "threads", w->threads);
  tsr_pack_kv_uint(pk, "memory_used", w->memory_used);
  tsr_pack_kv_uint(pk, "memory_limit", w->memory_limit);
  /* the scheduler's own count of tasks in flight is never stale */
  tsr_pack_kv_uint(pk, "tasks_running", w->nprocessing > w->tasks_running ? w->nprocessing : w->tasks_running);
  tsr_pack_kv_uint(pk, "tasks_done", w->tasks_done);
  tsr_pack_kv_str(pk, "gpu_name", w->gpu_name);
  tsr_pack_kv_uint(pk, "device_memory_used", w->device_memory_used);
  tsr_pack_kv_uint(pk, "device_memory_limit", w->device_memory_limit);
  tsr_pack_kv_uint(pk, "device_bytes_moved", w->device_bytes_moved);
  tsr_pack_kv_uint(pk, "device_bytes_dropped", w->device_bytes_dropped);
  if (w->gpu_util >= 0) tsr_pack_kv_uint(pk, "gpu_util", (uint64_t)w->gpu_util);
  tsr_pack_kv_uint(pk, "disk_bytes", w->disk_bytes);
  tsr_pack_kv_uint(pk, "bytes_spilled", w->bytes_spilled);
  tsr_pack_kv_uint(pk, "bytes_dropped", w->bytes_dropped);
  tsr_pack_kv_bool(pk, "paused", w->paused);
  /* the scheduler's own accounting (policy_evict.h) */
  tsr_pack_kv_uint(pk, "memory_held", w->bytes_held - (w->held_disk <= w->bytes_held ? w->held_disk : w->bytes_held));
  tsr_pack_kv_uint(pk, "disk_held", w->held_disk);
  tsr_pack_kv_uint(pk, "tasks_recomputed", w->tasks_recomputed);
  tsr_pack_kv_uint(pk, "bytes_recomputed", w->bytes_recomputed);
  sched_usage_pack(pk, &w->usage);
}

void sched_emit_status(sched_state *st, uint32_t peer, uint64_t req)
{
  tsr_wbuf *wb = sched_out(st, peer);
  msgpack_packer *pk = &wb->pk;
  tsr_wbuf_begin(wb, "status_reply", 5);
  tsr_pack_kv_uint(pk, "req", req);
  tsr_pack_str(pk, "workers");
  msgpack_pack_array(pk, st->nworkers_alive);
  for (uint32_t w = 0; w < st->nworkers_slots; w++)
    if (st->workers[w].alive) pack_worker(pk, &st->workers[w]);
  uint32_t ngraphs = 0;
  for (uint32_t g = 0; g < st->ngraphs; g++) ngraphs += st->graphs[g] != NULL;
  tsr_pack_str(pk, "graphs");
  msgpack_pack_array(pk, ngraphs);
  for (uint32_t g = 0; g < st->ngraphs; g++) {
    const sched_graph *gr = st->graphs[g];
    if (gr == NULL) continue;
    msgpack_pack_map(pk, 7 + sched_progress_status_fields(gr));
    tsr_pack_kv_str(pk, "client", gr->client_name);
    tsr_pack_kv_uint(pk, "graph", gr->graph_id);
    tsr_pack_kv_uint(pk, "tasks_total", gr->ntasks);   /* fused tasks count by their parts */
    tsr_pack_kv_uint(pk, "tasks_done", gr->ndone);
    tsr_pack_kv_uint(pk, "tasks_erred", gr->nerred);
    tsr_pack_kv_uint(pk, "fused_tasks", gr->nfused);
    tsr_pack_kv_uint(pk, "fused_parts", gr->nfused_parts);
    sched_progress_pack_status(st, pk, gr);   /* its op groups: `tessera report --scheduler` */
  }
  tsr_pack_kv_uint(pk, "tasks_total", (uint64_t)st->nlive + st->nfused_extra);
}

void sched_emit_heartbeats(sched_state *st)
{
  for (uint32_t p = 0; p < st->npeers_slots; p++)
    if (st->peers[p].in_use && st->peers[p].role != PEER_NONE) tsr_wbuf_begin(sched_out(st, p), "heartbeat", 1);
}
