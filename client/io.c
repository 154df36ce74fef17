/* The client's I/O thread: reads the socket to the scheduler, keeps time,
 * and replaces the socket on a reconnect. (API calls write their frames
 * on their own threads: client_enqueue_locked.)
 *
 * Each turn it (1) sends what was queued while there was no socket, (2)
 * polls the socket and the wake eventfd until the next heartbeat is due,
 * (3) handles every frame that arrived — all maps of one frame under one
 * hold of the mutex, then one broadcast — and (4) keeps time: a heartbeat
 * when nothing else was sent for heartbeat_ms, and session loss when the
 * scheduler has been silent for the heartbeat timeout.
 *
 * On loss every waiter gets TSR_ECONN (the session's epoch moves on), the
 * socket is replaced by a fresh one and `hello` is sent again; a later
 * `welcome` starts a new session for new submissions. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/rttrace.h"
#include "zmtp/zmtp.h"
#include "internal.h"

static void send_heartbeat_locked(tsr_client *c)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "heartbeat", 1);
  client_enqueue_locked(c, client_frame_from(&wb));
  tsr_wbuf_free(&wb);
}

void client_session_lost_locked(tsr_client *c, int rc, const char *why)
{
  if (c->state == CONN_CLOSED) return;
  c->epoch++;
  c->state = CONN_LOST;
  /* Frames still queued belong to the lost session: a submit whose caller
   * now gets TSR_ECONN must not reach the next one. */
  client_free_chain(c->out_head);
  c->out_head = c->out_tail = NULL;
  snprintf(c->lost_msg, sizeof c->lost_msg, "%s", why);
  for (pending_submit *p = c->submits; p != NULL; p = p->next) {
    p->done = true;
    p->rc = rc;
    snprintf(p->message, sizeof p->message, "lost the scheduler at %s: %s", c->address, why);
  }
  for (pending_status *p = c->statuses; p != NULL; p = p->next) {
    p->done = true;
    p->rc = rc;
    snprintf(p->message, sizeof p->message, "lost the scheduler at %s: %s", c->address, why);
  }
  pthread_cond_broadcast(&c->cv);
}

/* ---------- handlers (caller holds mu) ---------- */

static int on_welcome(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t proto, id, hb, incarnation;
  bool resumed = false, journal = false;
  int rc = tsr_wire_uint(map, "proto", &proto, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "id", 0, &id, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "heartbeat_ms", (uint64_t)c->opt_heartbeat_ms, &hb, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "incarnation", 0, &incarnation, err);
  if (rc == 0) rc = tsr_wire_opt_bool(map, "resumed", false, &resumed, err);
  if (rc == 0) rc = tsr_wire_opt_bool(map, "journal", false, &journal, err);
  if (rc != 0) return rc;
  if (proto != TSR_PROTOCOL_VERSION) {
    c->open_rc = TSR_EVERSION;
    snprintf(c->open_msg, sizeof c->open_msg, "scheduler speaks protocol %llu, this client %d",
             (unsigned long long)proto, TSR_PROTOCOL_VERSION);
    if (c->state == CONN_CONNECTING) c->state = CONN_LOST;
    return 0;
  }
  if (hb == 0 || hb > 600000) hb = (uint64_t)c->opt_heartbeat_ms;
  bool again = c->state == CONN_LOST;
  if (again) client_welcomed_again_locked(c, resumed, incarnation, journal);
  else c->incarnation = incarnation;
  c->peer_id = id;
  c->hb_ms = (uint32_t)hb;
  c->hb_timeout_ms = c->env_timeout_ms > 0 ? (uint32_t)c->env_timeout_ms : (uint32_t)(10 * hb);
  c->state = CONN_UP;
  if (again) client_log(c, TSR_LOG_INFO, "reconnected to %s (peer %llu)", c->address, (unsigned long long)id);
  return 0;
}

static pending_submit *find_submit(tsr_client *c, uint64_t graph)
{
  for (pending_submit *p = c->submits; p != NULL; p = p->next)
    if (p->graph == graph && !p->done) return p;
  return NULL;
}

static int on_submitted(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t graph, tasks;
  int rc = tsr_wire_uint(map, "graph", &graph, err);
  if (rc == 0) rc = tsr_wire_opt_uint(map, "tasks", 0, &tasks, err);
  if (rc != 0) return rc;
  pending_submit *p = find_submit(c, graph);
  if (p == NULL) return tsr_fail(err, TSR_EPROTO, "'submitted' for unknown graph %llu", (unsigned long long)graph);
  p->done = true;
  p->rc = 0;
  p->tasks = tasks;
  return 0;
}

/* Codes from the wire are trusted only when they are ours. */
static int sane_code(int64_t code)
{
  return code < 0 && code >= TSR_EINTERNAL ? (int)code : TSR_EPROTO;
}

