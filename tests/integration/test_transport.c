/* integration.transport — a cluster whose workers speak different data
 * planes (docs/transport.md): one --transport ucx (UCX only), one zmq,
 * one auto (both). Elementwise adds of 2 MiB chunks make them fetch from
 * each other across transports, and the client gathers from all three.
 * Then a UCX worker SIGKILLed while 64 MiB chunks move between workers:
 * the result is recomputed, identical, without a hang. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/tessera.h"

enum { LEAVES = 24, N = 1 << 18 };

/* True when the worker's log holds text. */
static bool log_has(const cluster *c, int worker, const char *text)
{
  char path[600], line[4096];
  snprintf(path, sizeof path, "%s/worker-%d.log", c->dir, worker);
  FILE *f = fopen(path, "r");
  bool found = false;
  while (f != NULL && !found && fgets(line, sizeof line, f) != NULL) found = strstr(line, text) != NULL;
  if (f != NULL) fclose(f);
  return found;
}

/* leaf-i = full(N, i + 1); a tree of 3-way adds; its total = N * 300. */
static int run_adds(cluster *c, double *total, double *leaves)
{
  char *keys[LEAVES], root[64], sum_key[] = "root-sum";
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  for (int i = 0; i < LEAVES; i++) {
    keys[i] = malloc(32);
    snprintf(keys[i], 32, "leaf-%d", i);
    if (rc == 0) rc = add_full(g, keys[i], N, i + 1.0);
    if (rc == 0) rc = tsr_graph_want(g, keys[i]);
  }
  if (rc == 0) rc = add_tree(g, "adds", keys, LEAVES, 3, root, sizeof root);
  const char *in = root;
  if (rc == 0) rc = add_plain(g, sum_key, "sum", &in, 1);
  if (rc == 0) rc = tsr_graph_want(g, sum_key);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 60000);
  if (rc == 0) rc = gather_f64(client, sum_key, total);
  for (int i = 0; i < LEAVES && rc == 0; i++) {
    tsr_chunk *chunk = NULL;
    rc = tsr_gather(client, keys[i], 30000, &chunk);
    if (rc == 0) leaves[i] = chunk->nbytes == N * 8.0 ? ((double *)chunk->data)[N - 1] : -1;
    tsr_chunk_destroy(&chunk);
  }
  if (rc != 0) fprintf(stderr, "  error %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  for (int i = 0; i < LEAVES; i++) free(keys[i]);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  return rc;
}

TEST(mixed_transports_fetch_from_each_other)
{
  const char *ucx[] = {"--transport", "ucx", NULL}, *zmq[] = {"--transport", "zmq", NULL},
             *both[] = {"--transport", "auto", NULL};
  cluster c;
  memset(&c, 0, sizeof c);
  int rc = cluster_start_scheduler(&c, NULL);
  if (rc == 0 && (cluster_add_worker(&c, 2, ucx) < 0 || cluster_add_worker(&c, 2, zmq) < 0 ||
                  cluster_add_worker(&c, 2, both) < 0))
    rc = -1;
  tsr_client *client = NULL;
  if (rc == 0) rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, 3, 30000);
  tsr_client_close(client);
  double total = 0, leaves[LEAVES] = {0};
  if (rc == 0) rc = run_adds(&c, &total, leaves);
  bool served_ucx = log_has(&c, 0, "serving chunks on ucx://127.0.0.1:");
  bool served_zmq = log_has(&c, 1, "serving chunks on tcp://127.0.0.1:");
  bool served_both = log_has(&c, 2, "serving chunks on ucx://127.0.0.1:") && log_has(&c, 2, ",tcp://127.0.0.1:");
  /* the zmq worker reads what the UCX-only worker holds over UCX */
  bool crossed = log_has(&c, 1, "from ucx://") || log_has(&c, 2, "from ucx://");
  cluster_stop(&c, rc != 0 || !crossed);
  ASSERT_OK(rc);
  ASSERT_TRUE(served_ucx);
  ASSERT_TRUE(served_zmq);
  ASSERT_TRUE(served_both);
  ASSERT_TRUE(crossed);
  ASSERT_NEAR(total, 300.0 * N, 0);
  for (int i = 0; i < LEAVES; i++) ASSERT_NEAR(leaves[i], i + 1.0, 0);
}

enum { BIG_LEAVES = 6, BIG_N = 8 << 20 };   /* 64 MiB of f64 each */

/* Index of the first worker whose log has a line containing text; the
 * word after text on that line goes to out. -1 when none. */
static int log_find(const cluster *c, const char *text, char *out, size_t cap)
{
  for (int w = 0; w < c->n_workers; w++) {
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/worker-%d.log", c->dir, w);
    FILE *f = fopen(path, "r");
    const char *hit = NULL;
    while (f != NULL && hit == NULL && fgets(line, sizeof line, f) != NULL) hit = strstr(line, text);
    if (f != NULL) fclose(f);
    if (hit != NULL) {
      snprintf(out, cap, "%s", hit + strlen(text));
      out[strcspn(out, " \n")] = '\0';
      return w;
    }
  }
  return -1;
}

