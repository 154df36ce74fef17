/* Opening and closing a client, and the small plumbing every API call uses:
 * the outbox, the wake signal, deadlines and the log callback.
 *
 * tsr_client_open builds the whole client, queues `hello`, starts the I/O
 * thread (client/io.c) and waits for the scheduler's `welcome`. If that
 * does not come, the half-built client is torn down through the same path
 * as tsr_client_close, so there is only one teardown. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

#include "util/rttrace.h"
#include "zmtp/zmtp.h"
#include "internal.h"

void client_log(tsr_client *c, int level, const char *fmt, ...)
{
  if (c == NULL || c->log == NULL) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  c->log(c->log_arg, level, line);
}

out_frame *client_frame_from(tsr_wbuf *wb)
{
  out_frame *f = calloc(1, sizeof *f);
  if (f == NULL) return NULL;
  f->data = tsr_wbuf_release(wb, &f->len);
  if (f->data == NULL) {
    free(f);
    return NULL;
  }
  return f;
}

void client_free_chain(out_frame *f)
{
  while (f != NULL) {
    out_frame *next = f->next;
    free(f->data);
    free(f);
    f = next;
  }
}

void client_send_chain_locked(tsr_client *c, out_frame *f)
{
  while (f != NULL) {
    out_frame *next = f->next;
    if (tsr_zmtp_send_owned(c->sock, NULL, 0, f->data, f->len) != 0)
      client_log(c, TSR_LOG_WARN, "dropped a message to %s: %s", c->address, strerror(errno));
    free(f);
    f = next;
  }
  c->sent_ms = tsr_now_ms();
  tsr_rt_stamp("c.sent");
}

void client_enqueue_locked(tsr_client *c, out_frame *chain)
{
  if (chain == NULL) return;
  if (c->sock != NULL && c->out_head == NULL) {
    client_send_chain_locked(c, chain);
    return;
  }
  if (c->out_tail != NULL)
    c->out_tail->next = chain;
  else
    c->out_head = chain;
  while (chain->next != NULL) chain = chain->next;
  c->out_tail = chain;
  client_wake_io_locked(c);
}

void client_wake_io_locked(tsr_client *c)
{
  uint64_t one = 1;
  /* The eventfd counter only needs to become non-zero; a full counter
   * (EAGAIN) already means "wake up". */
  ssize_t ignored = write(c->wake_fd, &one, sizeof one);
  (void)ignored;
}

uint64_t client_deadline(int timeout_ms)
{
  if (timeout_ms < 0) return 0;
  return tsr_now_ns() + (uint64_t)timeout_ms * 1000000u + 1;
}

