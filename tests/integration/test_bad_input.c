/* Bad input against real daemons. Each case must get a clear error to the
 * sender (or a log line where there is no sender), and afterwards the
 * scheduler and workers must still serve a good graph. Raw cases speak
 * ZeroMQ + msgpack directly, like a buggy or hostile peer would. */
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

static cluster c;
static void *zctx;

/* A raw DEALER to the scheduler. */
static void *raw_connect(void)
{
  void *s = zmq_socket(zctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_connect(s, c.address);
  return s;
}

/* Receives frames until one holds a map with op `want`, or timeout; writes
 * its "message" (or whole text) to out. Returns 1 when found. */
static int expect_op(void *s, const char *want, char *out, size_t cap, int timeout_ms)
{
  out[0] = '\0';
  for (int waited = 0; waited < timeout_ms; waited += 50) {
    zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 50) <= 0) continue;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    zmq_msg_recv(&msg, s, 0);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    int found = 0;
    while (!found && msgpack_unpack_next(&up, zmq_msg_data(&msg), zmq_msg_size(&msg), &off) == MSGPACK_UNPACK_SUCCESS) {
      msgpack_object *m = &up.data;
      if (m->type != MSGPACK_OBJECT_MAP) continue;
      const char *op = NULL;
      size_t op_len = 0;
      for (uint32_t i = 0; i < m->via.map.size; i++) {
        msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR || v->type != MSGPACK_OBJECT_STR) continue;
        if (k->via.str.size == 2 && memcmp(k->via.str.ptr, "op", 2) == 0) {
          op = v->via.str.ptr;
          op_len = v->via.str.size;
        }
        if (k->via.str.size == 7 && memcmp(k->via.str.ptr, "message", 7) == 0)
          snprintf(out, cap, "%.*s", (int)v->via.str.size, v->via.str.ptr);
      }
      found = op != NULL && op_len == strlen(want) && memcmp(op, want, op_len) == 0;
    }
    msgpack_unpacked_destroy(&up);
    zmq_msg_close(&msg);
    if (found) return 1;
  }
  return 0;
}

static void send_bytes(void *s, const void *data, size_t len) { zmq_send(s, data, len, 0); }

static void send_packed(void *s, msgpack_sbuffer *sb)
{
  send_bytes(s, sb->data, sb->size);
  msgpack_sbuffer_clear(sb);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
  msgpack_pack_str(pk, strlen(s));
  msgpack_pack_str_body(pk, s, strlen(s));
}

static void pack_hello(msgpack_packer *pk, unsigned proto)
{
  msgpack_pack_map(pk, 4);
  pack_str(pk, "op");
  pack_str(pk, "hello");
  pack_str(pk, "proto");
  msgpack_pack_unsigned_int(pk, proto);
  pack_str(pk, "role");
  pack_str(pk, "client");
  pack_str(pk, "name");
  pack_str(pk, "raw-test");
}

/* The cluster still computes 2 * 3 elements = 6. */
static int cluster_still_serves(void)
{
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  double value = 0;
  const char *in = "ok-full";
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_full(g, "ok-full", 3, 2.0);
  if (rc == 0) rc = add_plain(g, "ok-sum", "sum", &in, 1);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 30000);
  if (rc == 0) rc = gather_f64(client, "ok-sum", &value);
  if (rc == 0 && value != 6.0) rc = -100;
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  return rc;
}

TEST(garbage_and_truncated_frames_get_errors)
{
  void *s = raw_connect();
  char text[512];
  send_bytes(s, "\xc1\xff\x00garbage", 10);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  ASSERT_CONTAINS(text, "msgpack");
  const unsigned char truncated[] = {0x82, 0xa2, 'o', 'p', 0xa5, 'h', 'e'};
  send_bytes(s, truncated, sizeof truncated);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  ASSERT_CONTAINS(text, "truncated");
  const unsigned char lying[] = {0xdd, 0x7f, 0xff, 0xff, 0xff};
  send_bytes(s, lying, sizeof lying);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  zmq_close(s);
  ASSERT_OK(cluster_still_serves());
}

