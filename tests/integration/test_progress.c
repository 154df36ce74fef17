/* Integration tests of progress reports (docs/progress.md) with real
 * daemons: a future's callbacks are monotone, come from one thread that is
 * not the caller's (the client's I/O thread), end with exactly one final
 * call with done == total, and agree with polling; per-group counts name
 * the ops, a fused chain counting as its parts; no call arrives after
 * tsr_future_release returns, even with one in flight; the client-wide
 * callback sees every graph once final. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

#define MAX_CALLS 4096

/* What the callbacks saw. Written on the I/O thread, read by the test after
 * the calls stopped (or under the atomics for the counters). */
typedef struct recorder {
  atomic_int calls, finals, in_call, bad_thread;
  pthread_t thread;
  atomic_int have_thread;
  int delay_ms;                   /* how long each call takes */
  tsr_progress seen[MAX_CALLS];   /* groups not kept */
  uint64_t group_total[8], group_done[8], group_busy[8];
  char group_op[8][32];
  int ngroups;
} recorder;

static void record(void *user, const tsr_progress *p)
{
  recorder *r = user;
  atomic_store(&r->in_call, 1);
  if (!atomic_exchange(&r->have_thread, 1)) r->thread = pthread_self();
  else if (!pthread_equal(r->thread, pthread_self())) atomic_fetch_add(&r->bad_thread, 1);
  int i = atomic_load(&r->calls);
  if (i < MAX_CALLS) r->seen[i] = *p;
  if (p->final) {
    atomic_fetch_add(&r->finals, 1);
    r->ngroups = (int)(p->ngroups < 8 ? p->ngroups : 8);
    for (int g = 0; g < r->ngroups; g++) {
      snprintf(r->group_op[g], sizeof r->group_op[g], "%s", p->groups[g].op);
      r->group_total[g] = p->groups[g].tasks_total;
      r->group_done[g] = p->groups[g].tasks_done;
      r->group_busy[g] = p->groups[g].busy_us;
    }
  }
  if (r->delay_ms > 0) sleep_ms(r->delay_ms);
  atomic_fetch_add(&r->calls, 1);
  atomic_store(&r->in_call, 0);
}

/* n sleep tasks of ms each, summed by one `add`: n + 1 tasks. */
static int build_sleeps(tsr_graph *g, const char *prefix, int n, int ms)
{
  char **keys = calloc((size_t)n, sizeof *keys);
  int rc = keys ? 0 : TSR_ENOMEM;
  for (int i = 0; i < n && rc == 0; i++) {
    keys[i] = malloc(64);
    snprintf(keys[i], 64, "%s-sleep-%d", prefix, i);
    rc = add_sleep(g, keys[i], ms, NULL, 0);
  }
  char sum[64];
  snprintf(sum, sizeof sum, "%s-sum", prefix);
  if (rc == 0) rc = add_plain(g, sum, "add", (const char *const *)keys, (size_t)n);
  if (rc == 0) rc = tsr_graph_want(g, sum);
  for (int i = 0; i < n; i++) free(keys ? keys[i] : NULL);
  free(keys);
  return rc;
}

/* Waits up to ms for the recorder's final call. */
static void await_final(recorder *r, int ms)
{
  for (int t = 0; t < ms && atomic_load(&r->finals) == 0; t += 10) sleep_ms(10);
}

static int group_index(const recorder *r, const char *op)
{
  for (int g = 0; g < r->ngroups; g++)
    if (strcmp(r->group_op[g], op) == 0) return g;
  return -1;
}

