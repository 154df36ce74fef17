/* The client against a fake scheduler (a ROUTER in a thread of this test)
 * and fake workers (tsr_xfer_server in the same thread): checks what
 * libtessera puts on the wire (hello, multi-part submit, release, status,
 * goodbye) and how it maps every scheduler answer onto the API (submitted,
 * submit_error, key_done + gather, key_lost + a new key_done, key_erred,
 * status_reply, silence → TSR_ECONN).
 *
 * The fake decides how to answer a graph by the op of its first task:
 * "bogus" → submit_error (unknown op), "cyc" → submit_error (cycle), "fail" → key_erred, "hang" → submitted only,
 * "moved" → key_done at a worker that does not hold the key, then 300 ms
 * later key_lost and key_done at the right one; anything else →
 * submitted and key_done at worker B (which serves every key as 4 f64). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "kit.h"
#include "net/net.h"
#include "tessera/tessera.h"
#include "util/util.h"
#include "wire/wire.h"

#define MAX_PARTS 16

typedef struct part_seen {
  uint64_t graph;
  size_t tasks;
  bool more;
  bool has_wants;
  size_t n_wants;
  char first_want[64];
  char first_key[64];
  char first_op[64];
  bool first_has_params;
  size_t first_inputs;
} part_seen;

typedef struct fake {
  void *ctx;
  void *router;
  char address[TSR_MAX_ADDR_LEN];
  tsr_xfer_server *worker_a;   /* holds nothing */
  tsr_xfer_server *worker_b;   /* holds every key: 4 doubles */
  pthread_t thread;
  atomic_int stop;
  atomic_int silent;           /* no heartbeats, no answers */
  atomic_int forget;           /* answer the next heartbeat with "unknown peer" */
  uint64_t hb_ms;
  pthread_mutex_t mu;
  /* --- recorded under mu --- */
  int hellos;
  char hello_name[64];
  uint64_t hello_proto;
  char hello_role[16];
  int heartbeats;
  part_seen parts[MAX_PARTS];
  int n_parts;
  int releases;
  size_t released_keys;
  char first_released[64];
  int goodbyes;
  int statuses;
  /* a delayed key_lost + key_done for the "moved" case */
  uint64_t moved_at_ms;
  char moved_key[64];
  char moved_id[256];
  size_t moved_id_len;
} fake;

static double values[4] = {1.5, -2.0, 3.25, 1e10};

static int lookup_none(void *arg, const char *key, tsr_xfer_chunk *chunk)
{
  (void)arg, (void)key, (void)chunk;
  return TSR_ENOTFOUND;
}

static int lookup_all(void *arg, const char *key, tsr_xfer_chunk *chunk)
{
  (void)arg, (void)key;
  memset(chunk, 0, sizeof *chunk);
  chunk->meta.dtype = TSR_F64;
  chunk->meta.ndim = 1;
  chunk->meta.shape[0] = 4;
  chunk->data = values;
  chunk->nbytes = sizeof values;
  return 0;
}

static void send_to(fake *f, const void *id, size_t id_len, tsr_wbuf *wb)
{
  tsr_net_send(f->router, id, id_len, wb->sbuf.data, wb->sbuf.size, 0);
  tsr_wbuf_reset(wb);
}

static void pack_key_done(tsr_wbuf *wb, const char *key, const char *where)
{
  tsr_wbuf_begin(wb, "key_done", 6);
  tsr_pack_kv_str(&wb->pk, "key", key);
  tsr_pack_kv_uint(&wb->pk, "nbytes", 32);
  tsr_meta meta = {.dtype = TSR_F64, .ndim = 1, .shape = {4}};
  tsr_pack_meta(&wb->pk, &meta);
  tsr_pack_str(&wb->pk, "where");
  msgpack_pack_array(&wb->pk, 1);
  tsr_pack_str(&wb->pk, where);
}

static void copy_str(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
  buf[0] = '\0';
  if (tsr_wire_field(map, key) != NULL) tsr_wire_strcpy(map, key, buf, cap, NULL);
}

