/* Integration tests with real daemons: correctness of a 10,000-task graph,
 * recovery from a worker SIGKILLed mid-graph and from a worker that goes
 * silent, and a task that kills every worker it lands on; tsr_gather_into
 * and tsr_future_next_done. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Fast failure detection keeps these tests short; the defaults are longer. */
static const char *fast_sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};
static const char *fast_worker[] = {"--heartbeat-interval", "250ms", NULL};

/* 1000 chains of full(i) -> 8 x scale(2, +1) -> sum, then an add tree:
 * 10,000 chain tasks plus the tree. Each chain ends at 4·(256·i + 255). */
static int build_chains(tsr_graph *g, int chains, char *root, size_t cap)
{
  char **sums = calloc((size_t)chains, sizeof *sums);
  char key[64], prev[64];
  int rc = 0;
  for (int i = 0; i < chains && rc == 0; i++) {
    snprintf(prev, sizeof prev, "full-%d", i);
    rc = add_full(g, prev, 4, (double)i);
    for (int s = 0; s < 8 && rc == 0; s++) {
      snprintf(key, sizeof key, "scale-%d-%d", i, s);
      rc = add_scale(g, key, prev, 2.0, 1.0);
      memcpy(prev, key, sizeof key);
    }
    sums[i] = malloc(64);
    snprintf(sums[i], 64, "sum-%d", i);
    const char *in = prev;
    if (rc == 0) rc = add_plain(g, sums[i], "sum", &in, 1);
  }
  if (rc == 0) rc = add_tree(g, "tree", sums, (size_t)chains, 10, root, cap);
  for (int i = 0; i < chains; i++) free(sums[i]);
  free(sums);
  return rc;
}

TEST(graph_of_10000_tasks_gives_the_right_answer)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 2, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char root[64];
  double value = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_chains(g, 1000, root, sizeof root);
  if (rc == 0 && tsr_graph_size(g) < 10000) rc = -100;
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc == 0) rc = gather_f64(client, root, &value);
  if (rc != 0) fprintf(stderr, "  error %s: %s / %s\n", tsr_err_name(rc), tsr_errmsg(), f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0 || value != 512508000.0);
  ASSERT_OK(rc);
  ASSERT_EQ((long long)value, 512508000LL);
  ASSERT_TRUE(value == 512508000.0);
}

/* tsr_gather_into: the same bytes and shape as tsr_gather, into the
 * caller's buffer; a buffer too small is refused naming the key, and the
 * bytes past the chunk are left as they were. */
TEST(gather_into_fills_the_callers_buffer_and_refuses_a_short_one)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  double buf[6] = {-1, -1, -1, -1, -1, -1};
  tsr_chunk info = {0};
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_full(g, "five-sevens", 5, 7.0);
  if (rc == 0) rc = tsr_graph_want(g, "five-sevens");
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  int short_rc = rc == 0 ? tsr_gather_into(client, "five-sevens", 60000, buf, 4 * sizeof(double), &info) : rc;
  char short_msg[256];
  snprintf(short_msg, sizeof short_msg, "%s", tsr_errmsg());
  if (rc == 0) rc = tsr_gather_into(client, "five-sevens", 60000, buf, sizeof buf, &info);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  ASSERT_OK(rc);
  ASSERT_EQ(short_rc, TSR_ELIMIT);
  ASSERT_CONTAINS(short_msg, "five-sevens");
  ASSERT_EQ(info.dtype, TSR_F64);
  ASSERT_EQ(info.ndim, 1);
  ASSERT_EQ(info.shape[0], 5);
  ASSERT_EQ(info.nbytes, 5 * sizeof(double));
  ASSERT_TRUE(info.data == buf);
  for (int i = 0; i < 5; i++) ASSERT_TRUE(buf[i] == 7.0);
  ASSERT_TRUE(buf[5] == -1.0);
}

/* tsr_future_next_done: every wanted key exactly once, the slow one last,
 * each done when returned; then TSR_ENOTFOUND. A graph with a failing
 * task: TSR_ETASK with the future's message. */
