/* Protocol tests of tessera-scheduler: the real binary runs as a child
 * process on tcp://127.0.0.1:0 (address read from --address-file in a
 * temporary directory); this program plays fake workers and clients over
 * ZeroMQ DEALER sockets, speaking docs/protocol.md directly. On a failed
 * test the scheduler's log is printed.
 *
 * The binary's path comes from the TSR_SCHED_BIN compile definition or the
 * first argument. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kit.h"
#include "net/net.h"
#include "util/util.h"
#include "wire/wire.h"

#ifndef TSR_SCHED_BIN
#define TSR_SCHED_BIN "tessera-scheduler"
#endif

static const char *sched_bin = TSR_SCHED_BIN;
static void *zctx;

/* ---------- the scheduler process ---------- */

typedef struct daemon {
  pid_t pid;
  char dir[128];
  char addr_file[192];
  char log_file[192];
  char address[256];
} daemon_t;

static void dump_log(const daemon_t *d)
{
  FILE *f = fopen(d->log_file, "r");
  if (f == NULL) return;
  char line[2048];
  fprintf(stderr, "----- scheduler log (%s) -----\n", d->log_file);
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fprintf(stderr, "----- end of log -----\n");
  fclose(f);
}

static int start_daemon(daemon_t *d, const char *const *extra)
{
  memset(d, 0, sizeof *d);
  snprintf(d->dir, sizeof d->dir, "/tmp/tsr-sched-XXXXXX");
  if (mkdtemp(d->dir) == NULL) return -1;
  snprintf(d->addr_file, sizeof d->addr_file, "%s/address", d->dir);
  snprintf(d->log_file, sizeof d->log_file, "%s/scheduler.log", d->dir);
  const char *argv[32] = {sched_bin, "--listen", "tcp://127.0.0.1:0", "--address-file", d->addr_file,
                          "--log-level", "debug"};
  int argc = 7;
  for (int i = 0; extra && extra[i] && argc < 30; i++) argv[argc++] = extra[i];
  argv[argc] = NULL;
  d->pid = fork();
  if (d->pid < 0) return -1;
  if (d->pid == 0) {
    int fd = open(d->log_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 2);
    execv(sched_bin, (char *const *)argv);
    _exit(127);
  }
  for (int i = 0; i < 500; i++) {
    FILE *f = fopen(d->addr_file, "r");
    if (f != NULL) {
      bool ok = fgets(d->address, sizeof d->address, f) != NULL;
      fclose(f);
      d->address[strcspn(d->address, "\n")] = '\0';
      if (ok && d->address[0]) return 0;
    }
    usleep(10000);
  }
  return -1;
}

/* SIGTERM, then the exit status (or -1 when it had to be killed). */
static int stop_daemon(daemon_t *d, bool dump)
{
  if (dump) dump_log(d);
  if (d->pid <= 0) return -1;
  kill(d->pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; i++) {
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      d->pid = 0;
      unlink(d->addr_file);
      unlink(d->log_file);
      rmdir(d->dir);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    usleep(10000);
  }
  kill(d->pid, SIGKILL);
  waitpid(d->pid, &status, 0);
  d->pid = 0;
  return -1;
}

/* ---------- fake peers ---------- */

#define MAX_QUEUED 4096

typedef struct msg {
  char *bytes;
  size_t len;
} msg_t;

typedef struct peer {
  void *sock;
  const char *name;
  bool heartbeat;           /* send heartbeats while the test waits */
  uint64_t last_hb;
  msg_t queue[MAX_QUEUED];
  int head, tail;
  msgpack_unpacked cur;     /* the message last returned */
  char *cur_bytes;
  int freed;                /* keys seen in `free` messages, returned or skipped */
} peer_t;

#define MAX_PEERS 16
static peer_t *live_peers[MAX_PEERS];

static void peer_open(peer_t *p, const char *address, const char *name)
{
  memset(p, 0, sizeof *p);
  p->name = name;
  p->sock = zmq_socket(zctx, ZMQ_DEALER);
  tsr_net_socket_defaults(p->sock);
  zmq_connect(p->sock, address);
  msgpack_unpacked_init(&p->cur);
  for (int i = 0; i < MAX_PEERS; i++)
    if (live_peers[i] == NULL) {
      live_peers[i] = p;
      break;
    }
}

static void peer_close(peer_t *p)
{
  for (int i = 0; i < MAX_PEERS; i++)
    if (live_peers[i] == p) live_peers[i] = NULL;
  for (int i = p->head; i != p->tail; i = (i + 1) % MAX_QUEUED) free(p->queue[i].bytes);
  msgpack_unpacked_destroy(&p->cur);
  free(p->cur_bytes);
  zmq_close(p->sock);
  p->sock = NULL;
}

static void send_wbuf(peer_t *p, tsr_wbuf *wb)
{
  zmq_send(p->sock, wb->sbuf.data, wb->sbuf.size, 0);
  tsr_wbuf_free(wb);
}

static void send_raw(peer_t *p, const void *data, size_t len) { zmq_send(p->sock, data, len, 0); }

