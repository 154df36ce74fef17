/* The scheduler's dashboard and the daemons' /metrics (docs/dashboard.md,
 * docs/metrics.md), against real daemons on loopback:
 * - the HTTP server answers 404/405 to what it does not serve, survives
 *   malformed requests and 500 idle or slow connections, binds loopback
 *   for ":PORT", and a taken port or --no-dashboard never stops a start;
 * - /metrics of the scheduler and of each worker pass `promtool check
 *   metrics`, and their counters equal `tessera status --json`'s;
 * - headless Chromium loads the page during a running SVD: a row per
 *   worker, a graph progress that grows between two snapshots, and a
 *   screenshot that is not blank. */
#include <fcntl.h>
#include <ifaddrs.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "cluster.h"
#include "graphs.h"
#include "http_get.h"
#include "kit.h"

static char buf[1 << 21];

static int dashboard_port(cluster *c, char *host)
{
  char log[512];
  snprintf(log, sizeof log, "%s/scheduler.log", c->dir);
  return log_http_port(log, "dashboard on", host, 10000);
}

static bool log_has(cluster *c, const char *name, const char *text)
{
  char path[512];
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  FILE *f = fopen(path, "r");
  if (f == NULL) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strstr(buf, text) != NULL;
}

/* A non-loopback IPv4 address of this host into ip (64 bytes), or false. */
static bool other_address(char *ip)
{
  struct ifaddrs *all, *a;
  if (getifaddrs(&all) != 0) return false;
  bool found = false;
  for (a = all; a != NULL && !found; a = a->ifa_next) {
    if (a->ifa_addr == NULL || a->ifa_addr->sa_family != AF_INET) continue;
    const struct sockaddr_in *sin = (const struct sockaddr_in *)a->ifa_addr;
    if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127) continue;
    inet_ntop(AF_INET, &sin->sin_addr, ip, 64);
    found = true;
  }
  freeifaddrs(all);
  return found;
}

