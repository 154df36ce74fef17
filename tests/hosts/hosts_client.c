/* tsr-hosts-client — the client side of the several-hosts test
 * (tests/hosts/test_hosts.sh) and benchmark (bench/hosts/), run inside a
 * network namespace of its own. Public API only.
 *
 *   tsr-hosts-client stencil ADDR PREFIX N ELEMS [SLOW_MS] [--gather]
 *     N chunks r_i = full(ELEMS f64, value i+1) (through a `sleep` of
 *     SLOW_MS with copy when SLOW_MS > 0: a slow step, so a worker can be
 *     cut off mid-graph), y_i = r_i + r_{(i+1) mod N}, the sum of every y_i
 *     added up in a tree. Each y_i reads two chunks that the scheduler
 *     placed independently, so about half of them come from the other
 *     worker. The total is ELEMS * N * (N+1), exact in f64: prints
 *     "verified" or exits 1. --gather also fetches y_0 straight from its
 *     worker and checks every value is 3.
 *
 *   tsr-hosts-client transfer ADDR N MIB
 *     Worker-to-worker throughput, through ordinary graphs: N chunks of
 *     MIB MiB are made and kept on the only worker connected (A), whose
 *     two task slots (`--threads 1`) are then held by two long `sleep`
 *     tasks. The client prints READY and waits for a second worker (B);
 *     then N `noop` tasks, one over each chunk, can only run on B, which
 *     fetches every chunk from A, one after another. Prints the bytes over
 *     the graph's wall time, and the time to gather one chunk from A into
 *     this client (worker-to-client). Needs TESSERA_TEST_OPS=1 on A.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graphs.h"
#include "tessera/tessera.h"

#define WAIT_MS 300000
#define HOLD_MS 3600000

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, int rc)
{
  fprintf(stderr, "tsr-hosts-client: %s: %s (%s)\n", what, tsr_errmsg(), tsr_err_name(rc));
  return 1;
}

/* sleep(ms) of input, passing the input on (copy): a slow step with a large output. */
static int add_slow_copy(tsr_graph *g, const char *key, const char *input, int64_t ms)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_int(a, "ms", ms);
  if (rc == 0) rc = tsr_args_bool(a, "copy", true);
  if (rc == 0) rc = tsr_graph_add_args(g, key, "sleep", a, &input, 1);
  tsr_args_destroy(&a);
  return rc;
}

static int build_stencil(tsr_graph *g, const char *prefix, int n, int64_t elems, int64_t slow_ms, bool gather,
                         char *root, size_t cap)
{
  char **sums = calloc((size_t)n, sizeof *sums);
  int rc = sums ? 0 : TSR_ENOMEM;
  char key[128], y[128], a[128], b[128];
  for (int i = 0; i < n && rc == 0; i++) {
    snprintf(key, sizeof key, "%s/r%d", prefix, i);
    rc = add_full(g, key, elems, (double)(i + 1));
    if (rc == 0 && slow_ms > 0) {
      snprintf(a, sizeof a, "%s/s%d", prefix, i);
      rc = add_slow_copy(g, a, key, slow_ms);
    }
  }
  const char *chunk = slow_ms > 0 ? "s" : "r";
  for (int i = 0; i < n && rc == 0; i++) {
    snprintf(a, sizeof a, "%s/%s%d", prefix, chunk, i);
    snprintf(b, sizeof b, "%s/%s%d", prefix, chunk, (i + 1) % n);
    snprintf(y, sizeof y, "%s/y%d", prefix, i);
    const char *in[2] = {a, b};
    rc = add_plain(g, y, "add", in, 2);
    sums[i] = malloc(128);
    if (sums[i] == NULL) rc = TSR_ENOMEM;
    if (rc == 0) snprintf(sums[i], 128, "%s/t%d", prefix, i);
    const char *yin[1] = {y};
    if (rc == 0) rc = tsr_graph_add(g, sums[i], "sum", NULL, 0, yin, 1);
  }
  snprintf(key, sizeof key, "%s/total", prefix);
  if (rc == 0) rc = add_tree(g, key, sums, (size_t)n, 4, root, cap);
  snprintf(y, sizeof y, "%s/y0", prefix);
  if (rc == 0 && gather) rc = tsr_graph_want(g, y);
  for (int i = 0; sums != NULL && i < n; i++) free(sums[i]);
  free(sums);
  return rc;
}