static void send_heartbeats(void)
{
  uint64_t now = tsr_now_ms();
  for (int i = 0; i < MAX_PEERS; i++) {
    peer_t *p = live_peers[i];
    if (p == NULL || !p->heartbeat || now - p->last_hb < 150) continue;
    tsr_wbuf wb;
    tsr_wbuf_init(&wb);
    tsr_wbuf_begin(&wb, "heartbeat", 1);
    send_wbuf(p, &wb);
    p->last_hb = now;
  }
}

/* Splits a received frame into its messages and queues them. */
static void enqueue_frame(peer_t *p, const char *data, size_t len)
{
  size_t off = 0;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  while (off < len) {
    size_t start = off;
    if (msgpack_unpack_next(&u, data, len, &off) != MSGPACK_UNPACK_SUCCESS) break;
    char *copy = malloc(off - start);
    memcpy(copy, data + start, off - start);
    p->queue[p->tail] = (msg_t){copy, off - start};
    p->tail = (p->tail + 1) % MAX_QUEUED;
  }
  msgpack_unpacked_destroy(&u);
}

/* Pumps the socket for up to ms. */
static void pump(peer_t *p, int ms)
{
  zmq_pollitem_t it = {p->sock, 0, ZMQ_POLLIN, 0};
  send_heartbeats();
  if (zmq_poll(&it, 1, ms) <= 0) return;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, p->sock, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return;
    }
    enqueue_frame(p, zmq_msg_data(&m), zmq_msg_size(&m));
    zmq_msg_close(&m);
  }
}

static const char *str_field(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
  buf[0] = '\0';
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v && v->type == MSGPACK_OBJECT_STR) snprintf(buf, cap, "%.*s", (int)v->via.str.size, v->via.str.ptr);
  return buf;
}

static int64_t int_field(const msgpack_object *map, const char *key)
{
  const msgpack_object *v = tsr_wire_field(map, key);
  if (v == NULL) return INT64_MIN;
  int64_t x = INT64_MIN;
  tsr_obj_int(v, &x, NULL);
  return x;
}

/* The next message whose op is `op` (NULL: any), skipping heartbeats and
 * other ops (logged). Waits up to timeout_ms; NULL on timeout. The result
 * lives until the next call on this peer. */
static const msgpack_object *next_msg(peer_t *p, const char *op, int timeout_ms)
{
  uint64_t deadline = tsr_now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    while (p->head != p->tail) {
      msg_t m = p->queue[p->head];
      p->head = (p->head + 1) % MAX_QUEUED;
      size_t off = 0;
      msgpack_unpacked_destroy(&p->cur);
      msgpack_unpacked_init(&p->cur);
      free(p->cur_bytes);
      p->cur_bytes = m.bytes;  /* the unpacked object may point into it */
      msgpack_unpack_next(&p->cur, m.bytes, m.len, &off);
      char got[64];
      str_field(&p->cur.data, "op", got, sizeof got);
      if (strcmp(got, "heartbeat") == 0) continue;
      if (strcmp(got, "free") == 0) {
        const msgpack_object *keys = tsr_wire_field(&p->cur.data, "keys");
        if (keys && keys->type == MSGPACK_OBJECT_ARRAY) p->freed += (int)keys->via.array.size;
      }
      if (op != NULL && strcmp(got, op) != 0) {
        if (strcmp(got, "free") == 0) continue;
        fprintf(stderr, "  (%s skipped '%s' while waiting for '%s')\n", p->name, got, op);
        continue;
      }
      return &p->cur.data;
    }
    uint64_t now = tsr_now_ms();
    if (now >= deadline) return NULL;
    pump(p, (int)(deadline - now < 50 ? deadline - now : 50));
  }
}

/* Waits until nothing but heartbeats arrives for ms; returns the number of
 * other messages seen (dropped). */
static int drain_quiet(peer_t *p, int ms)
{
  int n = 0;
  while (next_msg(p, NULL, ms) != NULL) n++;
  return n;
}

static void hello_worker(peer_t *p, const char *name, const char *data_addr, int threads, const char *const *ops)
{
  int nops = 0;
  while (ops[nops]) nops++;
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "hello", 10);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb.pk, "role", "worker");
  tsr_pack_kv_str(&wb.pk, "name", name);
  tsr_pack_kv_uint(&wb.pk, "pid", (uint64_t)getpid());
  tsr_pack_kv_uint(&wb.pk, "threads", (uint64_t)threads);
  tsr_pack_kv_uint(&wb.pk, "memory_limit", 0);
  tsr_pack_kv_str(&wb.pk, "data_address", data_addr);
  tsr_pack_kv_str(&wb.pk, "device", "cpu");
  tsr_pack_str(&wb.pk, "ops");
  msgpack_pack_array(&wb.pk, (size_t)nops);
  for (int i = 0; i < nops; i++) tsr_pack_str(&wb.pk, ops[i]);
  send_wbuf(p, &wb);
}

static void hello_client(peer_t *p, const char *name, uint64_t proto)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "hello", 4);
  tsr_pack_kv_uint(&wb.pk, "proto", proto);
  tsr_pack_kv_str(&wb.pk, "role", "client");
  tsr_pack_kv_str(&wb.pk, "name", name);
  send_wbuf(p, &wb);
}

