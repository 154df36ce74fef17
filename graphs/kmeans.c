/* k-means (tessera/cluster.h, tsr_kmeans) as scikit-learn's Lloyd loop,
 * with Hamerly's bounds (kernels/cpu/kmeans_step.c; docs/cluster.md).
 * x's row chunks are split into runs, one per thread of the cluster; an
 * iteration is a kmeans_step task per run (its x chunks, the model, its
 * last state) and a kmeans_update of the model from every state. The
 * client records KM_BLOCK iterations a graph, gathers only the model and
 * keeps the states held on the workers for the next graph, until the
 * model says done (converged, the final E-step run, the inertia summed).
 * On one worker the whole run is instead one kmeans_loop task from the
 * init, on the worker's threads (param threads).
 * Labels: a kmeans_labels task per x chunk over the final states.
 * k-means++ is one kmeans_pp task per init (kernels/cpu/kmeans.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "tessera/cluster.h"

#define TSR_API __attribute__((visibility("default")))

#define KM_LABEL_ROWS ((int64_t)1 << 24)   /* labels a chunk after the loop: 64 MiB of i32 */

typedef struct km_run {
  tsr_array_ctx *ctx;
  const tsr_array *x;
  int64_t k, d;
  int timeout_ms;
  int64_t groups;      /* step tasks an iteration: runs of x's chunks */
  int64_t parallel;    /* iterations of steps before kmeans_loop runs the rest; -1: no loop */
  int64_t loop_threads; /* the loop's threads: its worker's executor threads */
  int64_t *first;      /* groups + 1: group g holds chunks [first[g], first[g + 1]) */
  bool early_labels;   /* the labels' tasks join the loop's graph (km_lloyd) */
} km_run;

/* The model chunk's layout (kernels/cpu/kmeans_step.c): a header, then
 * the centers k·d, each center's move k and half its nearest distance k,
 * the cumulative moves of the last KM_EPOCHS iterations. */
#define KM_HDR 8
#define KM_M_IT 0
#define KM_M_PHASE 1
#define KM_M_INERTIA 3
#define KM_PHASE_DONE 2
#define KM_EPOCHS 32
#define KM_MODEL_LEN(k, d) (KM_HDR + (k) * (d) + 2 * (k) + KM_EPOCHS * ((k) + 1))
/* Lloyd iterations a graph: the client learns of convergence once a
 * graph, and the iterations after it in the same graph pass their inputs
 * through (cheap), so a block trades round trips against wasted levels. */
#define KM_BLOCK 8
/* On one worker the whole run is one kmeans_loop task from the init,
 * its passes on all the worker's threads (the graph has no other task
 * while it runs): parallel steps would cost each iteration two round
 * trips through the scheduler and a copy of every run's state, more than
 * a late iteration's work (~1 ms of one thread on the bench). */
#define KM_PARALLEL 0

/* One run's chain of iterations: the last model and the chunks' states,
 * kept on the cluster by `held` between graphs. */
typedef struct km_chain {
  char model[256];
  char (*states)[256];
  bool have_states;
  char loop[256];      /* the kmeans_loop output (model and every row's state), once looped */
  bool looped;
  tsr_future *held;
  int iterations;
  tsr_array *labels;   /* made with the loop (early_labels), computed in its graph */
} km_chain;

static int km_init_model(const km_run *r, const tsr_kmeans_opts *o, const double *centers, km_chain *ch)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_int(a, "k", r->k);
  if (rc == 0) rc = tsr_args_int(a, "max_iter", o->max_iter);
  if (rc == 0) rc = tsr_args_float(a, "tol", o->tol);
  if (rc == 0) rc = tsr_args_floats(a, "values", centers, (size_t)(r->k * r->d));
  if (rc == 0) rc = gtask_add_tmp(r->ctx, "kmeans-init", "kmeans_init", a, NULL, 0, ch->model, sizeof ch->model);
  tsr_args_destroy(&a);
  return rc;
}

