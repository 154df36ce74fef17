/* Integration tests of the workers' memory tiers with real daemons:
 * materialized chunks (random data through an elementwise step) that do not
 * fit in the workers' memory limits are spilled to disk and come back
 * bit-identical to a run without limits; random root chunks are dropped and
 * recomputed, never written; corrupted spill files are detected and their
 * chunks recomputed; a worker SIGKILLed while it spills is recovered from;
 * a chunk larger than the limit fails with its key and the limit. And the
 * scheduler's recompute-vs-spill policy over three passes of a 48 MiB
 * array: cheap chunks are dropped and recomputed (never written), slow
 * ones are spilled (never dropped), both bit-identical to an unlimited
 * run, and the status counts the recomputed tasks. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"

#define NX 24                 /* chunks of X2 */
#define CHUNK_N 262144        /* f64 elements: 2 MiB a chunk, 48 MiB in all */

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* X = random (root, recomputable), X2 = scale(X) (materialized, wanted),
 * s = sum(X2) per chunk, and a tree over the sums. */
static int build(tsr_graph *g, const char *sum_prefix, bool with_x, char *root, size_t cap)
{
  char *sums[NX];
  char key[64], x[64];
  int rc = 0;
  for (int i = 0; i < NX && rc == 0; i++) {
    snprintf(key, sizeof key, "r-%d", i);
    snprintf(x, sizeof x, "x2-%d", i);
    if (with_x) {
      rc = add_uniform(g, key, CHUNK_N, (int64_t)i * CHUNK_N, (int64_t)NX * CHUNK_N, 7);
      if (rc == 0) rc = add_scale(g, x, key, 3.0, 1.0);
      if (rc == 0) rc = tsr_graph_want(g, x);
    }
    sums[i] = malloc(64);
    snprintf(sums[i], 64, "%s-%d", sum_prefix, i);
    const char *in = x;
    if (rc == 0) rc = add_plain(g, sums[i], "sum", &in, 1);
  }
  if (rc == 0) rc = add_tree(g, sum_prefix, sums, NX, 4, root, cap);
  for (int i = 0; i < NX; i++) free(sums[i]);
  return rc;
}

static int gather_x2(tsr_client *client, double *out);

/* Submits a graph, waits, gathers its sum (and X2 into x2 unless NULL),
 * then releases the future. */
static int run_graph(tsr_client *client, const char *sum_prefix, bool with_x, double *value_p, double *x2,
                     char *msg, size_t cap, tsr_future **keep_p)
{
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char root[64];
  int rc = tsr_graph_new(&g);
  if (rc == 0) rc = build(g, sum_prefix, with_x, root, sizeof root);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc != 0 && msg != NULL) snprintf(msg, cap, "%s", f ? tsr_future_error(f) : tsr_errmsg());
  if (rc == 0) rc = gather_f64(client, root, value_p);
  if (rc == 0 && x2 != NULL) rc = gather_x2(client, x2);
  if (keep_p != NULL)
    *keep_p = f;
  else
    tsr_future_release(&f);
  tsr_graph_destroy(&g);
  return rc;
}

