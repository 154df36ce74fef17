/* Unit tests of the bounded k-means ops (kernels/cpu/kmeans_step.c):
 * chains of kmeans_step / kmeans_update, run here as graphs/kmeans.c
 * chains them, give at every iteration the labels of plain Lloyd
 * (kmeans_partial with the same centers: exact f64 distances, ties to the
 * smaller index) on data full of exact ties, f32 and f64, with an emptied
 * cluster; and bad input is named. kmeans_loop (the rest of a run in
 * one task, its state updated in place) gives plain Lloyd's labels and
 * the chain's iterations from the init and after steps, relocates an
 * emptied cluster with an in-place full pass, stops at max_iter, and its
 * output feeds kmeans_labels (offset) and kmeans_model. With helper
 * threads (param threads) its output is the one-thread output byte for
 * byte, a relocation's farthest points found across its row slices too.
 * With Yinyang's group bounds (param groups) the loop's labels, model and
 * sums are Hamerly's byte for byte (several k and group counts, from the
 * init and after steps, an emptied cluster relocated), and the same for
 * 1, 2 and 5 threads.
 *
 *   test_kernels_kmeans            the tests
 *   test_kernels_kmeans --bench [X.npy init.npy]
 *                                  times the steps of a 100,000 x 50 f32
 *                                  mixture, k = 30, then 0-4 iterations of
 *                                  steps followed by kmeans_loop (KM_P=N:
 *                                  only N; KM_T=N: the loop with N threads,
 *                                  its wall time too; KM_G=N: N Yinyang
 *                                  groups; KM_K=N: an init.npy of N
 *                                  centers; KM_HUGE=1: X in 2 MiB pages,
 *                                  MADV_HUGEPAGE) — CPU time, no assertions */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "kernels.h"
#include "kit.h"

#define KM_HDR 8
#define KM_LEN(k, d) ((k) * (d) + (k) + 1 + (k) * (3 + (d)))
#define STATE_HEAD(k, d) (KM_LEN(k, d) + 2 * (d))

static uint64_t rng_state = 42;
static double uniform(void)
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
static double gauss(void) { return sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform()); }

/* This thread's CPU time: the machine is shared, wall time would count
 * the other processes' turns. */
static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double wall(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int run(const char *name, const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  memset(out, 0, sizeof *out);
  err->text[0] = '\0';
  return tsr_op_run_cpu(tsr_op_find(name), p, in, n_in, out, err);
}

static tsr_buf buf_of(tsr_dtype dtype, int ndim, int64_t rows, int64_t cols, void *data)
{
  tsr_buf b;
  memset(&b, 0, sizeof b);
  b.meta.dtype = dtype, b.meta.ndim = ndim, b.meta.shape[0] = rows, b.meta.shape[1] = cols;
  b.data = data;
  b.nbytes = (size_t)tsr_meta_nbytes(&b.meta);
  return b;
}

/* n x d points around k centers, on a grid of 1/8 (exact in f32, so many
 * squared distances tie exactly); the first k rows are the init. */
static double *mixture(int64_t n, int64_t d, int64_t k, double spread)
{
  double *x = malloc((size_t)(n * d) * sizeof *x), *c = malloc((size_t)(k * d) * sizeof *c);
  for (int64_t i = 0; i < k * d; i++) c[i] = round(gauss() * 8 * 4) / 8;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < d; j++) x[i * d + j] = c[(i % k) * d + j] + round(gauss() * spread * 8) / 8;
  /* exact ties: midpoints of the first rows (the init centers), and duplicates */
  for (int64_t j = 0; j < d && n > 3 * k; j++) x[(2 * k) * d + j] = (x[j] + x[d + j]) / 2, x[(2 * k + 1) * d + j] = x[j];
  free(c);
  return x;
}

typedef struct lloyd {
  int64_t n, d, k, chunk, nb;
  tsr_dtype dtype;
  void *x;               /* n x d of dtype */
  tsr_buf model;
  tsr_buf *states;       /* nb, .data NULL before the first step */
  int iterations, full_checks;
} lloyd;

static lloyd lloyd_of(int64_t n, int64_t d, int64_t k, int64_t chunk, int64_t nb, tsr_dtype dtype, void *x)
{
  lloyd l;
  memset(&l, 0, sizeof l);
  l.n = n, l.d = d, l.k = k, l.chunk = chunk, l.nb = nb, l.dtype = dtype, l.x = x;
  return l;
}

static tsr_buf chunk_of(const lloyd *l, int64_t b)
{
  int64_t r0 = b * l->chunk, rows = l->n - r0 < l->chunk ? l->n - r0 : l->chunk;
  size_t es = l->dtype == TSR_F32 ? 4 : 8;
  return buf_of(l->dtype, 2, rows, l->d, (char *)l->x + (size_t)(r0 * l->d) * es);
}

static int lloyd_start(lloyd *l, const double *init, int max_iter, double tol, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", l->k);
  tsr_params_add_int(&p, "max_iter", max_iter);
  tsr_params_add_float(&p, "tol", tol);
  tsr_params_add_floats(&p, "values", init, (size_t)(l->k * l->d));
  l->nb = (l->n + l->chunk - 1) / l->chunk;
  l->states = calloc((size_t)l->nb, sizeof *l->states);
  int rc = run("kmeans_init", &p, NULL, 0, &l->model, err);
  tsr_params_clear(&p);
  return rc;
}

