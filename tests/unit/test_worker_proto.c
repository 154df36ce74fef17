/* Drives the real tessera-worker binary over the protocol. The test plays
 * the scheduler: it binds a ROUTER on tcp://127.0.0.1:0, starts workers as
 * child processes (TESSERA_TEST_OPS=1) pointed at it, and checks what they
 * say: hello, heartbeats, task_done / task_erred / missing_input, goodbye,
 * and that bad input from the "scheduler" never kills them. Chunks are
 * fetched straight from the workers' data sockets with tsr_xfer_get.
 *
 * Usage: test_worker_proto PATH/TO/tessera-worker. A failed test prints the
 * logs of the workers it started. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "kit.h"
#include "net/net.h"
#include "wire/wire.h"

static const char *worker_bin;

/* ---------- received messages ---------- */

typedef struct msg {
  char op[TSR_MAX_NAME_LEN + 1];
  char *bytes;                 /* the map's own copy: msgpack objects point into it */
  msgpack_unpacked up;
  const msgpack_object *map;
  struct msg *next;
} msg;

static void msg_free(msg *m)
{
  if (m == NULL) return;
  msgpack_unpacked_destroy(&m->up);
  free(m->bytes);
  free(m);
}

static uint64_t m_uint(const msg *m, const char *key)
{
  uint64_t v = UINT64_MAX;
  tsr_wire_uint(m->map, key, &v, NULL);
  return v;
}

static int64_t m_int(const msg *m, const char *key)
{
  int64_t v = INT64_MIN;
  tsr_wire_int(m->map, key, &v, NULL);
  return v;
}

static const char *m_str(const msg *m, const char *key, char *buf, size_t cap)
{
  buf[0] = '\0';
  tsr_wire_strcpy(m->map, key, buf, cap, NULL);
  return buf;
}

static int m_shape(const msg *m, int64_t *dims, int cap)
{
  const msgpack_object *items;
  size_t n;
  if (tsr_wire_array(m->map, "shape", 8, &items, &n, NULL) != 0) return -1;
  for (size_t i = 0; i < n && (int)i < cap; i++) tsr_obj_int(&items[i], &dims[i], NULL);
  return (int)n;
}

/* ---------- the fake scheduler and its workers ---------- */

typedef struct wproc {
  pid_t pid;
  char name[64];
  char log[128];
  char ident[256];
  size_t ident_len;            /* 0 until its first hello */
  int hellos;
  char data_addr[TSR_MAX_ADDR_LEN];
  msg *head, *tail;
} wproc;

#define MAX_WORKERS 8
static struct {
  void *ctx;
  void *router;
  char addr[TSR_MAX_ADDR_LEN];
  wproc w[MAX_WORKERS];
  int nw;
} S;

static int sched_open(void)
{
  memset(&S, 0, sizeof S);
  S.ctx = zmq_ctx_new();
  S.router = zmq_socket(S.ctx, ZMQ_ROUTER);
  tsr_net_socket_defaults(S.router);
  return tsr_net_bind(S.router, "tcp://127.0.0.1:0", NULL, S.addr, sizeof S.addr, NULL);
}

/* Closes the scheduler's socket (its address stays in S.addr) ... */
static void sched_unbind(void)
{
  zmq_close(S.router);
  S.router = NULL;
}

/* ... and binds a new one on the same address. */
static int sched_rebind(void)
{
  S.router = zmq_socket(S.ctx, ZMQ_ROUTER);
  tsr_net_socket_defaults(S.router);
  char out[TSR_MAX_ADDR_LEN];
  return tsr_net_bind(S.router, S.addr, NULL, out, sizeof out, NULL);
}

