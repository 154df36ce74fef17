/* The scheduler link and the scheduler's messages.
 *
 * The link is a small state machine (DOWN -> HELLO -> READY, see
 * worker_int.h). Any frame from the scheduler counts as a sign of life.
 * When the scheduler is silent for the heartbeat timeout, or says it does
 * not know us, the worker assumes the scheduler has already rescheduled
 * everything it had: it cancels its queued and running tasks, starts a new
 * store epoch (a task finishing later cannot store its result), drops
 * replicas and spilled chunks, closes the link's socket and says hello
 * again on a new one, listing the results it still holds in memory (`chunks`): a
 * scheduler restarted with its journal adopts them, others free them. Attempts
 * repeat forever, 1 s apart, one warn line each.
 *
 * A malformed frame or message is logged, answered with `error`, and
 * skipped; only a refused protocol version is fatal. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/rttrace.h"
#include "util/limits.h"
#include "zmtp/zmtp.h"
#include "wmetrics.h"
#include "worker_int.h"

#define RETRY_PAUSE_MS 1000

/* ---------- connecting ---------- */

static void cancel_pending(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)arg, (void)key, (void)key_len;
  tsr_wtask *task = (tsr_wtask *)(uintptr_t)value;
  atomic_store(&task->cancelled, true);
}

static void close_socket(tsr_worker *w) { tsr_zmtp_close(&w->sched); }

/* Forgets the session: tasks cancelled (their completions arrive later
 * and are dropped as stale), chunks dropped, socket closed. */
static void link_reset(tsr_worker *w, uint64_t retry_at_ms)
{
  tsr_strmap_each(w->pending, cancel_pending, NULL);
  tsr_strmap_destroy(&w->pending);
  tsr_strmap_destroy(&w->needs);
  w->pending = tsr_strmap_new(1024);
  w->needs = tsr_strmap_new(1024);
  if (w->pending == NULL || w->needs == NULL) {
    TSR_ERROR("out of memory resetting the scheduler link");
    w->stopping = true;
    w->exit_code = 1;
  }
  /* Results stay: the next hello reports them, and a scheduler that
   * restarted with its journal (or timed us out and still needs them)
   * adopts them instead of recomputing; it frees the rest. */
  tsr_wstore_renew(w->store);
  uint64_t kept = tsr_wstore_count(w->store);
  if (kept) TSR_INFO("kept %llu results of the previous session for the next hello", (unsigned long long)kept);
  tsr_wbuf_reset(&w->out);
  close_socket(w);
  w->link = TSR_LINK_DOWN;
  w->link_gen++;
  w->retry_at_ms = retry_at_ms;
}

static void link_connect(tsr_worker *w, uint64_t now_ms)
{
  w->attempt++;
  if (tsr_wsec_link(w, &w->sched) != 0) {
    TSR_WARN("cannot connect to scheduler %s (attempt %llu); retrying in 1s", w->opts.scheduler,
             (unsigned long long)w->attempt);
    w->retry_at_ms = now_ms + RETRY_PAUSE_MS;
    return;
  }
  if (w->attempt == 1) TSR_INFO("connecting to scheduler %s as %s", w->opts.scheduler, w->opts.name);
  w->link = TSR_LINK_HELLO;
  w->last_heard_ms = now_ms;
  tsr_wbuf_reset(&w->out);
  tsr_report_hello(w);
}

void tsr_link_tick(tsr_worker *w, uint64_t now_ms)
{
  if (w->stopping) return;
  if (w->link == TSR_LINK_DOWN) {
    if (now_ms >= w->retry_at_ms) link_connect(w, now_ms);
    return;
  }
  if (now_ms - w->last_heard_ms >= w->opts.heartbeat_timeout_ms) {
    if (w->link == TSR_LINK_READY) w->attempt = 0;
    TSR_WARN("scheduler %s: %s for %llu ms; %sreconnecting (attempt %llu)", w->opts.scheduler,
             w->link == TSR_LINK_READY ? "silent" : "no welcome", (unsigned long long)(now_ms - w->last_heard_ms),
             w->link == TSR_LINK_READY ? "dropping tasks, " : "", (unsigned long long)w->attempt + 1);
    link_reset(w, now_ms + RETRY_PAUSE_MS);
    return;
  }
  if (w->link == TSR_LINK_READY && now_ms >= w->next_beat_ms) {
    tsr_report_heartbeat(w);
    w->next_beat_ms = now_ms + w->beat_ms;
  }
  /* tier moves since the last iteration, batched into one message */
  if (w->link == TSR_LINK_READY) tsr_report_moves(w, NULL);
}

