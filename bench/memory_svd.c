/* tsr-memory-svd: the randomized SVD (svd_compressed, k, n_power_iter) of
 * a materialized uint8 matrix X2 = scale(randint(0, 3), 1, 1): X2's chunks
 * are computed once, stored on the workers and read by every pass (six
 * passes with two power iterations), so on memory-limited workers they
 * must be spilled and reloaded (the random X itself is dropped and
 * recomputed, never written). Prints the wall time, the singular values
 * and an FNV-1a hash of s and v, so a limited and an unlimited run can be
 * compared bit for bit, then each worker's tier counters (bytes spilled
 * and dropped; on GPU workers, device bytes moved to host and dropped).
 * Driven by bench/memory.sh and bench/gpu_memory.sh; uses the public API.
 *
 *   tessera local -- tsr-memory-svd --rows 40000 --cols 16000 --chunk-rows 1000 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/linalg.h"

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* One "tiers:" line per worker, from the scheduler's latest heartbeats
 * (after one more heartbeat interval, so they cover the whole run). */
static void print_tiers(tsr_client *client)
{
  tsr_cluster_info *info = NULL;
  nanosleep(&(struct timespec){1, 200000000}, NULL);
  if (tsr_cluster_info_get(client, 5000, &info) != 0) return;
  for (size_t i = 0; i < info->n_workers; i++) {
    const tsr_worker_info *w = &info->workers[i];
    printf("tiers: %s %s spilled=%llu dropped=%llu device_moved=%llu device_dropped=%llu\n", w->name, w->device,
           (unsigned long long)w->bytes_spilled, (unsigned long long)w->bytes_dropped,
           (unsigned long long)w->device_bytes_moved, (unsigned long long)w->device_bytes_dropped);
  }
  tsr_cluster_info_destroy(&info);
}

static int64_t arg_i64(int argc, char **argv, const char *flag, int64_t fallback)
{
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], flag) == 0) return strtoll(argv[i + 1], NULL, 10);
  return fallback;
}

int main(int argc, char **argv)
{
  int64_t rows = arg_i64(argc, argv, "--rows", 40000), cols = arg_i64(argc, argv, "--cols", 16000);
  int64_t chunk_rows = arg_i64(argc, argv, "--chunk-rows", 1000);
  int k = (int)arg_i64(argc, argv, "--k", 10), iters = (int)arg_i64(argc, argv, "--power-iters", 2);
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *x2 = NULL, *u = NULL, *s = NULL, *v = NULL;
  int64_t shape[2] = {rows, cols}, chunks[2] = {chunk_rows, cols};
  double *sv = calloc((size_t)k, sizeof *sv), *vv = calloc((size_t)k * (size_t)cols, sizeof *vv);
  double t0 = now_s();
  int rc = tsr_client_open(&client, NULL, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_randint(ctx, 42, 0, 3, TSR_U8, 2, shape, chunks, &x);
  if (rc == 0) rc = tsr_scale(ctx, x, 1.0, 1.0, &x2);
  tsr_svd_opts so = TSR_SVD_OPTS_DEFAULT;
  so.n_power_iter = iters;
  if (rc == 0) rc = tsr_svd_compressed(ctx, x2, k, &so, &u, &s, &v);
  const tsr_array *outs[2] = {s, v};
  void *bufs[2] = {sv, vv};
  size_t caps[2] = {(size_t)k * sizeof *sv, (size_t)k * (size_t)cols * sizeof *vv};
  if (rc == 0) rc = tsr_compute_many(ctx, outs, 2, bufs, caps, -1);
  double wall = now_s() - t0;
  if (rc != 0) {
    fprintf(stderr, "tsr-memory-svd: %s: %s\n", tsr_strerror(rc), tsr_errmsg());
  } else {
    uint64_t h = fnv1a(fnv1a(14695981039346656037ull, sv, caps[0]), vv, caps[1]);
    printf("svd_s=%.3f rows=%lld cols=%lld X2=%.2fGiB hash=%016llx s=", wall, (long long)rows, (long long)cols,
           (double)rows * (double)cols / (1 << 30), (unsigned long long)h);
    for (int i = 0; i < k; i++) printf("%s%.10g", i ? "," : "", sv[i]);
    printf("\n");
    print_tiers(client);
  }
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  free(sv);
  free(vv);
  return rc == 0 ? 0 : 1;
}
