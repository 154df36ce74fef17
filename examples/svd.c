/* tsr-svd: the SVD of a chunked random matrix on a Tessera cluster.
 *
 *   tessera local -- tsr-svd --rows 200000 --cols 20000 --chunks 20000,5000 \
 *       --dtype u8 --dist randint:0:3 --k 10 --power-iters 2
 *
 * Generation is fused into the SVD's passes by default (X is generated
 * inside each product and never stored); --persist generates and keeps X on
 * the workers first, and times that separately. --verify (small sizes)
 * gathers X, recomputes with LAPACK here and checks the result: exact SVD
 * to 1e-10 (f64) / 1e-4 (f32); randomized SVD within the Halko-Martinsson-
 * Tropp bound. --memory-report prints what each worker's memory tiers did
 * (docs/memory.md). Uses only the public API (and LAPACKE for --verify). */
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clireport.h"
#include "tessera/linalg.h"

typedef struct opts {
  int64_t rows, cols, chunk_rows, chunk_cols;
  tsr_dtype dtype;
  const char *dist;
  int64_t low, high;
  uint64_t seed;
  int k, power_iters, oversamples;
  bool exact, verify, persist, qr_iter, memory_report, no_progress;
  const char *save_input, *save;
  const char *report;         /* --report FILE.html|.json (docs/report.md) */
} opts;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tsr-svd --rows N --cols M [--chunks R,C] [--dtype u8|i32|i64|f32|f64]\n"
          "               [--dist uniform|normal|randint:LOW:HIGH] [--seed S] [--k K]\n"
          "               [--power-iters Q] [--oversamples P] [--iterator power|qr]\n"
          "               [--method compressed|exact] [--persist] [--save-input X.npy]\n"
          "               [--save PREFIX] [--verify] [--memory-report] [--no-progress]\n"
          "               [--report FILE.html|.json]\n"
          "A progress bar goes to stderr (plain lines when it is not a terminal).\n"
          "Connects to $TESSERA_SCHEDULER (run it under `tessera local`).\n");
}

static int parse_dist(const char *text, opts *o)
{
  if (strcmp(text, "uniform") == 0 || strcmp(text, "normal") == 0) {
    o->dist = text;
    return 0;
  }
  long long lo, hi;
  if (sscanf(text, "randint:%lld:%lld", &lo, &hi) == 2 && hi > lo) {
    o->dist = "randint";
    o->low = lo;
    o->high = hi;
    return 0;
  }
  fprintf(stderr, "tsr-svd: bad --dist '%s' (uniform, normal or randint:LOW:HIGH)\n", text);
  return -1;
}

