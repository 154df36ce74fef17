/* tsr-bench-gpu-pair — the client of bench/transfer_gpu.sh: moves device
 * chunks between the GPU workers of a running cluster through the public
 * API. For each chunk size it multiplies two random f64 arrays of
 * --chunks chunks each (made wherever the scheduler put them, so about
 * half the products fetch an input from the other worker) and sums the
 * product down to one value per chunk row block, which alone comes back.
 * The transfers are timed by the workers themselves (their debug log:
 * "fetched input ... in X ms"); this program prints each rep's start
 * (UTC, as the logs) and wall. Rep 0 of each size is the warm-up: new
 * connections, new shared buffers, CUDA IPC handles opened.
 *
 *   tsr-bench-gpu-pair [--sizes 1024,1048576,67108864] [--chunks 8] [--reps 3]
 * with $TESSERA_SCHEDULER naming the scheduler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/array.h"
#include "tessera/tessera.h"

#define COLS 1024   /* a chunk is rows x 1024 f64, or 1 x n for small sizes */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* HH:MM:SS.mmm in UTC, as the daemons' log lines start (common/util/log.c),
 * so that the script can tell a rep's fetches from the warm-up's. */
static void utc_now(char *out, size_t cap)
{
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  snprintf(out, cap, "%02d:%02d:%02d.%03ld", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
}

/* One size: a * b summed over axis 1, each row block's sums gathered. */
static int one_size(tsr_array_ctx *ctx, int64_t bytes, int64_t n_chunks, uint64_t seed, double *wall_s)
{
  int64_t elems = bytes / 8, cols = elems >= COLS ? COLS : elems, rows = elems / cols;
  int64_t shape[2] = {rows * n_chunks, cols}, chunks[2] = {rows, cols};
  tsr_array *a = NULL, *b = NULL, *ab = NULL, *sum = NULL;
  double t0 = now_s();
  int rc = tsr_random_uniform(ctx, seed, TSR_F64, 2, shape, chunks, &a);
  if (rc == 0) rc = tsr_random_normal(ctx, seed + 1, TSR_F64, 2, shape, chunks, &b);
  if (rc == 0) rc = tsr_mul(ctx, a, b, &ab);
  if (rc == 0) rc = tsr_sum(ctx, ab, 1, 0, &sum);
  double *out = malloc((size_t)shape[0] * sizeof *out);
  if (rc == 0) rc = out == NULL ? TSR_ENOMEM : tsr_compute(ctx, sum, out, (size_t)shape[0] * sizeof *out, 300000);
  *wall_s = now_s() - t0;
  free(out);
  tsr_array_free(ctx, &a);
  tsr_array_free(ctx, &b);
  tsr_array_free(ctx, &ab);
  tsr_array_free(ctx, &sum);
  return rc;
}

int main(int argc, char **argv)
{
  const char *sizes = "1024,1048576,67108864";
  long n_chunks = 8, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--sizes") == 0) sizes = argv[i + 1];
    else if (strcmp(argv[i], "--chunks") == 0) n_chunks = strtol(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--reps") == 0) reps = strtol(argv[i + 1], NULL, 10);
    else {
      fprintf(stderr, "usage: tsr-bench-gpu-pair [--sizes B,B,...] [--chunks N] [--reps N]\n");
      return 2;
    }
  }
  const char *address = getenv("TESSERA_SCHEDULER");
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  int rc = tsr_client_open(&client, address, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  char *list = strdup(sizes);
  uint64_t seed = 100;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); rc == 0 && tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    int64_t bytes = strtoll(tok, NULL, 10);
    for (long r = 0; rc == 0 && r < reps; r++, seed += 2) {
      double wall = 0;
      char start[32];
      utc_now(start, sizeof start);
      rc = one_size(ctx, bytes, n_chunks, seed, &wall);
      if (rc == 0) printf("size %lld rep %ld start %s: %.4f s\n", (long long)bytes, r, start, wall);
      fflush(stdout);
    }
  }
  if (rc != 0) fprintf(stderr, "tsr-bench-gpu-pair: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  free(list);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return rc == 0 ? 0 : 1;
}
