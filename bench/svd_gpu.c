/* tsr-svd-gpu: randomized SVD (Halko-Martinsson-Tropp, no power
 * iterations: dask's svd_compressed defaults) of a random 0..2 genotype
 * matrix, built from plain tasks so the data can stay 2-bit packed on the
 * GPU (four genotypes a byte: 200 GB of u8 in 50 GB).
 *
 *   tessera local --gpus 0 -- tsr-svd-gpu --rows 10000000 --cols 20000 \
 *       --chunks 100000,20000 --k 10 --mode packed --repeat 2 --check
 *
 * Generation (timed apart): X_ij = randint(0, 3) u8, kept as
 * P_ij = pack2bit(X_ij) (mode packed) or as X_ij itself (mode u8).
 * SVD, l = k + oversamples columns:
 *   Y_i   = sum_j X_ij @ Om_j               (matmul_2bit / matmul)
 *   Y_i   = Q_i R_i                          (qr per row block)
 *   [R_i] = U S W'                           (svd of the stacked R's)
 *   Q_i  <- Q_i @ U_i                        (U_i: block i of U's rows)
 *   B_j   = sum_i Q_i' @ X_ij                (matmul_2bit btx / matmul)
 *   [B_j] = Ub S V'                          (svd) -> s[:k], v = V'[:k]
 * Both modes work in --dtype (default f64): Om, Y, the QRs, Q and B. In
 * packed mode the products run on int8 tensor cores either way (f64: B
 * quantized to 30 bits per column, error <= 2^-31 of its largest entry;
 * f32: 22 bits), so f64 costs a fourth digit there, not f64 arithmetic.
 * The thin matrices must be f64 for v to be within 1e-4 of the f64
 * answer: s[1..10] of a random genotype matrix lie within 0.1% of each
 * other and s[0] is ~170 times larger, so f32 rounding of Y, of its QR and
 * of B, relative to s[0], moves those vectors by ~1e-3 (bench/RESULTS.md).
 *
 * --check recomputes the same SVD in f64 with X generated inside each
 * product (matmul_random: never stored, so any size fits) and the same Om
 * (f64), and prints
 * the largest error of s and of v (rows up to sign) relative to the
 * largest value: the f64 answer. Uses only the public API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/tessera.h"

#define KEY 128   /* key buffers */

typedef struct opts {
  int64_t rows, cols, crow, ccol;
  int k, over, repeat;
  bool packed, check;
  tsr_dtype dtype;   /* of the thin matrices: f32 or f64 */
  uint64_t seed;
} opts;

typedef struct plan {
  const opts *o;
  int64_t nr, nc, l;
  char prefix[32];
  bool fused;        /* X generated inside the passes (--check reference) */
  bool packed;
  const char *fdt;   /* "f32" / "f64" */
} plan;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t rows_of(const plan *p, int64_t i) { return i + 1 < p->nr ? p->o->crow : p->o->rows - i * p->o->crow; }
static int64_t cols_of(const plan *p, int64_t j) { return j + 1 < p->nc ? p->o->ccol : p->o->cols - j * p->o->ccol; }

/* ---------- task helpers (each adds one task; 0 or an error) ---------- */

static int add(tsr_graph *g, const char *key, const char *op, tsr_args *a, const char *const *in, size_t n)
{
  int rc = tsr_graph_add_args(g, key, op, a, in, n);
  tsr_args_destroy(&a);
  return rc;
}

static tsr_args *args(void)
{
  tsr_args *a = NULL;
  tsr_args_new(&a);
  return a;
}

static int add_randint(tsr_graph *g, const plan *p, const char *key, int64_t i, int64_t j)
{
  tsr_args *a = args();
  int64_t shape[2] = {rows_of(p, i), cols_of(p, j)}, global[2] = {p->o->rows, p->o->cols};
  int64_t off[2] = {i * p->o->crow, j * p->o->ccol};
  tsr_args_int(a, "seed", (int64_t)p->o->seed);
  tsr_args_int(a, "low", 0);
  tsr_args_int(a, "high", 3);
  tsr_args_str(a, "dtype", "u8");
  tsr_args_ints(a, "shape", shape, 2);
  tsr_args_ints(a, "global_shape", global, 2);
  tsr_args_ints(a, "offset", off, 2);
  return add(g, key, "randint", a, NULL, 0);
}