/* Row r's label in a state (kmeans_step.c's km_row: label, epoch i32, u, l f32). */
static int32_t state_label(const lloyd *l, const tsr_buf *state, int64_t r)
{
  int32_t label;
  memcpy(&label, (const char *)state->data + STATE_HEAD(l->k, l->d) * 8 + 16 * r, sizeof label);
  return label;
}

/* Plain Lloyd's labels of chunk b under centers: kmeans_partial. */
static int32_t *reference_labels(const lloyd *l, int64_t b, const double *centers, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", l->k);
  tsr_params_add_int(&p, "row0", b * l->chunk);
  tsr_params_add_floats(&p, "centers", centers, (size_t)(l->k * l->d));
  tsr_params_add_bool(&p, "labels", true);
  tsr_buf x = chunk_of(l, b), out;
  int rc = run("kmeans_partial", &p, &x, 1, &out, err);
  tsr_params_clear(&p);
  return rc == 0 ? out.data : NULL;
}

/* One iteration: a step per chunk, then the update. Returns the number of
 * rows whose label differs from plain Lloyd's under the same centers
 * (checked when check is set), or a negative rc. */
static int64_t lloyd_iteration(lloyd *l, bool check, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT, u = TSR_PARAMS_INIT;
  tsr_params_add_int(&u, "k", l->k);
  tsr_params_add_int(&u, "d", l->d);
  tsr_buf *ins = calloc((size_t)l->nb + 1, sizeof *ins);
  int64_t wrong = 0;
  int rc = 0;
  const double *m = l->model.data;
  for (int64_t b = 0; rc == 0 && b < l->nb; b++) {
    tsr_params_clear(&p);
    tsr_params_add_int(&p, "k", l->k);
    tsr_params_add_int(&p, "row0", b * l->chunk);
    tsr_buf in[3] = {chunk_of(l, b), l->model, l->states[b]}, out;
    rc = run("kmeans_step", &p, in, l->states[b].data ? 3 : 2, &out, err);
    if (rc != 0) break;
    int32_t *ref = check && m[1] != 2 ? reference_labels(l, b, m + KM_HDR, err) : NULL;
    for (int64_t r = 0; ref != NULL && r < in[0].meta.shape[0]; r++) wrong += state_label(l, &out, r) != ref[r];
    free(ref), free(l->states[b].data);
    l->states[b] = out;
    ins[b + 1] = out;
  }
  ins[0] = l->model;
  tsr_buf next;
  if (rc == 0) rc = run("kmeans_update", &u, ins, (int)l->nb + 1, &next, err);
  if (rc == 0) free(l->model.data), l->model = next, l->iterations++;
  tsr_params_clear(&p), tsr_params_clear(&u);
  free(ins);
  return rc != 0 ? rc : wrong;
}

static void lloyd_free(lloyd *l)
{
  for (int64_t b = 0; l->states && b < l->nb; b++) free(l->states[b].data);
  free(l->states), free(l->model.data);
}

/* Runs to the end (phase done) checking every iteration's labels. */
static int64_t lloyd_check_all(lloyd *l, tsr_errbuf *err)
{
  int64_t wrong = 0;
  while (((const double *)l->model.data)[1] != 2 && l->iterations < 400) {
    int64_t w = lloyd_iteration(l, true, err);
    if (w < 0) return w;
    wrong += w;
  }
  return wrong;
}

static void *as_dtype(const double *x, size_t n, tsr_dtype dt)
{
  if (dt == TSR_F64) return memcpy(malloc(n * 8), x, n * 8);
  float *f = malloc(n * 4);
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
  return f;
}

static void check_mixture(tsr_dtype dt, int64_t n, int64_t d, int64_t k, int64_t chunk, double spread)
{
  double *x = mixture(n, d, k, spread);
  lloyd l = lloyd_of(n, d, k, chunk, 0, dt, as_dtype(x, (size_t)(n * d), dt));
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, x, 300, 0, &err));  /* tol 0: run until the labels stop moving */
  int64_t wrong = lloyd_check_all(&l, &err);
  const double *m = l.model.data;
  fprintf(stderr, "  %s %lld x %lld, k %lld: %d iterations (%g counted), %lld labels differ from plain Lloyd, inertia %.9g\n",
          dt == TSR_F32 ? "f32" : "f64", (long long)n, (long long)d, (long long)k, l.iterations, m[0], (long long)wrong, m[3]);
  ASSERT_EQ(wrong, 0);
  ASSERT_EQ(m[1], 2);
  ASSERT_TRUE(l.iterations > 3);
  /* the inertia is plain Lloyd's under the final centers (kmeans_partial's sum) */
  double inertia = 0;
  for (int64_t b = 0; b < l.nb; b++) {
    tsr_params p = TSR_PARAMS_INIT;
    tsr_params_add_int(&p, "k", k);
    tsr_params_add_int(&p, "row0", b * chunk);
    tsr_params_add_floats(&p, "centers", m + KM_HDR, (size_t)(k * d));
    tsr_buf xc = chunk_of(&l, b), out;
    ASSERT_OK(run("kmeans_partial", &p, &xc, 1, &out, &err));
    inertia += ((double *)out.data)[k * d + k];
    free(out.data), tsr_params_clear(&p);
  }
  ASSERT_NEAR(m[3], inertia, 1e-12);
  lloyd_free(&l);
  free(l.x), free(x);
}