/* Waits (<= 30 s) until a worker logs that it fetched one of prefix's
 * leaves ("fetched input 'P-leaf-N' (B bytes) from ADDRESS in ..."), then
 * SIGKILLs the peer it fetched from: that peer holds leaves still to be
 * fetched. Returns the victim's index, or -1. */
static int kill_holder_mid_fetch(cluster *c, const char *prefix)
{
  char text[128], rest[600] = "", address[600], serving[700], unused[600];
  snprintf(text, sizeof text, "fetched input '%s-leaf-", prefix);
  for (int i = 0; i < 30000 && log_find(c, text, rest, sizeof rest) < 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  /* the address follows " from " on that line */
  snprintf(serving, sizeof serving, "%s) from ", "bytes");
  if (log_find(c, serving, address, sizeof address) < 0 || address[0] == '\0') return -1;
  snprintf(serving, sizeof serving, "serving chunks on %s", address);
  int victim = log_find(c, serving, unused, sizeof unused);
  if (victim >= 0) cluster_signal_worker(c, victim, SIGKILL);
  return victim;
}

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* total = sum(add(uniform leaves)); with kill, SIGKILLs a worker whose
 * leaves are being fetched (*victim_p, -1 if none was found). Sets *ms_p
 * to the run's time. */
static int run_big(cluster *c, const char *prefix, bool kill, int *victim_p, double *total, uint64_t *ms_p)
{
  uint64_t start = now_ms();
  char keys[BIG_LEAVES][64], all[64], sum_key[64];
  const char *in[BIG_LEAVES];
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  for (int i = 0; i < BIG_LEAVES && rc == 0; i++) {
    snprintf(keys[i], sizeof keys[i], "%s-leaf-%d", prefix, i);
    in[i] = keys[i];
    rc = add_uniform(g, keys[i], BIG_N, (int64_t)i * BIG_N, (int64_t)BIG_LEAVES * BIG_N, 7);
  }
  snprintf(all, sizeof all, "%s-all", prefix);
  snprintf(sum_key, sizeof sum_key, "%s-total", prefix);
  if (rc == 0) rc = add_plain(g, all, "add", in, BIG_LEAVES);
  const char *all_in = all;
  if (rc == 0) rc = add_plain(g, sum_key, "sum", &all_in, 1);
  if (rc == 0) rc = tsr_graph_want(g, sum_key);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0 && kill) *victim_p = kill_holder_mid_fetch(c, prefix);
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc == 0) rc = gather_f64(client, sum_key, total);
  if (rc != 0) fprintf(stderr, "  error %s: %s / %s\n", tsr_err_name(rc), tsr_errmsg(), f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  *ms_p = now_ms() - start;
  return rc;
}

TEST(ucx_worker_killed_while_its_chunks_move_is_recovered_from)
{
  const char *sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};
  const char *ucx[] = {"--transport", "ucx", "--heartbeat-interval", "250ms", NULL};
  cluster c;
  ASSERT_OK(cluster_start(&c, 3, 1, sched, ucx));
  double calm = 0, killed = -1;
  uint64_t calm_ms = 0, killed_ms = 0;
  int victim = -1;
  int rc = run_big(&c, "calm", false, &victim, &calm, &calm_ms);
  /* warming (docs/transport.md): each worker mapped its first receive
   * buffers at start, and some fetch found its UCX peer connected ahead */
  bool warmed_at_start = true, connected_ahead = false;
  for (int w = 0; w < 3; w++) {
    warmed_at_start &= log_has(&c, w, "receive pool: 3 of 3 buffers of 64.00 MiB warmed at start");
    connected_ahead |= log_has(&c, w, "fetch: connected ahead to ucx://");
  }
  int rc2 = rc == 0 ? run_big(&c, "killed", true, &victim, &killed, &killed_ms) : rc;
  fprintf(stderr, "  calm run %llu ms; killed worker %d mid-fetch, that run took %llu ms\n",
          (unsigned long long)calm_ms, victim, (unsigned long long)killed_ms);
  bool scheduler_alive = cluster_alive(c.scheduler);
  cluster_stop(&c, rc != 0 || rc2 != 0 || calm != killed);
  ASSERT_OK(rc);
  ASSERT_OK(rc2);
  ASSERT_TRUE(scheduler_alive);
  ASSERT_TRUE(victim >= 0);
  ASSERT_TRUE(warmed_at_start);
  ASSERT_TRUE(connected_ahead);
  ASSERT_TRUE(calm == killed);   /* recomputed leaves are the same bytes */
  ASSERT_NEAR(calm / ((double)BIG_LEAVES * BIG_N), 0.5, 0.01);
  ASSERT_TRUE(killed_ms < 60000);
}

int main(void)
{
  RUN(mixed_transports_fetch_from_each_other);
  RUN(ucx_worker_killed_while_its_chunks_move_is_recovered_from);
  return kit_summary();
}
