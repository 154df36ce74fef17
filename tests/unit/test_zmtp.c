/* common/zmtp: our ZMTP sockets against libzmq's (the same wire both ways,
 * NULL and CURVE), against each other (tcp and ipc, large frames, many
 * messages, reconnects), and against bad peers (garbage, silence, frames
 * over the limit, wrong or refused keys), the socket serving its other
 * peers throughout. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "kit.h"
#include "zmtp/zmtp.h"

/* The next message on s within timeout_ms: 1, or 0 when none came. */
static int wait_msg(tsr_zmtp *s, tsr_zmtp_msg *m, int timeout_ms)
{
  uint64_t deadline = tsr_now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    if (tsr_zmtp_recv(s, m) == 1) return 1;
    uint64_t now = tsr_now_ms();
    if (now >= deadline) return 0;
    struct pollfd p = {tsr_zmtp_fd(s), POLLIN, 0};
    poll(&p, 1, (int)(deadline - now));
  }
}

/* Drives s (its handshakes, its writes) once, or for ms, dropping what
 * it receives. */
static void pump(tsr_zmtp *s, int ms)
{
  uint64_t deadline = tsr_now_ms() + (uint64_t)ms;
  do {
    struct pollfd p = {tsr_zmtp_fd(s), POLLIN, 0};
    poll(&p, 1, ms > 0 ? 5 : 0);
    tsr_zmtp_msg m;
    if (tsr_zmtp_recv(s, &m) == 1) tsr_zmtp_msg_close(&m);
  } while (tsr_now_ms() < deadline);
}

/* The next message on to while from (the other end, ours too) is driven:
 * 1, or 0 when none came within ~timeout_ms. */
static int relay_wait(tsr_zmtp *from, tsr_zmtp *to, tsr_zmtp_msg *m, int timeout_ms)
{
  uint64_t deadline = tsr_now_ms() + (uint64_t)timeout_ms;
  do {
    pump(from, 0);
    if (tsr_zmtp_recv(to, m) == 1) return 1;
    struct pollfd p[2] = {{tsr_zmtp_fd(from), POLLIN, 0}, {tsr_zmtp_fd(to), POLLIN, 0}};
    poll(p, 2, 1);
  } while (tsr_now_ms() < deadline);
  return 0;
}

static void *zsock(void *ctx, int type)
{
  void *s = zmq_socket(ctx, type);
  int linger = 0, timeo = 3000;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeo, sizeof timeo);
  return s;
}

/* A libzmq frame received within RCVTIMEO: its length, or -1. */
static int zrecv(void *s, char *buf, size_t cap, int *more)
{
  int n = zmq_recv(s, buf, cap, 0);
  int m = 0;
  size_t sz = sizeof m;
  zmq_getsockopt(s, ZMQ_RCVMORE, &m, &sz);
  if (more != NULL) *more = m;
  return n;
}

static char *pattern(size_t n, unsigned seed)
{
  char *p = malloc(n);
  for (size_t i = 0; i < n; i++) p[i] = (char)(i * 131 + seed);
  return p;
}