static int parse_args(int argc, char **argv, opts *o)
{
  *o = (opts){20000, 2000, 5000, 1000, TSR_F64, "uniform", 0, 3, 42, 10, 0, 10,
              false, false, false, false, false, false, NULL, NULL, NULL};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool has = v != NULL;
    if (strcmp(a, "--help") == 0) { usage(stdout); exit(0); }
    else if (strcmp(a, "--version") == 0) { printf("tsr-svd %s\n", TSR_VERSION_STRING); exit(0); }
    else if (strcmp(a, "--verify") == 0) o->verify = true;
    else if (strcmp(a, "--persist") == 0) o->persist = true;
    else if (strcmp(a, "--memory-report") == 0) o->memory_report = true;
    else if (strcmp(a, "--no-progress") == 0) o->no_progress = true;
    else if (!has) { fprintf(stderr, "tsr-svd: %s needs a value\n", a); return -1; }
    else if (strcmp(a, "--rows") == 0) o->rows = atoll(argv[++i]);
    else if (strcmp(a, "--cols") == 0) o->cols = atoll(argv[++i]);
    else if (strcmp(a, "--chunks") == 0) {
      long long r, c;
      if (sscanf(argv[++i], "%lld,%lld", &r, &c) != 2) { fprintf(stderr, "tsr-svd: --chunks R,C\n"); return -1; }
      o->chunk_rows = r;
      o->chunk_cols = c;
    } else if (strcmp(a, "--dtype") == 0) {
      o->dtype = tsr_dtype_parse(argv[++i]);
      if (o->dtype == TSR_DTYPE_NONE) { fprintf(stderr, "tsr-svd: unknown dtype '%s'\n", argv[i]); return -1; }
    } else if (strcmp(a, "--dist") == 0) { if (parse_dist(argv[++i], o) != 0) return -1; }
    else if (strcmp(a, "--seed") == 0) o->seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(a, "--k") == 0) o->k = atoi(argv[++i]);
    else if (strcmp(a, "--power-iters") == 0) o->power_iters = atoi(argv[++i]);
    else if (strcmp(a, "--oversamples") == 0) o->oversamples = atoi(argv[++i]);
    else if (strcmp(a, "--iterator") == 0) o->qr_iter = strcmp(argv[++i], "qr") == 0;
    else if (strcmp(a, "--method") == 0) o->exact = strcmp(argv[++i], "exact") == 0;
    else if (strcmp(a, "--save-input") == 0) o->save_input = argv[++i];
    else if (strcmp(a, "--save") == 0) o->save = argv[++i];
    else if (strcmp(a, "--report") == 0) {
      o->report = argv[++i];
      if (clireport_check_path("tsr-svd", o->report) != 0) return -1;
    }
    else { fprintf(stderr, "tsr-svd: unknown option %s\n", a); usage(stderr); return -1; }
  }
  if (o->rows <= 0 || o->cols <= 0 || o->k <= 0) { fprintf(stderr, "tsr-svd: rows, cols and k must be positive\n"); return -1; }
  bool int_dtype = o->dtype != TSR_F32 && o->dtype != TSR_F64;
  if (int_dtype != (strcmp(o->dist, "randint") == 0)) {
    fprintf(stderr, "tsr-svd: integer dtypes need --dist randint:LOW:HIGH, float dtypes uniform or normal\n");
    return -1;
  }
  return 0;
}

static int make_input(tsr_array_ctx *ctx, const opts *o, tsr_array **x_p)
{
  int64_t shape[2] = {o->rows, o->cols}, chunks[2] = {o->chunk_rows, o->chunk_cols};
  if (strcmp(o->dist, "uniform") == 0) return tsr_random_uniform(ctx, o->seed, o->dtype, 2, shape, chunks, x_p);
  if (strcmp(o->dist, "normal") == 0) return tsr_random_normal(ctx, o->seed, o->dtype, 2, shape, chunks, x_p);
  return tsr_randint(ctx, o->seed, o->low, o->high, o->dtype, 2, shape, chunks, x_p);
}

/* Gathers a 2-D or 1-D float array as doubles (malloc'd). */
static double *gather_f64(tsr_array_ctx *ctx, const tsr_array *a)
{
  int64_t n = tsr_array_size(a);
  size_t esize = tsr_dtype_size(tsr_array_dtype(a));
  void *raw = malloc((size_t)n * esize);
  double *out = malloc((size_t)n * sizeof *out);
  if (raw == NULL || out == NULL || tsr_compute(ctx, a, raw, (size_t)n * esize, -1) != 0) {
    fprintf(stderr, "tsr-svd: gather failed: %s\n", tsr_errmsg());
    free(raw);
    free(out);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) {
    switch (tsr_array_dtype(a)) {
    case TSR_F64: out[i] = ((double *)raw)[i]; break;
    case TSR_F32: out[i] = ((float *)raw)[i]; break;
    case TSR_U8: out[i] = ((uint8_t *)raw)[i]; break;
    case TSR_I32: out[i] = ((int32_t *)raw)[i]; break;
    default: out[i] = (double)((int64_t *)raw)[i]; break;
    }
  }
  free(raw);
  return out;
}

/* Spectral norm of the m x n matrix r (row-major), by LAPACK. */
static double spectral_norm(double *r, int64_t m, int64_t n)
{
  int64_t mn = m < n ? m : n;
  double *s = malloc((size_t)mn * sizeof *s), *superb = malloc((size_t)mn * sizeof *superb);
  LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', m, n, r, n, s, NULL, 1, NULL, 1, superb);
  double top = s[0];
  free(s);
  free(superb);
  return top;
}

