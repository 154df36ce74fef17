/* kernels/cpu/kmeans_loop.c — the rest of a Lloyd run in one task
 * (graphs/kmeans.c; docs/cluster.md, "k-means").
 *
 * kmeans_loop (inputs: every row chunk of x in order, parts of them; the
 *   model; the states of the runs of chunks the parallel steps so far
 *   kept, in row order, or none; params k, parts, threads (default 1),
 *   groups (default 0: Hamerly's bounds; n > 1: Yinyang's n groups, off
 *   by default as measured in docs/cluster.md)): runs kmeans_step and
 *   kmeans_update over all the rows until the model is done (converged,
 *   the final E-step run, the inertia summed) and returns the model
 *   followed by one state of all the rows: f64 [KM_MODEL_LEN(k, d) +
 *   KM_STATE_LEN(k, d, rows)]. Once the bounds keep most rows, an
 *   iteration's work is far below what a scheduler round trip and a copy
 *   of the states cost, so the late iterations run here, updating the
 *   task's own output in place (the inputs are not written). The passes
 *   are kmeans_step's (tsr_km_pass_slice), the labels therefore plain
 *   Lloyd's. The task's private memory (km_private, not in the output)
 *   holds each row's scan key, its |x|² once computed (x does not
 *   change, a placed row's norm is read instead of recomputed) and, with
 *   groups, its group bounds.
 * kmeans_model (input: a kmeans_loop output; params k, d): its model. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kmeans.h"

#define KM_THREADS_MAX 64
/* A pass's slices: at most KM_SLICES, of at least KM_SLICE_MIN rows (so a
 * slice's sums, ~12 KB at k = 30 x 50, stay small beside its rows' work)
 * and enough of them for two to four threads to share evenly. */
#define KM_SLICES 16
#define KM_SLICE_MIN 256
/* Pauses a thread of the loop spins before it sleeps (~10-30 us: on a
 * loaded machine a spinning helper may hold the core its team needs). */
#define KM_SPIN 1000
#if defined(__x86_64__) || defined(__i386__)
#define KM_PAUSE() __builtin_ia32_pause()
#else
#define KM_PAUSE() __asm__ __volatile__("" ::: "memory")
#endif

static int loop_int(const char *op, const tsr_params *p, const char *name, int64_t *v, tsr_errbuf *err)
{
  int rc = tsr_params_get_int(p, name, v, err);
  return rc == 0 ? 0 : tsr_k_param_fail(op, rc, err);
}

static bool is_state(const tsr_meta *m, int64_t k, int64_t d)
{
  return m->ndim == 1 && m->dtype == TSR_F64 && m->shape[0] >= KM_STATE_HEAD(k, d) &&
         KM_STATE_LEN(k, d, KM_STATE_ROWS(k, d, m->shape[0])) == m->shape[0];
}

/* The x chunks' rows, or a negative rc naming the chunk that is not an
 * f32/f64 2-D chunk like the first. */
static int64_t loop_rows(const tsr_meta *in, int64_t parts, tsr_errbuf *err)
{
  int64_t rows = 0;
  for (int64_t i = 0; i < parts; i++) {
    if (in[i].ndim != 2 || !tsr_k_is_float(in[i].dtype) || in[i].dtype != in[0].dtype || in[i].shape[1] != in[0].shape[1])
      return tsr_fail(err, TSR_ESHAPE, "kmeans_loop: input %lld is %s, not an f32/f64 2-D chunk like input 0 (%s)",
                      (long long)i, tsr_k_str(&in[i]).s, tsr_k_str(&in[0]).s);
    rows += in[i].shape[0];
  }
  return rows;
}