static const char *const OPS[] = {"random_uniform", "add", "scale", "sum", "noop", "fail", NULL};

/* A task for submit: "key:op:in1,in2" */
static void pack_task(msgpack_packer *pk, const char *spec)
{
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  char *key = buf, *op = strchr(buf, ':');
  *op++ = '\0';
  char *inputs = strchr(op, ':');
  if (inputs) *inputs++ = '\0';
  int n = 0;
  char *in[64];
  for (char *s = inputs ? strtok(inputs, ",") : NULL; s && n < 64; s = strtok(NULL, ",")) in[n++] = s;
  msgpack_pack_map(pk, 4);
  tsr_pack_kv_str(pk, "key", key);
  tsr_pack_kv_str(pk, "op", op);
  tsr_pack_str(pk, "params");
  msgpack_pack_map(pk, 1);
  tsr_pack_kv_int(pk, "seed", 7);
  tsr_pack_str(pk, "inputs");
  msgpack_pack_array(pk, (size_t)n);
  for (int i = 0; i < n; i++) tsr_pack_str(pk, in[i]);
}

static void submit(peer_t *c, uint64_t graph, const char *const *tasks, const char *const *wants, bool more)
{
  int n = 0, nw = 0;
  while (tasks[n]) n++;
  while (wants && wants[nw]) nw++;
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "submit", 3 + (wants != NULL) + more);
  tsr_pack_kv_uint(&wb.pk, "graph", graph);
  tsr_pack_str(&wb.pk, "tasks");
  msgpack_pack_array(&wb.pk, (size_t)n);
  for (int i = 0; i < n; i++) pack_task(&wb.pk, tasks[i]);
  if (wants) {
    tsr_pack_str(&wb.pk, "wants");
    msgpack_pack_array(&wb.pk, (size_t)nw);
    for (int i = 0; i < nw; i++) tsr_pack_str(&wb.pk, wants[i]);
  }
  if (more) tsr_pack_kv_bool(&wb.pk, "more", true);
  send_wbuf(c, &wb);
}

static void task_done(peer_t *w, const msgpack_object *compute)
{
  char key[1100];
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "task_done", 7);
  tsr_pack_kv_uint(&wb.pk, "id", (uint64_t)int_field(compute, "id"));
  tsr_pack_kv_str(&wb.pk, "key", str_field(compute, "key", key, sizeof key));
  tsr_pack_kv_uint(&wb.pk, "nbytes", 800);
  tsr_meta meta = {.dtype = TSR_F64, .ndim = 1, .shape = {100}};
  tsr_pack_meta(&wb.pk, &meta);
  tsr_pack_kv_uint(&wb.pk, "duration_us", 5);
  send_wbuf(w, &wb);
}

static void simple_msg(peer_t *p, const char *op)
{
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, op, 1);
  send_wbuf(p, &wb);
}

/* status -> tasks_total, or -1 */
static int64_t status_total(peer_t *c)
{
  static uint64_t req = 100;
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_uint(&wb.pk, "req", ++req);
  send_wbuf(c, &wb);
  const msgpack_object *m = next_msg(c, "status_reply", 3000);
  if (m == NULL || int_field(m, "req") != (int64_t)req) return -1;
  return int_field(m, "tasks_total");
}

/* Answers computes until the client sees key `want` done. Records the
 * order of computed keys into order (space separated). */
static bool serve_until_done(peer_t *w, peer_t *c, const char *want, char *order, size_t cap)
{
  uint64_t deadline = tsr_now_ms() + 5000;
  if (order) order[0] = '\0';
  while (tsr_now_ms() < deadline) {
    const msgpack_object *m = next_msg(w, "compute", 20);
    if (m != NULL) {
      char key[1100];
      str_field(m, "key", key, sizeof key);
      if (order) snprintf(order + strlen(order), cap - strlen(order), "%s%s", order[0] ? " " : "", key);
      task_done(w, m);
      continue;
    }
    pump(c, 1);
    for (int i = c->head; i != c->tail; i = (i + 1) % MAX_QUEUED) {
      msgpack_unpacked u;
      msgpack_unpacked_init(&u);
      size_t off = 0;
      msgpack_unpack_next(&u, c->queue[i].bytes, c->queue[i].len, &off);
      char op[32], key[1100];
      bool hit = strcmp(str_field(&u.data, "op", op, sizeof op), "key_done") == 0 &&
                 strcmp(str_field(&u.data, "key", key, sizeof key), want) == 0;
      msgpack_unpacked_destroy(&u);
      if (hit) return true;
    }
  }
  return false;
}

/* ---------- fixture ---------- */

static daemon_t D;
static peer_t W1, W2, C1, C2;

static bool expect_welcome(peer_t *p)
{
  const msgpack_object *m = next_msg(p, "welcome", 3000);
  return m != NULL && int_field(m, "proto") == TSR_PROTOCOL_VERSION && int_field(m, "heartbeat_ms") > 0;
}

