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

TEST(worker_gpu_flags)
{
  char cmd[2048];
  const char *w = cluster_bin("tessera-worker");
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --device-memory-limit 1GiB", w);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "--device-memory-limit needs --gpu N");
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --gpu first", w);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "GPU index");
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --gpu 0 --device-memory-limit lots", w);
  ASSERT_EQ(sh(cmd), 2);
  /* the device tier's flags */
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --device-memory-target 0.5", w);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "--device-memory-target needs --gpu N");
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --pinned-memory-limit 1GiB", w);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "--pinned-memory-limit needs --gpu N");
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --gpu 0 --device-memory-spill 2", w);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "fraction");
  snprintf(cmd, sizeof cmd, "%s --scheduler tcp://127.0.0.1:1 --gpu 0 --pinned-memory-limit much", w);
  ASSERT_EQ(sh(cmd), 2);
  snprintf(cmd, sizeof cmd, "%s --help", w);
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
  char cmd[2048];
  const char *t = cluster_bin("tessera");
  snprintf(cmd, sizeof cmd, "%s local --gpus 0,0 -- true", t);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "twice");
  snprintf(cmd, sizeof cmd, "%s local --gpus 1,x -- true", t);
  ASSERT_EQ(sh(cmd), 2);
  snprintf(cmd, sizeof cmd, "%s local --cpu-workers 0 -- true", t);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "no workers");
  snprintf(cmd, sizeof cmd, "%s local --device-memory-limit 1GiB -- true", t);
  ASSERT_EQ(sh(cmd), 2);
  ASSERT_CONTAINS(out, "needs --gpus");
  snprintf(cmd, sizeof cmd, "%s local --help", t);
  ASSERT_EQ(sh(cmd), 0);
  ASSERT_CONTAINS(out, "--gpus all|I,J");
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
