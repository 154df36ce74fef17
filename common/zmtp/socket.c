#define _GNU_SOURCE   /* accept4 */
/* Sockets: a router's listener and its table of peers, a dealer's one
 * connection and its retries; the inbox of received messages; the epoll
 * set that makes all of it one fd for the owner's poll. */
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "zmtp_int.h"

#define ROUND_EVENTS 64
#define ACCEPTS_PER_ROUND 64
#define DEFAULT_RECONNECT_MS 100
#define DEFAULT_HANDSHAKE_MS 10000
#define ZMTP_DEFAULT_MAX_FRAME ((size_t)1 << 31)   /* the protocol's ceiling (wire.h TSR_MAX_FRAME_BYTES) */

/* epoll tags of the socket's own fds (connections carry their pointer) */
static char tag_listen, tag_timer, tag_event;

void zmtp_log(tsr_zmtp *s, tsr_log_level level, const char *fmt, ...)
{
  if (s->log == NULL && level < tsr_log_get_level()) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (s->log != NULL) s->log(s->log_arg, (int)level, line);
  else tsr_log(level, "%s", line);
}

/* ---------- epoll, timer, inbox signal ---------- */

void zmtp_epoll_set(tsr_zmtp *s, zmtp_conn *c, bool want_out)
{
  struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0u), .data.ptr = c};
  epoll_ctl(s->efd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_out = want_out;
}

static int epoll_add(tsr_zmtp *s, int fd, uint32_t events, void *ptr)
{
  struct epoll_event ev = {.events = events, .data.ptr = ptr};
  return epoll_ctl(s->efd, EPOLL_CTL_ADD, fd, &ev);
}

/* The timer fires at the next retry or handshake deadline. */
static void arm_timer(tsr_zmtp *s)
{
  uint64_t next = s->retry_at_ms;
  if (s->handshaking > 0)
    for (uint32_t i = 0; i < s->nconns; i++) {
      zmtp_conn *c = s->conns[i];
      if (c->state != CONN_READY && (next == 0 || c->deadline_ms < next)) next = c->deadline_ms;
    }
  struct itimerspec its = {0};
  if (next != 0) {
    uint64_t now = tsr_now_ms(), in_ms = next > now ? next - now : 1;
    its.it_value.tv_sec = (time_t)(in_ms / 1000);
    its.it_value.tv_nsec = (long)(in_ms % 1000) * 1000000L;
  }
  timerfd_settime(s->tfd, 0, &its, NULL);
}

/* The eventfd is readable exactly while the inbox holds a message, so the
 * owner's poll wakes for messages read but not yet taken. */
static void sync_event(tsr_zmtp *s)
{
  bool want = s->inbox_head != NULL;
  if (want == s->ev_set) return;
  uint64_t one = 1;
  ssize_t n = want ? write(s->evfd, &one, sizeof one) : read(s->evfd, &one, sizeof one);
  (void)n;
  s->ev_set = want;
}

static void free_dead(tsr_zmtp *s)
{
  while (s->dead != NULL) {
    zmtp_conn *c = s->dead;
    s->dead = c->next_dead;
    zmtp_conn_free(c);
  }
}

/* ---------- the connection table ---------- */

static int table_add(tsr_zmtp *s, zmtp_conn *c)
{
  if (s->nconns == s->conns_cap) {
    uint32_t cap = s->conns_cap ? 2 * s->conns_cap : 16;
    zmtp_conn **grown = realloc(s->conns, cap * sizeof *grown);
    if (grown == NULL) return -1;
    s->conns = grown;
    s->conns_cap = cap;
  }
  c->slot = s->nconns;
  s->conns[s->nconns++] = c;
  return 0;
}

static void table_remove(tsr_zmtp *s, zmtp_conn *c)
{
  if (c->slot >= s->nconns || s->conns[c->slot] != c) return;
  zmtp_conn *last = s->conns[--s->nconns];
  s->conns[c->slot] = last;
  last->slot = c->slot;
}