/* Gathers every X2 chunk into one buffer of NX * CHUNK_N doubles. */
static int gather_x2(tsr_client *client, double *out)
{
  for (int i = 0; i < NX; i++) {
    char key[64];
    snprintf(key, sizeof key, "x2-%d", i);
    tsr_chunk *chunk = NULL;
    int rc = tsr_gather(client, key, 60000, &chunk);
    if (rc != 0) return rc;
    if (chunk->nbytes != CHUNK_N * sizeof(double)) rc = TSR_ESHAPE;
    else memcpy(out + (size_t)i * CHUNK_N, chunk->data, chunk->nbytes);
    tsr_chunk_destroy(&chunk);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Files under dir, one level of subdirectories deep (each worker makes its
 * own directory there); with flip, one byte of each file is changed. */
static int spill_files(const char *dir, bool flip)
{
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char sub[768];
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    DIR *s = opendir(sub);
    if (s == NULL) continue;
    struct dirent *f;
    while ((f = readdir(s)) != NULL) {
      if (f->d_name[0] == '.') continue;
      n++;
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
      FILE *fp = flip ? fopen(path, "r+b") : NULL;
      if (fp != NULL) {
        fseek(fp, 100, SEEK_SET);
        int c = fgetc(fp);
        fseek(fp, 100, SEEK_SET);
        fputc(c ^ 0xff, fp);
        fclose(fp);
      }
    }
    closedir(s);
  }
  closedir(d);
  return n;
}

/* Counts lines of the cluster's logs containing needle. */
static int count_in_logs(const cluster *c, const char *needle)
{
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cat %s/*.log 2>/dev/null | grep -c \"%s\"", c->dir, needle);
  FILE *p = popen(cmd, "r");
  int n = 0;
  if (p == NULL || fscanf(p, "%d", &n) != 1) n = -1;
  if (p != NULL) pclose(p);
  return n;
}

static double *reference_x2;
static double reference_sum;

/* spill_bps: the workers' --spill-bandwidth (the disk speed the
 * scheduler's recompute-or-spill costs assume), NULL = measured. Tests of
 * the policy's outcome give one: measured speeds and durations move with
 * the machine's load (CI runs tests side by side), the decision would too. */
static int limited_workers(cluster *c, int n_workers, int threads, char *spill_dir, size_t cap,
                           const char *const *sched_args, const char *spill_bps)
{
  memset(c, 0, sizeof *c);
  if (cluster_start_scheduler(c, sched_args) != 0) return -1;
  snprintf(spill_dir, cap, "%s/spill", c->dir);
  const char *args[] = {"--memory-limit", "16MiB", "--spill-dir", spill_dir, "--heartbeat-interval", "250ms",
                        spill_bps ? "--spill-bandwidth" : NULL, spill_bps, NULL};
  for (int i = 0; i < n_workers; i++)
    if (cluster_add_worker(c, threads, args) < 0) return -1;
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, (size_t)n_workers, 30000);
  tsr_client_close(client);
  return rc;
}

/* Two workers of one thread and 16 MiB each. */
static int limited_cluster_with(cluster *c, char *spill_dir, size_t cap, const char *const *sched_args,
                                const char *spill_bps)
{
  return limited_workers(c, 2, 1, spill_dir, cap, sched_args, spill_bps);
}

/* For the tests of spill files themselves: the scheduler never lets a
 * chunk be dropped, so X2 (a cheap step behind random data, which `auto`
 * would rather make again) goes to disk. */
static int limited_cluster(cluster *c, char *spill_dir, size_t cap)
{
  static const char *const never[] = {"--recompute", "never", NULL};
  return limited_cluster_with(c, spill_dir, cap, never, NULL);
}

TEST(reference_run_without_limits)
{
  cluster c;
  ASSERT_OK(cluster_start(&c, 2, 1, NULL, NULL));
  tsr_client *client = NULL;
  reference_x2 = malloc((size_t)NX * CHUNK_N * sizeof(double));
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = run_graph(client, "s", true, &reference_sum, reference_x2, NULL, 0, NULL);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  ASSERT_OK(rc);
}

TEST(spill_reload_and_corrupted_files)
{
  ASSERT_TRUE(reference_x2 != NULL);
  cluster c;
  char spill_dir[512];
  ASSERT_OK(limited_cluster(&c, spill_dir, sizeof spill_dir));
  tsr_client *client = NULL;
  double sum = 0, sum2 = 0;
  double *x2 = malloc((size_t)NX * CHUNK_N * sizeof(double));
  char msg[512] = "";
  int rc = tsr_client_open(&client, c.address, NULL);
  /* 48 MiB of wanted X2 on two workers of 16 MiB: most of it is on disk. */
  tsr_future *first = NULL;
  if (rc == 0) rc = run_graph(client, "s", true, &sum, x2, msg, sizeof msg, &first);
  int files = spill_files(spill_dir, false);
  /* The workers' heartbeats carry their tiers to the status. */
  uint64_t spilled = 0, on_disk = 0;
  for (int tries = 0; rc == 0 && tries < 40 && spilled == 0; tries++) {
    tsr_cluster_info *info = NULL;
    if (tsr_cluster_info_get(client, 5000, &info) == 0) {
      for (size_t w = 0; w < info->n_workers; w++) {
        spilled += info->workers[w].bytes_spilled;
        on_disk += info->workers[w].disk_bytes;
      }
    }
    tsr_cluster_info_destroy(&info);
    if (spilled == 0) sleep_ms(100);
  }
  bool same = rc == 0 && memcmp(x2, reference_x2, (size_t)NX * CHUNK_N * sizeof(double)) == 0;
  /* Every spill file corrupted: the same graph again (its keys shared with
   * the first) recomputes what it cannot read back, and gets the same bits. */
  int flipped = spill_files(spill_dir, true);
  memset(x2, 0, (size_t)NX * CHUNK_N * sizeof(double));
  if (rc == 0) rc = run_graph(client, "t", true, &sum2, x2, msg, sizeof msg, NULL);
  tsr_future_release(&first);
  same = same && rc == 0 && memcmp(x2, reference_x2, (size_t)NX * CHUNK_N * sizeof(double)) == 0;
  int corrupt = count_in_logs(&c, "is corrupted or truncated");
  int roots_spilled = count_in_logs(&c, "spilled 'r-");
  tsr_client_close(client);
  bool ok = rc == 0 && same && sum == reference_sum && sum2 == reference_sum && files >= NX / 2 && corrupt > 0 &&
            roots_spilled == 0;
  if (!ok)
    fprintf(stderr, "  rc %d (%s) same %d sum %.17g/%.17g/%.17g files %d flipped %d corrupt %d roots spilled %d\n",
            rc, msg, same, sum, sum2, reference_sum, files, flipped, corrupt, roots_spilled);
  cluster_stop(&c, !ok);
  free(x2);
  ASSERT_OK(rc);
  ASSERT_TRUE(same);
  ASSERT_TRUE(sum == reference_sum);
  ASSERT_TRUE(sum2 == reference_sum);
  ASSERT_TRUE(files >= NX / 2);
  ASSERT_TRUE(spilled >= (uint64_t)(NX / 2) * CHUNK_N * sizeof(double));
  ASSERT_TRUE(on_disk > 0);
  ASSERT_TRUE(corrupt > 0);
  ASSERT_EQ(roots_spilled, 0);
}

TEST(worker_killed_while_spilling)
{
  ASSERT_TRUE(reference_x2 != NULL);
  cluster c;
  char spill_dir[512];
  ASSERT_OK(limited_cluster(&c, spill_dir, sizeof spill_dir));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char root[64];
  double sum = 0;
  double *x2 = malloc((size_t)NX * CHUNK_N * sizeof(double));
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build(g, "s", true, root, sizeof root);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  /* Kill worker 0 as soon as spill files appear. */
  for (int i = 0; i < 2000 && rc == 0 && spill_files(spill_dir, false) == 0; i++) sleep_ms(5);
  cluster_signal_worker(&c, 0, SIGKILL);
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc == 0) rc = gather_f64(client, root, &sum);
  if (rc == 0) rc = gather_x2(client, x2);
  bool same = rc == 0 && memcmp(x2, reference_x2, (size_t)NX * CHUNK_N * sizeof(double)) == 0;
  if (rc != 0) fprintf(stderr, "  error %s: %s / %s\n", tsr_err_name(rc), tsr_errmsg(), f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0 || !same);
  free(x2);
  ASSERT_OK(rc);
  ASSERT_TRUE(same);
  ASSERT_TRUE(sum == reference_sum);
}

