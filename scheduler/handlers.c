/* Inbound control messages: frame validation, dispatch by peer role and
 * op, and the handlers of worker and client messages (hello and departures
 * are in peers.c).
 *
 * A frame is validated as a whole first (tsr_reader_init: no allocation
 * from declared sizes); a frame that fails is answered with one `error`.
 * Each message of a valid frame is then handled on its own: a malformed
 * message (missing field, wrong type, unknown op, before hello) gets an
 * `error` naming the problem with `ref` = its op, one log line naming the
 * peer, and nothing else changes. The state is settled after every
 * message, so each message sees a consistent state. */
#include "util/rttrace.h"
#include "dashboard.h"
#include "journal.h"
#include "policy_evict.h"
#include "progress.h"
#include "sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct msgctx {
  sched_state *st;
  uint32_t p;
  const msgpack_object *map;
  const char *op;
  const char *raw;        /* this message's bytes within the frame */
  size_t raw_len;
  tsr_errbuf err;
} msgctx;

static void reject(msgctx *m, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void reject(msgctx *m, int code, const char *fmt, ...)
{
  char text[TSR_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  char label[TSR_MAX_NAME_LEN + 32];
  TSR_WARN("rejected '%s' from %s: %s", m->op, sched_peer_label(m->st, m->p, label, sizeof label), text);
  sched_send_error(m->st, m->p, code, m->op[0] == '(' ? NULL : m->op, "%s", text);
}

/* ---------- worker messages ---------- */

static void on_worker_heartbeat(msgctx *m)
{
  sched_worker *w = &m->st->workers[m->st->peers[m->p].index];
  uint64_t used, running, done, chunks, dev_used, util;
  int rc = tsr_wire_opt_uint(m->map, "memory_used", w->memory_used, &used, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "tasks_running", w->tasks_running, &running, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "tasks_done", w->tasks_done, &done, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "chunks", w->chunks, &chunks, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "device_memory_used", w->device_memory_used, &dev_used, &m->err);
  /* absent gpu_util: NVML is not available there (now) */
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "gpu_util", UINT64_MAX, &util, &m->err);
  uint64_t disk, spilled, dropped, dev_moved, dev_dropped;
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "disk_bytes", w->disk_bytes, &disk, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "bytes_spilled", w->bytes_spilled, &spilled, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "bytes_dropped", w->bytes_dropped, &dropped, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "device_bytes_moved", w->device_bytes_moved, &dev_moved, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "device_bytes_dropped", w->device_bytes_dropped, &dev_dropped, &m->err);
  bool paused = false;
  if (rc == 0) rc = tsr_wire_opt_bool(m->map, "paused", false, &paused, &m->err);
  uint64_t write_bps, read_bps;
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "spill_write_bps", w->spill_write_bps, &write_bps, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "spill_read_bps", w->spill_read_bps, &read_bps, &m->err);
  if (rc == 0) rc = sched_usage_decode(m->map, &w->usage, &m->err);   /* for status_reply only */
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  w->disk_bytes = disk;
  w->spill_write_bps = write_bps;
  w->spill_read_bps = read_bps;
  w->bytes_spilled = spilled;
  w->bytes_dropped = dropped;
  if (paused != w->paused) TSR_INFO("worker '%s' %s", w->name, paused ? "paused (memory)" : "resumed");
  bool load_changed = paused != w->paused;
  w->paused = paused;
  if (load_changed) sched_place_worker_changed(m->st, m->st->peers[m->p].index);
  w->device_memory_used = dev_used;
  w->device_bytes_moved = dev_moved;
  w->device_bytes_dropped = dev_dropped;
  w->gpu_util = util == UINT64_MAX ? -1 : util > 100 ? 100 : (int32_t)util;
  w->memory_used = used;
  w->tasks_running = running;
  w->tasks_done = done;
  w->chunks = chunks;
  sched_dash_heartbeat(m->st, m->st->peers[m->p].index, m->map);
}

/* Decodes id and key and checks the task is PROCESSING on this worker.
 * Returns the task id, or SCHED_NONE after rejecting / logging. */
