/* Scheduler restart (docs/journal.md) with real daemons: the scheduler is
 * SIGKILLed in the middle of an SVD (tsr-svd, a real client process) and
 * started again on the same port —
 *
 * - with its journal: the client's future completes and u, s, v are byte
 *   for byte those of an undisturbed run; the workers' results were
 *   adopted, the client resumed;
 * - without a journal: the client fails with "scheduler restarted without
 *   a journal; graph lost", well within its bound;
 * - not at all: the client fails after its heartbeat timeout plus its
 *   reconnect window, never hangs;
 * - with its journal while a tsr_submit is in flight (the scheduler is
 *   stopped, then killed, so the graph never reached it): the resumed
 *   session sends the graph again and tsr_submit returns a future that
 *   completes with the right value. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

static const char *fast_worker[] = {"--heartbeat-interval", "250ms", "--heartbeat-timeout", "2s", NULL};

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* tsr-svd in the background, saving PREFIX_{u,s,v}.npy; output to PREFIX.log. */
static pid_t start_svd(const cluster *c, const char *prefix, const char *env)
{
  char log_path[600];
  snprintf(log_path, sizeof log_path, "%s.log", prefix);
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
  setenv("TESSERA_SCHEDULER", c->address, 1);
  setenv("TESSERA_HEARTBEAT_TIMEOUT", "2s", 1);
  if (env != NULL) putenv((char *)env);
  const char *argv[] = {cluster_bin("tsr-svd"), "--rows", "40000", "--cols", "2000", "--chunks", "4000,1000",
                        "--k", "5", "--power-iters", "2", "--save", prefix, NULL};
  execv(argv[0], (char *const *)argv);
  _exit(127);
}

/* Exit status of pid within timeout_s (it is killed then: -1). */
static int wait_exit(pid_t pid, int timeout_s)
{
  for (int i = 0; i < timeout_s * 100; i++) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    sleep_ms(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static bool same_file(const char *a, const char *b)
{
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
  return system(cmd) == 0;
}

static bool file_has(const char *path, const char *text)
{
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "grep -qF -- '%s' '%s'", text, path);
  return system(cmd) == 0;
}

static void show(const char *path)
{
  char cmd[700];
  snprintf(cmd, sizeof cmd, "cat '%s' >&2", path);
  if (system(cmd) != 0) fprintf(stderr, "(no %s)\n", path);
}

/* The three factors of two runs, byte for byte. */
static int same_svd(const char *dir, const char *a, const char *b)
{
  int same = 0;
  const char *parts[] = {"u", "s", "v"};
  for (int i = 0; i < 3; i++) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s_%s.npy", dir, a, parts[i]);
    snprintf(pb, sizeof pb, "%s/%s_%s.npy", dir, b, parts[i]);
    same += same_file(pa, pb);
  }
  return same;
}

/* Lines of path holding text. */
static int count_lines(const char *path, const char *text)
{
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL) n += strstr(line, text) != NULL;
  fclose(f);
  return n;
}

/* Waits (at most 30 s) until the scheduler's log shows a graph submitted
 * after `before` were, then a little more: the moment is mid-graph (a
 * submit in flight is submit_in_flight_is_sent_again's matter); on a
 * loaded machine the SVD client may take longer than a fixed sleep to
 * send its first graph. */
static void await_submitted(const char *slog, int before, int then_ms)
{
  for (int i = 0; i < 3000 && count_lines(slog, "submitted graph") <= before; i++) sleep_ms(10);
  sleep_ms(then_ms);
}