TEST(callbacks_are_monotone_final_once_on_the_io_thread)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 2, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  recorder *r = calloc(1, sizeof *r);
  bool ok = r && tsr_client_open(&client, c.address, NULL) == 0 && tsr_graph_new(&g) == 0 &&
            build_sleeps(g, "m", 40, 25) == 0 && tsr_submit(client, &g, &f) == 0 &&
            tsr_future_on_progress(f, record, r) == 0 && tsr_future_wait(f, 60000) == 0;
  if (ok) await_final(r, 3000);
  tsr_progress polled = {0};
  if (ok) ok = tsr_future_progress_get(f, &polled) == 0;
  int calls = r ? atomic_load(&r->calls) : 0;
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, !ok || kit_current_failed);
  ASSERT_TRUE(ok);
  ASSERT_EQ(atomic_load(&r->finals), 1);
  ASSERT_TRUE(calls >= 2);   /* 40 x 25 ms on 4 threads: at least one report before the last */
  ASSERT_EQ(atomic_load(&r->bad_thread), 0);
  ASSERT_TRUE(!pthread_equal(r->thread, pthread_self()));
  for (int i = 0; i < calls && i < MAX_CALLS; i++) {
    const tsr_progress *p = &r->seen[i];
    ASSERT_EQ(p->tasks_total, 41);
    ASSERT_TRUE(p->tasks_done + p->tasks_erred + p->tasks_waiting + p->tasks_processing <= p->tasks_total);
    ASSERT_EQ(p->final, i == calls - 1);
    if (i > 0) {
      ASSERT_TRUE(p->tasks_done >= r->seen[i - 1].tasks_done);
      ASSERT_TRUE(p->bytes_done >= r->seen[i - 1].bytes_done);
      ASSERT_TRUE(p->busy_us >= r->seen[i - 1].busy_us);
    }
  }
  const tsr_progress *last = &r->seen[calls - 1];
  ASSERT_EQ(last->tasks_done, 41);
  ASSERT_EQ(last->tasks_erred, 0);
  ASSERT_EQ(last->bytes_done, 41 * 8);   /* 41 i64 scalars */
  ASSERT_EQ(polled.tasks_done, 41);
  ASSERT_EQ(polled.tasks_total, 41);
  ASSERT_TRUE(polled.final);
  int sl = group_index(r, "sleep"), ad = group_index(r, "add");
  ASSERT_TRUE(sl >= 0 && ad >= 0);
  ASSERT_EQ(r->group_total[sl], 40);
  ASSERT_EQ(r->group_done[sl], 40);
  ASSERT_EQ(r->group_total[ad], 1);
  /* busy time (docs/report.md): each sleep task ran its 25 ms on a worker; the
   * graph's is the sum of its groups' */
  ASSERT_TRUE(r->group_busy[sl] >= 40 * 25000);
  ASSERT_TRUE(r->group_busy[sl] < 40 * 25000 * 4);
  ASSERT_EQ(last->busy_us, r->group_busy[sl] + r->group_busy[ad]);
  ASSERT_EQ(polled.busy_us, last->busy_us);
  free(r);
}

/* full -> 8 x scale -> sum is fused into one task (default --fuse-width 1):
 * it counts as its 10 parts, in three groups. */
TEST(fused_chain_counts_as_its_parts_per_group)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 1, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  recorder *r = calloc(1, sizeof *r);
  bool ok = r && tsr_client_open(&client, c.address, NULL) == 0 && tsr_graph_new(&g) == 0;
  if (ok) ok = add_fused_chain(g) == 0;
  if (ok) ok = tsr_submit(client, &g, &f) == 0 && tsr_future_on_progress(f, record, r) == 0 &&
               tsr_future_wait(f, 30000) == 0;
  if (ok) await_final(r, 3000);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, !ok || kit_current_failed);
  ASSERT_TRUE(ok);
  ASSERT_EQ(atomic_load(&r->finals), 1);
  int full = group_index(r, "full"), scale = group_index(r, "scale"), sum = group_index(r, "sum");
  ASSERT_TRUE(full >= 0 && scale >= 0 && sum >= 0);
  ASSERT_EQ(r->group_total[full], 1);
  ASSERT_EQ(r->group_total[scale], 8);
  ASSERT_EQ(r->group_done[scale], 8);
  ASSERT_EQ(r->group_total[sum], 1);
  ASSERT_EQ(r->seen[atomic_load(&r->calls) - 1].tasks_done, 10);
  /* the fused task's time is shared by part count, 1 : 8 : 1 (whole microseconds) */
  uint64_t busy = r->seen[atomic_load(&r->calls) - 1].busy_us;
  uint64_t parts = r->group_busy[full] + r->group_busy[scale] + r->group_busy[sum];
  ASSERT_TRUE(busy > 0);
  ASSERT_TRUE(parts <= busy && parts + 3 >= busy);
  ASSERT_TRUE(r->group_busy[scale] + 8 >= 8 * r->group_busy[full] && r->group_busy[scale] <= 8 * r->group_busy[full] + 8);
  free(r);
}

