/* Endpoints as ZeroMQ spells them: tcp://HOST:PORT (HOST an IPv4 address,
 * [an IPv6 one], a name, or * for any when binding; PORT a number, or 0 / *
 * for any when binding), ipc://PATH and ipc://@NAME (Linux's abstract
 * namespace). */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "zmtp_int.h"

static int parse_ipc(const char *path, struct sockaddr_storage *addr, socklen_t *len_p, tsr_errbuf *err)
{
  struct sockaddr_un *un = (struct sockaddr_un *)addr;
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof un->sun_path) return tsr_fail(err, TSR_EINVAL, "ipc path '%s' is empty or too long", path);
  memset(un, 0, sizeof *un);
  un->sun_family = AF_UNIX;
  memcpy(un->sun_path, path, n);
  if (path[0] == '@') un->sun_path[0] = '\0';   /* abstract: no file */
  *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
  return 0;
}

/* HOST and PORT of "HOST:PORT" (HOST may be [v6]). */
static int split_host_port(const char *text, char *host, size_t cap, const char **port_p)
{
  const char *colon = text[0] == '[' ? strstr(text, "]:") : strrchr(text, ':');
  if (colon == NULL) return -1;
  const char *start = text[0] == '[' ? text + 1 : text;
  size_t n = (size_t)(colon - start);
  if (n == 0 || n >= cap) return -1;
  memcpy(host, start, n);
  host[n] = '\0';
  *port_p = colon + (text[0] == '[' ? 2 : 1);
  return 0;
}

static int parse_port(const char *text, bool for_bind, uint16_t *port_p)
{
  if (for_bind && (strcmp(text, "*") == 0 || strcmp(text, "0") == 0)) return *port_p = 0, 0;
  char *end;
  long port = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || port < 1 || port > 65535) return -1;
  *port_p = (uint16_t)port;
  return 0;
}

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *addr, socklen_t *len_p)
{
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) return -1;
  struct addrinfo *pick = res;   /* IPv4 first, as libzmq without ZMQ_IPV6 */
  for (struct addrinfo *r = res; r != NULL; r = r->ai_next)
    if (r->ai_family == AF_INET) {
      pick = r;
      break;
    }
  memcpy(addr, pick->ai_addr, pick->ai_addrlen);
  *len_p = pick->ai_addrlen;
  freeaddrinfo(res);
  if (addr->ss_family == AF_INET) ((struct sockaddr_in *)addr)->sin_port = htons(port);
  else ((struct sockaddr_in6 *)addr)->sin6_port = htons(port);
  return 0;
}

int zmtp_endpoint_parse(const char *endpoint, bool for_bind, struct sockaddr_storage *addr, socklen_t *len_p,
                        tsr_errbuf *err)
{
  memset(addr, 0, sizeof *addr);
  if (strncmp(endpoint, "ipc://", 6) == 0) return parse_ipc(endpoint + 6, addr, len_p, err);
  if (strncmp(endpoint, "tcp://", 6) != 0)
    return tsr_fail(err, TSR_EINVAL, "endpoint '%s': only tcp://HOST:PORT and ipc://PATH are supported", endpoint);
  char host[256];
  const char *port_text;
  uint16_t port;
  if (split_host_port(endpoint + 6, host, sizeof host, &port_text) != 0 || parse_port(port_text, for_bind, &port) != 0)
    return tsr_fail(err, TSR_EINVAL, "endpoint '%s': expected tcp://HOST:PORT", endpoint);
  if (for_bind && strcmp(host, "*") == 0) {
    struct sockaddr_in *in = (struct sockaddr_in *)addr;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    in->sin_addr.s_addr = htonl(INADDR_ANY);
    *len_p = sizeof *in;
    return 0;
  }
  if (resolve(host, port, addr, len_p) != 0)
    return tsr_fail(err, TSR_EINVAL, "endpoint '%s': cannot resolve host '%s'", endpoint, host);
  return 0;
}

int zmtp_endpoint_check(const char *endpoint, tsr_errbuf *err)
{
  struct sockaddr_storage addr;
  socklen_t len;
  char host[256];
  const char *port_text;
  uint16_t port;
  if (strncmp(endpoint, "ipc://", 6) == 0) return parse_ipc(endpoint + 6, &addr, &len, err);
  if (strncmp(endpoint, "tcp://", 6) != 0)
    return tsr_fail(err, TSR_EINVAL, "endpoint '%s': only tcp://HOST:PORT and ipc://PATH are supported", endpoint);
  if (split_host_port(endpoint + 6, host, sizeof host, &port_text) != 0 || parse_port(port_text, false, &port) != 0)
    return tsr_fail(err, TSR_EINVAL, "endpoint '%s': expected tcp://HOST:PORT", endpoint);
  return 0;
}

void zmtp_endpoint_format(const struct sockaddr_storage *addr, socklen_t len, char *out, size_t cap)
{
  char ip[INET6_ADDRSTRLEN] = "?";
  if (addr->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    snprintf(out, cap, "tcp://%s:%u", ip, ntohs(in->sin_port));
  } else if (addr->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    snprintf(out, cap, "tcp://[%s]:%u", ip, ntohs(in6->sin6_port));
  } else {
    const struct sockaddr_un *un = (const struct sockaddr_un *)addr;
    size_t n = len > offsetof(struct sockaddr_un, sun_path) ? len - offsetof(struct sockaddr_un, sun_path) : 0;
    if (n > 0 && un->sun_path[0] == '\0') snprintf(out, cap, "ipc://@%.*s", (int)(n - 1), un->sun_path + 1);
    else snprintf(out, cap, "ipc://%s", un->sun_path);
  }
}