static void close_all(void)
{
  peer_t *ps[] = {&W1, &W2, &C1, &C2};
  for (int i = 0; i < 4; i++)
    if (ps[i]->sock) peer_close(ps[i]);
}

/* Runs a test body with a fresh scheduler; dumps its log if it failed. */
#define WITH_DAEMON(body, ...)                                                      \
  do {                                                                             \
    const char *const extra_[] = {__VA_ARGS__ NULL};                               \
    if (start_daemon(&D, extra_) != 0) {                                           \
      dump_log(&D);                                                                \
      KIT_FAIL_("scheduler did not start");                                        \
    }                                                                              \
    body(&D);                                                                      \
    close_all();                                                                   \
    int rc_ = stop_daemon(&D, kit_current_failed);                                 \
    if (!kit_current_failed) ASSERT_EQ(rc_, 0);                                    \
  } while (0)

/* ---------- tests ---------- */

static void body_version(daemon_t *d)
{
  peer_open(&C1, d->address, "c1");
  hello_client(&C1, "old", 2);
  const msgpack_object *m = next_msg(&C1, "error", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(int_field(m, "code"), TSR_EVERSION);
  char text[512];
  str_field(m, "message", text, sizeof text);
  ASSERT_CONTAINS(text, "2");
  ASSERT_CONTAINS(text, "1");
  /* not registered: anything else is refused */
  ASSERT_TRUE(status_total(&C1) == -1);
  hello_client(&C1, "new", TSR_PROTOCOL_VERSION);
  ASSERT_TRUE(expect_welcome(&C1));
  ASSERT_EQ(status_total(&C1), 0);
}

TEST(hello_version_mismatch) { WITH_DAEMON(body_version, ); }

static void body_diamond(daemon_t *d)
{
  peer_open(&W1, d->address, "w1");
  peer_open(&C1, d->address, "c1");
  hello_worker(&W1, "w1", "tcp://127.0.0.1:7001", 1, OPS);
  ASSERT_TRUE(expect_welcome(&W1));
  hello_client(&C1, "c1", TSR_PROTOCOL_VERSION);
  ASSERT_TRUE(expect_welcome(&C1));
  W1.heartbeat = C1.heartbeat = true;
  const char *const g[] = {"a:random_uniform", "b:scale:a", "c:scale:a", "d:add:b,c", NULL};
  submit(&C1, 1, g, NULL, false);
  const msgpack_object *m = next_msg(&C1, "submitted", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(int_field(m, "tasks"), 4);
  /* only a is runnable */
  m = next_msg(&W1, "compute", 3000);
  ASSERT_TRUE(m != NULL);
  char key[64], op[64];
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "a");
  ASSERT_STREQ(str_field(m, "task_op", op, sizeof op), "random_uniform");
  const msgpack_object *params = tsr_wire_field(m, "params");
  ASSERT_TRUE(params != NULL && params->type == MSGPACK_OBJECT_MAP);
  ASSERT_EQ(int_field(params, "seed"), 7);
  ASSERT_EQ(drain_quiet(&W1, 200), 0);
  task_done(&W1, m);
  /* then b and c, both with input a from w1's data address */
  int seen = 0;
  for (int i = 0; i < 2; i++) {
    m = next_msg(&W1, "compute", 3000);
    ASSERT_TRUE(m != NULL);
    str_field(m, "key", key, sizeof key);
    ASSERT_TRUE(strcmp(key, "b") == 0 || strcmp(key, "c") == 0);
    seen |= key[0] == 'b' ? 1 : 2;
    const msgpack_object *inputs = tsr_wire_field(m, "inputs");
    ASSERT_TRUE(inputs && inputs->type == MSGPACK_OBJECT_ARRAY && inputs->via.array.size == 1);
    const msgpack_object *in0 = &inputs->via.array.ptr[0];
    ASSERT_TRUE(in0->type == MSGPACK_OBJECT_ARRAY && in0->via.array.size == 3);
    ASSERT_TRUE(in0->via.array.ptr[1].type == MSGPACK_OBJECT_STR);
    ASSERT_EQ(in0->via.array.ptr[1].via.str.size, strlen("tcp://127.0.0.1:7001"));
    ASSERT_EQ(in0->via.array.ptr[2].via.u64, 800);
    task_done(&W1, m);
  }
  ASSERT_EQ(seen, 3);
  m = next_msg(&W1, "compute", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "d");
  task_done(&W1, m);
  m = next_msg(&C1, "key_done", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "d");
  ASSERT_EQ(int_field(m, "nbytes"), 800);
  ASSERT_EQ(int_field(m, "dtype"), TSR_F64);
  /* intermediates a, b, c are freed once d is in memory */
  for (int i = 0; i < 20 && W1.freed < 3; i++) next_msg(&W1, "free", 100);
  ASSERT_EQ(W1.freed, 3);
  ASSERT_EQ(status_total(&C1), 4);
}

TEST(diamond_computed_in_dependency_order) { WITH_DAEMON(body_diamond, ); }


static bool expect_error(peer_t *p, int code, const char *needle, const char *ref)
{
  const msgpack_object *m = next_msg(p, "error", 3000);
  char text[1024], r[64];
  if (m == NULL) {
    fprintf(stderr, "  no error reply (wanted \"%s\")\n", needle);
    return false;
  }
  str_field(m, "message", text, sizeof text);
  str_field(m, "ref", r, sizeof r);
  bool ok = int_field(m, "code") == code && strstr(text, needle) != NULL && (ref == NULL || strcmp(r, ref) == 0);
  if (!ok) fprintf(stderr, "  error %lld \"%s\" ref '%s', wanted %d \"%s\"\n", (long long)int_field(m, "code"), text, r, code, needle);
  return ok;
}

static void connect_client(peer_t *c, daemon_t *d, const char *name)
{
  peer_open(c, d->address, name);
  hello_client(c, name, TSR_PROTOCOL_VERSION);
  if (expect_welcome(c)) c->heartbeat = true;
}

static void connect_worker(peer_t *w, daemon_t *d, const char *name, const char *data, int threads)
{
  peer_open(w, d->address, name);
  hello_worker(w, name, data, threads, OPS);
  if (expect_welcome(w)) w->heartbeat = true;
}

static void body_malformed(daemon_t *d)
{
  connect_client(&C1, d, "c1");
  /* random bytes (0xc1 is never valid msgpack) */
  const unsigned char junk[] = {0xc1, 0x17, 0x99, 0x00, 0xff, 0x42};
  send_raw(&C1, junk, sizeof junk);
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "msgpack", NULL));
  /* a map that declares two pairs and stops after one key */
  const unsigned char truncated[] = {0x82, 0xa2, 'o', 'p', 0xa6, 's', 't', 'a', 't', 'u', 's', 0xa3, 'r', 'e'};
  send_raw(&C1, truncated, sizeof truncated);
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "truncated", NULL));
  /* a map without op, then a valid status in the same frame */
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  msgpack_pack_map(&wb.pk, 1);
  tsr_pack_kv_int(&wb.pk, "x", 1);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_uint(&wb.pk, "req", 5);
  send_wbuf(&C1, &wb);
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "'op'", NULL));
  const msgpack_object *m = next_msg(&C1, "status_reply", 3000);
  ASSERT_TRUE(m != NULL && int_field(m, "req") == 5);
  /* wrong field types */
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_str(&wb.pk, "req", "soon");
  send_wbuf(&C1, &wb);
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "'req'", "status"));
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "submit", 3);
  tsr_pack_kv_str(&wb.pk, "graph", "one");
  tsr_pack_kv_int(&wb.pk, "tasks", 3);
  send_wbuf(&C1, &wb);
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "'graph'", "submit"));
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "submit", 3);
  tsr_pack_kv_uint(&wb.pk, "graph", 9);
  tsr_pack_str(&wb.pk, "tasks");
  msgpack_pack_array(&wb.pk, 1);
  msgpack_pack_map(&wb.pk, 2);
  tsr_pack_kv_int(&wb.pk, "key", 12);
  tsr_pack_kv_str(&wb.pk, "op", "noop");
  send_wbuf(&C1, &wb);
  m = next_msg(&C1, "submit_error", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_EQ(int_field(m, "code"), TSR_EPROTO);
  char text[512];
  ASSERT_CONTAINS(str_field(m, "message", text, sizeof text), "'key'");
  /* unknown op; an op of the other role */
  simple_msg(&C1, "frobnicate");
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "unknown message op 'frobnicate'", "frobnicate"));
  simple_msg(&C1, "task_done");
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "not valid from a client", "task_done"));
  /* two frames in one message */
  zmq_send(C1.sock, "a", 1, ZMQ_SNDMORE);
  zmq_send(C1.sock, "b", 1, 0);
  ASSERT_TRUE(expect_error(&C1, TSR_EPROTO, "one frame", NULL));
  /* before hello */
  peer_open(&C2, d->address, "c2");
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_uint(&wb.pk, "req", 1);
  send_wbuf(&C2, &wb);
  ASSERT_TRUE(expect_error(&C2, TSR_EPROTO, "say hello first", "status"));
  send_raw(&C2, junk, sizeof junk);
  ASSERT_TRUE(expect_error(&C2, TSR_EPROTO, "msgpack", NULL));
  /* a hello with a wrong role and one with a wrong field type */
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "hello", 4);
  tsr_pack_kv_uint(&wb.pk, "proto", TSR_PROTOCOL_VERSION);
  tsr_pack_kv_str(&wb.pk, "role", "tourist");
  tsr_pack_kv_str(&wb.pk, "name", "x");
  send_wbuf(&C2, &wb);
  ASSERT_TRUE(expect_error(&C2, TSR_EPROTO, "role", "hello"));
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "hello", 4);
  tsr_pack_kv_str(&wb.pk, "proto", "1");
  tsr_pack_kv_str(&wb.pk, "role", "client");
  tsr_pack_kv_str(&wb.pk, "name", "x");
  send_wbuf(&C2, &wb);
  ASSERT_TRUE(expect_error(&C2, TSR_EPROTO, "'proto'", "hello"));
  /* a worker reporting a task it was never given: ignored, no reply */
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7101", 2);
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "task_done", 7);
  tsr_pack_kv_uint(&wb.pk, "id", 123456);
  tsr_pack_kv_str(&wb.pk, "key", "ghost");
  tsr_pack_kv_uint(&wb.pk, "nbytes", 8);
  tsr_meta meta = {.dtype = TSR_F64, .ndim = 0};
  tsr_pack_meta(&wb.pk, &meta);
  tsr_pack_kv_uint(&wb.pk, "duration_us", 1);
  send_wbuf(&W1, &wb);
  /* still serving everyone */
  ASSERT_EQ(status_total(&C1), 0);
  hello_client(&C2, "c2", TSR_PROTOCOL_VERSION);
  ASSERT_TRUE(expect_welcome(&C2));
  ASSERT_EQ(status_total(&C2), 0);
  ASSERT_EQ(drain_quiet(&W1, 100), 0);
}