uint64_t tsr_link_next_deadline(const tsr_worker *w)
{
  if (w->link == TSR_LINK_DOWN) return w->retry_at_ms;
  uint64_t deadline = w->last_heard_ms + w->opts.heartbeat_timeout_ms;
  if (w->link == TSR_LINK_READY && w->next_beat_ms < deadline) deadline = w->next_beat_ms;
  return deadline;
}

void tsr_link_flush(tsr_worker *w)
{
  if (w->out.nmsgs == 0) return;
  if (w->sched != NULL && tsr_zmtp_send(w->sched, NULL, 0, w->out.sbuf.data, w->out.sbuf.size) != 0)
    TSR_WARN("send to scheduler failed: %s (%zu messages dropped)", strerror(errno), w->out.nmsgs);
  tsr_rt_stamp("w.sent");
  tsr_wbuf_reset(&w->out);
}

/* Sends goodbye (unless leaving on a fatal error) and closes the socket,
 * giving the goodbye up to 2 s to leave. */
void tsr_link_goodbye(tsr_worker *w)
{
  if (w->sched == NULL) return;
  /* Only a welcomed worker has something to say goodbye to; otherwise
   * close at once rather than wait for a scheduler that may not exist. */
  if (w->link == TSR_LINK_READY && w->exit_code == 0) {
    tsr_report_goodbye(w);
    tsr_link_flush(w);
    tsr_zmtp_flush(w->sched, 2000);
  }
  close_socket(w);
}

/* ---------- the scheduler's messages ---------- */

static void on_welcome(tsr_worker *w, const msgpack_object *map)
{
  tsr_errbuf err = {{0}};
  uint64_t proto, id, beat_ms;
  int rc = tsr_wire_uint(map, "proto", &proto, &err);
  if (rc == 0) rc = tsr_wire_uint(map, "id", &id, &err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "heartbeat_ms", 0, &beat_ms, &err);
  if (rc != 0) {
    TSR_WARN("malformed welcome from scheduler: %s", err.text);
    tsr_report_error(w, rc, err.text, "welcome");
    return;
  }
  if (proto != TSR_PROTOCOL_VERSION) {
    TSR_ERROR("scheduler speaks protocol %llu, this worker %d", (unsigned long long)proto, TSR_PROTOCOL_VERSION);
    w->stopping = true;
    w->exit_code = 1;
    return;
  }
  /* Beat at least as often as the scheduler asks, and as our flag says. */
  w->beat_ms = w->opts.heartbeat_interval_ms;
  if (beat_ms > 0 && beat_ms < w->beat_ms) w->beat_ms = beat_ms;
  if (w->link != TSR_LINK_READY)
    TSR_INFO("welcomed by scheduler %s as peer %llu (heartbeat %llu ms)", w->opts.scheduler,
             (unsigned long long)id, (unsigned long long)w->beat_ms);
  w->peer_id = id;
  w->link = TSR_LINK_READY;
  w->attempt = 0;
  w->next_beat_ms = tsr_now_ms() + w->beat_ms;
}

static bool is_unknown_peer(int64_t code, const char *text)
{
  return (code == TSR_ENOTFOUND && strstr(text, "unknown peer") != NULL) ||
         (code == TSR_EPROTO && strstr(text, "say hello first") != NULL);
}

