/* Integration tests of task fusion with real daemons: a 10,000-task chain
 * gives the same answer fused (the default) and with --no-fuse, and status
 * shows it as one fused task of 10,000 parts; a wanted key in the middle of
 * a chain is still delivered; a fused task whose worker is SIGKILLed while
 * it runs, and later while it holds the result, is recomputed; `tessera
 * status` names the fused tasks and counts the graph by its parts. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

static const char *fast_sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};
static const char *fast_worker[] = {"--heartbeat-interval", "250ms", NULL};

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* full([4], 1) -> (n - 2) x scale(1, +1) -> sum: n tasks; the sum is
 * 4 * (n - 1), and "<prefix>-mid" (task n/2) is 1 + n/2 per element. */
static int build_chain(tsr_graph *g, const char *prefix, int n, bool want_mid)
{
  char key[64], prev[64];
  snprintf(prev, sizeof prev, "%s-0", prefix);
  int rc = add_full(g, prev, 4, 1.0);
  for (int i = 1; i < n - 1 && rc == 0; i++) {
    if (i == n / 2) snprintf(key, sizeof key, "%s-mid", prefix);
    else snprintf(key, sizeof key, "%s-%d", prefix, i);
    rc = add_scale(g, key, prev, 1.0, 1.0);
    if (rc == 0 && i == n / 2 && want_mid) rc = tsr_graph_want(g, key);
    memcpy(prev, key, sizeof key);
  }
  snprintf(key, sizeof key, "%s-sum", prefix);
  const char *in = prev;
  if (rc == 0) rc = add_plain(g, key, "sum", &in, 1);
  if (rc == 0) rc = tsr_graph_want(g, key);
  return rc;
}

typedef struct chain_run {
  double sum;
  uint64_t tasks_total, fused_tasks, fused_parts;
} chain_run;

static int run_chain(const char *const *sched_args, int n, chain_run *out)
{
  cluster c;
  memset(out, 0, sizeof *out);
  if (cluster_start(&c, 2, 1, sched_args, NULL) != 0) return -1;
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_chain(g, "link", n, false);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc == 0) rc = gather_f64(client, "link-sum", &out->sum);
  tsr_cluster_info *info = NULL;
  if (rc == 0) rc = tsr_cluster_info_get(client, 10000, &info);
  if (rc == 0 && info->n_graphs == 1) {
    out->tasks_total = info->graphs[0].tasks_total;
    out->fused_tasks = info->graphs[0].fused_tasks;
    out->fused_parts = info->graphs[0].fused_parts;
  }
  tsr_cluster_info_destroy(&info);
  if (rc != 0) fprintf(stderr, "  error %s: %s / %s\n", tsr_err_name(rc), tsr_errmsg(), f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  return rc;
}

TEST(chain_of_10000_same_answer_fused_and_unfused)
{
  const char *no_fuse[] = {"--no-fuse", NULL};
  chain_run fused, plain;
  ASSERT_OK(run_chain(NULL, 10000, &fused));
  ASSERT_OK(run_chain(no_fuse, 10000, &plain));
  ASSERT_TRUE(fused.sum == 4.0 * 9999);
  ASSERT_TRUE(plain.sum == fused.sum);
  /* status counts by parts either way; fused, it is one task */
  ASSERT_EQ(fused.tasks_total, 10000);
  ASSERT_EQ(plain.tasks_total, 10000);
  ASSERT_EQ(fused.fused_tasks, 1);
  ASSERT_EQ(fused.fused_parts, 10000);
  ASSERT_EQ(plain.fused_tasks, 0);
}

