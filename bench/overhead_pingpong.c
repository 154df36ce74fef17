/* bench/overhead_pingpong: the floor under bench/overhead's round trip
 * (issue 13). The same topology as a one-task graph — a client, a relay
 * (the scheduler) and a worker, three processes on loopback — with no
 * Tessera code: the client sends 64 bytes to the relay, the relay passes
 * them to the worker, the worker answers, the relay passes the answer back
 * (4 legs; --legs 2: the relay answers itself, a plain ping-pong).
 *
 *   --transport zmq: DEALER -> ROUTER <- DEALER as our daemons use them
 *     (every leg goes through both ends' libzmq I/O threads);
 *   --transport tcp: plain TCP sockets (TCP_NODELAY), every process
 *     sleeping in epoll_wait as an event loop would: what a control path
 *     without libzmq's I/O threads could reach;
 *   --transport unix: the same over Unix domain sockets (one host: what a
 *     same-host control path could reach).
 *
 *   --client-spin-us N (tcp, unix): the client reads its socket without
 *     sleeping for up to N us after each send (yielding every 5 us), as
 *     libtessera's waits do (docs/client.md): the floor of our layout.
 *
 *   tsr-bench-pingpong [--transport zmq|tcp|unix] [--legs 2|4] [--reps N] [--client-spin-us N]
 * prints `pingpong transport=... legs=... spin_us=... median_us=... p90_us=...`. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define MSG_BYTES 64

/* --transport unix: the "tcp" functions use this abstract socket name. */
static bool use_unix;
static struct sockaddr_un unix_addr;

static socklen_t unix_len(void) { return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(unix_addr.sun_path + 1)); }

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int client_spin_us;

static void report(const char *transport, int legs, double *lat, int reps)
{
  qsort(lat, (size_t)reps, sizeof *lat, cmp_double);
  printf("pingpong transport=%s legs=%d spin_us=%d median_us=%.1f p90_us=%.1f reps=%d\n", transport, legs,
         client_spin_us, lat[reps / 2], lat[reps * 9 / 10], reps);
  fflush(stdout);
}

/* ---------- ZeroMQ ---------- */

static void zmq_relay(const char *endpoint, int legs, int reps)
{
  void *ctx = zmq_ctx_new(), *router = zmq_socket(ctx, ZMQ_ROUTER);
  zmq_bind(router, endpoint);
  char client_id[256], worker_id[256], buf[MSG_BYTES], id[256];
  int client_len = 0, worker_len = 0;
  while (client_len == 0 || (legs == 4 && worker_len == 0)) {   /* hellos: "C" / "W" */
    int n = zmq_recv(router, id, sizeof id, 0);
    zmq_recv(router, buf, sizeof buf, 0);
    if (buf[0] == 'C') memcpy(client_id, id, (size_t)(client_len = n));
    else memcpy(worker_id, id, (size_t)(worker_len = n));
  }
  zmq_send(router, client_id, (size_t)client_len, ZMQ_SNDMORE);
  zmq_send(router, "go", 2, 0);
  for (int i = 0; i < reps * (legs == 4 ? 2 : 1); i++) {
    int n = zmq_recv(router, id, sizeof id, 0);
    zmq_recv(router, buf, sizeof buf, 0);
    bool from_client = n == client_len && memcmp(id, client_id, (size_t)n) == 0;
    if (legs == 4 && from_client) zmq_send(router, worker_id, (size_t)worker_len, ZMQ_SNDMORE);
    else zmq_send(router, client_id, (size_t)client_len, ZMQ_SNDMORE);
    zmq_send(router, buf, MSG_BYTES, 0);
  }
  zmq_close(router);
  zmq_ctx_term(ctx);
}

static void *zmq_dealer(void *ctx, const char *endpoint, char hello)
{
  void *s = zmq_socket(ctx, ZMQ_DEALER);
  zmq_connect(s, endpoint);
  char buf[MSG_BYTES] = {hello};
  zmq_send(s, buf, MSG_BYTES, 0);
  return s;
}

static void zmq_worker(const char *endpoint, int reps)
{
  void *ctx = zmq_ctx_new(), *s = zmq_dealer(ctx, endpoint, 'W');
  char buf[MSG_BYTES];
  for (int i = 0; i < reps; i++) {
    zmq_recv(s, buf, sizeof buf, 0);
    zmq_send(s, buf, MSG_BYTES, 0);
  }
  zmq_close(s);
  zmq_ctx_term(ctx);
}

static void zmq_client(const char *endpoint, int legs, int reps)
{
  void *ctx = zmq_ctx_new(), *s = zmq_dealer(ctx, endpoint, 'C');
  char buf[MSG_BYTES] = "ping";
  zmq_recv(s, buf, sizeof buf, 0);   /* "go": everyone is connected */
  double *lat = calloc((size_t)reps, sizeof *lat);
  for (int i = 0; i < reps; i++) {
    double t0 = now_us();
    zmq_send(s, buf, MSG_BYTES, 0);
    zmq_recv(s, buf, sizeof buf, 0);
    lat[i] = now_us() - t0;
  }
  report("zmq", legs, lat, reps);
  free(lat);
  zmq_close(s);
  zmq_ctx_term(ctx);
}

/* ---------- TCP + epoll ---------- */

static void read_full(int fd, char *buf)
{
  for (size_t got = 0; got < MSG_BYTES;) {
    ssize_t n = read(fd, buf + got, MSG_BYTES - got);
    if (n <= 0) exit(1);
    got += (size_t)n;
  }
}

/* Waits in epoll_wait, as an event loop would, then reads one message. */
static int wait_read(int ep, char *buf)
{
  struct epoll_event ev;
  while (epoll_wait(ep, &ev, 1, -1) != 1) {
  }
  read_full(ev.data.fd, buf);
  return ev.data.fd;
}