static void on_error(tsr_worker *w, const msgpack_object *map)
{
  int64_t code = 0;
  char text[1024] = "", ref[TSR_MAX_NAME_LEN + 1] = "";
  const char *s;
  size_t len;
  tsr_wire_opt_int(map, "code", 0, &code, NULL);
  if (tsr_wire_str(map, "message", TSR_MAX_TEXT_LEN, &s, &len, NULL) == 0)
    snprintf(text, sizeof text, "%.*s", (int)len, s);
  if (tsr_wire_str(map, "ref", TSR_MAX_NAME_LEN, &s, &len, NULL) == 0) snprintf(ref, sizeof ref, "%.*s", (int)len, s);
  if (code == TSR_EVERSION) {
    TSR_ERROR("scheduler %s refused our protocol version %d: %s", w->opts.scheduler, TSR_PROTOCOL_VERSION, text);
    w->stopping = true;
    w->exit_code = 1;
    return;
  }
  if (w->link != TSR_LINK_DOWN && is_unknown_peer(code, text)) {
    TSR_WARN("scheduler %s does not know this worker (%s); dropping tasks, saying hello again",
             w->opts.scheduler, text);
    link_reset(w, w->link == TSR_LINK_READY ? tsr_now_ms() : tsr_now_ms() + RETRY_PAUSE_MS);
    return;
  }
  TSR_WARN("scheduler error %s (%lld)%s%s: %s", tsr_err_name((int)code), (long long)code, ref[0] ? " about " : "",
           ref, text);
}

static void count_need(tsr_strmap *needs, const char *key, int delta)
{
  uint64_t n = 0;
  size_t len = strlen(key);
  tsr_strmap_get(needs, key, len, &n);
  n += (uint64_t)(int64_t)delta;
  if (n == 0)
    tsr_strmap_del(needs, key, len);
  else
    tsr_strmap_put(needs, key, len, n);
}

static void reject_compute(tsr_worker *w, const msgpack_object *map, const char *why)
{
  uint64_t id;
  char key[TSR_MAX_KEY_LEN + 1];
  char message[TSR_ERRMSG_LEN + 32];
  snprintf(message, sizeof message, "malformed compute: %s", why);
  if (tsr_wtask_ident(map, &id, key) == 0) {
    TSR_WARN("task %s (id %llu): %s", key, (unsigned long long)id, message);
    tsr_report_task_erred(w, id, key, message);
  } else {
    TSR_WARN("scheduler sent a %s", message);
    tsr_report_error(w, TSR_EPROTO, message, "compute");
  }
}

/* Queues a decoded task, unless the same key is already queued or running. */
static void accept_task(tsr_worker *w, tsr_wtask *task)
{
  size_t len = strlen(task->key);
  uint64_t value;
  if (tsr_strmap_get(w->pending, task->key, len, &value) &&
      !atomic_load(&((tsr_wtask *)(uintptr_t)value)->cancelled)) {
    TSR_DEBUG("task %s: already queued or running; duplicate compute ignored", task->key);
    tsr_wtask_free(&task);
    return;
  }
  task->epoch = tsr_wstore_epoch(w->store);
  if (tsr_strmap_put(w->pending, task->key, len, (uint64_t)(uintptr_t)task) != 0 ||
      tsr_wexec_submit(w->exec, task) != 0) {
    tsr_strmap_del(w->pending, task->key, len);
    tsr_report_task_erred(w, task->id, task->key, "out of memory queueing the task on the worker");
    tsr_wtask_free(&task);
    return;
  }
  for (size_t i = 0; i < task->n_inputs; i++) count_need(w->needs, task->inputs[i].key, +1);
  TSR_DEBUG("task %s (id %llu): queued %s, priority %lld", task->key, (unsigned long long)task->id, task->op_name,
            (long long)task->priority);
}

