/* The array context: its task table, its arrays, and chunk-grid geometry. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "graphs.h"
#include "wire/wire.h"

#define TSR_API __attribute__((visibility("default")))

TSR_API int tsr_array_ctx_new(tsr_client *client, tsr_array_ctx **ctx_p)
{
  if (client == NULL || ctx_p == NULL) return client_fail(TSR_EINVAL, "tsr_array_ctx_new: client is NULL");
  tsr_array_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return client_fail(TSR_ENOMEM, "tsr_array_ctx_new: out of memory");
  ctx->client = client;
  /* Keys live on the scheduler, shared by every client: a context's names
   * must not collide with another context's (which may still hold keys
   * named by the same counter), so each context draws a random token. */
  if (getrandom(&ctx->token, sizeof ctx->token, GRND_NONBLOCK) != (ssize_t)sizeof ctx->token)
    ctx->token = (uint32_t)(tsr_now_ns() ^ ((uint64_t)getpid() << 16));
  ctx->task_index = tsr_strmap_new(1024);
  ctx->held = tsr_strmap_new(64);
  if (ctx->task_index == NULL || ctx->held == NULL) {
    tsr_array_ctx_destroy(&ctx);
    return client_fail(TSR_ENOMEM, "tsr_array_ctx_new: out of memory");
  }
  *ctx_p = ctx;
  return 0;
}

static void array_destroy(tsr_array *a)
{
  for (size_t i = 0; i < a->nblocks; i++) free(a->keys[i]);
  free(a->keys);
  free(a);
}

TSR_API void tsr_array_ctx_destroy(tsr_array_ctx **ctx_p)
{
  if (ctx_p == NULL || *ctx_p == NULL) return;
  tsr_array_ctx *ctx = *ctx_p;
  for (size_t i = 0; i < ctx->n_persisted; i++) tsr_future_release(&ctx->persisted[i]);
  free(ctx->persisted);
  for (size_t i = 0; i < ctx->n_tasks; i++) {
    graph_task *t = &ctx->tasks[i];
    free(t->key);
    free(t->op);
    free(t->params);
    for (size_t j = 0; j < t->n_inputs; j++) free(t->inputs[j]);
    free(t->inputs);
  }
  free(ctx->tasks);
  while (ctx->arrays != NULL) {
    tsr_array *next = ctx->arrays->next_in_ctx;
    array_destroy(ctx->arrays);
    ctx->arrays = next;
  }
  tsr_strmap_destroy(&ctx->task_index);
  tsr_strmap_destroy(&ctx->held);
  free(ctx);
  *ctx_p = NULL;
}

TSR_API void tsr_array_free(tsr_array_ctx *ctx, tsr_array **array_p)
{
  if (ctx == NULL || array_p == NULL || *array_p == NULL) return;
  for (tsr_array **link = &ctx->arrays; *link != NULL; link = &(*link)->next_in_ctx) {
    if (*link != *array_p) continue;
    *link = (*array_p)->next_in_ctx;
    array_destroy(*array_p);
    break;
  }
  *array_p = NULL;
}

/* ---------- geometry ---------- */

int64_t garray_chunk_len(const tsr_array *a, int axis, int64_t c)
{
  int64_t start = c * a->chunk[axis];
  int64_t end = start + a->chunk[axis] < a->shape[axis] ? start + a->chunk[axis] : a->shape[axis];
  return end - start;
}

size_t garray_block(const tsr_array *a, const int64_t *idx)
{
  size_t block = 0;
  for (int d = 0; d < a->ndim; d++) block = block * (size_t)a->nchunks[d] + (size_t)idx[d];
  return block;
}

void garray_index(const tsr_array *a, size_t block, int64_t *idx)
{
  for (int d = a->ndim - 1; d >= 0; d--) {
    idx[d] = (int64_t)(block % (size_t)a->nchunks[d]);
    block /= (size_t)a->nchunks[d];
  }
}

