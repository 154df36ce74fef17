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
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kit.h"
#include "net/curve.h"
#include "net/net.h"
#include "net/ucx.h"
#include "net/xfer_int.h"

#define BIG_BYTES (64u << 20)
#define HUGE_BYTES (256u << 20)

typedef struct served {
  tsr_xfer_server *srv;
  atomic_bool stop, paused;
  atomic_int released;
  atomic_int device_ok_seen;   /* lookups told they may hand device memory */
  double *small;        /* 3 f64 */
  unsigned char *big;   /* BIG_BYTES */
  unsigned char *big2;  /* BIG_BYTES, other bytes: "big2" */
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
  if (chunk->device_ok) atomic_fetch_add(&s->device_ok_seen, 1);
  memset(chunk, 0, sizeof *chunk);
  chunk->meta.dtype = strncmp(key, "big", 3) == 0 ? TSR_U8 : TSR_F64;
  chunk->meta.ndim = 1;
  chunk->release = release_ref;
  chunk->hint = s;
  if (strcmp(key, "small") == 0) {
    chunk->meta.shape[0] = 3;
    chunk->data = s->small;
    chunk->nbytes = 3 * sizeof(double);
    return 0;
  }
  if (strcmp(key, "big") == 0 || strcmp(key, "big2") == 0) {
    chunk->meta.shape[0] = BIG_BYTES;
    chunk->data = key[3] == '2' ? s->big2 : s->big;
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
  s->big2 = malloc(BIG_BYTES);
  for (int i = 0; i < 3; i++) s->small[i] = 1.5 * (i + 1);
  for (size_t i = 0; i < BIG_BYTES; i++) s->big[i] = (unsigned char)(i * 131 + (i >> 20));
  for (size_t i = 0; i < BIG_BYTES; i++) s->big2[i] = (unsigned char)(i * 7 + 3);
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
  free(s->big2);
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


/* ---- the receive pool (xfer_ucx_pool.c) ---- */

/* True when [p, p + 4096) is mapped in this process. */
static bool is_mapped(void *p)
{
  unsigned char vec;
  return mincore(p, 4096, &vec) == 0;
}

static bool fetched_ok(int rc, const tsr_xfer_data *out, const unsigned char *want)
{
  return rc == 0 && out->nbytes == BIG_BYTES && memcmp(out->data, want, BIG_BYTES) == 0;
}

/* A UCX server and one connection to it, for the pool tests. */
static int pool_session_open(served *s, tsr_xfer_conn **conn, tsr_errbuf *err)
{
  *conn = NULL;
  int rc = serve_start(s, TSR_TRANSPORT_UCX, err);
  tsr_xfer_set_fetch_transport(TSR_TRANSPORT_UCX);
  return rc != 0 ? rc : tsr_xfer_open(zctx, tsr_xfer_server_address(s->srv), conn, err);
}

/* Closes both, then what a worker does at shutdown (trim, which waits for
 * a spare still being made), and puts the pool's defaults back. */
static void pool_session_close(served *s, tsr_xfer_conn **conn)
{
  tsr_xfer_close(conn);
  serve_stop(s);
  tsr_xfer_pool_trim();
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, TSR_XFER_POOL_MAX_CLASS, false);
}

TEST(ucx_pool_reuses_a_released_buffer_and_trim_unmaps_it)
{
  tsr_xfer_pool_trim();
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, TSR_XFER_POOL_MAX_CLASS, false);   /* exact reuse: no spare */
  tsr_xfer_pool_stats st0, st1, st2, st3;
  tsr_xfer_pool_get_stats(&st0);
  served s;
  tsr_errbuf err = {{0}};
  tsr_xfer_conn *conn = NULL;
  ASSERT_OK(pool_session_open(&s, &conn, &err));
  tsr_chunk_header hdr;
  tsr_xfer_data a = {0}, b = {0}, c = {0};
  int rc_a = tsr_xfer_get(conn, "big", 10000, &hdr, &a, &err);
  bool ok_a = fetched_ok(rc_a, &a, s.big), pooled_a = a.pooled != NULL;
  void *first = a.data;
  tsr_xfer_data_release(&a);
  tsr_xfer_pool_get_stats(&st1);
  /* the released buffer comes back for the next chunk, overwritten */
  int rc_b = tsr_xfer_get(conn, "big2", 10000, &hdr, &b, &err);
  bool ok_b = fetched_ok(rc_b, &b, s.big2), same_buffer = b.data == first;
  /* while b holds it, another chunk needs a buffer of its own */
  int rc_c = tsr_xfer_get(conn, "big", 10000, &hdr, &c, &err);
  bool ok_c = fetched_ok(rc_c, &c, s.big), other_buffer = c.data != first && c.data != NULL;
  void *second = c.data;
  tsr_xfer_data_release(&b);
  tsr_xfer_data_release(&c);
  tsr_xfer_pool_get_stats(&st2);
  bool mapped_before = is_mapped(first) && is_mapped(second);
  pool_session_close(&s, &conn);
  tsr_xfer_pool_get_stats(&st3);
  ASSERT_TRUE(ok_a && ok_b && ok_c);
  ASSERT_TRUE(pooled_a);
  ASSERT_EQ(st1.lent_buffers, 0u);
  ASSERT_EQ(st1.idle_buffers, 1u);
  ASSERT_TRUE(same_buffer);
  ASSERT_TRUE(other_buffer);
  ASSERT_EQ(st2.taken - st0.taken, 3u);
  ASSERT_EQ(st2.reused - st0.reused, 1u);
  ASSERT_EQ(st2.idle_buffers, 2u);
  ASSERT_TRUE(st2.idle_bytes >= 2u * BIG_BYTES);
  ASSERT_TRUE(mapped_before);
  ASSERT_EQ(st3.idle_buffers, 0u);
  ASSERT_EQ(st3.idle_bytes, 0u);
  ASSERT_EQ(st3.lent_buffers, 0u);
  ASSERT_TRUE(!is_mapped(first) && !is_mapped(second));   /* unmapped, not just listed as free */
}