/* Records one submit part; on the last part answers per the first op. */
static void on_submit(fake *f, const void *id, size_t id_len, const msgpack_object *map, tsr_wbuf *wb)
{
  part_seen p = {0};
  const msgpack_object *tasks, *wants;
  size_t n_wants = 0;
  tsr_wire_uint(map, "graph", &p.graph, NULL);
  tsr_wire_array(map, "tasks", 1000000, &tasks, &p.tasks, NULL);
  tsr_wire_opt_bool(map, "more", false, &p.more, NULL);
  p.has_wants = tsr_wire_field(map, "wants") != NULL;
  tsr_wire_opt_array(map, "wants", 1000000, &wants, &n_wants, NULL);
  p.n_wants = n_wants;
  if (n_wants > 0) snprintf(p.first_want, sizeof p.first_want, "%.*s", (int)wants[0].via.str.size, wants[0].via.str.ptr);
  if (p.tasks > 0) {
    copy_str(&tasks[0], "key", p.first_key, sizeof p.first_key);
    copy_str(&tasks[0], "op", p.first_op, sizeof p.first_op);
    p.first_has_params = tsr_wire_field(&tasks[0], "params") != NULL;
    const msgpack_object *in = tsr_wire_field(&tasks[0], "inputs");
    p.first_inputs = in ? in->via.array.size : 0;
  }
  pthread_mutex_lock(&f->mu);
  if (f->n_parts < MAX_PARTS) f->parts[f->n_parts++] = p;
  /* The graph's first op is the first op of its first part. */
  const char *op = p.first_op;
  for (int i = f->n_parts - 1; i >= 0 && f->parts[i].graph == p.graph; i--) op = f->parts[i].first_op;
  char first_op[64];
  snprintf(first_op, sizeof first_op, "%s", op);
  pthread_mutex_unlock(&f->mu);
  if (p.more) return;
  if (strcmp(first_op, "bogus") == 0 || strcmp(first_op, "cyc") == 0) {
    bool cyc = strcmp(first_op, "cyc") == 0;
    tsr_wbuf_begin(wb, "submit_error", 4);
    tsr_pack_kv_uint(&wb->pk, "graph", p.graph);
    tsr_pack_kv_int(&wb->pk, "code", cyc ? TSR_ECYCLE : TSR_EUNKNOWNOP);
    tsr_pack_kv_str(&wb->pk, "message", cyc ? "cycle through 'a'" : "unknown op 'bogus'");
    send_to(f, id, id_len, wb);
    return;
  }
  /* submitted and the key answers travel batched in one frame */
  tsr_wbuf_begin(wb, "submitted", 3);
  tsr_pack_kv_uint(&wb->pk, "graph", p.graph);
  tsr_pack_kv_uint(&wb->pk, "tasks", p.tasks);
  for (size_t i = 0; i < n_wants; i++) {
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)wants[i].via.str.size, wants[i].via.str.ptr);
    if (strcmp(first_op, "fail") == 0) {
      tsr_wbuf_begin(wb, "key_erred", 3);
      tsr_pack_kv_str(&wb->pk, "key", key);
      tsr_pack_kv_str(&wb->pk, "message", "fail: boom");
    } else if (strcmp(first_op, "moved") == 0) {
      pack_key_done(wb, key, tsr_xfer_server_address(f->worker_a));
      pthread_mutex_lock(&f->mu);
      f->moved_at_ms = tsr_now_ms() + 300;
      snprintf(f->moved_key, sizeof f->moved_key, "%s", key);
      memcpy(f->moved_id, id, id_len);
      f->moved_id_len = id_len;
      pthread_mutex_unlock(&f->mu);
    } else if (strcmp(first_op, "hang") != 0) {
      pack_key_done(wb, key, tsr_xfer_server_address(f->worker_b));
    }
  }
  send_to(f, id, id_len, wb);
}

static void on_status(fake *f, const void *id, size_t id_len, const msgpack_object *map, tsr_wbuf *wb)
{
  uint64_t req = 0;
  tsr_wire_uint(map, "req", &req, NULL);
  tsr_wbuf_begin(wb, "status_reply", 5);
  tsr_pack_kv_uint(&wb->pk, "req", req);
  tsr_pack_str(&wb->pk, "workers");
  msgpack_pack_array(&wb->pk, 2);
  for (int i = 0; i < 2; i++) {
    msgpack_pack_map(&wb->pk, 8);
    tsr_pack_kv_str(&wb->pk, "name", i ? "w1" : "w0");
    tsr_pack_kv_str(&wb->pk, "address", tsr_xfer_server_address(i ? f->worker_b : f->worker_a));
    tsr_pack_kv_str(&wb->pk, "device", "cpu");
    tsr_pack_kv_uint(&wb->pk, "threads", 4);
    tsr_pack_kv_uint(&wb->pk, "memory_used", 1536);
    tsr_pack_kv_uint(&wb->pk, "memory_limit", 1ull << 30);
    tsr_pack_kv_uint(&wb->pk, "tasks_running", (uint64_t)i);
    tsr_pack_kv_uint(&wb->pk, "tasks_done", 10 + (uint64_t)i);
  }
  tsr_pack_str(&wb->pk, "graphs");
  msgpack_pack_array(&wb->pk, 1);
  msgpack_pack_map(&wb->pk, 5);
  tsr_pack_kv_str(&wb->pk, "client", "proto-test");
  tsr_pack_kv_uint(&wb->pk, "graph", 7);
  tsr_pack_kv_uint(&wb->pk, "tasks_total", 100);
  tsr_pack_kv_uint(&wb->pk, "tasks_done", 40);
  tsr_pack_kv_uint(&wb->pk, "tasks_erred", 1);
  tsr_pack_kv_uint(&wb->pk, "tasks_total", 123);
  send_to(f, id, id_len, wb);
}