TEST(sigkill_mid_graph_with_journal_gives_identical_results)
{
  cluster c;
  char jdir[300], prefix[400], log[400], slog[400];
  const char *sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", "--journal", NULL, NULL};
  snprintf(jdir, sizeof jdir, "/tmp/tsr-journal-%d", (int)getpid());
  sched[5] = jdir;
  int rc = cluster_start(&c, 3, 1, sched, fast_worker);
  snprintf(slog, sizeof slog, "%s/scheduler.log", c.dir);
  snprintf(prefix, sizeof prefix, "%s/base", c.dir);
  int base_rc = rc == 0 ? wait_exit(start_svd(&c, prefix, NULL), 120) : -2;
  /* Twice: the second restart replays a journal the first one wrote to. */
  int run_rc[2] = {-2, -2};
  for (int k = 0; k < 2 && base_rc == 0; k++) {
    snprintf(prefix, sizeof prefix, "%s/run%d", c.dir, k);
    int before = count_lines(slog, "submitted graph");
    pid_t client = start_svd(&c, prefix, NULL);
    await_submitted(slog, before, 150 + 200 * k);
    cluster_kill_scheduler(&c);
    sleep_ms(200);
    if (cluster_restart_scheduler(&c, sched) != 0) break;
    run_rc[k] = wait_exit(client, 120);
  }
  bool resumed = file_has(slog, "reconnected and resumed its graphs");
  bool adopted = file_has(slog, "adopted");
  int same0 = same_svd(c.dir, "base", "run0"), same1 = same_svd(c.dir, "base", "run1");
  bool ok = base_rc == 0 && run_rc[0] == 0 && run_rc[1] == 0 && same0 == 3 && same1 == 3 && resumed;
  for (int k = 0; !ok && k < 2; k++) {
    snprintf(log, sizeof log, "%s/run%d.log", c.dir, k);
    show(log);
  }
  cluster_stop(&c, !ok);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", jdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", jdir);
  ASSERT_EQ(base_rc, 0);
  ASSERT_EQ(run_rc[0], 0);
  ASSERT_EQ(run_rc[1], 0);
  ASSERT_EQ(same0, 3);
  ASSERT_EQ(same1, 3);
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(adopted);
}

/* The opening of the tests without a journal: a cluster of 2 workers
 * (scheduler flags sched), tsr-svd started with output prefix DIR/name
 * (env: an extra VAR=value or NULL), and once its graph is submitted the
 * scheduler SIGKILLed. Returns the client's pid (-1 when the cluster did
 * not start); *rc_p gets cluster_start's code, log the client's log path. */
static pid_t svd_then_kill_scheduler(cluster *c, const char *const *sched, const char *name, const char *env,
                                     char *log, size_t cap, int *rc_p)
{
  char prefix[400], slog[420];
  *rc_p = cluster_start(c, 2, 1, sched, fast_worker);
  snprintf(prefix, sizeof prefix, "%s/%s", c->dir, name);
  snprintf(log, cap, "%s.log", prefix);
  snprintf(slog, sizeof slog, "%s/scheduler.log", c->dir);
  pid_t client = *rc_p == 0 ? start_svd(c, prefix, env) : -1;
  await_submitted(slog, 0, 150);
  cluster_kill_scheduler(c);
  return client;
}

TEST(restart_without_journal_fails_the_future_clearly)
{
  cluster c;
  const char *sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};
  char log[420];
  int rc;
  pid_t client = svd_then_kill_scheduler(&c, sched, "lost", NULL, log, sizeof log, &rc);
  sleep_ms(200);
  double t0 = now_s();
  if (rc == 0) rc = cluster_restart_scheduler(&c, sched);
  int client_rc = client > 0 ? wait_exit(client, 60) : -2;
  double took = now_s() - t0;
  bool clear = file_has(log, "scheduler restarted without a journal; graph lost");
  if (!clear || client_rc <= 0) show(log);
  cluster_stop(&c, !clear || client_rc <= 0);
  ASSERT_OK(rc);
  ASSERT_TRUE(client_rc > 0);
  ASSERT_TRUE(clear);
  ASSERT_TRUE(took < 20.0);  /* the heartbeat timeout (2 s) and a hello, not the reconnect window */
}

TEST(scheduler_gone_for_good_fails_after_the_documented_bound)
{
  cluster c;
  const char *sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", NULL};
  char log[420];
  int rc;
  pid_t client = svd_then_kill_scheduler(&c, sched, "gone", "TESSERA_RECONNECT_TIMEOUT=3s", log, sizeof log, &rc);
  double t0 = now_s();
  int client_rc = client > 0 ? wait_exit(client, 60) : -2;
  double took = now_s() - t0;
  bool clear = file_has(log, "reconnect window of 3000 ms");
  if (!clear || client_rc <= 0) show(log);
  cluster_stop(&c, !clear || client_rc <= 0);
  ASSERT_OK(rc);
  ASSERT_TRUE(client_rc > 0);
  ASSERT_TRUE(clear);
  /* bound: heartbeat timeout 2 s + reconnect window 3 s, with slack */
  ASSERT_TRUE(took >= 4.0);
  ASSERT_TRUE(took < 12.0);
}