/* y_0 = r_0 + r_1: every value 1 + 2. */
static int check_y0(tsr_client *c, const char *prefix, int64_t elems)
{
  char key[128];
  snprintf(key, sizeof key, "%s/y0", prefix);
  tsr_chunk *ch = NULL;
  double t0 = now_s();
  int rc = tsr_gather(c, key, WAIT_MS, &ch);
  if (rc != 0) return fail("gathering y0", rc);
  double t = now_s() - t0;
  int64_t bad = ch->dtype == TSR_F64 && ch->nbytes == (size_t)elems * 8 ? 0 : elems;
  for (int64_t i = 0; bad == 0 && i < elems; i++) bad += ((const double *)ch->data)[i] != 3.0;
  printf("gathered y0 (%zu bytes) from its worker in %.3f s: %s\n", ch->nbytes, t, bad ? "WRONG VALUES" : "all 3");
  tsr_chunk_destroy(&ch);
  return bad ? 1 : 0;
}

static int stencil(const char *addr, const char *prefix, int n, int64_t elems, int64_t slow_ms, bool gather)
{
  tsr_client *c = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char root[128];
  int rc = tsr_client_open(&c, addr, NULL);
  if (rc != 0) return fail("connecting", rc);
  double t0 = now_s();
  int status = 1;
  if ((rc = tsr_graph_new(&g)) != 0 || (rc = build_stencil(g, prefix, n, elems, slow_ms, gather, root, sizeof root)) != 0)
    fail("building the graph", rc);
  else if ((rc = tsr_submit(c, &g, &f)) != 0) fail("submitting", rc);
  else if ((rc = tsr_future_wait(f, WAIT_MS)) != 0) {
    fail("computing", rc);
    if (rc == TSR_ETASK) fprintf(stderr, "tsr-hosts-client: %s\n", tsr_future_error(f));
  } else {
    double total = 0, want = (double)elems * n * (n + 1);
    if ((rc = gather_f64(c, root, &total)) != 0) fail("gathering the total", rc);
    else {
      printf("stencil %s: %d chunks of %" PRId64 " f64 in %.3f s: total %.17g, expected %.17g\n", prefix, n, elems,
             now_s() - t0, total, want);
      status = total == want ? 0 : 1;
      printf("%s\n", status == 0 ? "verified" : "MISMATCH");
      if (status == 0 && gather) status = check_y0(c, prefix, elems);
    }
  }
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(c);
  return status;
}

/* ---------- transfer ---------- */

static int submit_wait(tsr_client *c, tsr_graph **g, tsr_future **f_p, bool wait)
{
  int rc = tsr_submit(c, g, f_p);
  if (rc == 0 && wait) rc = tsr_future_wait(*f_p, WAIT_MS);
  if (rc == TSR_ETASK) fprintf(stderr, "tsr-hosts-client: %s\n", tsr_future_error(*f_p));
  return rc;
}

/* The one worker now connected: its name into out. */
static int only_worker(tsr_client *c, char *out, size_t cap, uint64_t *running_p)
{
  tsr_cluster_info *info = NULL;
  int rc = tsr_cluster_info_get(c, 10000, &info);
  if (rc == 0 && info->n_workers != 1) rc = TSR_EINVAL;
  if (rc == 0) snprintf(out, cap, "%s", info->workers[0].name);
  if (rc == 0 && running_p) *running_p = info->workers[0].tasks_running;
  tsr_cluster_info_destroy(&info);
  return rc;
}

/* Tasks done by the worker not named `holder`. */
static uint64_t other_worker_done(tsr_client *c, const char *holder)
{
  tsr_cluster_info *info = NULL;
  uint64_t done = 0;
  if (tsr_cluster_info_get(c, 10000, &info) == 0)
    for (size_t i = 0; i < info->n_workers; i++)
      if (strcmp(info->workers[i].name, holder) != 0) done += info->workers[i].tasks_done;
  tsr_cluster_info_destroy(&info);
  return done;
}

static int hold_chunks(tsr_client *c, int n, int64_t elems, tsr_future **kept, tsr_future **held)
{
  tsr_graph *g = NULL;
  char key[64];
  int rc = tsr_graph_new(&g);
  for (int i = 0; i < n && rc == 0; i++) {
    snprintf(key, sizeof key, "xfer/c%d", i);
    rc = add_full(g, key, elems, (double)i);
  }
  if (rc == 0) rc = submit_wait(c, &g, kept, true);
  tsr_graph_destroy(&g);
  if (rc != 0) return fail("making the chunks", rc);
  /* Both task slots of the holder busy for the rest of the run. */
  rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_sleep(g, "xfer/hold0", HOLD_MS, NULL, 0);
  if (rc == 0) rc = add_sleep(g, "xfer/hold1", HOLD_MS, NULL, 0);
  if (rc == 0) rc = submit_wait(c, &g, held, false);
  tsr_graph_destroy(&g);
  return rc == 0 ? 0 : fail("holding the worker's slots", rc);
}

