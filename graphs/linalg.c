/* TSQR, tall-skinny SVD and randomized SVD as task graphs.
 *
 * TSQR (Demmel et al.; Dask's tsqr): each row block A_i = Q_i R_i; the R
 * factors are stacked F at a time and factored again, up a tree, until one
 * R remains. Going back down, each block's Q is Q_i times the product of
 * the slices of the group Q factors on its path to the root. The `qr` op
 * packs Q on top of R in one chunk (one output per task); `slice` and
 * `view` unpack. A block with fewer rows than columns is zero-padded by the
 * kernel (Q gets zero columns, R zero rows), which keeps A_i = Q_i R_i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))
/* R factors stacked per QR of the tree: as many as keep the stacked
 * matrix (fan·n x n) within 2^22 elements, 16 to 1024 of them. A sketch
 * of 20 columns then stacks 1024 R's in one level — the tree's depth is
 * its latency — while 1000 columns stack 16 (128 MB). */
#define TSQR_STACK_ELEMS ((int64_t)1 << 22)
#define TSQR_FAN_MIN 16
#define TSQR_FAN_MAX 1024

static size_t tsqr_fan_in(int64_t n)
{
  int64_t fan = n > 0 ? TSQR_STACK_ELEMS / (n * n) : TSQR_FAN_MAX;
  return (size_t)(fan < TSQR_FAN_MIN ? TSQR_FAN_MIN : fan > TSQR_FAN_MAX ? TSQR_FAN_MAX : fan);
}
#define EXACT_SVD_MAX_COLS 16384

static int add_rows_slice(tsr_array_ctx *ctx, const char *in, int64_t r0, int64_t r1, int64_t cols, char *key, size_t cap)
{
  int64_t start[2] = {r0, 0}, stop[2] = {r1, cols};
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = gargs_shape(args, "start", 2, start);
  if (rc == 0) rc = gargs_shape(args, "stop", 2, stop);
  if (rc == 0) rc = gtask_add_tmp(ctx, "slice", "slice", args, &in, 1, key, cap);
  tsr_args_destroy(&args);
  return rc;
}

static int add_view(tsr_array_ctx *ctx, const char *in, int64_t offset, int ndim, const int64_t *shape, char *key,
                    size_t cap)
{
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = tsr_args_int(args, "offset", offset);
  if (rc == 0) rc = gargs_shape(args, "shape", ndim, shape);
  if (rc == 0) rc = gtask_add_tmp(ctx, "view", "view", args, &in, 1, key, cap);
  tsr_args_destroy(&args);
  return rc;
}

static int add_matmul(tsr_array_ctx *ctx, const char *a, const char *b, bool trans_b, char *key, size_t cap)
{
  tsr_args *args = NULL;
  const char *in[2] = {a, b};
  int rc = tsr_args_new(&args);
  if (rc == 0 && trans_b) rc = tsr_args_bool(args, "trans_b", true);
  if (rc == 0) rc = gtask_add_tmp(ctx, "matmul", "matmul", args, in, 2, key, cap);
  tsr_args_destroy(&args);
  return rc;
}

/* QR of one block of `rows` rows: writes the keys of Q (rows x n) and R. */
static int block_qr(tsr_array_ctx *ctx, const char *in, int64_t rows, int64_t n, char *q, char *r, size_t cap)
{
  char packed[256];
  int rc = gtask_add_tmp(ctx, "qr", "qr", NULL, &in, 1, packed, sizeof packed);
  if (rc == 0) rc = add_rows_slice(ctx, packed, 0, rows, n, q, cap);
  if (rc == 0) rc = add_rows_slice(ctx, packed, rows, rows + n, n, r, cap);
  return rc;
}

typedef struct tsqr_level {
  size_t n;             /* items at this level */
  char **r;             /* their R keys */
  char **w;             /* their correction factor keys (NULL: identity) */
  char **group_q;       /* Q of each group formed from this level's items */
} tsqr_level;