static uint32_t reported_task(msgctx *m)
{
  sched_state *st = m->st;
  uint64_t id;
  const char *key;
  size_t klen;
  int rc = tsr_wire_uint(m->map, "id", &id, &m->err);
  if (rc == 0) rc = tsr_wire_str(m->map, "key", TSR_MAX_KEY_LEN, &key, &klen, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return SCHED_NONE;
  }
  uint32_t w = st->peers[m->p].index;
  const sched_task *t = id < st->ntasks ? &st->tasks[id] : NULL;
  if (t == NULL || t->state != TS_PROCESSING || t->processing_on != w || t->key_len != klen ||
      memcmp(t->key, key, klen) != 0) {
    TSR_INFO("ignoring stale %s for task %llu '%.*s' from worker '%s'", m->op, (unsigned long long)id,
             (int)(klen > 128 ? 128 : klen), key, st->workers[w].name);
    return SCHED_NONE;
  }
  return (uint32_t)id;
}

static void on_task_done(msgctx *m)
{
  tsr_rt_stamp("s.task_done");
  uint64_t nbytes, duration, start_us, lane;
  tsr_meta meta;
  int rc = tsr_wire_uint(m->map, "nbytes", &nbytes, &m->err);
  if (rc == 0) rc = tsr_wire_meta(m->map, &meta, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "duration_us", 0, &duration, &m->err);
  /* the task stream's optional fields (docs/protocol.md) */
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "start_us", 0, &start_us, &m->err);
  if (rc == 0) rc = tsr_wire_opt_uint(m->map, "lane", UINT32_MAX, &lane, &m->err);
  if (rc != 0) {
    reject(m, TSR_EPROTO, "%s", m->err.text);
    return;
  }
  uint32_t id = reported_task(m);
  if (id == SCHED_NONE) return;
  /* +1 keeps a sub-microsecond task from reading as "no data". */
  sched_worker *w = &m->st->workers[m->st->peers[m->p].index];
  w->avg_task_us = w->avg_task_us == 0 ? duration + 1 : (7 * w->avg_task_us + duration + 1) / 8;
  w->avg_out_bytes = w->avg_out_bytes == 0 ? nbytes + 1 : (7 * w->avg_out_bytes + nbytes + 1) / 8;
  sched_dash_task_done(m->st, id, m->st->peers[m->p].index, duration, start_us,
                       lane > UINT32_MAX ? UINT32_MAX : (uint32_t)lane);
  sched_evict_on_done(m->st, id, (uint16_t)m->st->peers[m->p].index, duration, nbytes);
  sched_progress_busy(m->st, id, duration);   /* before the transition that may complete the graph */
  sched_tr_done(m->st, id, (uint16_t)m->st->peers[m->p].index, nbytes, &meta);
  sched_journal_done(m->st, id);
}