TEST(next_done_returns_each_key_once_as_it_finishes)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 2, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  size_t order[6], got = 0;
  double values[6] = {0};
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  /* "late" is its input after 1.5 s (sleep with copy); five quick keys. */
  tsr_args *nap = NULL;
  const char *late_in = "full-late";
  if (rc == 0) rc = add_full(g, "full-late", 1, 100.0);
  if (rc == 0) rc = tsr_args_new(&nap);
  if (rc == 0) rc = tsr_args_int(nap, "ms", 1500);
  if (rc == 0) rc = tsr_args_bool(nap, "copy", true);
  if (rc == 0) rc = tsr_graph_add_args(g, "late", "sleep", nap, &late_in, 1);
  tsr_args_destroy(&nap);
  if (rc == 0) rc = tsr_graph_want(g, "late");
  for (int i = 0; i < 5 && rc == 0; i++) {
    char key[32];
    snprintf(key, sizeof key, "quick-%d", i);
    rc = add_full(g, key, 1, (double)i);
    if (rc == 0) rc = tsr_graph_want(g, key);
  }
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  while (rc == 0 && got < 6) {
    size_t index;
    rc = tsr_future_next_done(f, 60000, &index);
    if (rc == 0) rc = gather_f64(client, tsr_future_key(f, index), &values[got]);
    if (rc == 0) order[got++] = index;
  }
  size_t extra;
  int after = rc == 0 ? tsr_future_next_done(f, 1000, &extra) : rc;
  tsr_future_release(&f);
  /* A failing task: the shapes of an add disagree. */
  int failed = rc;
  const char *ins[] = {"three", "four"};
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_full(g, "three", 3, 1.0);
  if (rc == 0) rc = add_full(g, "four", 4, 1.0);
  if (rc == 0) rc = add_plain(g, "bad-add", "add", ins, 2);
  if (rc == 0) rc = tsr_graph_want(g, "bad-add");
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  size_t index;
  if (rc == 0) failed = tsr_future_next_done(f, 30000, &index);
  char failed_msg[256];
  snprintf(failed_msg, sizeof failed_msg, "%s", tsr_errmsg());
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  ASSERT_OK(rc);
  ASSERT_EQ(got, 6);
  ASSERT_EQ(order[5], 0);  /* "late", wanted first, finished last */
  ASSERT_TRUE(values[5] == 100.0);
  unsigned seen = 0;
  for (size_t i = 0; i < 6; i++) seen |= 1u << order[i];
  ASSERT_EQ(seen, 0x3fu);
  ASSERT_EQ(after, TSR_ENOTFOUND);
  ASSERT_EQ(failed, TSR_ETASK);
  ASSERT_CONTAINS(failed_msg, "bad-add");
}

/* Sums of 48 slow random chunks, all wanted, plus their tree. */
static int build_random_sums(tsr_graph *g, char **sums, int n, char *root, size_t cap)
{
  const int64_t len = 400000;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    char rkey[64];
    snprintf(rkey, sizeof rkey, "rand-%d", i);
    rc = add_uniform(g, rkey, len, i * len, n * len, 1234);
    const char *in = rkey;
    if (rc == 0) rc = add_plain(g, sums[i], "sum", &in, 1);
    if (rc == 0) rc = tsr_graph_want(g, sums[i]);
  }
  if (rc == 0) rc = add_tree(g, "rtree", sums, (size_t)n, 4, root, cap);
  return rc;
}

/* Runs the random-sums graph; kill_worker >= 0 SIGKILLs that worker once a
 * few results are in. Writes every wanted value to values (n + 1). */
static int run_random_sums(cluster *c, int kill_worker, double *values, int n)
{
  char **sums = calloc((size_t)n, sizeof *sums);
  for (int i = 0; i < n; i++) {
    sums[i] = malloc(64);
    snprintf(sums[i], 64, "rsum-%d", i);
  }
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char root[64];
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_random_sums(g, sums, n, root, sizeof root);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0 && kill_worker >= 0) {
    size_t done = 0, total = 0;
    for (int i = 0; i < 3000 && done < 6; i++) {
      tsr_future_progress(f, &done, &total);
      sleep_ms(2);
    }
    cluster_signal_worker(c, kill_worker, SIGKILL);
  }
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  for (int i = 0; i < n && rc == 0; i++) rc = gather_f64(client, sums[i], &values[i]);
  if (rc == 0) rc = gather_f64(client, root, &values[n]);
  if (rc != 0) fprintf(stderr, "  error %s: %s / %s\n", tsr_err_name(rc), tsr_errmsg(), f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  for (int i = 0; i < n; i++) free(sums[i]);
  free(sums);
  return rc;
}