TEST(our_router_serves_libzmq_dealers)
{
  tsr_errbuf err;
  tsr_zmtp *r = NULL;
  char bound[128];
  tsr_zmtp_opts o = {.what = "test router"};
  ASSERT_OK(tsr_zmtp_bind("tcp://127.0.0.1:0", &o, &r, bound, sizeof bound, &err));
  ASSERT_TRUE(strncmp(bound, "tcp://127.0.0.1:", 16) == 0);
  void *ctx = zmq_ctx_new(), *d = zsock(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(d, bound), 0);
  size_t big_len = 300000;
  char *big = pattern(big_len, 7);
  ASSERT_EQ(zmq_send(d, "hello", 5, 0), 5);
  ASSERT_EQ(zmq_send(d, big, big_len, 0), (int)big_len);
  ASSERT_EQ(zmq_send(d, "a", 1, ZMQ_SNDMORE), 1);
  ASSERT_EQ(zmq_send(d, "bb", 2, 0), 2);
  tsr_zmtp_msg m;
  ASSERT_EQ(wait_msg(r, &m, 3000), 1);
  ASSERT_EQ(m.nframes, 1);
  ASSERT_EQ(m.len[0], 5);
  ASSERT_TRUE(memcmp(m.data[0], "hello", 5) == 0);
  ASSERT_EQ(m.id_len, 5);
  ASSERT_EQ(m.id[0], 0);
  uint8_t id[TSR_ZMTP_ID_MAX];
  size_t id_len = m.id_len;
  memcpy(id, m.id, id_len);
  tsr_zmtp_msg_close(&m);
  ASSERT_EQ(wait_msg(r, &m, 3000), 1);
  ASSERT_EQ(m.len[0], big_len);
  ASSERT_TRUE(memcmp(m.data[0], big, big_len) == 0);
  tsr_zmtp_msg_close(&m);
  ASSERT_EQ(wait_msg(r, &m, 3000), 1);
  ASSERT_EQ(m.nframes, 2);
  ASSERT_TRUE(m.len[1] == 2 && memcmp(m.data[1], "bb", 2) == 0);
  tsr_zmtp_msg_close(&m);
  ASSERT_EQ(tsr_zmtp_peers(r), 1);
  /* replies, one large */
  ASSERT_OK(tsr_zmtp_send(r, id, id_len, "world", 5));
  ASSERT_OK(tsr_zmtp_send_owned(r, id, id_len, pattern(big_len, 9), big_len));
  char *buf = malloc(big_len + 1);
  pump(r, 50);
  ASSERT_EQ(zrecv(d, buf, big_len, NULL), 5);
  ASSERT_TRUE(memcmp(buf, "world", 5) == 0);
  char *want = pattern(big_len, 9);
  for (int tries = 0; tries < 100; tries++) {   /* the router writes the rest as the dealer reads */
    pump(r, 10);
    int more = 0;
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &(int){10}, sizeof(int));
    int n = zrecv(d, buf, big_len + 1, &more);
    if (n < 0) continue;
    ASSERT_EQ(n, (int)big_len);
    ASSERT_TRUE(memcmp(buf, want, big_len) == 0);
    break;
  }
  /* an unknown peer: dropped with EHOSTUNREACH */
  ASSERT_EQ(tsr_zmtp_send(r, "\0\0\0\0\1", 5, "x", 1), -1);
  free(big), free(buf), free(want);
  zmq_close(d);
  zmq_ctx_term(ctx);
  tsr_zmtp_close(&r);
  ASSERT_TRUE(r == NULL);
}

TEST(our_dealer_talks_to_a_libzmq_router_and_queues_before_connecting)
{
  void *ctx = zmq_ctx_new(), *router = zsock(ctx, ZMQ_ROUTER);
  ASSERT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
  char ep[128];
  size_t ep_len = sizeof ep;
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &ep_len);
  tsr_errbuf err;
  tsr_zmtp *d = NULL;
  tsr_zmtp_opts o = {.what = "test dealer"};
  ASSERT_OK(tsr_zmtp_connect(ep, &o, &d, &err));
  ASSERT_OK(tsr_zmtp_send(d, NULL, 0, "first", 5));   /* before the handshake: held */
  ASSERT_OK(tsr_zmtp_flush(d, 3000));
  ASSERT_TRUE(tsr_zmtp_connected(d));
  char id[256], buf[64];
  int id_len = zrecv(router, id, sizeof id, NULL);
  ASSERT_TRUE(id_len > 0);
  ASSERT_EQ(zrecv(router, buf, sizeof buf, NULL), 5);
  ASSERT_TRUE(memcmp(buf, "first", 5) == 0);
  ASSERT_EQ(zmq_send(router, id, (size_t)id_len, ZMQ_SNDMORE), id_len);
  ASSERT_EQ(zmq_send(router, "back", 4, 0), 4);
  tsr_zmtp_msg m;
  ASSERT_EQ(wait_msg(d, &m, 3000), 1);
  ASSERT_TRUE(m.nframes == 1 && m.len[0] == 4 && memcmp(m.data[0], "back", 4) == 0);
  tsr_zmtp_msg_close(&m);
  tsr_zmtp_close(&d);
  zmq_close(router);
  zmq_ctx_term(ctx);
}