static void on_message(fake *f, const void *id, size_t id_len, const char *op, const msgpack_object *map,
                       tsr_wbuf *wb)
{
  if (strcmp(op, "hello") == 0) {
    pthread_mutex_lock(&f->mu);
    f->hellos++;
    copy_str(map, "name", f->hello_name, sizeof f->hello_name);
    copy_str(map, "role", f->hello_role, sizeof f->hello_role);
    tsr_wire_uint(map, "proto", &f->hello_proto, NULL);
    bool refuse = strcmp(f->hello_name, "from-the-future") == 0;
    pthread_mutex_unlock(&f->mu);
    if (refuse) {   /* what a scheduler of another protocol version says */
      tsr_wbuf_begin(wb, "error", 4);
      tsr_pack_kv_int(&wb->pk, "code", TSR_EVERSION);
      tsr_pack_kv_str(&wb->pk, "message", "protocol 1 is not this scheduler's 2");
      tsr_pack_kv_str(&wb->pk, "ref", "hello");
      send_to(f, id, id_len, wb);
      return;
    }
    tsr_wbuf_begin(wb, "welcome", 4);
    tsr_pack_kv_uint(&wb->pk, "proto", 1);
    tsr_pack_kv_uint(&wb->pk, "id", 42);
    tsr_pack_kv_uint(&wb->pk, "heartbeat_ms", f->hb_ms);
    send_to(f, id, id_len, wb);
  } else if (strcmp(op, "heartbeat") == 0) {
    pthread_mutex_lock(&f->mu);
    f->heartbeats++;
    pthread_mutex_unlock(&f->mu);
    if (atomic_exchange(&f->forget, 0)) {   /* as a restarted scheduler would */
      tsr_wbuf_begin(wb, "error", 4);
      tsr_pack_kv_int(&wb->pk, "code", TSR_ENOTFOUND);
      tsr_pack_kv_str(&wb->pk, "message", "unknown peer");
      tsr_pack_kv_str(&wb->pk, "ref", "heartbeat");
      send_to(f, id, id_len, wb);
    }
  } else if (strcmp(op, "submit") == 0) {
    on_submit(f, id, id_len, map, wb);
  } else if (strcmp(op, "release") == 0) {
    const msgpack_object *keys;
    size_t n = 0;
    tsr_wire_array(map, "keys", 1000000, &keys, &n, NULL);
    pthread_mutex_lock(&f->mu);
    f->releases++;
    f->released_keys += n;
    if (n > 0) snprintf(f->first_released, sizeof f->first_released, "%.*s", (int)keys[0].via.str.size, keys[0].via.str.ptr);
    pthread_mutex_unlock(&f->mu);
  } else if (strcmp(op, "status") == 0) {
    pthread_mutex_lock(&f->mu);
    f->statuses++;
    pthread_mutex_unlock(&f->mu);
    on_status(f, id, id_len, map, wb);
  } else if (strcmp(op, "goodbye") == 0) {
    pthread_mutex_lock(&f->mu);
    f->goodbyes++;
    pthread_mutex_unlock(&f->mu);
  }
}

static void handle(fake *f, tsr_frames *fr, tsr_wbuf *wb)
{
  tsr_reader rd;
  const msgpack_object *map;
  char op[TSR_MAX_NAME_LEN + 1];
  if (fr->count != 2) return;
  const void *id = tsr_frame_data(fr, 0);
  size_t id_len = tsr_frame_size(fr, 0);
  if (tsr_reader_init(&rd, tsr_frame_data(fr, 1), tsr_frame_size(fr, 1), NULL) == 0)
    while (tsr_reader_next(&rd, &map, op, NULL) == 1)
      if (!atomic_load(&f->silent)) on_message(f, id, id_len, op, map, wb);
  tsr_reader_done(&rd);
}