TEST(chunk_larger_than_the_limit_fails_with_key_and_limit)
{
  cluster c;
  char spill_dir[512];
  ASSERT_OK(limited_cluster(&c, spill_dir, sizeof spill_dir));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_uniform(g, "huge-chunk", 4 << 20, 0, 4 << 20, 1); /* 32 MiB */
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  int wait = rc == 0 ? tsr_future_wait(f, 60000) : rc;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", f ? tsr_future_error(f) : "");
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  tsr_client_close(client);
  cluster_stop(&c, wait != TSR_ETASK);
  ASSERT_OK(rc);
  ASSERT_EQ(wait, TSR_ETASK);
  ASSERT_CONTAINS(msg, "'huge-chunk'");
  ASSERT_CONTAINS(msg, "32.00 MiB");
  ASSERT_CONTAINS(msg, "memory limit of 16.00 MiB");
}

/* ---------- multi-pass: recompute or spill (the scheduler's policy) ---------- */

#define MP_ROWS 256
#define MP_COLS 1024          /* i64: 2 MiB a chunk, NX chunks: 48 MiB */
#define MP_K 4

/* Adds op with params from a (consumed) over inputs. */
static int add_op(tsr_graph *g, const char *key, const char *op, tsr_args *a, const char *const *in, size_t n)
{
  int rc = tsr_graph_add_args(g, key, op, a, in, n);
  tsr_args_destroy(&a);
  return rc;
}