static int loop_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t k, parts, rows, have = 0;
  int rc = loop_int("kmeans_loop", p, "k", &k, err);
  if (rc == 0) rc = loop_int("kmeans_loop", p, "parts", &parts, err);
  if (rc != 0) return rc;
  int64_t threads = 1;
  if (tsr_params_find(p, "threads") != NULL && (rc = loop_int("kmeans_loop", p, "threads", &threads, err)) != 0) return rc;
  if (threads < 1 || threads > KM_THREADS_MAX)
    return tsr_fail(err, TSR_EINVAL, "kmeans_loop: param 'threads' is %lld, not in 1..%d", (long long)threads, KM_THREADS_MAX);
  int64_t groups = 0;
  if (tsr_params_find(p, "groups") != NULL && (rc = loop_int("kmeans_loop", p, "groups", &groups, err)) != 0) return rc;
  if (groups < 0 || groups > KM_GROUPS_MAX || groups > k)
    return tsr_fail(err, TSR_EINVAL, "kmeans_loop: param 'groups' is %lld, not in 0..min(k = %lld, %d) (0: the default)",
                    (long long)groups, (long long)k, KM_GROUPS_MAX);
  if (k < 1 || parts < 1 || n < parts + 1)
    return tsr_fail(err, TSR_EINVAL, "kmeans_loop: %d inputs for k = %lld, parts = %lld (the x chunks, the model, states)", n,
                    (long long)k, (long long)parts);
  if ((rows = loop_rows(in, parts, err)) < 0) return (int)rows;
  int64_t d = in[0].shape[1];
  const tsr_meta *m = &in[parts];
  if (m->ndim != 1 || m->dtype != TSR_F64 || m->shape[0] != KM_MODEL_LEN(k, d))
    return tsr_fail(err, TSR_ESHAPE, "kmeans_loop: input %lld is %s, not a model of k = %lld x %lld", (long long)parts,
                    tsr_k_str(m).s, (long long)k, (long long)d);
  for (int i = (int)parts + 1; i < n; i++) {
    if (!is_state(&in[i], k, d))
      return tsr_fail(err, TSR_ESHAPE, "kmeans_loop: input %d is %s, not a state of k = %lld x %lld", i, tsr_k_str(&in[i]).s,
                      (long long)k, (long long)d);
    have += KM_STATE_ROWS(k, d, in[i].shape[0]);
  }
  if (n > parts + 1 && have != rows)
    return tsr_fail(err, TSR_ESHAPE, "kmeans_loop: the states hold %lld rows, the x chunks %lld", (long long)have, (long long)rows);
  int64_t len = KM_MODEL_LEN(k, d) + KM_STATE_LEN(k, d, rows);
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

/* The states at in (g of them, rows in order) as one state at st: the
 * sums, counts and column sums added in input order (kmeans_update's
 * order), the rows one after the other; no farthest points (a state that
 * needs them is followed by a full pass, which finds them). */
static void join_states(double *st, const tsr_buf *in, int g, int64_t k, int64_t d)
{
  int64_t head = KM_STATE_HEAD(k, d), at = 0;
  memset(st, 0, (size_t)head * sizeof *st);
  for (int i = 0; i < g; i++) {
    const double *s = in[i].data;
    for (int64_t j = 0; j < k * d + k; j++) st[j] += s[j];
    for (int64_t j = 0; j < 2 * d; j++) st[KM_LEN(k, d) + j] += s[KM_LEN(k, d) + j];
    int64_t rows = KM_STATE_ROWS(k, d, in[i].meta.shape[0]);
    memcpy((km_row *)(st + head) + at, s + head, (size_t)rows * sizeof(km_row));
    at += rows;
  }
  for (int64_t j = 0; j < k; j++) st[k * d + k + 1 + 3 * j + 1] = -1;
}

/* ---------- Yinyang's groups ---------- */

/* Each center's group in of: k-means of the centers (Ding et al.: five
 * Lloyd iterations from n of them spread over the index range, ties to
 * the smaller group; a group that empties keeps its center). */
static void groups_assign(const double *centers, int64_t k, int64_t d, int64_t n, int32_t *of, double *gc)
{
  for (int64_t g = 0; g < n; g++) memcpy(gc + g * d, centers + (g * k / n) * d, (size_t)d * sizeof *gc);
  for (int it = 0; it < 5; it++) {
    for (int64_t c = 0; c < k; c++) {
      double best = INFINITY;
      of[c] = 0;
      for (int64_t g = 0; g < n; g++) {
        double v = exact_d2(centers + c * d, gc + g * d, d);
        if (v < best) best = v, of[c] = (int32_t)g;
      }
    }
    for (int64_t g = 0; g < n; g++) {
      double count = 0, *mean = gc + g * d;
      for (int64_t c = 0; c < k; c++) count += of[c] == g;
      if (count == 0) continue;
      memset(mean, 0, (size_t)d * sizeof *mean);
      for (int64_t c = 0; c < k; c++)
        for (int64_t j = 0; j < d && of[c] == g; j++) mean[j] += centers[c * d + j];
      for (int64_t j = 0; j < d; j++) mean[j] /= count;
    }
  }
}

/* The groups of a run from the model m's centers (param groups: 0 the
 * default), their drifts zero from m's iteration on; n = 1: none. */
