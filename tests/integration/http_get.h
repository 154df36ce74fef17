/* tests/integration/http_get.h — a tiny blocking HTTP/1.0 client for the
 * dashboard and /metrics tests, and raw sockets to misbehave with. POSIX
 * only. */
#ifndef TSR_TESTS_HTTP_GET_H
#define TSR_TESTS_HTTP_GET_H

#include <stddef.h>

/* Sends request (a whole raw request) to 127.0.0.1:port (or host) and
 * reads the reply into out (NUL-terminated, truncated to cap) within
 * timeout_ms. Returns the HTTP status, 0 when the server closed without
 * a status line, or -1 (connect failed / timed out). *body_p (may be NULL)
 * points into out after the headers. */
int http_raw(const char *host, int port, const char *request, size_t request_len, char *out, size_t cap,
             int timeout_ms, char **body_p);
/* GET path on 127.0.0.1:port: the status (as http_raw). */
int http_get(int port, const char *path, char *out, size_t cap, char **body_p);
/* A TCP connection to host:port (blocking connect), or -1. */
int http_connect(const char *host, int port, int timeout_ms);
/* Waits up to timeout_ms for a line containing `marker` in the log file
 * and parses the port after "http://HOST:" that follows it; host copied
 * to host_out (64 bytes) when not NULL. The port, or -1. */
int log_http_port(const char *log_path, const char *marker, char *host_out, int timeout_ms);
/* The value of the first sample `name{labels}` (labels exactly as written,
 * "" for none) in a Prometheus text, or -1 when absent. */
double prom_value(const char *text, const char *name, const char *labels);

#endif