bool client_wait_until(tsr_client *c, uint64_t deadline_ns)
{
  /* This thread sleeps until the I/O thread has read something: make sure
   * it reads (it leaves the socket alone while a waiter spins on it). */
  if (c->spinners == 0 && !c->io_polls_sock && c->sock != NULL) client_wake_io_locked(c);
  if (deadline_ns == 0) {
    pthread_cond_wait(&c->cv, &c->mu);
    return true;
  }
  uint64_t now = tsr_now_ns();
  if (now >= deadline_ns) return false;
  /* The condition variable runs on CLOCK_MONOTONIC, like tsr_now_ns. */
  struct timespec ts;
  ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
  ts.tv_nsec = (long)(deadline_ns % 1000000000u);
  pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  return true;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A spinning waiter yields its core this often: a thread the kernel
 * queued behind it (the worker's or the scheduler's, on a machine of few
 * cores) then waits at most this long, not the whole spin. Without it, on
 * the 2-core VM one run in three sat at 250-500 us, the worker's thread
 * queued behind the spinner; yielding on every turn cost ~20 us of the
 * median instead (bench/RESULTS.md, "The round trip without libzmq"). */
#define SPIN_YIELD_NS 5000u

uint64_t client_spin_until(const tsr_client *c)
{
  return c->spin_us > 0 ? tsr_now_ns() + (uint64_t)c->spin_us * 1000u : 0;
}

bool client_wait_spin(tsr_client *c, uint64_t deadline_ns, uint64_t spin_until_ns)
{
  uint64_t now = tsr_now_ns();
  if (c->sock == NULL || now >= spin_until_ns) return client_wait_until(c, deadline_ns);
  uint64_t seen = c->frames_handled, next_yield = 0;
  c->spinners++;
  for (;;) {
    client_read_locked(c, false);
    /* a frame handled here or by the I/O thread while mu was free: the
     * caller checks its condition (mu was released meanwhile, so going to
     * sleep now could miss the broadcast that came with it) */
    if (c->frames_handled != seen) break;
    now = tsr_now_ns();
    if (now >= spin_until_ns || (deadline_ns != 0 && now >= deadline_ns)) break;
    pthread_mutex_unlock(&c->mu);
    if (now >= next_yield) {
      sched_yield();
      next_yield = now + SPIN_YIELD_NS;
    } else {
      for (int i = 0; i < 32; i++) cpu_relax();
    }
    pthread_mutex_lock(&c->mu);
  }
  c->spinners--;   /* from here the I/O thread reads (client_wait_until wakes it) */
  return deadline_ns == 0 || tsr_now_ns() < deadline_ns;
}

int client_check_up_locked(tsr_client *c)
{
  if (c->state == CONN_CLOSED) return client_fail(TSR_ECLOSED, "the client is closed");
  if (c->state != CONN_UP)
    return client_fail(TSR_ECONN, "not connected to the scheduler at %s: %s", c->address,
                       c->lost_msg[0] ? c->lost_msg : "reconnecting");
  return 0;
}

bool client_unref_locked(tsr_client *c) { return --c->handles == 0; }

static void free_entry_cb(void *arg, const char *key, size_t key_len, uint64_t value)
{
  (void)arg, (void)key, (void)key_len;
  keys_free_entry((key_entry *)(uintptr_t)value);
}

void client_free(tsr_client *c)
{
  if (c == NULL) return;
  client_free_chain(c->out_head);
  if (c->keys != NULL) tsr_strmap_each(c->keys, free_entry_cb, NULL);
  tsr_strmap_destroy(&c->keys);
  progress_client_free(c);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->xmu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

/* The address given, else $TESSERA_SCHEDULER, else the workers' name for
 * it, $TESSERA_SCHEDULER_ADDRESS (so one container environment serves
 * workers and clients alike, docs/deploy.md). */
static int resolve_address(const char *address, char *out, size_t cap)
{
  if (address == NULL || address[0] == '\0') address = getenv("TESSERA_SCHEDULER");
  if (address == NULL || address[0] == '\0') address = getenv("TESSERA_SCHEDULER_ADDRESS");
  if (address == NULL || address[0] == '\0')
    return client_fail(TSR_EINVAL, "no scheduler address: pass one or set TESSERA_SCHEDULER (tcp://HOST:PORT)");
  if (strlen(address) >= cap)
    return client_fail(TSR_EINVAL, "scheduler address '%.64s...' is longer than %zu bytes", address, cap - 1);
  snprintf(out, cap, "%s", address);
  return 0;
}

/* Reads TESSERA_HEARTBEAT_TIMEOUT (a duration); -1 when unset. */
static int env_heartbeat_timeout(int64_t *ms_p)
{
  const char *text = getenv("TESSERA_HEARTBEAT_TIMEOUT");
  uint64_t ms;
  *ms_p = -1;
  if (text == NULL || text[0] == '\0') return 0;
  if (tsr_parse_duration_ms(text, &ms) != 0 || ms == 0 || ms > 86400000u)
    return client_fail(TSR_EINVAL, "TESSERA_HEARTBEAT_TIMEOUT='%s' is not a duration like '10s'", text);
  *ms_p = (int64_t)ms;
  return 0;
}

static tsr_client *client_alloc(const tsr_client_opts *opts)
{
  tsr_client *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->xmu, NULL);
  c->wake_fd = -1;
  c->handles = 1;
  c->next_graph = 1;
  c->next_req = 1;
  c->client_id = client_random_id();
  c->log = opts->log;
  c->log_arg = opts->log_arg;
  c->opt_heartbeat_ms = opts->heartbeat_ms > 0 ? opts->heartbeat_ms : 1000;
  c->hb_ms = (uint32_t)c->opt_heartbeat_ms;
  c->hb_timeout_ms = 10u * c->hb_ms;
  if (opts->name != NULL && opts->name[0] != '\0')
    snprintf(c->name, sizeof c->name, "%s", opts->name);
  else
    snprintf(c->name, sizeof c->name, "client-%d", (int)getpid());
  c->keys = tsr_strmap_new_borrowed(1024);   /* borrows each entry's key */
  if (c->keys == NULL) {
    client_free(c);
    return NULL;
  }
  return c;
}

out_frame *client_hello_frame(tsr_client *c)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  pthread_mutex_lock(&c->mu);
  bool progress = c->progress_on;
  pthread_mutex_unlock(&c->mu);
  tsr_wbuf_begin(&wb, "hello", progress ? 6 : 5);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb.pk, "role", "client");
  tsr_pack_kv_str(&wb.pk, "name", c->name);
  tsr_pack_kv_uint(&wb.pk, "client_id", c->client_id);   /* resumes its graphs after a restart */
  if (progress) tsr_pack_kv_bool(&wb.pk, "progress", true);  /* progress.c: subscribed */
  out_frame *f = client_frame_from(&wb);
  tsr_wbuf_free(&wb);
  return f;
}

