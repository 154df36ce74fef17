/* Running arrays: collect the tasks an array's chunks need (walking inputs
 * back until a persisted chunk or a creation task), submit them as one
 * graph wanting the chunks, then gather or keep the result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"
#include "util/npy.h"

#define TSR_API __attribute__((visibility("default")))

/* Depth-first over inputs with an explicit stack: lineages can be deep. */
static int collect(tsr_array_ctx *ctx, char **keys, size_t n, tsr_graph *g)
{
  tsr_strmap *seen = tsr_strmap_new(n * 4);
  size_t cap = n + 64, top = 0;
  const char **stack = malloc(cap * sizeof *stack);
  int rc = seen && stack ? 0 : client_fail(TSR_ENOMEM, "compute: out of memory");
  for (size_t i = 0; i < n && rc == 0; i++) stack[top++] = keys[i];
  while (top > 0 && rc == 0) {
    const char *key = stack[--top];
    size_t len = strlen(key);
    uint64_t index;
    if (tsr_strmap_get(seen, key, len, NULL) || tsr_strmap_get(ctx->held, key, len, NULL)) continue;
    if (!tsr_strmap_get(ctx->task_index, key, len, &index)) {
      rc = client_fail(TSR_EMISSING, "compute: no task produces '%s'", key);
      break;
    }
    rc = tsr_strmap_put(seen, key, len, 1);
    const graph_task *t = &ctx->tasks[index];
    if (rc == 0) rc = tsr_graph_add(g, t->key, t->op, t->params, t->params_len, (const char *const *)t->inputs, t->n_inputs);
    for (size_t j = 0; rc == 0 && j < t->n_inputs; j++) {
      if (top == cap) {
        const char **bigger = realloc(stack, 2 * cap * sizeof *stack);
        if (bigger == NULL) rc = client_fail(TSR_ENOMEM, "compute: out of memory");
        else stack = bigger, cap *= 2;
      }
      if (rc == 0) stack[top++] = t->inputs[j];
    }
  }
  free(stack);
  tsr_strmap_destroy(&seen);
  return rc;
}

int grun_submit_nowait(tsr_array_ctx *ctx, char **keys, size_t n, tsr_future **future_p)
{
  tsr_graph *g = NULL;
  tsr_future *f = NULL;
  tsr_strmap *wanted = tsr_strmap_new(n);
  int rc = wanted ? tsr_graph_new(&g) : client_fail(TSR_ENOMEM, "compute: out of memory");
  if (rc == 0) rc = collect(ctx, keys, n, g);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    if (tsr_strmap_get(wanted, keys[i], strlen(keys[i]), NULL)) continue;
    rc = tsr_strmap_put(wanted, keys[i], strlen(keys[i]), 1);
    if (rc == 0) rc = tsr_graph_want(g, keys[i]);
  }
  if (rc == 0) rc = tsr_submit(ctx->client, &g, &f);
  tsr_strmap_destroy(&wanted);
  tsr_graph_destroy(&g);
  if (rc == 0) *future_p = f;
  return rc;
}

int grun_submit(tsr_array_ctx *ctx, char **keys, size_t n, int timeout_ms, tsr_future **future_p)
{
  tsr_future *f = NULL;
  int rc = grun_submit_nowait(ctx, keys, n, &f);
  if (rc == 0) rc = tsr_future_wait(f, timeout_ms);
  if (rc == TSR_ETASK) client_fail(rc, "%s", tsr_future_error(f));
  if (rc != 0) {
    tsr_future_release(&f);
    return rc;
  }
  *future_p = f;
  return 0;
}

/* Copies a gathered block into its place in the C-order whole array. */
void grun_place_block(const tsr_array *a, size_t block, const void *src, char *dst)
{
  int64_t idx[TSR_MAX_NDIM], shape[TSR_MAX_NDIM], off[TSR_MAX_NDIM];
  garray_index(a, block, idx);
  garray_block_shape(a, idx, shape);
  garray_block_offset(a, idx, off);
  size_t esize = tsr_dtype_size(a->dtype);
  int nd = a->ndim;
  if (nd == 0) {
    memcpy(dst, src, esize);
    return;
  }
  size_t row_bytes = (size_t)shape[nd - 1] * esize;
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; d++) rows *= shape[d];
  for (int64_t r = 0; r < rows; r++) {
    /* Global offset of this block row. */
    int64_t rem = r, lin = 0;
    int64_t local[TSR_MAX_NDIM];
    for (int d = nd - 2; d >= 0; d--) {
      local[d] = rem % shape[d];
      rem /= shape[d];
    }
    for (int d = 0; d < nd - 1; d++) lin = lin * a->shape[d] + off[d] + local[d];
    lin = lin * a->shape[nd - 1] + off[nd - 1];
    memcpy(dst + (size_t)lin * esize, (const char *)src + (size_t)r * row_bytes, row_bytes);
  }
}