/* Records one iteration: a kmeans_step per group of chunks (its x
 * chunks, the model, its last state), then kmeans_update of the model
 * from every state. */
static int km_iteration(const km_run *r, km_chain *ch)
{
  int64_t ng = r->groups, most = 0;
  for (int64_t g = 0; g < ng; g++) most = r->first[g + 1] - r->first[g] > most ? r->first[g + 1] - r->first[g] : most;
  tsr_args *a = NULL, *u = NULL;
  const char **in = malloc((size_t)(ng + most + 2) * sizeof *in);
  int rc = in != NULL ? tsr_args_new(&u) : client_fail(TSR_ENOMEM, "kmeans: out of memory");
  if (rc == 0) rc = tsr_args_int(u, "k", r->k);
  if (rc == 0) rc = tsr_args_int(u, "d", r->d);
  for (int64_t g = 0; rc == 0 && g < ng; g++) {
    int64_t parts = r->first[g + 1] - r->first[g];
    for (int64_t i = 0; i < parts; i++) in[i] = r->x->keys[r->first[g] + i];
    in[parts] = ch->model, in[parts + 1] = ch->states[g];
    rc = tsr_args_new(&a);
    if (rc == 0) rc = tsr_args_int(a, "k", r->k);
    if (rc == 0) rc = tsr_args_int(a, "row0", r->first[g] * r->x->chunk[0]);
    if (rc == 0) rc = tsr_args_int(a, "parts", parts);
    char key[256];  /* not straight into states[g]: it is an input */
    size_t n_in = (size_t)parts + (ch->have_states ? 2 : 1);
    if (rc == 0) rc = gtask_add_tmp(r->ctx, "kmeans-step", "kmeans_step", a, in, n_in, key, sizeof key);
    if (rc == 0) memcpy(ch->states[g], key, sizeof key);
    tsr_args_destroy(&a);
  }
  ch->have_states = true;
  if (rc == 0) {
    in[0] = ch->model;
    for (int64_t g = 0; g < ng; g++) in[g + 1] = ch->states[g];
    char model[256];
    rc = gtask_add_tmp(r->ctx, "kmeans-model", "kmeans_update", u, in, (size_t)ng + 1, model, sizeof model);
    memcpy(ch->model, model, sizeof model);
  }
  free(in);
  tsr_args_destroy(&u);
  return rc;
}

/* Records the rest of the run as one kmeans_loop task (all of x, the
 * model, the states so far) and the kmeans_model of its output. */
static int km_loop(const km_run *r, km_chain *ch)
{
  int64_t nb = (int64_t)r->x->nblocks, ng = ch->have_states ? r->groups : 0;
  tsr_args *a = NULL, *b = NULL;
  const char **in = malloc((size_t)(nb + 1 + ng) * sizeof *in);
  int rc = in != NULL ? tsr_args_new(&a) : client_fail(TSR_ENOMEM, "kmeans: out of memory");
  if (rc == 0) rc = tsr_args_new(&b);
  if (rc == 0) rc = tsr_args_int(a, "k", r->k);
  if (rc == 0) rc = tsr_args_int(a, "parts", nb);
  if (rc == 0 && r->loop_threads > 1) rc = tsr_args_int(a, "threads", r->loop_threads);
  if (rc == 0) rc = tsr_args_int(b, "k", r->k);
  if (rc == 0) rc = tsr_args_int(b, "d", r->d);
  for (int64_t i = 0; rc == 0 && i < nb; i++) in[i] = r->x->keys[i];
  if (rc == 0) in[nb] = ch->model;
  for (int64_t g = 0; rc == 0 && g < ng; g++) in[nb + 1 + g] = ch->states[g];
  if (rc == 0) rc = gtask_add_tmp(r->ctx, "kmeans-loop", "kmeans_loop", a, in, (size_t)(nb + 1 + ng), ch->loop, sizeof ch->loop);
  if (rc == 0) {
    const char *loop = ch->loop;
    char model[256];
    rc = gtask_add_tmp(r->ctx, "kmeans-model", "kmeans_model", b, &loop, 1, model, sizeof model);
    if (rc == 0) memcpy(ch->model, model, sizeof model), ch->looped = true;
  }
  free(in);
  tsr_args_destroy(&a), tsr_args_destroy(&b);
  return rc;
}