static void dump_log(const wproc *w)
{
  FILE *f = fopen(w->log, "r");
  if (f == NULL) return;
  fprintf(stderr, "----- log of worker %s (pid %d) -----\n", w->name, (int)w->pid);
  char line[4096];
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

/* Kills what is still running, prints logs when the test failed. */
static void sched_close(int failed)
{
  for (int i = 0; i < S.nw; i++) {
    wproc *w = &S.w[i];
    if (w->pid > 0) {
      kill(w->pid, SIGKILL);
      waitpid(w->pid, NULL, 0);
    }
    if (failed) dump_log(w);
    unlink(w->log);
    while (w->head) {
      msg *m = w->head;
      w->head = m->next;
      msg_free(m);
    }
  }
  if (S.router) zmq_close(S.router);
  zmq_ctx_term(S.ctx);
  memset(&S, 0, sizeof S);
}

/* Starts a worker: --scheduler S.addr --name NAME, then extra flags
 * (NULL-terminated). */
static wproc *spawn(const char *name, ...)
{
  if (S.nw == MAX_WORKERS) {
    fprintf(stderr, "test bug: more than %d workers in one test\n", MAX_WORKERS);
    abort();
  }
  wproc *w = &S.w[S.nw++];
  snprintf(w->name, sizeof w->name, "%s", name);
  snprintf(w->log, sizeof w->log, "/tmp/test_worker_proto.%d.%s.log", (int)getpid(), name);
  const char *argv[32] = {worker_bin, "--scheduler", S.addr, "--name", name, "--log-level", "debug"};
  int argc = 7;
  va_list ap;
  va_start(ap, name);
  for (const char *a; argc < 30 && (a = va_arg(ap, const char *)) != NULL;) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  w->pid = fork();
  if (w->pid == 0) {
    int fd = open(w->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("TESSERA_TEST_OPS", "1", 1);
    execv(worker_bin, (char *const *)argv);
    _exit(127);
  }
  return w;
}

static wproc *by_pid(uint64_t pid)
{
  for (int i = 0; i < S.nw; i++)
    if ((uint64_t)S.w[i].pid == pid) return &S.w[i];
  return NULL;
}

static wproc *by_ident(const void *id, size_t len)
{
  for (int i = 0; i < S.nw; i++)
    if (S.w[i].ident_len == len && memcmp(S.w[i].ident, id, len) == 0) return &S.w[i];
  return NULL;
}

static void append(wproc *w, msg *m)
{
  if (w->tail) w->tail->next = m;
  else w->head = m;
  w->tail = m;
}

/* Splits one frame into messages; a hello (re)binds the sender's identity
 * to the worker with that pid. */
static void take_frame(const void *id, size_t id_len, const char *data, size_t len)
{
  size_t off = 0;
  while (off < len) {
    size_t start = off;
    msg *m = calloc(1, sizeof *m);
    msgpack_unpacked_init(&m->up);
    if (msgpack_unpack_next(&m->up, data, len, &off) < 0) {
      msg_free(m);
      return;
    }
    m->bytes = malloc(off - start);
    memcpy(m->bytes, data + start, off - start);
    size_t off2 = 0;
    msgpack_unpacked_destroy(&m->up);
    msgpack_unpacked_init(&m->up);
    msgpack_unpack_next(&m->up, m->bytes, off - start, &off2);
    m->map = &m->up.data;
    tsr_wire_strcpy(m->map, "op", m->op, sizeof m->op, NULL);
    wproc *w = NULL;
    if (strcmp(m->op, "hello") == 0 && (w = by_pid(m_uint(m, "pid"))) != NULL) {
      memcpy(w->ident, id, id_len);
      w->ident_len = id_len;
      w->hellos++;
    } else {
      w = by_ident(id, id_len);
    }
    if (w) append(w, m);
    else msg_free(m);
  }
}

/* Receives for up to ms milliseconds (or until the first frame when
 * until_one). */
static void pump(int ms)
{
  uint64_t end = tsr_now_ms() + (uint64_t)ms;
  for (;;) {
    uint64_t now = tsr_now_ms();
    if (S.router == NULL) {
      usleep(1000 * (useconds_t)(now < end ? (end - now < 20 ? end - now : 20) : 0));
      if (tsr_now_ms() >= end) return;
      continue;
    }
    zmq_pollitem_t item = {S.router, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, now < end ? (long)(end - now) : 0) <= 0) return;
    tsr_frames fr;
    while (tsr_frames_recv(S.router, &fr, ZMQ_DONTWAIT) >= 0) {
      if (fr.count == 2)
        take_frame(tsr_frame_data(&fr, 0), tsr_frame_size(&fr, 0), tsr_frame_data(&fr, 1), tsr_frame_size(&fr, 1));
      tsr_frames_close(&fr);
    }
    if (tsr_now_ms() >= end) return;
  }
}

/* Takes the first message with op from w's queue, waiting up to ms. */
static msg *expect(wproc *w, const char *op, int ms)
{
  uint64_t end = tsr_now_ms() + (uint64_t)ms;
  for (;;) {
    for (msg **pp = &w->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
      if (strcmp((*pp)->op, op) != 0) continue;
      msg *m = *pp;
      *pp = m->next;
      if (w->tail == m) w->tail = prev;
      m->next = NULL;
      return m;
    }
    uint64_t now = tsr_now_ms();
    if (now >= end) return NULL;
    pump((int)(end - now) < 50 ? (int)(end - now) : 50);
  }
}

/* Drops queued messages with op (e.g. old heartbeats). */
static void discard(wproc *w, const char *op)
{
  msg *m;
  while ((m = expect(w, op, 0)) != NULL) msg_free(m);
}

static void send_to(wproc *w, const void *data, size_t len)
{
  tsr_net_send(S.router, w->ident, w->ident_len, data, len, 0);
}

static void send_wbuf(wproc *w, tsr_wbuf *wb)
{
  send_to(w, wb->sbuf.data, wb->sbuf.size);
  tsr_wbuf_free(wb);
}

/* Waits for w's hello and welcomes it; fills w->data_addr. */
static int hello_welcome(wproc *w, uint64_t id, uint64_t beat_ms)
{
  msg *m = expect(w, "hello", 10000);
  if (m == NULL) return -1;
  m_str(m, "data_address", w->data_addr, sizeof w->data_addr);
  msg_free(m);
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "welcome", 4);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_uint(&wb.pk, "id", id);
  tsr_pack_kv_uint(&wb.pk, "heartbeat_ms", beat_ms);
  send_wbuf(w, &wb);
  return 0;
}