/* Factors level L's R's in groups; fills level L+1. */
static int tsqr_up(tsr_array_ctx *ctx, tsqr_level *lv, tsqr_level *up, int64_t n)
{
  const size_t fan = tsqr_fan_in(n);
  up->n = (lv->n + fan - 1) / fan;
  up->r = calloc(up->n, sizeof *up->r);
  up->w = calloc(up->n, sizeof *up->w);
  lv->group_q = calloc(up->n, sizeof *lv->group_q);
  if (!up->r || !up->w || !lv->group_q) return client_fail(TSR_ENOMEM, "tsqr: out of memory");
  int rc = 0;
  for (size_t g = 0; g < up->n && rc == 0; g++) {
    size_t lo = g * fan, hi = lo + fan < lv->n ? lo + fan : lv->n;
    int64_t grid[2] = {(int64_t)(hi - lo), 1};
    char stacked[256], q[256], r[256];
    tsr_args *args = NULL;
    rc = tsr_args_new(&args);
    if (rc == 0) rc = gargs_shape(args, "grid", 2, grid);
    if (rc == 0) rc = gtask_add_tmp(ctx, "stack-r", "assemble", args, (const char *const *)&lv->r[lo], hi - lo, stacked, sizeof stacked);
    tsr_args_destroy(&args);
    if (rc == 0) rc = block_qr(ctx, stacked, (int64_t)(hi - lo) * n, n, q, r, sizeof q);
    lv->group_q[g] = strdup(q);
    up->r[g] = strdup(r);
  }
  return rc;
}

/* Correction factors of level L's items from their groups (level L+1). */
static int tsqr_down(tsr_array_ctx *ctx, tsqr_level *lv, const tsqr_level *up, int64_t n)
{
  const size_t fan = tsqr_fan_in(n);
  int rc = 0;
  for (size_t i = 0; i < lv->n && rc == 0; i++) {
    size_t g = i / fan, pos = i % fan;
    char slice[256], w[256];
    rc = add_rows_slice(ctx, lv->group_q[g], (int64_t)pos * n, (int64_t)(pos + 1) * n, n, slice, sizeof slice);
    if (rc == 0 && up->w[g] != NULL) rc = add_matmul(ctx, slice, up->w[g], false, w, sizeof w);
    else snprintf(w, sizeof w, "%s", slice);
    lv->w[i] = strdup(w);
  }
  return rc;
}

static void free_levels(tsqr_level *levels, int count)
{
  for (int L = 0; L < count; L++) {
    for (size_t i = 0; i < levels[L].n; i++) {
      if (levels[L].r) free(levels[L].r[i]);
      if (levels[L].w) free(levels[L].w[i]);
    }
    if (levels[L].group_q != NULL && L + 1 < count)
      for (size_t g = 0; g < levels[L + 1].n; g++) free(levels[L].group_q[g]);
    free(levels[L].r);
    free(levels[L].w);
    free(levels[L].group_q);
  }
}

static int check_tall_skinny(const tsr_array *a, const char *what)
{
  int rc = garray_check_2d(a, what);
  if (rc != 0) return rc;
  if (a->shape[1] > a->shape[0])
    return client_fail(TSR_ESHAPE, "%s: needs a tall-skinny array, got %lld rows x %lld columns (short and fat)", what,
                       (long long)a->shape[0], (long long)a->shape[1]);
  return 0;
}