/* The dealer's connection, or NULL. */
static zmtp_conn *dealer_conn(tsr_zmtp *s) { return s->nconns > 0 ? s->conns[0] : NULL; }

/* ---------- what connections tell the socket ---------- */

static void router_name_peer(tsr_zmtp *s, zmtp_conn *c, const uint8_t *announced, size_t len)
{
  /* An announced identity is kept when free; ids starting with a zero byte
   * are ours (as libzmq reserves them). */
  if (len > 0 && announced[0] != 0 && !tsr_strmap_get(s->by_id, (const char *)announced, len, NULL)) {
    memcpy(c->id, announced, len);
    c->id_len = len;
    return;
  }
  do {
    uint32_t n = s->next_id++;
    c->id[0] = 0;
    for (int i = 0; i < 4; i++) c->id[1 + i] = (uint8_t)(n >> (24 - 8 * i));
    c->id_len = 5;
  } while (tsr_strmap_get(s->by_id, (const char *)c->id, c->id_len, NULL));
}

static void dealer_flush_pending(tsr_zmtp *s, zmtp_conn *c)
{
  while (s->pending_head != NULL && c->state == CONN_READY) {
    pending_frame *p = s->pending_head;
    s->pending_head = p->next;
    if (s->pending_head == NULL) s->pending_tail = NULL;
    zmtp_conn_send(s, c, p->data, p->len, true);
    free(p);
  }
}

void zmtp_sock_on_ready(tsr_zmtp *s, zmtp_conn *c, const uint8_t *announced_id, size_t id_len)
{
  if (!s->router) {
    s->backoff_ms = s->reconnect_ms;
    dealer_flush_pending(s, c);
    return;
  }
  router_name_peer(s, c, announced_id, id_len);
  if (tsr_strmap_put(s->by_id, (const char *)c->id, c->id_len, (uint64_t)(uintptr_t)c) != 0)
    return zmtp_conn_kill(s, c, "out of memory");
  s->ready_peers++;
}

void zmtp_sock_on_dead(tsr_zmtp *s, zmtp_conn *c)
{
  if (s->router && c->id_len > 0) {
    uint64_t held;
    if (tsr_strmap_get(s->by_id, (const char *)c->id, c->id_len, &held) && held == (uint64_t)(uintptr_t)c) {
      tsr_strmap_del(s->by_id, (const char *)c->id, c->id_len);
      s->ready_peers--;
    }
  }
  table_remove(s, c);
  if (!s->router) {
    s->retry_at_ms = tsr_now_ms() + s->backoff_ms;
    s->backoff_ms = s->backoff_ms * 2 > s->reconnect_max_ms ? s->reconnect_max_ms : s->backoff_ms * 2;
    arm_timer(s);
  }
}

bool zmtp_sock_admit(tsr_zmtp *s, zmtp_conn *c)
{
  return s->admit == NULL || s->admit(s->admit_arg, c->key, c->peer_address);
}

void zmtp_sock_deliver(tsr_zmtp *s, zmtp_conn *c, tsr_zmtp_msg *msg)
{
  msg_node *node = malloc(sizeof *node);
  if (node == NULL) {
    tsr_zmtp_msg_close(msg);
    return;
  }
  node->next = NULL;
  node->msg = *msg;
  memcpy(node->msg.id, c->id, c->id_len);
  node->msg.id_len = c->id_len;
  memcpy(node->msg.key, c->key, sizeof c->key);
  if (s->inbox_tail != NULL) s->inbox_tail->next = node;
  else s->inbox_head = node;
  s->inbox_tail = node;
}

/* ---------- accepting and connecting ---------- */

