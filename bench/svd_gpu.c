/* tsr-svd-gpu: the seed's GPU benchmark through the public API — the
 * randomized SVD (tsr_svd_compressed: Halko-Martinsson-Tropp, Dask's
 * defaults: no power iterations) of a random 0..2 genotype matrix kept on
 * the workers, 2-bit packed (tsr_compress: four genotypes a byte, 200 GB
 * of u8 in 50 GB), as u8, or blosc-compressed.
 *
 *   tessera local --gpus 0 -- tsr-svd-gpu --rows 10000000 --cols 20000 \
 *       --chunks 100000,20000 --k 10 --mode packed --repeat 2 --check
 *
 * Generation (timed apart): X = tsr_randint(0, 3) u8, compressed per
 * --mode and persisted. SVD: tsr_svd_compressed in f64 (integer input),
 * s and v computed (u is not asked for, so its tasks never run). The
 * library folds the packed or u8 blocks into the products (matmul_chain:
 * int8 tensor cores on a GPU worker, B in four digits).
 *
 * --check runs the same SVD with X generated inside each product
 * (matmul_random: never stored, so any size fits) and prints the largest
 * error of s and of v (rows matched up to sign) relative to the largest
 * value: the f64 answer. Uses only the public API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/linalg.h"

typedef struct opts {
  int64_t rows, cols, crow, ccol;
  int k, over, power, repeat;
  const char *mode;  /* packed, u8, blosc */
  bool check;
  uint64_t seed;
} opts;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct run_result {
  double gen_s, svd_s;
  double *s, *v;
  uint64_t held, device;  /* after generation: result bytes the workers hold, device pool bytes in use */
} run_result;

/* What the workers hold now (the scheduler's count) and their device pools. */
static void held_bytes(tsr_client *c, run_result *res)
{
  tsr_cluster_info *info = NULL;
  if (tsr_cluster_info_get(c, 10000, &info) != 0) return;
  for (size_t i = 0; i < info->n_workers; i++) {
    res->held += info->workers[i].memory_held;
    res->device += info->workers[i].device_memory_used;
  }
  tsr_cluster_info_destroy(&info);
}

/* X as --mode keeps it, persisted (persist false: X as a lazy random
 * array, generated inside the products). */
static int make_x(tsr_array_ctx *ctx, const opts *o, bool persist, tsr_array **x_p)
{
  int64_t shape[2] = {o->rows, o->cols}, chunks[2] = {o->crow, o->ccol};
  tsr_array *x = NULL, *enc = NULL;
  int rc = tsr_randint(ctx, o->seed, 0, 3, TSR_U8, 2, shape, chunks, &x);
  if (rc != 0 || !persist) return rc == 0 ? (*x_p = x, 0) : rc;
  tsr_compress_opts co = TSR_COMPRESS_OPTS_DEFAULT;
  co.encoding = strcmp(o->mode, "packed") == 0 ? TSR_ENC_PACKED2 : TSR_ENC_BLOSC;
  if (strcmp(o->mode, "u8") != 0) rc = tsr_compress(ctx, x, &co, &enc);
  if (rc == 0) rc = tsr_persist(ctx, enc != NULL ? enc : x, -1, x_p);
  return rc;
}

/* One generation + SVD in a context of its own (destroyed: X released). */
static int run_once(tsr_client *c, const opts *o, bool persist, run_result *res)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *u = NULL, *s = NULL, *v = NULL;
  tsr_svd_opts so = TSR_SVD_OPTS_DEFAULT;
  so.n_oversamples = o->over;
  so.n_power_iter = o->power;
  double t0 = now_s();
  int rc = tsr_array_ctx_new(c, &ctx);
  if (rc == 0) rc = make_x(ctx, o, persist, &x);
  res->gen_s = now_s() - t0;
  if (rc == 0 && persist) held_bytes(c, res);  /* not part of either time */
  double t1 = now_s();
  if (rc == 0) rc = tsr_svd_compressed(ctx, x, o->k, &so, &u, &s, &v);
  res->s = calloc((size_t)o->k, sizeof *res->s);
  res->v = calloc((size_t)(o->k * o->cols), sizeof *res->v);
  if (rc == 0) {
    const tsr_array *arrays[2] = {s, v};
    void *bufs[2] = {res->s, res->v};
    size_t caps[2] = {(size_t)o->k * 8, (size_t)(o->k * o->cols) * 8};
    rc = tsr_compute_many(ctx, arrays, 2, bufs, caps, -1);
  }
  if (rc != 0) fprintf(stderr, "tsr-svd-gpu: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  res->svd_s = now_s() - t1;
  tsr_array_ctx_destroy(&ctx);
  return rc;
}

/* Largest |a - b| over s, and over v with each row's sign matched, each
 * relative to the largest |b|. */
