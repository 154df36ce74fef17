/* One ZMTP connection: greeting, the mechanism's handshake, then frames
 * in and out, on a non-blocking fd.
 *
 * Input lands in a buffer and is parsed in place; a frame of BIG_FRAME
 * bytes or more is read straight into a buffer of its own, which becomes
 * the message's frame without a copy (a 3 MB submit part). Output is
 * written at once when nothing is queued before it (the common case: one
 * sendmsg of header and body on the sender's thread); what the kernel does
 * not take is queued and written when the fd is writable again. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "zmtp_int.h"

#define IN_CHUNK 65536
#define BIG_FRAME 65536
#define READ_BUDGET (1u << 20)   /* bytes read from one connection per round: fairness */
#define MAX_IOV 64
#define HANDSHAKE_FRAME_MAX 4096  /* the largest command before READY (an INITIATE is ~300 bytes) */

zmtp_conn *zmtp_conn_new(tsr_zmtp *s, int fd, conn_state state, const char *peer_address)
{
  zmtp_conn *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->fd = fd;
  c->state = state;
  c->deadline_ms = tsr_now_ms() + s->handshake_ms;
  snprintf(c->peer_address, sizeof c->peer_address, "%s", peer_address);
  s->handshaking++;
  return c;
}

static void free_out(zmtp_conn *c)
{
  for (out_buf *b = c->out_head, *next; b != NULL; b = next) {
    next = b->next;
    free(b->data);
    free(b);
  }
  c->out_head = c->out_tail = NULL;
}

static void free_cur(zmtp_conn *c)
{
  if (c->cur_open) tsr_zmtp_msg_close(&c->cur);
  c->cur_open = false;
}

void zmtp_conn_free(zmtp_conn *c)
{
  if (c == NULL) return;
  free_out(c);
  free_cur(c);
  free(c->in);
  free(c->big);
  free(c->curve);
  free(c);
}

void zmtp_conn_kill(tsr_zmtp *s, zmtp_conn *c, const char *why)
{
  if (c->state == CONN_DEAD) return;
  bool was_ready = c->state == CONN_READY;
  if (!was_ready) s->handshaking--;
  zmtp_log(s, TSR_LOG_DEBUG, "%s: connection %s closed: %s", s->what, c->peer_address, why);
  close(c->fd);   /* also leaves the epoll set */
  c->fd = -1;
  c->state = CONN_DEAD;
  free_out(c);
  free_cur(c);
  zmtp_sock_on_dead(s, c);
  c->next_dead = s->dead;
  s->dead = c;
}

void zmtp_refuse(tsr_zmtp *s, zmtp_conn *c, const char *why)
{
  s->refusals++;
  if (s->keys.on)
    zmtp_log(s, TSR_LOG_WARN, "%s: refused a connection without a valid CURVE handshake: %s (from %s)", s->what, why, c->peer_address);
  else
    zmtp_log(s, TSR_LOG_WARN, "%s: refused a connection from %s: %s", s->what, c->peer_address, why);
  zmtp_conn_kill(s, c, why);
}

/* ---------- output ---------- */

/* Writes queued output until the kernel stops taking it. */
static void write_queued(tsr_zmtp *s, zmtp_conn *c)
{
  while (c->out_head != NULL) {
    struct iovec iov[MAX_IOV];
    int n = 0;
    for (out_buf *b = c->out_head; b != NULL && n < MAX_IOV; b = b->next, n++)
      iov[n] = (struct iovec){b->data + b->off, b->len - b->off};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) zmtp_conn_kill(s, c, strerror(errno));
      break;
    }
    while (sent > 0) {
      out_buf *b = c->out_head;
      size_t left = b->len - b->off;
      if ((size_t)sent < left) {
        b->off += (size_t)sent;
        break;
      }
      sent -= (ssize_t)left;
      c->out_head = b->next;
      if (c->out_head == NULL) c->out_tail = NULL;
      free(b->data);
      free(b);
    }
  }
  if (c->state != CONN_DEAD && (c->out_head != NULL) != c->want_out) zmtp_epoll_set(s, c, c->out_head != NULL);
}

void zmtp_conn_on_writable(tsr_zmtp *s, zmtp_conn *c) { write_queued(s, c); }