static int add_omega(tsr_graph *g, const plan *p, const char *key, int64_t j)
{
  tsr_args *a = args();
  int64_t shape[2] = {cols_of(p, j), p->l}, global[2] = {p->o->cols, p->l}, off[2] = {j * p->o->ccol, 0};
  tsr_args_int(a, "seed", (int64_t)p->o->seed + 1000003);
  tsr_args_str(a, "dtype", p->fdt);
  tsr_args_ints(a, "shape", shape, 2);
  tsr_args_ints(a, "global_shape", global, 2);
  tsr_args_ints(a, "offset", off, 2);
  return add(g, key, "random_normal", a, NULL, 0);
}

static int add_slice(tsr_graph *g, const char *key, const char *in, int64_t r0, int64_t c0, int64_t r1, int64_t c1)
{
  tsr_args *a = args();
  int64_t start[2] = {r0, c0}, stop[2] = {r1, c1};
  tsr_args_ints(a, "start", start, 2);
  tsr_args_ints(a, "stop", stop, 2);
  return add(g, key, "slice", a, &in, 1);
}

static int add_view(tsr_graph *g, const char *key, const char *in, int64_t offset, int ndim, const int64_t *shape)
{
  tsr_args *a = args();
  tsr_args_int(a, "offset", offset);
  tsr_args_ints(a, "shape", shape, (size_t)ndim);
  return add(g, key, "view", a, &in, 1);
}

static int add_assemble(tsr_graph *g, const char *key, const char *const *in, int64_t n, int64_t gr, int64_t gc)
{
  tsr_args *a = args();
  int64_t grid[2] = {gr, gc};
  tsr_args_ints(a, "grid", grid, 2);
  return add(g, key, "assemble", a, in, (size_t)n);
}

/* X_ij @ B (xb) or B' @ X_ij (btx): from the kept block x, or (fused)
 * with X_ij generated inside the product, tile by tile, never stored
 * (matmul_random: the same values as randint, so the same answer). */
static int add_product(tsr_graph *g, const plan *p, const char *key, const char *x, const char *b, bool btx, int64_t i,
                       int64_t j)
{
  const char *in[2] = {x, b};
  tsr_args *a = args();
  if (p->fused) {
    int64_t shape[2] = {rows_of(p, i), cols_of(p, j)}, global[2] = {p->o->rows, p->o->cols};
    int64_t off[2] = {i * p->o->crow, j * p->o->ccol};
    tsr_args_str(a, "side", btx ? "btx" : "xb");
    tsr_args_str(a, "dist", "randint");
    tsr_args_int(a, "seed", (int64_t)p->o->seed);
    tsr_args_int(a, "low", 0);
    tsr_args_int(a, "high", 3);
    tsr_args_str(a, "dtype", "u8");
    tsr_args_ints(a, "shape", shape, 2);
    tsr_args_ints(a, "global_shape", global, 2);
    tsr_args_ints(a, "offset", off, 2);
    return add(g, key, "matmul_random", a, &b, 1);
  }
  if (p->packed) {
    tsr_args_int(a, "cols", cols_of(p, j));
    tsr_args_str(a, "side", btx ? "btx" : "xb");
    return add(g, key, "matmul_2bit", a, in, 2);
  }
  if (btx) {
    in[0] = b, in[1] = x;
    tsr_args_bool(a, "trans_a", true);
  }
  return add(g, key, "matmul", a, in, 2);
}