TEST(http_refuses_survives_and_binds_loopback)
{
  cluster c = {0};
  const char *args[] = {"--dashboard", ":0", NULL};
  ASSERT_EQ(cluster_start_scheduler(&c, args), 0);
  char host[64] = "";
  int port = dashboard_port(&c, host);
  bool ok = false;
  do {
    if (port <= 0 || strcmp(host, "127.0.0.1") != 0) break;   /* ":PORT" is loopback */
    char *body;
    if (http_get(port, "/", buf, sizeof buf, &body) != 200 || strstr(body, "Tessera") == NULL) break;
    if (http_get(port, "/static/chart.js", buf, sizeof buf, &body) != 200 || strlen(body) < 100000) break;
    if (http_get(port, "/api/nothing", buf, sizeof buf, NULL) != 404) break;
    if (http_get(port, "/../etc/passwd", buf, sizeof buf, NULL) != 404) break;
    const char post[] = "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc";
    if (http_raw("127.0.0.1", port, post, sizeof post - 1, buf, sizeof buf, 5000, NULL) != 405) break;
    /* malformed: junk, a request line with no version, a huge URL, a header with no colon */
    const char junk[] = "\x01\xff\xfe garbage \x00 more\r\n\r\n";
    int st = http_raw("127.0.0.1", port, junk, sizeof junk - 1, buf, sizeof buf, 5000, NULL);
    if (st != 0 && st != 400) break;
    st = http_raw("127.0.0.1", port, "GET\r\n\r\n", 7, buf, sizeof buf, 5000, NULL);
    if (st != 0 && st != 400) break;
    static char huge[100000];
    memcpy(huge, "GET /", 5);
    memset(huge + 5, 'a', sizeof huge - 40);
    strcpy(huge + sizeof huge - 35, " HTTP/1.1\r\nHost: x\r\n\r\n");
    st = http_raw("127.0.0.1", port, huge, strlen(huge), buf, sizeof buf, 5000, NULL);
    if (st == 200) break;
    st = http_raw("127.0.0.1", port, "GET / HTTP/1.1\r\nno colon here\r\n\r\n", 34, buf, sizeof buf, 5000, NULL);
    if (st == 200) break;
    ok = http_get(port, "/api/workers", buf, sizeof buf, &body) == 200 && body[0] == '{';
  } while (0);
  if (!ok) cluster_stop(&c, true);
  ASSERT_TRUE(ok);

  /* 500 idle connections, half of them slow clients stuck mid-request */
  static int fds[500];
  int opened = 0;
  for (int i = 0; i < 500; i++) {
    fds[i] = http_connect("127.0.0.1", port, 2000);
    if (fds[i] >= 0) opened++;
    if (fds[i] >= 0 && i % 2) (void)!send(fds[i], "GET /api/workers HTTP/1.1\r\nHo", 29, MSG_NOSIGNAL);
  }
  char *body;
  int status = http_get(port, "/api/workers", buf, sizeof buf, &body);
  int metrics = http_get(port, "/metrics", buf, sizeof buf, NULL);
  for (int i = 0; i < 500; i++)
    if (fds[i] >= 0) close(fds[i]);
  ok = opened == 500 && status == 200 && metrics == 200 && cluster_alive(c.scheduler);
  if (!ok) fprintf(stderr, "  opened %d, /api/workers %d, /metrics %d\n", opened, status, metrics);

  /* not reachable on another interface of this host */
  char ip[64];
  if (ok && other_address(ip)) {
    int fd = http_connect(ip, port, 2000);
    if (fd >= 0) close(fd);
    ok = fd < 0;
    if (!ok) fprintf(stderr, "  the dashboard answered on %s\n", ip);
  } else if (ok) {
    fprintf(stderr, "  note: no non-loopback IPv4 here; bound host checked from the log only\n");
  }

  /* a second scheduler on the same port starts anyway, without a dashboard */
  cluster c2 = {0};
  char taken[64];
  snprintf(taken, sizeof taken, "127.0.0.1:%d", port);
  const char *args2[] = {"--dashboard", taken, NULL};
  bool second = ok && cluster_start_scheduler(&c2, args2) == 0;
  for (int i = 0; second && i < 100 && !log_has(&c2, "scheduler.log", "no dashboard:"); i++) usleep(50000);
  second = second && log_has(&c2, "scheduler.log", "no dashboard:") && cluster_alive(c2.scheduler);
  cluster_stop(&c2, !second && ok);
  cluster c3 = {0};
  const char *args3[] = {"--no-dashboard", NULL};
  bool third = second && cluster_start_scheduler(&c3, args3) == 0;
  usleep(300000);
  third = third && !log_has(&c3, "scheduler.log", "dashboard") && cluster_alive(c3.scheduler);
  cluster_stop(&c3, !third && second);
  cluster_stop(&c, !ok);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(second);
  ASSERT_TRUE(third);
}