static int groups_start(km_private *yy, int64_t groups, const double *m, int64_t k, int64_t d, int64_t rows, tsr_errbuf *err)
{
  memset(yy, 0, sizeof *yy);
  yy->n = groups > 0 ? groups : 1;
  yy->key = malloc((size_t)rows * sizeof *yy->key), yy->norm2 = malloc((size_t)rows * sizeof *yy->norm2);
  if (yy->key == NULL || yy->norm2 == NULL)
    return tsr_fail(err, TSR_ENOMEM, "kmeans_loop: out of memory for %lld rows' keys", (long long)rows);
  for (int64_t r = 0; r < rows; r++) yy->key[r] = -1, yy->norm2[r] = -1;  /* joined states' rows: the full test */
  if (yy->n <= 1) return yy->n = 1, 0;
  double *gc = malloc((size_t)(yy->n * d) * sizeof *gc);
  yy->of = malloc((size_t)k * sizeof *yy->of);
  yy->drift = calloc((size_t)(KM_EPOCHS * yy->n), sizeof *yy->drift);
  yy->lb = malloc((size_t)(rows * yy->n) * sizeof *yy->lb);
  if (gc == NULL || yy->of == NULL || yy->drift == NULL || yy->lb == NULL)
    return free(gc), tsr_fail(err, TSR_ENOMEM, "kmeans_loop: out of memory for %lld rows' group bounds", (long long)rows);
  groups_assign(m + KM_HDR, k, d, yy->n, yy->of, gc);
  free(gc);
  return 0;
}

static void groups_free(km_private *yy) { free(yy->of), free(yy->drift), free(yy->lb), free(yy->key), free(yy->norm2); }

/* After an update from iteration t to t + 1: each group's cumulative
 * drift grows by its largest center move (the model's moves, rounded
 * up); a relocation's update or the final one moves no iteration. */
static void groups_drift(km_private *yy, const double *m, int64_t k, int64_t d, int64_t t)
{
  if (yy->n <= 1 || (int64_t)m[M_IT] == t) return;
  const double *shift = m + KM_HDR + k * d;
  const double *was = yy->drift + (t % KM_EPOCHS) * yy->n;
  double *now = yy->drift + ((t + 1) % KM_EPOCHS) * yy->n;
  for (int64_t g = 0; g < yy->n; g++) now[g] = was[g];
  double top[KM_GROUPS_MAX] = {0};
  for (int64_t c = 0; c < k; c++) top[yy->of[c]] = shift[c] > top[yy->of[c]] ? shift[c] : top[yy->of[c]];
  for (int64_t g = 0; g < yy->n; g++) now[g] += top[g];
}

/* ---------- the threads of a pass ---------- */

typedef struct km_team {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  pthread_t *helpers;
  int n_helpers;
  int64_t gen;             /* passes published */
  bool quit;
  const km_pass *pass;     /* this pass */
  km_row *state;           /* every row's */
  double *acc;             /* n_slices × KM_STATE_HEAD: each slice's delta */
  int64_t n_slices, rows, head;
  int64_t next;            /* the next slice to take (atomic) */
  int64_t finished;        /* slices done this pass */
  int rc;                  /* the first failure of the pass, its message in err */
  tsr_errbuf err;
} km_team;

/* Takes slices of the pass until none is left (any thread). */
static void team_work(km_team *t)
{
  int64_t i, did = 0;
  while ((i = __atomic_fetch_add(&t->next, 1, __ATOMIC_ACQ_REL)) < t->n_slices) {
    tsr_errbuf err;
    err.text[0] = '\0';
    int rc = tsr_km_pass_slice(t->pass, i * t->rows / t->n_slices, (i + 1) * t->rows / t->n_slices, t->state,
                               t->acc + i * t->head, &err);
    if (rc != 0) {
      pthread_mutex_lock(&t->mu);
      if (t->rc == 0) t->rc = rc, t->err = err;
      pthread_mutex_unlock(&t->mu);
    }
    did++;
  }
  pthread_mutex_lock(&t->mu);
  if (__atomic_add_fetch(&t->finished, did, __ATOMIC_ACQ_REL) >= t->n_slices) pthread_cond_broadcast(&t->done);
  pthread_mutex_unlock(&t->mu);
}

/* Waits a little for *v to leave `was` before sleeping on a condition:
 * a late pass takes ~0.1 ms and the update between passes microseconds,
 * less than a futex wake-up's latency. */
static void team_spin(const int64_t *v, int64_t was)
{
  for (int i = 0; i < KM_SPIN && __atomic_load_n(v, __ATOMIC_ACQUIRE) == was; i++) KM_PAUSE();
}

