/* Blocked matrix product C = A @ B: C_ij is the tree sum over p of
 * A_ip @ B_pj. Before emitting each partial product it looks at the tasks
 * behind the two blocks:
 * - a block that is a random creation task (not persisted) is never
 *   materialized: `matmul_random` generates it panel by panel inside the
 *   product (a 20000 x 5000 f64 block would be 800 MB);
 * - a block that is a `transpose` task is read through the GEMM's transpose
 *   flag instead of being copied.
 * So X @ Omega, Q^T @ X and X^T @ Q over a random X cost one pass of
 * generation and no stored X. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

/* The task behind key, or NULL when the key is persisted or unknown. */
static const graph_task *task_of(const tsr_array_ctx *ctx, const char *key)
{
  uint64_t index;
  if (tsr_strmap_get(ctx->held, key, strlen(key), NULL)) return NULL;
  if (!tsr_strmap_get(ctx->task_index, key, strlen(key), &index)) return NULL;
  return &ctx->tasks[index];
}

static bool is_random(const graph_task *t)
{
  return t != NULL && t->n_inputs == 0 &&
         (strcmp(t->op, "random_uniform") == 0 || strcmp(t->op, "random_normal") == 0 || strcmp(t->op, "randint") == 0);
}

static bool is_transpose(const graph_task *t) { return t != NULL && strcmp(t->op, "transpose") == 0 && t->n_inputs == 1; }

/* What one operand block resolves to. */
typedef struct operand {
  const char *key;                /* the key to feed in (after folding a transpose) */
  const graph_task *random;       /* the random task to generate instead, or NULL */
  bool transposed;
} operand;

static operand resolve(const tsr_array_ctx *ctx, const char *key)
{
  operand op = {key, NULL, false};
  const graph_task *t = task_of(ctx, key);
  if (is_transpose(t)) {
    op.key = t->inputs[0];
    op.transposed = true;
    t = task_of(ctx, op.key);
  }
  if (is_random(t)) op.random = t;
  return op;
}

/* Which fused form applies, or NULL: X @ B ("xb"), X^T @ B ("xtb"),
 * B @ X ("bx"), B^T @ X ("btx"); a transposed other operand on the right
 * is not fused. Only a random block at least as large as the other one is
 * fused: generating it inside the product then saves storing the big
 * side, while a small random block (the test matrix Omega beside a stored
 * X) would be generated again for every tile of X — stored once, it is
 * read by every block instead. na, nb: elements of the two blocks. */
static const char *fused_side(const operand *a, const operand *b, int64_t na, int64_t nb)
{
  if (a->random != NULL && !b->transposed && na >= nb) return a->transposed ? "xtb" : "xb";
  if (b->random != NULL && !b->transposed && nb >= na) return a->transposed ? "btx" : "bx";
  return NULL;
}

/* Emits one partial product of blocks of na and nb elements; writes its
 * key to key_out. */
static int partial_product(tsr_array_ctx *ctx, const char *a_key, const char *b_key, int64_t na, int64_t nb,
                           char *key_out, size_t cap)
{
  operand a = resolve(ctx, a_key), b = resolve(ctx, b_key);
  const char *side = fused_side(&a, &b, na, nb);
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0 && side != NULL) {
    bool x_left = side[0] == 'x';
    const operand *x = x_left ? &a : &b, *other = x_left ? &b : &a;
    const char *in = other->key;
    rc = gargs_merge(args, x->random->params, x->random->params_len);
    if (rc == 0) rc = tsr_args_str(args, "side", side);
    if (rc == 0) rc = tsr_args_str(args, "dist", x->random->op);
    if (rc == 0) rc = gtask_add_tmp(ctx, "matmul-random", "matmul_random", args, &in, 1, key_out, cap);
  } else if (rc == 0) {
    const char *inputs[2] = {a.key, b.key};
    if (a.transposed) rc = tsr_args_bool(args, "trans_a", true);
    if (rc == 0 && b.transposed) rc = tsr_args_bool(args, "trans_b", true);
    if (rc == 0) rc = gtask_add_tmp(ctx, "matmul", "matmul", args, inputs, 2, key_out, cap);
  }
  tsr_args_destroy(&args);
  return rc;
}

static tsr_dtype product_dtype(tsr_dtype a, tsr_dtype b)
{
  bool fa = a == TSR_F32 || a == TSR_F64, fb = b == TSR_F32 || b == TSR_F64;
  if (fa && fb) return a == TSR_F64 || b == TSR_F64 ? TSR_F64 : TSR_F32;
  if (fa) return a;
  if (fb) return b;
  return TSR_F64;
}

TSR_API int tsr_matmul(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array *b, tsr_array **out_p)
{
  int rc = garray_check_2d(a, "matmul");
  if (rc == 0) rc = garray_check_2d(b, "matmul");
  if (rc != 0) return rc;
  if (a->shape[1] != b->shape[0])
    return client_fail(TSR_ESHAPE, "matmul: inner dimensions differ: (%lld,%lld) @ (%lld,%lld)", (long long)a->shape[0],
                       (long long)a->shape[1], (long long)b->shape[0], (long long)b->shape[1]);
  bool fa = a->dtype == TSR_F32 || a->dtype == TSR_F64, fb = b->dtype == TSR_F32 || b->dtype == TSR_F64;
  if (fa && fb && a->dtype != b->dtype)
    return client_fail(TSR_ESHAPE, "matmul: dtypes %s and %s differ (astype one first)", gdtype_name(a->dtype),
                       gdtype_name(b->dtype));
  /* B's row chunks must match A's column chunks. */
  const tsr_array *bb = b;
  if (b->chunk[0] != a->chunk[1]) {
    int64_t want[2] = {a->chunk[1], -1};
    tsr_array *re = NULL;
    rc = tsr_rechunk(ctx, b, want, &re);
    if (rc != 0) return rc;
    bb = re;
  }
  int64_t shape[2] = {a->shape[0], b->shape[1]}, chunks[2] = {a->chunk[0], bb->chunk[1]};
  tsr_array *out = NULL;
  rc = garray_new(ctx, "matmul", product_dtype(a->dtype, b->dtype), 2, shape, chunks, &out);
  int64_t np = a->nchunks[1];
  char **partials = calloc((size_t)np, sizeof *partials);
  if (rc == 0 && partials == NULL) rc = client_fail(TSR_ENOMEM, "matmul: out of memory");
  for (int64_t i = 0; rc == 0 && i < out->nchunks[0]; i++)
    for (int64_t j = 0; rc == 0 && j < out->nchunks[1]; j++) {
      for (int64_t p = 0; rc == 0 && p < np; p++) {
        int64_t ia[2] = {i, p}, ib[2] = {p, j}, sa[2], sb[2];
        char key[256];
        garray_block_shape(a, ia, sa);
        garray_block_shape(bb, ib, sb);
        rc = partial_product(ctx, a->keys[garray_block(a, ia)], bb->keys[garray_block(bb, ib)], sa[0] * sa[1],
                             sb[0] * sb[1], key, sizeof key);
        partials[p] = strdup(key);
      }
      char root[256];
      int64_t io[2] = {i, j};
      if (rc == 0) rc = gtask_sum_tree(ctx, "matmul-sum", partials, (size_t)np, 8, root, sizeof root);
      if (rc == 0) {
        size_t ob = garray_block(out, io);
        free(out->keys[ob]);
        out->keys[ob] = strdup(root);
      }
      for (int64_t p = 0; p < np; p++) {
        free(partials[p]);
        partials[p] = NULL;
      }
    }
  free(partials);
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}