void garray_block_shape(const tsr_array *a, const int64_t *idx, int64_t *shape)
{
  for (int d = 0; d < a->ndim; d++) shape[d] = garray_chunk_len(a, d, idx[d]);
}

void garray_block_offset(const tsr_array *a, const int64_t *idx, int64_t *offset)
{
  for (int d = 0; d < a->ndim; d++) offset[d] = idx[d] * a->chunk[d];
}

void garray_copy_repr(tsr_array *out, const tsr_array *a)
{
  out->encoding = a->encoding;
  out->missing = a->missing;
}

/* unpack2bit of each packed chunk, with that chunk's column count. */
static int decode_packed2(tsr_array_ctx *ctx, const tsr_array *a, tsr_array *out)
{
  int rc = 0;
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    int64_t idx[TSR_MAX_NDIM];
    garray_index(a, b, idx);
    tsr_args *args = NULL;
    const char *in = a->keys[b];
    rc = tsr_args_new(&args);
    if (rc == 0) rc = tsr_args_int(args, "cols", garray_chunk_len(a, a->ndim - 1, idx[a->ndim - 1]));
    if (rc == 0) rc = gtask_add(ctx, out->keys[b], "unpack2bit", args, &in, 1);
    tsr_args_destroy(&args);
  }
  return rc;
}

/* op (blosc_decompress of a frame, csr_densify of a sparse chunk) of each
 * chunk back to its block's dtype and shape. */
static int decode_to_block(tsr_array_ctx *ctx, const tsr_array *a, const char *op, tsr_array *out)
{
  int rc = 0;
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    int64_t idx[TSR_MAX_NDIM], shape[TSR_MAX_NDIM];
    garray_index(a, b, idx);
    garray_block_shape(a, idx, shape);
    tsr_args *args = NULL;
    const char *in = a->keys[b];
    rc = tsr_args_new(&args);
    if (rc == 0) rc = tsr_args_str(args, "dtype", gdtype_name(a->dtype));
    if (rc == 0) rc = gargs_shape(args, "shape", a->ndim, shape);
    if (rc == 0) rc = gtask_add(ctx, out->keys[b], op, args, &in, 1);
    tsr_args_destroy(&args);
  }
  return rc;
}

int garray_dense(tsr_array_ctx *ctx, const tsr_array *a, const tsr_array **out_p)
{
  if (a->encoding == TSR_ENC_DENSE) {
    *out_p = a;
    return 0;
  }
  tsr_array *out = NULL;
  int rc = garray_new(ctx, "decoded", a->dtype, a->ndim, a->shape, a->chunk, &out);
  if (rc != 0) return rc;
  out->missing = a->missing;
  if (a->encoding == TSR_ENC_PACKED2) rc = decode_packed2(ctx, a, out);
  else if (a->encoding == TSR_ENC_BLOSC) rc = decode_to_block(ctx, a, "blosc_decompress", out);
  else if (a->encoding == TSR_ENC_CSR) rc = decode_to_block(ctx, a, "csr_densify", out);
  else rc = client_fail(TSR_EINVAL, "array has an unknown encoding %d", (int)a->encoding);
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}

int garray_check_2d(const tsr_array *a, const char *what)
{
  if (a == NULL) return client_fail(TSR_EINVAL, "%s: array is NULL", what);
  if (a->ndim != 2) return client_fail(TSR_ESHAPE, "%s: needs a 2-D array, got %d-D", what, a->ndim);
  return 0;
}

/* Writes "name-i-j" for block idx of an array named name. */
static char *block_key(const char *name, int ndim, const int64_t *idx)
{
  char buf[512];
  size_t used = (size_t)snprintf(buf, sizeof buf, "%s", name);
  for (int d = 0; d < ndim && used < sizeof buf; d++)
    used += (size_t)snprintf(buf + used, sizeof buf - used, "-%" PRId64, idx[d]);
  return strdup(buf);
}