TEST(steps_give_plain_lloyds_labels_f32) { check_mixture(TSR_F32, 3000, 7, 12, 700, 1.5); }
TEST(steps_give_plain_lloyds_labels_f64_overlapping) { check_mixture(TSR_F64, 2000, 3, 25, 512, 6.0); }
TEST(steps_give_plain_lloyds_labels_wide) { check_mixture(TSR_F32, 1500, 64, 40, 400, 12.0); }

TEST(max_iter_stops_the_loop_then_the_final_e_step)
{
  double *x = mixture(900, 5, 9, 4.0);
  lloyd l = lloyd_of(900, 5, 9, 250, 0, TSR_F64, x);
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, x, 2, 0, &err));
  ASSERT_EQ(lloyd_check_all(&l, &err), 0);
  const double *m = l.model.data;
  ASSERT_EQ(m[0], 2);          /* two updates counted */
  ASSERT_EQ(l.iterations, 3);  /* and the final E-step's pass */
  ASSERT_EQ(m[1], 2);
  /* past done, steps and updates pass their inputs through */
  double before = m[3];
  ASSERT_EQ(lloyd_iteration(&l, false, &err), 0);
  ASSERT_EQ(((const double *)l.model.data)[3], before);
  lloyd_free(&l);
  free(x);
}

TEST(a_step_over_several_chunks_labels_each_row)
{
  /* one kmeans_step over three x chunks (parts = 3), as graphs/kmeans.c
   * runs a thread's run of chunks: its rows in order, each chunk's rows
   * labelled as plain Lloyd labels that chunk */
  double *x = mixture(1000, 6, 8, 3.0);
  lloyd l = lloyd_of(1000, 6, 8, 300, 0, TSR_F64, x);
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, x, 300, 1e-4, &err));
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", 8);
  tsr_params_add_int(&p, "row0", 0);
  tsr_params_add_int(&p, "parts", 3);
  tsr_buf in[4] = {chunk_of(&l, 0), chunk_of(&l, 1), chunk_of(&l, 2), l.model}, out;
  ASSERT_OK(run("kmeans_step", &p, in, 4, &out, &err));
  for (int64_t b = 0; b < 3; b++) {
    int32_t *ref = reference_labels(&l, b, (const double *)l.model.data + KM_HDR, &err);
    ASSERT_TRUE(ref != NULL);
    int64_t wrong = 0;
    for (int64_t r = 0; r < 300; r++) wrong += state_label(&l, &out, b * 300 + r) != ref[r];
    free(ref);
    ASSERT_EQ(wrong, 0);
  }
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "k", 8);
  tsr_params_add_int(&p, "row0", 0);
  tsr_params_add_int(&p, "parts", 5);
  tsr_buf bad;
  ASSERT_EQ(run("kmeans_step", &p, in, 4, &bad, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "parts = 5");
  tsr_params_clear(&p);
  free(out.data);
  lloyd_free(&l);
  free(x);
}

/* 12 points in 2-d: two groups of 6 near (0, 0) and (10, 10), the last
 * point moved out to (30, 30); centers at both groups and one at (1000,
 * 1000), far from every point, whose cluster empties in the first step. */
static void two_groups_and_a_far_center(double x[12 * 2], double init[3 * 2])
{
  static const double centers[3 * 2] = {0, 0, 10, 10, 1000, 1000};
  memcpy(init, centers, sizeof centers);
  for (int i = 0; i < 12; i++) x[2 * i] = (i < 6 ? 0 : 10) + 0.1 * (i % 3), x[2 * i + 1] = (i < 6 ? 0 : 10) + 0.1 * (i % 2);
  x[2 * 11] = 30, x[2 * 11 + 1] = 30;
}

TEST(an_emptied_cluster_takes_the_farthest_point)
{
  /* two groups; the third center far from every point gets nothing in the
   * first step: the update asks for the farthest points (a full pass with
   * the same centers), then moves it to the farthest one */
  double x[12 * 2], init[3 * 2];
  two_groups_and_a_far_center(x, init);
  lloyd l = lloyd_of(12, 2, 3, 5, 0, TSR_F64, x);
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, init, 300, 1e-4, &err));
  ASSERT_EQ(lloyd_iteration(&l, true, &err), 0);
  const double *m = l.model.data;
  ASSERT_EQ(m[2], 1);  /* need_far: the same centers again */
  ASSERT_EQ(m[0], 0);
  ASSERT_EQ(m[KM_HDR + 4], 1000);
  ASSERT_EQ(lloyd_iteration(&l, true, &err), 0);
  m = l.model.data;
  ASSERT_EQ(m[2], 0);
  ASSERT_EQ(m[0], 1);
  ASSERT_EQ(m[KM_HDR + 4], 30);  /* the third center is the point (30, 30) */
  ASSERT_EQ(m[KM_HDR + 5], 30);
  ASSERT_EQ(lloyd_check_all(&l, &err), 0);
  ASSERT_EQ(state_label(&l, &l.states[2], 1), 2);  /* row 11 = chunk 2's row 1 */
  lloyd_free(&l);
}