TEST(wanted_middle_key_is_delivered)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 1, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  double sum = 0, mid = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_chain(g, "w", 100, true);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 60000);
  if (rc == 0) rc = gather_f64(client, "w-sum", &sum);
  tsr_chunk *chunk = NULL;
  if (rc == 0) rc = tsr_gather(client, "w-mid", 30000, &chunk);
  if (rc == 0 && chunk->nbytes == 4 * sizeof(double)) mid = ((double *)chunk->data)[3];
  tsr_chunk_destroy(&chunk);
  tsr_cluster_info *info = NULL;
  uint64_t fused_tasks = 0;
  if (rc == 0 && tsr_cluster_info_get(client, 10000, &info) == 0 && info->n_graphs == 1)
    fused_tasks = info->graphs[0].fused_tasks;
  tsr_cluster_info_destroy(&info);
  /* while the graph is held, `tessera status` names its fused tasks */
  char out[8192] = "";
  const char *status[] = {cluster_bin("tessera"), "status", "--scheduler", c.address, NULL};
  int status_rc = rc == 0 ? run_capture(status, NULL, out, sizeof out, 20) : -1;
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  ASSERT_OK(rc);
  ASSERT_EQ(status_rc, 0);
  ASSERT_CONTAINS(out, "FUSED");
  ASSERT_CONTAINS(out, "2 tasks of 100 parts");
  ASSERT_CONTAINS(out, "100 / 100");
  ASSERT_TRUE(mid == 51.0);   /* task 50: 1 + 50 links of +1 */
  ASSERT_TRUE(sum == 4.0 * 99);
  ASSERT_EQ(fused_tasks, 2);  /* up to the wanted key, and after it */
}

/* sleep(ms) -> astype f64 -> scale(2, +1) -> sum, fused into one task that
 * runs about ms: 2 * ms + 1. */
static int build_slow(tsr_graph *g, int64_t ms)
{
  int rc = add_sleep(g, "slow-nap", ms, NULL, 0);
  tsr_args *a = NULL;
  const char *nap = "slow-nap";
  if (rc == 0) rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_str(a, "dtype", "f64");
  if (rc == 0) rc = tsr_graph_add_args(g, "slow-f64", "astype", a, &nap, 1);
  tsr_args_destroy(&a);
  if (rc == 0) rc = add_scale(g, "slow-scaled", "slow-f64", 2.0, 1.0);
  const char *in = "slow-scaled";
  if (rc == 0) rc = add_plain(g, "slow-sum", "sum", &in, 1);
  if (rc == 0) rc = tsr_graph_want(g, "slow-sum");
  return rc;
}

TEST(fused_task_of_a_killed_worker_is_recomputed)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, fast_sched, fast_worker));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  double first = 0, second = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_slow(g, 1500);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  /* Killed while it runs (the only worker has it), a new worker redoes it. */
  sleep_ms(300);
  int w1 = cluster_add_worker(&c, 1, fast_worker);
  if (rc == 0 && w1 < 0) rc = -100;
  if (rc == 0) rc = tsr_wait_for_workers(client, 2, 30000);
  cluster_signal_worker(&c, 0, SIGKILL);
  if (rc == 0) rc = tsr_future_wait(f, 60000);
  if (rc == 0) rc = gather_f64(client, "slow-sum", &first);
  /* Killed while it holds the result: recomputed on a third worker. */
  int w2 = cluster_add_worker(&c, 1, fast_worker);
  if (rc == 0 && w2 < 0) rc = -101;
  if (rc == 0) rc = tsr_wait_for_workers(client, 2, 30000);
  cluster_signal_worker(&c, w1, SIGKILL);
  sleep_ms(2500);  /* past the heartbeat timeout: the scheduler knows */
  if (rc == 0) rc = gather_f64(client, "slow-sum", &second);
  if (rc != 0) fprintf(stderr, "  error %s: %s / %s\n", tsr_err_name(rc), tsr_errmsg(), f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0 || first != 3001.0 || second != 3001.0);
  ASSERT_OK(rc);
  ASSERT_TRUE(first == 3001.0);
  ASSERT_TRUE(second == 3001.0);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(chain_of_10000_same_answer_fused_and_unfused);
  RUN(wanted_middle_key_is_delivered);
  RUN(fused_task_of_a_killed_worker_is_recomputed);
  return kit_summary();
}