static int sink_calls;
static void *sink_alloc_counted(void *arg, size_t nbytes)
{
  (void)arg, (void)nbytes;
  sink_calls++;
  return NULL;
}
static void sink_free_counted(void *arg, void *ptr, size_t nbytes) { (void)arg, (void)ptr, (void)nbytes; }

/* A UCX without CUDA (Debian's): the server never offers device memory and
 * a fetch's device sink is never asked: the chunk lands in host memory. */
TEST(device_sink_is_unused_and_lookups_get_host_only_without_cuda_in_ucx)
{
  if (tsr_xfer_device_capable()) {
    fprintf(stderr, "  SKIPPED: this UCX moves CUDA memory (gpu.xfer tests that path)\n");
    return;
  }
  served s;
  tsr_errbuf err = {{0}};
  ASSERT_OK(serve_start(&s, TSR_TRANSPORT_UCX, &err));
  tsr_xfer_device_sink sink = {sink_alloc_counted, sink_free_counted, NULL};
  tsr_chunk_header hdr;
  tsr_xfer_data data = {.sink = &sink};
  sink_calls = 0;
  int rc = fetch(tsr_xfer_server_address(s.srv), TSR_TRANSPORT_UCX, "big", &hdr, &data, &err);
  bool ok = fetched_ok(rc, &data, s.big), on_device = data.on_device;
  tsr_xfer_data_release(&data);
  int offered = atomic_load(&s.device_ok_seen);
  serve_stop(&s);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(!on_device);
  ASSERT_EQ(sink_calls, 0);
  ASSERT_EQ(offered, 0);
}

/* Fetches "big" and "small" over UCX; direct tells whether the conn went
 * to the server's worker address, local whether from a worker without tcp. */
static int fetch_both(served *s, bool *direct, bool *local, tsr_errbuf *err)
{
  tsr_xfer_set_fetch_transport(TSR_TRANSPORT_UCX);
  tsr_xfer_conn *conn = NULL;
  tsr_chunk_header hdr;
  tsr_xfer_data big = {0}, small = {0};
  int rc = tsr_xfer_open(zctx, tsr_xfer_server_address(s->srv), &conn, err);
  if (rc == 0) rc = tsr_xfer_get(conn, "big", 10000, &hdr, &big, err);
  if (rc == 0 && !fetched_ok(rc, &big, s->big)) rc = TSR_EPROTO;
  if (rc == 0) rc = tsr_xfer_get(conn, "small", 10000, &hdr, &small, err);
  if (rc == 0 && memcmp(small.data, s->small, 3 * sizeof(double)) != 0) rc = TSR_EPROTO;
  *direct = conn != NULL && tsr_xfer_is_direct(conn);
  *local = conn != NULL && tsr_xfer_is_direct_local(conn);
  tsr_xfer_data_release(&big);
  tsr_xfer_data_release(&small);
  tsr_xfer_close(&conn);
  return rc;
}