static void on_compute(tsr_worker *w, const msgpack_object *map)
{
  tsr_rt_stamp("w.compute");
  if (w->link != TSR_LINK_READY) {
    TSR_WARN("compute before welcome; ignored");
    return;
  }
  tsr_errbuf err = {{0}};
  tsr_wtask *task = NULL;
  if (tsr_wtask_decode(map, &task, &err) != 0) {
    reject_compute(w, map, err.text);
    return;
  }
  if (task->op == NULL && task->parts == NULL) {
    char message[TSR_MAX_NAME_LEN * 2 + 64];
    snprintf(message, sizeof message, "unknown op '%s' on worker %s", task->op_name, w->opts.name);
    TSR_WARN("task %s: %s", task->key, message);
    tsr_report_task_erred(w, task->id, task->key, message);
    tsr_wtask_free(&task);
    return;
  }
  tsr_limits limits = TSR_LIMITS_DEFAULT;
  if (tsr_wtask_check_chunk_limit(task, w->opts.max_chunk_bytes ? w->opts.max_chunk_bytes : limits.chunk_bytes, &err) != 0) {
    TSR_WARN("task %s: %s", task->key, err.text);
    tsr_report_task_erred(w, task->id, task->key, err.text);
    tsr_wtask_free(&task);
    return;
  }
  accept_task(w, task);
}

static void on_free(tsr_worker *w, const msgpack_object *map)
{
  tsr_errbuf err = {{0}};
  const msgpack_object *keys;
  size_t n;
  if (tsr_wire_array(map, "keys", TSR_MAX_BATCH_TASKS, &keys, &n, &err) != 0) {
    TSR_WARN("malformed free from scheduler: %s", err.text);
    tsr_report_error(w, TSR_EPROTO, err.text, "free");
    return;
  }
  size_t dropped = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s;
    size_t len;
    char key[TSR_MAX_KEY_LEN + 1];
    if (tsr_obj_str(&keys[i], TSR_MAX_KEY_LEN, &s, &len, NULL) != 0) continue;
    memcpy(key, s, len);
    key[len] = '\0';
    uint64_t value;
    /* Cancel first, then delete: the executor checks the flag under the
     * store's lock when it puts, so the output cannot slip in between. */
    if (tsr_strmap_get(w->pending, key, len, &value)) {
      atomic_store(&((tsr_wtask *)(uintptr_t)value)->cancelled, true);
      tsr_strmap_del(w->pending, key, len);
    }
    dropped += tsr_wstore_del(w->store, key);
    /* the scheduler forgot it here: its moves would be stale */
    if (tsr_wstore_tiers(w->store) != NULL) tsr_tiers_forget_moves(tsr_wstore_tiers(w->store), key);
  }
  TSR_DEBUG("free: %zu keys, %zu chunks dropped", n, dropped);
}

/* A worker declared dead: stop waiting on fetches from it. */
static void on_peer_gone(tsr_worker *w, const msgpack_object *map)
{
  const char *address;
  size_t len;
  tsr_errbuf err = {{0}};
  if (tsr_wire_str(map, "address", TSR_MAX_ADDR_LEN - 1, &address, &len, &err) != 0) {
    TSR_WARN("peer_gone: %s; ignored", err.text);
    return;
  }
  char copy[TSR_MAX_ADDR_LEN];
  snprintf(copy, sizeof copy, "%.*s", (int)len, address);
  TSR_DEBUG("peer_gone: %s; fetches from it are abandoned", copy);
  if (w->exec != NULL) tsr_wexec_peer_gone(w->exec, copy);
}

static void dispatch(tsr_worker *w, const char *op, const msgpack_object *map)
{
  if (strcmp(op, "heartbeat") == 0) {
    /* its arrival already counted as a sign of life */
    tsr_wmetrics_heard(w->metrics, tsr_now_ms());
  } else if (strcmp(op, "compute") == 0) {
    on_compute(w, map);
  } else if (strcmp(op, "free") == 0) {
    on_free(w, map);
  } else if (strcmp(op, "welcome") == 0) {
    on_welcome(w, map);
  } else if (strcmp(op, "error") == 0) {
    on_error(w, map);
  } else if (strcmp(op, "peers") == 0) {
    tsr_wsec_on_peers(w, map);
  } else if (strcmp(op, "peer_gone") == 0) {
    on_peer_gone(w, map);
  } else {
    char message[TSR_MAX_NAME_LEN + 32];
    snprintf(message, sizeof message, "unknown op '%s'", op);
    TSR_WARN("scheduler sent %s; ignored", message);
    tsr_report_error(w, TSR_EPROTO, message, op);
  }
}