/* key_lost, then key_done at the worker that has the key. */
static void maybe_move(fake *f, tsr_wbuf *wb)
{
  pthread_mutex_lock(&f->mu);
  bool due = f->moved_at_ms != 0 && tsr_now_ms() >= f->moved_at_ms;
  if (due) f->moved_at_ms = 0;
  pthread_mutex_unlock(&f->mu);
  if (!due) return;
  tsr_wbuf_begin(wb, "key_lost", 2);
  tsr_pack_kv_str(&wb->pk, "key", f->moved_key);
  send_to(f, f->moved_id, f->moved_id_len, wb);
  pack_key_done(wb, f->moved_key, tsr_xfer_server_address(f->worker_b));
  send_to(f, f->moved_id, f->moved_id_len, wb);
}

static void *fake_main(void *arg)
{
  fake *f = arg;
  tsr_wbuf wb;
  tsr_wbuf_init(&wb);
  uint64_t last_hb = 0;
  char last_id[256];
  size_t last_id_len = 0;
  while (!atomic_load(&f->stop)) {
    zmq_pollitem_t items[3] = {{f->router, 0, ZMQ_POLLIN, 0},
                               {tsr_xfer_server_socket(f->worker_a), 0, ZMQ_POLLIN, 0},
                               {tsr_xfer_server_socket(f->worker_b), 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, 3, 10);
    tsr_frames fr;
    while (tsr_frames_recv(f->router, &fr, ZMQ_DONTWAIT) >= 0) {
      if (fr.count >= 1 && tsr_frame_size(&fr, 0) <= sizeof last_id) {
        last_id_len = tsr_frame_size(&fr, 0);
        memcpy(last_id, tsr_frame_data(&fr, 0), last_id_len);
      }
      handle(f, &fr, &wb);
      tsr_frames_close(&fr);
    }
    tsr_xfer_server_serve(f->worker_a, lookup_none, NULL);
    tsr_xfer_server_serve(f->worker_b, lookup_all, NULL);
    maybe_move(f, &wb);
    if (!atomic_load(&f->silent) && last_id_len > 0 && tsr_now_ms() - last_hb >= f->hb_ms) {
      tsr_wbuf_begin(&wb, "heartbeat", 1);
      send_to(f, last_id, last_id_len, &wb);
      last_hb = tsr_now_ms();
    }
  }
  tsr_wbuf_free(&wb);
  return NULL;
}

static int fake_start(fake *f, uint64_t hb_ms)
{
  memset(f, 0, sizeof *f);
  f->hb_ms = hb_ms;
  pthread_mutex_init(&f->mu, NULL);
  f->ctx = zmq_ctx_new();
  f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
  tsr_net_socket_defaults(f->router);
  if (tsr_net_bind(f->router, "tcp://127.0.0.1:0", NULL, f->address, sizeof f->address, NULL) != 0) return -1;
  if (tsr_xfer_server_open(f->ctx, "tcp://127.0.0.1:0", NULL, &f->worker_a, NULL) != 0) return -1;
  if (tsr_xfer_server_open(f->ctx, "tcp://127.0.0.1:0", NULL, &f->worker_b, NULL) != 0) return -1;
  return pthread_create(&f->thread, NULL, fake_main, f);
}

static void fake_stop(fake *f)
{
  atomic_store(&f->stop, 1);
  pthread_join(f->thread, NULL);
  tsr_xfer_server_close(&f->worker_a);
  tsr_xfer_server_close(&f->worker_b);
  zmq_close(f->router);
  zmq_ctx_term(f->ctx);
  pthread_mutex_destroy(&f->mu);
}

/* Polls cond (reading fake state under its mutex) for up to ms. */
#define EVENTUALLY(f, cond, ms)                                   \
  do {                                                            \
    for (int kit_i_ = 0; kit_i_ < (ms) / 10; kit_i_++) {          \
      pthread_mutex_lock(&(f)->mu);                               \
      bool kit_ok_ = (cond);                                      \
      pthread_mutex_unlock(&(f)->mu);                             \
      if (kit_ok_) break;                                         \
      usleep(10000);                                              \
    }                                                             \
  } while (0)

static fake F;   /* shared by the tests that need a well-behaved scheduler */
static tsr_client *C;

static int open_client(fake *f, tsr_client **c_p, const char *name)
{
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.name = name;
  opts.connect_timeout_ms = 5000;
  return tsr_client_open(c_p, f->address, &opts);
}

TEST(hello_and_welcome)
{
  ASSERT_OK(open_client(&F, &C, "proto-test"));
  ASSERT_STREQ(tsr_client_address(C), F.address);
  pthread_mutex_lock(&F.mu);
  int hellos = F.hellos;
  uint64_t proto = F.hello_proto;
  char name[64], role[16];
  snprintf(name, sizeof name, "%s", F.hello_name);
  snprintf(role, sizeof role, "%s", F.hello_role);
  pthread_mutex_unlock(&F.mu);
  ASSERT_EQ(hellos, 1);
  ASSERT_EQ(proto, 1);
  ASSERT_STREQ(name, "proto-test");
  ASSERT_STREQ(role, "client");
  /* The client heartbeats at the welcome's rate (100 ms). */
  EVENTUALLY(&F, F.heartbeats >= 3, 2000);
  pthread_mutex_lock(&F.mu);
  int beats = F.heartbeats;
  pthread_mutex_unlock(&F.mu);
  ASSERT_TRUE(beats >= 3);
}

/* A chain t0 <- t1 <- ... of 120,000 tasks: three parts, one wanted key. */
TEST(big_submit_arrives_in_parts_then_gather)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  tsr_args *a = NULL;
  ASSERT_OK(tsr_args_new(&a));
  ASSERT_OK(tsr_args_int(a, "ms", 1));
  char key[32], prev[32];
  for (int i = 0; i < 120000; i++) {
    snprintf(key, sizeof key, "t%d", i);
    const char *in[] = {prev};
    ASSERT_OK(tsr_graph_add_args(g, key, i == 0 ? "noop" : "sleep", i == 0 ? a : NULL, in, i == 0 ? 0 : 1));
    snprintf(prev, sizeof prev, "%s", key);
  }
  tsr_args_destroy(&a);
  pthread_mutex_lock(&F.mu);
  int before = F.n_parts;
  pthread_mutex_unlock(&F.mu);
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(C, &g, &fut));
  ASSERT_TRUE(g == NULL);
  pthread_mutex_lock(&F.mu);
  int parts = F.n_parts - before;
  part_seen p0 = F.parts[before], p1 = F.parts[before + 1], p2 = F.parts[before + 2];
  pthread_mutex_unlock(&F.mu);
  ASSERT_EQ(parts, 3);
  ASSERT_EQ(p0.tasks, 50000);
  ASSERT_EQ(p1.tasks, 50000);
  ASSERT_EQ(p2.tasks, 20000);
  ASSERT_TRUE(p0.more && p1.more && !p2.more);
  ASSERT_TRUE(p0.graph == p1.graph && p1.graph == p2.graph);
  ASSERT_TRUE(!p0.has_wants && !p1.has_wants && p2.has_wants);
  ASSERT_EQ(p2.n_wants, 1);
  ASSERT_STREQ(p2.first_want, "t119999");
  ASSERT_STREQ(p0.first_key, "t0");
  ASSERT_STREQ(p0.first_op, "noop");
  ASSERT_TRUE(p0.first_has_params);
  ASSERT_EQ(p0.first_inputs, 0);
  ASSERT_STREQ(p1.first_key, "t50000");
  ASSERT_TRUE(!p1.first_has_params);
  ASSERT_EQ(p1.first_inputs, 1);

  ASSERT_EQ(tsr_future_count(fut), 1);
  ASSERT_STREQ(tsr_future_key(fut, 0), "t119999");
  ASSERT_OK(tsr_future_wait(fut, 5000));
  size_t done, total;
  tsr_future_progress(fut, &done, &total);
  ASSERT_EQ(done, 1);
  ASSERT_EQ(total, 1);
  ASSERT_TRUE(tsr_future_error(fut) == NULL);
  tsr_chunk *ch = NULL;
  ASSERT_OK(tsr_gather(C, "t119999", 5000, &ch));
  ASSERT_EQ(ch->dtype, TSR_F64);
  ASSERT_EQ(ch->ndim, 1);
  ASSERT_EQ(ch->shape[0], 4);
  ASSERT_EQ(ch->nbytes, 32);
  ASSERT_EQ((uintptr_t)ch->data % 16, 0);
  ASSERT_TRUE(memcmp(ch->data, values, 32) == 0);
  tsr_chunk_destroy(&ch);
  ASSERT_TRUE(ch == NULL);
  /* Twice: the cached data connection is reused. */
  ASSERT_OK(tsr_gather(C, "t119999", 5000, &ch));
  tsr_chunk_destroy(&ch);
  ASSERT_EQ(tsr_gather(C, "t5", 1000, &ch), TSR_ENOTFOUND);
  ASSERT_CONTAINS(tsr_errmsg(), "'t5'");

  pthread_mutex_lock(&F.mu);
  int releases = F.releases;
  pthread_mutex_unlock(&F.mu);
  tsr_future_release(&fut);
  ASSERT_TRUE(fut == NULL);
  EVENTUALLY(&F, F.releases > releases, 2000);
  pthread_mutex_lock(&F.mu);
  int releases_after = F.releases;
  char first[64];
  snprintf(first, sizeof first, "%s", F.first_released);
  pthread_mutex_unlock(&F.mu);
  ASSERT_EQ(releases_after, releases + 1);
  ASSERT_STREQ(first, "t119999");
  ASSERT_EQ(tsr_gather(C, "t119999", 100, &ch), TSR_ENOTFOUND);
}

