/* unit.http: http/ without the daemons. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "board.h"
#include "http.h"
#include "kit.h"
#include "prom.h"

TEST(addresses_default_to_loopback_and_bad_ones_are_named)
{
  char host[64];
  unsigned port = 1;
  tsr_errbuf err = {{0}};
  ASSERT_EQ(tsr_http_parse_addr(":9000", host, &port, &err), 0);
  ASSERT_STREQ(host, "127.0.0.1");
  ASSERT_EQ(port, 9000);
  ASSERT_EQ(tsr_http_parse_addr("0.0.0.0:0", host, &port, &err), 0);
  ASSERT_STREQ(host, "0.0.0.0");
  ASSERT_EQ(port, 0);
  ASSERT_EQ(tsr_http_parse_addr("nowhere", host, &port, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "\"nowhere\" is not HOST:PORT") != NULL);
  ASSERT_EQ(tsr_http_parse_addr("127.0.0.1:70000", host, &port, &err), TSR_EINVAL);
  ASSERT_TRUE(strstr(err.text, "port '70000'") != NULL);
  ASSERT_EQ(tsr_http_parse_addr("127.0.0.1:", host, &port, &err), TSR_EINVAL);
}

TEST(labels_are_escaped_and_histograms_cumulative)
{
  tsr_text t = {0};
  tsr_text_label(&t, "a\"b\\c\nd");
  ASSERT_STREQ(t.data, "a\\\"b\\\\c\\nd");
  tsr_text_free(&t);
  tsr_hist h = {0};
  tsr_hist_add(&h, 0.00005);   /* first bucket */
  tsr_hist_add(&h, 0.003);     /* le 0.005 */
  tsr_hist_add(&h, 1000);      /* +Inf only */
  tsr_prom_hist(&t, "x_seconds", "op=\"qr\"", &h);
  ASSERT_TRUE(strstr(t.data, "x_seconds_bucket{op=\"qr\",le=\"0.0001\"} 1\n") != NULL);
  ASSERT_TRUE(strstr(t.data, "x_seconds_bucket{op=\"qr\",le=\"0.001\"} 1\n") != NULL);
  ASSERT_TRUE(strstr(t.data, "x_seconds_bucket{op=\"qr\",le=\"0.005\"} 2\n") != NULL);
  ASSERT_TRUE(strstr(t.data, "x_seconds_bucket{op=\"qr\",le=\"60\"} 2\n") != NULL);
  ASSERT_TRUE(strstr(t.data, "x_seconds_bucket{op=\"qr\",le=\"+Inf\"} 3\n") != NULL);
  ASSERT_TRUE(strstr(t.data, "x_seconds_count{op=\"qr\"} 3\n") != NULL);
  tsr_text_free(&t);
  tsr_prom_hist(&t, "y_seconds", "", &h);
  ASSERT_TRUE(strstr(t.data, "y_seconds_count 3\n") != NULL);   /* no empty braces */
  tsr_text_free(&t);
}

typedef struct publisher {
  tsr_board *board;
  int delay_ms;
} publisher;

static void *publish_later(void *arg)
{
  publisher *p = arg;
  usleep((useconds_t)p->delay_ms * 1000);
  tsr_board_publish(p->board, 0, strdup("fresh"), 5, tsr_now_ms());
  return NULL;
}

TEST(board_serves_the_latest_and_waits_when_stale)
{
  tsr_board *b = tsr_board_new(2);
  ASSERT_TRUE(b != NULL);
  ASSERT_TRUE(!tsr_board_wanted(b, tsr_now_ms(), 1000));   /* nobody polled yet */
  char *text;
  size_t len;
  /* never published and nobody publishes: "" after the wait */
  ASSERT_EQ(tsr_board_copy(b, 1, 1000, 50, &text, &len), 0);
  ASSERT_EQ(len, 0);
  free(text);
  ASSERT_TRUE(tsr_board_wanted(b, tsr_now_ms(), 1000));    /* the copy counted as a poll */
  /* stale: the reader waits for the publish a thread makes 100 ms later */
  publisher p = {b, 100};
  pthread_t th;
  pthread_create(&th, NULL, publish_later, &p);
  ASSERT_EQ(tsr_board_copy(b, 0, 1000, 5000, &text, &len), 0);
  pthread_join(th, NULL);
  ASSERT_STREQ(text, "fresh");
  free(text);
  tsr_board_publish(b, 0, strdup("newer"), 5, tsr_now_ms());
  ASSERT_EQ(tsr_board_copy(b, 0, 1000, 0, &text, &len), 0);
  ASSERT_STREQ(text, "newer");
  free(text);
  tsr_board_destroy(&b);
  ASSERT_TRUE(b == NULL);
}

static int hello(void *arg, const tsr_http_request *req, tsr_http_reply *reply)
{
  const char *who = tsr_http_query(req, "who");
  reply->body = strdup(who ? who : (const char *)arg);
  reply->len = strlen(reply->body);
  return 0;
}

static int get(unsigned port, const char *request, char *out, size_t cap)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) return -1;
  if (write(fd, request, strlen(request)) < 0) return -1;
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, out + n, cap - 1 - n)) > 0) n += (size_t)r;
  out[n] = '\0';
  close(fd);
  return n > 12 ? atoi(out + 9) : 0;
}

TEST(server_routes_404_405_and_a_taken_port)
{
  tsr_http_route route = {"/hello", hello, "world"};
  tsr_http *http = NULL;
  tsr_errbuf err = {{0}};
  ASSERT_EQ(tsr_http_start(":0", &route, 1, &http, &err), 0);
  unsigned port = tsr_http_port(http);
  ASSERT_TRUE(port > 0);
  ASSERT_TRUE(strncmp(tsr_http_address(http), "127.0.0.1:", 10) == 0);
  static char out[8192];
  ASSERT_EQ(get(port, "GET /hello HTTP/1.0\r\n\r\n", out, sizeof out), 200);
  ASSERT_TRUE(strstr(out, "\r\n\r\nworld") != NULL);
  ASSERT_EQ(get(port, "GET /hello?who=you HTTP/1.0\r\n\r\n", out, sizeof out), 200);
  ASSERT_TRUE(strstr(out, "\r\n\r\nyou") != NULL);
  ASSERT_EQ(get(port, "GET /hello/ HTTP/1.0\r\n\r\n", out, sizeof out), 404);
  ASSERT_EQ(get(port, "DELETE /hello HTTP/1.0\r\n\r\n", out, sizeof out), 405);
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
  tsr_http *second = NULL;
  ASSERT_EQ(tsr_http_start(addr, &route, 1, &second, &err), TSR_ECONN);
  ASSERT_TRUE(strstr(err.text, "cannot listen") != NULL);
  tsr_http_stop(&http);
  ASSERT_TRUE(http == NULL);
  tsr_http_stop(&http);   /* NULL: no-op */
}

int main(void)
{
  RUN(addresses_default_to_loopback_and_bad_ones_are_named);
  RUN(labels_are_escaped_and_histograms_cumulative);
  RUN(board_serves_the_latest_and_waits_when_stale);
  RUN(server_routes_404_405_and_a_taken_port);
  return kit_summary();
}