/* A server on this host is reached from its worker address (shared
 * memory), from a worker without tcp; TESSERA_UCX_LOCAL=0 set after the
 * process's contexts were made leaves no worker that reaches the
 * server's worker (the first context was made without shared memory),
 * so the listener's endpoint serves; TESSERA_UCX_DIRECT=0 keeps the
 * listener's tcp. The same bytes each way. */
TEST(ucx_peer_on_this_host_is_reached_directly_unless_turned_off)
{
  served s;
  tsr_errbuf err = {{0}};
  ASSERT_OK(serve_start(&s, TSR_TRANSPORT_UCX, &err));
  bool direct = false, local = false, direct_shared = false, local_off = true, via_listener = true, local_listener = true;
  int rc_direct = fetch_both(&s, &direct, &local, &err);
  setenv("TESSERA_UCX_LOCAL", "0", 1);
  int rc_shared = fetch_both(&s, &direct_shared, &local_off, &err);
  unsetenv("TESSERA_UCX_LOCAL");
  setenv("TESSERA_UCX_DIRECT", "0", 1);
  int rc_listener = fetch_both(&s, &via_listener, &local_listener, &err);
  unsetenv("TESSERA_UCX_DIRECT");
  serve_stop(&s);
  ASSERT_EQ(rc_direct, 0);
  ASSERT_EQ(rc_shared, 0);
  ASSERT_EQ(rc_listener, 0);
  ASSERT_TRUE(direct && local);
  ASSERT_TRUE(!direct_shared && !local_off);
  ASSERT_TRUE(!via_listener && !local_listener);
}

/* The contexts' transports: the local one gets the user's UCX_TLS
 * without tcp (none when that leaves no shared memory), the listener's
 * the user's without shared memory. expect NULL: no such context. */