static int check_geometry(int ndim, const int64_t *shape, const char *label)
{
  if (ndim < 0 || ndim > TSR_MAX_NDIM)
    return client_fail(TSR_ESHAPE, "%s: ndim %d outside 0..%d", label, ndim, TSR_MAX_NDIM);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0) return client_fail(TSR_ESHAPE, "%s: axis %d has negative length %" PRId64, label, d, shape[d]);
  return 0;
}

int garray_new(tsr_array_ctx *ctx, const char *label, tsr_dtype dtype, int ndim, const int64_t *shape,
               const int64_t *chunks, tsr_array **out_p)
{
  if (tsr_dtype_size(dtype) == 0) return client_fail(TSR_EINVAL, "%s: unknown dtype %d", label, (int)dtype);
  int rc = check_geometry(ndim, shape, label);
  if (rc != 0) return rc;
  tsr_array *a = calloc(1, sizeof *a);
  if (a == NULL) return client_fail(TSR_ENOMEM, "%s: out of memory", label);
  a->dtype = dtype;
  a->ndim = ndim;
  a->nblocks = 1;
  a->encoding = TSR_ENC_DENSE;
  a->missing = -1;
  for (int d = 0; d < ndim; d++) {
    int64_t c = chunks != NULL ? chunks[d] : 0;
    a->shape[d] = shape[d];
    a->chunk[d] = c <= 0 || c >= shape[d] ? (shape[d] > 0 ? shape[d] : 1) : c;
    a->nchunks[d] = shape[d] == 0 ? 1 : (shape[d] + a->chunk[d] - 1) / a->chunk[d];
    a->nblocks *= (size_t)a->nchunks[d];
  }
  char name[256];
  snprintf(name, sizeof name, "%s-%08x-%" PRIu64, label, ctx->token, ctx->next_name++);
  a->keys = calloc(a->nblocks, sizeof *a->keys);
  for (size_t b = 0; a->keys != NULL && b < a->nblocks; b++) {
    int64_t idx[TSR_MAX_NDIM];
    garray_index(a, b, idx);
    a->keys[b] = block_key(name, ndim, idx);
    if (a->keys[b] == NULL) break;
  }
  if (a->keys == NULL || (a->nblocks > 0 && a->keys[a->nblocks - 1] == NULL)) {
    array_destroy(a);
    return client_fail(TSR_ENOMEM, "%s: out of memory", label);
  }
  a->next_in_ctx = ctx->arrays;
  ctx->arrays = a;
  *out_p = a;
  return 0;
}

/* ---------- metadata accessors ---------- */

TSR_API tsr_encoding tsr_array_encoding(const tsr_array *a) { return a->encoding; }

int garray_view(tsr_array_ctx *ctx, const char *label, const tsr_array *a, tsr_array **out_p)
{
  tsr_array *out = NULL;
  int rc = garray_new(ctx, label, a->dtype, a->ndim, a->shape, a->chunk, &out);
  for (size_t b = 0; rc == 0 && b < a->nblocks; b++) {
    free(out->keys[b]);
    out->keys[b] = strdup(a->keys[b]);
    if (out->keys[b] == NULL) rc = client_fail(TSR_ENOMEM, "%s: out of memory", label);
  }
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  garray_copy_repr(out, a);
  *out_p = out;
  return 0;
}

TSR_API int tsr_with_missing(tsr_array_ctx *ctx, const tsr_array *a, int missing, tsr_array **out_p)
{
  if (ctx == NULL || a == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "with_missing: NULL argument");
  int64_t top = a->dtype == TSR_U8 ? 255 : a->dtype == TSR_I32 ? INT32_MAX : a->dtype == TSR_I64 ? INT64_MAX : -1;
  if (top < 0) return client_fail(TSR_EINVAL, "with_missing: %s arrays mark missing values with NaN", gdtype_name(a->dtype));
  if (missing < -1 || missing > top)
    return client_fail(TSR_EINVAL, "with_missing: %d is not a %s value", missing, gdtype_name(a->dtype));
  int rc = garray_view(ctx, "missing", a, out_p);
  if (rc == 0) (*out_p)->missing = missing;
  return rc;
}

