/* unit.xfer — the data plane's transports (common/net/xfer*.c) for real:
 * a tsr_xfer server served by a thread of this process (or by a child
 * process, for the peer that dies), fetched from over UCX and ZeroMQ on
 * loopback. UCX_TLS from the environment applies (tcp, sm, ...). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kit.h"
#include "net/curve.h"
#include "net/net.h"
#include "net/xfer_int.h"

#define BIG_BYTES (64u << 20)
#define HUGE_BYTES (256u << 20)

typedef struct served {
  tsr_xfer_server *srv;
  atomic_bool stop, paused;
  atomic_int released;
  double *small;        /* 3 f64 */
  unsigned char *big;   /* BIG_BYTES */
  pthread_t thread;
} served;

static void release_ref(void *data, void *hint)
{
  (void)data;
  atomic_fetch_add(&((served *)hint)->released, 1);
}

static int lookup(void *arg, const char *key, tsr_xfer_chunk *chunk)
{
  served *s = arg;
  memset(chunk, 0, sizeof *chunk);
  chunk->meta.dtype = strcmp(key, "big") == 0 ? TSR_U8 : TSR_F64;
  chunk->meta.ndim = 1;
  chunk->release = release_ref;
  chunk->hint = s;
  if (strcmp(key, "small") == 0) {
    chunk->meta.shape[0] = 3;
    chunk->data = s->small;
    chunk->nbytes = 3 * sizeof(double);
    return 0;
  }
  if (strcmp(key, "big") == 0) {
    chunk->meta.shape[0] = BIG_BYTES;
    chunk->data = s->big;
    chunk->nbytes = BIG_BYTES;
    return 0;
  }
  return TSR_ENOTFOUND;
}

static void *serve_loop(void *arg)
{
  served *s = arg;
  while (!atomic_load(&s->stop)) {
    zmq_pollitem_t items[2];
    int n = tsr_xfer_server_pollitems(s->srv, items, 2);
    if (atomic_load(&s->paused)) n = 0;
    zmq_poll(items, n, 20);
    if (!atomic_load(&s->paused)) tsr_xfer_server_serve(s->srv, lookup, s);
  }
  return NULL;
}

static void *zctx;

static int serve_start(served *s, tsr_transport transport, tsr_errbuf *err)
{
  memset(s, 0, sizeof *s);
  s->small = malloc(3 * sizeof(double));
  s->big = malloc(BIG_BYTES);
  for (int i = 0; i < 3; i++) s->small[i] = 1.5 * (i + 1);
  for (size_t i = 0; i < BIG_BYTES; i++) s->big[i] = (unsigned char)(i * 131 + (i >> 20));
  int rc = tsr_xfer_server_open_transport(zctx, "tcp://127.0.0.1:0", NULL, NULL, transport, &s->srv, err);
  if (rc == 0) pthread_create(&s->thread, NULL, serve_loop, s);
  return rc;
}

static void serve_stop(served *s)
{
  if (s->srv != NULL) {
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    tsr_xfer_server_close(&s->srv);
  }
  free(s->small);
  free(s->big);
}

/* Fetches key from address over the given preference. */
static int fetch(const char *address, tsr_transport prefer, const char *key, tsr_chunk_header *hdr,
                 tsr_xfer_data *out, tsr_errbuf *err)
{
  tsr_xfer_set_fetch_transport(prefer);
  tsr_xfer_conn *conn = NULL;
  int rc = tsr_xfer_open(zctx, address, &conn, err);
  if (rc == 0) rc = tsr_xfer_get(conn, key, 10000, hdr, out, err);
  tsr_xfer_close(&conn);
  return rc;
}