TEST(ucx_contexts_split_the_users_transports)
{
  static const struct {
    bool local;
    const char *user, *expect;
  } cases[] = {
    {true, NULL, "^tcp"},
    {true, "all", "^tcp"},
    {true, "sm,self,tcp", "sm,self"},
    {true, "tcp,posix,cuda_ipc,cuda_copy", "posix,cuda_ipc,cuda_copy"},
    {true, "^ib", "^ib,tcp"},
    {true, "tcp", NULL},
    {true, "cuda_ipc,cuda_copy,tcp,self", NULL},
    {true, "^sm", NULL},
    {false, NULL, "^sm"},
    {false, "sm,self,tcp,cma,cuda_ipc", "self,tcp,cuda_ipc"},
    {false, "^ib", "^ib,sm"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[64] = "";
    bool made = cases[i].local ? tsr_ucx_local_tls(cases[i].user, out, sizeof out)
                               : tsr_ucx_listener_tls(cases[i].user, out, sizeof out);
    ASSERT_EQ(made, cases[i].expect != NULL);
    if (made) ASSERT_STREQ(out, cases[i].expect);
  }
  char small[8];
  ASSERT_TRUE(!tsr_ucx_local_tls("sm,self,rc_verbs,cuda_copy,cuda_ipc", small, sizeof small));
  /* what the contexts' own UCX_TLS carries (their shared-memory defaults) */
  ASSERT_TRUE(tsr_ucx_tls_has_shared_memory(NULL) && tsr_ucx_tls_has_shared_memory("^tcp"));
  ASSERT_TRUE(tsr_ucx_tls_has_shared_memory("shm,self") && tsr_ucx_tls_has_shared_memory("tcp,sysv"));
  ASSERT_TRUE(!tsr_ucx_tls_has_shared_memory("^sm") && !tsr_ucx_tls_has_shared_memory("tcp,cma,cuda_ipc"));
}

TEST(ucx_pool_chunk_bigger_than_its_class_and_idle_limit)
{
  tsr_xfer_pool_trim();
  served s;
  tsr_errbuf err = {{0}};
  tsr_xfer_conn *conn = NULL;
  ASSERT_OK(pool_session_open(&s, &conn, &err));
  tsr_chunk_header hdr;
  tsr_xfer_data a = {0}, b = {0};
  tsr_xfer_pool_stats st0, st1, st2;
  /* classes up to 16 MiB: a 64 MiB chunk gets a plain buffer, never kept */
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, 16u << 20, false);
  tsr_xfer_pool_get_stats(&st0);
  int rc_big = tsr_xfer_get(conn, "big", 10000, &hdr, &a, &err);
  bool ok_big = fetched_ok(rc_big, &a, s.big) && (uintptr_t)a.data % 64 == 0;
  tsr_xfer_data_release(&a);
  tsr_xfer_pool_get_stats(&st1);
  /* idle limit of one buffer: of two released, the second is unmapped */
  tsr_xfer_pool_configure(BIG_BYTES, TSR_XFER_POOL_MAX_CLASS, false);
  int rc_a = tsr_xfer_get(conn, "big", 10000, &hdr, &a, &err);
  int rc_b = tsr_xfer_get(conn, "big2", 10000, &hdr, &b, &err);
  bool ok_two = fetched_ok(rc_a, &a, s.big) && fetched_ok(rc_b, &b, s.big2);
  void *second = b.data;
  tsr_xfer_data_release(&a);
  tsr_xfer_data_release(&b);
  tsr_xfer_pool_get_stats(&st2);
  bool second_mapped = is_mapped(second);
  pool_session_close(&s, &conn);
  ASSERT_TRUE(ok_big);
  ASSERT_EQ(st1.unpooled - st0.unpooled, 1u);
  ASSERT_EQ(st1.idle_buffers, 0u);
  ASSERT_EQ(st1.lent_buffers, 0u);
  ASSERT_TRUE(ok_two);
  ASSERT_EQ(st2.idle_buffers, 1u);
  ASSERT_EQ(st2.idle_bytes, (uint64_t)BIG_BYTES);
  ASSERT_TRUE(!second_mapped);
}

/* Waits up to 5 s for the background spare count to reach n. */
static bool spares_reach(uint64_t n)
{
  tsr_xfer_pool_stats st;
  for (int i = 0; i < 500; i++) {
    tsr_xfer_pool_get_stats(&st);
    if (st.spares >= n) return true;
    usleep(10000);
  }
  return false;
}

TEST(ucx_pool_makes_a_spare_so_the_next_chunk_finds_a_buffer_while_one_is_held)
{
  tsr_xfer_pool_trim();
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, TSR_XFER_POOL_MAX_CLASS, true);   /* as a worker does */
  tsr_xfer_pool_stats st0, st1, st2;
  tsr_xfer_pool_get_stats(&st0);
  served s;
  tsr_errbuf err = {{0}};
  tsr_xfer_conn *conn = NULL;
  ASSERT_OK(pool_session_open(&s, &conn, &err));
  tsr_chunk_header hdr;
  tsr_xfer_data a = {0}, b = {0};
  int rc_a = tsr_xfer_get(conn, "big", 10000, &hdr, &a, &err);
  bool spare_made = spares_reach(st0.spares + 1);
  tsr_xfer_pool_get_stats(&st1);
  /* a still holds its buffer: b gets the spare, not a fresh mapping */
  int rc_b = tsr_xfer_get(conn, "big2", 10000, &hdr, &b, &err);
  bool ok = fetched_ok(rc_a, &a, s.big) && fetched_ok(rc_b, &b, s.big2) && a.data != b.data;
  tsr_xfer_data_release(&a);
  tsr_xfer_data_release(&b);
  pool_session_close(&s, &conn);
  tsr_xfer_pool_get_stats(&st2);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(spare_made);
  ASSERT_EQ(st1.idle_buffers, 1u);
  ASSERT_EQ(st1.lent_buffers, 1u);
  ASSERT_EQ(st2.reused - st0.reused, 1u);   /* b took the spare */
  ASSERT_EQ(st2.idle_buffers, 0u);
  ASSERT_EQ(st2.lent_buffers, 0u);
}

/* Waits up to 5 s for the count of buffers warmed ahead (or, buffers
 * that exist) to reach n. */