TEST(bad_input_is_named)
{
  double x[4 * 2] = {0, 0, 1, 1, NAN, 2, 3, 3}, init[2 * 2] = {0, 0, 3, 3};
  lloyd l = lloyd_of(4, 2, 2, 4, 0, TSR_F64, x);
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, init, 300, 1e-4, &err));
  ASSERT_EQ(lloyd_iteration(&l, false, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "row 2 holds a NaN");
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", 3);
  tsr_params_add_int(&p, "row0", 0);
  tsr_buf in[2] = {buf_of(TSR_F64, 2, 4, 2, x), l.model}, out;
  ASSERT_EQ(run("kmeans_step", &p, in, 2, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "not a model of k = 3");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "k", 2);
  tsr_params_add_int(&p, "max_iter", 0);
  tsr_params_add_float(&p, "tol", 1e-4);
  tsr_params_add_floats(&p, "values", init, 4);
  ASSERT_EQ(run("kmeans_init", &p, NULL, 0, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "max_iter 0");
  tsr_params_clear(&p);
  lloyd_free(&l);
}

/* kmeans_loop's params threads and groups (0: not given) in loop_run. */
static int64_t loop_threads = 1, loop_groups = 0;

/* kmeans_loop over every chunk of l, its model and its states (none
 * before the first step): the model, then one state of all the rows. */
static int loop_run(lloyd *l, tsr_buf *out, tsr_errbuf *err)
{
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", l->k);
  tsr_params_add_int(&p, "parts", l->nb);
  if (loop_threads != 1) tsr_params_add_int(&p, "threads", loop_threads);
  if (loop_groups != 0) tsr_params_add_int(&p, "groups", loop_groups);
  tsr_buf *in = calloc((size_t)(2 * l->nb + 1), sizeof *in);
  int n = 0;
  for (int64_t b = 0; b < l->nb; b++) in[n++] = chunk_of(l, b);
  in[n++] = l->model;
  for (int64_t b = 0; b < l->nb && l->states[0].data != NULL; b++) in[n++] = l->states[b];
  int rc = run("kmeans_loop", &p, in, n, out, err);
  tsr_params_clear(&p);
  free(in);
  return rc;
}

/* loop_run with the params threads and groups for this run only (a
 * failed assertion after it leaves the defaults for the next test). */
static int loop_run_with(lloyd *l, int64_t threads, int64_t groups, tsr_buf *out, tsr_errbuf *err)
{
  loop_threads = threads, loop_groups = groups;
  int rc = loop_run(l, out, err);
  loop_threads = 1, loop_groups = 0;
  return rc;
}

/* ---------- kmeans_loop: the rest of a run in one task ---------- */

/* Row r's label in a kmeans_loop output (its model first). */
static int32_t loop_label(const lloyd *l, const tsr_buf *out, int64_t r)
{
  int32_t label;
  int64_t mlen = KM_HDR + l->k * l->d + 2 * l->k + 32 * (l->k + 1);
  memcpy(&label, (const char *)out->data + (mlen + STATE_HEAD(l->k, l->d)) * 8 + 16 * r, sizeof label);
  return label;
}

/* The rows of a loop output whose label differs from plain Lloyd's under
 * its final centers; *inertia_p: plain Lloyd's inertia under them. */
static int64_t loop_wrong(const lloyd *l, const tsr_buf *out, double *inertia_p, tsr_errbuf *err)
{
  const double *m = out->data;
  int64_t wrong = 0;
  *inertia_p = 0;
  for (int64_t b = 0; b < l->nb; b++) {
    int32_t *ref = reference_labels(l, b, m + KM_HDR, err);
    tsr_params p = TSR_PARAMS_INIT;
    tsr_params_add_int(&p, "k", l->k);
    tsr_params_add_int(&p, "row0", b * l->chunk);
    tsr_params_add_floats(&p, "centers", m + KM_HDR, (size_t)(l->k * l->d));
    tsr_buf xc = chunk_of(l, b), part;
    if (ref == NULL || run("kmeans_partial", &p, &xc, 1, &part, err) != 0) return -1;
    *inertia_p += ((double *)part.data)[l->k * l->d + l->k];
    for (int64_t r = 0; r < xc.meta.shape[0]; r++) wrong += loop_label(l, out, b * l->chunk + r) != ref[r];
    free(ref), free(part.data), tsr_params_clear(&p);
  }
  return wrong;
}

/* kmeans_loop of l with `threads` threads gives one's output byte for
 * byte: the same labels, bounds, sums, centers and inertia. */
static void check_same_bytes(lloyd *l, const tsr_buf *one, int64_t threads, int64_t groups)
{
  tsr_errbuf err;
  tsr_buf out;
  ASSERT_OK(loop_run_with(l, threads, groups, &out, &err));
  ASSERT_EQ(out.nbytes, one->nbytes);
  size_t differ = 0;
  for (size_t i = 0; i < one->nbytes; i++) differ += ((const char *)out.data)[i] != ((const char *)one->data)[i];
  if (differ != 0) fprintf(stderr, "  %lld threads: %zu of %zu bytes differ\n", (long long)threads, differ, one->nbytes);
  ASSERT_EQ(differ, 0);
  free(out.data);
}

/* kmeans_loop after `steps` iterations of kmeans_step / kmeans_update
 * (0: from the init, no states): done, every label plain Lloyd's under
 * its final centers, the inertia theirs, and the same number of
 * iterations as the chain of steps run to the end. */
static void check_loop(tsr_dtype dt, int64_t n, int64_t d, int64_t k, int64_t chunk, double spread, int steps)
{
  double *x = mixture(n, d, k, spread);
  lloyd l = lloyd_of(n, d, k, chunk, 0, dt, as_dtype(x, (size_t)(n * d), dt));
  lloyd chain = lloyd_of(n, d, k, chunk, 0, dt, l.x);
  tsr_errbuf err;
  tsr_buf out;
  double inertia = 0;
  ASSERT_OK(lloyd_start(&l, x, 300, 0, &err));
  ASSERT_OK(lloyd_start(&chain, x, 300, 0, &err));
  ASSERT_EQ(lloyd_check_all(&chain, &err), 0);
  for (int i = 0; i < steps; i++) ASSERT_EQ(lloyd_iteration(&l, true, &err), 0);
  ASSERT_OK(loop_run(&l, &out, &err));
  const double *m = out.data, *cm = chain.model.data;
  int64_t wrong = loop_wrong(&l, &out, &inertia, &err);
  fprintf(stderr, "  %d steps then the loop: %g iterations (the steps alone %g), %lld labels differ, inertia %.9g (%.9g)\n", steps,
          m[0], cm[0], (long long)wrong, m[3], cm[3]);
  ASSERT_EQ(wrong, 0);
  ASSERT_EQ(m[1], 2);
  ASSERT_EQ(m[0], cm[0]);
  ASSERT_NEAR(m[3], inertia, 1e-12);
  ASSERT_NEAR(m[3], cm[3], 1e-9);
  check_same_bytes(&l, &out, 2, 0);
  check_same_bytes(&l, &out, 5, 0);
  free(out.data);
  lloyd_free(&l), lloyd_free(&chain);
  free(l.x), free(x);
}

TEST(loop_gives_plain_lloyds_labels_from_the_init) { check_loop(TSR_F32, 3000, 7, 12, 700, 1.5, 0); }
TEST(loop_gives_plain_lloyds_labels_after_steps) { check_loop(TSR_F64, 2000, 3, 25, 512, 6.0, 2); }
TEST(loop_gives_plain_lloyds_labels_wide) { check_loop(TSR_F32, 1500, 64, 40, 400, 12.0, 3); }

/* ---------- Yinyang's groups in the loop ---------- */

/* The loop with `groups` groups against Hamerly's (no groups) over l: the
 * same labels, the model (centers, moves, drifts, inertia) and the
 * state's sums, counts and column sums byte for byte (the rows' bounds
 * differ); plain Lloyd's labels; 2 and 5 threads the same bytes. */
static void check_groups_on(lloyd *l, int64_t groups)
{
  tsr_errbuf err;
  tsr_buf ham, yy;
  double inertia;
  ASSERT_OK(loop_run(l, &ham, &err));
  ASSERT_OK(loop_run_with(l, 1, groups, &yy, &err));
  int64_t mlen = KM_HDR + l->k * l->d + 2 * l->k + 32 * (l->k + 1), differ = 0;
  ASSERT_EQ(yy.nbytes, ham.nbytes);
  ASSERT_TRUE(memcmp(yy.data, ham.data, (size_t)(mlen + STATE_HEAD(l->k, l->d)) * 8) == 0);
  for (int64_t r = 0; r < l->n; r++) differ += loop_label(l, &yy, r) != loop_label(l, &ham, r);
  ASSERT_EQ(differ, 0);
  ASSERT_EQ(loop_wrong(l, &yy, &inertia, &err), 0);
  ASSERT_EQ(((const double *)yy.data)[1], 2);
  fprintf(stderr, "  k = %lld, %lld groups: %g iterations, inertia %.9g, as Hamerly's\n", (long long)l->k, (long long)groups,
          ((const double *)yy.data)[0], ((const double *)yy.data)[3]);
  check_same_bytes(l, &yy, 2, groups);
  check_same_bytes(l, &yy, 5, groups);
  free(ham.data), free(yy.data);
}

static void check_groups(tsr_dtype dt, int64_t n, int64_t d, int64_t k, int64_t chunk, double spread, int steps, int64_t groups)
{
  double *x = mixture(n, d, k, spread);
  lloyd l = lloyd_of(n, d, k, chunk, 0, dt, as_dtype(x, (size_t)(n * d), dt));
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, x, 300, 0, &err));
  for (int i = 0; i < steps; i++) ASSERT_EQ(lloyd_iteration(&l, true, &err), 0);
  check_groups_on(&l, groups);
  lloyd_free(&l);
  free(l.x), free(x);
}