static void on_task_erred(msgctx *m)
{
  const char *msg;
  size_t len;
  int rc = tsr_wire_str(m->map, "message", TSR_MAX_TEXT_LEN, &msg, &len, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  uint32_t id = reported_task(m);
  if (id == SCHED_NONE) return;
  TSR_INFO("task '%s' failed on worker '%s': %.*s", m->st->tasks[id].key,
           m->st->workers[m->st->peers[m->p].index].name, (int)(len > 300 ? 300 : len), msg);
  sched_dash_task_erred(m->st, id);
  sched_tr_erred(m->st, id, msg, len);
}

static void on_missing_input(msgctx *m)
{
  sched_state *st = m->st;
  const char *input, *from;
  size_t ilen, flen;
  int rc = tsr_wire_str(m->map, "input", TSR_MAX_KEY_LEN, &input, &ilen, &m->err);
  if (rc == 0) rc = tsr_wire_str(m->map, "from", TSR_MAX_NAME_LEN, &from, &flen, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  uint32_t id = reported_task(m);
  if (id == SCHED_NONE) return;
  uint32_t x = sched_task_find(st, input, ilen);
  const sched_task *t = &st->tasks[id];
  bool is_input = false;
  for (uint32_t i = 0; x != SCHED_NONE && i < t->ndeps && !is_input; i++) is_input = t->deps[i] == x;
  if (!is_input) {
    TSR_WARN("worker '%s' reported input '%.*s' of task '%s' missing, but it is not an input; re-running the task",
             st->workers[st->peers[m->p].index].name, (int)(ilen > 128 ? 128 : ilen), input, t->key);
    x = SCHED_NONE;
  }
  sched_tr_missing_input(st, id, x, from, flen);
}

/* chunks_moved: {spilled, loaded, dropped: [key]}, each key at most once
 * (the worker sends the last move of each key since its previous report).
 * Keys that are not in memory on this worker are stale and ignored. */
static void on_chunks_moved(msgctx *m)
{
  static const char *const fields[] = {"spilled", "loaded", "dropped"};
  static const sched_move moves[] = {SCHED_MOVE_SPILLED, SCHED_MOVE_LOADED, SCHED_MOVE_DROPPED};
  const msgpack_object *keys[3];
  size_t n[3];
  for (int f = 0; f < 3; f++) {
    int rc = tsr_wire_opt_array(m->map, fields[f], TSR_MAX_BATCH_TASKS, &keys[f], &n[f], &m->err);
    const char *key;
    size_t len;
    for (size_t i = 0; rc == 0 && i < n[f]; i++)
      if (tsr_obj_str(&keys[f][i], TSR_MAX_KEY_LEN, &key, &len, NULL) != 0)
        rc = tsr_fail(&m->err, TSR_EPROTO, "field '%s' must hold key strings (entry %zu is not one)", fields[f], i);
    if (rc != 0) {
      reject(m, TSR_EPROTO, "%s", m->err.text);
      return;
    }
  }
  uint16_t w = (uint16_t)m->st->peers[m->p].index;
  for (int f = 0; f < 3; f++)
    for (size_t i = 0; i < n[f]; i++) {
      const char *key;
      size_t len;
      tsr_obj_str(&keys[f][i], TSR_MAX_KEY_LEN, &key, &len, NULL);
      uint32_t id = sched_task_find(m->st, key, len);
      if (id != SCHED_NONE) sched_evict_moved(m->st, w, moves[f], id);
    }
}

/* ---------- client messages ---------- */

static sched_pending *find_pending(sched_client *c, uint64_t graph)
{
  for (uint32_t i = 0; i < c->npending; i++)
    if (c->pending[i].graph_id == graph) return &c->pending[i];
  return NULL;
}

static void drop_pending(sched_client *c, sched_pending *pd)
{
  sched_pending_free(pd);
  *pd = c->pending[--c->npending];
}

static sched_pending *pending_for(msgctx *m, sched_client *c, uint64_t graph, bool resend)
{
  sched_pending *pd = find_pending(c, graph);
  if (pd != NULL && resend && !pd->resending) {
    drop_pending(c, pd);
    pd = NULL;
  }
  if (pd != NULL) return pd;
  if (sched_grow((void **)&c->pending, &c->cap_pending, c->npending + 1, sizeof *c->pending) != 0) {
    tsr_fail(&m->err, TSR_ENOMEM, "out of memory keeping a part of graph %llu", (unsigned long long)graph);
    return NULL;
  }
  pd = &c->pending[c->npending++];
  memset(pd, 0, sizeof *pd);
  msgpack_sbuffer_init(&pd->dec.params);
  pd->graph_id = graph;
  pd->resending = resend;
  return pd;
}

/* Keeps a copy of this part's bytes in pd: its tasks are decoded a slice
 * per loop iteration (sched_admit_run), not here, so a frame holding
 * several large parts does not hold the loop. */
static int keep_bytes(msgctx *m, sched_pending *pd)
{
  char *copy = malloc(m->raw_len ? m->raw_len : 1);
  if (copy == NULL || sched_grow((void **)&pd->parts, &pd->cap, pd->nparts + 1, sizeof *pd->parts) != 0) {
    free(copy);
    return tsr_fail(&m->err, TSR_ENOMEM, "out of memory keeping a part of graph %llu", (unsigned long long)pd->graph_id);
  }
  memcpy(copy, m->raw, m->raw_len);
  pd->parts[pd->nparts++] = (sched_pending_part){copy, m->raw_len};
  pd->bytes += m->raw_len;
  m->st->decode_wanted = true;
  return 0;
}

/* A part with `more`. A part of a graph whose earlier part was malformed
 * is dropped unread: the last part is answered with that error. The first
 * part of a resend (the client's session resumed, docs/journal.md) drops
 * what the interrupted sending left. */
static int keep_part(msgctx *m, uint32_t ci, uint64_t graph, bool resend)
{
  sched_client *c = &m->st->clients[ci];
  /* before anything is kept: over all the graphs this client is sending */
  int rc = sched_limits_check_pending(m->st, c, m->raw_len, &m->err);
  if (rc != 0) return rc;
  sched_pending *pd = pending_for(m, c, graph, resend);
  if (pd == NULL) return TSR_ENOMEM;
  return pd->failed ? 0 : keep_bytes(m, pd);
}

/* The last part: kept like the others, then the graph is decoded,
 * validated and admitted, at once when small, else a slice per loop
 * iteration (*queued_p: the admission replies and journals by itself). */
static int submit_last(msgctx *m, uint32_t ci, uint64_t graph, bool resend, uint32_t ntasks, bool *queued_p)
{
  sched_client *c = &m->st->clients[ci];
  *queued_p = false;
  sched_pending *pd = pending_for(m, c, graph, resend);
  if (pd == NULL) return TSR_ENOMEM;
  int rc = pd->failed ? pd->failed : keep_bytes(m, pd);
  if (pd->failed) snprintf(m->err.text, sizeof m->err.text, "%s", pd->error ? pd->error : "malformed graph");
  if (rc == 0) rc = sched_admit_start(m->st, ci, pd, ntasks, queued_p, &m->err);
  c = &m->st->clients[ci];
  pd = find_pending(c, graph);
  if (!*queued_p && rc >= 0 && pd != NULL) sched_journal_pending(m->st, ci, pd);
  if (pd != NULL) drop_pending(c, pd);
  return rc;
}

/* The last part of a resend of a graph this client already has (it got
 * here before the connection broke; only the reply was lost): the graph
 * stands, the client hears `submitted` again, and the resumed session
 * sends the keys' states anew. */
static void resubmitted(msgctx *m, uint32_t ci, uint64_t graph)
{
  sched_client *c = &m->st->clients[ci];
  sched_pending *pd = find_pending(c, graph);
  if (pd != NULL) drop_pending(c, pd);
  TSR_INFO("client '%s' sent graph %llu again after its session resumed: it is already here",
           c->name, (unsigned long long)graph);
  tsr_wbuf *wb = sched_out(m->st, m->p);
  tsr_wbuf_begin(wb, "submitted", 3);
  tsr_pack_kv_uint(&wb->pk, "graph", graph);
  tsr_pack_kv_uint(&wb->pk, "tasks", 0);
}

static void on_submit(msgctx *m)
{
  tsr_rt_stamp("s.submit");
  sched_state *st = m->st;
  uint32_t ci = st->peers[m->p].index;
  uint64_t graph;
  bool more = false, resend = false, queued = false;
  const msgpack_object *items;
  size_t n;
  int rc = tsr_wire_uint(m->map, "graph", &graph, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  rc = tsr_wire_opt_bool(m->map, "more", false, &more, &m->err);
  if (rc == 0) rc = tsr_wire_opt_bool(m->map, "resend", false, &resend, &m->err);
  if (rc == 0) rc = tsr_wire_array(m->map, "tasks", TSR_MAX_BATCH_TASKS, &items, &n, &m->err);
  if (rc == 0 && !more && resend && sched_graph_find(st, ci, graph) != SCHED_NONE) {
    resubmitted(m, ci, graph);
    return;
  }
  uint64_t t0 = tsr_now_us();
  if (rc == 0) rc = more ? keep_part(m, ci, graph, resend) : submit_last(m, ci, graph, resend, (uint32_t)n, &queued);
  if ((rc == 0 && more) || queued) return;
  if (rc >= 0) {
    /* sched_graph_add already queued `submitted` (before any key_done) */
    TSR_INFO("client '%s' submitted graph %llu: %d new tasks, admitted in %.3f s (%u tasks in the scheduler)",
             st->clients[ci].name, (unsigned long long)graph, rc, (double)(tsr_now_us() - t0) / 1e6, st->nlive);
    return;
  }
  tsr_wbuf *wb = sched_out(st, m->p);
  if (more) {
    sched_pending *pd = find_pending(&st->clients[ci], graph);
    if (pd != NULL) drop_pending(&st->clients[ci], pd);
  }
  TSR_WARN("rejected graph %llu from client '%s': %s: %s", (unsigned long long)graph, st->clients[ci].name,
           tsr_err_name(rc), m->err.text);
  tsr_wbuf_begin(wb, "submit_error", 4);
  tsr_pack_kv_uint(&wb->pk, "graph", graph);
  tsr_pack_kv_int(&wb->pk, "code", rc);
  tsr_pack_kv_str(&wb->pk, "message", m->err.text);
}

static void on_release(msgctx *m)
{
  sched_state *st = m->st;
  const msgpack_object *keys;
  size_t n;
  int rc = tsr_wire_array(m->map, "keys", UINT32_MAX, &keys, &n, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  uint32_t ci = st->peers[m->p].index;
  sched_journal_release(st, ci, keys, n);
  for (size_t i = 0; i < n; i++) {
    const char *key;
    size_t len;
    if (tsr_obj_str(&keys[i], TSR_MAX_KEY_LEN, &key, &len, NULL) != 0) {
      reject(m, TSR_EPROTO, "field 'keys' must hold key strings (entry %zu is not one)", i);
      return;
    }
    uint32_t id = sched_task_find(st, key, len);
    if (id != SCHED_NONE) sched_tr_unwant(st, ci, id);
  }
}

/* key_missing {key, from}: the client's fetch of a wanted key from the
 * worker at `from` found no such chunk there. */
static void on_key_missing(msgctx *m)
{
  const char *key, *from;
  size_t klen, flen;
  int rc = tsr_wire_str(m->map, "key", TSR_MAX_KEY_LEN, &key, &klen, &m->err);
  if (rc == 0) rc = tsr_wire_str(m->map, "from", TSR_MAX_NAME_LEN, &from, &flen, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  uint32_t id = sched_task_find(m->st, key, klen);
  if (id != SCHED_NONE) sched_tr_key_missing(m->st, id, from, flen);
}

/* progress {on: bool (opt, default true)}: (un)subscribe to `progress`. */
static void on_progress(msgctx *m)
{
  bool on = true;
  int rc = tsr_wire_opt_bool(m->map, "on", true, &on, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  sched_progress_subscribe(m->st, m->st->peers[m->p].index, on);
}

static void on_status(msgctx *m)
{
  uint64_t req;
  int rc = tsr_wire_uint(m->map, "req", &req, &m->err);
  if (rc != 0) {
    reject(m, rc, "%s", m->err.text);
    return;
  }
  sched_emit_status(m->st, m->p, req);
}

/* ---------- dispatch ---------- */

typedef struct route {
  const char *op;
  uint8_t role;
  void (*fn)(msgctx *m);
} route;

static void on_goodbye(msgctx *m) { sched_peer_drop(m->st, m->p, "said goodbye"); }

static const route routes[] = {
  {"task_done", PEER_WORKER, on_task_done},   {"task_erred", PEER_WORKER, on_task_erred},
  {"missing_input", PEER_WORKER, on_missing_input}, {"heartbeat", PEER_WORKER, on_worker_heartbeat},
  {"chunks_moved", PEER_WORKER, on_chunks_moved},
  {"goodbye", PEER_WORKER, on_goodbye},       {"submit", PEER_CLIENT, on_submit},
  {"release", PEER_CLIENT, on_release},       {"status", PEER_CLIENT, on_status},
  {"key_missing", PEER_CLIENT, on_key_missing}, {"progress", PEER_CLIENT, on_progress},
  {"goodbye", PEER_CLIENT, on_goodbye},       {"heartbeat", PEER_CLIENT, NULL},
};

static void dispatch(msgctx *m)
{
  sched_peer *peer = &m->st->peers[m->p];
  char label[TSR_MAX_NAME_LEN + 32];
  if (strcmp(m->op, "error") == 0) {
    /* never answer an error with an error: two peers could ping-pong */
    const char *text = "";
    size_t len = 0;
    tsr_wire_str(m->map, "message", TSR_MAX_TEXT_LEN, &text, &len, NULL);
    TSR_WARN("%s reported an error: %.*s", sched_peer_label(m->st, m->p, label, sizeof label), (int)(len > 300 ? 300 : len), text);
    return;
  }
  if (strcmp(m->op, "hello") == 0) {
    sched_peer_hello(m->st, m->p, m->map);
    return;
  }
  if (peer->role == PEER_NONE) {
    if (peer->was_gone) reject(m, TSR_ENOTFOUND, "unknown peer");
    else reject(m, TSR_EPROTO, "say hello first");
    return;
  }
  bool other_role = false;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (strcmp(routes[i].op, m->op) != 0) continue;
    if (routes[i].role != peer->role) {
      other_role = true;
      continue;
    }
    if (routes[i].fn != NULL) routes[i].fn(m);
    return;
  }
  if (other_role) reject(m, TSR_EPROTO, "op '%s' is not valid from a %s", m->op, peer->role == PEER_WORKER ? "worker" : "client");
  else reject(m, TSR_EPROTO, "unknown message op '%s'", m->op);
}

static uint32_t peer_for(sched_state *st, const void *identity, size_t id_len, uint64_t now_ms)
{
  uint32_t p = sched_peer_find(st, identity, id_len);
  if (p == SCHED_NONE) p = sched_peer_add(st, identity, id_len, now_ms);
  if (p == SCHED_NONE) TSR_WARN("dropping a message from a peer that cannot be tracked (identity of %zu bytes)", id_len);
  else st->peers[p].last_seen_ms = now_ms;
  return p;
}

/* The loop logs the slowest message of a slow iteration (loop.c). */
static void note_handler_time(sched_state *st, const char *op, uint64_t us)
{
  if (us <= st->slowest_msg_us) return;
  st->slowest_msg_us = us;
  snprintf(st->slowest_msg_op, sizeof st->slowest_msg_op, "%s", op);
}

void sched_handle_frame(sched_state *st, const void *identity, size_t id_len, const void *data, size_t len,
                        uint64_t now_ms)
{
  msgctx m = {.st = st, .op = "(frame)"};
  m.p = peer_for(st, identity, id_len, now_ms);
  if (m.p == SCHED_NONE) return;
  if (len > st->cfg.limits.message_bytes) {
    reject(&m, tsr_limit_fail(&m.err, "max-message-bytes", "frame bytes", len, st->cfg.limits.message_bytes), "%s",
           m.err.text);
    return;
  }
  tsr_reader rd;
  if (tsr_reader_init(&rd, data, len, &m.err) != 0) {
    reject(&m, TSR_EPROTO, "%s", m.err.text);
    tsr_reader_done(&rd);
    return;
  }
  for (;;) {
    char op[TSR_MAX_NAME_LEN + 1];
    size_t start = rd.offset;
    int rc = tsr_reader_next(&rd, &m.map, op, &m.err);
    if (rc == 0) break;
    m.op = rc > 0 ? op : "(message)";
    if (rc < 0) {
      reject(&m, TSR_EPROTO, "%s", m.err.text);
      if (rd.offset <= start) break;
      continue;
    }
    m.raw = (const char *)data + start;
    m.raw_len = rd.offset - start;
    uint64_t t0 = tsr_now_us();
    dispatch(&m);
    sched_settle(st);
    note_handler_time(st, m.op, tsr_now_us() - t0);
    if (!st->peers[m.p].in_use) break;  /* it said goodbye */
  }
  tsr_reader_done(&rd);
}

void sched_handle_bad_frame(sched_state *st, const void *identity, size_t id_len, int nframes, uint64_t now_ms)
{
  msgctx m = {.st = st, .op = "(frame)"};
  m.p = peer_for(st, identity, id_len, now_ms);
  if (m.p != SCHED_NONE) reject(&m, TSR_EPROTO, "a control message must be exactly one frame (got %d)", nframes);
}