TSR_API int tsr_tsqr(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **q_p, tsr_array **r_p)
{
  int rc = check_tall_skinny(a, "tsqr");
  if (rc != 0) return rc;
  if (a->nchunks[1] != 1)
    return client_fail(TSR_ESHAPE, "tsqr: needs one chunk across the %lld columns, got %lld (rechunk or use tsr_qr)",
                       (long long)a->shape[1], (long long)a->nchunks[1]);
  int64_t n = a->shape[1];
  tsr_dtype dtype = a->dtype == TSR_F32 ? TSR_F32 : TSR_F64;
  tsr_array *q = NULL, *r = NULL;
  int64_t rshape[2] = {n, n};
  rc = garray_new(ctx, "tsqr-q", dtype, 2, a->shape, a->chunk, &q);
  if (rc == 0) rc = garray_new(ctx, "tsqr-r", dtype, 2, rshape, NULL, &r);
  tsqr_level levels[64] = {{0}};
  int count = 1;
  size_t nb = a->nblocks;
  char **leaf_q = calloc(nb, sizeof *leaf_q);
  levels[0].n = nb;
  levels[0].r = calloc(nb, sizeof(char *));
  levels[0].w = calloc(nb, sizeof(char *));
  if (rc == 0 && (!leaf_q || !levels[0].r || !levels[0].w)) rc = client_fail(TSR_ENOMEM, "tsqr: out of memory");
  for (size_t i = 0; i < nb && rc == 0; i++) {
    char qk[256], rk[256];
    rc = block_qr(ctx, a->keys[i], garray_chunk_len(a, 0, (int64_t)i), n, qk, rk, sizeof qk);
    leaf_q[i] = strdup(qk);
    levels[0].r[i] = strdup(rk);
  }
  while (rc == 0 && levels[count - 1].n > 1 && count < 64) {
    rc = tsqr_up(ctx, &levels[count - 1], &levels[count], n);
    count++;
  }
  for (int L = count - 2; L >= 0 && rc == 0; L--) rc = tsqr_down(ctx, &levels[L], &levels[L + 1], n);
  for (size_t i = 0; i < nb && rc == 0; i++) {
    char key[256];
    if (levels[0].w[i] != NULL) rc = add_matmul(ctx, leaf_q[i], levels[0].w[i], false, key, sizeof key);
    else snprintf(key, sizeof key, "%s", leaf_q[i]);
    free(q->keys[i]);
    q->keys[i] = strdup(key);
  }
  if (rc == 0) {
    free(r->keys[0]);
    r->keys[0] = strdup(levels[count - 1].r[0]);
  }
  for (size_t i = 0; i < nb; i++) free(leaf_q ? leaf_q[i] : NULL);
  free(leaf_q);
  free_levels(levels, count);
  if (rc != 0) {
    tsr_array_free(ctx, &q);
    tsr_array_free(ctx, &r);
    return rc;
  }
  *q_p = q;
  *r_p = r;
  return 0;
}

/* Rechunks a to one column chunk when it has several. */
static int one_column_chunk(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array **out)
{
  *out = a;
  if (a->nchunks[1] == 1) return 0;
  int64_t want[2] = {-1, a->shape[1]};
  tsr_array *re = NULL;
  int rc = tsr_rechunk(ctx, a, want, &re);
  if (rc == 0) *out = re;
  return rc;
}

TSR_API int tsr_qr(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **q_p, tsr_array **r_p)
{
  int rc = check_tall_skinny(a, "qr");
  const tsr_array *one = NULL;
  if (rc == 0) rc = one_column_chunk(ctx, a, &one);
  return rc == 0 ? tsr_tsqr(ctx, one, q_p, r_p) : rc;
}

/* A single-block array over an existing key. */
static int wrap_key(tsr_array_ctx *ctx, const char *label, tsr_dtype dtype, int ndim, const int64_t *shape,
                    const char *key, tsr_array **out_p)
{
  int rc = garray_new(ctx, label, dtype, ndim, shape, NULL, out_p);
  if (rc == 0) {
    free((*out_p)->keys[0]);
    (*out_p)->keys[0] = strdup(key);
  }
  return rc;
}

/* m (2-D) times v (1-D, one chunk) broadcast along axis, block by block. */
static int bmul(tsr_array_ctx *ctx, const tsr_array *m, const tsr_array *v, int axis, tsr_array **out_p)
{
  tsr_array *out = NULL;
  int rc = garray_new(ctx, "bmul", m->dtype, 2, m->shape, m->chunk, &out);
  for (size_t b = 0; rc == 0 && b < m->nblocks; b++) {
    tsr_args *args = NULL;
    const char *in[2] = {m->keys[b], v->keys[0]};
    rc = tsr_args_new(&args);
    if (rc == 0) rc = tsr_args_int(args, "axis", axis);
    if (rc == 0) rc = gtask_add(ctx, out->keys[b], "bmul", args, in, 2);
    tsr_args_destroy(&args);
  }
  if (rc == 0) *out_p = out;
  return rc;
}

/* Dask's svd_flip(u, v): negate each row of v whose sum is negative, and
 * the matching column of u. */
static int coerce_signs(tsr_array_ctx *ctx, tsr_array **u, tsr_array **v)
{
  tsr_array *rowsum = NULL, *signs = NULL, *u2 = NULL, *v2 = NULL;
  int rc = tsr_sum(ctx, *v, 1, 0, &rowsum);
  if (rc == 0) rc = tsr_map_blocks(ctx, "signs", NULL, rowsum, rowsum->dtype, &signs);
  if (rc == 0) rc = bmul(ctx, *u, signs, 1, &u2);
  if (rc == 0) rc = bmul(ctx, *v, signs, 0, &v2);
  if (rc == 0) {
    *u = u2;
    *v = v2;
  }
  return rc;
}