/* Where block b starts in a's C-order bytes when its bytes are one run
 * there (every dimension after the first whole), else -1. */
static int64_t contiguous_offset(const tsr_array *a, const int64_t *idx, const int64_t *shape)
{
  int64_t off[TSR_MAX_NDIM];
  garray_block_offset(a, idx, off);
  int64_t row = 1;
  for (int d = 1; d < a->ndim; d++) {
    if (shape[d] != a->shape[d]) return -1;
    row *= a->shape[d];
  }
  return a->ndim == 0 ? 0 : off[0] * row * (int64_t)tsr_dtype_size(a->dtype);
}

static int check_block(const tsr_array *a, size_t b, const tsr_chunk *chunk, size_t expect)
{
  if (chunk->dtype == a->dtype && chunk->nbytes == expect) return 0;
  return client_fail(TSR_ESHAPE, "compute: chunk '%s' has %zu bytes of %s, expected %zu of %s", a->keys[b],
                     chunk->nbytes, gdtype_name(chunk->dtype), expect, gdtype_name(a->dtype));
}

/* Fetches block b of a into its place in dst: straight there when the
 * block is one run of dst's bytes (row blocks), else through a chunk. */
static int gather_block(tsr_array_ctx *ctx, const tsr_array *a, size_t b, char *dst, int timeout_ms)
{
  int64_t idx[TSR_MAX_NDIM], shape[TSR_MAX_NDIM];
  garray_index(a, b, idx);
  garray_block_shape(a, idx, shape);
  size_t expect = tsr_dtype_size(a->dtype);
  for (int d = 0; d < a->ndim; d++) expect *= (size_t)shape[d];
  int64_t at = contiguous_offset(a, idx, shape);
  if (at >= 0) {
    tsr_chunk info;
    int rc = tsr_gather_into(ctx->client, a->keys[b], timeout_ms, dst + at, expect, &info);
    return rc == TSR_ELIMIT ? client_fail(TSR_ESHAPE, "compute: chunk '%s' is larger than its block (%zu bytes)",
                                          a->keys[b], expect)
                            : rc != 0 ? rc : check_block(a, b, &info, expect);
  }
  tsr_chunk *chunk = NULL;
  int rc = tsr_gather(ctx->client, a->keys[b], timeout_ms, &chunk);
  if (rc == 0) rc = check_block(a, b, chunk, expect);
  if (rc == 0) grun_place_block(a, b, chunk->data, dst);
  tsr_chunk_destroy(&chunk);
  return rc;
}

/* One block of one of the arrays; steps of the same key are chained. */
typedef struct gather_step {
  size_t array, block;
  size_t next;  /* the next step of the same key + 1, 0: none */
} gather_step;

/* Fetches every block of the n arrays as its key is done (the future's
 * as-completed order, tsr_future_next_done), while the rest of the graph
 * still runs: the results travel during the computation instead of after
 * its last task. A key wanted twice (an array passed twice) fills each of
 * its places. */