static bool stat_reach(bool existing, uint64_t n)
{
  tsr_xfer_pool_stats st;
  for (int i = 0; i < 500; i++) {
    tsr_xfer_pool_get_stats(&st);
    if ((existing ? st.buffers : st.warmed) >= n) return true;
    usleep(10000);
  }
  return false;
}

/* A worker's start (--recv-pool-warm): buffers exist, mapped, before any
 * fetch; the first fetch takes one (no buffer made inside it); within
 * the idle limit; trim at shutdown unmaps them. */
TEST(ucx_pool_fill_warms_buffers_before_any_fetch_and_trim_frees_them)
{
  tsr_xfer_pool_trim();
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, TSR_XFER_POOL_MAX_CLASS, false);
  tsr_xfer_pool_stats st0, st1, st2, st3;
  tsr_xfer_pool_get_stats(&st0);
  unsigned made = tsr_xfer_pool_fill(BIG_BYTES, 2);
  unsigned again = tsr_xfer_pool_fill(BIG_BYTES, 2);   /* already there: nothing more */
  tsr_xfer_pool_get_stats(&st1);
  served s;
  tsr_errbuf err = {{0}};
  tsr_xfer_conn *conn = NULL;
  ASSERT_OK(pool_session_open(&s, &conn, &err));
  tsr_chunk_header hdr;
  tsr_xfer_data a = {0};
  int rc_a = tsr_xfer_get(conn, "big", 10000, &hdr, &a, &err);
  bool ok_a = fetched_ok(rc_a, &a, s.big) && a.pooled != NULL;
  void *first = a.data;
  tsr_xfer_pool_get_stats(&st2);
  tsr_xfer_data_release(&a);
  bool mapped_before = is_mapped(first);
  pool_session_close(&s, &conn);
  tsr_xfer_pool_get_stats(&st3);
  /* an idle limit of one buffer warms one */
  tsr_xfer_pool_configure(BIG_BYTES, TSR_XFER_POOL_MAX_CLASS, false);
  unsigned limited = tsr_xfer_pool_fill(BIG_BYTES, 3);
  tsr_xfer_pool_trim();
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, TSR_XFER_POOL_MAX_CLASS, false);
  ASSERT_EQ(made, 2u);
  ASSERT_EQ(again, 0u);
  ASSERT_EQ(st1.buffers - st0.buffers, 2u);
  ASSERT_EQ(st1.idle_buffers, 2u);
  ASSERT_EQ(st1.warmed - st0.warmed, 2u);
  ASSERT_TRUE(ok_a);
  ASSERT_EQ(st2.reused - st0.reused, 1u);   /* the fetch took a warmed buffer */
  ASSERT_EQ(st2.buffers, st1.buffers);      /* ... and made none */
  ASSERT_EQ(st2.lent_buffers, 1u);
  ASSERT_TRUE(mapped_before);
  ASSERT_EQ(st3.buffers, 0u);
  ASSERT_EQ(st3.idle_bytes, 0u);
  ASSERT_TRUE(!is_mapped(first));
  ASSERT_EQ(limited, 1u);
}

/* A queued task's input size (tsr_xfer_pool_warm): the background maker
 * makes the missing buffers, counting lent ones as there; a chunk larger
 * than the warmed class still gets a buffer of its own. */