TEST(malformed_messages_get_errors_and_the_daemon_keeps_serving) { WITH_DAEMON(body_malformed, ); }

static bool expect_submit_error(peer_t *c, uint64_t graph, int code, const char *n1, const char *n2)
{
  const msgpack_object *m = next_msg(c, NULL, 3000);
  char op[32], text[1024];
  if (m == NULL || strcmp(str_field(m, "op", op, sizeof op), "submit_error") != 0) {
    fprintf(stderr, "  wanted submit_error, got %s\n", m ? op : "nothing");
    return false;
  }
  str_field(m, "message", text, sizeof text);
  bool ok = int_field(m, "graph") == (int64_t)graph && int_field(m, "code") == code && strstr(text, n1) &&
            (n2 == NULL || strstr(text, n2));
  if (!ok) fprintf(stderr, "  submit_error %lld \"%s\"\n", (long long)int_field(m, "code"), text);
  return ok;
}

static void body_submit_errors(daemon_t *d)
{
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7201", 2);
  connect_client(&C1, d, "c1");
  const char *const cycle[] = {"r:random_uniform", "x:add:r,y", "y:scale:x", NULL};
  submit(&C1, 1, cycle, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 1, TSR_ECYCLE, "'x'", "'y'"));
  const char *const self[] = {"s:scale:s", NULL};
  submit(&C1, 2, self, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 2, TSR_ECYCLE, "'s'", NULL));
  const char *const missing[] = {"m:scale:nope", NULL};
  submit(&C1, 3, missing, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 3, TSR_EMISSING, "'nope'", "'m'"));
  const char *const unknown[] = {"u:frob", NULL};
  submit(&C1, 4, unknown, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 4, TSR_EUNKNOWNOP, "'frob'", "'u'"));
  const char *const wanted[] = {"k:random_uniform", NULL};
  const char *const wants[] = {"zzz", NULL};
  submit(&C1, 5, wanted, wants, false);
  ASSERT_TRUE(expect_submit_error(&C1, 5, TSR_ENOTFOUND, "'zzz'", NULL));
  const char *const twice[] = {"k:random_uniform", "k:noop", NULL};
  submit(&C1, 6, twice, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 6, TSR_EEXIST, "'k'", NULL));
  /* nothing of the rejected graphs was kept */
  ASSERT_EQ(status_total(&C1), 0);
  /* an accepted graph, then a different definition of its key, then an identical one */
  submit(&C1, 7, wanted, NULL, false);
  const msgpack_object *m = next_msg(&C1, "submitted", 3000);
  ASSERT_TRUE(m != NULL && int_field(m, "tasks") == 1);
  const char *const other[] = {"k:noop", NULL};
  submit(&C1, 8, other, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 8, TSR_EEXIST, "'k'", "op"));
  const char *const other2[] = {"j:random_uniform", "k:scale:j", NULL};
  submit(&C1, 9, other2, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 9, TSR_EEXIST, "'k'", NULL));
  ASSERT_EQ(status_total(&C1), 1);
  const char *const same[] = {"k:random_uniform", "k2:scale:k", NULL};
  submit(&C1, 10, same, NULL, false);
  m = next_msg(&C1, "submitted", 3000);
  ASSERT_TRUE(m != NULL && int_field(m, "tasks") == 1);
  /* the same graph number twice */
  submit(&C1, 10, same, NULL, false);
  ASSERT_TRUE(expect_submit_error(&C1, 10, TSR_EEXIST, "graph 10", NULL));
  ASSERT_EQ(status_total(&C1), 2);
}