static tsr_args *args2d(int64_t rows, int64_t cols)
{
  tsr_args *a = NULL;
  int64_t shape[2] = {rows, cols};
  if (tsr_args_new(&a) == 0) tsr_args_ints(a, "shape", shape, 2);
  return a;
}

static int add_randint2d(tsr_graph *g, const char *key, int i)
{
  tsr_args *a = args2d(MP_ROWS, MP_COLS);
  int64_t global[2] = {(int64_t)NX * MP_ROWS, MP_COLS}, offset[2] = {(int64_t)i * MP_ROWS, 0};
  tsr_args_ints(a, "global_shape", global, 2);
  tsr_args_ints(a, "offset", offset, 2);
  tsr_args_int(a, "seed", 5);
  tsr_args_int(a, "low", 0);
  tsr_args_int(a, "high", 1000);
  tsr_args_str(a, "dtype", "i64");
  return add_op(g, key, "randint", a, NULL, 0);
}

static int add_matmul(tsr_graph *g, const char *key, const char *a_key, const char *b_key, bool trans_a)
{
  tsr_args *a = NULL;
  tsr_args_new(&a);
  tsr_args_bool(a, "trans_a", trans_a);
  const char *in[2] = {a_key, b_key};
  return add_op(g, key, "matmul", a, in, 2);
}

/* One pass: out-i = matmul(x-i, b) for every chunk, and a tree of adds
 * over them whose root (wanted) is written to root. */
static int add_pass(tsr_graph *g, const char *prefix, const char *xprefix, const char *b, bool trans_a, char *root,
                    size_t cap)
{
  char *outs[NX];
  int rc = 0;
  for (int i = 0; i < NX; i++) {
    char x[32];
    outs[i] = malloc(32);
    snprintf(outs[i], 32, "%s-%d", prefix, i);
    snprintf(x, sizeof x, "%s-%d", xprefix, i);
    if (rc == 0) rc = add_matmul(g, outs[i], x, b, trans_a);
  }
  if (rc == 0) rc = add_tree(g, prefix, outs, NX, 4, root, cap);
  for (int i = 0; i < NX; i++) free(outs[i]);
  return rc;
}

/* X2 = add(randint, 1), 48 MiB, read by three passes like a randomized
 * SVD's power iteration: S = sum_i X2_i Ω, T = sum_i X2_iᵀ S,
 * U = sum_i X2_i T. Each pass needs the previous one's result, so X2 must
 * be kept (or made again) between passes. With sleep_ms > 0 the passes
 * read E = sleep(copy, X2) instead: the same bytes, from a slow step. */
