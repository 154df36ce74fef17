/* Blocked matrix product C = A @ B: C_ij is the tree sum over p of
 * A_ip @ B_pj. Before emitting each partial product it looks at the tasks
 * behind the two blocks:
 * - a block that is a random creation task (not persisted) is never
 *   materialized: `matmul_random` generates it panel by panel inside the
 *   product (a 20000 x 5000 f64 block would be 800 MB);
 * - a block that is a `transpose` task is read through the GEMM's transpose
 *   flag instead of being copied.
 * - a block behind a chain of per-column elementwise steps (a standardized
 *   genotype matrix: fillnan((astype(X) − μ) / σ, 0)), a 2-bit packed
 *   block, or an integer block, is read as stored by `matmul_chain`, which
 *   applies the steps tile by tile inside the product (graphs/chain.c).
 * - a CSR block (tsr_sparse), or one behind affine per-column steps
 *   (X − μ, (X − μ)/σ: implicit centering), is read as stored by
 *   `csr_matmul` in f64 products: the dense block is never made.
 * So X @ Omega, Q^T @ X and X^T @ Q over a random X cost one pass of
 * generation and no stored X, and over a standardized packed X one pass
 * over the packed bytes and no stored Z. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

const graph_task *gtask_of(const tsr_array_ctx *ctx, const char *key)
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

static bool is_op(const graph_task *t, const char *op, size_t n_inputs)
{
  return t != NULL && strcmp(t->op, op) == 0 && t->n_inputs == n_inputs;
}

/* What one operand block resolves to. */
typedef struct operand {
  const char *key;                /* the key to feed in (after folding a transpose) */
  const graph_task *random;       /* the random task to generate instead, or NULL */
  bool transposed;
  gchain chain;                   /* the elementwise chain behind key (gchain_find) */
} operand;

static operand resolve(const tsr_array_ctx *ctx, const char *key)
{
  operand op = {key, NULL, false, {0}};
  const graph_task *t = gtask_of(ctx, key);
  if (is_op(t, "transpose", 1)) {
    op.key = t->inputs[0];
    op.transposed = true;
    t = gtask_of(ctx, op.key);
  }
  if (is_random(t)) op.random = t;
  else gchain_find(ctx, op.key, &op.chain);
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

/* What the product of two blocks may fold (tsr_matmul decides from the
 * arrays): a chain is folded only into an f64 product, and an integer
 * operand is read as stored even without a chain. */
typedef struct fold_rule {
  bool f64;              /* both operands f64 (or integer times f64): the product is f64 */
  bool int_a, int_b;     /* operand is an integer array */
} fold_rule;

static bool chain_wanted(const operand *o, bool is_int)
{
  if (o->random == NULL && o->chain.csr) return gchain_affine(&o->chain);
  return o->random == NULL && (o->chain.n_steps > 0 || o->chain.packed_cols >= 0 || is_int);
}

static int add_chain_product(tsr_array_ctx *ctx, const operand *x, const operand *other, bool x_left,
                             char *key_out, size_t cap)
{
  const char *side = x_left ? (x->transposed ? "xtb" : "xb") : (other->transposed ? "btx" : "bx");
  return gchain_product(ctx, &x->chain, side, other->key, key_out, cap);
}

/* Emits one partial product of blocks of na and nb elements; writes its
 * key to key_out. */
static int partial_product(tsr_array_ctx *ctx, const char *a_key, const char *b_key, int64_t na, int64_t nb,
                           const fold_rule *fold, char *key_out, size_t cap)
{
  operand a = resolve(ctx, a_key), b = resolve(ctx, b_key);
  const char *side = fused_side(&a, &b, na, nb);
  if (side == NULL && fold->f64 && !b.transposed) {
    if (chain_wanted(&a, fold->int_a)) return add_chain_product(ctx, &a, &b, true, key_out, cap);
    if (chain_wanted(&b, fold->int_b)) return add_chain_product(ctx, &b, &a, false, key_out, cap);
  }
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
  /* A packed operand's decode tasks are recorded but folded into the
   * products below (see resolve): they never run on their own. */
  if (rc == 0) rc = garray_dense(ctx, a, &a);
  if (rc == 0) rc = garray_dense(ctx, b, &b);
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
  bool ia = !gdtype_is_float(a->dtype), ib = !gdtype_is_float(bb->dtype);
  fold_rule fold = {(a->dtype == TSR_F64 || ia) && (bb->dtype == TSR_F64 || ib) && !(ia && ib), ia, ib};
  char **partials = calloc((size_t)np, sizeof *partials);
  if (rc == 0 && partials == NULL) rc = client_fail(TSR_ENOMEM, "matmul: out of memory");
  for (int64_t i = 0; rc == 0 && i < out->nchunks[0]; i++)
    for (int64_t j = 0; rc == 0 && j < out->nchunks[1]; j++) {
      for (int64_t p = 0; rc == 0 && p < np; p++) {
        int64_t ia_[2] = {i, p}, ib_[2] = {p, j}, sa[2], sb[2];
        char key[256];
        garray_block_shape(a, ia_, sa);
        garray_block_shape(bb, ib_, sb);
        rc = partial_product(ctx, a->keys[garray_block(a, ia_)], bb->keys[garray_block(bb, ib_)], sa[0] * sa[1],
                             sb[0] * sb[1], &fold, key, sizeof key);
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