/* The client's wait: reads without sleeping for up to client_spin_us,
 * yielding every 5 us, then as wait_read. */
static void spin_read(int fd, int ep, char *buf)
{
  double t0 = now_us(), next_yield = t0;
  for (double now = t0; now - t0 < client_spin_us; now = now_us()) {
    ssize_t n = recv(fd, buf, MSG_BYTES, MSG_DONTWAIT | MSG_PEEK);
    if (n == MSG_BYTES) {
      read_full(fd, buf);
      return;
    }
    if (now >= next_yield) {
      sched_yield();
      next_yield = now + 5;
    }
  }
  wait_read(ep, buf);
}

static int epoll_of(const int *fds, int n)
{
  int ep = epoll_create1(0);
  for (int i = 0; i < n; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
    epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
  }
  return ep;
}

static int tcp_connect(int port, char hello)
{
  int fd = socket(use_unix ? AF_UNIX : AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (use_unix)
    while (connect(fd, (struct sockaddr *)&unix_addr, unix_len()) != 0) usleep(1000);
  else
    while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) usleep(1000);
  if (!use_unix) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char buf[MSG_BYTES] = {hello};
  if (write(fd, buf, MSG_BYTES) != MSG_BYTES) exit(1);
  return fd;
}

static void tcp_relay(int lfd, int legs, int reps)
{
  int client = -1, worker = -1, one = 1;
  char buf[MSG_BYTES];
  while (client < 0 || (legs == 4 && worker < 0)) {
    int fd = accept(lfd, NULL, NULL);
    if (!use_unix) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    read_full(fd, buf);
    if (buf[0] == 'C') client = fd;
    else worker = fd;
  }
  int fds[2] = {client, worker}, ep = epoll_of(fds, legs == 4 ? 2 : 1);
  memcpy(buf, "go", 3);
  if (write(client, buf, MSG_BYTES) != MSG_BYTES) exit(1);
  for (int i = 0; i < reps * (legs == 4 ? 2 : 1); i++) {
    int from = wait_read(ep, buf);
    int to = legs == 4 && from == client ? worker : client;
    if (write(to, buf, MSG_BYTES) != MSG_BYTES) exit(1);
  }
}

static void tcp_worker(int port, int reps)
{
  int fd = tcp_connect(port, 'W'), ep = epoll_of(&fd, 1);
  char buf[MSG_BYTES];
  for (int i = 0; i < reps; i++) {
    wait_read(ep, buf);
    if (write(fd, buf, MSG_BYTES) != MSG_BYTES) exit(1);
  }
}

static void tcp_client(int port, int legs, int reps)
{
  int fd = tcp_connect(port, 'C'), ep = epoll_of(&fd, 1);
  char buf[MSG_BYTES] = "ping";
  wait_read(ep, buf);   /* "go" */
  double *lat = calloc((size_t)reps, sizeof *lat);
  for (int i = 0; i < reps; i++) {
    double t0 = now_us();
    if (write(fd, buf, MSG_BYTES) != MSG_BYTES) exit(1);
    if (client_spin_us > 0) spin_read(fd, ep, buf);
    else wait_read(ep, buf);
    lat[i] = now_us() - t0;
  }
  report(use_unix ? "unix" : "tcp", legs, lat, reps);
  free(lat);
}

static int tcp_listen(int *port_p)
{
  if (use_unix) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    unix_addr.sun_family = AF_UNIX;
    snprintf(unix_addr.sun_path + 1, sizeof unix_addr.sun_path - 1, "tsr-pingpong-%d", (int)getpid());
    if (bind(fd, (struct sockaddr *)&unix_addr, unix_len()) != 0 || listen(fd, 4) != 0) exit(1);
    return fd;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0) exit(1);
  getsockname(fd, (struct sockaddr *)&a, &len);
  *port_p = ntohs(a.sin_port);
  return fd;
}

int main(int argc, char **argv)
{
  const char *transport = "zmq";
  int legs = 4, reps = 10000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) transport = argv[++i];
    else if (strcmp(argv[i], "--legs") == 0 && i + 1 < argc) legs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--client-spin-us") == 0 && i + 1 < argc) client_spin_us = atoi(argv[++i]);
    else {
      printf("usage: tsr-bench-pingpong [--transport zmq|tcp|unix] [--legs 2|4] [--reps N] [--client-spin-us N]\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  use_unix = strcmp(transport, "unix") == 0;
  if ((legs != 2 && legs != 4) || reps < 1 || (strcmp(transport, "zmq") != 0 && strcmp(transport, "tcp") != 0 && !use_unix)) {
    fprintf(stderr, "pingpong: --legs is 2 or 4, --reps >= 1, --transport zmq, tcp or unix\n");
    return 2;
  }
  bool zmq = strcmp(transport, "zmq") == 0;
  int port = 0, lfd = zmq ? -1 : tcp_listen(&port);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
  pid_t kids[2] = {-1, -1};
  if ((kids[0] = fork()) == 0) {
    if (zmq) zmq_relay(endpoint, legs, reps);
    else tcp_relay(lfd, legs, reps);
    _exit(0);
  }
  if (legs == 4 && (kids[1] = fork()) == 0) {
    if (zmq) zmq_worker(endpoint, reps);
    else tcp_worker(port, reps);
    _exit(0);
  }
  if (zmq) zmq_client(endpoint, legs, reps);
  else tcp_client(port, legs, reps);
  for (int i = 0; i < 2; i++)
    if (kids[i] > 0) waitpid(kids[i], NULL, 0);
  return 0;
}