/* Checks u (m x k), s (k), v (k x n) against LAPACK on x. Returns 0 when
 * within tolerance. */
static int verify(const opts *o, const double *x, const double *u, const double *s, const double *v, int k)
{
  int64_t m = o->rows, n = o->cols, mn = m < n ? m : n;
  double *a = malloc((size_t)(m * n) * sizeof *a), *sref = malloc((size_t)mn * sizeof *sref);
  double *superb = malloc((size_t)mn * sizeof *superb);
  memcpy(a, x, (size_t)(m * n) * sizeof *a);
  LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', m, n, a, n, sref, NULL, 1, NULL, 1, superb);
  double worst_s = 0, above = 0;
  for (int i = 0; i < k; i++) {
    double rel = fabs(s[i] - sref[i]) / sref[0];
    if (rel > worst_s) worst_s = rel;
    if (s[i] > sref[i] * (1 + 1e-8) + 1e-12 * sref[0]) above = fmax(above, s[i] / sref[i] - 1);
  }
  /* Residual A - U S V, its spectral norm against sigma_{k+1}. */
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = x[i * n + j];
      for (int t = 0; t < k; t++) acc -= u[i * k + t] * s[t] * v[t * n + j];
      a[i * n + j] = acc;
    }
  double resid = spectral_norm(a, m, n);
  double sigma_next = k < mn ? sref[k] : 0.0;
  bool f32 = o->dtype == TSR_F32;
  double tol = o->exact ? (f32 ? 1e-4 : 1e-10) : 0;
  double bound = o->exact ? sigma_next + tol * sref[0]
                          : (1 + 11 * sqrt((double)(k + o->oversamples)) * sqrt((double)mn)) * sigma_next + 1e-8 * sref[0];
  printf("verify: largest relative error of singular values %.3e (relative to s[0])\n", worst_s);
  printf("verify: residual ||A - U S V||_2 = %.6g, sigma_{k+1} = %.6g, bound %.6g\n", resid, sigma_next, bound);
  int bad = 0;
  if (o->exact && worst_s > tol) bad = printf("verify: FAIL singular values beyond %.0e\n", tol) > 0;
  if (above > 1e-6) bad = printf("verify: FAIL a singular value exceeds LAPACK's by %.3e\n", above) > 0;
  if (resid > bound) bad = printf("verify: FAIL residual above the bound\n") > 0;
  free(a);
  free(sref);
  free(superb);
  return bad;
}

static int save_outputs(tsr_array_ctx *ctx, const char *prefix, tsr_array *u, tsr_array *s, tsr_array *v)
{
  char path[1024];
  tsr_array *arrays[3] = {u, s, v};
  const char *names[3] = {"u", "s", "v"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s_%s.npy", prefix, names[i]);
    int rc = tsr_compute_npy(ctx, arrays[i], path, -1);
    if (rc != 0) return rc;
  }
  return 0;
}

/* One "memory:" line per worker: what its tiers did over the run, from the
 * scheduler's view after one more heartbeat (so the counters cover the
 * run's end). */
static void print_memory_report(tsr_client *client)
{
  tsr_cluster_info *info = NULL;
  nanosleep(&(struct timespec){1, 200000000}, NULL);
  if (tsr_cluster_info_get(client, 5000, &info) != 0) {
    fprintf(stderr, "tsr-svd: memory report: %s\n", tsr_errmsg());
    return;
  }
  for (size_t i = 0; i < info->n_workers; i++) {
    const tsr_worker_info *w = &info->workers[i];
    printf("memory: %s %s spilled=%llu dropped=%llu recomputed_tasks=%llu recomputed_bytes=%llu device_moved=%llu "
           "device_dropped=%llu\n",
           w->name, w->device, (unsigned long long)w->bytes_spilled, (unsigned long long)w->bytes_dropped,
           (unsigned long long)w->tasks_recomputed, (unsigned long long)w->bytes_recomputed,
           (unsigned long long)w->device_bytes_moved, (unsigned long long)w->device_bytes_dropped);
  }
  tsr_cluster_info_destroy(&info);
}