TEST(submit_error_maps_code_and_message)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "b", "bogus", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_EQ(tsr_submit(C, &g, &fut), TSR_EUNKNOWNOP);
  ASSERT_CONTAINS(tsr_errmsg(), "unknown op 'bogus'");
  ASSERT_TRUE(g != NULL);      /* the caller still owns it */
  ASSERT_TRUE(fut == NULL);
  ASSERT_EQ(tsr_graph_size(g), 1);
  tsr_graph_destroy(&g);
  /* the key was unregistered again */
  tsr_chunk *ch = NULL;
  ASSERT_EQ(tsr_gather(C, "b", 100, &ch), TSR_ENOTFOUND);
}

/* A cycle leaves no task without dependents: the client must still send
 * the graph (without `wants`) and let the scheduler name the cycle. */
TEST(cyclic_graph_is_left_to_the_scheduler)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  const char *ina = "b", *inb = "a";
  ASSERT_OK(tsr_graph_add(g, "a", "cyc", NULL, 0, &ina, 1));
  ASSERT_OK(tsr_graph_add(g, "b", "cyc", NULL, 0, &inb, 1));
  pthread_mutex_lock(&F.mu);
  int before = F.n_parts;
  pthread_mutex_unlock(&F.mu);
  tsr_future *fut = NULL;
  ASSERT_EQ(tsr_submit(C, &g, &fut), TSR_ECYCLE);
  ASSERT_CONTAINS(tsr_errmsg(), "cycle");
  pthread_mutex_lock(&F.mu);
  part_seen p = F.parts[before];
  int parts = F.n_parts - before;
  pthread_mutex_unlock(&F.mu);
  ASSERT_EQ(parts, 1);
  ASSERT_TRUE(!p.has_wants && !p.more);
  ASSERT_EQ(p.tasks, 2);
  tsr_graph_destroy(&g);
  /* An empty graph is refused here. */
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_EQ(tsr_submit(C, &g, &fut), TSR_EINVAL);
  tsr_graph_destroy(&g);
}