static int on_submit_error(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  uint64_t graph;
  int64_t code;
  const char *text = "";
  size_t len = 0;
  int rc = tsr_wire_uint(map, "graph", &graph, err);
  if (rc == 0) rc = tsr_wire_int(map, "code", &code, err);
  if (rc == 0) rc = tsr_wire_str(map, "message", TSR_MAX_TEXT_LEN, &text, &len, err);
  if (rc != 0) return rc;
  pending_submit *p = find_submit(c, graph);
  if (p == NULL) return tsr_fail(err, TSR_EPROTO, "'submit_error' for unknown graph %llu", (unsigned long long)graph);
  p->done = true;
  p->rc = sane_code(code);
  snprintf(p->message, sizeof p->message, "submit rejected: %.*s", (int)len, text);
  return 0;
}

/* `error` refers to our previous message of op `ref`: fail the oldest
 * waiter for that kind of request; anything else is only logged. */
static int on_error(tsr_client *c, const msgpack_object *map, tsr_errbuf *err)
{
  int64_t code = TSR_EPROTO;
  const char *text = "", *ref = "";
  size_t len = 0, ref_len = 0;
  int rc = tsr_wire_opt_int(map, "code", TSR_EPROTO, &code, err);
  if (rc == 0) rc = tsr_wire_str(map, "message", TSR_MAX_TEXT_LEN, &text, &len, err);
  if (rc != 0) return rc;
  if (tsr_wire_field(map, "ref") != NULL) tsr_wire_str(map, "ref", TSR_MAX_NAME_LEN, &ref, &ref_len, NULL);
  char msg[TSR_ERRMSG_LEN];
  snprintf(msg, sizeof msg, "scheduler error: %.*s", (int)len, text);
  bool is = ref_len > 0;
  if (c->state == CONN_CONNECTING) {
    c->open_rc = sane_code(code);
    snprintf(c->open_msg, sizeof c->open_msg, "%s", msg);
    c->state = CONN_LOST;
  } else if ((code == TSR_ENOTFOUND && len == 12 && memcmp(text, "unknown peer", 12) == 0) ||
             (code == TSR_EPROTO && len == 15 && memcmp(text, "say hello first", 15) == 0)) {
    /* A restarted scheduler (or one that timed us out) does not know us. */
    if (c->state == CONN_UP) client_session_suspend_locked(c, "the scheduler no longer knows this client");
    c->rehello = true;
  } else if (is && ref_len == 6 && memcmp(ref, "submit", 6) == 0 && c->submits != NULL) {
    pending_submit *p = c->submits;
    while (p->next != NULL) p = p->next;   /* the oldest is at the tail */
    p->done = true, p->rc = sane_code(code);
    snprintf(p->message, sizeof p->message, "%s", msg);
  } else if (is && ref_len == 6 && memcmp(ref, "status", 6) == 0 && c->statuses != NULL) {
    pending_status *p = c->statuses;
    while (p->next != NULL) p = p->next;
    p->done = true, p->rc = sane_code(code);
    snprintf(p->message, sizeof p->message, "%s", msg);
  } else {
    client_log(c, TSR_LOG_WARN, "%s (code %lld, about '%.*s')", msg, (long long)code, (int)ref_len, ref);
  }
  return 0;
}

static int dispatch(tsr_client *c, const char *op, const msgpack_object *map, tsr_errbuf *err)
{
  if (strcmp(op, "welcome") == 0) return on_welcome(c, map, err);
  if (strcmp(op, "error") == 0) return on_error(c, map, err);
  if (c->state != CONN_UP) return 0;   /* leftovers of a lost session */
  if (strcmp(op, "heartbeat") == 0) return 0;
  if (strcmp(op, "key_done") == 0) {
    tsr_rt_stamp("c.key_done");
    return keys_on_done_locked(c, map, err);
  }
  if (strcmp(op, "key_erred") == 0) return keys_on_erred_locked(c, map, err);
  if (strcmp(op, "key_lost") == 0) return keys_on_lost_locked(c, map, err);
  if (strcmp(op, "submitted") == 0) {
    tsr_rt_stamp("c.submitted");
    return on_submitted(c, map, err);
  }
  if (strcmp(op, "submit_error") == 0) return on_submit_error(c, map, err);
  if (strcmp(op, "progress") == 0) return progress_on_message_locked(c, map, err);
  if (strcmp(op, "status_reply") == 0) return cluster_on_status_reply_locked(c, map, err);
  return tsr_fail(err, TSR_EPROTO, "unknown op '%s'", op);
}

/* Handles every map of one frame; a malformed map is logged and skipped.
 * Caller holds mu. */
static void handle_frame_locked(tsr_client *c, const void *data, size_t len)
{
  tsr_errbuf err = {{0}};
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  int rc = tsr_reader_init(&rd, data, len, &err);
  while (rc == 0 && (rc = tsr_reader_next(&rd, &map, op, &err)) == 1) {
    if (dispatch(c, op, map, &err) != 0) {
      client_log(c, TSR_LOG_WARN, "ignored '%s' from the scheduler: %s", op, err.text);
      err.text[0] = '\0';
    }
    rc = 0;
  }
  if (rc < 0) client_log(c, TSR_LOG_WARN, "ignored a malformed frame from the scheduler: %s", err.text);
  tsr_reader_done(&rd);
}