TEST(protocol_version_wrong_types_unknown_ops_and_no_hello)
{
  void *s = raw_connect();
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  char text[512];
  /* Before hello. */
  msgpack_pack_map(&pk, 2);
  pack_str(&pk, "op");
  pack_str(&pk, "status");
  pack_str(&pk, "req");
  msgpack_pack_int(&pk, 1);
  send_packed(s, &sb);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  ASSERT_CONTAINS(text, "hello");
  /* Wrong protocol version. */
  pack_hello(&pk, 999);
  send_packed(s, &sb);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  ASSERT_CONTAINS(text, "999");
  /* Right version. */
  pack_hello(&pk, 1);
  send_packed(s, &sb);
  ASSERT_TRUE(expect_op(s, "welcome", text, sizeof text, 5000));
  /* A wrong type in a field. */
  msgpack_pack_map(&pk, 3);
  pack_str(&pk, "op");
  pack_str(&pk, "submit");
  pack_str(&pk, "graph");
  pack_str(&pk, "not-a-number");
  pack_str(&pk, "tasks");
  msgpack_pack_array(&pk, 0);
  send_packed(s, &sb);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  ASSERT_CONTAINS(text, "graph");
  /* An unknown message op. */
  msgpack_pack_map(&pk, 1);
  pack_str(&pk, "op");
  pack_str(&pk, "frobnicate");
  send_packed(s, &sb);
  ASSERT_TRUE(expect_op(s, "error", text, sizeof text, 5000));
  ASSERT_CONTAINS(text, "frobnicate");
  msgpack_sbuffer_destroy(&sb);
  zmq_close(s);
  ASSERT_OK(cluster_still_serves());
}

/* Submits g and returns tsr_submit's code; copies tsr_errmsg to text. */
static int submit_expect(tsr_client *client, tsr_graph **g, char *text, size_t cap)
{
  tsr_future *f = NULL;
  int rc = tsr_submit(client, g, &f);
  snprintf(text, cap, "%s", tsr_errmsg());
  tsr_future_release(&f);
  tsr_graph_destroy(g);
  return rc;
}

TEST(graph_errors_are_refused_at_submit)
{
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  char text[1024];
  ASSERT_OK(tsr_client_open(&client, c.address, NULL));
  /* Unknown task op. */
  tsr_graph_new(&g);
  add_plain(g, "u", "no_such_op", NULL, 0);
  ASSERT_EQ(submit_expect(client, &g, text, sizeof text), TSR_EUNKNOWNOP);
  ASSERT_CONTAINS(text, "no_such_op");
  /* A cycle a -> b -> c -> a. */
  tsr_graph_new(&g);
  const char *ina = "c", *inb = "a", *inc = "b";
  add_plain(g, "a", "noop", &ina, 1);
  add_plain(g, "b", "noop", &inb, 1);
  add_plain(g, "c", "noop", &inc, 1);
  ASSERT_EQ(submit_expect(client, &g, text, sizeof text), TSR_ECYCLE);
  ASSERT_CONTAINS(text, "cycle");
  /* A missing dependency. */
  tsr_graph_new(&g);
  const char *ghost = "ghost";
  add_plain(g, "needs-ghost", "noop", &ghost, 1);
  ASSERT_EQ(submit_expect(client, &g, text, sizeof text), TSR_EMISSING);
  ASSERT_CONTAINS(text, "ghost");
  /* The same key with another definition, while the first is held. */
  tsr_future *held = NULL;
  tsr_graph_new(&g);
  add_full(g, "dup", 2, 1.0);
  ASSERT_OK(tsr_submit(client, &g, &held));
  tsr_graph_new(&g);
  add_full(g, "dup", 2, 5.0);
  ASSERT_EQ(submit_expect(client, &g, text, sizeof text), TSR_EEXIST);
  ASSERT_CONTAINS(text, "dup");
  /* Same definition again is fine (shared). */
  tsr_graph_new(&g);
  add_full(g, "dup", 2, 1.0);
  tsr_future *again = NULL;
  ASSERT_OK(tsr_submit(client, &g, &again));
  ASSERT_OK(tsr_future_wait(again, 30000));
  tsr_future_release(&again);
  tsr_future_release(&held);
  tsr_client_close(client);
  ASSERT_OK(cluster_still_serves());
}