/* Sum of n keys as a tree of n-ary adds (fan-in 16); the root's name in root. */
static int add_sum(tsr_graph *g, const char *prefix, char (*keys)[KEY], int64_t n, char *root)
{
  int64_t level = 0, rc = 0;
  while (n > 1 && rc == 0) {
    int64_t m = (n + 15) / 16;
    for (int64_t t = 0; t < m && rc == 0; t++) {
      const char *in[16];
      int64_t cnt = 0;
      for (int64_t s = t * 16; s < n && s < t * 16 + 16; s++) in[cnt++] = keys[s];
      char key[KEY];
      snprintf(key, sizeof key, "%s-%lld-%lld", prefix, (long long)level, (long long)t);
      rc = cnt == 1 ? 0 : tsr_graph_add(g, key, "add", NULL, 0, in, (size_t)cnt);
      if (cnt > 1) snprintf(keys[t], KEY, "%s", key);
      else memmove(keys[t], keys[t * 16], KEY);
    }
    n = m;
    level++;
  }
  snprintf(root, KEY, "%s", keys[0]);
  return (int)rc;
}

/* ---------- the graphs ---------- */

static void x_key(const plan *p, int64_t i, int64_t j, char *key)
{
  snprintf(key, KEY, "%s-%c-%lld-%lld", p->prefix, p->packed ? 'P' : 'X', (long long)i, (long long)j);
}

/* Generation: the kept X blocks (packed or not), all wanted. */
static int build_generation(tsr_graph *g, const plan *p)
{
  int rc = 0;
  for (int64_t i = 0; i < p->nr && rc == 0; i++)
    for (int64_t j = 0; j < p->nc && rc == 0; j++) {
      char key[KEY], raw[KEY];
      x_key(p, i, j, key);
      snprintf(raw, sizeof raw, "%s-X-%lld-%lld", p->prefix, (long long)i, (long long)j);
      const char *in = raw;
      rc = add_randint(g, p, p->packed ? raw : key, i, j);
      if (rc == 0 && p->packed) rc = tsr_graph_add(g, key, "pack2bit", NULL, 0, &in, 1);
      if (rc == 0) rc = tsr_graph_want(g, key);
    }
  return rc;
}

/* The kept X block (unused when fused). */
static int x_block(tsr_graph *g, const plan *p, int64_t i, int64_t j, int pass, char *key)
{
  (void)g, (void)pass;
  x_key(p, i, j, key);
  return 0;
}

/* Y_i = sum_j X_ij @ Om_j; Q_i R_i = qr(Y_i). Writes the Q_i and R_i keys. */
static int pass_one(tsr_graph *g, const plan *p, char (*q)[KEY], char (*r)[KEY])
{
  char (*parts)[KEY] = calloc((size_t)p->nc, KEY);
  int rc = parts ? 0 : TSR_ENOMEM;
  for (int64_t j = 0; j < p->nc && rc == 0; j++) {
    char om[KEY];
    snprintf(om, sizeof om, "%s-om-%lld", p->prefix, (long long)j);
    rc = add_omega(g, p, om, j);
  }
  for (int64_t i = 0; i < p->nr && rc == 0; i++) {
    for (int64_t j = 0; j < p->nc && rc == 0; j++) {
      char x[KEY], om[KEY];
      snprintf(om, sizeof om, "%s-om-%lld", p->prefix, (long long)j);
      snprintf(parts[j], KEY, "%s-y-%lld-%lld", p->prefix, (long long)i, (long long)j);
      rc = x_block(g, p, i, j, 1, x);
      if (rc == 0) rc = add_product(g, p, parts[j], x, om, false, i, j);
    }
    char y[KEY], qr[KEY], pre[64];
    snprintf(pre, sizeof pre, "%s-ys-%lld", p->prefix, (long long)i);
    if (rc == 0) rc = add_sum(g, pre, parts, p->nc, y);
    snprintf(qr, sizeof qr, "%s-qr-%lld", p->prefix, (long long)i);
    const char *in = y;
    if (rc == 0) rc = tsr_graph_add(g, qr, "qr", NULL, 0, &in, 1);
    snprintf(q[i], KEY, "%s-q0-%lld", p->prefix, (long long)i);
    snprintf(r[i], KEY, "%s-r-%lld", p->prefix, (long long)i);
    int64_t m = rows_of(p, i);
    if (rc == 0) rc = add_slice(g, q[i], qr, 0, 0, m, p->l);
    if (rc == 0) rc = add_slice(g, r[i], qr, m, 0, m + p->l, p->l);
  }
  free(parts);
  return rc;
}