/* ours to ours over ipc: 2,000 messages of growing sizes and a 6 MB one
 * each way arrive whole and in order. */
TEST(ours_to_ours_over_ipc_in_order)
{
  tsr_errbuf err;
  tsr_zmtp *r = NULL, *d = NULL;
  char bound[128], ep[64];
  snprintf(ep, sizeof ep, "ipc://@tsr-test-zmtp-%d", (int)getpid());
  tsr_zmtp_opts o = {.what = "ipc"};
  ASSERT_OK(tsr_zmtp_bind(ep, &o, &r, bound, sizeof bound, &err));
  ASSERT_TRUE(strcmp(bound, ep) == 0);
  ASSERT_OK(tsr_zmtp_connect(bound, &o, &d, &err));
  for (unsigned i = 0; i < 2000; i++) {
    char *p = pattern(i * 7, i);
    ASSERT_OK(tsr_zmtp_send_owned(d, NULL, 0, p, i * 7));
  }
  size_t big_len = 6u << 20;
  ASSERT_OK(tsr_zmtp_send_owned(d, NULL, 0, pattern(big_len, 3), big_len));
  uint8_t id[TSR_ZMTP_ID_MAX];
  size_t id_len = 0;
  for (unsigned i = 0; i <= 2000; i++) {
    tsr_zmtp_msg m;
    pump(d, 0);
    ASSERT_EQ(relay_wait(d, r, &m, 5000), 1);
    size_t want_len = i < 2000 ? i * 7 : big_len;
    char *want = pattern(want_len, i < 2000 ? i : 3);
    ASSERT_EQ(m.len[0], want_len);
    ASSERT_TRUE(memcmp(m.data[0], want, want_len) == 0);
    free(want);
    memcpy(id, m.id, m.id_len);
    id_len = m.id_len;
    tsr_zmtp_msg_close(&m);
  }
  ASSERT_OK(tsr_zmtp_send_owned(r, id, id_len, pattern(big_len, 5), big_len));
  tsr_zmtp_msg m;
  ASSERT_EQ(relay_wait(r, d, &m, 5000), 1);
  char *want = pattern(big_len, 5);
  ASSERT_TRUE(m.len[0] == big_len && memcmp(m.data[0], want, big_len) == 0);
  free(want);
  tsr_zmtp_msg_close(&m);
  tsr_zmtp_close(&d);
  tsr_zmtp_close(&r);
}

/* ---------- CURVE ---------- */

typedef struct admit_log {
  char allowed[41];
  int asked, refused;
} admit_log;

static bool admit_one(void *arg, const char *key, const char *peer)
{
  admit_log *a = arg;
  (void)peer;
  a->asked++;
  if (strcmp(key, a->allowed) == 0) return true;
  a->refused++;
  return false;
}

