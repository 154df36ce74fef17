/* GPU workers on real daemons (label gpu; skipped with 77 where no GPU can
 * be used, e.g. a build machine with nvcc but no driver):
 *
 * - the same graphs on a CPU-only cluster, on a GPU worker beside a CPU
 *   worker, and on a GPU worker alone give the same results: random arrays
 *   bit-identical; elementwise f64 and reductions within 1e-12; f32 matmul
 *   and SVDs within 1e-4 (relative to the largest value);
 * - a chunk larger than --device-memory-limit fails its graph with an
 *   error naming the chunk and the limit; the worker stays up, and chunks
 *   that together pass the limit complete (moved to host memory);
 * - the device tier: a randomized SVD (six passes) over a materialized u8
 *   matrix four times the device limit (64 MiB on 16 MiB), with a host memory limit too, is
 *   bit-identical to the run without limits; chunks were moved to host
 *   memory and spilled to disk on the way;
 * - a GPU worker SIGKILLed mid-graph: its results are recomputed on the CPU
 *   worker and the graph's result is right;
 * - a GPU worker alone runs integer div (whose CUDA variant declines:
 *   TSR_ENODEV) on its host instead, a zero divisor failing the task with
 *   the CPU's message; an SVD whose cuSOLVER routine does not converge
 *   fails its task naming the routine, rather than returning NaN;
 * - the example op plugin's CUDA entry runs on a GPU worker and gives its
 *   CPU entry's bytes for every tile of the CMU-1 region.
 * Uses only the public API (the GPU is reached through tessera-worker). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "graphs.h"
#include "kit.h"
#include "tessera/linalg.h"
#include "tessera/plink.h"
#include "tessera/tiles.h"

#define N_RESULTS 12
#define GPU_STREAMS 4

typedef struct result {
  const char *name;
  void *data;
  size_t nbytes;
  tsr_dtype dtype;
  double tol;          /* 0: bit-identical; else max |a-b| / max |b| */
} result;

typedef struct suite {
  result r[N_RESULTS];
  int n;
} suite;

static void suite_free(suite *s)
{
  for (int i = 0; i < s->n; i++) free(s->r[i].data);
  memset(s, 0, sizeof *s);
}

/* ---------- starting clusters ---------- */

static bool have_gpu(void)
{
  char out[4096];
  const char *argv[] = {cluster_bin("tessera-worker"), "--list-gpus", NULL};
  int rc = run_capture(argv, NULL, out, sizeof out, 60);
  if (rc == 0 && out[0] != '\0') fprintf(stderr, "GPUs:\n%s", out);
  return rc == 0 && out[0] != '\0';
}