TEST(submit_errors_name_the_keys_and_keep_nothing) { WITH_DAEMON(body_submit_errors, ); }

static void body_worker_timeout(daemon_t *d)
{
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7301", 1);
  connect_worker(&W2, d, "w2", "tcp://127.0.0.1:7302", 1);
  connect_client(&C1, d, "c1");
  W1.heartbeat = false;  /* w1 will die silently */
  const char *const g[] = {"t:random_uniform", NULL};
  submit(&C1, 1, g, NULL, false);
  ASSERT_TRUE(next_msg(&C1, "submitted", 3000) != NULL);
  const msgpack_object *m = next_msg(&W1, "compute", 3000);
  ASSERT_TRUE(m != NULL);
  char key[64];
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "t");
  /* w1 never answers: after the 1 s timeout t goes to w2 */
  uint64_t t0 = tsr_now_ms();
  m = next_msg(&W2, "compute", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "t");
  ASSERT_TRUE(tsr_now_ms() - t0 >= 500);
  task_done(&W2, m);
  m = next_msg(&C1, "key_done", 3000);
  ASSERT_TRUE(m != NULL);
  const msgpack_object *where = tsr_wire_field(m, "where");
  ASSERT_TRUE(where && where->type == MSGPACK_OBJECT_ARRAY && where->via.array.size == 1);
  ASSERT_EQ(where->via.array.ptr[0].via.str.size, strlen("tcp://127.0.0.1:7302"));
  /* w1 speaks again: it is told it is unknown, says hello, is back */
  simple_msg(&W1, "heartbeat");
  ASSERT_TRUE(expect_error(&W1, TSR_ENOTFOUND, "unknown peer", "heartbeat"));
  hello_worker(&W1, "w1", "tcp://127.0.0.1:7301", 1, OPS);
  ASSERT_TRUE(expect_welcome(&W1));
  W1.heartbeat = true;
  /* now w2, holding t, dies: the client hears key_lost and t is recomputed on w1 */
  W2.heartbeat = false;
  m = next_msg(&C1, "key_lost", 5000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "t");
  m = next_msg(&W1, "compute", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "t");
  task_done(&W1, m);
  ASSERT_TRUE(next_msg(&C1, "key_done", 3000) != NULL);
}