TEST(no_call_after_release_even_with_one_in_flight)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 2, NULL, NULL));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  recorder *r = calloc(1, sizeof *r);
  if (r) r->delay_ms = 60;   /* long calls: the release below likely meets one in flight */
  bool ok = r && tsr_client_open(&client, c.address, NULL) == 0 && tsr_graph_new(&g) == 0 &&
            build_sleeps(g, "r", 80, 40) == 0 && tsr_submit(client, &g, &f) == 0 &&
            tsr_future_on_progress(f, record, r) == 0;
  for (int t = 0; ok && t < 5000 && atomic_load(&r->calls) + atomic_load(&r->in_call) < 2; t += 5) sleep_ms(5);
  tsr_future_release(&f);
  int in_call = r ? atomic_load(&r->in_call) : 1;
  int calls = r ? atomic_load(&r->calls) : 0;
  sleep_ms(800);   /* the graph keeps running on the workers: reports would keep coming */
  int later = r ? atomic_load(&r->calls) : 0;
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, !ok || kit_current_failed);
  ASSERT_TRUE(ok);
  ASSERT_TRUE(calls >= 1);
  ASSERT_EQ(in_call, 0);
  ASSERT_EQ(later, calls);
  ASSERT_EQ(atomic_load(&r->finals), 0);
  free(r);
}

TEST(client_callback_sees_every_graph_final_once)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 2, NULL, NULL));
  tsr_client *client = NULL;
  recorder *r = calloc(1, sizeof *r);
  bool ok = r && tsr_client_open(&client, c.address, NULL) == 0 && tsr_client_on_progress(client, record, r) == 0;
  for (int k = 0; ok && k < 3; k++) {
    tsr_graph *g = NULL;
    tsr_future *f = NULL;
    char prefix[8];
    snprintf(prefix, sizeof prefix, "c%d", k);
    ok = tsr_graph_new(&g) == 0 && build_sleeps(g, prefix, 6, 10) == 0 && tsr_submit(client, &g, &f) == 0 &&
         tsr_future_wait(f, 30000) == 0;
    for (int t = 0; ok && t < 3000 && atomic_load(&r->finals) < k + 1; t += 10) sleep_ms(10);
    tsr_future_release(&f);
    tsr_graph_destroy(&g);
  }
  if (ok) ok = tsr_client_on_progress(client, NULL, NULL) == 0;
  tsr_client_close(client);
  cluster_stop(&c, !ok || kit_current_failed);
  ASSERT_TRUE(ok);
  ASSERT_EQ(atomic_load(&r->finals), 3);
  ASSERT_EQ(atomic_load(&r->bad_thread), 0);
  int calls = atomic_load(&r->calls);
  for (int i = 0; i < calls && i < MAX_CALLS; i++)
    if (r->seen[i].final) ASSERT_EQ(r->seen[i].tasks_done, 7);
  free(r);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(callbacks_are_monotone_final_once_on_the_io_thread);
  RUN(fused_chain_counts_as_its_parts_per_group);
  RUN(no_call_after_release_even_with_one_in_flight);
  RUN(client_callback_sees_every_graph_final_once);
  return kit_summary();
}