/* [R_i] = U S W'; Q_i <- Q_i @ U_i. Rewrites q[i] to the final Q_i keys. */
static int orthonormalize(tsr_graph *g, const plan *p, char (*q)[KEY], char (*r)[KEY])
{
  const char **rin = calloc((size_t)p->nr, sizeof *rin);
  if (rin == NULL) return TSR_ENOMEM;
  for (int64_t i = 0; i < p->nr; i++) rin[i] = r[i];
  char rall[KEY], e[KEY];
  snprintf(rall, sizeof rall, "%s-rall", p->prefix);
  snprintf(e, sizeof e, "%s-rsvd", p->prefix);
  int rc = add_assemble(g, rall, rin, p->nr, p->nr, 1);
  const char *in = rall;
  if (rc == 0) rc = tsr_graph_add(g, e, "svd", NULL, 0, &in, 1);
  for (int64_t i = 0; i < p->nr && rc == 0; i++) {
    char ui[KEY], qf[KEY];
    int64_t shape[2] = {p->l, p->l};
    snprintf(ui, sizeof ui, "%s-u-%lld", p->prefix, (long long)i);
    snprintf(qf, sizeof qf, "%s-q-%lld", p->prefix, (long long)i);
    rc = add_view(g, ui, e, i * p->l * p->l, 2, shape);
    const char *mm[2] = {q[i], ui};
    if (rc == 0) rc = tsr_graph_add(g, qf, "matmul", NULL, 0, mm, 2);
    snprintf(q[i], KEY, "%s", qf);
  }
  free(rin);
  return rc;
}

/* B_j = sum_i Q_i' X_ij; B = [B_j]; svd(B) -> s (k), v (k x cols), wanted. */
static int pass_two(tsr_graph *g, const plan *p, char (*q)[KEY], char *s_key, char *v_key)
{
  char (*parts)[KEY] = calloc((size_t)p->nr, KEY);
  const char **bj = calloc((size_t)p->nc, sizeof *bj);
  char (*bkeys)[KEY] = calloc((size_t)p->nc, KEY);
  int rc = parts && bj && bkeys ? 0 : TSR_ENOMEM;
  for (int64_t j = 0; j < p->nc && rc == 0; j++) {
    for (int64_t i = 0; i < p->nr && rc == 0; i++) {
      char x[KEY];
      snprintf(parts[i], KEY, "%s-b-%lld-%lld", p->prefix, (long long)i, (long long)j);
      rc = x_block(g, p, i, j, 2, x);
      if (rc == 0) rc = add_product(g, p, parts[i], x, q[i], true, i, j);
    }
    char pre[64];
    snprintf(pre, sizeof pre, "%s-bs-%lld", p->prefix, (long long)j);
    if (rc == 0) rc = add_sum(g, pre, parts, p->nr, bkeys[j]);
    bj[j] = bkeys[j];
  }
  char b[KEY], f[KEY];
  snprintf(b, sizeof b, "%s-B", p->prefix);
  snprintf(f, sizeof f, "%s-Bsvd", p->prefix);
  if (rc == 0) rc = p->nc > 1 ? add_assemble(g, b, bj, p->nc, 1, p->nc) : (snprintf(b, sizeof b, "%s", bj[0]), 0);
  /* The small SVD of B in f64 whatever the passes ran in: the trailing
   * singular values of a random genotype matrix lie close together, and
   * their vectors would carry f32 rounding divided by those gaps. */
  char b64[KEY];
  snprintf(b64, sizeof b64, "%s-B64", p->prefix);
  const char *in = b;
  if (strcmp(p->fdt, "f64") != 0) {
    tsr_args *a = args();
    tsr_args_str(a, "dtype", "f64");
    if (rc == 0) rc = add(g, b64, "astype", a, &in, 1);
    else tsr_args_destroy(&a);
    in = b64;
  }
  if (rc == 0) rc = tsr_graph_add(g, f, "svd", NULL, 0, &in, 1);
  int64_t sshape[1] = {p->o->k}, vshape[2] = {p->o->k, p->o->cols};
  snprintf(s_key, KEY, "%s-s", p->prefix);
  snprintf(v_key, KEY, "%s-v", p->prefix);
  if (rc == 0) rc = add_view(g, s_key, f, p->l * p->l, 1, sshape);
  if (rc == 0) rc = add_view(g, v_key, f, p->l * p->l + p->l, 2, vshape);
  if (rc == 0) rc = tsr_graph_want(g, s_key);
  if (rc == 0) rc = tsr_graph_want(g, v_key);
  free(parts);
  free(bj);
  free(bkeys);
  return rc;
}