TEST(worker_timeout_reschedules_and_recomputes)
{
  WITH_DAEMON(body_worker_timeout, "--heartbeat-timeout", "1s", "--heartbeat-interval", "200ms", );
}

static void body_goodbye(daemon_t *d)
{
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7401", 2);
  connect_client(&C1, d, "c1");
  const char *const g[] = {"a:random_uniform", "b:scale:a", NULL};
  submit(&C1, 1, g, NULL, false);
  char order[256];
  ASSERT_TRUE(serve_until_done(&W1, &C1, "b", order, sizeof order));
  ASSERT_STREQ(order, "a b");
  for (int i = 0; i < 20 && W1.freed < 1; i++) next_msg(&W1, "free", 100);
  ASSERT_EQ(W1.freed, 1);  /* a, once b was done */
  simple_msg(&C1, "goodbye");
  const msgpack_object *m = next_msg(&W1, "free", 3000);
  ASSERT_TRUE(m != NULL);
  const msgpack_object *keys = tsr_wire_field(m, "keys");
  ASSERT_TRUE(keys && keys->via.array.size == 1 && keys->via.array.ptr[0].via.str.size == 1 &&
              keys->via.array.ptr[0].via.str.ptr[0] == 'b');
  connect_client(&C2, d, "c2");
  ASSERT_EQ(status_total(&C2), 0);
}

TEST(client_goodbye_frees_its_keys) { WITH_DAEMON(body_goodbye, ); }

static void body_release_and_status(daemon_t *d)
{
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7501", 4);
  connect_client(&C1, d, "c1");
  connect_client(&C2, d, "c2");
  const char *const g[] = {"a:random_uniform", "b:scale:a", "c:scale:a", NULL};
  submit(&C1, 1, g, NULL, false);
  ASSERT_TRUE(serve_until_done(&W1, &C1, "c", NULL, 0));
  ASSERT_TRUE(serve_until_done(&W1, &C1, "b", NULL, 0));
  /* c2 shares b: key_done at once since it is in memory */
  const char *const g2[] = {"a:random_uniform", "b:scale:a", NULL};
  submit(&C2, 1, g2, NULL, false);
  const msgpack_object *m = next_msg(&C2, "submitted", 3000);
  ASSERT_TRUE(m != NULL && int_field(m, "tasks") == 0);
  m = next_msg(&C2, "key_done", 3000);
  char key[16];
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "b");
  ASSERT_EQ(status_total(&C1), 3);
  /* c1 releases b and c: c is freed, b stays for c2 */
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "release", 2);
  tsr_pack_str(&wb.pk, "keys");
  msgpack_pack_array(&wb.pk, 3);
  tsr_pack_str(&wb.pk, "b");
  tsr_pack_str(&wb.pk, "c");
  tsr_pack_str(&wb.pk, "never-heard-of-it");
  send_wbuf(&C1, &wb);
  int before = W1.freed;
  for (int i = 0; i < 20 && W1.freed < before + 1; i++) next_msg(&W1, "free", 100);
  ASSERT_EQ(W1.freed, before + 1);
  ASSERT_EQ(status_total(&C1), 2);  /* b and its input a */
  /* status lists the worker and the graphs */
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "status", 2);
  tsr_pack_kv_uint(&wb.pk, "req", 77);
  send_wbuf(&C2, &wb);
  m = next_msg(&C2, "status_reply", 3000);
  ASSERT_TRUE(m != NULL);
  const msgpack_object *workers = tsr_wire_field(m, "workers");
  ASSERT_TRUE(workers && workers->via.array.size == 1);
  char name[32];
  ASSERT_STREQ(str_field(&workers->via.array.ptr[0], "name", name, sizeof name), "w1");
  ASSERT_EQ(int_field(&workers->via.array.ptr[0], "threads"), 4);
  const msgpack_object *graphs = tsr_wire_field(m, "graphs");
  ASSERT_TRUE(graphs && graphs->via.array.size == 1);
  ASSERT_STREQ(str_field(&graphs->via.array.ptr[0], "client", name, sizeof name), "c1");
  ASSERT_EQ(int_field(&graphs->via.array.ptr[0], "tasks_total"), 2);
  ASSERT_EQ(int_field(&graphs->via.array.ptr[0], "tasks_done"), 2);
  simple_msg(&C2, "goodbye");
  ASSERT_TRUE(next_msg(&W1, "free", 3000) != NULL);
  ASSERT_EQ(status_total(&C1), 0);
}