static void tune_fd(int fd, int family)
{
  if (family != AF_INET && family != AF_INET6) return;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

static void start_conn(tsr_zmtp *s, int fd, conn_state state, const char *peer, uint32_t events)
{
  zmtp_conn *c = zmtp_conn_new(s, fd, state, peer);
  if (c == NULL || table_add(s, c) != 0 || epoll_add(s, fd, events, c) != 0) {
    if (c != NULL) s->handshaking--;
    close(fd);
    free(c);
    return;
  }
  c->want_out = (events & EPOLLOUT) != 0;
  if (state == CONN_GREETING) zmtp_conn_start(s, c);
  arm_timer(s);
}

static void on_listen(tsr_zmtp *s)
{
  for (int i = 0; i < ACCEPTS_PER_ROUND; i++) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    int fd = accept4(s->lfd, (struct sockaddr *)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) zmtp_log(s, TSR_LOG_WARN, "%s: cannot accept a connection: %s", s->what, strerror(errno));
      return;
    }
    char peer[80];
    zmtp_endpoint_format(&addr, len, peer, sizeof peer);
    if (s->max_peers > 0 && s->nconns >= s->max_peers) {
      s->refusals++;
      zmtp_log(s, TSR_LOG_WARN, "%s: refused a connection from %s: %u peers connected (the limit)", s->what, peer, s->max_peers);
      close(fd);
      continue;
    }
    tune_fd(fd, addr.ss_family);
    start_conn(s, fd, CONN_GREETING, peer, EPOLLIN);
  }
}

static void dealer_dial(tsr_zmtp *s)
{
  s->retry_at_ms = 0;
  struct sockaddr_storage addr;
  socklen_t len;
  tsr_errbuf err;
  if (zmtp_endpoint_parse(s->endpoint, false, &addr, &len, &err) != 0) {
    zmtp_log(s, TSR_LOG_DEBUG, "%s: %s (retrying)", s->what, err.text);
    s->retry_at_ms = tsr_now_ms() + s->backoff_ms;
    arm_timer(s);
    return;
  }
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) tune_fd(fd, addr.ss_family);
  int rc = fd >= 0 ? connect(fd, (struct sockaddr *)&addr, len) : -1;
  if (rc == 0) return start_conn(s, fd, CONN_GREETING, s->endpoint, EPOLLIN);
  if (fd >= 0 && errno == EINPROGRESS) return start_conn(s, fd, CONN_CONNECTING, s->endpoint, EPOLLIN | EPOLLOUT);
  zmtp_log(s, TSR_LOG_DEBUG, "%s: cannot connect to %s: %s (retrying)", s->what, s->endpoint, strerror(errno));
  if (fd >= 0) close(fd);
  s->retry_at_ms = tsr_now_ms() + s->backoff_ms;
  s->backoff_ms = s->backoff_ms * 2 > s->reconnect_max_ms ? s->reconnect_max_ms : s->backoff_ms * 2;
  arm_timer(s);
}

static void dealer_on_connected(tsr_zmtp *s, zmtp_conn *c)
{
  int soerr = 0;
  socklen_t len = sizeof soerr;
  if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
  if (soerr != 0) return zmtp_conn_kill(s, c, strerror(soerr));
  zmtp_epoll_set(s, c, false);
  zmtp_conn_start(s, c);
}

static void on_timer(tsr_zmtp *s)
{
  uint64_t ticks;
  ssize_t n = read(s->tfd, &ticks, sizeof ticks);
  (void)n;
  uint64_t now = tsr_now_ms();
  for (uint32_t i = s->nconns; i-- > 0;) {
    zmtp_conn *c = s->conns[i];
    if (c->state != CONN_READY && c->state != CONN_DEAD && c->deadline_ms <= now)
      zmtp_refuse(s, c, "no handshake within the deadline");
  }
  if (!s->router && s->retry_at_ms != 0 && now >= s->retry_at_ms && dealer_conn(s) == NULL) dealer_dial(s);
  arm_timer(s);
}

/* ---------- one round of work ---------- */