/* Appends data[off..len) to the queue: taken when owned, else copied. */
static int enqueue(zmtp_conn *c, uint8_t *data, size_t len, size_t off, bool owned)
{
  out_buf *b = malloc(sizeof *b);
  uint8_t *copy = owned ? data : malloc(len - off ? len - off : 1);
  if (b == NULL || copy == NULL) {
    free(b);
    if (copy != data) free(copy);
    if (owned) free(data);
    return -1;
  }
  if (!owned) {
    memcpy(copy, data + off, len - off);
    len -= off, off = 0;
  }
  *b = (out_buf){NULL, copy, len, off};
  if (c->out_tail != NULL) c->out_tail->next = b;
  else c->out_head = b;
  c->out_tail = b;
  return 0;
}

/* Sends header + body: at once when nothing is queued, the rest queued. */
static int send_parts(tsr_zmtp *s, zmtp_conn *c, const uint8_t *hdr, size_t hdr_len, uint8_t *body, size_t len,
                      bool owned)
{
  size_t sent = 0;
  if (c->out_head == NULL && c->state != CONN_CONNECTING) {
    struct iovec iov[2] = {{(void *)hdr, hdr_len}, {body, len}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = len > 0 ? 2 : 1};
    ssize_t n;
    do n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      if (owned) free(body);
      zmtp_conn_kill(s, c, strerror(errno));
      return 0;   /* the connection is gone: as a frame lost on the wire */
    }
    sent = n > 0 ? (size_t)n : 0;
  }
  int rc = 0;
  if (sent < hdr_len) rc = enqueue(c, (uint8_t *)hdr, hdr_len, sent, false);
  size_t body_sent = sent > hdr_len ? sent - hdr_len : 0;
  if (rc == 0 && body_sent < len) rc = enqueue(c, body, len, body_sent, owned);
  else if (owned) free(body);
  if (c->out_head != NULL && !c->want_out) zmtp_epoll_set(s, c, true);
  return rc;
}

static int send_frame(tsr_zmtp *s, zmtp_conn *c, uint8_t flags, const void *data, size_t len, bool owned)
{
  uint8_t hdr[ZMTP_MAX_HEADER];
  size_t hdr_len = zmtp_header(hdr, flags, len);
  return send_parts(s, c, hdr, hdr_len, (uint8_t *)data, len, owned);
}

static int send_command(tsr_zmtp *s, zmtp_conn *c, const uint8_t *body, size_t len)
{
  return send_frame(s, c, ZMTP_FLAG_COMMAND, body, len, false);
}

int zmtp_conn_send(tsr_zmtp *s, zmtp_conn *c, const void *data, size_t len, bool owned)
{
  if (c->curve == NULL) return send_frame(s, c, 0, data, len, owned);
  /* CURVE: one buffer, header space in front of the box. libzmq sends a
   * MESSAGE as a plain frame (no command flag); so do we. */
  size_t box_len = ZMTP_CURVE_BOX_EXTRA + len;
  uint8_t *buf = malloc(ZMTP_MAX_HEADER + box_len), hdr[ZMTP_MAX_HEADER];
  if (buf == NULL) {
    if (owned) free((void *)data);
    return -1;
  }
  zmtp_curve_seal(c->curve, s->router, 0, data, len, buf + ZMTP_MAX_HEADER);
  if (owned) free((void *)data);
  size_t hdr_len = zmtp_header(hdr, 0, box_len);
  memcpy(buf + ZMTP_MAX_HEADER - hdr_len, hdr, hdr_len);
  /* header and box leave as one owned buffer */
  int rc = 0;
  if (c->out_head == NULL) {
    uint8_t *start = buf + ZMTP_MAX_HEADER - hdr_len;
    memmove(buf, start, hdr_len + box_len);
    rc = send_parts(s, c, buf, 0, buf, hdr_len + box_len, true);
  } else {
    rc = enqueue(c, buf, ZMTP_MAX_HEADER + box_len, ZMTP_MAX_HEADER - hdr_len, true);
  }
  return rc;
}

/* ---------- the handshake ---------- */

void zmtp_conn_start(tsr_zmtp *s, zmtp_conn *c)
{
  uint8_t greeting[ZMTP_GREETING_LEN];
  zmtp_greeting(greeting, s->keys.on ? MECH_CURVE : MECH_NULL, s->router);
  c->state = CONN_GREETING;
  send_parts(s, c, greeting, ZMTP_GREETING_LEN, NULL, 0, false);
}