/* Params: a NULL-terminated list of (name, kind, value): kind 'i' int64,
 * 'f' double, 's' string, 'I' a one-element int array (a 1-D shape). */
static void pack_params(msgpack_packer *pk, va_list ap)
{
  const char *names[8];
  int kinds[8];
  int64_t ints[8];
  double floats[8];
  const char *strs[8];
  int n = 0;
  for (const char *name; n < 8 && (name = va_arg(ap, const char *)) != NULL; n++) {
    names[n] = name;
    kinds[n] = va_arg(ap, int);
    if (kinds[n] == 'f') floats[n] = va_arg(ap, double);
    else if (kinds[n] == 's') strs[n] = va_arg(ap, const char *);
    else ints[n] = va_arg(ap, int64_t);
  }
  msgpack_pack_map(pk, (size_t)n);
  for (int i = 0; i < n; i++) {
    tsr_pack_str(pk, names[i]);
    if (kinds[i] == 'f') msgpack_pack_double(pk, floats[i]);
    else if (kinds[i] == 's') tsr_pack_str(pk, strs[i]);
    else if (kinds[i] == 'I') {
      msgpack_pack_array(pk, 1);
      msgpack_pack_int64(pk, ints[i]);
    } else msgpack_pack_int64(pk, ints[i]);
  }
}

typedef struct input { const char *key, *from; uint64_t nbytes; } input;

static void compute(wproc *w, uint64_t id, const char *key, const char *op, int64_t priority, const input *ins,
                    int n_in, ...)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 7);
  tsr_pack_kv_uint(&wb.pk, "id", id);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "task_op", op);
  tsr_pack_str(&wb.pk, "params");
  va_list ap;
  va_start(ap, n_in);
  pack_params(&wb.pk, ap);
  va_end(ap);
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, (size_t)n_in);
  for (int i = 0; i < n_in; i++) {
    msgpack_pack_array(&wb.pk, 3);
    tsr_pack_str(&wb.pk, ins[i].key);
    tsr_pack_str(&wb.pk, ins[i].from);
    msgpack_pack_uint64(&wb.pk, ins[i].nbytes);
  }
  tsr_pack_kv_int(&wb.pk, "priority", priority);
  send_wbuf(w, &wb);
}

static void send_error(wproc *w, int code, const char *text)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "error", 3);
  tsr_pack_kv_int(&wb.pk, "code", code);
  tsr_pack_kv_str(&wb.pk, "message", text);
  send_wbuf(w, &wb);
}

/* Fetches key from a data address; returns the tsr_xfer_get status. */
static int fetch(const char *addr, const char *key, tsr_chunk_header *hdr, void **bytes_p)
{
  tsr_xfer_conn *conn = NULL;
  tsr_errbuf err = {{0}};
  int rc = tsr_xfer_open(S.ctx, addr, &conn, &err);
  tsr_xfer_data data = {0};
  if (rc == 0) rc = tsr_xfer_get(conn, key, 5000, hdr, &data, &err);
  if (rc == 0 && bytes_p) {
    *bytes_p = malloc(data.nbytes + 1);
    memcpy(*bytes_p, data.data, data.nbytes);
  }
  tsr_xfer_data_release(&data);
  tsr_xfer_close(&conn);
  return rc;
}

/* Waits for w's exit; returns its status or -1 on timeout. */
static int wait_exit(wproc *w, int ms)
{
  uint64_t end = tsr_now_ms() + (uint64_t)ms;
  while (tsr_now_ms() < end) {
    int status;
    pid_t r = waitpid(w->pid, &status, WNOHANG);
    if (r == w->pid) {
      w->pid = 0;
      return status;
    }
    pump(20);
  }
  return -1;
}

static bool alive(wproc *w) { return w->pid > 0 && waitpid(w->pid, NULL, WNOHANG) == 0; }

/* True when w's log holds a sanitizer report. */
static bool log_has_sanitizer_report(const wproc *w)
{
  FILE *f = fopen(w->log, "r");
  if (f == NULL) return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    found = strstr(line, "Sanitizer") != NULL || strstr(line, "runtime error:") != NULL;
  fclose(f);
  return found;
}

/* Stops every worker still running with SIGTERM and checks that each
 * exited 0 (under ASan that includes the leak check) and logged no
 * sanitizer report. 0 when all is well. */