TEST(address_pick_follows_preference_and_falls_back)
{
  char ep[TSR_MAX_ADDR_LEN];
  bool ucx = false;
  tsr_errbuf err = {{0}};
  const char *both = "ucx://10.0.0.5:41001,tcp://10.0.0.5:41000";
  ASSERT_OK(tsr_xfer_pick(both, TSR_TRANSPORT_AUTO, true, ep, sizeof ep, &ucx, &err));
  ASSERT_TRUE(ucx);
  ASSERT_STREQ(ep, "ucx://10.0.0.5:41001");
  ASSERT_OK(tsr_xfer_pick(both, TSR_TRANSPORT_ZMQ, true, ep, sizeof ep, &ucx, &err));
  ASSERT_TRUE(!ucx);
  ASSERT_STREQ(ep, "tcp://10.0.0.5:41000");
  ASSERT_OK(tsr_xfer_pick(both, TSR_TRANSPORT_UCX, false, ep, sizeof ep, &ucx, &err));
  ASSERT_STREQ(ep, "tcp://10.0.0.5:41000");
  /* a UCX-only peer is fetched over UCX even by a zmq-preferring process */
  ASSERT_OK(tsr_xfer_pick("ucx://h:1", TSR_TRANSPORT_ZMQ, true, ep, sizeof ep, &ucx, &err));
  ASSERT_TRUE(ucx);
  ASSERT_OK(tsr_xfer_pick("tcp://h:2#curve=KEY", TSR_TRANSPORT_UCX, true, ep, sizeof ep, &ucx, &err));
  ASSERT_STREQ(ep, "tcp://h:2#curve=KEY");
  ASSERT_EQ(tsr_xfer_pick("ucx://h:1", TSR_TRANSPORT_AUTO, false, ep, sizeof ep, &ucx, &err), TSR_ECONN);
  ASSERT_CONTAINS(err.text, "only over UCX");
  tsr_transport t;
  ASSERT_EQ(tsr_transport_parse("rdma", &t, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "'rdma'");
}

TEST(auto_server_offers_both_and_each_serves_the_same_bytes)
{
  served s;
  tsr_errbuf err = {{0}};
  ASSERT_OK(serve_start(&s, TSR_TRANSPORT_AUTO, &err));
  const char *address = tsr_xfer_server_address(s.srv);
  int prefix = strncmp(address, "ucx://127.0.0.1:", 16);
  bool has_tcp = strstr(address, ",tcp://127.0.0.1:") != NULL;
  int rc[2] = {0, 0};
  size_t nbytes[2] = {0, 0};
  int same[2] = {0, 0};
  tsr_transport prefs[2] = {TSR_TRANSPORT_UCX, TSR_TRANSPORT_ZMQ};
  for (int i = 0; i < 2; i++) {
    tsr_chunk_header hdr;
    tsr_xfer_data out = {0};
    rc[i] = fetch(address, prefs[i], "big", &hdr, &out, &err);
    nbytes[i] = out.nbytes;
    same[i] = rc[i] == 0 && out.nbytes == BIG_BYTES && memcmp(out.data, s.big, BIG_BYTES) == 0 &&
              (uintptr_t)out.data % TSR_XFER_ALIGN == 0;
    tsr_xfer_data_release(&out);
  }
  serve_stop(&s);
  ASSERT_EQ(prefix, 0);
  ASSERT_TRUE(has_tcp);
  ASSERT_OK(rc[0]);
  ASSERT_OK(rc[1]);
  ASSERT_EQ(nbytes[0], (size_t)BIG_BYTES);
  ASSERT_TRUE(same[0] && same[1]);
  ASSERT_EQ(atomic_load(&s.released), 2);   /* every send dropped its reference */
}

TEST(ucx_only_server_small_chunk_and_missing_key)
{
  served s;
  tsr_errbuf err = {{0}};
  ASSERT_OK(serve_start(&s, TSR_TRANSPORT_UCX, &err));
  const char *address = tsr_xfer_server_address(s.srv);
  bool ucx_only = strncmp(address, "ucx://", 6) == 0 && strchr(address, ',') == NULL;
  tsr_chunk_header hdr;
  tsr_xfer_data out = {0};
  int rc = fetch(address, TSR_TRANSPORT_ZMQ, "small", &hdr, &out, &err);
  double got[3] = {0};
  if (rc == 0 && out.nbytes == sizeof got) memcpy(got, out.data, sizeof got);
  int64_t shape0 = hdr.meta.shape[0];
  tsr_xfer_data_release(&out);
  tsr_errbuf missing = {{0}};
  int rc_missing = fetch(address, TSR_TRANSPORT_AUTO, "nope", &hdr, &out, &missing);
  serve_stop(&s);
  ASSERT_TRUE(ucx_only);
  ASSERT_OK(rc);
  ASSERT_EQ(shape0, 3);
  ASSERT_TRUE(got[0] == 1.5 && got[1] == 3.0 && got[2] == 4.5);
  ASSERT_EQ(rc_missing, TSR_ENOTFOUND);
  ASSERT_CONTAINS(missing.text, "no such chunk");
}

TEST(ucx_with_curve_keys_is_refused)
{
  tsr_curve curve = {.on = true};
  ASSERT_OK(zmq_curve_keypair(curve.public_key, curve.secret_key));
  tsr_xfer_server *srv = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_EQ(tsr_xfer_server_open_transport(zctx, "tcp://127.0.0.1:0", NULL, &curve, TSR_TRANSPORT_UCX, &srv, &err),
            TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "CURVE");
  /* auto under CURVE: ZeroMQ only */
  ASSERT_OK(tsr_xfer_server_open_transport(zctx, "tcp://127.0.0.1:0", NULL, &curve, TSR_TRANSPORT_AUTO, &srv, &err));
  bool zmq_only = strncmp(tsr_xfer_server_address(srv), "tcp://", 6) == 0 && !tsr_xfer_server_has_ucx(srv);
  tsr_xfer_server_close(&srv);
  ASSERT_TRUE(zmq_only);
}

/* Regression: UCX 1.13's connection manager overflowed a buffer (ASan)
 * on an IPv6 peer; the listener refuses IPv6 hosts with the reason. */
TEST(ucx_listener_refuses_ipv6_hosts)
{
  tsr_xfer_server *srv = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_EQ(tsr_xfer_server_open_transport(zctx, "tcp://[::1]:0", NULL, NULL, TSR_TRANSPORT_UCX, &srv, &err),
            TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "IPv4");
  ASSERT_TRUE(srv == NULL);
}

static atomic_int abort_asked;
static bool abort_after_three(void *ctx, const char *address)
{
  (void)ctx, (void)address;
  return atomic_fetch_add(&abort_asked, 1) >= 3;
}

TEST(ucx_fetch_from_a_stalled_peer_is_abandoned_by_abort)
{
  served s;
  tsr_errbuf err = {{0}};
  ASSERT_OK(serve_start(&s, TSR_TRANSPORT_UCX, &err));
  atomic_store(&s.paused, true);   /* connected, never answers: a SIGSTOPped peer */
  tsr_xfer_set_fetch_transport(TSR_TRANSPORT_UCX);
  tsr_xfer_conn *conn = NULL;
  int rc = tsr_xfer_open(zctx, tsr_xfer_server_address(s.srv), &conn, &err);
  tsr_chunk_header hdr;
  tsr_xfer_data out = {0};
  uint64_t t0 = tsr_now_ms();
  if (rc == 0) rc = tsr_xfer_get_abortable(conn, "small", 20000, abort_after_three, NULL, &hdr, &out, &err);
  uint64_t took = tsr_now_ms() - t0;
  tsr_xfer_close(&conn);
  atomic_store(&s.paused, false);
  serve_stop(&s);
  ASSERT_EQ(rc, TSR_ECONN);
  ASSERT_CONTAINS(err.text, "abandoned");
  ASSERT_TRUE(took < 3000);
}

/* ---- a peer in another process that dies ---- */

static int child_lookup(void *arg, const char *key, tsr_xfer_chunk *chunk)
{
  unsigned char *huge = arg;
  if (strcmp(key, "die") == 0) raise(SIGKILL);   /* dies holding the request */
  memset(chunk, 0, sizeof *chunk);
  chunk->meta.dtype = TSR_U8;
  chunk->meta.ndim = 1;
  chunk->meta.shape[0] = HUGE_BYTES;
  chunk->data = huge;
  chunk->nbytes = HUGE_BYTES;
  return 0;
}

/* The child: serves over UCX, writes its address to path, never exits. */
static int child_main(const char *path)
{
  zctx = zmq_ctx_new();
  unsigned char *huge = malloc(HUGE_BYTES);
  memset(huge, 7, HUGE_BYTES);
  tsr_xfer_server *srv = NULL;
  tsr_errbuf err = {{0}};
  if (tsr_xfer_server_open_transport(zctx, "tcp://127.0.0.1:0", NULL, NULL, TSR_TRANSPORT_UCX, &srv, &err) != 0) {
    fprintf(stderr, "child: %s\n", err.text);
    return 1;
  }
  FILE *f = fopen(path, "w");
  fprintf(f, "%s\n", tsr_xfer_server_address(srv));
  fclose(f);
  for (;;) {
    zmq_pollitem_t items[2];
    int n = tsr_xfer_server_pollitems(srv, items, 2);
    zmq_poll(items, n, 50);
    tsr_xfer_server_serve(srv, child_lookup, huge);
  }
}

static const char *self_exe;

static pid_t start_child(char *address, size_t cap)
{
  char path[64];
  snprintf(path, sizeof path, "/tmp/tsr-xfer-child-%d", (int)getpid());
  unlink(path);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self_exe, self_exe, "--child", path, (char *)NULL);
    _exit(127);
  }
  address[0] = '\0';
  for (int i = 0; i < 500 && address[0] == '\0'; i++) {
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      if (fgets(address, (int)cap, f) == NULL) address[0] = '\0';
      address[strcspn(address, "\n")] = '\0';
      fclose(f);
    }
    if (address[0] == '\0') usleep(10000);
  }
  unlink(path);
  return pid;
}