TEST(curve_interoperates_with_libzmq_and_refuses_wrong_keys)
{
  char spub[41], ssec[41], cpub[41], csec[41], xpub[41], xsec[41];
  ASSERT_EQ(zmq_curve_keypair(spub, ssec), 0);
  ASSERT_EQ(zmq_curve_keypair(cpub, csec), 0);
  ASSERT_EQ(zmq_curve_keypair(xpub, xsec), 0);
  admit_log log = {0};
  memcpy(log.allowed, cpub, 41);
  tsr_errbuf err;
  tsr_zmtp *r = NULL;
  char bound[128];
  tsr_zmtp_opts o = {.what = "curve router", .secret_key = ssec, .admit = admit_one, .admit_arg = &log};
  ASSERT_OK(tsr_zmtp_bind("tcp://127.0.0.1:0", &o, &r, bound, sizeof bound, &err));
  void *ctx = zmq_ctx_new();
  /* a libzmq client with the right keys */
  void *good = zsock(ctx, ZMQ_DEALER);
  zmq_setsockopt(good, ZMQ_CURVE_SERVERKEY, spub, 40);
  zmq_setsockopt(good, ZMQ_CURVE_PUBLICKEY, cpub, 40);
  zmq_setsockopt(good, ZMQ_CURVE_SECRETKEY, csec, 40);
  ASSERT_EQ(zmq_connect(good, bound), 0);
  /* a plaintext one, one with a wrong server key, one not allowed */
  void *plain = zsock(ctx, ZMQ_DEALER), *wrong = zsock(ctx, ZMQ_DEALER), *stranger = zsock(ctx, ZMQ_DEALER);
  zmq_setsockopt(wrong, ZMQ_CURVE_SERVERKEY, xpub, 40);
  zmq_setsockopt(wrong, ZMQ_CURVE_PUBLICKEY, cpub, 40);
  zmq_setsockopt(wrong, ZMQ_CURVE_SECRETKEY, csec, 40);
  zmq_setsockopt(stranger, ZMQ_CURVE_SERVERKEY, spub, 40);
  zmq_setsockopt(stranger, ZMQ_CURVE_PUBLICKEY, xpub, 40);
  zmq_setsockopt(stranger, ZMQ_CURVE_SECRETKEY, xsec, 40);
  ASSERT_EQ(zmq_connect(plain, bound), 0);
  ASSERT_EQ(zmq_connect(wrong, bound), 0);
  ASSERT_EQ(zmq_connect(stranger, bound), 0);
  zmq_send(plain, "plain", 5, ZMQ_DONTWAIT);
  zmq_send(wrong, "wrong", 5, ZMQ_DONTWAIT);
  zmq_send(stranger, "stranger", 8, ZMQ_DONTWAIT);
  size_t big_len = 100000;
  char *big = pattern(big_len, 1);
  ASSERT_EQ(zmq_send(good, "secret", 6, 0), 6);
  ASSERT_EQ(zmq_send(good, big, big_len, 0), (int)big_len);
  tsr_zmtp_msg m;
  ASSERT_EQ(wait_msg(r, &m, 3000), 1);
  ASSERT_TRUE(m.len[0] == 6 && memcmp(m.data[0], "secret", 6) == 0);
  ASSERT_TRUE(strcmp(m.key, cpub) == 0);
  uint8_t id[TSR_ZMTP_ID_MAX];
  size_t id_len = m.id_len;
  memcpy(id, m.id, id_len);
  tsr_zmtp_msg_close(&m);
  ASSERT_EQ(wait_msg(r, &m, 3000), 1);
  ASSERT_TRUE(m.len[0] == big_len && memcmp(m.data[0], big, big_len) == 0);
  tsr_zmtp_msg_close(&m);
  ASSERT_OK(tsr_zmtp_send(r, id, id_len, "reply", 5));
  pump(r, 300);   /* the refused peers' handshakes run meanwhile */
  char buf[16];
  ASSERT_EQ(zrecv(good, buf, sizeof buf, NULL), 5);
  ASSERT_TRUE(memcmp(buf, "reply", 5) == 0);
  ASSERT_EQ(tsr_zmtp_recv(r, &m), 0);   /* nothing from the three others */
  ASSERT_TRUE(log.refused >= 1);
  ASSERT_TRUE(tsr_zmtp_refusals(r) >= 3);
  ASSERT_EQ(tsr_zmtp_peers(r), 1);
  free(big);
  zmq_close(good), zmq_close(plain), zmq_close(wrong), zmq_close(stranger);
  zmq_ctx_term(ctx);
  tsr_zmtp_close(&r);
}