static int fetch_all(tsr_client *c, int n, double mib, const char *holder)
{
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char key[64], in[64];
  int rc = tsr_graph_new(&g);
  for (int i = 0; i < n && rc == 0; i++) {
    snprintf(in, sizeof in, "xfer/c%d", i);
    snprintf(key, sizeof key, "xfer/n%d", i);
    const char *ins[1] = {in};
    rc = add_plain(g, key, "noop", ins, 1);
  }
  uint64_t before = other_worker_done(c, holder);
  double t0 = now_s();
  if (rc == 0) rc = submit_wait(c, &g, &f, true);
  double t = now_s() - t0;
  tsr_graph_destroy(&g);
  tsr_future_release(&f);
  if (rc != 0) return fail("fetching on the second worker", rc);
  /* tasks_done arrives with heartbeats: give it one. */
  struct timespec ts = {1, 200000000};
  nanosleep(&ts, NULL);
  uint64_t ran = other_worker_done(c, holder) - before;
  double bytes = mib * 1048576.0 * n;
  printf("worker-to-worker: %d chunks of %.0f MiB in %.3f s: %.1f MB/s = %.2f Gbit/s (%" PRIu64
         " tasks ran on the other worker)\n",
         n, mib, t, bytes / t / 1e6, bytes * 8 / t / 1e9, ran);
  if (ran < (uint64_t)n) {
    fprintf(stderr, "tsr-hosts-client: only %" PRIu64 " of %d fetching tasks ran on the second worker\n", ran, n);
    return 1;
  }
  return 0;
}

static int gather_one(tsr_client *c, double mib)
{
  double best = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    tsr_chunk *ch = NULL;
    double t0 = now_s();
    int rc = tsr_gather(c, "xfer/c1", WAIT_MS, &ch);
    double t = now_s() - t0;
    tsr_chunk_destroy(&ch);
    if (rc != 0) return fail("gathering a chunk", rc);
    if (t < best) best = t;
  }
  double bytes = mib * 1048576.0;
  printf("worker-to-client: one %.0f MiB chunk in %.4f s (best of 3): %.1f MB/s = %.2f Gbit/s\n", mib, best,
         bytes / best / 1e6, bytes * 8 / best / 1e9);
  return 0;
}

static int transfer(const char *addr, int n, double mib)
{
  tsr_client *c = NULL;
  tsr_future *kept = NULL, *held = NULL;
  char holder[64] = "";
  uint64_t running = 0;
  int64_t elems = (int64_t)(mib * 1048576.0 / 8);
  int rc = tsr_client_open(&c, addr, NULL);
  if (rc != 0) return fail("connecting", rc);
  int status = tsr_wait_for_workers(c, 1, WAIT_MS) != 0 || only_worker(c, holder, sizeof holder, NULL) != 0;
  if (status) fprintf(stderr, "tsr-hosts-client: transfer wants exactly one worker connected at first\n");
  if (!status) status = hold_chunks(c, n, elems, &kept, &held);
  for (int i = 0; !status && i < 100 && running < 1; i++) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    status = only_worker(c, holder, sizeof holder, &running) != 0;
  }
  if (!status) {
    printf("hold: %d chunks of %.0f MiB on %s, its slots busy\nREADY\n", n, mib, holder);
    fflush(stdout);
    if ((rc = tsr_wait_for_workers(c, 2, WAIT_MS)) != 0) status = fail("waiting for the second worker", rc);
  }
  if (!status) status = fetch_all(c, n, mib, holder);
  if (!status) status = gather_one(c, mib);
  tsr_future_release(&held);
  tsr_future_release(&kept);
  tsr_client_close(c);
  return status;
}

int main(int argc, char **argv)
{
  if (argc >= 6 && strcmp(argv[1], "stencil") == 0) {
    bool gather = strcmp(argv[argc - 1], "--gather") == 0;
    int64_t slow = argc - gather > 6 ? atoll(argv[6]) : 0;
    return stencil(argv[2], argv[3], atoi(argv[4]), atoll(argv[5]), slow, gather);
  }
  if (argc == 5 && strcmp(argv[1], "transfer") == 0) return transfer(argv[2], atoi(argv[3]), atof(argv[4]));
  fprintf(stderr,
          "usage: tsr-hosts-client stencil ADDR PREFIX N ELEMS [SLOW_MS] [--gather]\n"
          "       tsr-hosts-client transfer ADDR N MIB\n");
  return 2;
}
