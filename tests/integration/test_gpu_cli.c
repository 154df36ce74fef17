/* The GPU surface of the command line, on any machine (label integration):
 * tessera-worker's --gpu, --device-memory-limit and --list-gpus, and
 * `tessera local --gpus`, fail clearly where no GPU can be used (this
 * build machine: nvcc but no driver) and start GPU workers where one can. */
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "kit.h"

static char out[1 << 16];

/* Runs a shell command line with stderr folded into out; its exit status. */
static int sh(const char *cmd)
{
  char line[4096];
  snprintf(line, sizeof line, "%s 2>&1", cmd);
  const char *argv[] = {"/bin/sh", "-c", line, NULL};
  return run_capture(argv, NULL, out, sizeof out, 120);
}

static bool gpus_here(void)
{
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s --list-gpus", cluster_bin("tessera-worker"));
  return sh(cmd) == 0;
}

/* One command line and what it must do: exit status, and a phrase of its
 * output (NULL: any). */
typedef struct cli_case {
  const char *args;
  int status;
  const char *says;
} cli_case;

/* Runs `bin args` for each case; a failed case marks the test failed and
 * the rest still run. */
static void run_cases(const char *bin, const cli_case *cases, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s", bin, cases[i].args);
    int status = sh(cmd);
    if (status != cases[i].status || (cases[i].says != NULL && strstr(out, cases[i].says) == NULL)) {
      fprintf(stderr, "  %s: exit %d (want %d), output: %s\n", cases[i].args, status, cases[i].status, out);
      kit_current_failed = 1;
    }
  }
}

#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

TEST(worker_gpu_flags)
{
  static const cli_case cases[] = {
      {"--scheduler tcp://127.0.0.1:1 --device-memory-limit 1GiB", 2, "--device-memory-limit needs --gpu N"},
      {"--scheduler tcp://127.0.0.1:1 --gpu first", 2, "GPU index"},
      {"--scheduler tcp://127.0.0.1:1 --gpu 0 --device-memory-limit lots", 2, NULL},
      /* the device tier's flags */
      {"--scheduler tcp://127.0.0.1:1 --device-memory-target 0.5", 2, "--device-memory-target needs --gpu N"},
      {"--scheduler tcp://127.0.0.1:1 --pinned-memory-limit 1GiB", 2, "--pinned-memory-limit needs --gpu N"},
      {"--scheduler tcp://127.0.0.1:1 --gpu 0 --device-memory-spill 2", 2, "fraction"},
      {"--scheduler tcp://127.0.0.1:1 --gpu 0 --pinned-memory-limit much", 2, NULL},
  };
  run_cases(cluster_bin("tessera-worker"), cases, NCASES(cases));
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s --help", cluster_bin("tessera-worker"));
  ASSERT_EQ(sh(cmd), 0);
  ASSERT_CONTAINS(out, "--gpu N");
  ASSERT_CONTAINS(out, "--list-gpus");
  ASSERT_CONTAINS(out, "--device-memory-target");
  ASSERT_CONTAINS(out, "--pinned-memory-limit");
}

TEST(no_gpu_is_a_clear_error)
{
  if (gpus_here()) return;
  ASSERT_TRUE(strstr(out, "no GPU") != NULL || strstr(out, "no CUDA") != NULL);
  char cmd[2048];
  /* exits at once: it never tries to reach the scheduler */
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --gpu 0", cluster_bin("tessera-worker"));
  ASSERT_EQ(sh(cmd), 1);
  ASSERT_CONTAINS(out, "--gpu 0");
  ASSERT_TRUE(strstr(out, "no GPU") != NULL || strstr(out, "no CUDA") != NULL);
  snprintf(cmd, sizeof cmd, "%s local --gpus all -- true", cluster_bin("tessera"));
  ASSERT_EQ(sh(cmd), 1);
  ASSERT_CONTAINS(out, "--gpus all: no GPU to use");
  snprintf(cmd, sizeof cmd, "%s local --gpus 0 -- true", cluster_bin("tessera"));
  ASSERT_EQ(sh(cmd), 1);
  ASSERT_CONTAINS(out, "local-gpu-0 exited with status 1 during startup");
}

TEST(local_gpu_flags)
{
  static const cli_case cases[] = {
      {"local --gpus 0,0 -- true", 2, "twice"},
      {"local --gpus 1,x -- true", 2, NULL},
      {"local --cpu-workers 0 -- true", 2, "no workers"},
      {"local --device-memory-limit 1GiB -- true", 2, "needs --gpus"},
      {"local --help", 0, "--gpus all|I,J"},
  };
  run_cases(cluster_bin("tessera"), cases, NCASES(cases));
}

TEST(local_starts_one_worker_per_gpu)
{
  if (!gpus_here()) return;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s local --gpus all --cpu-workers 1 -- %s status", cluster_bin("tessera"),
           cluster_bin("tessera"));
  ASSERT_EQ(sh(cmd), 0);
  ASSERT_CONTAINS(out, "local-gpu-0");
  ASSERT_CONTAINS(out, "local-worker-0");
  ASSERT_CONTAINS(out, "DEVICE MEMORY USED / LIMIT");
  ASSERT_CONTAINS(out, "gpu:0");
}

int main(void)
{
  RUN(worker_gpu_flags);
  RUN(no_gpu_is_a_clear_error);
  RUN(local_gpu_flags);
  RUN(local_starts_one_worker_per_gpu);
  return kit_summary();
}