TEST(our_curve_dealer_talks_to_a_libzmq_curve_router)
{
  char spub[41], ssec[41], cpub[41], csec[41];
  ASSERT_EQ(zmq_curve_keypair(spub, ssec), 0);
  ASSERT_EQ(zmq_curve_keypair(cpub, csec), 0);
  void *ctx = zmq_ctx_new(), *router = zsock(ctx, ZMQ_ROUTER);
  int one = 1;
  zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one);
  zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, ssec, 40);
  ASSERT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
  char ep[128];
  size_t ep_len = sizeof ep;
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &ep_len);
  tsr_errbuf err;
  tsr_zmtp *d = NULL;
  tsr_zmtp_opts o = {.what = "curve dealer", .secret_key = csec, .server_key = spub};
  ASSERT_OK(tsr_zmtp_connect(ep, &o, &d, &err));
  size_t big_len = 70000;
  char *big = pattern(big_len, 2);
  ASSERT_OK(tsr_zmtp_send(d, NULL, 0, "up", 2));
  ASSERT_OK(tsr_zmtp_send(d, NULL, 0, big, big_len));
  ASSERT_OK(tsr_zmtp_flush(d, 3000));
  char id[256], *buf = malloc(big_len);
  int id_len = zrecv(router, id, sizeof id, NULL);
  ASSERT_TRUE(id_len > 0);
  ASSERT_EQ(zrecv(router, buf, big_len, NULL), 2);
  ASSERT_TRUE(zrecv(router, id, sizeof id, NULL) == id_len);
  ASSERT_EQ(zrecv(router, buf, big_len, NULL), (int)big_len);
  ASSERT_TRUE(memcmp(buf, big, big_len) == 0);
  for (int i = 0; i < 3; i++) {
    zmq_send(router, id, (size_t)id_len, ZMQ_SNDMORE);
    zmq_send(router, i == 1 ? big : "down", i == 1 ? big_len : 4, 0);
  }
  for (int i = 0; i < 3; i++) {
    tsr_zmtp_msg m;
    ASSERT_EQ(wait_msg(d, &m, 3000), 1);
    ASSERT_EQ(m.len[0], i == 1 ? big_len : 4);
    ASSERT_TRUE(memcmp(m.data[0], i == 1 ? big : "down", m.len[0]) == 0);
    tsr_zmtp_msg_close(&m);
  }
  tsr_zmtp_close(&d);
  /* with the wrong server key the handshake never finishes */
  char xpub[41], xsec[41];
  zmq_curve_keypair(xpub, xsec);
  tsr_zmtp_opts bad = {.what = "curve dealer", .secret_key = csec, .server_key = xpub};
  ASSERT_OK(tsr_zmtp_connect(ep, &bad, &d, &err));
  ASSERT_EQ(tsr_zmtp_flush(d, 300), TSR_ETIMEDOUT);
  ASSERT_TRUE(!tsr_zmtp_connected(d));
  tsr_zmtp_close(&d);
  free(big), free(buf);
  zmq_close(router);
  zmq_ctx_term(ctx);
}

TEST(ours_to_ours_with_curve)
{
  char spub[41], ssec[41], cpub[41], csec[41];
  zmq_curve_keypair(spub, ssec);
  zmq_curve_keypair(cpub, csec);
  admit_log log = {0};
  memcpy(log.allowed, cpub, 41);
  tsr_errbuf err;
  tsr_zmtp *r = NULL, *d = NULL;
  char bound[128];
  tsr_zmtp_opts ro = {.what = "r", .secret_key = ssec, .admit = admit_one, .admit_arg = &log};
  tsr_zmtp_opts dopt = {.what = "d", .secret_key = csec, .server_key = spub};
  ASSERT_OK(tsr_zmtp_bind("tcp://127.0.0.1:0", &ro, &r, bound, sizeof bound, &err));
  ASSERT_OK(tsr_zmtp_connect(bound, &dopt, &d, &err));
  for (int i = 0; i < 300; i++) ASSERT_OK(tsr_zmtp_send_owned(d, NULL, 0, pattern((size_t)i * 1000, (unsigned)i), (size_t)i * 1000));
  for (int i = 0; i < 300; i++) {
    tsr_zmtp_msg m;
    ASSERT_EQ(relay_wait(d, r, &m, 5000), 1);
    char *want = pattern((size_t)i * 1000, (unsigned)i);
    ASSERT_TRUE(m.len[0] == (size_t)i * 1000 && memcmp(m.data[0], want, m.len[0]) == 0);
    ASSERT_TRUE(strcmp(m.key, cpub) == 0);
    free(want);
    tsr_zmtp_msg_close(&m);
  }
  ASSERT_EQ(log.asked, 1);
  tsr_zmtp_close(&d);
  tsr_zmtp_close(&r);
}