static int gather_as_done(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, void *const *bufs,
                          size_t count, tsr_future *f, int timeout_ms)
{
  gather_step *steps = malloc((count ? count : 1) * sizeof *steps);
  tsr_strmap *first = tsr_strmap_new(count);
  int rc = steps && first ? 0 : client_fail(TSR_ENOMEM, "compute: out of memory");
  for (size_t i = 0, k = 0; rc == 0 && i < n; i++)
    for (size_t b = 0; rc == 0 && b < arrays[i]->nblocks; b++, k++) {
      const char *key = arrays[i]->keys[b];
      uint64_t head = 0;
      tsr_strmap_get(first, key, strlen(key), &head);
      steps[k] = (gather_step){i, b, (size_t)head};
      rc = tsr_strmap_put(first, key, strlen(key), k + 1);
    }
  for (size_t got = 0; rc == 0 && got < tsr_future_count(f); got++) {
    size_t index;
    rc = tsr_future_next_done(f, timeout_ms, &index);
    const char *key = rc == 0 ? tsr_future_key(f, index) : NULL;
    uint64_t s = 0;
    if (key != NULL) tsr_strmap_get(first, key, strlen(key), &s);
    for (; rc == 0 && s != 0; s = steps[s - 1].next)
      rc = gather_block(ctx, arrays[steps[s - 1].array], steps[s - 1].block, bufs[steps[s - 1].array], timeout_ms);
  }
  tsr_strmap_destroy(&first);
  free(steps);
  return rc;
}

static size_t array_bytes(const tsr_array *a) { return (size_t)tsr_array_size(a) * tsr_dtype_size(a->dtype); }

/* Every block of the n arrays when each key is held (a persisted array, a
 * result kept with its context): fetched straight from the workers, with no
 * graph and no scheduler round trip (a held key is wanted by a live future,
 * so the client knows where it is, and waits for it if it is being
 * recomputed). Nonzero when some key is not held or a fetch failed: the
 * caller then submits as for any array, which also names real errors. */
static int gather_held(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, void *const *bufs, int timeout_ms)
{
  for (size_t i = 0; i < n; i++)
    for (size_t b = 0; b < arrays[i]->nblocks; b++)
      if (!tsr_strmap_get(ctx->held, arrays[i]->keys[b], strlen(arrays[i]->keys[b]), NULL)) return 1;
  for (size_t i = 0; i < n; i++)
    for (size_t b = 0; b < arrays[i]->nblocks; b++)
      if (gather_block(ctx, arrays[i], b, bufs[i], timeout_ms) != 0) return 1;
  return 0;
}

/* All chunk keys of n arrays, in order (borrowed pointers). */
static char **all_keys(const tsr_array *const *arrays, size_t n, size_t *count_p)
{
  size_t count = 0;
  for (size_t i = 0; i < n; i++) count += arrays[i]->nblocks;
  char **keys = malloc((count ? count : 1) * sizeof *keys);
  for (size_t i = 0, k = 0; keys != NULL && i < n; i++)
    for (size_t b = 0; b < arrays[i]->nblocks; b++) keys[k++] = arrays[i]->keys[b];
  *count_p = count;
  return keys;
}

TSR_API int tsr_compute_many(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, void *const *bufs,
                             const size_t *caps, int timeout_ms)
{
  if (ctx == NULL || arrays == NULL || bufs == NULL || caps == NULL) return client_fail(TSR_EINVAL, "compute: NULL argument");
  const tsr_array **dense = calloc(n ? n : 1, sizeof *dense);
  if (dense == NULL) return client_fail(TSR_ENOMEM, "compute: out of memory");
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (arrays[i] == NULL || bufs[i] == NULL) rc = client_fail(TSR_EINVAL, "compute: array or buffer %zu is NULL", i);
    else if (caps[i] < array_bytes(arrays[i]))
      rc = client_fail(TSR_ELIMIT, "compute: buffer %zu of %zu bytes cannot hold %zu", i, caps[i], array_bytes(arrays[i]));
    else rc = garray_dense(ctx, arrays[i], &dense[i]);  /* the elements, not an encoding */
  }
  size_t count = 0;
  char **keys = rc == 0 ? all_keys(dense, n, &count) : NULL;
  if (rc == 0 && keys == NULL) rc = client_fail(TSR_ENOMEM, "compute: out of memory");
  if (rc != 0) {
    free(dense);
    return rc;
  }
  if (gather_held(ctx, dense, n, bufs, timeout_ms) == 0) {
    free(keys);
    free(dense);
    return 0;
  }
  tsr_future *f = NULL;
  rc = grun_submit_nowait(ctx, keys, count, &f);
  if (rc == 0) rc = gather_as_done(ctx, dense, n, bufs, count, f, timeout_ms);
  /* A task that failed shows first as its key's error; the future's own
   * message is the one callers have always had (it names the first
   * failed task and its cause), and waiting on it also confirms the rest. */
  if (rc == 0 || rc == TSR_ETASK) {
    int wrc = tsr_future_wait(f, timeout_ms);
    if (wrc == TSR_ETASK) rc = client_fail(wrc, "%s", tsr_future_error(f));
    else if (wrc != 0 && rc == 0) rc = wrc;
  }
  tsr_future_release(&f);
  free(keys);
  free(dense);
  return rc;
}