TEST(release_shared_keys_and_status) { WITH_DAEMON(body_release_and_status, ); }

static void body_erred(daemon_t *d)
{
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7601", 2);
  connect_client(&C1, d, "c1");
  const char *const g[] = {"a:fail", "b:scale:a", "c:scale:b", "z:random_uniform", NULL};
  submit(&C1, 1, g, NULL, false);
  const msgpack_object *m = next_msg(&W1, "compute", 3000);
  ASSERT_TRUE(m != NULL);
  char key[64], text[512];
  if (strcmp(str_field(m, "key", key, sizeof key), "z") == 0) {
    task_done(&W1, m);
    m = next_msg(&W1, "compute", 3000);
    ASSERT_TRUE(m != NULL);
  }
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "a");
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "task_erred", 4);
  tsr_pack_kv_uint(&wb.pk, "id", (uint64_t)int_field(m, "id"));
  tsr_pack_kv_str(&wb.pk, "key", "a");
  tsr_pack_kv_str(&wb.pk, "message", "boom");
  send_wbuf(&W1, &wb);
  m = next_msg(&C1, "key_erred", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "c");
  ASSERT_STREQ(str_field(m, "message", text, sizeof text), "dependency 'a' failed: boom");
  /* a second graph on top of the failure errs at once */
  const char *const g2[] = {"e:scale:b", NULL};
  submit(&C1, 2, g2, NULL, false);
  ASSERT_TRUE(next_msg(&C1, "submitted", 3000) != NULL);
  m = next_msg(&C1, "key_erred", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "e");
}

TEST(a_failure_propagates_to_dependents) { WITH_DAEMON(body_erred, ); }

static void body_multipart_and_missing_input(daemon_t *d)
{
  connect_worker(&W1, d, "w1", "tcp://127.0.0.1:7701", 1);
  connect_client(&C1, d, "c1");
  const char *const p1[] = {"b:scale:a", NULL};  /* forward reference to the next part */
  const char *const p2[] = {"a:random_uniform", NULL};
  submit(&C1, 1, p1, NULL, true);
  ASSERT_EQ(drain_quiet(&W1, 100), 0);
  submit(&C1, 1, p2, NULL, false);
  const msgpack_object *m = next_msg(&C1, "submitted", 3000);
  ASSERT_TRUE(m != NULL && int_field(m, "tasks") == 2);
  m = next_msg(&W1, "compute", 3000);
  char key[64];
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "a");
  task_done(&W1, m);
  m = next_msg(&W1, "compute", 3000);
  ASSERT_TRUE(m != NULL);
  ASSERT_STREQ(str_field(m, "key", key, sizeof key), "b");
  /* the worker cannot fetch a: a is recomputed, then b re-sent */
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  tsr_wbuf_begin(&wb, "missing_input", 5);
  tsr_pack_kv_uint(&wb.pk, "id", (uint64_t)int_field(m, "id"));
  tsr_pack_kv_str(&wb.pk, "key", "b");
  tsr_pack_kv_str(&wb.pk, "input", "a");
  tsr_pack_kv_str(&wb.pk, "from", "tcp://127.0.0.1:7701");
  send_wbuf(&W1, &wb);
  char order[64];
  ASSERT_TRUE(serve_until_done(&W1, &C1, "b", order, sizeof order));
  ASSERT_STREQ(order, "a b");
}

TEST(multipart_submit_and_missing_input) { WITH_DAEMON(body_multipart_and_missing_input, ); }

int main(int argc, char **argv)
{
  if (argc > 1) sched_bin = argv[1];
  signal(SIGPIPE, SIG_IGN);
  zctx = zmq_ctx_new();
  RUN(hello_version_mismatch);
  RUN(diamond_computed_in_dependency_order);
  RUN(malformed_messages_get_errors_and_the_daemon_keeps_serving);
  RUN(submit_errors_name_the_keys_and_keep_nothing);
  RUN(worker_timeout_reschedules_and_recomputes);
  RUN(client_goodbye_frees_its_keys);
  RUN(release_shared_keys_and_status);
  RUN(a_failure_propagates_to_dependents);
  RUN(multipart_submit_and_missing_input);
  zmq_ctx_term(zctx);
  return kit_summary();
}