static int build_multipass(tsr_graph *g, int sleep_ms, char *t_root, char *u_root)
{
  tsr_args *a = args2d(MP_ROWS, MP_COLS);
  tsr_args_str(a, "dtype", "i64");
  tsr_args_float(a, "value", 1.0);
  int rc = add_op(g, "one", "full", a, NULL, 0);
  a = args2d(MP_COLS, MP_K);
  tsr_args_int(a, "seed", 11);
  if (rc == 0) rc = add_op(g, "omega", "random_uniform", a, NULL, 0);
  for (int i = 0; i < NX && rc == 0; i++) {
    char r[32], x[32], e[32];
    snprintf(r, sizeof r, "mr-%d", i), snprintf(x, sizeof x, "mx-%d", i), snprintf(e, sizeof e, "me-%d", i);
    const char *in[2] = {r, "one"};
    rc = add_randint2d(g, r, i);
    if (rc == 0) rc = add_plain(g, x, "add", in, 2);
    if (rc == 0 && sleep_ms > 0) {
      a = NULL;
      tsr_args_new(&a);
      tsr_args_int(a, "ms", sleep_ms);
      tsr_args_bool(a, "copy", true);
      const char *xin = x;
      rc = add_op(g, e, "sleep", a, &xin, 1);
    }
  }
  const char *xp = sleep_ms > 0 ? "me" : "mx";
  char s_root[64];
  if (rc == 0) rc = add_pass(g, "ms", xp, "omega", false, s_root, sizeof s_root);
  if (rc == 0) rc = add_pass(g, "mt", xp, s_root, true, t_root, 64);
  if (rc == 0) rc = add_pass(g, "mu", xp, t_root, false, u_root, 64);
  return rc;
}

static int gather_bytes(tsr_client *client, const char *key, void *out, size_t nbytes)
{
  tsr_chunk *chunk = NULL;
  int rc = tsr_gather(client, key, 60000, &chunk);
  if (rc == 0 && chunk->nbytes != nbytes) rc = TSR_ESHAPE;
  if (rc == 0) memcpy(out, chunk->data, nbytes);
  tsr_chunk_destroy(&chunk);
  return rc;
}

typedef struct mp_result {
  double t[MP_COLS * MP_K];
  double u[MP_ROWS * MP_K];
} mp_result;

static int run_multipass(tsr_client *client, int sleep_ms, mp_result *res)
{
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char t_root[64], u_root[64];
  int rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_multipass(g, sleep_ms, t_root, u_root);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 180000);
  if (rc != 0) fprintf(stderr, "  multipass: %s: %s\n", tsr_err_name(rc), f ? tsr_future_error(f) : tsr_errmsg());
  if (rc == 0) rc = gather_bytes(client, t_root, res->t, sizeof res->t);
  if (rc == 0) rc = gather_bytes(client, u_root, res->u, sizeof res->u);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  return rc;
}

/* Sums over the workers of the status: tasks recomputed, bytes dropped. */
static void status_totals(tsr_client *client, uint64_t *tasks_p, uint64_t *dropped_p)
{
  tsr_cluster_info *info = NULL;
  *tasks_p = *dropped_p = 0;
  if (tsr_cluster_info_get(client, 5000, &info) != 0) return;
  for (size_t w = 0; w < info->n_workers; w++) {
    *tasks_p += info->workers[w].tasks_recomputed;
    *dropped_p += info->workers[w].bytes_dropped;
  }
  tsr_cluster_info_destroy(&info);
}

/* The same once the workers' heartbeats (every 250 ms here) have caught
 * up: bytes dropped reach the status with the next heartbeat, so chunks
 * dropped in a run's last moments show only then (CI saw 0 once). Two
 * equal reads over a second apart, or the last of five seconds. */
static void recompute_totals(tsr_client *client, uint64_t *tasks_p, uint64_t *dropped_p)
{
  status_totals(client, tasks_p, dropped_p);
  for (int tries = 0; tries < 5; tries++) {
    sleep_ms(1000);
    uint64_t tasks = 0, dropped = 0;
    status_totals(client, &tasks, &dropped);
    bool settled = tasks == *tasks_p && dropped == *dropped_p;
    *tasks_p = tasks;
    *dropped_p = dropped;
    if (settled && dropped > 0) return;
  }
}

/* Runs fn(client, result) on two unlimited workers of one thread: the
 * reference the limited runs must match bit for bit. */
static int unlimited_reference(int (*fn)(tsr_client *, void *), void *result)
{
  cluster c;
  if (cluster_start(&c, 2, 1, NULL, NULL) != 0) return -1;
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = fn(client, result);
  tsr_client_close(client);
  cluster_stop(&c, rc != 0);
  return rc;
}

static mp_result *reference_mp;

static int multipass_fast(tsr_client *client, void *res) { return run_multipass(client, 0, res); }