/* The socket's lines go to the caller's log callback, as ours do. */
static void socket_log(void *arg, int level, const char *line) { client_log(arg, level, "%s", line); }

/* Connecting is asynchronous: an unreachable scheduler shows up as a
 * missing welcome, not as an error here. */
int client_socket_open(tsr_client *c)
{
  const char *secret, *server;
  client_curve_keys(c, &secret, &server);
  tsr_zmtp_opts o = {.what = "scheduler connection", .reconnect_ms = 100, .reconnect_max_ms = 2000,
                     .secret_key = secret, .server_key = server, .log = socket_log, .log_arg = c};
  tsr_errbuf err = {{0}};
  int rc = tsr_zmtp_connect(c->address, &o, &c->sock, &err);
  if (rc != 0) return client_fail(TSR_EINVAL, "cannot connect to '%s': %s", c->address, err.text);
  return 0;
}

/* Stops the I/O thread (after it flushed the outbox) and closes sockets.
 * Safe on a half-built client. */
static void client_shutdown(tsr_client *c)
{
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  c->state = CONN_CLOSED;
  for (pending_submit *p = c->submits; p != NULL; p = p->next) p->done = true, p->rc = TSR_ECLOSED;
  for (pending_status *p = c->statuses; p != NULL; p = p->next) p->done = true, p->rc = TSR_ECLOSED;
  uint64_t one = 1;
  ssize_t ignored = c->wake_fd >= 0 ? write(c->wake_fd, &one, sizeof one) : 0;
  (void)ignored;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->io_started) pthread_join(c->io, NULL);
  c->io_started = false;
  tsr_zmtp_close(&c->sock);
  gather_cache_close_all(c);
  if (c->zctx != NULL) zmq_ctx_term(c->zctx);
  c->zctx = NULL;
  if (c->wake_fd >= 0) close(c->wake_fd);
  c->wake_fd = -1;
}

static void client_drop(tsr_client *c)
{
  pthread_mutex_lock(&c->mu);
  bool last = client_unref_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (last) client_free(c);
}

/* Waits for the welcome; returns 0 or why the open failed. */
static int await_welcome(tsr_client *c, int timeout_ms)
{
  uint64_t deadline = client_deadline(timeout_ms);
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  while (c->state == CONN_CONNECTING && client_wait_until(c, deadline)) {
  }
  if (c->state == CONN_CONNECTING)
    rc = client_fail(TSR_ETIMEDOUT, "no answer from the scheduler at %s within %d ms", c->address, timeout_ms);
  else if (c->state != CONN_UP)
    rc = client_fail(c->open_rc ? c->open_rc : TSR_ECONN, "scheduler at %s refused the client: %s", c->address,
                     c->open_msg);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static int client_start(tsr_client *c)
{
  c->zctx = zmq_ctx_new();
  if (c->zctx == NULL) return client_fail(TSR_ENOMEM, "zmq_ctx_new failed");
  c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wake_fd < 0) return client_fail(TSR_EIO, "eventfd: %s", strerror(errno));
  int rc = client_socket_open(c);
  if (rc != 0) return rc;
  out_frame *hello = client_hello_frame(c);
  if (hello == NULL) return client_fail(TSR_ENOMEM, "out of memory");
  client_enqueue_locked(c, hello);   /* no other thread yet: no lock needed */
  if (pthread_create(&c->io, NULL, client_io_main, c) != 0)
    return client_fail(TSR_ENOMEM, "cannot start the client I/O thread");
  c->io_started = true;
  return 0;
}