TEST(chunk_of_the_wrong_shape_errs_the_task_with_both_shapes)
{
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  ASSERT_OK(tsr_client_open(&client, c.address, NULL));
  tsr_graph_new(&g);
  add_full(g, "three", 3, 1.0);
  add_full(g, "four", 4, 1.0);
  const char *ins[] = {"three", "four"};
  add_plain(g, "bad-add", "add", ins, 2);
  const char *in = "bad-add";
  add_plain(g, "after-bad", "sum", &in, 1);
  ASSERT_OK(tsr_submit(client, &g, &f));
  ASSERT_EQ(tsr_future_wait(f, 30000), TSR_ETASK);
  const char *text = tsr_future_error(f);
  ASSERT_CONTAINS(text, "f64[3]");
  ASSERT_CONTAINS(text, "f64[4]");
  tsr_chunk *chunk = NULL;
  ASSERT_EQ(tsr_gather(client, "after-bad", 5000, &chunk), TSR_ETASK);
  tsr_future_release(&f);
  tsr_client_close(client);
  ASSERT_OK(cluster_still_serves());
}

/* A child process submits a long graph and dies without saying goodbye. */
TEST(client_that_dies_mid_graph_is_forgotten)
{
  pid_t pid = fork();
  if (pid == 0) {
    tsr_client *client = NULL;
    tsr_graph *g = NULL;
    tsr_future *f = NULL;
    char key[32];
    if (tsr_client_open(&client, c.address, NULL) != 0 || tsr_graph_new(&g) != 0) _exit(3);
    for (int i = 0; i < 40; i++) {
      snprintf(key, sizeof key, "orphan-%d", i);
      add_sleep(g, key, 100, NULL, 0);
    }
    if (tsr_submit(client, &g, &f) != 0) _exit(4);
    raise(SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_OK(cluster_still_serves());
  /* After the heartbeat timeout the orphan's tasks are dropped. */
  tsr_client *client = NULL;
  ASSERT_OK(tsr_client_open(&client, c.address, NULL));
  uint64_t remaining = 1;
  for (int i = 0; i < 100 && remaining != 0; i++) {
    tsr_cluster_info *info = NULL;
    if (tsr_cluster_info_get(client, 5000, &info) == 0) remaining = info->tasks_total;
    tsr_cluster_info_destroy(&info);
    if (remaining != 0) usleep(100000);
  }
  tsr_client_close(client);
  ASSERT_EQ(remaining, 0);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  const char *sched_args[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};
  const char *worker_args[] = {"--heartbeat-interval", "250ms", NULL};
  zctx = zmq_ctx_new();
  if (cluster_start(&c, 2, 2, sched_args, worker_args) != 0) {
    cluster_stop(&c, true);
    return 1;
  }
  RUN(garbage_and_truncated_frames_get_errors);
  RUN(protocol_version_wrong_types_unknown_ops_and_no_hello);
  RUN(graph_errors_are_refused_at_submit);
  RUN(chunk_of_the_wrong_shape_errs_the_task_with_both_shapes);
  RUN(client_that_dies_mid_graph_is_forgotten);
  bool alive = cluster_alive(c.scheduler) && cluster_alive(c.workers[0]) && cluster_alive(c.workers[1]);
  if (!alive) {
    fprintf(stderr, "a daemon died during the bad-input tests\n");
    kit_failed_tests++;
  }
  cluster_stop(&c, kit_failed_tests > 0);
  zmq_ctx_term(zctx);
  return kit_summary();
}