/* promtool check metrics on text; true when it passes (its output printed otherwise). */
static bool promtool_ok(const char *dir, const char *name, const char *text)
{
  char path[512], cmd[700];
  snprintf(path, sizeof path, "%s/%s.prom", dir, name);
  FILE *f = fopen(path, "w");
  if (f == NULL) return false;
  fputs(text, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' 2>&1", path);
  const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  static char out[1 << 16];
  int rc = run_capture(argv, NULL, out, sizeof out, 60);
  if (rc != 0) fprintf(stderr, "  promtool on %s: exit %d: %s\n", name, rc, out);
  return rc == 0;
}

/* The worker's name from its /metrics (tessera_worker_info). */
static void metrics_worker_name(const char *text, char *name, size_t cap)
{
  const char *p = strstr(text, "tessera_worker_info{worker=\"");
  name[0] = '\0';
  if (p != NULL) snprintf(name, cap, "%.*s", (int)strcspn(p + 28, "\""), p + 28);
}

static const char *const COMPARED[][3] = {
  /* status --json field, scheduler metric, worker metric */
  {"tasks_done", "tessera_worker_tasks_done_total", "tessera_worker_tasks_done_total"},
  {"bytes_spilled", "tessera_worker_spilled_bytes_total", "tessera_worker_spilled_bytes_total"},
  {"bytes_dropped", "tessera_worker_dropped_bytes_total", "tessera_worker_dropped_bytes_total"},
  {"tasks_recomputed", "tessera_worker_recomputed_tasks_total", NULL},
  {"bytes_recomputed", "tessera_worker_recomputed_bytes_total", NULL},
  {"threads", "tessera_worker_threads", "tessera_worker_threads"},
};

/* Compares one status --json snapshot with the metrics texts; returns the
 * number of mismatches (printed when report) and counts tasks_done. */
static int compare(json_t *status, const char *sched_text, char texts[][1 << 16], int n, bool report, long long *done)
{
  int bad = 0;
  size_t i;
  json_t *w;
  *done = 0;
  json_array_foreach(json_object_get(status, "workers"), i, w) {
    const char *name = json_string_value(json_object_get(w, "name"));
    char labels[300];
    snprintf(labels, sizeof labels, "worker=\"%s\"", name);
    const char *own = NULL;
    for (int k = 0; k < n; k++) {
      char wn[256];
      metrics_worker_name(texts[k], wn, sizeof wn);
      if (strcmp(wn, name) == 0) own = texts[k];
    }
    if (own == NULL) bad++;
    *done += json_integer_value(json_object_get(w, "tasks_done"));
    for (size_t m = 0; m < sizeof COMPARED / sizeof COMPARED[0]; m++) {
      double want = (double)json_integer_value(json_object_get(w, COMPARED[m][0]));
      double s = prom_value(sched_text, COMPARED[m][1], labels);
      double o = COMPARED[m][2] && own ? prom_value(own, COMPARED[m][2], "") : want;
      if (s == want && o == want) continue;
      bad++;
      if (report) fprintf(stderr, "  %s %s: status %.0f, scheduler /metrics %.0f, worker /metrics %.0f\n", name,
                          COMPARED[m][0], want, s, o);
    }
  }
  return bad;
}

TEST(metrics_pass_promtool_and_equal_status)
{
  cluster c = {0};
  const char *sargs[] = {"--dashboard", "127.0.0.1:0", NULL};
  const char *wargs[] = {"--metrics", "127.0.0.1:0", NULL};
  ASSERT_EQ(cluster_start(&c, 2, 1, sargs, wargs), 0);
  int sport = dashboard_port(&c, NULL), wport[2];
  for (int i = 0; i < 2; i++) {
    char log[512];
    snprintf(log, sizeof log, "%s/worker-%d.log", c.dir, i);
    wport[i] = log_http_port(log, "metrics on", NULL, 10000);
  }
  char env[300];
  snprintf(env, sizeof env, "TESSERA_SCHEDULER=%s", c.address);
  const char *svd[] = {cluster_bin("tsr-svd"), "--rows", "40000", "--cols", "200", "--chunks", "2000,200", "--k", "5", NULL};
  int rc = run_capture(svd, env, buf, sizeof buf, 120);
  bool ok = sport > 0 && wport[0] > 0 && wport[1] > 0 && rc == 0;
  if (!ok) fprintf(stderr, "  ports %d %d %d, tsr-svd exit %d: %s\n", sport, wport[0], wport[1], rc, buf);
  /* heartbeats carry the workers' counters: poll until both sides agree */
  static char sched_text[1 << 20], texts[2][1 << 16];
  int bad = 1;
  long long done = 0;
  for (int attempt = 0; ok && attempt < 40 && bad != 0; attempt++) {
    usleep(attempt ? 250000 : 1500000);
    char *body;
    ok = http_get(sport, "/metrics", buf, sizeof buf, &body) == 200;
    snprintf(sched_text, sizeof sched_text, "%s", body);
    for (int i = 0; ok && i < 2; i++) {
      ok = http_get(wport[i], "/metrics", buf, sizeof buf, &body) == 200;
      snprintf(texts[i], sizeof texts[i], "%s", body);
    }
    const char *st[] = {cluster_bin("tessera"), "status", "--scheduler", c.address, "--json", NULL};
    ok = ok && run_capture(st, NULL, buf, sizeof buf, 30) == 0;
    json_t *status = ok ? json_loads(buf, 0, NULL) : NULL;
    ok = ok && status != NULL;
    if (ok) bad = compare(status, sched_text, texts, 2, attempt == 39, &done);
    json_decref(status);
  }
  ok = ok && bad == 0 && done > 0;
  bool prom = ok && promtool_ok(c.dir, "scheduler", sched_text) && promtool_ok(c.dir, "worker-0", texts[0]) &&
              promtool_ok(c.dir, "worker-1", texts[1]);
  /* the scheduler saw every task the workers ran, by op */
  bool by_op = prom && prom_value(sched_text, "tessera_tasks_completed_total", "op=\"matmul_random\"") > 0 &&
               strstr(sched_text, "tessera_task_duration_seconds_bucket{op=") != NULL &&
               strstr(texts[0], "tessera_worker_fetch_bytes_total ") != NULL;
  cluster_stop(&c, !by_op);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(prom);
  ASSERT_TRUE(by_op);
}

/* name's path on $PATH (run_capture does not search it), in a static
 * buffer; name itself when not found (the run then fails and says so). */
static const char *on_path(const char *name)
{
  static char path[2][1024];
  static int turn;
  char *p = path[turn++ % 2];
  const char *dirs = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin";
  for (const char *d = dirs; *d;) {
    size_t len = strcspn(d, ":");
    snprintf(p, 1024, "%.*s/%s", (int)len, d, name);
    if (access(p, X_OK) == 0) return p;
    d += len + (d[len] == ':');
  }
  return name;
}

/* Runs headless Chromium on url; `what` is "--dump-dom" (out gets the
 * DOM) or "--screenshot=PATH". The exit status. */
static int chromium(const char *what, const char *url, char *out, size_t cap)
{
  const char *argv[] = {on_path("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--hide-scrollbars", "--window-size=1280,1000", "--virtual-time-budget=3000", what, url, NULL};
  return run_capture(argv, NULL, out, cap, 120);
}

/* The progress values of the page's graphs; the count. */
static int progress_values(const char *dom, double *v, int max)
{
  int n = 0;
  for (const char *p = strstr(dom, "class=\"graph-progress\""); p && n < max; p = strstr(p + 1, "class=\"graph-progress\"")) {
    const char *val = strstr(p, "value=\"");
    if (val != NULL) v[n++] = strtod(val + 7, NULL);
  }
  return n;
}

static int count(const char *text, const char *what)
{
  int n = 0;
  for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

/* Fraction of the screenshot's pixels that differ from its most common colour. */
static double drawn_fraction(const char *png)
{
  char cmd[700];
  snprintf(cmd, sizeof cmd,
           "from PIL import Image\n"
           "im = Image.open('%s').convert('RGB')\n"
           "counts = im.getcolors(im.width * im.height)\n"
           "print(1 - max(c for c, _ in counts) / (im.width * im.height))\n", png);
  /* Debian's python3-pil is for the system python, not a venv's on PATH */
  const char *argv[] = {"/usr/bin/python3", "-c", cmd, NULL};
  static char out[4096];
  if (run_capture(argv, NULL, out, sizeof out, 60) != 0) {
    fprintf(stderr, "  python3 PIL: %s\n", out);
    return -1;
  }
  return strtod(out, NULL);
}

/* Waits until /api/graphs shows a graph under way. */
static bool graph_under_way(int port)
{
  for (int i = 0; i < 300; i++) {
    char *body;
    if (http_get(port, "/api/graphs", buf, sizeof buf, &body) == 200 && strstr(body, "\"progress\":0.") &&
        strstr(body, "\"progress\":0.0,") == NULL)
      return true;
    usleep(100000);
  }
  return false;
}

TEST(chromium_sees_workers_and_progress_during_svd)
{
  cluster c = {0};
  const char *sargs[] = {"--dashboard", "127.0.0.1:0", NULL};
  ASSERT_EQ(cluster_start(&c, 2, 1, sargs, NULL), 0);
  int port = dashboard_port(&c, NULL);
  pid_t svd = fork();
  if (svd == 0) {
    setenv("TESSERA_SCHEDULER", c.address, 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(cluster_bin("tsr-svd"), "tsr-svd", "--rows", "3000000", "--cols", "500", "--chunks", "20000,500", "--k",
          "10", "--power-iters", "4", (char *)NULL);
    _exit(127);
  }
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  static char dom1[1 << 20], dom2[1 << 20];
  double v1[4] = {0}, v2[4] = {0};
  bool ok = port > 0 && svd > 0 && graph_under_way(port);
  if (!ok) fprintf(stderr, "  no graph under way on the dashboard (port %d)\n", port);
  int rc1 = ok ? chromium("--dump-dom", url, dom1, sizeof dom1) : -1;
  usleep(500000);
  int rc2 = ok ? chromium("--dump-dom", url, dom2, sizeof dom2) : -1;
  if (ok && (rc1 != 0 || rc2 != 0)) fprintf(stderr, "  chromium exit %d, %d: %.2000s\n", rc1, rc2, rc1 ? dom1 : dom2);
  ok = ok && rc1 == 0 && rc2 == 0;
  int rows1 = count(dom1, "class=\"worker-row\""), rows2 = count(dom2, "class=\"worker-row\"");
  int n1 = progress_values(dom1, v1, 4), n2 = progress_values(dom2, v2, 4);
  bool dom_ok = ok && rows1 == 2 && rows2 == 2 && n1 == 1 && n2 == 1 && v2[0] > v1[0];
  if (!dom_ok) fprintf(stderr, "  worker rows %d, %d; progress %d values %.4f -> %d values %.4f\n", rows1, rows2, n1, v1[0], n2, v2[0]);
  char shot[512], arg[600];
  snprintf(shot, sizeof shot, "%s/dashboard.png", c.dir);
  snprintf(arg, sizeof arg, "--screenshot=%s", shot);
  double drawn = dom_ok && chromium(arg, url, buf, sizeof buf) == 0 ? drawn_fraction(shot) : -1;
  bool shot_ok = drawn > 0.05;
  if (dom_ok && !shot_ok) fprintf(stderr, "  screenshot: %.4f of its pixels are not background\n", drawn);
  kill(svd, SIGTERM);
  waitpid(svd, NULL, 0);
  cluster_stop(&c, !shot_ok);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(dom_ok);
  ASSERT_TRUE(shot_ok);
}

/* full -> 8 x scale -> sum is fused into one task (default --fuse-width
 * 1). /api/graphs counts it as its parts, in the groups of their own ops
 * (docs/dashboard.md), with no group named "fused". Returns the group's
 * `field` in the first graph, -1 when absent. */
static long long group_field(json_t *graphs, const char *op, const char *field)
{
  json_t *graph = json_array_get(json_object_get(graphs, "graphs"), 0), *g;
  size_t i;
  json_array_foreach(json_object_get(graph, "groups"), i, g)
    if (strcmp(json_string_value(json_object_get(g, "op")), op) == 0)
      return json_integer_value(json_object_get(g, field));
  return -1;
}

TEST(fused_tasks_count_in_their_parts_groups)
{
  cluster c = {0};
  const char *sargs[] = {"--dashboard", "127.0.0.1:0", NULL};
  ASSERT_EQ(cluster_start(&c, 1, 1, sargs, NULL), 0);
  int port = dashboard_port(&c, NULL);
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  bool ok = port > 0 && tsr_client_open(&client, c.address, NULL) == 0 && tsr_graph_new(&g) == 0;
  if (ok) ok = add_fused_chain(g) == 0;
  if (ok) ok = tsr_submit(client, &g, &f) == 0 && tsr_future_wait(f, 30000) == 0;
  /* the future holds f-sum, so the graph stays listed; the first polls
   * may read a snapshot from before the task finished */
  json_t *graphs = NULL;
  for (int i = 0; ok && i < 50; i++, usleep(100000)) {
    char *body;
    json_decref(graphs);
    graphs = http_get(port, "/api/graphs", buf, sizeof buf, &body) == 200 ? json_loads(body, 0, NULL) : NULL;
    if (group_field(graphs, "scale", "done") == 8) break;
  }
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, !ok || kit_current_failed);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(graphs != NULL);
  json_t *graph = json_array_get(json_object_get(graphs, "graphs"), 0);
  ASSERT_EQ(json_integer_value(json_object_get(graph, "fused_tasks")), 1);
  ASSERT_EQ(json_integer_value(json_object_get(graph, "tasks_total")), 10);
  ASSERT_EQ(group_field(graphs, "full", "done"), 1);
  ASSERT_EQ(group_field(graphs, "scale", "done"), 8);
  ASSERT_EQ(group_field(graphs, "scale", "total"), 8);
  ASSERT_EQ(group_field(graphs, "sum", "done"), 1);
  ASSERT_EQ(group_field(graphs, "sum", "memory"), 1);   /* the fused task's record, held by the future */
  ASSERT_EQ(group_field(graphs, "fused", "done"), -1);
  json_decref(graphs);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  unsetenv("TESSERA_SCHEDULER");
  RUN(http_refuses_survives_and_binds_loopback);
  RUN(metrics_pass_promtool_and_equal_status);
  RUN(chromium_sees_workers_and_progress_during_svd);
  RUN(fused_tasks_count_in_their_parts_groups);
  return kit_summary();
}