TEST(multipass_reference_without_limits)
{
  reference_mp = calloc(1, sizeof *reference_mp);
  ASSERT_OK(unlimited_reference(multipass_fast, reference_mp));
}

/* Cheap chunks (random through an elementwise step) that do not fit are
 * dropped and made again for each pass, never written; the results are
 * bit-identical to the unlimited run; the scheduler counts the tasks it
 * ran again. */
TEST(multipass_cheap_chunks_recomputed_not_spilled)
{
  ASSERT_TRUE(reference_mp != NULL);
  cluster c;
  char spill_dir[512];
  /* A disk of 20 MB/s: a 2 MiB chunk costs ~200 ms to write and read
   * back, against a few ms (tens under the sanitizers, or under load) to
   * make it again from random data. */
  const char *sched_args[] = {"--recompute", "auto", NULL};
  ASSERT_OK(limited_cluster_with(&c, spill_dir, sizeof spill_dir, sched_args, "20MB"));
  tsr_client *client = NULL;
  mp_result *res = calloc(1, sizeof *res);
  uint64_t recomputed = 0, dropped = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = run_multipass(client, 0, res);
  if (rc == 0) recompute_totals(client, &recomputed, &dropped);
  bool same = rc == 0 && memcmp(res, reference_mp, sizeof *res) == 0;
  int x2_spilled = count_in_logs(&c, "spilled 'mx-");
  int x2_dropped = count_in_logs(&c, "dropped 'mx-.*recomputable");
  tsr_client_close(client);
  int fallbacks = count_in_logs(&c, "could not be fetched");
  int nodrop = count_in_logs(&c, "it will be spilled, not dropped");
  bool ok = rc == 0 && same && x2_spilled == 0 && x2_dropped > 0 && recomputed > 0;
  fprintf(stderr, "  rc %d same %d mx spilled %d dropped %d; tasks recomputed %llu, bytes dropped %llu, "
          "missing_input fallbacks %d, spilled after a wasted recompute %d\n", rc, same, x2_spilled, x2_dropped,
          (unsigned long long)recomputed, (unsigned long long)dropped, fallbacks, nodrop);
  cluster_stop(&c, !ok);
  free(res);
  ASSERT_OK(rc);
  ASSERT_TRUE(same);
#if defined(__SANITIZE_ADDRESS__)
  /* Under the sanitizers our kernels run ~10x slower beside an optimized
   * blosc: recomputed X2 chunks are dropped again before their readers run,
   * and the scheduler's no-progress rule (recomputed and wasted: spill
   * instead, policy_evict.c) spills them. Only such chunks may be written. */
  ASSERT_TRUE(x2_spilled <= nodrop);
#else
  ASSERT_EQ(x2_spilled, 0);
#endif
  ASSERT_TRUE(x2_dropped > 0);
  ASSERT_TRUE(recomputed > 0);
  ASSERT_TRUE(dropped >= (uint64_t)NX * MP_ROWS * MP_COLS * 8 / 2);
}

/* The same passes over a slow step (60 ms per 2 MiB chunk: far dearer to
 * make again than to write and read back at 4 GB/s, ~1 ms): its chunks
 * are spilled, never dropped. A one-task graph first lets the scheduler
 * measure the step. */
TEST(multipass_expensive_chunks_spilled_not_dropped)
{
  ASSERT_TRUE(reference_mp != NULL);
  cluster c;
  char spill_dir[512];
  ASSERT_OK(limited_cluster_with(&c, spill_dir, sizeof spill_dir, NULL, "4GB"));
  tsr_client *client = NULL;
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_full(g, "warm-in", 1024, 1.0);
  tsr_args *a = NULL;
  tsr_args_new(&a);
  tsr_args_int(a, "ms", 60);
  tsr_args_bool(a, "copy", true);
  const char *in = "warm-in";
  if (rc == 0) rc = add_op(g, "warm", "sleep", a, &in, 1);
  else tsr_args_destroy(&a);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 30000);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  mp_result *res = calloc(1, sizeof *res);
  if (rc == 0) rc = run_multipass(client, 60, res);
  bool same = rc == 0 && memcmp(res, reference_mp, sizeof *res) == 0;
  int e_spilled = count_in_logs(&c, "spilled 'me-");
  int e_dropped = count_in_logs(&c, "dropped 'me-.*recomputable");  /* replicas are dropped, fine */
  int x2_spilled = count_in_logs(&c, "spilled 'mx-");
  tsr_client_close(client);
  bool ok = rc == 0 && same && e_spilled >= NX / 2 && e_dropped == 0;
  fprintf(stderr, "  rc %d same %d me spilled %d dropped %d, mx spilled %d\n", rc, same, e_spilled, e_dropped,
          x2_spilled);
  cluster_stop(&c, !ok);
  free(res);
  ASSERT_OK(rc);
  ASSERT_TRUE(same);
  ASSERT_TRUE(e_spilled >= NX / 2);
  ASSERT_EQ(e_dropped, 0);
}

