/* k-means (tessera/cluster.h, tsr_kmeans) as scikit-learn's Lloyd loop.
 * Each iteration is one small graph: a kmeans_partial task per row chunk
 * (assignment, sums, counts, inertia, farthest points) and a tree of
 * kmeans_combine tasks (fan-in 8); the root comes back here, where the
 * centers are updated (empty clusters relocated to the farthest points,
 * as sklearn's _relocate_empty_clusters_dense) and the shift checked
 * against tol × the mean column variance. Then a last pass assigns the
 * labels and the inertia with the final centers (sklearn's final E-step).
 * k-means++ is one kmeans_pp task per init (kernels/cpu/kmeans.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/cluster.h"

#define TSR_API __attribute__((visibility("default")))
#define KM_LEN(k, d) ((k) * (d) + (k) + 1 + (k) * (3 + (d)))
#define KM_FAN_IN 8

typedef struct km_run {
  tsr_array_ctx *ctx;
  const tsr_array *x;
  int64_t k, d;
  int timeout_ms;
} km_run;

static int centers_args(const km_run *r, const double *centers, int64_t row0, bool labels, tsr_args **a)
{
  int rc = tsr_args_new(a);
  if (rc == 0) rc = tsr_args_int(*a, "k", r->k);
  if (rc == 0) rc = tsr_args_floats(*a, "centers", centers, (size_t)(r->k * r->d));
  if (rc == 0) rc = tsr_args_int(*a, "row0", row0);
  if (rc == 0) rc = tsr_args_bool(*a, "labels", labels);
  return rc;
}

/* Computes the combined partial of all chunks under centers into out. */
static int km_partial(const km_run *r, const double *centers, double *out)
{
  int64_t nb = r->x->nchunks[0], len = KM_LEN(r->k, r->d);
  char(*keys)[256] = malloc((size_t)nb * sizeof *keys);
  if (keys == NULL) return client_fail(TSR_ENOMEM, "kmeans: out of memory");
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < nb; i++) {
    tsr_args *a = NULL;
    const char *in = r->x->keys[i];
    rc = centers_args(r, centers, i * r->x->chunk[0], false, &a);
    if (rc == 0) rc = gtask_add_tmp(r->ctx, "kmeans-partial", "kmeans_partial", a, &in, 1, keys[i], 256);
    tsr_args_destroy(&a);
  }
  tsr_args *ca = NULL;
  tsr_array *root = NULL;
  if (rc == 0) rc = tsr_args_new(&ca);
  if (rc == 0) rc = tsr_args_int(ca, "k", r->k);
  if (rc == 0) rc = tsr_args_int(ca, "d", r->d);
  /* a tree: combine KM_FAN_IN at a time until one is left, that one the root array's */
  int64_t level = nb;
  while (rc == 0 && level > KM_FAN_IN) {
    int64_t next = 0;
    for (int64_t lo = 0; rc == 0 && lo < level; lo += KM_FAN_IN, next++) {
      int64_t hi = lo + KM_FAN_IN < level ? lo + KM_FAN_IN : level;
      const char *in[KM_FAN_IN];
      for (int64_t j = lo; j < hi; j++) in[j - lo] = keys[j];
      char key[256];
      rc = gtask_add_tmp(r->ctx, "kmeans-combine", "kmeans_combine", ca, in, (size_t)(hi - lo), key, sizeof key);
      memcpy(keys[next], key, sizeof key);
    }
    level = next;
  }
  if (rc == 0) rc = garray_new(r->ctx, "kmeans-sums", TSR_F64, 1, &len, &len, &root);
  const char *in[KM_FAN_IN];
  for (int64_t j = 0; rc == 0 && j < level; j++) in[j] = keys[j];
  if (rc == 0) rc = gtask_add(r->ctx, root->keys[0], "kmeans_combine", ca, in, (size_t)level);
  if (rc == 0) rc = tsr_compute(r->ctx, root, out, (size_t)len * sizeof *out, r->timeout_ms);
  tsr_args_destroy(&ca);
  tsr_array_free(r->ctx, &root);
  free(keys);
  return rc;
}

/* New centers from a combined partial (sums, counts), relocating empty
 * clusters to the farthest points first; returns Σ |new − old|². */