/* ---------- bad peers ---------- */

static int raw_connect(const char *bound)
{
  int port = atoi(strrchr(bound, ':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? fd : -1;
}

/* Reads until the peer closes or timeout: true when it closed. */
static bool closed_within(int fd, int timeout_ms)
{
  uint64_t deadline = tsr_now_ms() + (uint64_t)timeout_ms;
  char buf[256];
  while (tsr_now_ms() < deadline) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 10) > 0 && read(fd, buf, sizeof buf) <= 0) return true;
  }
  return false;
}

/* A pump on its own thread while the test talks to the router raw. */
typedef struct pumper {
  tsr_zmtp *s, *also;
  volatile int stop;
  pthread_t t;
} pumper;

static void *pump_main(void *arg)
{
  pumper *p = arg;
  while (!p->stop) {
    pump(p->s, 5);
    if (p->also != NULL) pump(p->also, 0);
  }
  return NULL;
}

TEST(garbage_silence_and_oversized_frames_close_only_their_connection)
{
  tsr_errbuf err;
  tsr_zmtp *r = NULL, *d = NULL;
  char bound[128];
  tsr_zmtp_opts o = {.what = "guarded", .max_frame = 1000, .handshake_ms = 200, .max_peers = 8};
  ASSERT_OK(tsr_zmtp_bind("tcp://127.0.0.1:0", &o, &r, bound, sizeof bound, &err));
  tsr_zmtp_opts dopt = {.what = "good"};
  ASSERT_OK(tsr_zmtp_connect(bound, &dopt, &d, &err));
  pumper p = {.s = r, .also = d};
  pthread_create(&p.t, NULL, pump_main, &p);
  int junk = raw_connect(bound), silent = raw_connect(bound);
  ASSERT_TRUE(junk >= 0 && silent >= 0);
  char garbage[64];
  memset(garbage, 'G', sizeof garbage);
  ASSERT_EQ(write(junk, garbage, sizeof garbage), (ssize_t)sizeof garbage);
  ASSERT_TRUE(closed_within(junk, 2000));
  ASSERT_TRUE(closed_within(silent, 2000));   /* no greeting within 200 ms */
  /* a libzmq dealer sending a frame over the limit is disconnected */
  void *ctx = zmq_ctx_new(), *fat = zsock(ctx, ZMQ_DEALER);
  zmq_connect(fat, bound);
  char *big = pattern(5000, 4);
  zmq_send(fat, big, 5000, 0);
  usleep(200000);
  p.stop = 1;
  pthread_join(p.t, NULL);
  /* the good dealer is still served */
  ASSERT_OK(tsr_zmtp_send(d, NULL, 0, "still", 5));
  tsr_zmtp_msg m;
  ASSERT_EQ(relay_wait(d, r, &m, 5000), 1);
  ASSERT_TRUE(m.len[0] == 5 && memcmp(m.data[0], "still", 5) == 0);
  tsr_zmtp_msg_close(&m);
  ASSERT_EQ(tsr_zmtp_recv(r, &m), 0);   /* the oversized frame never arrived */
  ASSERT_TRUE(tsr_zmtp_refusals(r) >= 2);
  close(junk), close(silent);
  free(big);
  zmq_close(fat);
  zmq_ctx_term(ctx);
  tsr_zmtp_close(&d);
  tsr_zmtp_close(&r);
}