TEST(key_erred_fails_the_future)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "bad", "fail", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(C, &g, &fut));
  ASSERT_EQ(tsr_future_wait(fut, 5000), TSR_ETASK);
  ASSERT_CONTAINS(tsr_errmsg(), "boom");
  const char *e = tsr_future_error(fut);
  ASSERT_CONTAINS(e, "key 'bad'");
  ASSERT_CONTAINS(e, "fail: boom");
  tsr_chunk *ch = NULL;
  ASSERT_EQ(tsr_gather(C, "bad", 1000, &ch), TSR_ETASK);
  ASSERT_CONTAINS(tsr_errmsg(), "boom");
  tsr_future_release(&fut);
}

TEST(gather_follows_a_lost_key)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "m", "moved", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(C, &g, &fut));
  ASSERT_OK(tsr_future_wait(fut, 5000));
  tsr_chunk *ch = NULL;
  /* worker A answers "not found"; 300 ms later the key moves to B */
  ASSERT_OK(tsr_gather(C, "m", 5000, &ch));
  ASSERT_TRUE(memcmp(ch->data, values, 32) == 0);
  tsr_chunk_destroy(&ch);
  tsr_future_release(&fut);
}

TEST(wait_times_out_while_pending)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "h", "hang", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(C, &g, &fut));
  ASSERT_EQ(tsr_future_wait(fut, 200), TSR_ETIMEDOUT);
  ASSERT_CONTAINS(tsr_errmsg(), "0 of 1");
  tsr_chunk *ch = NULL;
  ASSERT_EQ(tsr_gather(C, "h", 200, &ch), TSR_ETIMEDOUT);
  tsr_future_release(&fut);
}