static int build_svd(tsr_graph *g, const plan *p, char *s_key, char *v_key)
{
  char (*q)[KEY] = calloc((size_t)p->nr, KEY), (*r)[KEY] = calloc((size_t)p->nr, KEY);
  int rc = q && r ? pass_one(g, p, q, r) : TSR_ENOMEM;
  if (rc == 0) rc = orthonormalize(g, p, q, r);
  if (rc == 0) rc = pass_two(g, p, q, s_key, v_key);
  free(q);
  free(r);
  return rc;
}

/* ---------- running ---------- */

static int submit_wait(tsr_client *c, tsr_graph **g, tsr_future **f)
{
  int rc = tsr_submit(c, g, f);
  if (rc == 0) rc = tsr_future_wait(*f, -1);
  if (rc != 0)
    fprintf(stderr, "tsr-svd-gpu: %s: %s %s\n", tsr_err_name(rc), tsr_errmsg(),
            *f && tsr_future_error(*f) ? tsr_future_error(*f) : "");
  return rc;
}

/* Gathers key as doubles (f32 or f64 chunk) into out (n values). */
static int gather(tsr_client *c, const char *key, double *out, size_t n)
{
  tsr_chunk *ch = NULL;
  int rc = tsr_gather(c, key, -1, &ch);
  if (rc != 0) return rc;
  size_t esize = ch->dtype == TSR_F64 ? 8 : 4;
  if (ch->nbytes != n * esize) rc = TSR_ESHAPE;
  for (size_t i = 0; rc == 0 && i < n; i++)
    out[i] = esize == 8 ? ((const double *)ch->data)[i] : ((const float *)ch->data)[i];
  tsr_chunk_destroy(&ch);
  return rc;
}

typedef struct run_result {
  double gen_s, svd_s;
  double *s, *v;
} run_result;

static void make_plan(plan *p, const opts *o, const char *prefix, bool fused, bool packed, const char *fdt)
{
  memset(p, 0, sizeof *p);
  p->o = o;
  p->nr = (o->rows + o->crow - 1) / o->crow;
  p->nc = (o->cols + o->ccol - 1) / o->ccol;
  p->l = o->k + o->over;
  if (p->l > o->cols) p->l = o->cols;
  snprintf(p->prefix, sizeof p->prefix, "%s", prefix);
  p->fused = fused;
  p->packed = packed;
  p->fdt = fdt;
}