int main(int argc, char **argv)
{
  opts o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *u = NULL, *s = NULL, *v = NULL;
  int rc = tsr_client_open(&client, NULL, NULL);
  clireport cr = {0};
  if (rc == 0) rc = clireport_begin(&cr, client, "tsr-svd", argc, argv, o.report, !o.no_progress);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = make_input(ctx, &o, &x);
  double t0 = now_s(), t_gen = 0;
  if (rc == 0 && o.persist) {
    tsr_array *kept = NULL;
    rc = tsr_persist(ctx, x, -1, &kept);
    x = kept;
    t_gen = now_s() - t0;
  }
  if (rc == 0 && o.save_input) rc = tsr_compute_npy(ctx, x, o.save_input, -1);
  double t1 = now_s();
  tsr_svd_opts so = TSR_SVD_OPTS_DEFAULT;
  so.n_oversamples = o.oversamples;
  so.n_power_iter = o.power_iters;
  so.iterator = o.qr_iter ? TSR_SVD_QR : TSR_SVD_POWER;
  so.seed = o.seed + 1;
  if (rc == 0) rc = o.exact ? tsr_svd_tall_skinny(ctx, x, &u, &s, &v) : tsr_svd_compressed(ctx, x, o.k, &so, &u, &s, &v);
  int k = o.exact ? (int)o.cols : o.k;
  double *sv = rc == 0 ? malloc((size_t)k * sizeof *sv) : NULL;
  double *vv = NULL;
  if (rc == 0) {
    /* One graph for u, s and v (their passes over X are shared), kept on
     * the workers; then v and s are gathered from there. */
    const tsr_array *outs[3] = {u, s, v};
    tsr_array *kept[3] = {NULL, NULL, NULL};
    rc = tsr_persist_many(ctx, outs, 3, -1, kept);
    if (rc == 0) u = kept[0], s = kept[1], v = kept[2];
  }
  if (rc == 0) {
    vv = gather_f64(ctx, v);
    double *tmp = gather_f64(ctx, s);
    if (vv == NULL || tmp == NULL) rc = TSR_ETASK;
    else memcpy(sv, tmp, (size_t)k * sizeof *sv);
    free(tmp);
  }
  double t_svd = now_s() - t1;
  clireport_stop_bar(&cr);   /* the results print below it */
  if (rc != 0) {
    fprintf(stderr, "tsr-svd: %s: %s\n", tsr_strerror(rc), tsr_errmsg());
    clireport_end(&cr, 1);
    tsr_array_ctx_destroy(&ctx);
    tsr_client_close(client);
    return 1;
  }
  printf("tsr-svd %lld x %lld %s %s chunks %lld,%lld k=%d q=%d method=%s\n", (long long)o.rows, (long long)o.cols,
         tsr_dtype_name(o.dtype), o.dist, (long long)o.chunk_rows, (long long)o.chunk_cols, k, o.power_iters,
         o.exact ? "exact" : "compressed");
  printf("singular values:");
  for (int i = 0; i < k && i < 10; i++) printf(" %.10g", sv[i]);
  printf("\n");
  if (o.persist) printf("generation: %.3f s\n", t_gen);
  else printf("generation: fused into the SVD passes\n");
  printf("svd: %.3f s\n", t_svd);
  int status = 0;
  if (o.save && save_outputs(ctx, o.save, u, s, v) != 0) {
    fprintf(stderr, "tsr-svd: save failed: %s\n", tsr_errmsg());
    status = 1;
  }
  if (o.verify && status == 0) {
    double *xv = gather_f64(ctx, x), *uv = gather_f64(ctx, u);
    status = xv && uv ? verify(&o, xv, uv, sv, vv, k) : 1;
    free(xv);
    free(uv);
  }
  if (o.memory_report) print_memory_report(client);
  status = clireport_end(&cr, status);
  free(sv);
  free(vv);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return status;
}
