/* The dashboard tests' HTTP helpers (http_get.h). */
#include "http_get.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int http_connect(const char *host, int port, int timeout_ms)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, host, &sa.sin_addr);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static size_t read_all(int fd, char *out, size_t cap, int timeout_ms)
{
  size_t len = 0;
  long long deadline = now_ms() + timeout_ms;
  while (len + 1 < cap) {
    long long left = deadline - now_ms();
    struct pollfd p = {fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
    ssize_t n = read(fd, out + len, cap - 1 - len);
    if (n <= 0) break;
    len += (size_t)n;
  }
  out[len] = '\0';
  return len;
}

int http_raw(const char *host, int port, const char *request, size_t request_len, char *out, size_t cap,
             int timeout_ms, char **body_p)
{
  int fd = http_connect(host, port, timeout_ms);
  if (fd < 0) return -1;
  size_t sent = 0;
  while (sent < request_len) {
    ssize_t n = send(fd, request + sent, request_len - sent, MSG_NOSIGNAL);
    if (n <= 0) break;   /* the server may refuse early: read what it said */
    sent += (size_t)n;
  }
  size_t len = read_all(fd, out, cap, timeout_ms);
  close(fd);
  int status = 0;
  if (len > 12 && strncmp(out, "HTTP/1.", 7) == 0) status = atoi(out + 9);
  char *body = strstr(out, "\r\n\r\n");
  if (body_p != NULL) *body_p = body ? body + 4 : out + len;
  return status;
}

int http_get(int port, const char *path, char *out, size_t cap, char **body_p)
{
  char req[1024];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
  return http_raw("127.0.0.1", port, req, (size_t)n, out, cap, 10000, body_p);
}

int log_http_port(const char *log_path, const char *marker, char *host_out, int timeout_ms)
{
  long long deadline = now_ms() + timeout_ms;
  char line[2048];
  do {
    FILE *f = fopen(log_path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
      char *m = strstr(line, marker);
      char *url = m ? strstr(m, "http://") : NULL;
      char *colon = url ? strchr(url + 7, ':') : NULL;
      if (colon == NULL) continue;
      fclose(f);
      if (host_out != NULL) snprintf(host_out, 64, "%.*s", (int)(colon - url - 7), url + 7);
      return atoi(colon + 1);
    }
    if (f != NULL) fclose(f);
    usleep(50000);
  } while (now_ms() < deadline);
  return -1;
}

double prom_value(const char *text, const char *name, const char *labels)
{
  char want[512];
  snprintf(want, sizeof want, labels[0] ? "%s{%s} " : "%s%s ", name, labels);
  size_t len = strlen(want);
  for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
    if (strncmp(line, want, len) == 0) return strtod(line + len, NULL);
  return -1;
}