TEST(worker_sigkilled_mid_graph_gives_identical_result)
{
  enum { N = 48 };
  double calm[N + 1], killed[N + 1];
  cluster c;
  ASSERT_OK(cluster_start(&c, 3, 1, fast_sched, fast_worker));
  int rc = run_random_sums(&c, -1, calm, N);
  int rc2 = rc == 0 ? run_random_sums(&c, 0, killed, N) : rc;
  bool scheduler_alive = cluster_alive(c.scheduler);
  cluster_stop(&c, rc != 0 || rc2 != 0);
  ASSERT_OK(rc);
  ASSERT_OK(rc2);
  ASSERT_TRUE(scheduler_alive);
  ASSERT_EQ(memcmp(calm, killed, sizeof calm), 0);
  /* Sanity: a sum of 400,000 uniforms is near 200,000. */
  ASSERT_NEAR(calm[0], 200000.0, 0.01);
}

TEST(task_that_kills_three_workers_is_erred)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 4, 1, fast_sched, fast_worker));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_plain(g, "poison", "crash", NULL, 0);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  int waited = rc == 0 ? tsr_future_wait(f, 60000) : rc;
  char message[512] = "";
  if (f != NULL && tsr_future_error(f) != NULL) snprintf(message, sizeof message, "%s", tsr_future_error(f));
  tsr_future_release(&f);
  /* The survivor still serves. */
  double value = 0;
  int after = tsr_graph_new(&g);
  if (after == 0) after = add_full(g, "alive", 3, 2.0);
  const char *in = "alive";
  if (after == 0) after = add_plain(g, "alive-sum", "sum", &in, 1);
  if (after == 0) after = tsr_submit(client, &g, &f);
  if (after == 0) after = tsr_future_wait(f, 30000);
  if (after == 0) after = gather_f64(client, "alive-sum", &value);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  int alive = 0;
  for (int i = 0; i < c.n_workers; i++) alive += cluster_alive(c.workers[i]);
  cluster_stop(&c, waited != TSR_ETASK || after != 0);
  ASSERT_OK(rc);
  ASSERT_EQ(waited, TSR_ETASK);
  ASSERT_CONTAINS(message, "poison");
  ASSERT_CONTAINS(message, "3 workers");
  ASSERT_EQ(alive, 1);
  ASSERT_OK(after);
  ASSERT_NEAR(value, 6.0, 0);
}

TEST(silent_worker_is_declared_dead_and_its_work_redone)
{
  const char *sched_args[] = {"--heartbeat-timeout", "1500ms", "--heartbeat-interval", "200ms", NULL};
  const char *worker_args[] = {"--heartbeat-interval", "200ms", "--heartbeat-timeout", "1500ms", NULL};
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 1, sched_args, worker_args));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  char key[32];
  for (int i = 0; i < 8 && rc == 0; i++) {
    snprintf(key, sizeof key, "nap-%d", i);
    rc = add_sleep(g, key, 300, NULL, 0);
    if (rc == 0) rc = tsr_graph_want(g, key);
  }
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  sleep_ms(100);
  cluster_signal_worker(&c, 0, SIGSTOP);   /* silent, not dead: only heartbeats tell */
  if (rc == 0) rc = tsr_future_wait(f, 60000);
  tsr_chunk *chunk = NULL;
  if (rc == 0) rc = tsr_gather(client, "nap-0", 30000, &chunk);
  int64_t slept = chunk && chunk->nbytes == 8 ? *(int64_t *)chunk->data : -1;
  tsr_chunk_destroy(&chunk);
  tsr_future_release(&f);
  /* Woken up, the worker is told it is unknown and says hello again. */
  cluster_signal_worker(&c, 0, SIGCONT);
  int back = rc == 0 ? tsr_wait_for_workers(client, 2, 20000) : rc;
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0 || back != 0);
  ASSERT_OK(rc);
  ASSERT_EQ(slept, 300);
  ASSERT_OK(back);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(graph_of_10000_tasks_gives_the_right_answer);
  RUN(gather_into_fills_the_callers_buffer_and_refuses_a_short_one);
  RUN(next_done_returns_each_key_once_as_it_finishes);
  RUN(worker_sigkilled_mid_graph_gives_identical_result);
  RUN(task_that_kills_three_workers_is_erred);
  RUN(silent_worker_is_declared_dead_and_its_work_redone);
  return kit_summary();
}
