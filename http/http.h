/* http/http.h — a small HTTP server for the daemons' dashboard and
 * /metrics, over libmicrohttpd (one internal polling thread with epoll).
 *
 * Contract:
 * - Routes are exact paths ("/metrics"); a path no route names gets 404,
 *   a method other than GET or HEAD 405. libmicrohttpd answers malformed
 *   requests (400) itself; nothing a client sends stops the server.
 * - Idle and slow clients: at most TSR_HTTP_MAX_CONNECTIONS at once, each
 *   closed after TSR_HTTP_IDLE_S seconds without progress, so hundreds of
 *   idle connections cost file descriptors, never the answers to others.
 * - Handlers run on the server's thread: they must not block for long and
 *   must not touch the daemon's single-threaded state. They read what the
 *   daemon published (board.h).
 * - Addresses: "HOST:PORT" or ":PORT" (":PORT" = 127.0.0.1:PORT: loopback
 *   unless a host is given); port 0 picks a free port (tsr_http_port).
 *
 * Threading: start and stop from one thread; tsr_http_port any thread. */
#ifndef TSR_HTTP_HTTP_H
#define TSR_HTTP_HTTP_H

#include <stddef.h>

#include "util/util.h"

#define TSR_HTTP_MAX_CONNECTIONS 1000
#define TSR_HTTP_IDLE_S 15

typedef struct tsr_http tsr_http;
typedef struct tsr_http_request tsr_http_request;   /* opaque, valid during the handler */

/* What a handler answers. body: malloc'd (freed by the server) unless
 * body_static, in which case it must outlive the server. */
typedef struct tsr_http_reply {
  int status;                  /* 200 unless set */
  const char *content_type;    /* "text/plain; charset=utf-8" unless set */
  char *body;
  size_t len;
  int body_static;
} tsr_http_reply;

/* Fills reply; returns 0, or a negative TSR_E* (then 500 is sent). */
typedef int (*tsr_http_handler)(void *arg, const tsr_http_request *req, tsr_http_reply *reply);

typedef struct tsr_http_route {
  const char *path;
  tsr_http_handler fn;
  void *arg;
} tsr_http_route;

/* A query argument of the request ("seconds" of /api/tasks?seconds=5), or
 * NULL. Borrowed: valid during the handler. */
const char *tsr_http_query(const tsr_http_request *req, const char *name);

/* Parses "HOST:PORT" / ":PORT" into a dotted IPv4 host and a port.
 * 0 or TSR_EINVAL with err naming the problem. */
int tsr_http_parse_addr(const char *addr, char host[64], unsigned *port_p, tsr_errbuf *err);

/* Starts serving routes (copied; the paths and args must outlive the
 * server) on addr. 0, TSR_EINVAL (bad address) or TSR_ECONN (cannot bind:
 * the port is taken), with err saying which. */
int tsr_http_start(const char *addr, const tsr_http_route *routes, size_t nroutes, tsr_http **http_p,
                   tsr_errbuf *err);
/* The port bound (useful after port 0). */
unsigned tsr_http_port(const tsr_http *http);
/* The bound "HOST:PORT". */
const char *tsr_http_address(const tsr_http *http);
/* Stops the server and frees it; NULL and *NULL are no-ops. */
void tsr_http_stop(tsr_http **http_p);

#endif
