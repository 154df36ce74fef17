/* Device chunks between two GPU workers (label gpu; skipped with 77 where
 * no GPU can be used), and the genotype SVD spread over two GPU workers.
 *
 * Chunks: two workers on one GPU, both on --transport ucx,
 * multiply 16 MiB f64 chunks that were made on either worker, so about
 * half the products need a chunk from the other worker.
 *
 * - With a CUDA-aware UCX (the device machine: scripts/device-tests.sh
 *   builds one and sets TSR_UCX_CUDA=1) the chunks move by cuda_ipc: the
 *   workers received inputs into device memory, served every device chunk
 *   (to each other and to the client) from device memory, made no host copy
 *   of a device chunk and copied nothing up from the host: zero staging.
 *   With the device arena (the default) no device copy either: chunks are
 *   sent from and received into the memory they live in.
 * - The same graph with TESSERA_DEVICE_ARENA=0 moves device to device
 *   through shared buffers (device copies counted), and with
 *   TESSERA_DEVICE_TRANSFER=0 through host copies (so the counters are not
 *   blind); all three give the same bytes.
 * Uses only the public API; the counters come from each worker's exit log
 * line (worker.c, log_share_stats).
 *
 * SVD (issue 16): bench/svd_gpu.c's randomized SVD of a 2-bit packed 0..2
 * genotype matrix, persisted, on one GPU worker and on two (GPUs 0 and 1
 * where the machine has two, else both on GPU 0), all over UCX: each
 * worker holds a share of X and the thin reductions combine across them;
 * s agrees within 1e-12 relative. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "kit.h"
#include "tessera/array.h"
#include "tessera/linalg.h"
#include "tessera/tessera.h"

#define ROWS 16384
#define COLS 1024
#define CHUNK_ROWS 2048   /* 8 chunks of 16 MiB */

typedef struct share_counts {
  unsigned long long served, host_copies, received, device_copies;
  bool copied_up_nothing;
} share_counts;

typedef enum { IN_PLACE, SHARED_BUFFERS, THROUGH_HOST } xfer_mode;
static const char *const mode_names[] = {"device to device in place", "device to device through shared buffers",
                                         "through the host"};

static bool have_gpu(void)
{
  char out[4096];
  const char *argv[] = {cluster_bin("tessera-worker"), "--list-gpus", NULL};
  return run_capture(argv, NULL, out, sizeof out, 60) == 0 && out[0] != '\0';
}

/* Reads worker i's exit lines (after it stopped) into counts. */
static bool read_counts(const cluster *c, int i, share_counts *counts)
{
  char path[600], line[8192];
  snprintf(path, sizeof path, "%s/worker-%d.log", c->dir, i);
  FILE *f = fopen(path, "r");
  bool found = false;
  counts->copied_up_nothing = false;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    const char *s = strstr(line, "gpu:0: served ");
    if (s != NULL)
      found = sscanf(s, "gpu:0: served %llu device chunks from device memory (%*[^)]), %llu through host copies; "
                        "received %llu inputs into device memory (%*[^)]); %*u shared buffers made (%*[^)]); %llu "
                        "device copies",
                     &counts->served, &counts->host_copies, &counts->received, &counts->device_copies) == 4;
    if (strstr(line, "gpu:0: copied up 0 B in") != NULL) counts->copied_up_nothing = true;
  }
  if (f != NULL) fclose(f);
  return found;
}

/* Stops the workers with SIGTERM so that they write their exit lines. */
static void stop_workers(cluster *c)
{
  for (int i = 0; i < c->n_workers; i++) cluster_signal_worker(c, i, SIGTERM);
  for (int tries = 0; tries < 200; tries++) {
    bool any = false;
    for (int i = 0; i < c->n_workers; i++) any |= cluster_alive(c->workers[i]);
    if (!any) return;
    usleep(50000);
  }
}