TEST(loop_groups_give_hamerlys_bytes_f32) { check_groups(TSR_F32, 3000, 7, 12, 700, 1.5, 0, 3); }
TEST(loop_groups_give_hamerlys_bytes_f64_after_steps) { check_groups(TSR_F64, 2000, 3, 25, 512, 6.0, 2, 4); }
TEST(loop_groups_give_hamerlys_bytes_wide) { check_groups(TSR_F32, 1500, 64, 40, 400, 12.0, 0, 4); }
TEST(loop_groups_one_a_center) { check_groups(TSR_F64, 2500, 5, 20, 600, 3.0, 0, 20); }

TEST(loop_groups_relocate_an_emptied_cluster)
{
  double x[12 * 2], init[3 * 2];
  two_groups_and_a_far_center(x, init);
  lloyd l = lloyd_of(12, 2, 3, 5, 0, TSR_F64, x);
  tsr_errbuf err;
  ASSERT_OK(lloyd_start(&l, init, 300, 1e-4, &err));
  check_groups_on(&l, 2);
  lloyd_free(&l);
}

TEST(loop_relocates_an_emptied_cluster_in_place)
{
  /* as an_emptied_cluster_takes_the_farthest_point, all in the loop: its
   * first update finds the empty cluster, its next pass (in place, full)
   * finds the farthest points */
  double x[12 * 2], init[3 * 2];
  two_groups_and_a_far_center(x, init);
  lloyd l = lloyd_of(12, 2, 3, 5, 0, TSR_F64, x);
  tsr_errbuf err;
  tsr_buf out;
  double inertia;
  ASSERT_OK(lloyd_start(&l, init, 300, 1e-4, &err));
  ASSERT_OK(loop_run(&l, &out, &err));
  const double *m = out.data;
  ASSERT_EQ(m[1], 2);
  ASSERT_EQ(m[KM_HDR + 4], 30);  /* the third center is the point (30, 30) */
  ASSERT_EQ(m[KM_HDR + 5], 30);
  ASSERT_EQ(loop_label(&l, &out, 11), 2);
  ASSERT_EQ(loop_wrong(&l, &out, &inertia, &err), 0);
  ASSERT_NEAR(m[3], inertia, 1e-12);
  free(out.data);
  lloyd_free(&l);
}