TEST(status_and_wait_for_workers)
{
  tsr_cluster_info *info = NULL;
  ASSERT_OK(tsr_cluster_info_get(C, 5000, &info));
  ASSERT_EQ(info->n_workers, 2);
  ASSERT_STREQ(info->workers[1].name, "w1");
  ASSERT_STREQ(info->workers[1].device, "cpu");
  ASSERT_STREQ(info->workers[1].address, tsr_xfer_server_address(F.worker_b));
  ASSERT_EQ(info->workers[1].threads, 4);
  ASSERT_EQ(info->workers[1].memory_used, 1536);
  ASSERT_EQ(info->workers[1].memory_limit, 1ull << 30);
  ASSERT_EQ(info->workers[1].tasks_running, 1);
  ASSERT_EQ(info->workers[1].tasks_done, 11);
  ASSERT_EQ(info->n_graphs, 1);
  ASSERT_STREQ(info->graphs[0].client, "proto-test");
  ASSERT_EQ(info->graphs[0].tasks_done, 40);
  ASSERT_EQ(info->graphs[0].tasks_erred, 1);
  tsr_cluster_info_destroy(&info);
  ASSERT_TRUE(info == NULL);
  ASSERT_OK(tsr_wait_for_workers(C, 2, 2000));
  ASSERT_EQ(tsr_wait_for_workers(C, 3, 300), TSR_ETIMEDOUT);
  ASSERT_CONTAINS(tsr_errmsg(), "2 of 3");
}

TEST(close_says_goodbye)
{
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "kept", "noop", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(C, &g, &fut));
  tsr_client_close(C);
  C = NULL;
  EVENTUALLY(&F, F.goodbyes == 1, 2000);
  pthread_mutex_lock(&F.mu);
  int goodbyes = F.goodbyes;
  pthread_mutex_unlock(&F.mu);
  ASSERT_EQ(goodbyes, 1);
  /* A future may outlive its client: waiting says closed, release is safe. */
  ASSERT_EQ(tsr_future_wait(fut, 0), TSR_ECLOSED);
  tsr_future_release(&fut);
}

/* A scheduler that stops talking: waits end with TSR_ECONN after the
 * heartbeat timeout (10 × the welcome's 100 ms). */
TEST(silence_means_connection_lost)
{
  fake s;
  ASSERT_EQ(fake_start(&s, 100), 0);
  tsr_client *c = NULL;
  /* futures wait a reconnect window for the scheduler (docs/journal.md) */
  setenv("TESSERA_RECONNECT_TIMEOUT", "1s", 1);
  int orc = open_client(&s, &c, "silence-test");
  unsetenv("TESSERA_RECONNECT_TIMEOUT");
  ASSERT_OK(orc);
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "h", "hang", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(c, &g, &fut));
  atomic_store(&s.silent, 1);
  uint64_t t0 = tsr_now_ms();
  int rc = tsr_future_wait(fut, 10000);
  uint64_t took = tsr_now_ms() - t0;
  ASSERT_EQ(rc, TSR_ECONN);
  ASSERT_CONTAINS(tsr_errmsg(), "no word");
  ASSERT_TRUE(took >= 800 && took < 6000);
  tsr_chunk *ch = NULL;
  ASSERT_EQ(tsr_gather(c, "h", 1000, &ch), TSR_ECONN);
  tsr_graph *g2 = NULL;
  ASSERT_OK(tsr_graph_new(&g2));
  ASSERT_OK(tsr_graph_add(g2, "h2", "noop", NULL, 0, NULL, 0));
  tsr_future *fut2 = NULL;
  ASSERT_EQ(tsr_submit(c, &g2, &fut2), TSR_ECONN);
  /* The scheduler speaks again: the client says hello anew and works. */
  atomic_store(&s.silent, 0);
  int rc2 = TSR_ECONN;
  for (int i = 0; i < 750 && rc2 == TSR_ECONN; i++) {  /* 15 s: a loaded CI machine */
    rc2 = tsr_submit(c, &g2, &fut2);
    if (rc2 == TSR_ECONN) usleep(20000);
  }
  ASSERT_OK(rc2);
  ASSERT_OK(tsr_future_wait(fut2, 5000));
  ASSERT_EQ(tsr_future_wait(fut, 0), TSR_ECONN);   /* the old session stays lost */
  tsr_future_release(&fut2);
  tsr_future_release(&fut);
  tsr_client_close(c);
  fake_stop(&s);
}