TSR_API int tsr_array_missing(const tsr_array *a) { return a->missing; }
TSR_API tsr_dtype tsr_array_dtype(const tsr_array *a) { return a->dtype; }
TSR_API int tsr_array_ndim(const tsr_array *a) { return a->ndim; }
TSR_API int64_t tsr_array_dim(const tsr_array *a, int axis) { return axis >= 0 && axis < a->ndim ? a->shape[axis] : -1; }
TSR_API int64_t tsr_array_chunk(const tsr_array *a, int axis) { return axis >= 0 && axis < a->ndim ? a->chunk[axis] : -1; }
TSR_API int64_t tsr_array_nchunks(const tsr_array *a, int axis)
{
  return axis >= 0 && axis < a->ndim ? a->nchunks[axis] : -1;
}

TSR_API int64_t tsr_array_size(const tsr_array *a)
{
  int64_t n = 1;
  for (int d = 0; d < a->ndim; d++) n *= a->shape[d];
  return n;
}

TSR_API const char *tsr_array_chunk_key(const tsr_array *a, const int64_t *idx)
{
  for (int d = 0; d < a->ndim; d++)
    if (idx[d] < 0 || idx[d] >= a->nchunks[d]) return NULL;
  return a->keys[garray_block(a, idx)];
}

/* ---------- the task table ---------- */

static char **copy_keys(const char *const *keys, size_t n)
{
  char **copy = calloc(n ? n : 1, sizeof *copy);
  for (size_t i = 0; copy != NULL && i < n; i++) copy[i] = strdup(keys[i]);
  return copy;
}

int gtask_add(tsr_array_ctx *ctx, const char *key, const char *op, const tsr_args *params,
              const char *const *inputs, size_t n_inputs)
{
  if (tsr_strmap_get(ctx->task_index, key, strlen(key), NULL)) return 0;
  if (ctx->n_tasks == ctx->cap_tasks) {
    size_t cap = ctx->cap_tasks ? ctx->cap_tasks * 2 : 256;
    graph_task *tasks = realloc(ctx->tasks, cap * sizeof *tasks);
    if (tasks == NULL) return client_fail(TSR_ENOMEM, "out of memory recording task '%s'", key);
    ctx->tasks = tasks;
    ctx->cap_tasks = cap;
  }
  graph_task *t = &ctx->tasks[ctx->n_tasks];
  memset(t, 0, sizeof *t);
  t->key = strdup(key);
  t->op = strdup(op);
  t->inputs = copy_keys(inputs, n_inputs);
  t->n_inputs = n_inputs;
  if (params != NULL) {
    const void *data = tsr_args_data(params, &t->params_len);
    t->params = malloc(t->params_len);
    if (t->params != NULL) memcpy(t->params, data, t->params_len);
  }
  if (t->key == NULL || t->op == NULL || t->inputs == NULL || (params != NULL && t->params == NULL) ||
      tsr_strmap_put(ctx->task_index, key, strlen(key), ctx->n_tasks) != 0)
    return client_fail(TSR_ENOMEM, "out of memory recording task '%s'", key);
  ctx->n_tasks++;
  return 0;
}

int gtask_add_tmp(tsr_array_ctx *ctx, const char *label, const char *op, const tsr_args *params,
                  const char *const *inputs, size_t n_inputs, char *key_out, size_t cap)
{
  snprintf(key_out, cap, "%s-%08x-%" PRIu64, label, ctx->token, ctx->next_name++);
  return gtask_add(ctx, key_out, op, params, inputs, n_inputs);
}