/* A dealer whose router goes away reconnects to the one that comes back
 * on the same port and delivers what was sent meanwhile. */
TEST(a_dealer_reconnects_to_a_restarted_router)
{
  tsr_errbuf err;
  tsr_zmtp *r = NULL, *d = NULL;
  char bound[128], again[128];
  tsr_zmtp_opts o = {.what = "r"}, dopt = {.what = "d", .reconnect_ms = 20, .reconnect_max_ms = 100};
  ASSERT_OK(tsr_zmtp_bind("tcp://127.0.0.1:0", &o, &r, bound, sizeof bound, &err));
  ASSERT_OK(tsr_zmtp_connect(bound, &dopt, &d, &err));
  ASSERT_OK(tsr_zmtp_send(d, NULL, 0, "one", 3));
  tsr_zmtp_msg m;
  ASSERT_EQ(relay_wait(d, r, &m, 5000), 1);
  tsr_zmtp_msg_close(&m);
  tsr_zmtp_close(&r);
  pump(d, 100);   /* sees the loss */
  ASSERT_TRUE(!tsr_zmtp_connected(d));
  ASSERT_OK(tsr_zmtp_send(d, NULL, 0, "two", 3));
  ASSERT_OK(tsr_zmtp_bind(bound, &o, &r, again, sizeof again, &err));
  ASSERT_TRUE(strcmp(bound, again) == 0);
  ASSERT_EQ(relay_wait(d, r, &m, 5000), 1);
  ASSERT_TRUE(m.len[0] == 3 && memcmp(m.data[0], "two", 3) == 0);
  tsr_zmtp_msg_close(&m);
  tsr_zmtp_close(&d);
  tsr_zmtp_close(&r);
}

TEST(bad_endpoints_and_keys_are_named)
{
  tsr_errbuf err = {{0}};
  tsr_zmtp *s = NULL;
  char bound[64];
  tsr_zmtp_opts o = {0};
  ASSERT_EQ(tsr_zmtp_bind("udp://1.2.3.4:5", &o, &s, bound, sizeof bound, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "udp://1.2.3.4:5") != NULL);
  ASSERT_EQ(tsr_zmtp_connect("tcp://nohost", &o, &s, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "tcp://nohost") != NULL);
  tsr_zmtp_opts k = {.secret_key = "not a key"};
  ASSERT_EQ(tsr_zmtp_bind("tcp://127.0.0.1:0", &k, &s, bound, sizeof bound, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "secret key") != NULL);
  ASSERT_TRUE(s == NULL);
  uint8_t key[32], back[32];
  char text[41];
  for (int i = 0; i < 32; i++) key[i] = (uint8_t)(i * 37 + 11);
  tsr_zmtp_z85_encode(key, text);
  char zt[41];
  zmq_z85_encode(zt, key, 32);
  ASSERT_TRUE(strcmp(text, zt) == 0);
  ASSERT_OK(tsr_zmtp_z85_decode(text, back));
  ASSERT_TRUE(memcmp(key, back, 32) == 0);
}

int main(void)
{
  RUN(our_router_serves_libzmq_dealers);
  RUN(our_dealer_talks_to_a_libzmq_router_and_queues_before_connecting);
  RUN(ours_to_ours_over_ipc_in_order);
  RUN(curve_interoperates_with_libzmq_and_refuses_wrong_keys);
  RUN(our_curve_dealer_talks_to_a_libzmq_curve_router);
  RUN(ours_to_ours_with_curve);
  RUN(garbage_silence_and_oversized_frames_close_only_their_connection);
  RUN(a_dealer_reconnects_to_a_restarted_router);
  RUN(bad_endpoints_and_keys_are_named);
  return kit_summary();
}