/* "unknown peer" (a restarted scheduler): the session ends at once, the
 * client says hello again without waiting for the heartbeat timeout. */
TEST(unknown_peer_means_hello_again)
{
  fake s;
  ASSERT_EQ(fake_start(&s, 100), 0);
  setenv("TESSERA_HEARTBEAT_TIMEOUT", "60s", 1);   /* silence must not be what saves us */
  tsr_client *c = NULL;
  int rc = open_client(&s, &c, "forgotten");
  unsetenv("TESSERA_HEARTBEAT_TIMEOUT");
  ASSERT_OK(rc);
  tsr_graph *g = NULL;
  ASSERT_OK(tsr_graph_new(&g));
  ASSERT_OK(tsr_graph_add(g, "h", "hang", NULL, 0, NULL, 0));
  tsr_future *fut = NULL;
  ASSERT_OK(tsr_submit(c, &g, &fut));
  atomic_store(&s.forget, 1);
  uint64_t t0 = tsr_now_ms();
  ASSERT_EQ(tsr_future_wait(fut, 5000), TSR_ECONN);
  ASSERT_CONTAINS(tsr_errmsg(), "no longer knows");
  ASSERT_TRUE(tsr_now_ms() - t0 < 2000);
  EVENTUALLY(&s, s.hellos == 2, 3000);
  pthread_mutex_lock(&s.mu);
  int hellos = s.hellos;
  pthread_mutex_unlock(&s.mu);
  ASSERT_EQ(hellos, 2);
  tsr_cluster_info *info = NULL;
  rc = TSR_ECONN;
  for (int i = 0; i < 100 && rc == TSR_ECONN; i++)
    if ((rc = tsr_cluster_info_get(c, 1000, &info)) == TSR_ECONN) usleep(20000);
  ASSERT_OK(rc);
  tsr_cluster_info_destroy(&info);
  tsr_future_release(&fut);
  tsr_client_close(c);
  fake_stop(&s);
}

TEST(open_times_out_when_no_welcome)
{
  fake s;
  ASSERT_EQ(fake_start(&s, 100), 0);
  atomic_store(&s.silent, 1);
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.connect_timeout_ms = 300;
  tsr_client *c = NULL;
  ASSERT_EQ(tsr_client_open(&c, s.address, &opts), TSR_ETIMEDOUT);
  ASSERT_CONTAINS(tsr_errmsg(), "no answer");
  fake_stop(&s);
}

TEST(version_mismatch_refuses_the_open)
{
  fake s;
  ASSERT_EQ(fake_start(&s, 100), 0);
  tsr_client *c = NULL;
  ASSERT_EQ(open_client(&s, &c, "from-the-future"), TSR_EVERSION);
  ASSERT_CONTAINS(tsr_errmsg(), "protocol 1 is not this scheduler's 2");
  ASSERT_TRUE(c == NULL);
  fake_stop(&s);
}

static int log_lines;
static void count_log(void *arg, int level, const char *line)
{
  (void)arg, (void)level, (void)line;
  log_lines++;
}

TEST(log_callback_receives_lines)
{
  fake s;
  ASSERT_EQ(fake_start(&s, 100), 0);
  tsr_client_opts opts = TSR_CLIENT_OPTS_DEFAULT;
  opts.log = count_log;
  tsr_client *c = NULL;
  ASSERT_OK(tsr_client_open(&c, s.address, &opts));
  tsr_client_close(c);
  ASSERT_TRUE(log_lines >= 2);
  fake_stop(&s);
}

int main(void)
{
  if (fake_start(&F, 100) != 0) {
    fprintf(stderr, "cannot start the fake scheduler\n");
    return 1;
  }
  RUN(hello_and_welcome);
  if (C != NULL) {
    RUN(big_submit_arrives_in_parts_then_gather);
    RUN(submit_error_maps_code_and_message);
    RUN(cyclic_graph_is_left_to_the_scheduler);
    RUN(key_erred_fails_the_future);
    RUN(gather_follows_a_lost_key);
    RUN(wait_times_out_while_pending);
    RUN(status_and_wait_for_workers);
    RUN(close_says_goodbye);
  }
  tsr_client_close(C);
  fake_stop(&F);
  RUN(silence_means_connection_lost);
  RUN(unknown_peer_means_hello_again);
  RUN(open_times_out_when_no_welcome);
  RUN(version_mismatch_refuses_the_open);
  RUN(log_callback_receives_lines);
  return kit_summary();
}