/* ---------- a persisted random array larger than the workers ---------- */

typedef struct persisted_result {
  double sum;                     /* the tree sum of a second graph over it */
  double values[NX * CHUNK_N];    /* every chunk, gathered after that graph */
} persisted_result;

/* The seed's `x = random(...).persist()`, then a graph that reads every
 * chunk, then the client gathers each chunk itself. */
static int persist_then_read(tsr_client *client, persisted_result *out)
{
  tsr_graph *g = NULL;
  tsr_future *persisted = NULL, *f = NULL;
  char key[64], root[64], *sums[NX] = {0};
  int rc = tsr_graph_new(&g);
  for (int i = 0; i < NX && rc == 0; i++) {
    snprintf(key, sizeof key, "pr-%d", i);
    rc = add_uniform(g, key, CHUNK_N, (int64_t)i * CHUNK_N, (int64_t)NX * CHUNK_N, 11);
    if (rc == 0) rc = tsr_graph_want(g, key);
  }
  if (rc == 0) rc = tsr_submit(client, &g, &persisted);
  if (rc == 0) rc = tsr_future_wait(persisted, 120000);
  tsr_graph_destroy(&g);
  if (rc == 0) rc = tsr_graph_new(&g);
  for (int i = 0; i < NX && rc == 0; i++) {
    snprintf(key, sizeof key, "pr-%d", i);
    sums[i] = malloc(64);
    snprintf(sums[i], 64, "ps-%d", i);
    const char *in = key;
    rc = add_plain(g, sums[i], "sum", &in, 1);
  }
  if (rc == 0) rc = add_tree(g, "ps", sums, NX, 4, root, sizeof root);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc == 0) rc = gather_f64(client, root, &out->sum);
  for (int i = 0; i < NX && rc == 0; i++) {
    snprintf(key, sizeof key, "pr-%d", i);
    tsr_chunk *chunk = NULL;
    rc = tsr_gather(client, key, 60000, &chunk);
    if (rc == 0 && chunk->nbytes != CHUNK_N * sizeof(double)) rc = TSR_ESHAPE;
    if (rc == 0) memcpy(out->values + (size_t)i * CHUNK_N, chunk->data, chunk->nbytes);
    tsr_chunk_destroy(&chunk);
  }
  for (int i = 0; i < NX; i++) free(sums[i]);
  tsr_future_release(&f);
  tsr_future_release(&persisted);
  tsr_graph_destroy(&g);
  return rc;
}

static persisted_result *reference_persisted;

static int persisted_run(tsr_client *client, void *out) { return persist_then_read(client, out); }

TEST(persisted_reference_without_limits)
{
  reference_persisted = calloc(1, sizeof *reference_persisted);
  ASSERT_OK(unlimited_reference(persisted_run, reference_persisted));
}

/* 48 MiB of persisted (wanted) random chunks on two workers of 16 MiB:
 * the workers drop what does not fit (never write it), the scheduler
 * recomputes a dropped chunk when the second graph needs it, and when the
 * client's own gather finds one missing (key_missing); every value and the
 * sum are the unlimited run's bits. Before, the wanted chunks were kept or
 * spilled, and a gather of a dropped one waited forever. */