/* The exact tall-skinny SVD; with coerce, in Dask's sign convention. */
static int svd_tall_skinny(tsr_array_ctx *ctx, const tsr_array *a, bool coerce, tsr_array **u_p, tsr_array **s_p,
                           tsr_array **v_p)
{
  int rc = check_tall_skinny(a, "svd_tall_skinny");
  if (rc != 0) return rc;
  int64_t n = a->shape[1];
  if (n > EXACT_SVD_MAX_COLS)
    return client_fail(TSR_ESHAPE, "svd_tall_skinny: %lld columns is too wide for the exact SVD (limit %d); use svd_compressed",
                       (long long)n, EXACT_SVD_MAX_COLS);
  const tsr_array *one = NULL;
  tsr_array *q = NULL, *r = NULL, *u = NULL, *s = NULL, *v = NULL;
  rc = one_column_chunk(ctx, a, &one);
  if (rc == 0) rc = tsr_tsqr(ctx, one, &q, &r);
  char packed[256], ur[256], sk[256], vk[256];
  int64_t nn[2] = {n, n}, sn[1] = {n};
  const char *rin = r ? r->keys[0] : NULL;
  if (rc == 0) rc = gtask_add_tmp(ctx, "svd", "svd", NULL, &rin, 1, packed, sizeof packed);
  if (rc == 0) rc = add_view(ctx, packed, 0, 2, nn, ur, sizeof ur);
  if (rc == 0) rc = add_view(ctx, packed, n * n, 1, sn, sk, sizeof sk);
  if (rc == 0) rc = add_view(ctx, packed, n * n + n, 2, nn, vk, sizeof vk);
  if (rc == 0) rc = garray_new(ctx, "svd-u", q->dtype, 2, q->shape, q->chunk, &u);
  for (size_t i = 0; rc == 0 && i < q->nblocks; i++) {
    char key[256];
    rc = add_matmul(ctx, q->keys[i], ur, false, key, sizeof key);
    free(u->keys[i]);
    u->keys[i] = strdup(key);
  }
  if (rc == 0) rc = wrap_key(ctx, "svd-s", q->dtype, 1, sn, sk, &s);
  if (rc == 0) rc = wrap_key(ctx, "svd-v", q->dtype, 2, nn, vk, &v);
  if (rc == 0 && coerce) rc = coerce_signs(ctx, &u, &v);
  if (rc != 0) return rc;
  *u_p = u;
  *s_p = s;
  *v_p = v;
  return 0;
}

TSR_API int tsr_svd_tall_skinny(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **u_p, tsr_array **s_p,
                                tsr_array **v_p)
{
  return svd_tall_skinny(ctx, a, true, u_p, s_p, v_p);
}

/* Block Krylov (FastPCA's Blanczos, PLINK 2's --pca approx): each power
 * iterate Q_i = orth(A orth(Aᵀ Q_{i-1})) is kept (orthonormalized against
 * the ones before it), and Q spans them all, l·(q+1) columns, for the
 * price of the same passes over A. A spectrum
 * with a flat tail (genotypes: hundreds of eigenvalues near 1 under a few
 * population PCs) needs this: the last iterate alone converges like
 * (σ_{l+1}/σ_k)^(2q+1), the span like a polynomial of degree 2q+1. */
/* q orthonormalized against the orthonormal p (block Gram-Schmidt, then
 * TSQR): later Krylov iterates lie almost in the span of the earlier ones,
 * and without this the span's basis would be ill-conditioned, its last
 * digits depending on rounding (so on the chunking). */
static int project_out(tsr_array_ctx *ctx, const tsr_array *p, const tsr_array *q, tsr_array **out_p)
{
  tsr_array *pt = NULL, *c = NULL, *pc = NULL, *rest = NULL, *r = NULL;
  int rc = tsr_transpose(ctx, p, &pt);
  if (rc == 0) rc = tsr_matmul(ctx, pt, q, &c);
  if (rc == 0) rc = tsr_matmul(ctx, p, c, &pc);
  if (rc == 0) rc = tsr_sub(ctx, q, pc, &rest);
  if (rc == 0) rc = tsr_tsqr(ctx, rest, out_p, &r);
  return rc;
}