static int stop_all(void)
{
  int bad = 0;
  for (int i = 0; i < S.nw; i++) {
    wproc *w = &S.w[i];
    if (w->pid > 0) {
      kill(w->pid, SIGTERM);
      int status = wait_exit(w, 10000);
      if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "  worker %s: exit status %d after SIGTERM\n", w->name, status);
        bad++;
      }
    }
    if (log_has_sanitizer_report(w)) {
      fprintf(stderr, "  worker %s: sanitizer report in its log\n", w->name);
      bad++;
    }
  }
  return bad;
}

/* The sum the `sum` kernel computes, in its documented order (eight
 * interleaved partial sums, combined pairwise), so results compare
 * byte for byte. */
static double ref_sum(const double *x, size_t n)
{
  double acc[8] = {0};
  for (size_t i = 0; i < n; i++) acc[i % 8] += x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ---------- the tests ---------- */

TEST(hello_then_heartbeats)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", "--threads", "2", "--memory-limit", "1MiB", (char *)NULL);
  msg *m = expect(w, "hello", 10000);
  ASSERT_TRUE(m != NULL);
  char buf[256];
  ASSERT_EQ(m_uint(m, "proto"), TSR_PROTOCOL_VERSION);
  ASSERT_STREQ(m_str(m, "role", buf, sizeof buf), "worker");
  ASSERT_STREQ(m_str(m, "name", buf, sizeof buf), "w1");
  ASSERT_EQ(m_uint(m, "pid"), w->pid);
  ASSERT_EQ(m_uint(m, "threads"), 2);
  ASSERT_EQ(m_uint(m, "memory_limit"), 1048576);
  ASSERT_STREQ(m_str(m, "device", buf, sizeof buf), "cpu");
  ASSERT_TRUE(strncmp(m_str(m, "data_address", buf, sizeof buf), "tcp://127.0.0.1:", 16) == 0);
  const msgpack_object *ops;
  size_t n_ops;
  ASSERT_OK(tsr_wire_array(m->map, "ops", 1000, &ops, &n_ops, NULL));
  int seen = 0;
  for (size_t i = 0; i < n_ops; i++) {
    const char *s;
    size_t len;
    ASSERT_OK(tsr_obj_str(&ops[i], 256, &s, &len, NULL));
    seen += (len == 14 && memcmp(s, "random_uniform", 14) == 0) + (len == 3 && memcmp(s, "sum", 3) == 0) +
            (len == 5 && memcmp(s, "sleep", 5) == 0);
  }
  ASSERT_EQ(seen, 3);
  msg_free(m);
  /* Nothing but hello before the welcome. */
  pump(300);
  ASSERT_TRUE(w->head == NULL);
  m = expect(w, "never", 0);
  ASSERT_TRUE(m == NULL);

  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "welcome", 4);
  tsr_pack_kv_uint(&wb.pk, "proto", 1);
  tsr_pack_kv_uint(&wb.pk, "id", 7);
  tsr_pack_kv_uint(&wb.pk, "heartbeat_ms", 100);
  send_wbuf(w, &wb);
  m = expect(w, "heartbeat", 2000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "memory_used"), 0);
  ASSERT_EQ(m_uint(m, "tasks_running"), 0);
  ASSERT_EQ(m_uint(m, "tasks_done"), 0);
  ASSERT_EQ(m_uint(m, "chunks"), 0);
  msg_free(m);
  /* At the welcome's 100 ms, not the default 1 s. */
  pump(600);
  int beats = 0;
  while ((m = expect(w, "heartbeat", 0)) != NULL) beats++, msg_free(m);
  ASSERT_TRUE(beats >= 3);
  ASSERT_OK(stop_all());
}

TEST(compute_then_fetch_result)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", "--threads", "2", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  compute(w, 1, "x", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)42, "shape", 'I', (int64_t)1000,
          (char *)NULL);
  msg *m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  char buf[256];
  int64_t dims[4];
  ASSERT_EQ(m_uint(m, "id"), 1);
  ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), "x");
  ASSERT_EQ(m_uint(m, "nbytes"), 8000);
  ASSERT_EQ(m_uint(m, "dtype"), TSR_F64);
  ASSERT_EQ(m_shape(m, dims, 4), 1);
  ASSERT_EQ(dims[0], 1000);
  ASSERT_TRUE(m_uint(m, "duration_us") != UINT64_MAX);
  msg_free(m);

  input in = {"x", w->data_addr, 8000};
  compute(w, 2, "s", "sum", 0, &in, 1, (char *)NULL);
  m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "id"), 2);
  ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), "s");
  ASSERT_EQ(m_uint(m, "nbytes"), 8);
  ASSERT_EQ(m_uint(m, "dtype"), TSR_F64);
  ASSERT_EQ(m_shape(m, dims, 4), 0);
  msg_free(m);

  tsr_chunk_header hx, hs;
  double *x = NULL, *s = NULL;
  ASSERT_OK(fetch(w->data_addr, "x", &hx, (void **)&x));
  ASSERT_OK(fetch(w->data_addr, "s", &hs, (void **)&s));
  ASSERT_EQ(hx.nbytes, 8000);
  ASSERT_EQ(hx.meta.dtype, TSR_F64);
  ASSERT_EQ(hs.meta.ndim, 0);
  double want = ref_sum(x, 1000);
  double got = s[0];
  free(x);
  free(s);
  ASSERT_TRUE(got > 0 && got < 1000);
  ASSERT_TRUE(memcmp(&got, &want, sizeof got) == 0);

  /* Heartbeats now count the two chunks and the two tasks. */
  discard(w, "heartbeat");
  m = expect(w, "heartbeat", 2000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "chunks"), 2);
  ASSERT_EQ(m_uint(m, "tasks_done"), 2);
  ASSERT_TRUE(m_uint(m, "memory_used") >= 8008);
  msg_free(m);
  ASSERT_OK(stop_all());
}