static void send_ready_null(tsr_zmtp *s, zmtp_conn *c)
{
  uint8_t body[128];
  memcpy(body, "\x05READY", 6);
  size_t len = 6 + zmtp_metadata(body + 6, sizeof body - 6, s->router);
  send_command(s, c, body, len);
}

static void on_greeting(tsr_zmtp *s, zmtp_conn *c, const uint8_t *in)
{
  zmtp_mech mech;
  const char *why = NULL;
  if (zmtp_greeting_parse(in, &mech, &why) != 0) return zmtp_refuse(s, c, why);
  if (mech == MECH_NULL && s->keys.on) return zmtp_refuse(s, c, "the peer has no CURVE keys (plaintext)");
  if (mech == MECH_CURVE && !s->keys.on) return zmtp_refuse(s, c, "the peer wants CURVE and this socket has no keys");
  c->state = CONN_HANDSHAKE;
  if (!s->keys.on) return send_ready_null(s, c);
  c->curve = malloc(sizeof *c->curve);
  if (c->curve == NULL) return zmtp_conn_kill(s, c, "out of memory");
  zmtp_curve_start(c->curve);
  c->step = s->router ? CV_EXPECT_HELLO : CV_EXPECT_WELCOME;
  if (!s->router) {
    uint8_t hello[256];
    size_t len = zmtp_curve_hello(c->curve, &s->keys, hello);
    if (len == 0) return zmtp_conn_kill(s, c, "cannot make a HELLO");
    send_command(s, c, hello, len);
  }
}

/* The peer's metadata is read: the connection carries messages now. */
static void become_ready(tsr_zmtp *s, zmtp_conn *c, const uint8_t *meta, size_t meta_len)
{
  const uint8_t *id;
  size_t id_len;
  const char *why = NULL;
  if (zmtp_metadata_parse(meta, meta_len, s->router, &id, &id_len, &why) != 0) return zmtp_refuse(s, c, why);
  s->handshaking--;
  c->state = CONN_READY;
  zmtp_sock_on_ready(s, c, id, id_len);
}

static void on_error_command(tsr_zmtp *s, zmtp_conn *c, const uint8_t *body, size_t len)
{
  char why[300];
  size_t reason_len = len > 7 ? body[6] : 0;
  if (reason_len > len - 7) reason_len = len - 7;
  snprintf(why, sizeof why, "the peer refused the handshake: %.*s", (int)reason_len, (const char *)body + 7);
  zmtp_refuse(s, c, why);
}

static void curve_router_step(tsr_zmtp *s, zmtp_conn *c, uint8_t *body, size_t len)
{
  const char *why = NULL;
  if (c->step == CV_EXPECT_HELLO) {
    uint8_t welcome[256];
    size_t n;
    if (zmtp_curve_on_hello(c->curve, &s->keys, body, len, &why) != 0) return zmtp_refuse(s, c, why);
    if ((n = zmtp_curve_welcome(c->curve, &s->keys, welcome)) == 0) return zmtp_conn_kill(s, c, "cannot make a WELCOME");
    c->step = CV_EXPECT_INITIATE;
    send_command(s, c, welcome, n);
    return;
  }
  const uint8_t *meta;
  size_t meta_len;
  if (zmtp_curve_on_initiate(c->curve, body, len, &meta, &meta_len, &why) != 0) return zmtp_refuse(s, c, why);
  tsr_zmtp_z85_encode(c->curve->client_key, c->key);
  if (!zmtp_sock_admit(s, c)) {
    send_command(s, c, (const uint8_t *)"\x05" "ERROR\x03" "400", 10);
    s->refusals++;
    return zmtp_conn_kill(s, c, "key refused");
  }
  uint8_t ready[128 + 32], mine[128];
  size_t mine_len = zmtp_metadata(mine, sizeof mine, true);
  size_t n = zmtp_curve_ready(c->curve, mine, mine_len, ready, sizeof ready);
  send_command(s, c, ready, n);
  become_ready(s, c, meta, meta_len);
}

static void curve_dealer_step(tsr_zmtp *s, zmtp_conn *c, uint8_t *body, size_t len)
{
  const char *why = NULL;
  if (c->step == CV_EXPECT_WELCOME) {
    uint8_t initiate[1024], meta[128];
    if (zmtp_curve_on_welcome(c->curve, &s->keys, body, len, &why) != 0) return zmtp_refuse(s, c, why);
    size_t meta_len = zmtp_metadata(meta, sizeof meta, false);
    size_t n = zmtp_curve_initiate(c->curve, &s->keys, meta, meta_len, initiate, sizeof initiate);
    if (n == 0) return zmtp_conn_kill(s, c, "cannot make an INITIATE");
    c->step = CV_EXPECT_READY;
    send_command(s, c, initiate, n);
    return;
  }
  const uint8_t *meta;
  size_t meta_len;
  if (zmtp_curve_on_ready(c->curve, body, len, &meta, &meta_len, &why) != 0) return zmtp_refuse(s, c, why);
  become_ready(s, c, meta, meta_len);
}