TEST(loop_threads_relocate_across_slices)
{
  /* 4000 rows in 2-d around (0, 0) and (10, 10), three of them moved out
   * far in different row slices; of five centers three start far from
   * every row, empty after the first pass: the relocation's pass (in
   * slices) must find the three farthest rows wherever they lie */
  int64_t n = 4000;
  double *x = malloc((size_t)(2 * n) * sizeof *x), init[5 * 2] = {0, 0, 10, 10, 1e4, 1e4, -1e4, 1e4, 1e4, -1e4};
  for (int64_t i = 0; i < n; i++) x[2 * i] = (i % 2 ? 10 : 0) + 0.001 * (double)(i % 7), x[2 * i + 1] = (i % 2 ? 10 : 0) + 0.001 * (double)(i % 5);
  static const int64_t far_rows[3] = {300, 2100, 3900};
  static const double far_at[3][2] = {{60, -40}, {-55, 70}, {90, 90}};
  for (int i = 0; i < 3; i++) x[2 * far_rows[i]] = far_at[i][0], x[2 * far_rows[i] + 1] = far_at[i][1];
  lloyd l = lloyd_of(n, 2, 5, 1000, 0, TSR_F64, x);
  tsr_errbuf err;
  tsr_buf out;
  double inertia;
  ASSERT_OK(lloyd_start(&l, init, 300, 1e-4, &err));
  ASSERT_OK(loop_run_with(&l, 3, 0, &out, &err));
  const double *m = out.data;
  ASSERT_EQ(m[1], 2);
  for (int i = 0; i < 3; i++) {  /* each far row is a center of its own */
    int32_t c = loop_label(&l, &out, far_rows[i]);
    ASSERT_TRUE(c >= 2);
    ASSERT_EQ(m[KM_HDR + 2 * c], far_at[i][0]);
    ASSERT_EQ(m[KM_HDR + 2 * c + 1], far_at[i][1]);
  }
  ASSERT_EQ(loop_wrong(&l, &out, &inertia, &err), 0);
  ASSERT_NEAR(m[3], inertia, 1e-9 * inertia);
  check_same_bytes(&l, &out, 1, 0);
  check_same_bytes(&l, &out, 4, 0);
  free(out.data);
  check_groups_on(&l, 2);  /* the three far rows' groups too */
  lloyd_free(&l);
  free(x);
}