/* a * b of two random f64 arrays (8 chunks each), gathered into out. */
static int multiply(const char *address, double *out)
{
  int64_t shape[2] = {ROWS, COLS}, chunks[2] = {CHUNK_ROWS, COLS};
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *a = NULL, *b = NULL, *ab = NULL;
  int rc = tsr_client_open(&client, address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, 2, 60000);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_random_uniform(ctx, 31, TSR_F64, 2, shape, chunks, &a);
  if (rc == 0) rc = tsr_random_normal(ctx, 32, TSR_F64, 2, shape, chunks, &b);
  if (rc == 0) rc = tsr_mul(ctx, a, b, &ab);
  if (rc == 0) rc = tsr_compute(ctx, ab, out, (size_t)ROWS * COLS * sizeof *out, 120000);
  if (rc != 0) fprintf(stderr, "  multiply: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_array_free(ctx, &a);
  tsr_array_free(ctx, &b);
  tsr_array_free(ctx, &ab);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return rc;
}

/* Runs the graph on two GPU workers and reads their counters. */
static int run_pair(xfer_mode mode, double *out, share_counts counts[2])
{
  const char *args[] = {"--gpu", "0", "--transport", "ucx", "--log-level", "debug", NULL};
  cluster c;
  memset(&c, 0, sizeof c);
  if (mode == THROUGH_HOST) setenv("TESSERA_DEVICE_TRANSFER", "0", 1);
  if (mode == SHARED_BUFFERS) setenv("TESSERA_DEVICE_ARENA", "0", 1);
  int rc = cluster_start_scheduler(&c, NULL) == 0 && cluster_add_worker(&c, 2, args) >= 0 &&
                   cluster_add_worker(&c, 2, args) >= 0
               ? 0
               : -1;
  unsetenv("TESSERA_DEVICE_TRANSFER");
  unsetenv("TESSERA_DEVICE_ARENA");
  setenv("TESSERA_TRANSPORT", "ucx", 1);   /* the client fetches over UCX too */
  if (rc == 0) rc = multiply(c.address, out);
  unsetenv("TESSERA_TRANSPORT");
  stop_workers(&c);
  for (int i = 0; i < 2; i++)
    if (rc == 0 && !read_counts(&c, i, &counts[i])) rc = -1;
  for (int i = 0; rc == 0 && i < 2; i++)
    fprintf(stderr, "  %s, worker %d: served %llu from device memory, %llu through host copies; received %llu into "
                    "device memory; %llu device copies; copied up nothing: %s\n",
            mode_names[mode], i, counts[i].served, counts[i].host_copies, counts[i].received,
            counts[i].device_copies, counts[i].copied_up_nothing ? "yes" : "no");
  cluster_stop(&c, rc != 0);
  return rc;
}

TEST(chunks_move_device_to_device_between_two_gpu_workers)
{
  if (getenv("TSR_UCX_CUDA") == NULL) {
    fprintf(stderr, "  SKIPPED: no CUDA-aware UCX here (scripts/device-tests.sh builds one and sets TSR_UCX_CUDA=1)\n");
    return;
  }
  size_t n = (size_t)ROWS * COLS;
  double *direct = malloc(n * sizeof *direct), *shared = malloc(n * sizeof *shared), *staged = malloc(n * sizeof *staged);
  ASSERT_TRUE(direct != NULL && shared != NULL && staged != NULL);
  share_counts d[2] = {{0}}, b[2] = {{0}}, s[2] = {{0}};
  int rc_direct = run_pair(IN_PLACE, direct, d), rc_shared = run_pair(SHARED_BUFFERS, shared, b),
      rc_staged = run_pair(THROUGH_HOST, staged, s);
  int same = rc_direct == 0 && rc_shared == 0 && rc_staged == 0 && memcmp(direct, staged, n * sizeof *direct) == 0 &&
             memcmp(direct, shared, n * sizeof *direct) == 0;
  double norm = 0;
  for (size_t i = 0; i < n; i += 4099) norm += direct[i] * direct[i];
  free(direct);
  free(shared);
  free(staged);
  ASSERT_EQ(rc_direct, 0);
  ASSERT_EQ(rc_shared, 0);
  ASSERT_EQ(rc_staged, 0);
  ASSERT_TRUE(same);
  ASSERT_TRUE(norm > 0);
  /* device to device in place: inputs arrived in device memory, nothing
   * through the host, no device copy on either side */
  ASSERT_TRUE(d[0].received + d[1].received > 0);
  ASSERT_TRUE(d[0].served + d[1].served >= d[0].received + d[1].received);
  ASSERT_EQ(d[0].host_copies + d[1].host_copies, 0);
  ASSERT_EQ(d[0].device_copies + d[1].device_copies, 0);
  ASSERT_TRUE(d[0].copied_up_nothing && d[1].copied_up_nothing);
  /* through shared buffers: the same, with a device copy per side */
  ASSERT_TRUE(b[0].received + b[1].received > 0);
  ASSERT_EQ(b[0].host_copies + b[1].host_copies, 0);
  ASSERT_TRUE(b[0].device_copies + b[1].device_copies >= b[0].received + b[1].received);
  /* through the host: the same graph counted host copies and uploads */
  ASSERT_EQ(s[0].received + s[1].received, 0);
  ASSERT_TRUE(s[0].host_copies + s[1].host_copies > 0);
  ASSERT_TRUE(!s[0].copied_up_nothing || !s[1].copied_up_nothing);
}

#define SVD_ROWS 200000
#define SVD_COLS 2000
#define SVD_CHUNK 12500   /* 16 chunks of X */
#define SVD_K 10

/* How many GPUs the worker sees (lines of --list-gpus). */
static int gpu_count(void)
{
  char out[4096];
  const char *argv[] = {cluster_bin("tessera-worker"), "--list-gpus", NULL};
  if (run_capture(argv, NULL, out, sizeof out, 60) != 0) return 0;
  int n = 0;
  for (const char *p = out; *p != '\0'; p++) n += *p == '\n';
  return n;
}

/* The SVD of packed X on the cluster at address; held[i]: bytes of X the
 * scheduler placed on worker i once X is persisted. */
static int packed_svd(const char *address, int workers, double *s, double *v, uint64_t *held)
{
  int64_t shape[2] = {SVD_ROWS, SVD_COLS}, chunks[2] = {SVD_CHUNK, SVD_COLS};
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *enc = NULL, *kept = NULL, *u = NULL, *sa = NULL, *va = NULL;
  tsr_cluster_info *info = NULL;
  tsr_compress_opts co = TSR_COMPRESS_OPTS_DEFAULT;
  co.encoding = TSR_ENC_PACKED2;
  tsr_svd_opts so = TSR_SVD_OPTS_DEFAULT;
  so.seed = 5;
  int rc = tsr_client_open(&client, address, NULL);
  if (rc == 0) rc = tsr_wait_for_workers(client, workers, 60000);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_randint(ctx, 11, 0, 3, TSR_U8, 2, shape, chunks, &x);
  if (rc == 0) rc = tsr_compress(ctx, x, &co, &enc);
  if (rc == 0) rc = tsr_persist(ctx, enc, 120000, &kept);
  if (rc == 0) rc = tsr_cluster_info_get(client, 10000, &info);
  for (int i = 0; rc == 0 && i < workers; i++) held[i] = i < (int)info->n_workers ? info->workers[i].memory_held : 0;
  if (rc == 0) rc = tsr_svd_compressed(ctx, kept, SVD_K, &so, &u, &sa, &va);
  const tsr_array *outs[2] = {sa, va};
  void *bufs[2] = {s, v};
  size_t caps[2] = {SVD_K * sizeof *s, (size_t)SVD_K * SVD_COLS * sizeof *v};
  if (rc == 0) rc = tsr_compute_many(ctx, outs, 2, bufs, caps, 300000);
  if (rc != 0) fprintf(stderr, "  packed svd on %d workers: %s: %s\n", workers, tsr_err_name(rc), tsr_errmsg());
  tsr_array *all[] = {x, enc, kept, u, sa, va};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tsr_array_free(ctx, &all[i]);
  tsr_cluster_info_destroy(&info);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return rc;
}

static int svd_on(int workers, bool two_gpus, double *s, double *v, uint64_t *held)
{
  /* over UCX: with a CUDA-aware one the workers allocate from the device
   * arena (cuSOLVER's scratch, stream-ordered frees and all) */
  const char *gpu0[] = {"--gpu", "0", "--transport", "ucx", NULL},
             *gpu1[] = {"--gpu", two_gpus ? "1" : "0", "--transport", "ucx", NULL};
  cluster c;
  memset(&c, 0, sizeof c);
  int rc = cluster_start_scheduler(&c, NULL) == 0 && cluster_add_worker(&c, 2, gpu0) >= 0 &&
                   (workers < 2 || cluster_add_worker(&c, 2, gpu1) >= 0)
               ? 0
               : -1;
  if (rc == 0) rc = packed_svd(c.address, workers, s, v, held);
  cluster_stop(&c, rc != 0);
  return rc;
}

TEST(packed_genotype_svd_on_two_gpu_workers_equals_one)
{
  bool two_gpus = gpu_count() >= 2;
  double s1[SVD_K], s2[SVD_K];
  double *v1 = malloc((size_t)SVD_K * SVD_COLS * sizeof *v1), *v2 = malloc((size_t)SVD_K * SVD_COLS * sizeof *v2);
  uint64_t held1[1] = {0}, held2[2] = {0};
  ASSERT_TRUE(v1 != NULL && v2 != NULL);
  int rc1 = svd_on(1, two_gpus, s1, v1, held1), rc2 = svd_on(2, two_gpus, s2, v2, held2);
  double worst = 0;
  for (int i = 0; rc1 == 0 && rc2 == 0 && i < SVD_K; i++) {
    double rel = fabs(s1[i] - s2[i]) / s1[0];
    if (rel > worst) worst = rel;
  }
  fprintf(stderr, "  %s: X held %.1f MB on one worker, %.1f + %.1f MB on two; s1[0] %.6g, largest |s1 - s2| / s1[0] %.3g\n",
          two_gpus ? "GPUs 0 and 1" : "both on GPU 0", held1[0] / 1e6, held2[0] / 1e6, held2[1] / 1e6, s1[0], worst);
  free(v1);
  free(v2);
  ASSERT_EQ(rc1, 0);
  ASSERT_EQ(rc2, 0);
  ASSERT_TRUE(s1[0] > 0);
  ASSERT_TRUE(held2[0] > 0 && held2[1] > 0);   /* each worker holds a share of X */
  ASSERT_TRUE(worst <= 1e-12);
}

int main(void)
{
  if (!have_gpu()) {
    printf("SKIPPED: no GPU\n");
    return KIT_SKIP;
  }
  RUN(chunks_move_device_to_device_between_two_gpu_workers);
  RUN(packed_genotype_svd_on_two_gpu_workers_equals_one);
  return kit_summary();
}