static void on_handshake_frame(tsr_zmtp *s, zmtp_conn *c, uint8_t flags, uint8_t *body, size_t len)
{
  if ((flags & ZMTP_FLAG_COMMAND) == 0) return zmtp_refuse(s, c, "a message before the handshake was done");
  if (zmtp_is_command(body, len, "ERROR")) return on_error_command(s, c, body, len);
  if (c->curve != NULL) return s->router ? curve_router_step(s, c, body, len) : curve_dealer_step(s, c, body, len);
  if (!zmtp_is_command(body, len, "READY")) return zmtp_refuse(s, c, "an unexpected command in the handshake");
  become_ready(s, c, body + 6, len - 6);
}

/* ---------- messages ---------- */

/* A data frame's bytes, owned by the message from here on. */
static void add_frame(tsr_zmtp *s, zmtp_conn *c, void *data, size_t len, bool more)
{
  tsr_zmtp_msg *m = &c->cur;
  if (!c->cur_open) {
    memset(m, 0, sizeof *m);
    c->cur_open = true;
  }
  if (m->nframes < TSR_ZMTP_MAX_FRAMES) {
    m->data[m->nframes] = data;
    m->len[m->nframes++] = len;
  } else {
    free(data);
    m->truncated = true;
  }
  if (more) return;
  c->cur_open = false;
  zmtp_sock_deliver(s, c, m);
}

/* A copy of len bytes (malloc(0) may return NULL; a frame never does). */
static void *dup_bytes(const void *p, size_t len)
{
  void *copy = malloc(len ? len : 1);
  if (copy != NULL && len > 0) memcpy(copy, p, len);
  return copy;
}

static void on_ping(tsr_zmtp *s, zmtp_conn *c, const uint8_t *body, size_t len)
{
  if (c->curve != NULL || len < 7) return;   /* ZMTP 3.1 heartbeats: answered in plaintext only */
  size_t ctx_len = len - 7 > 16 ? 16 : len - 7;
  uint8_t pong[5 + 16];
  memcpy(pong, "\x04PONG", 5);
  memcpy(pong + 5, body + 7, ctx_len);
  send_command(s, c, pong, 5 + ctx_len);
}

/* A frame of the READY state; owned is its own buffer (a big frame) or
 * NULL (body lies in the input buffer). */
static void on_message_frame(tsr_zmtp *s, zmtp_conn *c, uint8_t flags, uint8_t *body, size_t len, uint8_t *owned)
{
  if (c->curve != NULL) {
    const char *why = NULL;
    uint8_t *payload;
    size_t payload_len;
    if (zmtp_curve_open(c->curve, s->router, body, len, &flags, &payload, &payload_len, &why) != 0) {
      free(owned);
      return zmtp_refuse(s, c, why);
    }
    flags = (uint8_t)((flags & 1 ? ZMTP_FLAG_MORE : 0) | (flags & 2 ? ZMTP_FLAG_COMMAND : 0));
    if (owned != NULL) memmove(owned, payload, payload_len);
    body = owned != NULL ? owned : payload, len = payload_len;
  }
  if (flags & ZMTP_FLAG_COMMAND) {
    if (zmtp_is_command(body, len, "PING")) on_ping(s, c, body, len);
    free(owned);   /* other commands (PONG, SUBSCRIBE...) mean nothing to these sockets */
    return;
  }
  void *data = owned != NULL ? owned : dup_bytes(body, len);
  if (data == NULL) return zmtp_conn_kill(s, c, "out of memory");
  add_frame(s, c, data, len, (flags & ZMTP_FLAG_MORE) != 0);
}

static void on_frame(tsr_zmtp *s, zmtp_conn *c, uint8_t flags, uint8_t *body, size_t len, uint8_t *owned)
{
  if (c->state == CONN_READY) return on_message_frame(s, c, flags, body, len, owned);
  on_handshake_frame(s, c, flags, body, len);
  free(owned);
}