TEST(ucx_pool_warm_in_the_background_and_a_larger_chunk_still_fits)
{
  tsr_xfer_pool_trim();
  tsr_xfer_pool_configure(TSR_XFER_POOL_IDLE_DEFAULT, TSR_XFER_POOL_MAX_CLASS, true);   /* as a worker does */
  tsr_xfer_pool_stats st0, st1, st2, st3;
  tsr_xfer_pool_get_stats(&st0);
  tsr_xfer_pool_warm(16u << 20, 2);   /* a 16 MiB class: 64 MiB chunks do not fit it */
  bool warmed = stat_reach(false, st0.warmed + 2);
  tsr_xfer_pool_get_stats(&st1);
  served s;
  tsr_errbuf err = {{0}};
  tsr_xfer_conn *conn = NULL;
  ASSERT_OK(pool_session_open(&s, &conn, &err));
  tsr_chunk_header hdr;
  tsr_xfer_data a = {0};
  int rc_a = tsr_xfer_get(conn, "big", 10000, &hdr, &a, &err);
  bool ok_a = fetched_ok(rc_a, &a, s.big) && a.pooled != NULL;
  tsr_xfer_pool_get_stats(&st2);
  /* two 64 MiB buffers wanted while a holds one: one more is made (the
   * spare a's take asked for, or the want's), not two */
  tsr_xfer_pool_warm(BIG_BYTES, 2);
  bool fourth = stat_reach(true, 4);
  usleep(300000);
  tsr_xfer_pool_stats st_more;
  tsr_xfer_pool_get_stats(&st_more);
  tsr_xfer_data_release(&a);
  pool_session_close(&s, &conn);
  tsr_xfer_pool_get_stats(&st3);
  ASSERT_TRUE(warmed);
  ASSERT_EQ(st1.idle_buffers, 2u);
  ASSERT_EQ(st1.idle_bytes, 2u * (16u << 20));
  ASSERT_TRUE(ok_a);
  ASSERT_EQ(st2.reused - st1.reused, 0u);   /* no warmed 16 MiB buffer taken */
  ASSERT_TRUE(st2.buffers >= 3u);           /* two warmed + its own (+ the spare its take asked for) */
  ASSERT_TRUE(fourth);
  ASSERT_EQ(st_more.buffers, 4u);
  ASSERT_EQ(st_more.idle_buffers, 3u);
  ASSERT_EQ(st3.buffers, 0u);   /* trim waited for the maker, then unmapped all */
  ASSERT_EQ(st3.lent_buffers, 0u);
}

TEST(zmq_receives_are_not_pooled_and_small_ucx_chunks_neither)
{
  served s;
  tsr_errbuf err = {{0}};
  ASSERT_OK(serve_start(&s, TSR_TRANSPORT_AUTO, &err));
  tsr_chunk_header hdr;
  tsr_xfer_data z = {0}, u = {0};
  int rc_z = fetch(tsr_xfer_server_address(s.srv), TSR_TRANSPORT_ZMQ, "big", &hdr, &z, &err);
  bool z_pooled = z.pooled != NULL;
  int rc_u = fetch(tsr_xfer_server_address(s.srv), TSR_TRANSPORT_UCX, "small", &hdr, &u, &err);
  bool u_ok = rc_u == 0 && u.nbytes == 3 * sizeof(double) && ((double *)u.data)[2] == 4.5;
  bool u_pooled = u.pooled != NULL;
  tsr_xfer_data_release(&z);
  tsr_xfer_data_release(&u);
  serve_stop(&s);
  ASSERT_OK(rc_z);
  ASSERT_TRUE(!z_pooled);
  ASSERT_TRUE(u_ok);
  ASSERT_TRUE(!u_pooled);
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
  /* the receive buffer of the broken transfer went back to the pool when
   * the connection closed (fetch closes it): none is still lent */
  tsr_xfer_pool_stats st;
  tsr_xfer_pool_get_stats(&st);
  tsr_xfer_pool_trim();
  ASSERT_EQ(st.lent_buffers, 0u);
  ASSERT_TRUE(st.idle_buffers >= 1u);
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
  RUN(ucx_pool_reuses_a_released_buffer_and_trim_unmaps_it);
  RUN(ucx_pool_chunk_bigger_than_its_class_and_idle_limit);
  RUN(device_sink_is_unused_and_lookups_get_host_only_without_cuda_in_ucx);
  RUN(ucx_peer_on_this_host_is_reached_directly_unless_turned_off);
  RUN(ucx_contexts_split_the_users_transports);
  RUN(ucx_pool_makes_a_spare_so_the_next_chunk_finds_a_buffer_while_one_is_held);
  RUN(ucx_pool_fill_warms_buffers_before_any_fetch_and_trim_frees_them);
  RUN(ucx_pool_warm_in_the_background_and_a_larger_chunk_still_fits);
  RUN(zmq_receives_are_not_pooled_and_small_ucx_chunks_neither);
  RUN(ucx_fetch_from_a_stalled_peer_is_abandoned_by_abort);
  RUN(ucx_peer_killed_holding_the_request_fails_fast);
  RUN(ucx_peer_killed_mid_transfer_of_256_mib_never_hangs);
  zmq_ctx_term(zctx);
  return kit_summary();
}
