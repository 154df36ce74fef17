/* The command-line surface: --help/--version everywhere, bad flags exit 2,
 * `tessera local` runs a program and returns its exit code, `tessera
 * status` lists the workers, the example verifies its sum, and tsr-svd
 * reports what each worker's memory tiers did. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "kit.h"

static char out[1 << 16];

TEST(every_binary_has_help_and_version)
{
  const char *bins[] = {"tessera", "tessera-scheduler", "tessera-worker", "tsr-sum-random"};
  for (size_t i = 0; i < sizeof bins / sizeof bins[0]; i++) {
    const char *help[] = {cluster_bin(bins[i]), "--help", NULL};
    ASSERT_EQ(run_capture(help, NULL, out, sizeof out, 10), 0);
    ASSERT_CONTAINS(out, "--");
    const char *version[] = {cluster_bin(bins[i]), "--version", NULL};
    ASSERT_EQ(run_capture(version, NULL, out, sizeof out, 10), 0);
    ASSERT_CONTAINS(out, "0.1.0");
  }
}

TEST(bad_flags_exit_2)
{
  const char *bins[] = {"tessera-scheduler", "tessera-worker"};
  for (size_t i = 0; i < sizeof bins / sizeof bins[0]; i++) {
    const char *argv[] = {cluster_bin(bins[i]), "--no-such-flag", NULL};
    ASSERT_EQ(run_capture(argv, NULL, out, sizeof out, 10), 2);
  }
  const char *bad_size[] = {cluster_bin("tessera-worker"), "--scheduler", "tcp://127.0.0.1:1", "--memory-limit",
                            "lots", NULL};
  ASSERT_EQ(run_capture(bad_size, NULL, out, sizeof out, 10), 2);
}

TEST(local_runs_the_example_and_returns_its_code)
{
  const char *ok[] = {cluster_bin("tessera"), "local", "--cpu-workers", "2", "--threads-per-worker", "1", "--",
                      cluster_bin("tsr-sum-random"), "--n", "1000000", "--chunk", "65536", "--seed", "7",
                      "--verify", NULL};
  ASSERT_EQ(run_capture(ok, NULL, out, sizeof out, 120), 0);
  ASSERT_CONTAINS(out, "sum = ");
  const char *seven[] = {cluster_bin("tessera"), "local", "--cpu-workers", "1", "--", "/bin/sh", "-c",
                         "test -n \"$TESSERA_SCHEDULER\" && exit 7", NULL};
  ASSERT_EQ(run_capture(seven, NULL, out, sizeof out, 60), 7);
}

TEST(status_lists_workers)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 3, NULL, NULL));
  const char *argv[] = {cluster_bin("tessera"), "status", "--scheduler", c.address, NULL};
  int rc = run_capture(argv, NULL, out, sizeof out, 30);
  cluster_stop(&c, rc != 0);
  ASSERT_EQ(rc, 0);
  ASSERT_CONTAINS(out, "test-worker-0");
  ASSERT_CONTAINS(out, "test-worker-1");
  const char *none[] = {cluster_bin("tessera"), "status", "--scheduler", "tcp://127.0.0.1:1", "--timeout", "1s",
                        NULL};
  ASSERT_NE(run_capture(none, NULL, out, sizeof out, 30), 0);
}

/* The value of "name=" in the "memory:" line of text, or -1. */
static long long memory_field(const char *text, const char *name)
{
  const char *line = strstr(text, "memory: ");
  if (line == NULL) return -1;
  const char *end = strchr(line, '\n');
  char pat[64];
  snprintf(pat, sizeof pat, " %s=", name);
  const char *at = strstr(line, pat);
  if (at == NULL || (end != NULL && at > end)) return -1;
  return atoll(at + strlen(pat));
}

TEST(svd_memory_report_shows_drops_under_a_limit)
{
  /* An 8 MB persisted X on a 2 MB worker: its random chunks are dropped
   * and made again, and the client's report says so. */
  const char *argv[] = {cluster_bin("tessera"), "local", "--cpu-workers", "1", "--memory-limit", "2000000", "--",
                        cluster_bin("tsr-svd"), "--rows", "8000", "--cols", "1000", "--chunks", "500,1000",
                        "--dtype", "u8", "--dist", "randint:0:3", "--k", "5", "--power-iters", "1", "--persist",
                        "--memory-report", NULL};
  ASSERT_EQ(run_capture(argv, NULL, out, sizeof out, 300), 0);
  ASSERT_CONTAINS(out, "memory: local-worker-0 cpu spilled=");
  ASSERT_TRUE(memory_field(out, "dropped") > 0);
  ASSERT_TRUE(memory_field(out, "recomputed_tasks") > 0);
  ASSERT_TRUE(memory_field(out, "recomputed_bytes") > 0);
  ASSERT_EQ(memory_field(out, "device_moved"), 0);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(every_binary_has_help_and_version);
  RUN(bad_flags_exit_2);
  RUN(local_runs_the_example_and_returns_its_code);
  RUN(status_lists_workers);
  RUN(svd_memory_report_shows_drops_under_a_limit);
  return kit_summary();
}