static int wait_workers(cluster *c, int n)
{
  tsr_client *client = NULL;
  int rc = tsr_client_open(&client, c->address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, (size_t)n, 60000);
  if (rc != 0) fprintf(stderr, "cluster: workers did not connect: %s %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_client_close(client);
  return rc;
}

/* kind: "cpu" (one CPU worker), "mixed" (GPU worker + CPU worker), "gpu"
 * (GPU worker alone). */
static int start(cluster *c, const char *kind, const char *const *extra_gpu_args, const char *const *sched_args)
{
  memset(c, 0, sizeof *c);
  if (cluster_start_scheduler(c, sched_args) != 0) return -1;
  int n = 0;
  if (strcmp(kind, "cpu") != 0) {
    const char *args[16] = {"--gpu", "0"};
    int k = 2;
    for (int i = 0; extra_gpu_args != NULL && extra_gpu_args[i] != NULL && k < 15; i++) args[k++] = extra_gpu_args[i];
    if (cluster_add_worker(c, GPU_STREAMS, args) < 0) return -1;
    n++;
  }
  if (strcmp(kind, "gpu") != 0) {
    if (cluster_add_worker(c, 2, NULL) < 0) return -1;
    n++;
  }
  return wait_workers(c, n);
}

/* ---------- the graphs ---------- */

static int keep(suite *s, tsr_array_ctx *ctx, const char *name, const tsr_array *a, double tol)
{
  result *r = &s->r[s->n];
  r->name = name;
  r->dtype = tsr_array_dtype(a);
  r->nbytes = (size_t)tsr_array_size(a) * tsr_dtype_size(r->dtype);
  r->tol = tol;
  r->data = malloc(r->nbytes ? r->nbytes : 1);
  int rc = tsr_compute(ctx, a, r->data, r->nbytes, 120000);
  if (rc != 0) {
    fprintf(stderr, "  %s: %s: %s\n", name, tsr_err_name(rc), tsr_errmsg());
    free(r->data);
    return rc;
  }
  s->n++;
  return 0;
}

static int random_arrays(suite *s, tsr_array_ctx *ctx)
{
  int64_t shape[2] = {700, 300}, chunks[2] = {256, 128}, ishape[2] = {1000, 500}, ichunks[2] = {300, 200};
  tsr_array *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  int rc = tsr_random_uniform(ctx, 7, TSR_F64, 2, shape, chunks, &a);
  if (rc == 0) rc = keep(s, ctx, "random_uniform f64", a, 0);
  if (rc == 0) rc = tsr_random_uniform(ctx, 7, TSR_F32, 2, shape, chunks, &b);
  if (rc == 0) rc = keep(s, ctx, "random_uniform f32", b, 0);
  /* f64 normals: CUDA's log and cos are 1-2 ulp from glibc's, so a few ulp
   * (kernels/cuda/random.cu); uniforms and integers are bit-identical. */
  if (rc == 0) rc = tsr_random_normal(ctx, 8, TSR_F64, 2, shape, chunks, &c);
  if (rc == 0) rc = keep(s, ctx, "random_normal f64", c, 1e-14);
  if (rc == 0) rc = tsr_randint(ctx, 9, 0, 3, TSR_U8, 2, ishape, ichunks, &d);
  if (rc == 0) rc = keep(s, ctx, "randint u8", d, 0);
  tsr_array_free(ctx, &a);
  tsr_array_free(ctx, &b);
  tsr_array_free(ctx, &c);
  tsr_array_free(ctx, &d);
  return rc;
}

static int elementwise_and_reductions(suite *s, tsr_array_ctx *ctx)
{
  int64_t shape[2] = {900, 400}, chunks[2] = {300, 160};
  tsr_array *a = NULL, *b = NULL, *ab = NULL, *sc = NULL, *sum = NULL;
  int rc = tsr_random_uniform(ctx, 11, TSR_F64, 2, shape, chunks, &a);
  if (rc == 0) rc = tsr_random_normal(ctx, 12, TSR_F64, 2, shape, chunks, &b);
  if (rc == 0) rc = tsr_mul(ctx, a, b, &ab);
  if (rc == 0) rc = tsr_scale(ctx, ab, 3.0, -1.0, &sc);
  if (rc == 0) rc = keep(s, ctx, "scale(a*b) f64", sc, 1e-12);
  if (rc == 0) rc = tsr_sum(ctx, sc, 0, 4, &sum);
  if (rc == 0) rc = keep(s, ctx, "sum axis 0 f64", sum, 1e-12);
  tsr_array_free(ctx, &a);
  tsr_array_free(ctx, &b);
  tsr_array_free(ctx, &ab);
  tsr_array_free(ctx, &sc);
  tsr_array_free(ctx, &sum);
  return rc;
}

static int linear_algebra(suite *s, tsr_array_ctx *ctx)
{
  int64_t ashape[2] = {2000, 64}, achunks[2] = {500, 64}, bshape[2] = {64, 32}, bchunks[2] = {64, 32};
  int64_t xshape[2] = {4000, 400}, xchunks[2] = {1000, 200}, tshape[2] = {3000, 50}, tchunks[2] = {1000, 50};
  tsr_array *a = NULL, *b = NULL, *ab = NULL, *x = NULL, *u = NULL, *sv = NULL, *v = NULL;
  tsr_array *t = NULL, *tu = NULL, *ts = NULL, *tv = NULL;
  int rc = tsr_random_uniform(ctx, 21, TSR_F32, 2, ashape, achunks, &a);
  if (rc == 0) rc = tsr_random_normal(ctx, 22, TSR_F32, 2, bshape, bchunks, &b);
  if (rc == 0) rc = tsr_matmul(ctx, a, b, &ab);
  if (rc == 0) rc = keep(s, ctx, "matmul f32", ab, 1e-4);
  if (rc == 0) rc = tsr_random_normal(ctx, 23, TSR_F32, 2, xshape, xchunks, &x);
  tsr_svd_opts o = TSR_SVD_OPTS_DEFAULT;
  o.seed = 5;
  o.n_power_iter = 2;
  if (rc == 0) rc = tsr_svd_compressed(ctx, x, 5, &o, &u, &sv, &v);
  if (rc == 0) rc = keep(s, ctx, "svd_compressed s f32", sv, 1e-4);
  if (rc == 0) rc = tsr_random_uniform(ctx, 24, TSR_F32, 2, tshape, tchunks, &t);
  if (rc == 0) rc = tsr_svd_tall_skinny(ctx, t, &tu, &ts, &tv);
  if (rc == 0) rc = keep(s, ctx, "svd tall-skinny s f32", ts, 1e-4);
  tsr_array *all[] = {a, b, ab, x, u, sv, v, t, tu, ts, tv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tsr_array_free(ctx, &all[i]);
  return rc;
}

static int run_suite(const char *address, suite *s)
{
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  int rc = tsr_client_open(&client, address, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = random_arrays(s, ctx);
  if (rc == 0) rc = elementwise_and_reductions(s, ctx);
  if (rc == 0) rc = linear_algebra(s, ctx);
  if (rc != 0) fprintf(stderr, "  suite: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return rc;
}

static double as_double(const result *r, size_t i)
{
  switch (r->dtype) {
  case TSR_F64: return ((const double *)r->data)[i];
  case TSR_F32: return ((const float *)r->data)[i];
  case TSR_U8: return ((const uint8_t *)r->data)[i];
  case TSR_I32: return ((const int32_t *)r->data)[i];
  default: return (double)((const int64_t *)r->data)[i];
  }
}

/* Returns the number of results that differ, printing each. */
static int compare(const char *label, const suite *got, const suite *want)
{
  int bad = 0;
  for (int i = 0; i < want->n; i++) {
    const result *g = &got->r[i], *w = &want->r[i];
    if (i >= got->n || g->nbytes != w->nbytes) {
      fprintf(stderr, "  %s: %s missing or of another size\n", label, w->name);
      bad++;
      continue;
    }
    if (w->tol == 0) {
      if (memcmp(g->data, w->data, w->nbytes) != 0) {
        fprintf(stderr, "  %s: %s is not bit-identical to the CPU result\n", label, w->name);
        bad++;
      }
      continue;
    }
    size_t n = w->nbytes / tsr_dtype_size(w->dtype);
    double scale = 0, worst = 0;
    for (size_t k = 0; k < n; k++) scale = fmax(scale, fabs(as_double(w, k)));
    for (size_t k = 0; k < n; k++) worst = fmax(worst, fabs(as_double(g, k) - as_double(w, k)));
    double rel = worst / (scale > 0 ? scale : 1);
    fprintf(stderr, "  %s: %s: max relative difference %.3g (tolerance %.0e)\n", label, w->name, rel, w->tol);
    if (!(rel <= w->tol)) bad++;
  }
  return bad;
}

/* ---------- tests ---------- */

TEST(gpu_results_equal_cpu_results)
{
  suite ref = {0}, mixed = {0}, alone = {0};
  cluster c;
  ASSERT_EQ(start(&c, "cpu", NULL, NULL), 0);
  int rc = run_suite(c.address, &ref);
  cluster_stop(&c, rc != 0);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(start(&c, "mixed", NULL, NULL), 0);
  rc = run_suite(c.address, &mixed);
  cluster_stop(&c, rc != 0);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(start(&c, "gpu", NULL, NULL), 0);
  rc = run_suite(c.address, &alone);
  cluster_stop(&c, rc != 0);
  ASSERT_EQ(rc, 0);
  int bad = compare("gpu+cpu", &mixed, &ref) + compare("gpu alone", &alone, &ref);
  suite_free(&ref);
  suite_free(&mixed);
  suite_free(&alone);
  ASSERT_EQ(bad, 0);
}

/* One f64 chunk of rows x 1024 (rows x 8 KiB). */
static int compute_rows(tsr_array_ctx *ctx, int64_t rows, int64_t chunk_rows, uint64_t seed, char *key, size_t cap)
{
  int64_t shape[2] = {rows, 1024}, chunks[2] = {chunk_rows, 1024}, idx[2] = {rows / chunk_rows - 1, 0};
  tsr_array *a = NULL, *kept = NULL;
  int rc = tsr_random_uniform(ctx, seed, TSR_F64, 2, shape, chunks, &a);
  if (rc == 0) snprintf(key, cap, "%s", tsr_array_chunk_key(a, idx));
  if (rc == 0) rc = tsr_persist(ctx, a, 60000, &kept);
  tsr_array_free(ctx, &kept);
  tsr_array_free(ctx, &a);
  return rc;
}

/* The worker's status entry (frequent heartbeats: fresh), or false. */
static bool worker_info(tsr_client *client, tsr_worker_info *out)
{
  tsr_cluster_info *info = NULL;
  bool ok = tsr_cluster_info_get(client, 5000, &info) == 0 && info->n_workers == 1;
  if (ok) *out = info->workers[0];
  tsr_cluster_info_destroy(&info);
  return ok;
}

TEST(chunk_over_device_memory_limit_fails_and_chunks_together_over_it_make_room)
{
  cluster c;
  const char *limit[] = {"--device-memory-limit", "48MiB", "--heartbeat-interval", "100ms", NULL};
  ASSERT_EQ(start(&c, "gpu", limit, NULL), 0);
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  char key[256] = "";
  bool ok = tsr_client_open(&client, c.address, NULL) == 0 && tsr_array_ctx_new(client, &ctx) == 0;
  /* one 64 MiB chunk: more than the limit by itself */
  int rc = ok ? compute_rows(ctx, 8192, 8192, 1, key, sizeof key) : TSR_ECONN;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", tsr_errmsg());
  fprintf(stderr, "  one big chunk: %s: %s\n", tsr_err_name(rc), msg);
  bool big_ok = rc == TSR_ETASK && strstr(msg, "device memory limit") && strstr(msg, "48.00 MiB") && strstr(msg, key);
  bool alive = cluster_alive(c.workers[0]);
  /* eight 16 MiB chunks kept together (128 MiB): the device tier makes
   * room. Random chunks no task waits for (a persist) are dropped, not
   * copied down (devtier.h); a later read makes them again, unchanged. */
  int64_t shape[2] = {16384, 1024}, chunks[2] = {2048, 1024};
  tsr_array *a = NULL, *kept = NULL, *sum_kept = NULL, *sum_fresh = NULL;
  rc = ok ? tsr_random_uniform(ctx, 2, TSR_F64, 2, shape, chunks, &a) : TSR_ECONN;
  if (rc == 0) rc = tsr_persist(ctx, a, 60000, &kept);
  if (rc != 0) fprintf(stderr, "  eight chunks: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_worker_info w = {0};
  usleep(300000);
  bool made_room = worker_info(client, &w) && w.device_bytes_moved + w.device_bytes_dropped >= (64u << 20) &&
                   w.device_memory_used <= (48u << 20);
  fprintf(stderr, "  eight chunks: %llu bytes moved to host, %llu dropped, %llu on the device\n",
          (unsigned long long)w.device_bytes_moved, (unsigned long long)w.device_bytes_dropped,
          (unsigned long long)w.device_memory_used);
  static double col_kept[1024], col_fresh[1024];
  int rc_sum = rc == 0 ? tsr_sum(ctx, kept, 0, 0, &sum_kept) : rc;
  if (rc_sum == 0) rc_sum = tsr_sum(ctx, a, 0, 0, &sum_fresh);
  if (rc_sum == 0) rc_sum = tsr_compute(ctx, sum_kept, col_kept, sizeof col_kept, 60000);
  if (rc_sum == 0) rc_sum = tsr_compute(ctx, sum_fresh, col_fresh, sizeof col_fresh, 60000);
  if (rc_sum != 0) fprintf(stderr, "  sums: %s: %s\n", tsr_err_name(rc_sum), tsr_errmsg());
  bool same = rc_sum == 0 && memcmp(col_kept, col_fresh, sizeof col_kept) == 0;
  fprintf(stderr, "  column sums of the kept array %s those of a fresh one (%.6f)\n", same ? "equal" : "DIFFER FROM",
          col_kept[0]);
  tsr_array_free(ctx, &sum_kept);
  tsr_array_free(ctx, &sum_fresh);
  tsr_array_free(ctx, &kept);
  tsr_array_free(ctx, &a);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  cluster_stop(&c, !(big_ok && alive && rc == 0 && made_room && same));
  ASSERT_TRUE(big_ok);
  ASSERT_TRUE(alive);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(made_room);
  ASSERT_TRUE(w.device_bytes_dropped > 0);
  ASSERT_TRUE(same);
}

/* The SVD of a materialized X2 (graphs.h): 64 MiB, 256 chunks of 256 KiB. */
#define SVD_ROWS 65536
#define SVD_COLS 1024
#define SVD_K 5

static int svd_of_materialized(const char *address, double *s, double *v)
{
  return svd_of_materialized_x2(address, SVD_ROWS, SVD_COLS, 256, SVD_K, 300000, s, v);
}

TEST(device_tier_moves_chunks_to_host_and_disk_bit_identically)
{
  static double s_ref[SVD_K], v_ref[SVD_K * SVD_COLS], s_lim[SVD_K], v_lim[SVD_K * SVD_COLS];
  cluster c;
  ASSERT_EQ(start(&c, "gpu", NULL, NULL), 0);
  int rc = svd_of_materialized(c.address, s_ref, v_ref);
  cluster_stop(&c, rc != 0);
  ASSERT_EQ(rc, 0);
  /* X2 is 64 MiB: four times the device limit (which must hold cuSOLVER's
   * 6 MiB QR workspace beside the other streams' tasks); the host keeps
   * 0.6 x 32 MiB and spills the rest */
  const char *limits[] = {"--device-memory-limit", "16MiB", "--memory-limit", "32MiB", "--heartbeat-interval", "100ms", NULL};
  ASSERT_EQ(start(&c, "gpu", limits, NULL), 0);
  rc = svd_of_materialized(c.address, s_lim, v_lim);
  tsr_client *client = NULL;
  tsr_worker_info w = {0};
  usleep(300000);
  bool info = tsr_client_open(&client, c.address, NULL) == 0 && worker_info(client, &w);
  tsr_client_close(client);
  fprintf(stderr, "  limited: %llu bytes moved to host, %llu dropped; %llu spilled to disk\n",
          (unsigned long long)w.device_bytes_moved, (unsigned long long)w.device_bytes_dropped,
          (unsigned long long)w.bytes_spilled);
  bool same = rc == 0 && memcmp(s_lim, s_ref, sizeof s_ref) == 0 && memcmp(v_lim, v_ref, sizeof v_ref) == 0;
  fprintf(stderr, "  s %.17g .. %.17g (unlimited %.17g): %s\n", s_lim[0], s_lim[SVD_K - 1], s_ref[0],
          same ? "bit-identical" : "DIFFERENT");
  cluster_stop(&c, !(same && info));
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(same);
  ASSERT_TRUE(info);
  ASSERT_TRUE(w.device_bytes_moved >= (uint64_t)SVD_ROWS * SVD_COLS / 2);
  ASSERT_TRUE(w.bytes_spilled > 0);
}

/* x_i = random chunks (GPU), z = sleep on x_0 (CPU-only: the CPU worker,
 * which fetches x_0 from the GPU worker), root = add(sum(x_i)..., z as
 * f64). The GPU worker is killed while z sleeps: its sums are lost and
 * recomputed on the CPU worker. */
static int build_kill_graph(tsr_graph *g, const char *prefix, int64_t sleep_ms, char *root, size_t cap)
{
  enum { N = 8, LEN = 1 << 20 };
  char keys[N + 1][64];
  const char *sums[N + 1];
  int rc = 0;
  for (int i = 0; rc == 0 && i < N; i++) {
    char x[64];
    snprintf(x, sizeof x, "%s-x%d", prefix, i);
    snprintf(keys[i], sizeof keys[i], "%s-s%d", prefix, i);
    const char *in = x;
    rc = add_uniform(g, x, LEN, (int64_t)i * LEN, (int64_t)N * LEN, 99);
    if (rc == 0) rc = add_plain(g, keys[i], "sum", &in, 1);
    sums[i] = keys[i];
  }
  char z[64], x0[64];
  snprintf(z, sizeof z, "%s-z", prefix);
  snprintf(x0, sizeof x0, "%s-x0", prefix);
  snprintf(keys[N], sizeof keys[N], "%s-zf", prefix);
  const char *zin = z, *xin = x0;
  tsr_args *a = NULL;
  if (rc == 0) rc = add_sleep(g, z, sleep_ms, &xin, 1);
  if (rc == 0) rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_str(a, "dtype", "f64");
  if (rc == 0) rc = tsr_graph_add_args(g, keys[N], "astype", a, &zin, 1);
  tsr_args_destroy(&a);
  sums[N] = keys[N];
  snprintf(root, cap, "%s-root", prefix);
  if (rc == 0) rc = add_plain(g, root, "add", sums, N + 1);
  if (rc == 0) rc = tsr_graph_want(g, root);
  return rc;
}

static int run_graph(tsr_client *client, const char *prefix, int64_t sleep_ms, int kill_after_ms, cluster *c,
                     double *value_p)
{
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  char root[64];
  int rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_kill_graph(g, prefix, sleep_ms, root, sizeof root);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0 && kill_after_ms > 0) {
    usleep((useconds_t)kill_after_ms * 1000);
    size_t done = 0, total = 0;
    tsr_future_progress(f, &done, &total);
    if (done == total) rc = TSR_EINVAL, fprintf(stderr, "  the graph finished before the kill\n");
    fprintf(stderr, "  SIGKILL to the GPU worker (pid %d)\n", (int)c->workers[0]);
    cluster_signal_worker(c, 0, SIGKILL);
  }
  if (rc == 0) rc = tsr_future_wait(f, 120000);
  if (rc != 0) fprintf(stderr, "  graph %s: %s: %s %s\n", prefix, tsr_err_name(rc), tsr_errmsg(),
                       f && tsr_future_error(f) ? tsr_future_error(f) : "");
  if (rc == 0) rc = gather_f64(client, root, value_p);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  return rc;
}

TEST(gpu_worker_killed_mid_graph_is_recovered)
{
  cluster c;
  const char *sched[] = {"--heartbeat-interval", "200ms", "--heartbeat-timeout", "1500ms", NULL};
  ASSERT_EQ(start(&c, "mixed", NULL, sched), 0);
  tsr_client *client = NULL;
  double got = 0, want = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = run_graph(client, "k", 3000, 1000, &c, &got);
  /* the same sums again (other keys), now on the CPU worker alone */
  if (rc == 0) rc = run_graph(client, "e", 3000, 0, &c, &want);
  tsr_client_close(client);
  fprintf(stderr, "  after the kill %.17g, recomputed %.17g\n", got, want);
  cluster_stop(&c, rc != 0 || fabs(got - want) > 1e-9 * fabs(want));
  ASSERT_EQ(rc, 0);
  ASSERT_NEAR(got, want, 1e-9);
  ASSERT_TRUE(want > 3000);
}

/* ---------- falling back to the CPU variant; solver failures ---------- */

static int add_full_typed(tsr_graph *g, const char *key, int64_t n, const char *dtype, int64_t value)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_ints(a, "shape", &n, 1);
  if (rc == 0) rc = tsr_args_str(a, "dtype", dtype);
  if (rc == 0) rc = tsr_args_int(a, "value", value);
  if (rc == 0) rc = tsr_graph_add_args(g, key, "full", a, NULL, 0);
  tsr_args_destroy(&a);
  return rc;
}

/* Submits g (consumed), waits, gathers key into *chunk_p on success; the
 * task's message goes to msg. */
static int submit_gather(tsr_client *client, tsr_graph *g, const char *key, tsr_chunk **chunk_p, char *msg, size_t cap)
{
  tsr_future *f = NULL;
  int rc = tsr_graph_want(g, key);
  if (rc == 0) rc = tsr_submit(client, &g, &f);
  if (rc == 0) rc = tsr_future_wait(f, 60000);
  snprintf(msg, cap, "%s %s", tsr_errmsg(), f && tsr_future_error(f) ? tsr_future_error(f) : "");
  if (rc == 0) rc = tsr_gather(client, key, 60000, chunk_p);
  tsr_future_release(&f);
  tsr_graph_destroy(&g);
  return rc;
}

/* i32 [7 ...] / [2 ...] (or / [0 ...]) computed on the GPU worker. */
static int int_div(tsr_client *client, const char *prefix, int64_t divisor, int32_t *first, char *msg, size_t cap)
{
  char a[32], b[32], q[32];
  snprintf(a, sizeof a, "%s-a", prefix), snprintf(b, sizeof b, "%s-b", prefix), snprintf(q, sizeof q, "%s-q", prefix);
  tsr_graph *g = NULL;
  tsr_chunk *out = NULL;
  const char *in[2] = {a, b};
  int rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_full_typed(g, a, 1000, "i32", -7);
  if (rc == 0) rc = add_full_typed(g, b, 1000, "i32", divisor);
  if (rc == 0) rc = add_plain(g, q, "div", in, 2);
  if (rc == 0) rc = submit_gather(client, g, q, &out, msg, cap);
  else tsr_graph_destroy(&g);
  if (rc == 0 && (out->dtype != TSR_I32 || out->nbytes != 4000)) rc = TSR_ESHAPE;
  if (rc == 0) *first = ((const int32_t *)out->data)[999];
  tsr_chunk_destroy(&out);
  return rc;
}

/* svd of a 60 x 40 uniform matrix with Jacobi limited to max_sweeps. */
static int jacobi_svd(tsr_client *client, const char *prefix, int64_t max_sweeps, char *msg, size_t cap)
{
  char x[32], m[32], s[32];
  snprintf(x, sizeof x, "%s-x", prefix), snprintf(m, sizeof m, "%s-m", prefix), snprintf(s, sizeof s, "%s-s", prefix);
  tsr_graph *g = NULL;
  tsr_chunk *out = NULL;
  tsr_args *a = NULL;
  int64_t shape[2] = {60, 40};
  const char *in = x, *min = m;
  int rc = tsr_graph_new(&g);
  if (rc == 0) rc = add_uniform(g, x, 2400, 0, 2400, 5);
  if (rc == 0) rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_ints(a, "shape", shape, 2);
  if (rc == 0) rc = tsr_args_int(a, "offset", 0);
  if (rc == 0) rc = tsr_graph_add_args(g, m, "view", a, &in, 1);
  tsr_args_destroy(&a);
  if (rc == 0) rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_str(a, "algo", "gesvdj");
  if (rc == 0) rc = tsr_args_int(a, "max_sweeps", max_sweeps);
  if (rc == 0) rc = tsr_graph_add_args(g, s, "svd", a, &min, 1);
  tsr_args_destroy(&a);
  if (rc == 0) rc = submit_gather(client, g, s, &out, msg, cap);
  else tsr_graph_destroy(&g);
  for (size_t i = 0; rc == 0 && i < out->nbytes / 8; i++)
    if (isnan(((const double *)out->data)[i])) rc = TSR_EINVAL;
  tsr_chunk_destroy(&out);
  return rc;
}

TEST(gpu_worker_falls_back_to_cpu_and_reports_solver_failures)
{
  cluster c;
  ASSERT_EQ(start(&c, "gpu", NULL, NULL), 0);
  tsr_client *client = NULL;
  char msg_div[1024] = "", msg_zero[1024] = "", msg_svd[1024] = "", msg_ok[1024] = "";
  int32_t q = 0, unused = 0;
  int rc = tsr_client_open(&client, c.address, NULL);
  int rc_div = rc == 0 ? int_div(client, "d", 2, &q, msg_div, sizeof msg_div) : rc;
  int rc_zero = rc == 0 ? int_div(client, "z", 0, &unused, msg_zero, sizeof msg_zero) : rc;
  int rc_svd = rc == 0 ? jacobi_svd(client, "j1", 1, msg_svd, sizeof msg_svd) : rc;
  int rc_ok = rc == 0 ? jacobi_svd(client, "j100", 100, msg_ok, sizeof msg_ok) : rc;
  bool alive = cluster_alive(c.workers[0]);
  tsr_client_close(client);
  fprintf(stderr, "  integer div on the GPU worker: %s, -7/2 = %d\n", tsr_err_name(rc_div), (int)q);
  fprintf(stderr, "  divisor 0: %s: %s\n", tsr_err_name(rc_zero), msg_zero);
  fprintf(stderr, "  gesvdj, 1 sweep: %s: %s\n", tsr_err_name(rc_svd), msg_svd);
  fprintf(stderr, "  gesvdj, 100 sweeps: %s\n", tsr_err_name(rc_ok));
  cluster_stop(&c, rc_div != 0 || rc_ok != 0);
  ASSERT_EQ(rc_div, 0);
  ASSERT_EQ(q, -3);  /* C division truncates toward zero, as the CPU variant */
  ASSERT_EQ(rc_zero, TSR_ETASK);
  ASSERT_CONTAINS(msg_zero, "div: integer division by zero (element 0 of input 1 is 0)");
  ASSERT_EQ(rc_svd, TSR_ETASK);
  ASSERT_CONTAINS(msg_svd, "svd: cuSOLVER gesvdj did not converge (info");
  ASSERT_EQ(rc_ok, 0);
  ASSERT_TRUE(alive);
}

/* ---------- genotype PCA on a GPU worker ---------- */

/* HapMap3's top-10 eigenvalues on a GPU worker: the PLINK chunks read on
 * the host and kept packed on the device, the column statistics, the
 * folded standardization on the int8 kernels (X0 and the missing mask),
 * block Krylov (six iterations) and the exact SVD of Zᵀ: all within 1e-4
 * of the exact binom2 eigenvalues (SOURCE.md's reference column). */
TEST(genotype_pca_on_the_gpu_matches_the_reference)
{
  char prefix[600], ref_path[700];
  snprintf(prefix, sizeof prefix, "%s/HM3_thinned_autosomal_overlap", plink_data_dir());
  snprintf(ref_path, sizeof ref_path, "%s/reference/hm3.exact_eigh_binom2.txt", plink_data_dir());
  double ref[10];
  ASSERT_EQ(read_column(ref_path, 1, ref, 10), 10);  /* the data must be there: TSR_PLINK_DATA on the GPU machine */
  cluster c;
  ASSERT_EQ(start(&c, "gpu", NULL, NULL), 0);
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL;
  int rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_from_plink(ctx, prefix, NULL, &x);
  double ev[2][10];
  for (int m = 0; m < 2 && rc == 0; m++) {
    tsr_pca_opts o = TSR_PCA_OPTS_DEFAULT;
    o.method = m == 0 ? TSR_PCA_COMPRESSED : TSR_PCA_EXACT;
    tsr_array *e = NULL, *s = NULL, *l = NULL;
    rc = tsr_pca(ctx, x, &o, &e, &s, &l);
    if (rc == 0) rc = tsr_compute(ctx, s, ev[m], sizeof ev[m], 120000);
  }
  if (rc != 0) fprintf(stderr, "  pca: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  double worst[2] = {0, 0};
  for (int m = 0; rc == 0 && m < 2; m++)
    for (int i = 0; i < 10; i++) worst[m] = fmax(worst[m], fabs(ev[m][i] - ref[i]) / ref[i]);
  fprintf(stderr, "  HM3 on the GPU: compressed within %.2e, exact within %.2e of the exact eigenvalues\n", worst[0],
          worst[1]);
  cluster_stop(&c, rc != 0 || worst[0] > 1e-4 || worst[1] > 1e-4);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(worst[0] <= 1e-4);
  ASSERT_TRUE(worst[1] <= 1e-4);
}

/* ---------- a plugin op's CUDA entry ---------- */

static void data_path(char *out, size_t cap, const char *env, const char *fallback, const char *name)
{
  const char *dir = getenv(env);
  snprintf(out, cap, "%s/%s", dir && dir[0] ? dir : fallback, name);
}

/* Every tile's tile_embed (dim 16, seed 7) of the CMU-1 region on one
 * worker loading the example plugin: a GPU worker (debug log kept in log)
 * or a CPU worker. */
static int embed_slide(bool gpu, float *e, size_t bytes, char *log, size_t cap)
{
  char plugin[700], slide[700];
  data_path(plugin, sizeof plugin, "TSR_PLUGIN_DATA", TSR_PLUGIN_DIR, "libtsr_tile_embed.so");
  data_path(slide, sizeof slide, "TSR_WSI_DATA", TSR_WSI_DIR, "CMU-1-Small-Region.svs");
  const char *gpu_args[] = {"--gpu", "0", "--op-plugin", plugin, "--log-level", "debug", NULL};
  const char *cpu_args[] = {"--op-plugin", plugin, NULL};
  cluster c;
  memset(&c, 0, sizeof c);
  int rc = cluster_start_scheduler(&c, NULL);
  if (rc == 0 && cluster_add_worker(&c, gpu ? GPU_STREAMS : 2, gpu ? gpu_args : cpu_args) < 0) rc = -1;
  if (rc == 0) rc = wait_workers(&c, 1);
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *img = NULL, *emb = NULL;
  tsr_args *args = NULL;
  tsr_tile_opts o = {256, false};
  if (rc == 0) rc = tsr_client_open(&client, c.address, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_int(args, "seed", 7);
  if (rc == 0) rc = tsr_from_tiff(ctx, slide, 0, 256, &img);
  if (rc == 0) rc = tsr_tile_map(ctx, img, &o, "tile_embed", args, TSR_F32, 16, &emb);
  if (rc == 0) rc = tsr_compute(ctx, emb, e, bytes, 120000);
  if (rc != 0) fprintf(stderr, "  tile_embed on a %s worker: %s %s\n", gpu ? "GPU" : "CPU", tsr_err_name(rc), tsr_errmsg());
  tsr_args_destroy(&args);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  char path[400];
  snprintf(path, sizeof path, "%s/worker-0.log", c.dir);
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(log, 1, cap - 1, f) : 0;
  log[got] = '\0';
  if (f) fclose(f);
  cluster_stop(&c, rc != 0);
  return rc;
}

/* The example plugin built with CUDA (examples/plugins/tile_embed_cuda.cu):
 * a GPU worker runs its CUDA entry on its stream and gets the CPU entry's
 * bytes (integer sums, one formula). */
TEST(plugin_cuda_entry_gives_the_cpu_entrys_bytes)
{
  static float on_cpu[9 * 12 * 16], on_gpu[9 * 12 * 16];
  static char log[1 << 20], cpu_log[1 << 16];
  ASSERT_OK(embed_slide(false, on_cpu, sizeof on_cpu, cpu_log, sizeof cpu_log));
  ASSERT_OK(embed_slide(true, on_gpu, sizeof on_gpu, log, sizeof log));
  ASSERT_CONTAINS(log, "tile_embed ran on gpu:0");
  int differ = 0;
  for (size_t i = 0; i < sizeof on_cpu / sizeof on_cpu[0]; i++) differ += memcmp(&on_cpu[i], &on_gpu[i], 4) != 0;
  fprintf(stderr, "  tile_embed: %d of %zu values differ between the CUDA and the CPU entry\n", differ,
          sizeof on_cpu / sizeof on_cpu[0]);
  ASSERT_EQ(differ, 0);
  double norm = 0;
  for (size_t i = 0; i < sizeof on_cpu / sizeof on_cpu[0]; i++) norm += (double)on_cpu[i] * on_cpu[i];
  ASSERT_TRUE(norm > 0);
}

int main(void)
{
  if (!have_gpu()) {
    printf("SKIPPED: no GPU\n");
    return KIT_SKIP;
  }
  RUN(gpu_results_equal_cpu_results);
  RUN(chunk_over_device_memory_limit_fails_and_chunks_together_over_it_make_room);
  RUN(device_tier_moves_chunks_to_host_and_disk_bit_identically);
  RUN(gpu_worker_killed_mid_graph_is_recovered);
  RUN(gpu_worker_falls_back_to_cpu_and_reports_solver_failures);
  RUN(genotype_pca_on_the_gpu_matches_the_reference);
  RUN(plugin_cuda_entry_gives_the_cpu_entrys_bytes);
  return kit_summary();
}