TEST(worker_to_worker_and_missing_input)
{
  ASSERT_OK(sched_open());
  wproc *a = spawn("wa", "--threads", "1", (char *)NULL);
  wproc *b = spawn("wb", "--threads", "2", (char *)NULL);
  ASSERT_OK(hello_welcome(a, 1, 200));
  ASSERT_OK(hello_welcome(b, 2, 200));
  ASSERT_TRUE(strcmp(a->data_addr, b->data_addr) != 0);
  compute(a, 10, "x", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)5, "shape", 'I', (int64_t)2000,
          (char *)NULL);
  msg *m = expect(a, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  msg_free(m);

  input in = {"x", a->data_addr, 16000};
  compute(b, 11, "s", "sum", 0, &in, 1, (char *)NULL);
  m = expect(b, "task_done", 10000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "id"), 11);
  msg_free(m);
  tsr_chunk_header h;
  double *x = NULL, *s = NULL;
  ASSERT_OK(fetch(a->data_addr, "x", &h, (void **)&x));
  ASSERT_OK(fetch(b->data_addr, "s", &h, (void **)&s));
  double want = ref_sum(x, 2000);
  double got = s[0];
  free(x);
  free(s);
  ASSERT_TRUE(memcmp(&got, &want, sizeof got) == 0);
  /* B kept its copy of x only while a task of its own needed it. */
  ASSERT_EQ(fetch(b->data_addr, "x", &h, NULL), TSR_ENOTFOUND);

  /* The input's holder does not have it: missing_input, naming it. */
  input ghost = {"nokey", a->data_addr, 8};
  compute(b, 12, "m", "sum", 0, &ghost, 1, (char *)NULL);
  m = expect(b, "missing_input", 10000);
  ASSERT_TRUE(m != NULL);
  char buf[256];
  ASSERT_EQ(m_uint(m, "id"), 12);
  ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), "m");
  ASSERT_STREQ(m_str(m, "input", buf, sizeof buf), "nokey");
  ASSERT_STREQ(m_str(m, "from", buf, sizeof buf), a->data_addr);
  msg_free(m);
  ASSERT_EQ(fetch(b->data_addr, "m", &h, NULL), TSR_ENOTFOUND);
  ASSERT_OK(stop_all());
}

TEST(task_erred_unknown_op_and_shape_mismatch)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w-err", "--threads", "2", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  char buf[1024];
  compute(w, 1, "u", "frobnicate", 0, NULL, 0, (char *)NULL);
  msg *m = expect(w, "task_erred", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "id"), 1);
  ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), "u");
  ASSERT_CONTAINS(m_str(m, "message", buf, sizeof buf), "unknown op 'frobnicate' on worker w-err");
  msg_free(m);

  compute(w, 2, "a", "full", 0, NULL, 0, "shape", 'I', (int64_t)3, "value", 'f', 1.0, (char *)NULL);
  compute(w, 3, "b", "full", 0, NULL, 0, "shape", 'I', (int64_t)4, "value", 'f', 2.0, (char *)NULL);
  for (int i = 0; i < 2; i++) {
    m = expect(w, "task_done", 5000);
    ASSERT_TRUE(m != NULL);
    msg_free(m);
  }
  input ins[2] = {{"a", w->data_addr, 24}, {"b", w->data_addr, 32}};
  compute(w, 4, "ab", "add", 0, ins, 2, (char *)NULL);
  m = expect(w, "task_erred", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "id"), 4);
  m_str(m, "message", buf, sizeof buf);
  msg_free(m);
  ASSERT_TRUE(strncmp(buf, "add: ", 5) == 0);
  ASSERT_CONTAINS(buf, "[3]");
  ASSERT_CONTAINS(buf, "[4]");

  compute(w, 5, "f", "fail", 0, NULL, 0, "message", 's', "fail: on purpose", (char *)NULL);
  m = expect(w, "task_erred", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(m_str(m, "message", buf, sizeof buf), "fail: on purpose");
  msg_free(m);
  ASSERT_OK(stop_all());
}