TEST(ucx_peer_killed_holding_the_request_fails_fast)
{
  char address[TSR_MAX_ADDR_LEN];
  pid_t pid = start_child(address, sizeof address);
  ASSERT_TRUE(address[0] != '\0');
  tsr_chunk_header hdr;
  tsr_xfer_data out = {0};
  tsr_errbuf err = {{0}};
  uint64_t t0 = tsr_now_ms();
  int rc = fetch(address, TSR_TRANSPORT_UCX, "die", &hdr, &out, &err);
  uint64_t took = tsr_now_ms() - t0;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  ASSERT_EQ(rc, TSR_ECONN);   /* not TSR_ETIMEDOUT after 10 s: the endpoint failed */
  ASSERT_CONTAINS(err.text, "connection lost");
  ASSERT_TRUE(took < 5000);
}

static void *kill_soon(void *arg)
{
  usleep(30000);
  kill(*(pid_t *)arg, SIGKILL);
  return NULL;
}

TEST(ucx_peer_killed_mid_transfer_of_256_mib_never_hangs)
{
  char address[TSR_MAX_ADDR_LEN];
  pid_t pid = start_child(address, sizeof address);
  ASSERT_TRUE(address[0] != '\0');
  tsr_chunk_header hdr;
  tsr_xfer_data out = {0};
  tsr_errbuf err = {{0}};
  /* warm the connection, then fetch while a thread kills the peer */
  int warm = fetch(address, TSR_TRANSPORT_UCX, "huge", &hdr, &out, &err);
  bool warm_ok = warm == 0 && out.nbytes == HUGE_BYTES && ((unsigned char *)out.data)[HUGE_BYTES - 1] == 7;
  tsr_xfer_data_release(&out);
  pthread_t killer;
  pthread_create(&killer, NULL, kill_soon, &pid);
  uint64_t t0 = tsr_now_ms();
  int rc = fetch(address, TSR_TRANSPORT_UCX, "huge", &hdr, &out, &err);
  uint64_t took = tsr_now_ms() - t0;
  bool whole = rc == 0 && out.nbytes == HUGE_BYTES && ((unsigned char *)out.data)[HUGE_BYTES - 1] == 7;
  tsr_xfer_data_release(&out);
  pthread_join(killer, NULL);
  waitpid(pid, NULL, 0);
  ASSERT_OK(warm);
  ASSERT_TRUE(warm_ok);
  /* either it finished before the kill, whole, or it failed as a lost connection */
  ASSERT_TRUE(whole || rc == TSR_ECONN);
  ASSERT_TRUE(took < 5000);
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);
  self_exe = argv[0];
  if (!tsr_xfer_ucx_built()) {
    fprintf(stderr, "unit.xfer: this build has no UCX (TSR_UCX off)\n");
    return KIT_SKIP;
  }
  zctx = zmq_ctx_new();
  RUN(address_pick_follows_preference_and_falls_back);
  RUN(auto_server_offers_both_and_each_serves_the_same_bytes);
  RUN(ucx_only_server_small_chunk_and_missing_key);
  RUN(ucx_with_curve_keys_is_refused);
  RUN(ucx_listener_refuses_ipv6_hosts);
  RUN(ucx_fetch_from_a_stalled_peer_is_abandoned_by_abort);
  RUN(ucx_peer_killed_holding_the_request_fails_fast);
  RUN(ucx_peer_killed_mid_transfer_of_256_mib_never_hangs);
  zmq_ctx_term(zctx);
  return kit_summary();
}