static int krylov_span(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *at, tsr_array *y, int q_iters,
                       tsr_array **q_p)
{
  tsr_array **blocks = calloc((size_t)q_iters + 1, sizeof *blocks), *q = NULL, *r = NULL, *z = NULL, *w = NULL;
  tsr_array *span = NULL;
  if (blocks == NULL) return client_fail(TSR_ENOMEM, "svd_compressed: out of memory");
  int rc = tsr_tsqr(ctx, y, &blocks[0], &r);
  span = blocks[0];
  for (int i = 1; rc == 0 && i <= q_iters; i++) {
    rc = tsr_matmul(ctx, at, blocks[i - 1], &z);
    if (rc == 0) rc = tsr_tsqr(ctx, z, &w, &r);
    if (rc == 0) rc = tsr_matmul(ctx, a, w, &y);
    if (rc == 0) rc = tsr_tsqr(ctx, y, &q, &r);
    if (rc == 0) rc = project_out(ctx, span, q, &blocks[i]);
    if (rc == 0 && i < q_iters) rc = tsr_concatenate(ctx, (const tsr_array *const *)blocks, (size_t)i + 1, 1, &span);
  }
  tsr_array *k = NULL;
  if (rc == 0) rc = tsr_concatenate(ctx, (const tsr_array *const *)blocks, (size_t)q_iters + 1, 1, &k);
  if (rc == 0) rc = tsr_qr(ctx, k, &q, &r);
  if (rc == 0) *q_p = q;
  free(blocks);
  return rc;
}

/* The range finder: Q with orthonormal columns spanning A's top subspace. */
static int range_finder(tsr_array_ctx *ctx, const tsr_array *a, int64_t l, const tsr_svd_opts *o, tsr_array **q_p)
{
  tsr_dtype dtype = a->dtype == TSR_F32 ? TSR_F32 : TSR_F64;
  int64_t oshape[2] = {a->shape[1], l}, ochunks[2] = {a->chunk[1], l};
  tsr_array *omega = NULL, *y = NULL, *q = NULL, *r = NULL, *at = NULL, *z = NULL;
  int rc = tsr_random_normal(ctx, o->seed, dtype, 2, oshape, ochunks, &omega);
  if (rc == 0) rc = tsr_matmul(ctx, a, omega, &y);
  if (rc == 0) rc = tsr_transpose(ctx, a, &at);
  if (rc == 0 && o->iterator == TSR_SVD_KRYLOV) return krylov_span(ctx, a, at, y, o->n_power_iter, q_p);
  for (int i = 0; rc == 0 && i < o->n_power_iter; i++) {
    if (o->iterator == TSR_SVD_POWER) {
      rc = tsr_tsqr(ctx, y, &q, &r);
      if (rc == 0) rc = tsr_matmul(ctx, at, q, &z);
      if (rc == 0) rc = tsr_matmul(ctx, a, z, &y);
    } else {
      if (i == 0) rc = tsr_tsqr(ctx, y, &q, &r);
      if (rc == 0) rc = tsr_matmul(ctx, at, q, &z);
      if (rc == 0) rc = tsr_tsqr(ctx, z, &q, &r);
      if (rc == 0) rc = tsr_matmul(ctx, a, q, &y);
      if (rc == 0) rc = tsr_tsqr(ctx, y, &q, &r);
    }
  }
  if (rc == 0 && (o->iterator == TSR_SVD_POWER || o->n_power_iter == 0)) rc = tsr_tsqr(ctx, y, &q, &r);
  if (rc == 0) *q_p = q;
  return rc;
}

/* B (l x n) this small is decomposed by one svd task (the op takes any
 * shape): TSQR of Bᵀ would add a dozen tasks to the critical path. */
#define SMALL_SVD_ELEMS ((int64_t)1 << 24)