TEST(free_then_fetch_is_not_found)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 100));
  compute(w, 1, "x", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)1, "shape", 'I', (int64_t)100,
          (char *)NULL);
  msg *m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  msg_free(m);
  tsr_chunk_header h;
  ASSERT_OK(fetch(w->data_addr, "x", &h, NULL));

  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "free", 2);
  tsr_pack_str(&wb.pk, "keys");
  msgpack_pack_array(&wb.pk, 2);
  tsr_pack_str(&wb.pk, "x");
  tsr_pack_str(&wb.pk, "never-was");
  send_wbuf(w, &wb);
  /* The free travels on the control socket, the fetch on the data socket:
   * wait until the worker's heartbeat shows it was handled. */
  int chunks = -1;
  for (int i = 0; i < 20 && chunks != 0; i++) {
    discard(w, "heartbeat");
    m = expect(w, "heartbeat", 1000);
    ASSERT_TRUE(m != NULL);
    chunks = (int)m_uint(m, "chunks");
    ASSERT_EQ(m_uint(m, "memory_used"), chunks ? 800 : 0);
    msg_free(m);
  }
  ASSERT_EQ(chunks, 0);
  ASSERT_EQ(fetch(w->data_addr, "x", &h, NULL), TSR_ENOTFOUND);
  ASSERT_OK(stop_all());
}

TEST(malformed_messages_do_not_kill_the_worker)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  /* Random bytes. */
  unsigned char junk[257];
  srand(12345);
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
  send_to(w, junk, sizeof junk);
  /* A msgpack array that claims a billion entries. */
  const unsigned char big[] = {0xdd, 0x40, 0x00, 0x00, 0x00, 0x01};
  send_to(w, big, sizeof big);
  /* A compute whose id is a string. */
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 5);
  tsr_pack_kv_str(&wb.pk, "id", "abc");
  tsr_pack_kv_str(&wb.pk, "key", "k");
  tsr_pack_kv_str(&wb.pk, "task_op", "noop");
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, 0);
  send_wbuf(w, &wb);
  /* A map without op, a bare integer, an unknown op, in one batch frame;
   * then a compute with bad params in the same frame still gets answered. */
  tsr_wbuf_init(&wb);
  msgpack_pack_map(&wb.pk, 1);
  tsr_pack_kv_int(&wb.pk, "x", 1);
  msgpack_pack_int(&wb.pk, 5);
  tsr_wbuf_begin(&wb, "bogus", 1);
  tsr_wbuf_begin(&wb, "compute", 5);
  tsr_pack_kv_uint(&wb.pk, "id", 77);
  tsr_pack_kv_str(&wb.pk, "key", "bad-params");
  tsr_pack_kv_str(&wb.pk, "task_op", "noop");
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_int(&wb.pk, 3);
  send_wbuf(w, &wb);
  /* A two-frame message. */
  zmq_send(S.router, w->ident, w->ident_len, ZMQ_SNDMORE);
  zmq_send(S.router, "a", 1, ZMQ_SNDMORE);
  zmq_send(S.router, "b", 1, 0);

  msg *m = expect(w, "task_erred", 5000);
  ASSERT_TRUE(m != NULL);
  char buf[512];
  ASSERT_EQ(m_uint(m, "id"), 77);
  ASSERT_CONTAINS(m_str(m, "message", buf, sizeof buf), "params");
  msg_free(m);
  int errors = 0, compute_refs = 0;
  pump(300);
  while ((m = expect(w, "error", 0)) != NULL) {
    errors++;
    ASSERT_EQ(m_int(m, "code"), TSR_EPROTO);
    compute_refs += strcmp(m_str(m, "ref", buf, sizeof buf), "compute") == 0;
    msg_free(m);
  }
  ASSERT_TRUE(errors >= 5);
  ASSERT_EQ(compute_refs, 1);

  /* Still alive and answering. */
  ASSERT_TRUE(alive(w));
  compute(w, 2, "ok", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)3, "shape", 'I', (int64_t)10,
          (char *)NULL);
  m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "id"), 2);
  msg_free(m);
  ASSERT_EQ(w->hellos, 1);
  ASSERT_OK(stop_all());
}

/* A fused compute (task_op "fused", docs/protocol.md) with two parts,
 * then one whose part names a value that does not exist: the first is
 * done, the second answered with task_erred naming the field, and the
 * worker goes on. */