static void *team_main(void *arg)
{
  km_team *t = arg;
  int64_t seen = 0;
  for (;;) {
    team_spin(&t->gen, seen);
    pthread_mutex_lock(&t->mu);
    while (!t->quit && __atomic_load_n(&t->gen, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&t->go, &t->mu);
    bool quit = t->quit;
    seen = t->gen;
    pthread_mutex_unlock(&t->mu);
    if (quit) break;
    team_work(t);
  }
  return NULL;
}

/* Starts up to threads − 1 helpers (fewer if the system refuses: the
 * slices, not the threads, fix the result). */
static int team_start(km_team *t, int64_t threads, int64_t rows, int64_t k, int64_t d, km_row *state, tsr_errbuf *err)
{
  memset(t, 0, sizeof *t);
  t->rows = rows, t->head = KM_STATE_HEAD(k, d), t->state = state;
  t->n_slices = rows / KM_SLICE_MIN < KM_SLICES ? rows / KM_SLICE_MIN : KM_SLICES;
  if (t->n_slices < 1) t->n_slices = 1;
  if (threads > t->n_slices) threads = t->n_slices;
  t->acc = malloc((size_t)(t->n_slices * t->head) * sizeof *t->acc);
  t->helpers = malloc((size_t)threads * sizeof *t->helpers);
  if (t->acc == NULL || t->helpers == NULL) return tsr_fail(err, TSR_ENOMEM, "kmeans_loop: out of memory for %lld rows", (long long)rows);
  pthread_mutex_init(&t->mu, NULL), pthread_cond_init(&t->go, NULL), pthread_cond_init(&t->done, NULL);
  for (int64_t i = 1; i < threads && pthread_create(&t->helpers[t->n_helpers], NULL, team_main, t) == 0; i++) t->n_helpers++;
  return 0;
}

static void team_stop(km_team *t)
{
  if (t->helpers != NULL && t->acc != NULL) {
    pthread_mutex_lock(&t->mu);
    t->quit = true;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_helpers; i++) pthread_join(t->helpers[i], NULL);
    pthread_mutex_destroy(&t->mu), pthread_cond_destroy(&t->go), pthread_cond_destroy(&t->done);
  }
  free(t->helpers), free(t->acc);
}

/* Runs one pass over every slice, this thread among the helpers. */
static int team_pass(km_team *t, const km_pass *pass, tsr_errbuf *err)
{
  pthread_mutex_lock(&t->mu);
  t->pass = pass, t->finished = 0, t->rc = 0;
  __atomic_store_n(&t->next, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&t->gen, t->gen + 1, __ATOMIC_RELEASE);  /* last: a spinning helper reads the pass after it */
  pthread_cond_broadcast(&t->go);
  pthread_mutex_unlock(&t->mu);
  team_work(t);
  for (int i = 0; i < KM_SPIN && __atomic_load_n(&t->finished, __ATOMIC_ACQUIRE) < t->n_slices; i++) KM_PAUSE();
  pthread_mutex_lock(&t->mu);
  while (__atomic_load_n(&t->finished, __ATOMIC_ACQUIRE) < t->n_slices) pthread_cond_wait(&t->done, &t->mu);
  int rc = t->rc;
  if (rc != 0 && err != NULL) *err = t->err;
  pthread_mutex_unlock(&t->mu);
  return rc;
}

/* The slices' deltas into the state st, in slice order (the same bits
 * for any number of threads): sums and counts from zero in a full pass,
 * else added to the last; the inertia; the farthest points of a
 * relocation's pass; the column sums of the first. */
static void merge_slices(double *st, const km_team *t, int64_t k, int64_t d, bool full, bool first, bool far)
{
  int64_t kd = k * d + k, head = t->head;
  double *sf = st + kd + 1, *sx = sf + 3 * k;
  if (full) memset(st, 0, (size_t)kd * sizeof *st);
  memset(st + kd, 0, (size_t)(1 + k * (3 + d)) * sizeof *st);
  for (int64_t j = 0; j < k; j++) sf[3 * j + 1] = -1;
  if (first) memset(st + KM_LEN(k, d), 0, (size_t)(2 * d) * sizeof *st);
  for (int64_t i = 0; i < t->n_slices; i++) {
    const double *a = t->acc + i * head, *af = a + kd + 1, *ax = af + 3 * k;
    for (int64_t j = 0; j <= kd; j++) st[j] += a[j];
    for (int64_t j = 0; first && j < 2 * d; j++) st[KM_LEN(k, d) + j] += a[KM_LEN(k, d) + j];
    for (int64_t j = 0; far && j < k && af[3 * j + 1] >= 0; j++)
      tsr_km_far_insert(sf, sx, k, d, af[3 * j], (int64_t)af[3 * j + 1], (int64_t)af[3 * j + 2], ax + j * d);
  }
}

/* Passes and updates until the model m is done; st: every row's state,
 * labelled already unless first. */
