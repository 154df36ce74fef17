/* bench/cluster/knn_time.c — times tsr_knn through the public API: loads X
 * (f32 or f64 n x d) from a .npy, builds the exact kNN and computes both
 * outputs. Run under `tessera local`:
 *
 *   build-cpu/bin/tessera local --cpu-workers 1 --threads-per-worker 2 -- \
 *     build-cpu/bin/tsr-knn-time X.npy [K] [CHUNK_ROWS] [OUT_PREFIX]
 *
 * Prints "knn  SECONDS s" (load + kNN + gather of both outputs, one graph;
 * with KNN_TIME_PHASES=1 three graphs, each phase timed). With OUT_PREFIX it also
 * writes OUT_PREFIX.idx (i64 n x k) and OUT_PREFIX.dist (f32 n x k) raw,
 * for comparing with a peer. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tessera/array.h"
#include "tessera/cluster.h"
#include "tessera/tessera.h"

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int die(const char *what, int rc)
{
  fprintf(stderr, "knn_time: %s: %s (%s)\n", what, tsr_strerror(rc), tsr_errmsg());
  return 1;
}

static int save(const char *prefix, const char *ext, const void *buf, size_t bytes)
{
  char path[4096];
  snprintf(path, sizeof path, "%s.%s", prefix, ext);
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  size_t w = fwrite(buf, 1, bytes, f);
  return fclose(f) == 0 && w == bytes ? 0 : -1;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: tsr-knn-time X.npy [K] [CHUNK_ROWS] [OUT_PREFIX]\n");
    return 2;
  }
  int k = argc > 2 ? atoi(argv[2]) : 15;
  int64_t chunk_rows = argc > 3 ? atoll(argv[3]) : 0;
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *idx = NULL, *dist = NULL;
  int rc = tsr_client_open(&client, NULL, NULL);
  if (rc != 0) return die("connect", rc);
  if ((rc = tsr_array_ctx_new(client, &ctx)) != 0) return die("context", rc);
  double t0 = now();
  int64_t chunks[2] = {chunk_rows, 0};
  if ((rc = tsr_from_npy(ctx, argv[1], chunk_rows > 0 ? chunks : NULL, &x)) != 0) return die("from_npy", rc);
  /* KNN_TIME_PHASES=1: X loaded and kept first, then the kNN kept, then
   * the gather, each timed (three graphs instead of one). */
  bool phases = getenv("KNN_TIME_PHASES") != NULL;
  double tl = t0, tk = t0;
  if (phases) {
    tsr_array *kept = NULL;
    if ((rc = tsr_persist(ctx, x, -1, &kept)) != 0) return die("persist X", rc);
    tsr_array_free(ctx, &x);
    x = kept;
    tl = now();
  }
  if ((rc = tsr_knn(ctx, x, k, TSR_METRIC_EUCLIDEAN, &idx, &dist)) != 0) return die("knn", rc);
  if (phases) {
    const tsr_array *both[2] = {idx, dist};
    tsr_array *kept[2] = {NULL, NULL};
    if ((rc = tsr_persist_many(ctx, both, 2, -1, kept)) != 0) return die("persist kNN", rc);
    tsr_array_free(ctx, &idx), tsr_array_free(ctx, &dist);
    idx = kept[0], dist = kept[1];
    tk = now();
  }
  size_t n = (size_t)tsr_array_dim(x, 0);
  int64_t *ib = malloc(n * (size_t)k * sizeof *ib);
  float *db = malloc(n * (size_t)k * sizeof *db);
  if (ib == NULL || db == NULL) return die("malloc", -1);
  const tsr_array *arrs[2] = {idx, dist};
  void *bufs[2] = {ib, db};
  size_t caps[2] = {n * (size_t)k * sizeof *ib, n * (size_t)k * sizeof *db};
  if ((rc = tsr_compute_many(ctx, arrs, 2, bufs, caps, -1)) != 0) return die("compute", rc);
  double t1 = now();
  printf("knn  %.3f s  (n %zu k %d)\n", t1 - t0, n, k);
  if (phases) printf("  load X %.3f s, kNN %.3f s, gather %.3f s\n", tl - t0, tk - tl, t1 - tk);
  if (argc > 4 && (save(argv[4], "idx", ib, n * (size_t)k * sizeof *ib) != 0 ||
                   save(argv[4], "dist", db, n * (size_t)k * sizeof *db) != 0))
    fprintf(stderr, "knn_time: cannot write %s.*\n", argv[4]);
  free(ib), free(db);
  tsr_array_free(ctx, &idx), tsr_array_free(ctx, &dist), tsr_array_free(ctx, &x);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return 0;
}
