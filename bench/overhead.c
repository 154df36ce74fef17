/* bench/overhead: scheduler overhead on no-op tasks, through the public API.
 * Run under `tessera local` (see bench/overhead.sh, which prints the exact
 * command and the ratio to Dask). For each shape and size it reports the
 * graph ingest time (submit until the scheduler accepted it), the total
 * time until every wanted key is done, and tasks/s; then the round-trip
 * latency of a one-task graph (median of --reps); then the scheduler's
 * peak memory per task, read from /proc for the tessera-scheduler that is
 * our sibling under `tessera local`. Output lines are `key=value` so the
 * driver can parse them. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/tessera.h"

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
  fprintf(stderr, "overhead: %s: %s (%s)\n", what, tsr_strerror(rc), tsr_errmsg());
  exit(1);
}

/* independent: n tasks, all wanted. chain: each depends on the previous,
 * the last wanted. tree: n/2 leaves reduced pairwise, the root wanted. */
static tsr_graph *build(const char *shape, long n, int round)
{
  tsr_graph *g = NULL;
  int rc = tsr_graph_new(&g);
  char key[64], prev[64], a[64], b[64];
  if (rc != 0) die("graph", rc);
  bool indep = strcmp(shape, "independent") == 0, chain = strcmp(shape, "chain") == 0;
  if (indep || chain) {
    for (long i = 0; i < n && rc == 0; i++) {
      snprintf(key, sizeof key, "%s%d-%ld", shape, round, i);
      const char *in = prev;
      rc = tsr_graph_add(g, key, "noop", NULL, 0, chain && i > 0 ? &in : NULL, chain && i > 0 ? 1 : 0);
      if (rc == 0 && (indep || i == n - 1)) rc = tsr_graph_want(g, key);
      memcpy(prev, key, sizeof key);
    }
  } else {
    long width = n / 2;
    for (long i = 0; i < width && rc == 0; i++) {
      snprintf(key, sizeof key, "tree%d-0-%ld", round, i);
      rc = tsr_graph_add(g, key, "noop", NULL, 0, NULL, 0);
    }
    for (int level = 1; width > 1 && rc == 0; level++) {
      long next = (width + 1) / 2;
      for (long i = 0; i < next && rc == 0; i++) {
        snprintf(a, sizeof a, "tree%d-%d-%ld", round, level - 1, 2 * i);
        snprintf(b, sizeof b, "tree%d-%d-%ld", round, level - 1, 2 * i + 1 < width ? 2 * i + 1 : 2 * i);
        const char *ins[2] = {a, b};
        snprintf(key, sizeof key, "tree%d-%d-%ld", round, level, i);
        rc = tsr_graph_add(g, key, "noop", NULL, 0, ins, 2 * i + 1 < width ? 2 : 1);
      }
      width = next;
      if (width == 1 && rc == 0) rc = tsr_graph_want(g, key);
    }
  }
  if (rc != 0) die("build", rc);
  return g;
}

/* Waits until the scheduler has forgotten every task of earlier runs, so
 * one measurement does not pay for the previous graph's clean-up. */