TEST(loop_stops_at_max_iter_and_feeds_labels_and_model)
{
  double *x = mixture(900, 5, 9, 4.0);
  lloyd l = lloyd_of(900, 5, 9, 250, 0, TSR_F64, x);
  tsr_errbuf err;
  tsr_buf out, lab, model;
  ASSERT_OK(lloyd_start(&l, x, 2, 0, &err));
  ASSERT_EQ(lloyd_iteration(&l, true, &err), 0);
  ASSERT_OK(loop_run(&l, &out, &err));
  ASSERT_EQ(((const double *)out.data)[0], 2);
  ASSERT_EQ(((const double *)out.data)[1], 2);
  /* kmeans_labels reads the loop's rows at its model's offset; kmeans_model its model */
  int64_t mlen = KM_HDR + 9 * 5 + 2 * 9 + 32 * 10;
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", 9);
  tsr_params_add_int(&p, "d", 5);
  tsr_params_add_int(&p, "offset", mlen);
  tsr_params_add_int(&p, "start", 250);
  tsr_params_add_int(&p, "rows", 250);
  ASSERT_OK(run("kmeans_labels", &p, &out, 1, &lab, &err));
  ASSERT_EQ(lab.meta.shape[0], 250);
  for (int64_t r = 0; r < 250; r++) ASSERT_EQ(((int32_t *)lab.data)[r], loop_label(&l, &out, 250 + r));
  free(lab.data);
  ASSERT_OK(run("kmeans_model", &p, &out, 1, &model, &err));
  ASSERT_EQ(model.meta.shape[0], mlen);
  ASSERT_TRUE(memcmp(model.data, out.data, (size_t)mlen * 8) == 0);
  free(model.data);
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "k", 9);
  tsr_params_add_int(&p, "d", 5);
  tsr_params_add_int(&p, "offset", mlen + 1);
  ASSERT_EQ(run("kmeans_labels", &p, &out, 1, &lab, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "not a chunk's state");
  tsr_params_clear(&p);
  free(out.data);
  lloyd_free(&l);
  free(x);
}