/* One generation + SVD; the kept X blocks are released at the end. */
static int run_once(tsr_client *c, const plan *p, run_result *res)
{
  tsr_graph *g = NULL;
  tsr_future *fg = NULL, *fs = NULL;
  char s_key[KEY], v_key[KEY];
  double t0 = now_s();
  int rc = 0;
  if (!p->fused) {
    rc = tsr_graph_new(&g);
    if (rc == 0) rc = build_generation(g, p);
    if (rc == 0) rc = submit_wait(c, &g, &fg);
    tsr_graph_destroy(&g);
  }
  double t1 = now_s();
  if (rc == 0) rc = tsr_graph_new(&g);
  if (rc == 0) rc = build_svd(g, p, s_key, v_key);
  if (rc == 0) rc = submit_wait(c, &g, &fs);
  res->s = calloc((size_t)p->o->k, sizeof *res->s);
  res->v = calloc((size_t)(p->o->k * p->o->cols), sizeof *res->v);
  if (rc == 0) rc = gather(c, s_key, res->s, (size_t)p->o->k);
  if (rc == 0) rc = gather(c, v_key, res->v, (size_t)(p->o->k * p->o->cols));
  double t2 = now_s();
  res->gen_s = t1 - t0;
  res->svd_s = t2 - t1;
  tsr_graph_destroy(&g);
  tsr_future_release(&fs);
  tsr_future_release(&fg);
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
    double dot = 0, d = 0;
    for (int64_t j = 0; j < o->cols; j++) dot += ra[j] * rb[j];
    double sign = dot < 0 ? -1 : 1;
    for (int64_t j = 0; j < o->cols; j++) d = fmax(d, fabs(sign * ra[j] - rb[j])), vmax = fmax(vmax, fabs(rb[j]));
    dv = fmax(dv, d);
  }
  *es = ds / (smax > 0 ? smax : 1);
  *ev = dv / (vmax > 0 ? vmax : 1);
}

static void usage(void)
{
  fprintf(stderr, "usage: tsr-svd-gpu --rows N --cols M [--chunks R,C (100000,20000)] [--k K] [--oversamples P]\n"
                  "                   [--mode packed|u8] [--dtype f64|f32] [--seed S] [--repeat N] [--check]\n"
                  "Connects to $TESSERA_SCHEDULER (run it under `tessera local --gpus 0`).\n");
}

static int parse(int argc, char **argv, opts *o)
{
  /* default chunks: the GPU path's (bench/RESULTS.md: at (20000, 5000) a product task is
   * mostly fixed cost) */
  *o = (opts){1000000, 20000, 100000, 20000, 10, 10, 1, true, false, TSR_F64, 42};
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
    else if (strcmp(a, "--repeat") == 0) o->repeat = atoi(v);
    else if (strcmp(a, "--seed") == 0) o->seed = strtoull(v, NULL, 10);
    else if (strcmp(a, "--mode") == 0) o->packed = strcmp(v, "u8") != 0;
    else if (strcmp(a, "--dtype") == 0) o->dtype = strcmp(v, "f64") == 0 ? TSR_F64 : TSR_F32;
    else { usage(); return -1; }
  }
  if (o->rows <= 0 || o->cols <= 0 || o->crow <= 0 || o->ccol <= 0 || o->k <= 0 || o->repeat <= 0) {
    usage();
    return -1;
  }
  if (o->crow < o->k + o->over) {
    fprintf(stderr, "tsr-svd-gpu: chunk rows must be at least k + oversamples\n");
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
  printf("tsr-svd-gpu %lld x %lld u8 randint(0,3) chunks %lld,%lld k=%d l=%d mode=%s (%s)\n", (long long)o.rows,
         (long long)o.cols, (long long)o.crow, (long long)o.ccol, o.k, o.k + o.over, o.packed ? "packed" : "u8",
         o.dtype == TSR_F64 ? "f64" : "f32");
  run_result best = {1e30, 1e30, NULL, NULL};
  int rc = 0;
  for (int r = 0; r < o.repeat && rc == 0; r++) {
    plan p;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "g%d", r);
    make_plan(&p, &o, prefix, false, o.packed, o.dtype == TSR_F32 ? "f32" : "f64");
    run_result res = {0};
    rc = run_once(c, &p, &res);
    if (rc == 0) printf("run %d: generation %.3f s, svd %.3f s, total %.3f s\n", r, res.gen_s, res.svd_s,
                        res.gen_s + res.svd_s);
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
    plan p;
    make_plan(&p, &o, "ref", true, false, "f64");
    run_result ref = {0};
    rc = run_once(c, &p, &ref);
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