static void wait_idle(tsr_client *client)
{
  for (int i = 0; i < 600; i++) {
    tsr_cluster_info *info = NULL;
    uint64_t left = 1;
    if (tsr_cluster_info_get(client, 5000, &info) == 0) left = info->tasks_total;
    tsr_cluster_info_destroy(&info);
    if (left == 0) return;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void run_shape(tsr_client *client, const char *shape, long n, int round)
{
  wait_idle(client);
  tsr_graph *g = build(shape, n, round);
  size_t tasks = tsr_graph_size(g);
  tsr_future *f = NULL;
  double t0 = now_s();
  int rc = tsr_submit(client, &g, &f);
  double t1 = now_s();
  if (rc != 0) die("submit", rc);
  rc = tsr_future_wait(f, -1);
  double t2 = now_s();
  if (rc != 0) die("wait", rc);
  tsr_future_release(&f);
  printf("tessera shape=%s tasks=%zu ingest_s=%.4f total_s=%.4f tasks_per_s=%.0f\n", shape, tasks, t1 - t0, t2 - t0,
         (double)tasks / (t2 - t0));
  fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void run_latency(tsr_client *client, int reps)
{
  double *lat = calloc((size_t)reps, sizeof *lat);
  char key[64];
  for (int i = 0; i < reps; i++) {
    tsr_graph *g = NULL;
    tsr_future *f = NULL;
    tsr_graph_new(&g);
    snprintf(key, sizeof key, "ping-%d", i);
    tsr_graph_add(g, key, "noop", NULL, 0, NULL, 0);
    double t0 = now_s();
    int rc = tsr_submit(client, &g, &f);
    if (rc == 0) rc = tsr_future_wait(f, -1);
    lat[i] = now_s() - t0;
    if (rc != 0) die("latency", rc);
    tsr_future_release(&f);
  }
  qsort(lat, (size_t)reps, sizeof *lat, cmp_double);
  printf("tessera latency_median_us=%.1f p90_us=%.1f reps=%d\n", lat[reps / 2] * 1e6, lat[reps * 9 / 10] * 1e6, reps);
  free(lat);
}

/* VmHWM/VmRSS in KiB of the tessera-scheduler whose parent is our parent. */
static long scheduler_kib(const char *field)
{
  DIR *d = opendir("/proc");
  struct dirent *e;
  long kib = -1;
  while (d != NULL && (e = readdir(d)) != NULL && kib < 0) {
    char path[300], comm[64] = "", line[256];
    long ppid = -1;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    int ok = fscanf(f, "%*d (%63[^)]) %*c %ld", comm, &ppid);
    fclose(f);
    if (ok != 2 || strcmp(comm, "tessera-schedul") != 0 || ppid != (long)getppid()) continue;
    snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
    f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
      if (strncmp(line, field, strlen(field)) == 0) kib = atol(line + strlen(field) + 1);
    if (f != NULL) fclose(f);
  }
  if (d != NULL) closedir(d);
  return kib;
}

int main(int argc, char **argv)
{
  const char *sizes = "10000,100000,1000000", *shapes = "independent,chain,tree";
  int reps = 1000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) sizes = argv[++i];
    else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) shapes = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--version") == 0) { printf("tsr-bench-overhead %s\n", TSR_VERSION_STRING); return 0; }
    else {
      printf("usage: tsr-bench-overhead [--sizes N,N,...] [--shapes independent,chain,tree] [--reps R]\n"
             "Run it under `tessera local`; see bench/overhead.sh.\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, NULL, NULL);
  if (rc != 0) die("connect", rc);
  long base_kib = scheduler_kib("VmRSS:");
  run_latency(client, reps);
  char shape_list[256];
  snprintf(shape_list, sizeof shape_list, "%s", shapes);
  long biggest = 0;
  for (char *shape = strtok(shape_list, ","); shape != NULL; shape = strtok(NULL, ",")) {
    char size_list[256], *save = NULL;
    snprintf(size_list, sizeof size_list, "%s", sizes);
    for (char *s = strtok_r(size_list, ",", &save); s != NULL; s = strtok_r(NULL, ",", &save)) {
      long n = atol(s);
      if (n > biggest) biggest = n;
      run_shape(client, shape, n, 0);
    }
  }
  long peak_kib = scheduler_kib("VmHWM:");
  if (base_kib > 0 && peak_kib > 0 && biggest > 0)
    printf("tessera scheduler_peak_kib=%ld baseline_kib=%ld bytes_per_task=%.0f (at %ld tasks)\n", peak_kib, base_kib,
           (double)(peak_kib - base_kib) * 1024.0 / (double)biggest, biggest);
  tsr_client_close(client);
  return 0;
}