TEST(loop_bad_input_is_named)
{
  double *x = mixture(900, 5, 9, 4.0);
  lloyd l = lloyd_of(900, 5, 9, 250, 0, TSR_F64, x);
  tsr_errbuf err;
  tsr_buf out;
  ASSERT_OK(lloyd_start(&l, x, 300, 1e-4, &err));
  ASSERT_EQ(lloyd_iteration(&l, false, &err), 0);
  /* states that do not cover the x chunks */
  tsr_params p = TSR_PARAMS_INIT;
  tsr_params_add_int(&p, "k", 9);
  tsr_params_add_int(&p, "parts", 4);
  tsr_buf in[6] = {chunk_of(&l, 0), chunk_of(&l, 1), chunk_of(&l, 2), chunk_of(&l, 3), l.model, l.states[0]};
  ASSERT_EQ(run("kmeans_loop", &p, in, 6, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "the states hold 250 rows, the x chunks 900");
  /* a model that is not one */
  in[4] = l.states[1];
  ASSERT_EQ(run("kmeans_loop", &p, in, 5, &out, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "input 4");
  ASSERT_CONTAINS(err.text, "not a model of k = 9");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "k", 9);
  ASSERT_EQ(run("kmeans_loop", &p, in, 5, &out, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "parts");
  /* a done model without states */
  ASSERT_OK(loop_run(&l, &out, &err));
  tsr_buf model = {0};
  model = buf_of(TSR_F64, 1, KM_HDR + 9 * 5 + 2 * 9 + 32 * 10, 0, out.data);
  tsr_params_add_int(&p, "parts", 4);
  tsr_buf in2[5] = {chunk_of(&l, 0), chunk_of(&l, 1), chunk_of(&l, 2), chunk_of(&l, 3), model};
  tsr_buf none;
  ASSERT_EQ(run("kmeans_loop", &p, in2, 5, &none, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "done but no state");
  /* threads out of range */
  tsr_params_add_int(&p, "threads", 0);
  ASSERT_EQ(run("kmeans_loop", &p, in2, 5, &none, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "param 'threads' is 0");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "k", 9);
  tsr_params_add_int(&p, "parts", 4);
  tsr_params_add_int(&p, "groups", 10);
  ASSERT_EQ(run("kmeans_loop", &p, in2, 5, &none, &err), TSR_EINVAL);
  ASSERT_CONTAINS(err.text, "param 'groups' is 10, not in 0..min(k = 9");
  tsr_params_clear(&p);
  tsr_params_add_int(&p, "k", 9);
  tsr_params_add_int(&p, "d", 5);
  ASSERT_EQ(run("kmeans_model", &p, &l.states[0], 1, &none, &err), TSR_ESHAPE);
  ASSERT_CONTAINS(err.text, "not a kmeans_loop output");
  tsr_params_clear(&p);
  free(out.data);
  lloyd_free(&l);
  free(x);
}

/* A .npy file's data (version 1 header, little-endian, C order): n
 * values of esize bytes, or NULL. */
static void *read_npy(const char *path, size_t esize, size_t *n_p)
{
  FILE *f = fopen(path, "rb");
  unsigned char head[10];
  void *data = NULL;
  if (f != NULL && fread(head, 1, 10, f) == 10 && fseek(f, 0, SEEK_END) == 0) {
    long end = ftell(f), start = 10 + head[8] + 256 * head[9];
    *n_p = (size_t)(end - start) / esize;
    data = malloc((size_t)(end - start));
    if (fseek(f, start, SEEK_SET) != 0 || fread(data, esize, *n_p, f) != *n_p) free(data), data = NULL;
  }
  if (f) fclose(f);
  return data;
}

/* --bench [X.npy init.npy]: the steps of bench/cluster's k-means (its
 * 100,000 x 50 f32 mixture and k-means++ init, k = 30, chunks of 16,384;
 * without files a synthetic mixture), one thread, each iteration's CPU time. */
static int bench(int argc, char **argv)
{
  int64_t n = 100000, d = 50, k = getenv("KM_K") ? atoi(getenv("KM_K")) : 30;
  size_t nx = 0, ni = 0;
  void *x32 = NULL;
  double *x = NULL, *init = NULL;
  if (argc >= 4) {
    x32 = read_npy(argv[2], 4, &nx), init = read_npy(argv[3], 8, &ni);
    if (getenv("KM_HUGE") && x32 != NULL) {  /* the scattered rows' TLB misses (docs/cluster.md) */
      size_t bytes = (nx * 4 + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
      void *h = aligned_alloc(2u << 20, bytes);
      if (h == NULL) return fprintf(stderr, "out of memory for X in 2 MiB pages\n"), 1;
      madvise(h, bytes, MADV_HUGEPAGE);
      memcpy(h, x32, nx * 4), free(x32), x32 = h;
    }
    if (x32 == NULL || init == NULL || ni == 0 || k < 1 || nx % (ni / (size_t)k) != 0) return fprintf(stderr, "cannot read %s / %s\n", argv[2], argv[3]), 1;
    d = (int64_t)ni / k, n = (int64_t)nx / d;
  } else {
    rng_state = 7;
    x = mixture(n, d, k, 3.0), init = x;
    x32 = as_dtype(x, (size_t)(n * d), TSR_F32);
  }
  lloyd l = lloyd_of(n, d, k, 16384, 0, TSR_F32, x32);
  tsr_errbuf err;
  if (lloyd_start(&l, init, 300, 1e-4, &err) != 0) return 1;
  double total = 0;
  while (getenv("KM_P") == NULL && ((const double *)l.model.data)[1] != 2) {
    double t = now();
    if (lloyd_iteration(&l, false, &err) < 0) return fprintf(stderr, "%s\n", err.text), 1;
    t = now() - t, total += t;
    printf("iteration %2d  %.3f ms\n", l.iterations, 1e3 * t);
  }
  printf("total %.1f ms for %d iterations (CPU time of one thread), inertia %.6g\n", 1e3 * total, l.iterations, ((double *)l.model.data)[3]);
  lloyd_free(&l);
  /* 0-4 iterations of steps, then kmeans_loop (graphs/kmeans.c on one worker: 0, the loop from the init) */
  for (int parallel = getenv("KM_P") ? atoi(getenv("KM_P")) : 0; parallel <= (getenv("KM_P") ? atoi(getenv("KM_P")) : 4); parallel++) {
    lloyd m = lloyd_of(n, d, k, 16384, 0, TSR_F32, x32);
    double t = now(), t_loop, w_loop;
    tsr_buf out;
    if (lloyd_start(&m, init, 300, 1e-4, &err) != 0) return 1;
    for (int i = 0; i < parallel; i++)
      if (lloyd_iteration(&m, false, &err) < 0) return fprintf(stderr, "%s\n", err.text), 1;
    t_loop = now(), w_loop = wall();
    loop_threads = getenv("KM_T") ? atoi(getenv("KM_T")) : 1;
    loop_groups = getenv("KM_G") ? atoi(getenv("KM_G")) : 0;
    if (loop_run(&m, &out, &err) != 0) return fprintf(stderr, "%s\n", err.text), 1;
    t = now() - t, t_loop = now() - t_loop, w_loop = wall() - w_loop;
    printf("%d iterations of steps, then kmeans_loop (groups %lld): %.1f ms (the loop %.1f ms; %lld threads: %.1f ms of wall), %g iterations, inertia %.6g\n",
           parallel, (long long)loop_groups, 1e3 * t, 1e3 * t_loop, (long long)loop_threads, 1e3 * w_loop, ((double *)out.data)[0],
           ((double *)out.data)[3]);
    free(out.data);
    lloyd_free(&m);
  }
  if (x == NULL) free(init);
  free(x32), free(x);
  return 0;
}

int main(int argc, char **argv)
{
  tsr_ops_init(false);
  if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench(argc, argv);
  RUN(steps_give_plain_lloyds_labels_f32);
  RUN(steps_give_plain_lloyds_labels_f64_overlapping);
  RUN(steps_give_plain_lloyds_labels_wide);
  RUN(max_iter_stops_the_loop_then_the_final_e_step);
  RUN(a_step_over_several_chunks_labels_each_row);
  RUN(an_emptied_cluster_takes_the_farthest_point);
  RUN(bad_input_is_named);
  RUN(loop_gives_plain_lloyds_labels_from_the_init);
  RUN(loop_gives_plain_lloyds_labels_after_steps);
  RUN(loop_gives_plain_lloyds_labels_wide);
  RUN(loop_groups_give_hamerlys_bytes_f32);
  RUN(loop_groups_give_hamerlys_bytes_f64_after_steps);
  RUN(loop_groups_give_hamerlys_bytes_wide);
  RUN(loop_groups_one_a_center);
  RUN(loop_groups_relocate_an_emptied_cluster);
  RUN(loop_relocates_an_emptied_cluster_in_place);
  RUN(loop_threads_relocate_across_slices);
  RUN(loop_stops_at_max_iter_and_feeds_labels_and_model);
  RUN(loop_bad_input_is_named);
  return kit_summary();
}