static void compare(const opts *o, const run_result *a, const run_result *b, double *es, double *ev)
{
  double smax = 0, vmax = 0, ds = 0, dv = 0;
  for (int i = 0; i < o->k; i++) smax = fmax(smax, fabs(b->s[i])), ds = fmax(ds, fabs(a->s[i] - b->s[i]));
  for (int i = 0; i < o->k; i++) {
    const double *ra = a->v + i * o->cols, *rb = b->v + i * o->cols;
    double dot = 0;
    for (int64_t j = 0; j < o->cols; j++) dot += ra[j] * rb[j];
    double sign = dot < 0 ? -1 : 1;
    for (int64_t j = 0; j < o->cols; j++) dv = fmax(dv, fabs(sign * ra[j] - rb[j])), vmax = fmax(vmax, fabs(rb[j]));
  }
  *es = ds / (smax > 0 ? smax : 1);
  *ev = dv / (vmax > 0 ? vmax : 1);
}

static void usage(void)
{
  fprintf(stderr, "usage: tsr-svd-gpu --rows N --cols M [--chunks R,C (100000,20000)] [--k K] [--oversamples P]\n"
                  "                   [--power-iters Q] [--mode packed|u8|blosc] [--seed S] [--repeat N] [--check]\n"
                  "Connects to $TESSERA_SCHEDULER (run it under `tessera local --gpus 0`).\n");
}

static int parse(int argc, char **argv, opts *o)
{
  *o = (opts){1000000, 20000, 100000, 20000, 10, 10, 0, 1, "packed", false, 42};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--check") == 0) { o->check = true; continue; }
    if (strcmp(a, "--help") == 0) { usage(); exit(0); }
    if (v == NULL) { usage(); return -1; }
    i++;
    long long r, c;
    if (strcmp(a, "--rows") == 0) o->rows = atoll(v);
    else if (strcmp(a, "--cols") == 0) o->cols = atoll(v);
    else if (strcmp(a, "--chunks") == 0 && sscanf(v, "%lld,%lld", &r, &c) == 2) o->crow = r, o->ccol = c;
    else if (strcmp(a, "--k") == 0) o->k = atoi(v);
    else if (strcmp(a, "--oversamples") == 0) o->over = atoi(v);
    else if (strcmp(a, "--power-iters") == 0) o->power = atoi(v);
    else if (strcmp(a, "--repeat") == 0) o->repeat = atoi(v);
    else if (strcmp(a, "--seed") == 0) o->seed = strtoull(v, NULL, 10);
    else if (strcmp(a, "--mode") == 0 && (!strcmp(v, "packed") || !strcmp(v, "u8") || !strcmp(v, "blosc"))) o->mode = v;
    else { usage(); return -1; }
  }
  if (o->rows <= 0 || o->cols <= 0 || o->crow <= 0 || o->ccol <= 0 || o->k <= 0 || o->repeat <= 0) {
    usage();
    return -1;
  }
  return 0;
}

int main(int argc, char **argv)
{
  opts o;
  if (parse(argc, argv, &o) != 0) return 2;
  tsr_client *c = NULL;
  tsr_client_opts copts = TSR_CLIENT_OPTS_DEFAULT;
  copts.name = "tsr-svd-gpu";
  if (tsr_client_open(&c, NULL, &copts) != 0) {
    fprintf(stderr, "tsr-svd-gpu: %s\n", tsr_errmsg());
    return 1;
  }
  printf("tsr-svd-gpu %lld x %lld u8 randint(0,3) chunks %lld,%lld k=%d oversamples=%d power-iters=%d mode=%s (f64)\n",
         (long long)o.rows, (long long)o.cols, (long long)o.crow, (long long)o.ccol, o.k, o.over, o.power, o.mode);
  run_result best = {1e30, 1e30, NULL, NULL, 0, 0};
  int rc = 0;
  for (int r = 0; r < o.repeat && rc == 0; r++) {
    run_result res = {0};
    rc = run_once(c, &o, true, &res);
    if (rc == 0)
      printf("run %d: generation %.3f s, svd %.3f s, total %.3f s; held %llu bytes, device pool %llu bytes\n", r, res.gen_s,
             res.svd_s, res.gen_s + res.svd_s, (unsigned long long)res.held, (unsigned long long)res.device);
    fflush(stdout);
    if (rc == 0 && res.gen_s + res.svd_s < best.gen_s + best.svd_s) {
      free(best.s), free(best.v);
      best = res;
    } else {
      free(res.s), free(res.v);
    }
  }
  if (rc == 0) {
    printf("singular values:");
    for (int i = 0; i < o.k; i++) printf(" %.8g", best.s[i]);
    printf("\ngeneration: %.3f s\nsvd: %.3f s\n", best.gen_s, best.svd_s);
  }
  if (rc == 0 && o.check) {
    run_result ref = {0};
    rc = run_once(c, &o, false, &ref);
    double es = 0, ev = 0;
    if (rc == 0) compare(&o, &best, &ref, &es, &ev);
    if (rc == 0) printf("check: f64 reference in %.3f s; max error s %.3e, v %.3e (relative) %s\n", ref.svd_s, es, ev,
                        es <= 1e-4 && ev <= 1e-4 ? "OK" : "ABOVE 1e-4");
    free(ref.s), free(ref.v);
  }
  free(best.s), free(best.v);
  tsr_client_close(c);
  return rc == 0 ? 0 : 1;
}