static int loop_passes(km_team *t, km_private *yy, const tsr_buf *in, int64_t parts, int64_t k, int64_t d, double *m,
                       double *st, bool first, tsr_errbuf *err)
{
  tsr_buf ins[2];
  memset(ins, 0, sizeof ins);
  ins[1].meta.dtype = TSR_F64, ins[1].meta.ndim = 1, ins[1].meta.shape[0] = KM_STATE_LEN(k, d, t->rows), ins[1].data = st;
  /* every update counts an iteration but a relocation's, which is followed by a full pass that cannot need another */
  int64_t passes = 0, most = 2 * (int64_t)m[M_MAX_ITER] + 4;
  int rc = 0;
  while (rc == 0 && m[M_PHASE] != PH_DONE && passes++ < most) {
    bool far = m[M_NEED_FAR] != 0;
    km_pass *pass = NULL;
    int64_t it = (int64_t)m[M_IT];
    rc = tsr_km_pass_begin(k, in, parts, m, first, yy, &pass, err);
    if (rc == 0) rc = team_pass(t, pass, err);
    if (rc == 0) merge_slices(st, t, k, d, first || far, first, far);
    tsr_km_pass_end(&pass);
    first = false;
    if (rc == 0) rc = tsr_km_update_model(m, ins, 2, k, d, err);
    if (rc == 0) groups_drift(yy, m, k, d, it);
  }
  if (rc == 0 && m[M_PHASE] != PH_DONE)
    rc = tsr_fail(err, TSR_EINVAL, "kmeans_loop: not done after %lld passes (max_iter %g)", (long long)most, m[M_MAX_ITER]);
  return rc;
}

static int loop_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  int64_t k = 0, parts = 1, rows = 0, threads = 1, groups = 0, d = in[0].meta.shape[1];
  tsr_params_get_int(p, "k", &k, NULL);
  tsr_params_get_int(p, "parts", &parts, NULL);
  if (tsr_params_find(p, "threads") != NULL) tsr_params_get_int(p, "threads", &threads, NULL);
  if (tsr_params_find(p, "groups") != NULL) tsr_params_get_int(p, "groups", &groups, NULL);
  for (int64_t i = 0; i < parts; i++) rows += in[i].meta.shape[0];
  int64_t mlen = KM_MODEL_LEN(k, d), g = n - parts - 1;
  double *m = out->data, *st = m + mlen;
  memcpy(m, in[parts].data, (size_t)mlen * sizeof *m);
  if (g > 0) join_states(st, in + parts + 1, (int)g, k, d);
  else if (m[M_PHASE] == PH_DONE) return tsr_fail(err, TSR_EINVAL, "kmeans_loop: the model is done but no state came with it");
  km_team t = {0};  /* team_stop's no-op if groups_start fails */
  km_private yy;
  km_row *row_st = (km_row *)(st + KM_STATE_HEAD(k, d));
  int rc = groups_start(&yy, groups, m, k, d, rows, err);
  if (rc == 0 && g > 0 && yy.n > 1) tsr_km_private_rebase(m, k, d, row_st, rows, &yy);
  if (rc == 0) rc = team_start(&t, threads, rows, k, d, row_st, err);
  if (rc == 0) rc = loop_passes(&t, &yy, in, parts, k, d, m, st, g == 0, err);
  team_stop(&t);
  groups_free(&yy);
  return rc;
}

/* ---------- kmeans_model ---------- */

static int model_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)n;
  int64_t k, d;
  int rc = loop_int("kmeans_model", p, "k", &k, err);
  if (rc == 0) rc = loop_int("kmeans_model", p, "d", &d, err);
  if (rc != 0) return rc;
  int64_t len = KM_MODEL_LEN(k, d);
  tsr_meta st = in[0];
  st.shape[0] -= len;
  if (k < 1 || d < 1 || in[0].shape[0] < len || !is_state(&st, k, d))
    return tsr_fail(err, TSR_ESHAPE, "kmeans_model: input is %s, not a kmeans_loop output of k = %lld x %lld", tsr_k_str(&in[0]).s,
                    (long long)k, (long long)d);
  tsr_k_meta_set(out, TSR_F64, 1, &len);
  return 0;
}

static int model_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n, (void)err;
  memcpy(out->data, in[0].data, out->nbytes);
  return 0;
}

const tsr_op_def tsr_op_kmeans_loop = {"kmeans_loop", 2, -1, loop_infer, loop_cpu, false, NULL};
const tsr_op_def tsr_op_kmeans_model = {"kmeans_model", 1, 1, model_infer, model_cpu, false, NULL};