/* Runs the recorded iterations: one graph wanting the model and the
 * states, which stay held (ctx->held: later graphs start from them) until
 * the next block's graph has its own. The model comes back into m. */
static int km_run_block(const km_run *r, km_chain *ch, double *m)
{
  int64_t nb = ch->looped ? 1 : r->groups, len = KM_MODEL_LEN(r->k, r->d);
  int64_t nl = ch->labels != NULL ? (int64_t)ch->labels->nblocks : 0;
  char **keys = malloc((size_t)(nb + nl + 1) * sizeof *keys);
  if (keys == NULL) return client_fail(TSR_ENOMEM, "kmeans: out of memory");
  keys[0] = ch->model;
  for (int64_t i = 0; i < nb; i++) keys[i + 1] = ch->looped ? ch->loop : ch->states[i];
  for (int64_t i = 0; i < nl; i++) keys[nb + 1 + i] = ch->labels->keys[i];
  nb += nl;
  tsr_future *f = NULL;
  tsr_chunk *c = NULL;
  int rc = grun_submit(r->ctx, keys, (size_t)nb + 1, r->timeout_ms, &f);
  if (rc == 0) rc = tsr_gather(r->ctx->client, ch->model, r->timeout_ms, &c);
  if (rc == 0 && (c->dtype != TSR_F64 || c->nbytes != (size_t)len * sizeof *m))
    rc = client_fail(TSR_ESHAPE, "kmeans: the model '%s' came back with %zu bytes, not %lld", ch->model, c->nbytes, (long long)len * 8);
  if (rc == 0) memcpy(m, c->data, (size_t)len * sizeof *m);
  for (int64_t i = 0; rc == 0 && i <= nb; i++)
    if (tsr_strmap_put(r->ctx->held, keys[i], strlen(keys[i]), 1) != 0) rc = client_fail(TSR_ENOMEM, "kmeans: out of memory");
  tsr_chunk_destroy(&c);
  free(keys);
  tsr_future_release(&ch->held);  /* the previous block's chunks: nothing reads them any more */
  ch->held = f;
  return rc;
}

static int km_label_array(const km_run *r, const km_chain *ch, tsr_array **labels_p);

/* One Lloyd run from centers (updated in place), KM_BLOCK iterations a
 * graph until the model says done (converged and the final E-step run);
 * *inertia_p afterwards. ch keeps the final states for the labels. */
static int km_lloyd(const km_run *r, const tsr_kmeans_opts *o, double *centers, double *inertia_p, km_chain *ch)
{
  int64_t len = KM_MODEL_LEN(r->k, r->d);
  double *m = malloc((size_t)len * sizeof *m);
  ch->states = calloc((size_t)r->groups, sizeof *ch->states);
  int rc = m && ch->states ? km_init_model(r, o, centers, ch) : client_fail(TSR_ENOMEM, "kmeans: out of memory");
  bool done = false;
  while (rc == 0 && !done) {
    int64_t steps = r->parallel >= 0 ? r->parallel : KM_BLOCK;
    for (int64_t it = 0; rc == 0 && it < steps; it++) rc = km_iteration(r, ch);
    if (rc == 0 && r->parallel >= 0) rc = km_loop(r, ch);
    if (rc == 0 && r->parallel >= 0 && r->early_labels) rc = km_label_array(r, ch, &ch->labels);
    if (rc == 0) rc = km_run_block(r, ch, m);
    done = rc == 0 && m[KM_M_PHASE] == KM_PHASE_DONE;
    if (rc == 0 && !done && ch->looped) rc = client_fail(TSR_EPROTO, "kmeans: kmeans_loop returned a model that is not done");
  }
  if (rc == 0) {
    memcpy(centers, m + KM_HDR, (size_t)(r->k * r->d) * sizeof *centers);
    *inertia_p = m[KM_M_INERTIA], ch->iterations = (int)m[KM_M_IT];
  }
  free(m);
  return rc;
}