static void handle_frame(tsr_worker *w, const void *data, size_t len)
{
  tsr_errbuf err = {{0}};
  tsr_reader rd;
  uint64_t gen = w->link_gen;
  if (tsr_reader_init(&rd, data, len, &err) != 0) {
    TSR_WARN("malformed frame from scheduler (%zu bytes): %s; skipped", len, err.text);
    tsr_report_error(w, TSR_EPROTO, err.text, NULL);
    tsr_reader_done(&rd);
    return;
  }
  for (;;) {
    const msgpack_object *map;
    char op[TSR_MAX_NAME_LEN + 1];
    int rc = tsr_reader_next(&rd, &map, op, &err);
    if (rc == 0) break;
    if (rc < 0) {
      TSR_WARN("malformed message from scheduler: %s; skipped", err.text);
      tsr_report_error(w, TSR_EPROTO, err.text, NULL);
      continue;
    }
    dispatch(w, op, map);
    if (w->link_gen != gen || w->stopping) break;
  }
  tsr_reader_done(&rd);
}

void tsr_link_recv(tsr_worker *w)
{
  uint64_t gen = w->link_gen;
  tsr_zmtp_msg m;
  while (w->sched != NULL && w->link_gen == gen && !w->stopping && tsr_zmtp_recv(w->sched, &m) == 1) {
    w->last_heard_ms = tsr_now_ms();
    tsr_rt_stamp("w.recv");
    if (m.nframes != 1 || m.truncated) {
      TSR_WARN("scheduler sent a message of %d frames (expected one); skipped", m.nframes);
      tsr_report_error(w, TSR_EPROTO, "a control message must be one frame", NULL);
    } else {
      handle_frame(w, m.data[0], m.len[0]);
    }
    tsr_zmtp_msg_close(&m);
  }
}

/* ---------- completions ---------- */

void tsr_worker_complete(tsr_worker *w, tsr_wtask *task)
{
  bool current = task->epoch == tsr_wstore_epoch(w->store) && w->link == TSR_LINK_READY;
  if (current) {
    uint64_t value;
    size_t len = strlen(task->key);
    if (tsr_strmap_get(w->pending, task->key, len, &value) && value == (uint64_t)(uintptr_t)task)
      tsr_strmap_del(w->pending, task->key, len);
    /* A replica is kept while some task queued here still reads it. */
    for (size_t i = 0; i < task->n_inputs; i++) {
      count_need(w->needs, task->inputs[i].key, -1);
      uint64_t n;
      if (!tsr_strmap_get(w->needs, task->inputs[i].key, strlen(task->inputs[i].key), &n))
        tsr_wstore_del_replica(w->store, task->inputs[i].key);
    }
  }
  if (current && !atomic_load(&task->cancelled)) {
    tsr_wmetrics_task(w->metrics, task);
    if (task->status == TSR_WTASK_DONE) {
      w->tasks_done++;
      TSR_DEBUG("task %s (id %llu): done in %llu us", task->key, (unsigned long long)task->id,
                (unsigned long long)task->duration_us);
    } else if (task->status == TSR_WTASK_ERRED) {
      TSR_WARN("task %s (id %llu) erred: %s", task->key, (unsigned long long)task->id,
               task->message ? task->message : "(no message)");
    }
    /* Moves before the report that follows them, so the scheduler never
     * applies a drop to a result made after it; the moves of this task's
     * own output go after its task_done. */
    tsr_report_moves(w, task->status == TSR_WTASK_DONE ? task->key : NULL);
    tsr_report_task(w, task);
  }
  tsr_wtask_free(&task);
}