static void send_fused(wproc *w, uint64_t id, const char *key, uint32_t sum_ref)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "compute", 6);
  tsr_pack_kv_uint(&wb.pk, "id", id);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "task_op", "fused");
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_map(&wb.pk, 1);
  tsr_pack_str(&wb.pk, "parts");
  msgpack_pack_array(&wb.pk, 2);
  msgpack_pack_map(&wb.pk, 4);
  tsr_pack_kv_str(&wb.pk, "key", "u");
  tsr_pack_kv_str(&wb.pk, "op", "random_uniform");
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_map(&wb.pk, 2);
  tsr_pack_kv_int(&wb.pk, "seed", 3);
  tsr_pack_str(&wb.pk, "shape");
  msgpack_pack_array(&wb.pk, 1);
  msgpack_pack_int64(&wb.pk, 10);
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, 0);
  msgpack_pack_map(&wb.pk, 4);
  tsr_pack_kv_str(&wb.pk, "key", key);
  tsr_pack_kv_str(&wb.pk, "op", "sum");
  tsr_pack_str(&wb.pk, "params");
  msgpack_pack_map(&wb.pk, 0);
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, 1);
  msgpack_pack_uint32(&wb.pk, sum_ref);
  tsr_pack_str(&wb.pk, "inputs");
  msgpack_pack_array(&wb.pk, 0);
  tsr_pack_kv_int(&wb.pk, "priority", 0);
  send_wbuf(w, &wb);
}

TEST(fused_compute_runs_and_a_malformed_one_is_answered)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  send_fused(w, 5, "fs", 0);
  msg *m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "id"), 5);
  msg_free(m);
  send_fused(w, 6, "bad", 7);
  m = expect(w, "task_erred", 5000);
  ASSERT_TRUE(m != NULL);
  char buf[512];
  ASSERT_EQ(m_uint(m, "id"), 6);
  ASSERT_CONTAINS(m_str(m, "message", buf, sizeof buf), "params.parts[1].inputs[0]");
  msg_free(m);
  /* The result is there, the intermediate is not; the worker goes on. */
  tsr_chunk_header hdr;
  void *bytes = NULL;
  ASSERT_OK(fetch(w->data_addr, "fs", &hdr, &bytes));
  free(bytes);
  bytes = NULL;
  ASSERT_TRUE(fetch(w->data_addr, "u", &hdr, &bytes) != 0);
  free(bytes);
  ASSERT_TRUE(alive(w));
  ASSERT_OK(stop_all());
}

TEST(sleep_keeps_a_thread_busy_while_heartbeats_flow)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", "--threads", "1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 100));
  compute(w, 1, "zz", "sleep", 0, NULL, 0, "ms", 'i', (int64_t)1200, (char *)NULL);
  /* Queued behind the sleep on the only thread: run by priority. */
  compute(w, 2, "p5", "noop", 5, NULL, 0, (char *)NULL);
  compute(w, 3, "p1", "noop", 1, NULL, 0, (char *)NULL);
  uint64_t t0 = tsr_now_ms();
  int busy_beats = 0;
  msg *m;
  while (tsr_now_ms() - t0 < 1000) {
    if ((m = expect(w, "heartbeat", 200)) == NULL) continue;
    busy_beats += m_uint(m, "tasks_running") == 1;
    msg_free(m);
  }
  ASSERT_TRUE(busy_beats >= 5);
  const char *order[] = {"zz", "p1", "p5"};
  char buf[64];
  for (int i = 0; i < 3; i++) {
    m = expect(w, "task_done", 5000);
    ASSERT_TRUE(m != NULL);
    ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), order[i]);
    if (i == 0) {
      ASSERT_EQ(m_uint(m, "dtype"), TSR_I64);
      ASSERT_TRUE(m_uint(m, "duration_us") >= 1200000);
    }
    msg_free(m);
  }
  ASSERT_OK(stop_all());
}

TEST(free_cancels_a_queued_task)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", "--threads", "1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 100));
  compute(w, 1, "zz", "sleep", 0, NULL, 0, "ms", 'i', (int64_t)500, (char *)NULL);
  compute(w, 2, "q", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)1, "shape", 'I', (int64_t)10,
          (char *)NULL);
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "free", 2);
  tsr_pack_str(&wb.pk, "keys");
  msgpack_pack_array(&wb.pk, 1);
  tsr_pack_str(&wb.pk, "q");
  send_wbuf(w, &wb);
  msg *m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  char buf[64];
  ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), "zz");
  msg_free(m);
  m = expect(w, "task_done", 700);
  ASSERT_TRUE(m == NULL);
  tsr_chunk_header h;
  ASSERT_EQ(fetch(w->data_addr, "q", &h, NULL), TSR_ENOTFOUND);
  discard(w, "heartbeat");
  m = expect(w, "heartbeat", 1000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(m_uint(m, "chunks"), 1);
  ASSERT_EQ(m_uint(m, "tasks_done"), 1);
  msg_free(m);
  /* The same key computed again afterwards runs normally. */
  compute(w, 2, "q", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)1, "shape", 'I', (int64_t)10,
          (char *)NULL);
  m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(m_str(m, "key", buf, sizeof buf), "q");
  msg_free(m);
  ASSERT_OK(stop_all());
}

TEST(worker_started_before_its_scheduler)
{
  ASSERT_OK(sched_open());
  sched_unbind();
  wproc *w = spawn("early", (char *)NULL);
  pump(1500);
  ASSERT_TRUE(alive(w));
  ASSERT_OK(sched_rebind());
  ASSERT_OK(hello_welcome(w, 1, 100));
  msg *m = expect(w, "heartbeat", 3000);
  ASSERT_TRUE(m != NULL);
  msg_free(m);
  ASSERT_OK(stop_all());
}