TSR_API int tsr_compute(tsr_array_ctx *ctx, const tsr_array *a, void *buf, size_t cap, int timeout_ms)
{
  return tsr_compute_many(ctx, &a, 1, &buf, &cap, timeout_ms);
}

TSR_API int tsr_compute_npy(tsr_array_ctx *ctx, const tsr_array *a, const char *path, int timeout_ms)
{
  if (path == NULL || a == NULL) return client_fail(TSR_EINVAL, "compute_npy: NULL argument");
  size_t bytes = array_bytes(a);
  char *buf = malloc(bytes ? bytes : 1);
  if (buf == NULL) return client_fail(TSR_ENOMEM, "compute_npy: cannot allocate %zu bytes", bytes);
  int rc = tsr_compute(ctx, a, buf, bytes, timeout_ms);
  FILE *f = rc == 0 ? fopen(path, "wb") : NULL;
  if (rc == 0 && f == NULL) rc = client_fail(TSR_EIO, "compute_npy: cannot create %s", path);
  if (rc == 0) {
    tsr_meta meta = {a->dtype, a->ndim, {0}};
    memcpy(meta.shape, a->shape, sizeof meta.shape);
    tsr_errbuf err = {{0}};
    rc = tsr_npy_write_header(f, &meta, &err);
    if (rc != 0) client_fail(rc, "compute_npy: %s", err.text);
    else if (fwrite(buf, 1, bytes, f) != bytes) rc = client_fail(TSR_EIO, "compute_npy: short write to %s", path);
  }
  if (f != NULL && fclose(f) != 0 && rc == 0) rc = client_fail(TSR_EIO, "compute_npy: cannot close %s", path);
  free(buf);
  return rc;
}

/* Marks every chunk of a as kept and returns an array over them. */
static int persisted_view(tsr_array_ctx *ctx, const tsr_array *a, tsr_array **out_p)
{
  for (size_t b = 0; b < a->nblocks; b++)
    if (tsr_strmap_put(ctx->held, a->keys[b], strlen(a->keys[b]), 1) != 0)
      return client_fail(TSR_ENOMEM, "persist: out of memory");
  return garray_view(ctx, "persist", a, out_p);
}

TSR_API int tsr_persist_many(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, int timeout_ms,
                             tsr_array **outs)
{
  if (ctx == NULL || arrays == NULL || outs == NULL) return client_fail(TSR_EINVAL, "persist: NULL argument");
  for (size_t i = 0; i < n; i++)
    if (arrays[i] == NULL) return client_fail(TSR_EINVAL, "persist: array %zu is NULL", i);
  if (ctx->n_persisted == ctx->cap_persisted) {
    size_t cap = ctx->cap_persisted ? 2 * ctx->cap_persisted : 8;
    tsr_future **bigger = realloc(ctx->persisted, cap * sizeof *bigger);
    if (bigger == NULL) return client_fail(TSR_ENOMEM, "persist: out of memory");
    ctx->persisted = bigger;
    ctx->cap_persisted = cap;
  }
  size_t count;
  char **keys = all_keys(arrays, n, &count);
  if (keys == NULL) return client_fail(TSR_ENOMEM, "persist: out of memory");
  tsr_future *f = NULL;
  int rc = grun_submit(ctx, keys, count, timeout_ms, &f);
  free(keys);
  if (rc != 0) return rc;
  ctx->persisted[ctx->n_persisted++] = f;
  for (size_t i = 0; rc == 0 && i < n; i++) rc = persisted_view(ctx, arrays[i], &outs[i]);
  return rc;
}

TSR_API int tsr_persist(tsr_array_ctx *ctx, const tsr_array *a, int timeout_ms, tsr_array **out_p)
{
  return tsr_persist_many(ctx, &a, 1, timeout_ms, out_p);
}