TEST(persisted_random_larger_than_memory_dropped_and_recomputed)
{
  ASSERT_TRUE(reference_persisted != NULL);
  cluster c;
  char spill_dir[512];
  ASSERT_OK(limited_cluster_with(&c, spill_dir, sizeof spill_dir, NULL, NULL));
  tsr_client *client = NULL;
  persisted_result *res = calloc(1, sizeof *res);
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = persist_then_read(client, res);
  tsr_client_close(client);
  bool same = rc == 0 && memcmp(res, reference_persisted, sizeof *res) == 0;
  int spilled = count_in_logs(&c, "spilled 'pr-");
  int dropped = count_in_logs(&c, "dropped 'pr-");
  fprintf(stderr, "  rc %d same %d: pr chunks spilled %d, dropped %d\n", rc, same, spilled, dropped);
  cluster_stop(&c, rc != 0 || !same);
  free(res);
  ASSERT_OK(rc);
  ASSERT_TRUE(same);
  ASSERT_EQ(spilled, 0);
  ASSERT_TRUE(dropped > 0);
}

/* The SVD of a materialized X2 four times the memory of one worker of
 * four threads (64 MiB on 16 MiB): X2's chunks and the passes'
 * intermediates are dropped and made again or spilled, and the result is
 * bit-identical with an unlimited run. Before the recompute cost counted
 * released inputs whole, dropped TSQR slices were "cheap" and the worker
 * looped for minutes remaking whole passes (the GPU worker's device-tier
 * test hung the same way). */
TEST(svd_of_x2_four_times_memory_on_four_threads)
{
  enum { ROWS = 65536, COLS = 1024, K = 5 };
  static double s_ref[K], v_ref[K * COLS], s_lim[K], v_lim[K * COLS];
  cluster c;
  ASSERT_OK(cluster_start(&c, 1, 4, NULL, NULL));
  int rc = svd_of_materialized_x2(c.address, ROWS, COLS, 256, K, 200000, s_ref, v_ref);
  cluster_stop(&c, rc != 0);
  ASSERT_OK(rc);
  char spill_dir[512];
  ASSERT_OK(limited_workers(&c, 1, 4, spill_dir, sizeof spill_dir, NULL, NULL));
  uint64_t recomputed = 0, dropped = 0, spilled = 0;
  tsr_client *client = NULL;
  rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = svd_of_materialized_x2(c.address, ROWS, COLS, 256, K, 200000, s_lim, v_lim);
  if (rc == 0) recompute_totals(client, &recomputed, &dropped);
  tsr_cluster_info *info = NULL;
  if (rc == 0 && tsr_cluster_info_get(client, 5000, &info) == 0 && info->n_workers == 1)
    spilled = info->workers[0].bytes_spilled;
  tsr_cluster_info_destroy(&info);
  tsr_client_close(client);
  bool same = rc == 0 && memcmp(s_lim, s_ref, sizeof s_ref) == 0 && memcmp(v_lim, v_ref, sizeof v_ref) == 0;
  fprintf(stderr, "  rc %d, %s; tasks recomputed %llu, bytes dropped %llu, spilled %llu\n", rc,
          same ? "bit-identical" : "DIFFERENT", (unsigned long long)recomputed, (unsigned long long)dropped,
          (unsigned long long)spilled);
  cluster_stop(&c, !same);
  ASSERT_OK(rc);
  ASSERT_TRUE(same);
  /* 64 MiB went through 16: some of it left memory */
  ASSERT_TRUE(dropped + spilled >= (uint64_t)ROWS * COLS / 2);
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  RUN(reference_run_without_limits);
  RUN(spill_reload_and_corrupted_files);
  RUN(worker_killed_while_spilling);
  RUN(chunk_larger_than_the_limit_fails_with_key_and_limit);
  RUN(multipass_reference_without_limits);
  RUN(multipass_cheap_chunks_recomputed_not_spilled);
  RUN(multipass_expensive_chunks_spilled_not_dropped);
  RUN(persisted_reference_without_limits);
  RUN(persisted_random_larger_than_memory_dropped_and_recomputed);
  RUN(svd_of_x2_four_times_memory_on_four_threads);
  free(reference_x2);
  free(reference_mp);
  return kit_summary();
}