static double km_update(const km_run *r, double *part, const double *old, double *centers)
{
  int64_t k = r->k, d = r->d;
  double *sums = part, *counts = part + k * d, *far = counts + k + 1, *fx = far + 3 * k;
  int64_t next_far = 0;
  for (int64_t c = 0; c < k; c++) {
    if (counts[c] > 0 || next_far >= k || far[3 * next_far + 1] < 0) continue;
    int64_t from = (int64_t)far[3 * next_far + 2];
    const double *p = fx + next_far * d;
    for (int64_t j = 0; j < d; j++) sums[from * d + j] -= p[j], sums[c * d + j] = p[j];
    counts[from] -= 1, counts[c] = 1;
    next_far++;
  }
  double shift = 0;
  for (int64_t c = 0; c < k; c++)
    for (int64_t j = 0; j < d; j++) {
      centers[c * d + j] = counts[c] > 0 ? sums[c * d + j] / counts[c] : old[c * d + j];
      shift += (centers[c * d + j] - old[c * d + j]) * (centers[c * d + j] - old[c * d + j]);
    }
  return shift;
}

/* One Lloyd run from centers (updated in place); *inertia_p afterwards. */
static int km_lloyd(const km_run *r, const tsr_kmeans_opts *o, double tol, double *centers, double *inertia_p)
{
  int64_t len = KM_LEN(r->k, r->d);
  double *part = malloc((size_t)len * sizeof *part), *old = malloc((size_t)(r->k * r->d) * sizeof *old);
  int rc = part && old ? 0 : client_fail(TSR_ENOMEM, "kmeans: out of memory");
  for (int it = 0; rc == 0 && it < o->max_iter; it++) {
    memcpy(old, centers, (size_t)(r->k * r->d) * sizeof *old);
    rc = km_partial(r, old, part);
    if (rc == 0 && km_update(r, part, old, centers) <= tol) break;
  }
  if (rc == 0) rc = km_partial(r, centers, part);
  if (rc == 0) *inertia_p = part[r->k * r->d + r->k];
  free(part), free(old);
  return rc;
}

/* tol × the mean of the columns' variances (sklearn's _tolerance). */
static int km_tol(const km_run *r, double tol, double *out)
{
  tsr_array *mean = NULL, *sq = NULL, *msq = NULL;
  double *m = malloc((size_t)r->d * sizeof *m), *m2 = malloc((size_t)r->d * sizeof *m2);
  int rc = m && m2 ? 0 : client_fail(TSR_ENOMEM, "kmeans: out of memory");
  const tsr_array *x64 = r->x;
  tsr_array *conv = NULL;
  if (rc == 0 && r->x->dtype != TSR_F64) rc = tsr_astype(r->ctx, r->x, TSR_F64, &conv), x64 = conv;
  if (rc == 0) rc = tsr_mean(r->ctx, x64, 0, 0, &mean);
  if (rc == 0) rc = tsr_ufunc(r->ctx, x64, "square", &sq);
  if (rc == 0) rc = tsr_mean(r->ctx, sq, 0, 0, &msq);
  if (rc == 0) {
    const tsr_array *both[2] = {mean, msq};
    void *bufs[2] = {m, m2};
    size_t caps[2] = {(size_t)r->d * sizeof *m, (size_t)r->d * sizeof *m2};
    rc = tsr_compute_many(r->ctx, both, 2, bufs, caps, r->timeout_ms);
  }
  double v = 0;
  for (int64_t j = 0; rc == 0 && j < r->d; j++) v += m2[j] - m[j] * m[j];
  if (rc == 0) *out = tol * v / (double)r->d;
  free(m), free(m2);
  return rc;
}

static int km_check(const tsr_array *x, const tsr_kmeans_opts *o)
{
  int rc = x == NULL ? client_fail(TSR_EINVAL, "kmeans: the array is NULL") : garray_check_2d(x, "kmeans");
  if (rc != 0) return rc;
  if (x->dtype != TSR_F32 && x->dtype != TSR_F64)
    return client_fail(TSR_EINVAL, "kmeans: needs an f32 or f64 array, got %s", gdtype_name(x->dtype));
  if (o->k < 1 || o->k > x->shape[0])
    return client_fail(TSR_EINVAL, "kmeans: k = %d outside 1..%lld (the number of rows)", o->k, (long long)x->shape[0]);
  if (o->max_iter < 1 || o->n_init < 1 || !(o->tol >= 0))
    return client_fail(TSR_EINVAL, "kmeans: max_iter %d and n_init %d must be >= 1, tol %g >= 0", o->max_iter, o->n_init, o->tol);
  return 0;
}