/* $TESSERA_TRANSPORT (ucx|zmq|auto, default auto): which of a worker's
 * data addresses gathers prefer (docs/transport.md). Process-wide. */
static int env_transport(void)
{
  const char *text = getenv("TESSERA_TRANSPORT");
  if (text == NULL || text[0] == '\0') return 0;
  tsr_transport transport;
  tsr_errbuf err = {{0}};
  if (tsr_transport_parse(text, &transport, &err) != 0)
    return client_fail(TSR_EINVAL, "TESSERA_TRANSPORT: %s", err.text);
  tsr_xfer_set_fetch_transport(transport);
  return 0;
}

/* $TESSERA_CLIENT_SPIN_US: how long a wait for the scheduler's answer
 * reads the socket itself before it sleeps (client_wait_spin); 0 turns
 * it off. The default covers a round trip on loopback. */
#define CLIENT_SPIN_DEFAULT_US 200
static int env_spin(int64_t *us_p)
{
  const char *text = getenv("TESSERA_CLIENT_SPIN_US");
  *us_p = CLIENT_SPIN_DEFAULT_US;
  if (text == NULL || text[0] == '\0') return 0;
  char *end;
  long long us = strtoll(text, &end, 10);
  if (*end != '\0' || us < 0 || us > 1000000)
    return client_fail(TSR_EINVAL, "TESSERA_CLIENT_SPIN_US='%s' is not a number of microseconds (0 to 1000000)", text);
  *us_p = us;
  return 0;
}

TSR_API int tsr_client_open(tsr_client **client_p, const char *address, const tsr_client_opts *opts)
{
  static const tsr_client_opts defaults = TSR_CLIENT_OPTS_DEFAULT;
  if (client_p == NULL) return client_fail(TSR_EINVAL, "tsr_client_open: client_p is NULL");
  if (opts == NULL) opts = &defaults;
  char addr[TSR_MAX_ADDR_LEN];
  int64_t env_timeout, reconnect_ms, spin_us;
  int rc = resolve_address(address, addr, sizeof addr);
  if (rc == 0) rc = env_heartbeat_timeout(&env_timeout);
  if (rc == 0) rc = client_env_reconnect(&reconnect_ms);
  if (rc == 0) rc = env_spin(&spin_us);
  if (rc == 0) rc = env_transport();
  if (rc != 0) return rc;
  tsr_client *c = client_alloc(opts);
  if (c == NULL) return client_fail(TSR_ENOMEM, "tsr_client_open: out of memory");
  snprintf(c->address, sizeof c->address, "%s", addr);
  c->env_timeout_ms = env_timeout;
  c->reconnect_ms = reconnect_ms;
  c->spin_us = (uint32_t)spin_us;
  if (env_timeout > 0) c->hb_timeout_ms = (uint32_t)env_timeout;
  int timeout_ms = opts->connect_timeout_ms == 0 ? 10000 : opts->connect_timeout_ms;
  rc = client_curve_setup(c, opts);
  if (rc == 0) rc = client_start(c);
  if (rc == 0) rc = await_welcome(c, timeout_ms);
  if (rc != 0) {
    client_shutdown(c);
    client_drop(c);
    return rc;
  }
  client_log(c, TSR_LOG_INFO, "connected to %s as '%s' (peer %llu)", c->address, c->name,
             (unsigned long long)c->peer_id);
  *client_p = c;
  return 0;
}

static out_frame *goodbye_frame(void)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "goodbye", 1);
  out_frame *f = client_frame_from(&wb);
  tsr_wbuf_free(&wb);
  return f;
}

TSR_API void tsr_client_close(tsr_client *client)
{
  if (client == NULL) return;
  pthread_mutex_lock(&client->mu);
  /* goodbye releases every key this client wants on the scheduler, so the
   * futures' keys need no release messages of their own. */
  if (client->state == CONN_UP) {
    client_enqueue_locked(client, goodbye_frame());
    client->close_linger_ms = 1000;
  }
  pthread_mutex_unlock(&client->mu);
  client_shutdown(client);
  client_log(client, TSR_LOG_INFO, "closed the connection to %s", client->address);
  client_drop(client);
}

TSR_API const char *tsr_client_address(const tsr_client *client) { return client ? client->address : ""; }
