/* Integration tests of the one-task round trip (issue 13, docs/scheduler.md
 * "Where the time goes"), with real daemons:
 *
 * - a one-task graph is dispatched and answered without waiting for any
 *   timer: with heartbeats every 2 s, 40 round trips each finish far below
 *   the interval (a reply held until the next timer, or a coalescing
 *   window, would show as ~1 s). Generous bounds: a functional check, not
 *   the benchmark (bench/overhead, bench/overhead_pingpong);
 * - TESSERA_RTTRACE makes the scheduler, the worker and the client write
 *   their round-trip stamps at exit, and the stamps of one round trip come
 *   in the order of its hops (client submit -> scheduler -> worker ->
 *   executor -> scheduler -> client), which bench/overhead_trace.py relies
 *   on. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

#define ROUNDS 40

static const char *slow_timers[] = {"--heartbeat-interval", "2s", "--heartbeat-timeout", "20s", NULL};
static const char *slow_worker[] = {"--heartbeat-interval", "2s", NULL};

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ROUNDS one-task graphs, one after the other; the slowest round trip in
 * *max_s. 0 or a tsr error code. */
static int one_task_rounds(const char *address, double *max_s)
{
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, address, NULL);
  *max_s = 0;
  for (int i = 0; rc == 0 && i < ROUNDS; i++) {
    tsr_graph *g = NULL;
    tsr_future *f = NULL;
    char key[32];
    snprintf(key, sizeof key, "rt-%d", i);
    rc = tsr_graph_new(&g);
    if (rc == 0) rc = add_plain(g, key, "noop", NULL, 0);
    double t0 = now_s();
    if (rc == 0) rc = tsr_submit(client, &g, &f);
    if (rc == 0) rc = tsr_future_wait(f, 10000);
    double took = now_s() - t0;
    if (took > *max_s) *max_s = took;
    tsr_future_release(&f);
    tsr_graph_destroy(&g);
  }
  tsr_client_close(client);
  return rc;
}

TEST(one_task_graph_is_not_held_by_a_timer)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, slow_timers, slow_worker));
  double max_s = 0;
  int rc = one_task_rounds(c.address, &max_s);
  cluster_stop(&c, rc != 0 || max_s >= 0.5);
  ASSERT_OK(rc);
  fprintf(stderr, "  slowest of %d round trips: %.1f ms (heartbeat interval 2000 ms)\n", ROUNDS, max_s * 1e3);
  ASSERT_TRUE(max_s < 0.5);
}

/* The first stamp with label at or after *from (ns) in the lines of every
 * file prefix.* under dir; updates *from. -1 when there is none. */
static int find_after(const char *dir, const char *label, unsigned long long *from)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  unsigned long long best = 0;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "rt.", 3) != 0) continue;
    char path[600], line[128], what[64];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    unsigned long long ns;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
      if (sscanf(line, "%llu %63s", &ns, what) == 2 && strcmp(what, label) == 0 && ns >= *from &&
          (best == 0 || ns < best))
        best = ns;
    if (f != NULL) fclose(f);
  }
  if (d != NULL) closedir(d);
  if (best == 0) return -1;
  *from = best;
  return 0;
}

TEST(rttrace_stamps_every_hop_in_order)
{
  char dir[] = "/tmp/tsr-rttrace-XXXXXX", prefix[64];
  ASSERT_TRUE(mkdtemp(dir) != NULL);
  snprintf(prefix, sizeof prefix, "%s/rt", dir);
  setenv("TESSERA_RTTRACE", prefix, 1);
  cluster c;
  int started = cluster_start(&c, 1, 1, slow_timers, slow_worker);
  unsetenv("TESSERA_RTTRACE");
  ASSERT_OK(started);
  /* The client in a child process: its stamps are written when it exits. */
  pid_t kid = fork();
  if (kid == 0) {
    setenv("TESSERA_RTTRACE", prefix, 1);
    double max_s;
    exit(one_task_rounds(c.address, &max_s) == 0 ? 0 : 1);   /* exit, not _exit: atexit writes the stamps */
  }
  int status = -1;
  waitpid(kid, &status, 0);
  cluster_stop(&c, !WIFEXITED(status) || WEXITSTATUS(status) != 0);   /* SIGTERM: the daemons write theirs */
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  static const char *const hops[] = {"c.submit", "c.sent", "s.submit", "s.sent_w", "w.compute", "w.exec_start",
                                     "w.exec_end", "w.complete", "w.sent", "s.task_done", "s.sent_c",
                                     "c.key_done", "c.wait_ret"};
  unsigned long long at = 0;
  for (size_t i = 0; i < sizeof hops / sizeof hops[0]; i++) {
    if (find_after(dir, hops[i], &at) != 0) {
      char cmd[128];
      snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
      if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", dir);
      KIT_FAIL_("no stamp '%s' after the previous hop's", hops[i]);
    }
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ASSERT_EQ(system(cmd), 0);
}

int main(void)
{
  /* First: a process reads TESSERA_RTTRACE at its first stamp, and the
   * child that plays the client inherits that look from this process. */
  RUN(rttrace_stamps_every_hop_in_order);
  RUN(one_task_graph_is_not_held_by_a_timer);
  return kit_summary();
}
