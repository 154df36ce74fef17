/* tests/fuzz/fuzz_zmtp.c — libFuzzer target: common/zmtp's reading of a
 * peer's bytes (greeting, the NULL and CURVE handshakes, frame headers,
 * metadata, commands, messages), through a real Unix socket into the
 * socket's own code, as the scheduler's router and a client's or worker's
 * dealer meet them from whoever connects.
 *
 * Byte 0 picks the side: 0 a NULL router, 1 a CURVE router, 2 a NULL
 * dealer (the bytes then come from the "router" it connected to). The
 * rest is written to the connection, which is then half-closed: the socket
 * must hand over only whole, bounded messages, close the connection, and
 * come back to no peer. */
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "zmtp/zmtp.h"

#define MAX_FRAME 100000
#define MAX_ROUNDS 2000   /* 2000 polls of 5 ms: a connection the socket never closes is a bug */

static tsr_zmtp *routers[2];
static char router_ep[2][64], listen_ep[64];
static int listen_fd = -1;

static volatile uint8_t sink;

static void quiet(void *arg, int level, const char *line) { (void)arg, (void)level, (void)line; }

static struct sockaddr_un abstract(const char *name, socklen_t *len_p)
{
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "%s", name);
  *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
  return a;
}

static void setup(void)
{
  static const char *secret = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";   /* any valid Z85 secret */
  for (int i = 0; i < 2; i++) {
    snprintf(router_ep[i], sizeof router_ep[i], "ipc://@tsr-fuzz-zmtp-%d-%d", (int)getpid(), i);
    tsr_zmtp_opts o = {.what = "fuzz", .max_frame = MAX_FRAME, .handshake_ms = 1000, .log = quiet,
                       .secret_key = i == 1 ? secret : NULL};
    char bound[128];
    tsr_errbuf err;
    if (tsr_zmtp_bind(router_ep[i], &o, &routers[i], bound, sizeof bound, &err) != 0) abort();
  }
  char name[64];
  snprintf(name, sizeof name, "tsr-fuzz-zmtp-raw-%d", (int)getpid());
  snprintf(listen_ep, sizeof listen_ep, "ipc://@%s", name);
  socklen_t len;
  struct sockaddr_un a = abstract(name, &len);
  listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, len) != 0 || listen(listen_fd, 16) != 0) abort();
}

/* Takes every message: whole, bounded, then freed. */
static void take_all(tsr_zmtp *s)
{
  tsr_zmtp_msg m;
  while (tsr_zmtp_recv(s, &m) == 1) {
    if (m.nframes < 1 || m.nframes > TSR_ZMTP_MAX_FRAMES) abort();
    for (int i = 0; i < m.nframes; i++)
      if (m.data[i] == NULL || m.len[i] > MAX_FRAME) abort();
    uint8_t sum = 0;   /* every byte handed over is readable */
    for (size_t j = 0; j < m.len[0]; j++) sum += ((uint8_t *)m.data[0])[j];
    sink ^= sum;
    tsr_zmtp_msg_close(&m);
  }
}

/* Drives s until it closed its end of raw (raw reads end of stream). */
static void pump_until_closed(tsr_zmtp *s, int raw)
{
  for (int round = 0; round < MAX_ROUNDS; round++) {
    take_all(s);
    char buf[4096];
    ssize_t n;
    while ((n = recv(raw, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    }
    if (n == 0) return;
    struct pollfd p[2] = {{tsr_zmtp_fd(s), POLLIN, 0}, {raw, POLLIN, 0}};
    poll(p, 2, 5);
  }
  abort();   /* the socket kept a half-closed connection open */
}

static void feed(int raw, const uint8_t *data, size_t size)
{
  for (size_t off = 0; off < size;) {
    ssize_t n = send(raw, data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;   /* the socket closed it early: fine */
    off += (size_t)n;
  }
  shutdown(raw, SHUT_WR);
}

static void as_router(int which, const uint8_t *data, size_t size)
{
  tsr_zmtp *r = routers[which];
  socklen_t len;
  char name[64];
  snprintf(name, sizeof name, "%s", router_ep[which] + 7);
  struct sockaddr_un a = abstract(name, &len);
  int raw = socket(AF_UNIX, SOCK_STREAM, 0);
  if (raw < 0 || connect(raw, (struct sockaddr *)&a, len) != 0) abort();
  feed(raw, data, size);
  pump_until_closed(r, raw);
  close(raw);
  take_all(r);
  if (tsr_zmtp_peers(r) != 0) abort();
}

static void as_dealer(const uint8_t *data, size_t size)
{
  tsr_zmtp *d = NULL;
  tsr_errbuf err;
  tsr_zmtp_opts o = {.what = "fuzz dealer", .max_frame = MAX_FRAME, .log = quiet, .reconnect_ms = 10000};
  if (tsr_zmtp_connect(listen_ep, &o, &d, &err) != 0) abort();
  int raw = accept(listen_fd, NULL, NULL);
  if (raw < 0) abort();
  feed(raw, data, size);
  pump_until_closed(d, raw);
  close(raw);
  tsr_zmtp_close(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (listen_fd < 0) setup();
  if (size == 0) return 0;
  int side = data[0] % 3;
  if (side < 2) as_router(side, data + 1, size - 1);
  else as_dealer(data + 1, size - 1);
  return 0;
}