/* SVD of B = Qᵀ A: ub (l x r), s (r), vt (r x n), r = min(l, n). */
static int svd_of_b(tsr_array_ctx *ctx, const tsr_array *b, tsr_array **ub_p, tsr_array **s_p, tsr_array **vt_p)
{
  int64_t l = b->shape[0], n = b->shape[1];
  if (l * n > SMALL_SVD_ELEMS) {
    tsr_array *bt = NULL, *v = NULL, *vtb = NULL;
    int rc = tsr_transpose(ctx, b, &bt);
    if (rc == 0) rc = svd_tall_skinny(ctx, bt, false, &v, s_p, &vtb);  /* signs are set once, at the end */
    if (rc == 0) rc = tsr_transpose(ctx, vtb, ub_p);
    if (rc == 0) rc = tsr_transpose(ctx, v, vt_p);
    return rc;
  }
  tsr_array *one = NULL;
  const tsr_array *whole = b;
  int64_t all[2] = {l, n}, ll[2] = {l, l}, sl[1] = {l}, ln[2] = {l, n};
  int rc = 0;
  if (b->nblocks > 1 && (rc = tsr_rechunk(ctx, b, all, &one)) == 0) whole = one;
  char packed[256], uk[256], sk[256], vk[256];
  const char *in = rc == 0 ? whole->keys[0] : NULL;
  if (rc == 0) rc = gtask_add_tmp(ctx, "svd", "svd", NULL, &in, 1, packed, sizeof packed);
  if (rc == 0) rc = add_view(ctx, packed, 0, 2, ll, uk, sizeof uk);
  if (rc == 0) rc = add_view(ctx, packed, l * l, 1, sl, sk, sizeof sk);
  if (rc == 0) rc = add_view(ctx, packed, l * l + l, 2, ln, vk, sizeof vk);
  if (rc == 0) rc = wrap_key(ctx, "svd-u", b->dtype, 2, ll, uk, ub_p);
  if (rc == 0) rc = wrap_key(ctx, "svd-s", b->dtype, 1, sl, sk, s_p);
  if (rc == 0) rc = wrap_key(ctx, "svd-v", b->dtype, 2, ln, vk, vt_p);
  return rc;
}

TSR_API int tsr_svd_compressed(tsr_array_ctx *ctx, const tsr_array *a, int k, const tsr_svd_opts *opts,
                               tsr_array **u_p, tsr_array **s_p, tsr_array **v_p)
{
  tsr_svd_opts o = TSR_SVD_OPTS_DEFAULT;
  if (opts != NULL) o = *opts;
  int rc = garray_check_2d(a, "svd_compressed");
  if (rc != 0) return rc;
  int64_t m = a->shape[0], n = a->shape[1], mn = m < n ? m : n;
  if (k < 1 || k > mn) return client_fail(TSR_EINVAL, "svd_compressed: k = %d outside 1..%lld", k, (long long)mn);
  if (o.n_oversamples < 0 || o.n_power_iter < 0) return client_fail(TSR_EINVAL, "svd_compressed: negative option");
  int64_t l = k + o.n_oversamples > 20 ? k + o.n_oversamples : 20;
  if (l > mn) l = mn;
  /* A Krylov span has l columns per pass over A (at most min(m, n)). */
  if (o.iterator == TSR_SVD_KRYLOV && l * (o.n_power_iter + 1) > mn) {
    l = mn / (o.n_power_iter + 1);
    if (l < k) return client_fail(TSR_EINVAL, "svd_compressed: %d Krylov iterations of at least k = %d columns exceed %lld",
                                  o.n_power_iter, k, (long long)mn);
  }
  /* B = Q^T A is l x n (l·(q+1) for Krylov), decomposed by svd_of_b. */
  tsr_array *q = NULL, *qt = NULL, *b = NULL, *ub = NULL, *s = NULL, *u = NULL, *v = NULL;
  rc = range_finder(ctx, a, l, &o, &q);
  if (rc == 0) rc = tsr_transpose(ctx, q, &qt);
  if (rc == 0) rc = tsr_matmul(ctx, qt, a, &b);
  if (rc == 0) rc = svd_of_b(ctx, b, &ub, &s, &v);
  if (rc == 0) rc = tsr_matmul(ctx, q, ub, &u);
  int64_t u0[2] = {0, 0}, u1[2] = {m, k}, s0[1] = {0}, s1[1] = {k}, v0[2] = {0, 0}, v1[2] = {k, n};
  tsr_array *uk = NULL, *sk = NULL, *vk = NULL;
  if (rc == 0) rc = tsr_slice(ctx, u, u0, u1, &uk);
  if (rc == 0) rc = tsr_slice(ctx, s, s0, s1, &sk);
  if (rc == 0) rc = tsr_slice(ctx, v, v0, v1, &vk);
  if (rc == 0 && o.coerce_signs) rc = coerce_signs(ctx, &uk, &vk);
  if (rc != 0) return rc;
  *u_p = uk;
  *s_p = sk;
  *v_p = vk;
  return 0;
}