/* k-means++ centers for seed into centers (k x d). */
static int km_pp(const km_run *r, uint64_t seed, double *centers)
{
  tsr_args *a = NULL;
  tsr_array *c = NULL;
  int64_t shape[2] = {r->k, r->d};
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_int(a, "k", r->k);
  if (rc == 0) rc = tsr_args_int(a, "seed", (int64_t)seed);
  if (rc == 0) rc = garray_new(r->ctx, "kmeans-pp", TSR_F64, 2, shape, shape, &c);
  if (rc == 0) rc = gtask_add(r->ctx, c->keys[0], "kmeans_pp", a, (const char *const *)r->x->keys, r->x->nblocks);
  if (rc == 0) rc = tsr_compute(r->ctx, c, centers, (size_t)(r->k * r->d) * sizeof *centers, r->timeout_ms);
  tsr_args_destroy(&a);
  tsr_array_free(r->ctx, &c);
  return rc;
}

/* The output arrays: labels by a kmeans_partial(labels) task per chunk,
 * centers by a kmeans_centers task holding the values in its params. */
static int km_outputs(const km_run *r, const double *centers, tsr_array **labels_p, tsr_array **centers_p)
{
  int rc = 0;
  if (labels_p != NULL) {
    tsr_array *l = NULL;
    int64_t n = r->x->shape[0], ch = r->x->chunk[0];
    rc = garray_new(r->ctx, "kmeans-labels", TSR_I32, 1, &n, &ch, &l);
    for (int64_t i = 0; rc == 0 && i < r->x->nchunks[0]; i++) {
      tsr_args *a = NULL;
      const char *in = r->x->keys[i];
      rc = centers_args(r, centers, i * ch, true, &a);
      if (rc == 0) rc = gtask_add(r->ctx, l->keys[i], "kmeans_partial", a, &in, 1);
      tsr_args_destroy(&a);
    }
    if (rc == 0) *labels_p = l;
  }
  if (rc == 0 && centers_p != NULL) {
    tsr_args *a = NULL;
    tsr_array *out = NULL;
    int64_t shape[2] = {r->k, r->d};
    rc = tsr_args_new(&a);
    if (rc == 0) rc = tsr_args_floats(a, "values", centers, (size_t)(r->k * r->d));
    if (rc == 0) rc = tsr_args_int(a, "k", r->k);
    if (rc == 0) rc = garray_new(r->ctx, "kmeans-centers", TSR_F64, 2, shape, shape, &out);
    if (rc == 0) rc = gtask_add(r->ctx, out->keys[0], "kmeans_centers", a, NULL, 0);
    tsr_args_destroy(&a);
    if (rc == 0) *centers_p = out;
  }
  return rc;
}

TSR_API int tsr_kmeans(tsr_array_ctx *ctx, const tsr_array *x, const tsr_kmeans_opts *opts, tsr_array **labels_p,
                       tsr_array **centers_p, double *inertia_p)
{
  if (ctx == NULL || opts == NULL) return client_fail(TSR_EINVAL, "kmeans: NULL context or options (k is required)");
  tsr_kmeans_opts o = *opts;
  int rc = km_check(x, &o);
  if (rc == 0) rc = garray_dense(ctx, x, &x);
  if (rc == 0 && x->nchunks[1] != 1) {
    int64_t chunks[2] = {-1, 0};
    tsr_array *rx = NULL;
    rc = tsr_rechunk(ctx, x, chunks, &rx);
    x = rx;
  }
  if (rc != 0) return rc;
  km_run r = {ctx, x, o.k, x->shape[1], o.timeout_ms};
  size_t kd = (size_t)(r.k * r.d);
  double *best = malloc(kd * sizeof *best), *cur = malloc(kd * sizeof *cur), best_in = INFINITY, tol = 0;
  if (best == NULL || cur == NULL) rc = client_fail(TSR_ENOMEM, "kmeans: out of memory");
  if (rc == 0) rc = km_tol(&r, o.tol, &tol);
  int runs = o.init != NULL ? 1 : o.n_init;
  for (int run = 0; rc == 0 && run < runs; run++) {
    double inertia = 0;
    if (o.init != NULL) memcpy(cur, o.init, kd * sizeof *cur);
    else rc = km_pp(&r, o.seed + (uint64_t)run, cur);
    if (rc == 0) rc = km_lloyd(&r, &o, tol, cur, &inertia);
    if (rc == 0 && inertia < best_in) best_in = inertia, memcpy(best, cur, kd * sizeof *best);
  }
  if (rc == 0) rc = km_outputs(&r, best, labels_p, centers_p);
  if (rc == 0 && inertia_p != NULL) *inertia_p = best_in;
  free(best), free(cur);
  return rc;
}
