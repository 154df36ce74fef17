/* ZeroMQ helpers shared by the daemons and the client library. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tsr_frames_recv(void *sock, tsr_frames *frames, int flags)
{
  frames->count = 0;
  frames->truncated = false;
  for (;;) {
    zmq_msg_t scratch;
    zmq_msg_t *part = frames->count < TSR_NET_MAX_FRAMES ? &frames->part[frames->count] : &scratch;
    zmq_msg_init(part);
    /* Only the first frame may be non-blocking: the rest of a multipart
     * message is delivered atomically with it. */
    int rc = zmq_msg_recv(part, sock, frames->count == 0 && !frames->truncated ? flags : 0);
    if (rc < 0) {
      int saved = errno;
      zmq_msg_close(part);
      tsr_frames_close(frames);
      errno = saved;
      return -1;
    }
    int more = zmq_msg_more(part);
    if (part == &scratch) {
      zmq_msg_close(&scratch);
      frames->truncated = true;
    } else {
      frames->count++;
    }
    if (!more) return frames->count;
  }
}

void tsr_frames_close(tsr_frames *frames)
{
  for (int i = 0; i < frames->count; i++) zmq_msg_close(&frames->part[i]);
  frames->count = 0;
}

int tsr_net_send(void *sock, const void *identity, size_t id_len, const void *data, size_t len, int flags)
{
  if (identity != NULL && zmq_send(sock, identity, id_len, flags | ZMQ_SNDMORE) < 0) return -1;
  return zmq_send(sock, data, len, flags) < 0 ? -1 : 0;
}

void tsr_net_socket_defaults(void *sock)
{
  int linger = 0;
  int64_t maxsize = (int64_t)TSR_MAX_FRAME_BYTES;
  int keepalive = 1;
  zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
  zmq_setsockopt(sock, ZMQ_TCP_KEEPALIVE, &keepalive, sizeof keepalive);
  /* Control traffic must never be dropped for a slow reader: lift the
   * high-water marks (memory is bounded by what the protocol sends). */
  int hwm = 0;
  zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
}

/* ZeroMQ spells "any port" as '*'; we also accept ':0'. */
static void normalize_endpoint(const char *endpoint, char *out, size_t cap)
{
  snprintf(out, cap, "%s", endpoint);
  size_t len = strlen(out);
  if (len >= 2 && strcmp(out + len - 2, ":0") == 0) out[len - 1] = '*';
}

int tsr_net_bind(void *sock, const char *endpoint, const char *advertise_host, char *out, size_t cap, tsr_errbuf *err)
{
  char ep[TSR_MAX_ADDR_LEN];
  normalize_endpoint(endpoint, ep, sizeof ep);
  if (zmq_bind(sock, ep) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
  char last[TSR_MAX_ADDR_LEN];
  size_t last_len = sizeof last;
  if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, last, &last_len) != 0)
    return tsr_fail(err, TSR_ECONN, "cannot read bound endpoint: %s", zmq_strerror(zmq_errno()));
  tsr_net_advertise(last, advertise_host, out, cap);
  return 0;
}

void tsr_net_advertise(const char *bound, const char *advertise_host, char *out, size_t cap)
{
  const char *wild = strstr(bound, "://0.0.0.0:");
  if (wild != NULL && advertise_host != NULL && advertise_host[0] != '\0')
    snprintf(out, cap, "tcp://%s%s", advertise_host, strrchr(bound, ':'));
  else
    snprintf(out, cap, "%s", bound);
}

int tsr_net_local_ip_for(const char *endpoint, char *out, size_t cap)
{
  char host[TSR_MAX_ADDR_LEN];
  const char *start = strstr(endpoint, "://");
  start = start ? start + 3 : endpoint;
  snprintf(host, sizeof host, "%s", start);
  char *colon = strrchr(host, ':');
  if (colon != NULL) *colon = '\0';
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host, "9", &hints, &res) != 0 || res == NULL) return TSR_ECONN;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  int rc = TSR_ECONN;
  struct sockaddr_in local;
  socklen_t local_len = sizeof local;
  /* Connecting a UDP socket sends nothing; it only picks the route. */
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 &&
      inet_ntop(AF_INET, &local.sin_addr, out, (socklen_t)cap) != NULL)
    rc = 0;
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return rc;
}