/* full(4, value) -> sum, wanted: the value 4 * value. */
static int sum_graph(tsr_graph **g_p, const char *name, double value)
{
  char full[64], sum[64];
  snprintf(full, sizeof full, "%s-full", name);
  snprintf(sum, sizeof sum, "%s-sum", name);
  const char *in = full;
  int rc = tsr_graph_new(g_p);
  if (rc == 0) rc = add_full(*g_p, full, 4, value);
  if (rc == 0) rc = add_plain(*g_p, sum, "sum", &in, 1);
  return rc;
}

typedef struct inflight {
  tsr_client *client;
  int rc;
  double value;
  double submit_s;   /* how long tsr_submit took */
} inflight;

static void *submit_b(void *arg)
{
  inflight *in = arg;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  double t0 = now_s();
  in->rc = sum_graph(&g, "b", 3.0);
  if (in->rc == 0) in->rc = tsr_submit(in->client, &g, &f);
  in->submit_s = now_s() - t0;
  if (in->rc == 0) in->rc = tsr_future_wait(f, 60000);
  if (in->rc == 0) in->rc = gather_f64(in->client, "b-sum", &in->value);
  if (in->rc != 0) fprintf(stderr, "  graph b: %s: %s\n", tsr_err_name(in->rc), tsr_errmsg());
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  return NULL;
}

TEST(submit_in_flight_is_sent_again_after_a_journaled_restart)
{
  cluster c;
  char jdir[300];
  const char *sched[] = {"--heartbeat-timeout", "2s", "--heartbeat-interval", "250ms", "--journal", NULL, NULL};
  snprintf(jdir, sizeof jdir, "/tmp/tsr-journal-inflight-%d", (int)getpid());
  sched[5] = jdir;
  setenv("TESSERA_HEARTBEAT_TIMEOUT", "2s", 1);
  int rc = cluster_start(&c, 2, 1, sched, fast_worker);
  inflight b = {.rc = -2};
  tsr_graph *g = NULL;
  tsr_future *fa = NULL;
  double a = 0;
  /* graph a, kept: the journal knows this client, so its session resumes */
  if (rc == 0) rc = tsr_client_open(&b.client, c.address, NULL);
  if (rc == 0) rc = sum_graph(&g, "a", 1.0);
  if (rc == 0) rc = tsr_submit(b.client, &g, &fa);
  if (rc == 0) rc = tsr_future_wait(fa, 30000);
  if (rc == 0) rc = gather_f64(b.client, "a-sum", &a);
  pthread_t th;
  bool started = false;
  if (rc == 0) {
    kill(c.scheduler, SIGSTOP);   /* graph b's parts wait in the socket, unread */
    started = pthread_create(&th, NULL, submit_b, &b) == 0;
    sleep_ms(500);
    cluster_kill_scheduler(&c);
    sleep_ms(200);
    rc = cluster_restart_scheduler(&c, sched);
  }
  if (started) pthread_join(th, NULL);
  char slog[400];
  snprintf(slog, sizeof slog, "%s/scheduler.log", c.dir);
  bool resumed = file_has(slog, "reconnected and resumed its graphs");
  /* graph b reached only the restarted scheduler, once: it was sent again */
  int admitted_b = count_lines(slog, "submitted graph 2:");
  bool ok = rc == 0 && b.rc == 0 && b.value == 12.0 && resumed && admitted_b == 1 && b.submit_s >= 0.7;
  tsr_future_release(&fa);
  tsr_graph_destroy(&g);
  tsr_client_close(b.client);
  cluster_stop(&c, !ok);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", jdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", jdir);
  unsetenv("TESSERA_HEARTBEAT_TIMEOUT");
  ASSERT_OK(rc);
  ASSERT_TRUE(a == 4.0);
  ASSERT_TRUE(started);
  ASSERT_OK(b.rc);
  ASSERT_TRUE(b.value == 12.0);
  ASSERT_TRUE(resumed);
  /* it waited across the restart: at least the client's heartbeat timeout */
  ASSERT_EQ(admitted_b, 1);
  /* it waited across the stop (0.5 s) and the restart (0.2 s) */
  ASSERT_TRUE(b.submit_s >= 0.7);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(sigkill_mid_graph_with_journal_gives_identical_results);
  RUN(restart_without_journal_fails_the_future_clearly);
  RUN(scheduler_gone_for_good_fails_after_the_documented_bound);
  RUN(submit_in_flight_is_sent_again_after_a_journaled_restart);
  return kit_summary();
}
