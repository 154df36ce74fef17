/* Elementwise chains folded into products (kernels/cpu/matmul_chain.c).
 *
 * A standardized genotype matrix is built with ordinary builders,
 *   Z = fillnan((astype(X, f64) − μ) / σ, 0),
 * each a task per block. Stored, Z would be eight bytes a genotype where
 * X is a quarter of a byte; so a product that reads a block of Z looks
 * down the tasks behind it instead: fillnan, scale, and add/sub/mul/div
 * against a row vector (one value per column) are steps; an astype to f64
 * (with its missing-value sentinel) or anything else ends the walk at the
 * stored block, and an unpack2bit there is read packed. The product task
 * then takes the stored block, the other operand and the step vectors,
 * and applies the steps tile by tile as it multiplies. The walk runs per
 * block on the client; tasks it looks through are never submitted unless
 * something else needs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

enum { STEP_ADD = 1, STEP_SUB, STEP_MUL, STEP_DIV, STEP_RSUB, STEP_RDIV, STEP_SCALE, STEP_FILLNAN };

bool gdtype_is_float(tsr_dtype dtype) { return dtype == TSR_F32 || dtype == TSR_F64; }

static bool is_op(const graph_task *t, const char *op, size_t n_inputs)
{
  return t != NULL && strcmp(t->op, op) == 0 && t->n_inputs == n_inputs;
}

static const char *str_param(const tsr_params *p, const char *name)
{
  const tsr_param *q = tsr_params_find(p, name);
  return q != NULL && q->type == TSR_PARAM_STR ? q->s : "";
}

static double float_param(const tsr_params *p, const char *name, double fallback)
{
  double v = fallback;
  tsr_params_opt_float(p, name, fallback, &v, NULL);
  return v;
}

/* The step code of an elementwise task against a row vector, or 0. */
static int vector_step(const graph_task *t, const tsr_params *p)
{
  if (t->n_inputs != 2 || strcmp(str_param(p, "bcast"), "row") != 0) return 0;
  bool swap = false;
  if (tsr_params_find(p, "swap")) tsr_params_get_bool(p, "swap", &swap, NULL);
  if (strcmp(t->op, "add") == 0) return STEP_ADD;
  if (strcmp(t->op, "mul") == 0) return STEP_MUL;
  if (strcmp(t->op, "sub") == 0) return swap ? STEP_RSUB : STEP_SUB;
  if (strcmp(t->op, "div") == 0) return swap ? STEP_RDIV : STEP_DIV;
  return 0;
}

/* Records t as the next step (walking down), or returns false when t
 * ends the chain. *next_p is the key below it. */
static bool take_step(gchain *c, const graph_task *t, const tsr_params *p, const char **next_p)
{
  int i = c->n_steps, code = vector_step(t, p);
  if (i == GCHAIN_MAX_STEPS) return false;
  c->vectors[i] = NULL;
  c->values[2 * i] = c->values[2 * i + 1] = 0.0;
  if (code != 0) c->vectors[i] = t->inputs[1];
  else if (is_op(t, "scale", 1)) {
    code = STEP_SCALE;
    c->values[2 * i] = float_param(p, "factor", 1.0);
    c->values[2 * i + 1] = float_param(p, "offset", 0.0);
  } else if (is_op(t, "fillnan", 1)) {
    code = STEP_FILLNAN;
    c->values[2 * i] = float_param(p, "value", 0.0);
  } else
    return false;
  c->codes[i] = code;
  c->n_steps++;
  *next_p = t->inputs[0];
  return true;
}

/* The steps were found outermost first; they apply innermost first. */
static void reverse_steps(gchain *c)
{
  for (int i = 0, j = c->n_steps - 1; i < j; i++, j--) {
    int code = c->codes[i];
    const char *v = c->vectors[i];
    double a = c->values[2 * i], b = c->values[2 * i + 1];
    c->codes[i] = c->codes[j], c->vectors[i] = c->vectors[j];
    c->values[2 * i] = c->values[2 * j], c->values[2 * i + 1] = c->values[2 * j + 1];
    c->codes[j] = code, c->vectors[j] = v, c->values[2 * j] = a, c->values[2 * j + 1] = b;
  }
}

/* At the bottom: an astype to f64 is the load itself (with its sentinel),
 * an unpack2bit means the stored block is packed. */
