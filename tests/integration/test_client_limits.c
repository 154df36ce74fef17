/* Integration tests of the limits (docs/limits.md) with real daemons: a
 * client that floods submissions is refused with TSR_ELIMIT naming
 * --max-client-tasks once it has that many unfinished tasks, while another
 * client's graph is admitted and completes promptly (within the bound the
 * cap gives: cap x task time / slots, plus a margin); the flooder may
 * submit again once its tasks finish; a client over --max-clients is
 * refused at connect; a worker refuses a task whose output would exceed
 * --max-chunk-bytes; a bad limit setting stops the scheduler with a
 * message naming it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

#define CAP 40            /* --max-client-tasks */
#define BATCH 10          /* tasks per flood graph */
#define TASK_MS 50        /* each flood task sleeps this long */
#define THREADS 2         /* one worker, running THREADS tasks at once */
/* The longest the other client can wait behind the flooder: its whole
 * capped backlog, run THREADS at a time. */
#define BACKLOG_S ((double)CAP * TASK_MS / 1e3 / THREADS)

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A graph of n independent sleep(ms) tasks "<prefix>-<i>". */
static tsr_graph *sleeps(const char *prefix, int n, int ms)
{
  tsr_graph *g = NULL;
  if (tsr_graph_new(&g) != 0) return NULL;
  for (int i = 0; i < n; i++) {
    char key[64];
    snprintf(key, sizeof key, "%s-%d", prefix, i);
    if (add_sleep(g, key, ms, NULL, 0) != 0) tsr_graph_destroy(&g);
    if (g == NULL) return NULL;
  }
  return g;
}

/* Submits flood graphs until one is refused; returns how many were
 * admitted (their futures in futs), or -1 when none was refused. */
static int flood(tsr_client *flooder, tsr_future **futs, int max, int round, char *why, size_t cap)
{
  for (int i = 0; i < max; i++) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "flood%d-%d", round, i);
    tsr_graph *g = sleeps(prefix, BATCH, TASK_MS);
    int rc = g ? tsr_submit(flooder, &g, &futs[i]) : TSR_ENOMEM;
    if (rc != 0) {
      snprintf(why, cap, "%s: %s", tsr_strerror(rc), tsr_errmsg());
      tsr_graph_destroy(&g);
      return rc == TSR_ELIMIT ? i : -1;
    }
  }
  return -1;
}

TEST(flooder_is_refused_and_another_client_completes_promptly)
{
  static const char *sched_args[] = {"--max-client-tasks", "40", "--max-clients", "2", NULL};
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, THREADS, sched_args, NULL));
  tsr_client *flooder = NULL, *other = NULL, *third = NULL;
  tsr_future *futs[64] = {0}, *f = NULL;
  char why[1024] = "";
  bool ok = false;
  int admitted = -1;
  double waited = -1;
  if (tsr_client_open(&flooder, c.address, NULL) != 0 || tsr_client_open(&other, c.address, NULL) != 0) goto out;
  admitted = flood(flooder, futs, 64, 0, why, sizeof why);
  fprintf(stderr, "  flooder: %d graphs of %d admitted, then %s\n", admitted, BATCH, why);
  if (admitted != CAP / BATCH || strstr(why, "--max-client-tasks") == NULL) goto out;
  /* the other client, while the flooder's 40 tasks are still queued */
  double t0 = now_s();
  tsr_graph *g = sleeps("other", 2, 1);
  if (g == NULL || tsr_submit(other, &g, &f) != 0 || tsr_future_wait(f, 30000) != 0) goto out;
  waited = now_s() - t0;
  fprintf(stderr, "  other client's graph done %.3f s after submit (flood backlog at most %.2f s)\n", waited,
          BACKLOG_S);
  /* the flooder's own tasks finish, then it may submit again */
  for (int i = 0; i < admitted; i++)
    if (tsr_future_wait(futs[i], 30000) != 0) goto out;
  tsr_future *again[2] = {0};
  if (flood(flooder, again, 1, 1, why, sizeof why) != -1 || again[0] == NULL) goto out;
  tsr_future_wait(again[0], 30000);
  tsr_future_release(&again[0]);
  /* a third client is over --max-clients 2 */
  int rc = tsr_client_open(&third, c.address, NULL);
  snprintf(why, sizeof why, "%s", tsr_errmsg());
  fprintf(stderr, "  third client: %s: %s\n", tsr_strerror(rc), why);
  ok = rc == TSR_ELIMIT && strstr(why, "--max-clients") != NULL;
out:
  for (int i = 0; i < 64; i++) tsr_future_release(&futs[i]);
  tsr_future_release(&f);
  tsr_client_close(third);
  tsr_client_close(other);
  tsr_client_close(flooder);
  cluster_stop(&c, !ok);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(waited >= 0 && waited < BACKLOG_S + 3.0);  /* margin: a loaded CI machine, ASan */
}

TEST(a_worker_refuses_a_chunk_over_its_limit)
{
  static const char *worker_args[] = {"--max-chunk-bytes", "1MiB", NULL};
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, NULL, worker_args));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *big = NULL, *small = NULL;
  bool ok = false;
  char error[1024] = "";
  if (tsr_client_open(&client, c.address, NULL) != 0 || tsr_graph_new(&g) != 0) goto out;
  /* 200,000 f64 = 1.6 MB, over 1 MiB: refused before it is allocated */
  if (add_uniform(g, "big", 200000, 0, 200000, 1) != 0 || tsr_submit(client, &g, &big) != 0) goto out;
  if (tsr_future_wait(big, 30000) != TSR_ETASK) goto out;
  snprintf(error, sizeof error, "%s", tsr_future_error(big) ? tsr_future_error(big) : "");
  fprintf(stderr, "  big: %s\n", error);
  if (tsr_graph_new(&g) != 0 || add_uniform(g, "small", 1000, 0, 1000, 1) != 0 || tsr_submit(client, &g, &small) != 0)
    goto out;
  ok = tsr_future_wait(small, 30000) == 0 && strstr(error, "--max-chunk-bytes") != NULL &&
       strstr(error, "1600000") != NULL;
out:
  tsr_graph_destroy(&g);
  tsr_future_release(&big);
  tsr_future_release(&small);
  tsr_client_close(client);
  cluster_stop(&c, !ok);
  ASSERT_TRUE(ok);
}

TEST(a_bad_limit_stops_the_scheduler_naming_it)
{
  char out[4096];
  const char *argv[] = {cluster_bin("tessera-scheduler"), "--max-graph-tasks", "many", NULL};
  ASSERT_EQ(run_capture(argv, NULL, out, sizeof out, 20), 2);
  ASSERT_CONTAINS(out, "max-graph-tasks");
  ASSERT_CONTAINS(out, "many");
  const char *print[] = {cluster_bin("tessera-scheduler"), "--print-config", NULL};
  ASSERT_EQ(run_capture(print, "TESSERA_MAX_CLIENT_TASKS=123", out, sizeof out, 20), 0);
  ASSERT_CONTAINS(out, "max-client-tasks");
  ASSERT_CONTAINS(out, "123");
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(flooder_is_refused_and_another_client_completes_promptly);
  RUN(a_worker_refuses_a_chunk_over_its_limit);
  RUN(a_bad_limit_stops_the_scheduler_naming_it);
  return kit_summary();
}