static void on_conn_event(tsr_zmtp *s, zmtp_conn *c, uint32_t events)
{
  if (c->state == CONN_DEAD) return;
  if (c->state == CONN_CONNECTING) {
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) dealer_on_connected(s, c);
    return;
  }
  if (events & EPOLLOUT) zmtp_conn_on_writable(s, c);
  if (c->state != CONN_DEAD && (events & (EPOLLIN | EPOLLERR | EPOLLHUP))) zmtp_conn_on_readable(s, c);
}

static void progress(tsr_zmtp *s)
{
  struct epoll_event ev[ROUND_EVENTS];
  int n = epoll_wait(s->efd, ev, ROUND_EVENTS, 0);
  for (int i = 0; i < n; i++) {
    void *p = ev[i].data.ptr;
    if (p == &tag_listen) on_listen(s);
    else if (p == &tag_timer) on_timer(s);
    else if (p != &tag_event) on_conn_event(s, p, ev[i].events);
  }
  free_dead(s);
}

/* ---------- the public calls ---------- */

static int sock_new(const tsr_zmtp_opts *o, bool router, tsr_zmtp **sock_p, tsr_errbuf *err)
{
  tsr_zmtp *s = calloc(1, sizeof *s);
  if (s == NULL) return tsr_fail(err, TSR_ENOMEM, "out of memory");
  s->router = router;
  s->lfd = s->efd = s->tfd = s->evfd = -1;
  pthread_mutex_init(&s->mu, NULL);
  snprintf(s->what, sizeof s->what, "%s", o->what != NULL ? o->what : "socket");
  s->max_frame = o->max_frame ? o->max_frame : ZMTP_DEFAULT_MAX_FRAME;
  s->max_peers = o->max_peers;
  s->handshake_ms = o->handshake_ms ? o->handshake_ms : DEFAULT_HANDSHAKE_MS;
  s->reconnect_ms = o->reconnect_ms ? o->reconnect_ms : DEFAULT_RECONNECT_MS;
  s->reconnect_max_ms = o->reconnect_max_ms > s->reconnect_ms ? o->reconnect_max_ms : s->reconnect_ms;
  s->backoff_ms = s->reconnect_ms;
  s->admit = o->admit;
  s->admit_arg = o->admit_arg;
  s->log = o->log;
  s->log_arg = o->log_arg;
  s->next_id = (uint32_t)tsr_now_ns() ^ (uint32_t)getpid() << 16;   /* as libzmq: a random start */
  *sock_p = s;
  int rc = zmtp_keys_load(&s->keys, o->secret_key, o->server_key, !router, err);
  if (rc != 0) return rc;
  s->efd = epoll_create1(EPOLL_CLOEXEC);
  s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (router) s->by_id = tsr_strmap_new(64);
  if (s->efd < 0 || s->tfd < 0 || s->evfd < 0 || (router && s->by_id == NULL) ||
      epoll_add(s, s->tfd, EPOLLIN, &tag_timer) != 0 || epoll_add(s, s->evfd, EPOLLIN, &tag_event) != 0)
    return tsr_fail(err, TSR_ENOMEM, "cannot make a socket: %s", strerror(errno));
  return 0;
}

static int open_listener(tsr_zmtp *s, const char *endpoint, char *bound, size_t cap, tsr_errbuf *err)
{
  struct sockaddr_storage addr;
  socklen_t len;
  int rc = zmtp_endpoint_parse(endpoint, true, &addr, &len, err);
  if (rc != 0) return rc;
  const struct sockaddr_un *un = (const struct sockaddr_un *)&addr;
  if (addr.ss_family == AF_UNIX && un->sun_path[0] != '\0') {
    unlink(un->sun_path);   /* as libzmq: a stale socket file of an earlier run */
    snprintf(s->ipc_path, sizeof s->ipc_path, "%.*s", (int)sizeof s->ipc_path - 1, un->sun_path);
  }
  int one = 1;
  s->lfd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->lfd >= 0 && addr.ss_family != AF_UNIX) setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&addr, len) != 0 || listen(s->lfd, 1024) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot bind %s: %s", endpoint, strerror(errno));
  len = sizeof addr;
  getsockname(s->lfd, (struct sockaddr *)&addr, &len);
  zmtp_endpoint_format(&addr, len, bound, cap);
  if (epoll_add(s, s->lfd, EPOLLIN, &tag_listen) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot watch %s: %s", endpoint, strerror(errno));
  return 0;
}