int gtask_sum_tree(tsr_array_ctx *ctx, const char *label, char **keys, size_t n, int split_every, char *root,
                   size_t cap)
{
  size_t fan = split_every >= 2 ? (size_t)split_every : 8;
  if (n == 1) {
    snprintf(root, cap, "%s", keys[0]);
    return 0;
  }
  char **level = keys;
  size_t count = n;
  char **owned = NULL;
  int rc = 0;
  while (count > 1 && rc == 0) {
    size_t next_count = (count + fan - 1) / fan;
    char **next = calloc(next_count, sizeof *next);
    if (next == NULL) return client_fail(TSR_ENOMEM, "out of memory building a sum tree");
    for (size_t i = 0; i < next_count && rc == 0; i++) {
      size_t lo = i * fan, hi = lo + fan < count ? lo + fan : count;
      char key[256];
      if (hi - lo == 1) snprintf(key, sizeof key, "%s", level[lo]);
      else rc = gtask_add_tmp(ctx, label, "add", NULL, (const char *const *)&level[lo], hi - lo, key, sizeof key);
      next[i] = strdup(key);
    }
    if (owned != NULL) {
      for (size_t i = 0; i < count; i++) free(owned[i]);
      free(owned);
    }
    owned = level = next;
    count = next_count;
  }
  if (rc == 0) snprintf(root, cap, "%s", level[0]);
  for (size_t i = 0; i < count; i++) free(owned[i]);
  free(owned);
  return rc;
}

/* ---------- args helpers ---------- */

int gargs_shape(tsr_args *args, const char *name, int ndim, const int64_t *values)
{
  return tsr_args_ints(args, name, values, (size_t)ndim);
}

const char *gdtype_name(tsr_dtype dtype)
{
  const char *name = tsr_dtype_name(dtype);
  return name != NULL ? name : "?";
}

/* Re-adds one decoded parameter to args. */
static int add_param(tsr_args *args, const tsr_param *p)
{
  switch (p->type) {
  case TSR_PARAM_INT: return tsr_args_int(args, p->name, p->i);
  case TSR_PARAM_FLOAT: return tsr_args_float(args, p->name, p->f);
  case TSR_PARAM_BOOL: return tsr_args_bool(args, p->name, p->i != 0);
  case TSR_PARAM_STR: return tsr_args_str(args, p->name, p->s);
  case TSR_PARAM_INTS: return tsr_args_ints(args, p->name, p->ints, p->n);
  case TSR_PARAM_FLOATS: return tsr_args_floats(args, p->name, p->floats, p->n);
  }
  return TSR_EINVAL;
}

int gtask_params(const graph_task *t, tsr_params *params)
{
  if (t->params == NULL || t->params_len == 0) return 0;
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  tsr_errbuf err = {{0}};
  int rc = msgpack_unpack_next(&up, t->params, t->params_len, NULL) == MSGPACK_UNPACK_SUCCESS ? 0 : TSR_EINVAL;
  if (rc == 0) rc = tsr_wire_params(&up.data, params, &err);
  msgpack_unpacked_destroy(&up);
  return rc;
}

int gargs_merge(tsr_args *args, const void *map, size_t len)
{
  if (map == NULL || len == 0) return 0;
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  tsr_params params = TSR_PARAMS_INIT;
  tsr_errbuf err = {{0}};
  int rc = msgpack_unpack_next(&up, map, len, NULL) == MSGPACK_UNPACK_SUCCESS ? 0 : TSR_EINVAL;
  if (rc == 0) rc = tsr_wire_params(&up.data, &params, &err);
  for (size_t i = 0; rc == 0 && i < params.n; i++) rc = add_param(args, &params.items[i]);
  tsr_params_clear(&params);
  msgpack_unpacked_destroy(&up);
  return rc == 0 ? 0 : client_fail(rc, "cannot merge task params: %s", err.text[0] ? err.text : tsr_strerror(rc));
}