static void find_base(const tsr_array_ctx *ctx, gchain *c, const char *key)
{
  const graph_task *t = gtask_of(ctx, key);
  tsr_params p = TSR_PARAMS_INIT;
  if (is_op(t, "astype", 1) && gtask_params(t, &p) == 0 && strcmp(str_param(&p, "dtype"), "f64") == 0) {
    int64_t missing;
    if (tsr_params_get_int(&p, "missing", &missing, NULL) == 0) c->missing = missing;
    key = t->inputs[0];
    t = gtask_of(ctx, key);
  }
  tsr_params_clear(&p);
  int64_t cols;
  if (is_op(t, "unpack2bit", 1) && gtask_params(t, &p) == 0 && tsr_params_get_int(&p, "cols", &cols, NULL) == 0) {
    c->packed_cols = cols;
    key = t->inputs[0];
  }
  tsr_params_clear(&p);
  /* A sparse block decoded for elementwise steps: the product reads the
   * CSR chunk itself (csr_matmul) and never densifies it. */
  int64_t shape[TSR_MAX_NDIM];
  const tsr_param *q;
  if (c->packed_cols < 0 && c->missing < 0 && is_op(t, "csr_densify", 1) && gtask_params(t, &p) == 0 &&
      (q = tsr_params_find(&p, "shape")) != NULL && q->type == TSR_PARAM_INTS && q->n == 2) {
    memcpy(shape, q->ints, 2 * sizeof *shape);
    c->csr = true;
    c->csr_shape[0] = shape[0], c->csr_shape[1] = shape[1];
    key = t->inputs[0];
  }
  tsr_params_clear(&p);
  c->base = key;
}

/* True when every step is affine in x (what csr_matmul folds). */
bool gchain_affine(const gchain *c)
{
  for (int i = 0; i < c->n_steps; i++)
    if (c->codes[i] == STEP_RDIV || c->codes[i] == STEP_FILLNAN) return false;
  return true;
}

void gchain_find(const tsr_array_ctx *ctx, const char *key, gchain *c)
{
  memset(c, 0, sizeof *c);
  c->packed_cols = -1;
  c->missing = -1;
  const char *cur = key;
  for (;;) {
    const graph_task *t = gtask_of(ctx, cur);
    tsr_params p = TSR_PARAMS_INIT;
    bool more = t != NULL && gtask_params(t, &p) == 0 && take_step(c, t, &p, &cur);
    tsr_params_clear(&p);
    if (!more) break;
  }
  reverse_steps(c);
  find_base(ctx, c, cur);
}

/* Input index of vector key v in inputs[0..*n), adding it when new. */
static int64_t vector_input(const char **inputs, size_t *n, const char *v)
{
  for (size_t i = 2; i < *n; i++)
    if (strcmp(inputs[i], v) == 0) return (int64_t)i;
  inputs[*n] = v;
  return (int64_t)(*n)++;
}

static int chain_args(const gchain *c, const char *side, const int64_t *step_inputs, tsr_args *args)
{
  int64_t codes[GCHAIN_MAX_STEPS];
  for (int i = 0; i < c->n_steps; i++) codes[i] = c->codes[i];
  int rc = tsr_args_str(args, "side", side);
  if (rc == 0 && c->packed_cols >= 0) rc = tsr_args_int(args, "cols", c->packed_cols);
  if (rc == 0 && c->csr) rc = gargs_shape(args, "shape", 2, c->csr_shape);
  if (rc == 0 && c->missing >= 0) rc = tsr_args_int(args, "missing", c->missing);
  if (rc == 0 && c->n_steps > 0) {
    rc = tsr_args_ints(args, "steps", codes, (size_t)c->n_steps);
    if (rc == 0) rc = tsr_args_ints(args, "step_inputs", step_inputs, (size_t)c->n_steps);
    if (rc == 0) rc = tsr_args_floats(args, "step_values", c->values, 2 * (size_t)c->n_steps);
  }
  return rc;
}

int gchain_product(tsr_array_ctx *ctx, const gchain *c, const char *side, const char *other, char *key_out,
                   size_t cap)
{
  const char *inputs[2 + GCHAIN_MAX_STEPS] = {c->base, other};
  size_t n = 2;
  int64_t step_inputs[GCHAIN_MAX_STEPS];
  for (int i = 0; i < c->n_steps; i++) step_inputs[i] = c->vectors[i] ? vector_input(inputs, &n, c->vectors[i]) : -1;
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = chain_args(c, side, step_inputs, args);
  if (rc == 0 && c->csr) rc = gtask_add_tmp(ctx, "csr-matmul", "csr_matmul", args, inputs, n, key_out, cap);
  else if (rc == 0) rc = gtask_add_tmp(ctx, "matmul-chain", "matmul_chain", args, inputs, n, key_out, cap);
  tsr_args_destroy(&args);
  return rc;
}