int tsr_zmtp_bind(const char *endpoint, const tsr_zmtp_opts *opts, tsr_zmtp **sock_p, char *bound, size_t cap,
                  tsr_errbuf *err)
{
  tsr_zmtp *s = NULL;
  int rc = sock_new(opts, true, &s, err);
  if (rc == 0) rc = open_listener(s, endpoint, bound, cap, err);
  if (rc != 0) tsr_zmtp_close(&s);
  *sock_p = s;
  return rc;
}

int tsr_zmtp_connect(const char *endpoint, const tsr_zmtp_opts *opts, tsr_zmtp **sock_p, tsr_errbuf *err)
{
  tsr_zmtp *s = NULL;
  int rc = sock_new(opts, false, &s, err);
  if (rc == 0 && strlen(endpoint) >= sizeof s->endpoint)
    rc = tsr_fail(err, TSR_EINVAL, "endpoint '%.64s...' is too long", endpoint);
  /* a malformed endpoint fails now; an unresolvable host is retried */
  if (rc == 0) rc = zmtp_endpoint_check(endpoint, err);
  if (rc == 0) {
    snprintf(s->endpoint, sizeof s->endpoint, "%s", endpoint);
    pthread_mutex_lock(&s->mu);
    dealer_dial(s);
    pthread_mutex_unlock(&s->mu);
  }
  if (rc != 0) tsr_zmtp_close(&s);
  *sock_p = s;
  return rc;
}

void tsr_zmtp_close(tsr_zmtp **sock_p)
{
  if (sock_p == NULL || *sock_p == NULL) return;
  tsr_zmtp *s = *sock_p;
  for (uint32_t i = s->nconns; i-- > 0;) zmtp_conn_kill(s, s->conns[i], "socket closed");
  free_dead(s);
  for (msg_node *m = s->inbox_head, *next; m != NULL; m = next) {
    next = m->next;
    tsr_zmtp_msg_close(&m->msg);
    free(m);
  }
  for (pending_frame *p = s->pending_head, *next; p != NULL; p = next) {
    next = p->next;
    free(p->data);
    free(p);
  }
  if (s->lfd >= 0) close(s->lfd);
  if (s->ipc_path[0] != '\0') unlink(s->ipc_path);
  if (s->efd >= 0) close(s->efd);
  if (s->tfd >= 0) close(s->tfd);
  if (s->evfd >= 0) close(s->evfd);
  tsr_strmap_destroy(&s->by_id);
  free(s->conns);
  pthread_mutex_destroy(&s->mu);
  free(s);
  *sock_p = NULL;
}

int tsr_zmtp_fd(tsr_zmtp *sock) { return sock->efd; }

int tsr_zmtp_recv(tsr_zmtp *s, tsr_zmtp_msg *msg)
{
  pthread_mutex_lock(&s->mu);
  if (s->inbox_head == NULL) progress(s);
  msg_node *node = s->inbox_head;
  if (node != NULL) {
    s->inbox_head = node->next;
    if (s->inbox_head == NULL) s->inbox_tail = NULL;
    *msg = node->msg;
    free(node);
  }
  sync_event(s);
  pthread_mutex_unlock(&s->mu);
  return node != NULL;
}

void tsr_zmtp_msg_close(tsr_zmtp_msg *msg)
{
  for (int i = 0; i < msg->nframes; i++) free(msg->data[i]);
  msg->nframes = 0;
}