/* ---------- input ---------- */

/* Room for at least want more bytes after the unparsed ones. */
static int make_room(zmtp_conn *c, size_t want)
{
  if (c->in_off > 0 && (c->in_off == c->in_len || c->in_cap - c->in_len < want)) {
    memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
    c->in_len -= c->in_off;
    c->in_off = 0;
  }
  if (c->in_cap - c->in_len >= want) return 0;
  size_t cap = c->in_cap ? c->in_cap : IN_CHUNK;
  while (cap - c->in_len < want) cap *= 2;
  uint8_t *grown = realloc(c->in, cap);
  if (grown == NULL) return -1;
  c->in = grown;
  c->in_cap = cap;
  return 0;
}

/* Parses what the input buffer holds. */
static void parse(tsr_zmtp *s, zmtp_conn *c)
{
  while (c->state != CONN_DEAD && c->big == NULL) {
    uint8_t *p = c->in + c->in_off;
    size_t avail = c->in_len - c->in_off;
    if (c->state == CONN_GREETING) {
      if (avail < ZMTP_GREETING_LEN) return;
      c->in_off += ZMTP_GREETING_LEN;
      on_greeting(s, c, p);
      continue;
    }
    uint8_t flags;
    uint64_t len;
    size_t hdr;
    if (zmtp_header_parse(p, avail, &flags, &len, &hdr) == 0) return;
    if (c->state != CONN_READY && len > HANDSHAKE_FRAME_MAX)
      return zmtp_refuse(s, c, "a handshake command over 4 KiB");
    if (len > s->max_frame) {
      char why[128];
      snprintf(why, sizeof why, "a frame of %llu bytes, over the limit of %zu", (unsigned long long)len, s->max_frame);
      zmtp_log(s, TSR_LOG_WARN, "%s: closed the connection from %s: %s", s->what, c->peer_address, why);
      return zmtp_conn_kill(s, c, why);
    }
    if (len <= avail - hdr) {
      c->in_off += hdr + len;
      on_frame(s, c, flags, p + hdr, len, NULL);
      continue;
    }
    if (len < BIG_FRAME || c->state != CONN_READY) {
      if (make_room(c, hdr + len - avail) != 0) return zmtp_conn_kill(s, c, "out of memory");
      return;
    }
    /* a large frame: its own buffer, filled by the reads that follow */
    if ((c->big = malloc(len)) == NULL) return zmtp_conn_kill(s, c, "out of memory");
    c->big_len = len, c->big_flags = flags;
    c->big_got = avail - hdr;
    memcpy(c->big, p + hdr, c->big_got);
    c->in_off = c->in_len;
  }
}

/* One read into the big frame or the input buffer: bytes read, 0 at the
 * end of the stream, -1 with errno. */
static ssize_t read_some(zmtp_conn *c)
{
  if (c->big != NULL) return read(c->fd, c->big + c->big_got, c->big_len - c->big_got);
  if (make_room(c, 4096) != 0) {
    errno = ENOMEM;
    return -1;
  }
  return read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
}

/* The end of the stream. Before READY it counts as a refusal on a CURVE
 * socket: libzmq hangs up without a word on seeing a greeting whose
 * mechanism is not its own (a peer without keys). */
static void hung_up(tsr_zmtp *s, zmtp_conn *c)
{
  if (c->state != CONN_READY && s->keys.on)
    return zmtp_refuse(s, c, c->state == CONN_GREETING ? "the peer hung up on our greeting (it has no CURVE keys?)"
                                                       : "the peer hung up during the handshake");
  zmtp_conn_kill(s, c, "the peer closed the connection");
}

void zmtp_conn_on_readable(tsr_zmtp *s, zmtp_conn *c)
{
  size_t budget = READ_BUDGET;
  while (c->state != CONN_DEAD && c->state != CONN_CONNECTING && budget > 0) {
    ssize_t n = read_some(c);
    if (n == 0) return hung_up(s, c);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) zmtp_conn_kill(s, c, strerror(errno));
      return;
    }
    budget -= (size_t)n < budget ? (size_t)n : budget;
    if (c->big != NULL) {
      c->big_got += (size_t)n;
      if (c->big_got < c->big_len) continue;
      uint8_t *frame = c->big;
      c->big = NULL;
      on_frame(s, c, c->big_flags, frame, c->big_len, frame);
    } else {
      c->in_len += (size_t)n;
    }
    parse(s, c);
  }
}