TEST(sigterm_says_goodbye_and_exits_0)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  pump(200);
  kill(w->pid, SIGTERM);
  msg *m = expect(w, "goodbye", 5000);
  ASSERT_TRUE(m != NULL);
  msg_free(m);
  int status = wait_exit(w, 5000);
  ASSERT_TRUE(status != -1);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_OK(stop_all());
}

TEST(silence_then_hello_again)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", "--heartbeat-timeout", "1s", "--heartbeat-interval", "200ms", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  compute(w, 1, "x", "random_uniform", 0, NULL, 0, "seed", 'i', (int64_t)1, "shape", 'I', (int64_t)10,
          (char *)NULL);
  msg *m = expect(w, "task_done", 5000);
  ASSERT_TRUE(m != NULL);
  msg_free(m);
  char first_ident[256];
  size_t first_len = w->ident_len;
  memcpy(first_ident, w->ident, first_len);
  /* Say nothing: after 1 s the worker says hello on a new connection,
   * keeping its results for a scheduler that restarted with its journal
   * (listed in hello's `chunks`, docs/journal.md). */
  uint64_t t0 = tsr_now_ms();
  ASSERT_OK(hello_welcome(w, 2, 200));
  uint64_t waited = tsr_now_ms() - t0;
  ASSERT_TRUE(waited >= 800 && waited < 5000);
  ASSERT_EQ(w->hellos, 2);
  ASSERT_TRUE(w->ident_len != first_len || memcmp(w->ident, first_ident, first_len) != 0);
  tsr_chunk_header h;
  ASSERT_OK(fetch(w->data_addr, "x", &h, NULL));
  ASSERT_TRUE(alive(w));
  ASSERT_OK(stop_all());
}

TEST(unknown_peer_then_hello_again_and_version_error_is_fatal)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w1", (char *)NULL);
  ASSERT_OK(hello_welcome(w, 1, 200));
  pump(100);
  send_error(w, TSR_ENOTFOUND, "unknown peer");
  ASSERT_OK(hello_welcome(w, 2, 200));
  ASSERT_EQ(w->hellos, 2);
  /* What a restarted scheduler says to a peer it never met. */
  pump(100);
  send_error(w, TSR_EPROTO, "say hello first");
  ASSERT_OK(hello_welcome(w, 3, 200));
  ASSERT_EQ(w->hellos, 3);
  /* Any other error is only logged. */
  send_error(w, TSR_EINVAL, "something else");
  pump(300);
  ASSERT_EQ(w->hellos, 3);
  ASSERT_TRUE(alive(w));
  send_error(w, TSR_EVERSION, "protocol 2 expected, got 1");
  int status = wait_exit(w, 5000);
  ASSERT_TRUE(status != -1);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 1);
  ASSERT_OK(stop_all());
}

TEST(command_line)
{
  ASSERT_OK(sched_open());
  wproc *w = spawn("w-help", "--help", (char *)NULL);
  int status = wait_exit(w, 5000);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  w = spawn("w-bad", "--threads", "0", (char *)NULL);
  status = wait_exit(w, 5000);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  w = spawn("w-bad2", "--heartbeat-timeout", "soon", (char *)NULL);
  status = wait_exit(w, 5000);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  w = spawn("w-bad4", "--scheduler", "tcp//typo:1", (char *)NULL);
  status = wait_exit(w, 5000);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  w = spawn("w-bad3", "--no-such-flag", "1", (char *)NULL);
  status = wait_exit(w, 5000);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  ASSERT_OK(stop_all());
}

#define RUNW(name)                  \
  do {                              \
    RUN(name);                      \
    sched_close(kit_current_failed); \
  } while (0)

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s PATH/TO/tessera-worker\n", argv[0]);
    return 2;
  }
  worker_bin = argv[1];
  signal(SIGPIPE, SIG_IGN);
  RUNW(hello_then_heartbeats);
  RUNW(compute_then_fetch_result);
  RUNW(worker_to_worker_and_missing_input);
  RUNW(task_erred_unknown_op_and_shape_mismatch);
  RUNW(free_then_fetch_is_not_found);
  RUNW(malformed_messages_do_not_kill_the_worker);
  RUNW(fused_compute_runs_and_a_malformed_one_is_answered);
  RUNW(sleep_keeps_a_thread_busy_while_heartbeats_flow);
  RUNW(free_cancels_a_queued_task);
  RUNW(worker_started_before_its_scheduler);
  RUNW(sigterm_says_goodbye_and_exits_0);
  RUNW(silence_then_hello_again);
  RUNW(unknown_peer_then_hello_again_and_version_error_is_fatal);
  RUNW(command_line);
  return kit_summary();
}