static int dealer_hold(tsr_zmtp *s, void *data, size_t len, bool owned)
{
  pending_frame *p = malloc(sizeof *p);
  void *copy = owned ? data : malloc(len ? len : 1);
  if (p == NULL || copy == NULL) {
    free(p);
    if (copy != data) free(copy);
    if (owned) free(data);
    errno = ENOMEM;
    return -1;
  }
  if (!owned && len > 0) memcpy(copy, data, len);
  *p = (pending_frame){NULL, copy, len};
  if (s->pending_tail != NULL) s->pending_tail->next = p;
  else s->pending_head = p;
  s->pending_tail = p;
  return 0;
}

static int send_locked(tsr_zmtp *s, const void *id, size_t id_len, void *data, size_t len, bool owned)
{
  zmtp_conn *c = NULL;
  if (s->router) {
    uint64_t held;
    if (id == NULL || !tsr_strmap_get(s->by_id, id, id_len, &held)) {
      if (owned) free(data);
      errno = EHOSTUNREACH;
      return -1;
    }
    c = (zmtp_conn *)(uintptr_t)held;
  } else {
    c = dealer_conn(s);
    if (c == NULL || c->state != CONN_READY || s->pending_head != NULL) return dealer_hold(s, data, len, owned);
  }
  if (zmtp_conn_send(s, c, data, len, owned) != 0) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

int tsr_zmtp_send(tsr_zmtp *s, const void *id, size_t id_len, const void *data, size_t len)
{
  pthread_mutex_lock(&s->mu);
  int rc = send_locked(s, id, id_len, (void *)data, len, false);
  free_dead(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int tsr_zmtp_send_owned(tsr_zmtp *s, const void *id, size_t id_len, void *data, size_t len)
{
  pthread_mutex_lock(&s->mu);
  int rc = send_locked(s, id, id_len, data, len, true);
  free_dead(s);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* True when the dealer's connection is up and has nothing left to write. */
static bool dealer_drained(tsr_zmtp *s)
{
  zmtp_conn *c = dealer_conn(s);
  return s->pending_head == NULL && c != NULL && c->state == CONN_READY && c->out_head == NULL;
}

int tsr_zmtp_flush(tsr_zmtp *s, int timeout_ms)
{
  if (s->router) return 0;
  uint64_t deadline = tsr_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
  for (;;) {
    /* the caller's thread drives the connection here: the handshake, if
     * it is not done, and the writes */
    pthread_mutex_lock(&s->mu);
    progress(s);
    sync_event(s);   /* what it read is waiting for the owner's next recv */
    bool drained = dealer_drained(s);
    zmtp_conn *c = dealer_conn(s);
    struct pollfd pfd = {c != NULL ? c->fd : -1, (short)(POLLIN | (c != NULL && c->want_out ? POLLOUT : 0)), 0};
    pthread_mutex_unlock(&s->mu);
    uint64_t now = tsr_now_ms();
    if (drained) return 0;
    if (now >= deadline) return TSR_ETIMEDOUT;
    poll(&pfd, 1, (int)(deadline - now < 10 ? deadline - now : 10));
  }
}

bool tsr_zmtp_connected(tsr_zmtp *s)
{
  pthread_mutex_lock(&s->mu);
  zmtp_conn *c = s->router ? NULL : dealer_conn(s);
  bool up = c != NULL && c->state == CONN_READY;
  pthread_mutex_unlock(&s->mu);
  return up;
}

size_t tsr_zmtp_peers(tsr_zmtp *s)
{
  pthread_mutex_lock(&s->mu);
  size_t n = s->ready_peers;
  pthread_mutex_unlock(&s->mu);
  return n;
}

unsigned long tsr_zmtp_refusals(tsr_zmtp *s)
{
  pthread_mutex_lock(&s->mu);
  unsigned long n = s->refusals;
  pthread_mutex_unlock(&s->mu);
  return n;
}