static void km_chain_clear(tsr_array_ctx *ctx, km_chain *ch)
{
  tsr_array_free(ctx, &ch->labels);
  tsr_future_release(&ch->held);
  free(ch->states);
  memset(ch, 0, sizeof *ch);
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

/* Splits x's row chunks into runs, one step task each an iteration: as
 * many as the cluster has threads (fewer tasks than chunks: each task and
 * each level of the graph costs a scheduler round trip), contiguous, so a
 * state covers a run of rows. One chunk a run when the scheduler cannot
 * say. */
static int km_groups(km_run *r)
{
  int64_t nb = r->x->nchunks[0], threads = 0;
  size_t workers = 0;
  tsr_cluster_info *info = NULL;
  if (r->ctx->client != NULL && tsr_cluster_info_get(r->ctx->client, 10000, &info) == 0) {
    for (size_t i = 0; i < info->n_workers; i++) threads += info->workers[i].threads > 0 ? info->workers[i].threads : 1;
    workers = info->n_workers;
    tsr_cluster_info_destroy(&info);
  }
  r->groups = threads > 0 && threads < nb ? threads : nb;
  /* one worker: x is in its memory, so the loop task reads it without a
   * transfer, and its threads are the loop's */
  r->parallel = workers == 1 ? KM_PARALLEL : -1;
  r->loop_threads = workers == 1 && threads > 1 ? (threads < 64 ? threads : 64) : 1;
  r->first = malloc((size_t)(r->groups + 1) * sizeof *r->first);
  if (r->first == NULL) return client_fail(TSR_ENOMEM, "kmeans: out of memory");
  for (int64_t g = 0; g <= r->groups; g++) r->first[g] = g * nb / r->groups;
  return 0;
}

/* Keeps the chain's last graph (its states) for as long as the context:
 * the labels array reads them. */
static int km_keep(tsr_array_ctx *ctx, km_chain *ch)
{
  if (ctx->n_persisted == ctx->cap_persisted) {
    size_t cap = ctx->cap_persisted ? 2 * ctx->cap_persisted : 8;
    tsr_future **bigger = realloc(ctx->persisted, cap * sizeof *bigger);
    if (bigger == NULL) return client_fail(TSR_ENOMEM, "kmeans: out of memory");
    ctx->persisted = bigger, ctx->cap_persisted = cap;
  }
  ctx->persisted[ctx->n_persisted++] = ch->held;
  ch->held = NULL;
  return 0;
}

/* One kmeans_labels task: rows [start, start + rows) of the state in. */
static int km_label_task(const km_run *r, const km_chain *ch, const char *key, const char *in, int64_t start, int64_t rows)
{
  tsr_args *b = NULL;
  int rc = tsr_args_new(&b);
  if (rc == 0) rc = tsr_args_int(b, "k", r->k);
  if (rc == 0) rc = tsr_args_int(b, "d", r->d);
  if (rc == 0 && ch->looped) rc = tsr_args_int(b, "offset", KM_MODEL_LEN(r->k, r->d));
  if (rc == 0) rc = tsr_args_int(b, "start", start);
  if (rc == 0) rc = tsr_args_int(b, "rows", rows);
  if (rc == 0) rc = gtask_add(r->ctx, key, "kmeans_labels", b, &in, 1);
  tsr_args_destroy(&b);
  return rc;
}

/* The labels: a kmeans_labels task per chunk of x over the final states.
 * After the loop every row's state is one chunk on one worker, so the
 * labels come in chunks of up to KM_LABEL_ROWS rows instead of x's: one
 * task and one fetch for 100,000 rows rather than one per x chunk (each a
 * scheduler round trip and a fetch: ~1.5 ms of a 30 ms k-means). */
static int km_label_array(const km_run *r, const km_chain *ch, tsr_array **labels_p)
{
  tsr_array *l = NULL;
  int64_t n = r->x->shape[0], chunk = ch->looped ? (n < KM_LABEL_ROWS ? n : KM_LABEL_ROWS) : r->x->chunk[0];
  int rc = garray_new(r->ctx, "kmeans-labels", TSR_I32, 1, &n, &chunk, &l);
  if (ch->looped)
    for (int64_t i = 0; rc == 0 && i < (int64_t)l->nblocks; i++)
      rc = km_label_task(r, ch, l->keys[i], ch->loop, i * chunk, n - i * chunk < chunk ? n - i * chunk : chunk);
  for (int64_t g = 0; !ch->looped && rc == 0 && g < r->groups; g++)
    for (int64_t i = r->first[g]; rc == 0 && i < r->first[g + 1]; i++)
      rc = km_label_task(r, ch, l->keys[i], ch->states[g], (i - r->first[g]) * chunk, garray_chunk_len(r->x, 0, i));
  if (rc == 0) *labels_p = l;
  else tsr_array_free(r->ctx, &l);
  return rc;
}

/* The labels array, its states kept for as long as the context: made
 * here, or made with the loop and computed already (early_labels). */
static int km_labels(const km_run *r, km_chain *ch, tsr_array **labels_p)
{
  int rc = km_keep(r->ctx, ch);
  if (rc != 0 || ch->labels == NULL) return rc == 0 ? km_label_array(r, ch, labels_p) : rc;
  *labels_p = ch->labels, ch->labels = NULL;
  return 0;
}

/* The output arrays: the labels (km_labels), the centers by a
 * kmeans_centers task holding the values in its params. */
static int km_outputs(const km_run *r, km_chain *ch, const double *centers, tsr_array **labels_p, tsr_array **centers_p)
{
  int rc = labels_p != NULL ? km_labels(r, ch, labels_p) : 0;
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
  km_run r = {ctx, x, o.k, x->shape[1], o.timeout_ms, 0, -1, 1, NULL, false};
  size_t kd = (size_t)(r.k * r.d);
  double *best = malloc(kd * sizeof *best), *cur = malloc(kd * sizeof *cur), best_in = INFINITY;
  km_chain kept = {0}, run_chain = {0};
  if (best == NULL || cur == NULL) rc = client_fail(TSR_ENOMEM, "kmeans: out of memory");
  if (rc == 0) rc = km_groups(&r);
  int runs = o.init != NULL ? 1 : o.n_init;
  /* One run that ends in the loop's graph: its labels' tasks join that
   * graph and run as soon as the loop is done, rather than in a graph of
   * their own after the model comes back (two scheduler round trips of a
   * ~30 ms k-means on the bench). */
  r.early_labels = labels_p != NULL && runs == 1;
  for (int run = 0; rc == 0 && run < runs; run++) {
    double inertia = 0;
    if (o.init != NULL) memcpy(cur, o.init, kd * sizeof *cur);
    else rc = km_pp(&r, o.seed + (uint64_t)run, cur);
    if (rc == 0) rc = km_lloyd(&r, &o, cur, &inertia, &run_chain);
    if (rc == 0 && inertia < best_in) {  /* keep this run's states (the labels) and drop the last best's */
      best_in = inertia, memcpy(best, cur, kd * sizeof *best);
      km_chain_clear(ctx, &kept);
      kept = run_chain, memset(&run_chain, 0, sizeof run_chain);
    }
    km_chain_clear(ctx, &run_chain);
  }
  if (rc == 0) rc = km_outputs(&r, &kept, best, labels_p, centers_p);
  if (rc == 0 && inertia_p != NULL) *inertia_p = best_in;
  km_chain_clear(ctx, &kept), km_chain_clear(ctx, &run_chain);
  free(best), free(cur), free(r.first);
  return rc;
}