int client_read_locked(tsr_client *c, bool io_thread)
{
  int handled = 0;
  tsr_zmtp_msg m;
  while (c->sock != NULL && tsr_zmtp_recv(c->sock, &m) == 1) {
    c->heard_ms = tsr_now_ms();
    if (m.nframes == 1 && !m.truncated)
      handle_frame_locked(c, m.data[0], m.len[0]);
    else
      client_log(c, TSR_LOG_WARN, "ignored a %d-frame message from the scheduler", m.nframes);
    tsr_zmtp_msg_close(&m);
    handled++;
    c->frames_handled++;
  }
  if (handled == 0) return 0;
  pthread_cond_broadcast(&c->cv);
  /* progress callbacks run on the I/O thread */
  if (!io_thread && c->npending > 0) client_wake_io_locked(c);
  return handled;
}

/* A fresh socket and a new hello: the old socket may hold queued messages
 * of the lost session, which the next scheduler must not see. */
static void reconnect(tsr_client *c)
{
  out_frame *hello = client_hello_frame(c);
  pthread_mutex_lock(&c->mu);
  tsr_zmtp_close(&c->sock);
  c->heard_ms = tsr_now_ms();
  if (client_socket_open(c) != 0) {
    client_log(c, TSR_LOG_WARN, "reconnect to %s failed: %s", c->address, tsr_errmsg());
    client_free_chain(hello);
  } else {
    client_log(c, TSR_LOG_INFO, "saying hello again to %s", c->address);
    client_send_chain_locked(c, hello);
  }
  pthread_mutex_unlock(&c->mu);
}

static void keep_time(tsr_client *c)
{
  pthread_mutex_lock(&c->mu);
  uint64_t now = tsr_now_ms();
  conn_state state = c->state;
  uint32_t hb = c->hb_ms, timeout = c->hb_timeout_ms;
  bool silent = now > c->heard_ms && now - c->heard_ms > timeout;
  if (state == CONN_UP && silent) {
    char why[128];
    snprintf(why, sizeof why, "no word from it for %u ms", timeout);
    client_session_suspend_locked(c, why);
  }
  client_reconnect_tick_locked(c, now);
  bool rehello = c->rehello;
  c->rehello = false;
  if (rehello) state = c->state;
  if (!rehello && state == CONN_UP && !silent && now - c->sent_ms >= hb) send_heartbeat_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (rehello || ((state == CONN_UP || state == CONN_LOST) && silent)) reconnect(c);
}

/* Caller holds mu. */
static int poll_timeout_locked(tsr_client *c)
{
  uint64_t hb = c->hb_ms, timeout = c->hb_timeout_ms, sent = c->sent_ms, heard = c->heard_ms;
  bool up = c->state == CONN_UP;
  uint64_t now = tsr_now_ms();
  /* heartbeats only while up; otherwise wake for the reconnect window */
  uint64_t next = up ? sent + hb : now + 100;
  if (heard + timeout + 1 < next) next = heard + timeout + 1;
  return next <= now ? 0 : (int)(next - now);
}

/* Sends what was queued while there was no socket; then what to poll:
 * the socket, unless an API thread is reading it while it waits
 * (client_wait_spin), and the wake eventfd. True when asked to stop. */
static bool next_turn(tsr_client *c, struct pollfd items[2], int *timeout_p)
{
  pthread_mutex_lock(&c->mu);
  out_frame *chain = c->sock != NULL ? c->out_head : NULL;
  if (chain != NULL) {
    c->out_head = c->out_tail = NULL;
    client_send_chain_locked(c, chain);
  }
  bool stop = c->stop;
  c->io_polls_sock = c->sock != NULL && c->spinners == 0;
  items[0] = (struct pollfd){c->io_polls_sock ? tsr_zmtp_fd(c->sock) : -1, POLLIN, 0};
  items[1] = (struct pollfd){c->wake_fd, POLLIN, 0};
  *timeout_p = poll_timeout_locked(c);
  pthread_mutex_unlock(&c->mu);
  return stop;
}

void *client_io_main(void *arg)
{
  tsr_client *c = arg;
  pthread_mutex_lock(&c->mu);
  c->heard_ms = tsr_now_ms();
  pthread_mutex_unlock(&c->mu);
  for (;;) {
    struct pollfd items[2];
    int timeout;
    if (next_turn(c, items, &timeout)) break;
    if (poll(items, 2, timeout) < 0) continue;
    tsr_rt_stamp("c.io_wake");
    if (items[1].revents & POLLIN) {
      uint64_t count;
      ssize_t ignored = read(c->wake_fd, &count, sizeof count);
      (void)ignored;
    }
    pthread_mutex_lock(&c->mu);
    client_read_locked(c, true);   /* also when only woken: a spinner may have left frames */
    pthread_mutex_unlock(&c->mu);
    progress_run_callbacks(c);   /* without mu: callbacks may call the API */
    keep_time(c);
  }
  /* Give a queued goodbye a moment to leave; never block long on a dead peer. */
  pthread_mutex_lock(&c->mu);
  int linger = c->close_linger_ms;
  pthread_mutex_unlock(&c->mu);
  if (linger > 0 && c->sock != NULL) tsr_zmtp_flush(c->sock, linger);
  return NULL;
}
