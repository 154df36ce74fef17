/* The HTTP server (http.h) over libmicrohttpd: one internal polling
 * thread (epoll where the kernel has it), a route table searched by exact
 * path, 404 for the rest. Connection limit and idle timeout are what keep
 * slow or idle clients from starving the others; the memory limit per
 * connection bounds what a malformed request can make it hold. */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUTES 32
#define CONNECTION_MEMORY (32u << 10)

struct tsr_http {
  struct MHD_Daemon *daemon;
  tsr_http_route routes[MAX_ROUTES];
  size_t nroutes;
  unsigned port;
  char address[96];
};

struct tsr_http_request {
  struct MHD_Connection *conn;
  const char *path;
};

const char *tsr_http_query(const tsr_http_request *req, const char *name)
{
  return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

static int resolve_host(const char *name, char host[64], tsr_errbuf *err)
{
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(name, NULL, &hints, &res);
  if (rc != 0 || res == NULL)
    return tsr_fail(err, TSR_EINVAL, "host '%s' does not resolve to an IPv4 address: %s", name, gai_strerror(rc));
  const struct sockaddr_in *sin = (const struct sockaddr_in *)res->ai_addr;
  inet_ntop(AF_INET, &sin->sin_addr, host, 64);
  freeaddrinfo(res);
  return 0;
}

int tsr_http_parse_addr(const char *addr, char host[64], unsigned *port_p, tsr_errbuf *err)
{
  const char *colon = addr != NULL ? strrchr(addr, ':') : NULL;
  if (colon == NULL)
    return tsr_fail(err, TSR_EINVAL, "\"%s\" is not HOST:PORT or :PORT", addr ? addr : "(null)");
  char *end;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (colon[1] < '0' || colon[1] > '9' || *end != '\0' || port > 65535)
    return tsr_fail(err, TSR_EINVAL, "\"%s\": port '%s' is not a number from 0 to 65535", addr, colon + 1);
  size_t hlen = (size_t)(colon - addr);
  char name[64];
  if (hlen >= sizeof name) return tsr_fail(err, TSR_EINVAL, "\"%s\": host name too long", addr);
  memcpy(name, addr, hlen);
  name[hlen] = '\0';
  /* ":PORT" is loopback: a dashboard is never exposed by accident */
  int rc = resolve_host(hlen == 0 ? "127.0.0.1" : name, host, err);
  if (rc == 0) *port_p = (unsigned)port;
  return rc;
}

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
  struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
  if (resp == NULL) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
  enum MHD_Result r = MHD_queue_response(conn, status, resp);
  MHD_destroy_response(resp);
  return r;
}

static const tsr_http_route *find_route(const tsr_http *http, const char *path)
{
  for (size_t i = 0; i < http->nroutes; i++)
    if (strcmp(http->routes[i].path, path) == 0) return &http->routes[i];
  return NULL;
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, tsr_http_reply *reply)
{
  enum MHD_ResponseMemoryMode mode = reply->body_static ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_FREE;
  struct MHD_Response *resp = MHD_create_response_from_buffer(reply->len, reply->body, mode);
  if (resp == NULL) {
    if (!reply->body_static) free(reply->body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type",
                          reply->content_type ? reply->content_type : "text/plain; charset=utf-8");
  MHD_add_response_header(resp, "Cache-Control", "no-store");
  enum MHD_Result r = MHD_queue_response(conn, reply->status ? (unsigned)reply->status : 200u, resp);
  MHD_destroy_response(resp);
  return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **state)
{
  (void)version;
  (void)upload;
  tsr_http *http = cls;
  /* The first call only announces the request; answering on the second
   * lets libmicrohttpd read (and discard) any body first. */
  if (*state == NULL) {
    *state = (void *)1;
    return MHD_YES;
  }
  if (*upload_size != 0) {
    *upload_size = 0;
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
    return send_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: GET or HEAD only\n");
  const tsr_http_route *route = find_route(http, url);
  if (route == NULL) return send_text(conn, MHD_HTTP_NOT_FOUND, "not found\n");
  tsr_http_request req = {conn, url};
  tsr_http_reply reply = {0};
  if (route->fn(route->arg, &req, &reply) != 0) {
    if (!reply.body_static) free(reply.body);
    return send_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n");
  }
  return send_reply(conn, &reply);
}

static struct MHD_Daemon *start_daemon(tsr_http *http, const char *host, unsigned port)
{
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &sa.sin_addr);
  return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, (uint16_t)port, NULL, NULL, on_request, http,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)TSR_HTTP_MAX_CONNECTIONS,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)TSR_HTTP_IDLE_S,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
                          MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
}

int tsr_http_start(const char *addr, const tsr_http_route *routes, size_t nroutes, tsr_http **http_p,
                   tsr_errbuf *err)
{
  char host[64];
  unsigned port;
  int rc = tsr_http_parse_addr(addr, host, &port, err);
  if (rc != 0) return rc;
  if (nroutes > MAX_ROUTES) return tsr_fail(err, TSR_EINVAL, "HTTP server: %zu routes, at most %d", nroutes, MAX_ROUTES);
  tsr_http *http = calloc(1, sizeof *http);
  if (http == NULL) return tsr_fail(err, TSR_ENOMEM, "HTTP server: out of memory");
  memcpy(http->routes, routes, nroutes * sizeof *routes);
  http->nroutes = nroutes;
  http->daemon = start_daemon(http, host, port);
  if (http->daemon == NULL) {
    free(http);
    return tsr_fail(err, TSR_ECONN, "HTTP server: cannot listen on %s:%u (port taken, or no such address)", host, port);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
  http->port = info != NULL ? info->port : port;
  snprintf(http->address, sizeof http->address, "%s:%u", host, http->port);
  *http_p = http;
  return 0;
}

unsigned tsr_http_port(const tsr_http *http) { return http->port; }
const char *tsr_http_address(const tsr_http *http) { return http->address; }

void tsr_http_stop(tsr_http **http_p)
{
  if (http_p == NULL || *http_p == NULL) return;
  MHD_stop_daemon((*http_p)->daemon);
  free(*http_p);
  *http_p = NULL;
}
