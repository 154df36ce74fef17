#include "graphs.h"

#include "tessera/linalg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int add_full(tsr_graph *g, const char *key, int64_t n, double value)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_ints(a, "shape", &n, 1);
  if (rc == 0) rc = tsr_args_str(a, "dtype", "f64");
  if (rc == 0) rc = tsr_args_float(a, "value", value);
  if (rc == 0) rc = tsr_graph_add_args(g, key, "full", a, NULL, 0);
  tsr_args_destroy(&a);
  return rc;
}

int add_uniform(tsr_graph *g, const char *key, int64_t n, int64_t offset, int64_t total, int64_t seed)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_ints(a, "shape", &n, 1);
  if (rc == 0) rc = tsr_args_ints(a, "offset", &offset, 1);
  if (rc == 0) rc = tsr_args_ints(a, "global_shape", &total, 1);
  if (rc == 0) rc = tsr_args_int(a, "seed", seed);
  if (rc == 0) rc = tsr_args_str(a, "dtype", "f64");
  if (rc == 0) rc = tsr_graph_add_args(g, key, "random_uniform", a, NULL, 0);
  tsr_args_destroy(&a);
  return rc;
}

int add_scale(tsr_graph *g, const char *key, const char *input, double factor, double offset)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_float(a, "factor", factor);
  if (rc == 0) rc = tsr_args_float(a, "offset", offset);
  if (rc == 0) rc = tsr_graph_add_args(g, key, "scale", a, &input, 1);
  tsr_args_destroy(&a);
  return rc;
}

int add_plain(tsr_graph *g, const char *key, const char *op, const char *const *inputs, size_t n)
{
  return tsr_graph_add(g, key, op, NULL, 0, inputs, n);
}

int add_sleep(tsr_graph *g, const char *key, int64_t ms, const char *const *inputs, size_t n)
{
  tsr_args *a = NULL;
  int rc = tsr_args_new(&a);
  if (rc == 0) rc = tsr_args_int(a, "ms", ms);
  if (rc == 0) rc = tsr_graph_add_args(g, key, "sleep", a, inputs, n);
  tsr_args_destroy(&a);
  return rc;
}

int add_fused_chain(tsr_graph *g)
{
  char prev[32] = "f-0", key[32];
  int rc = add_full(g, prev, 4, 1.0);
  for (int i = 1; rc == 0 && i <= 8; i++) {
    snprintf(key, sizeof key, "f-%d", i);
    rc = add_scale(g, key, prev, 1.0, 1.0);
    memcpy(prev, key, sizeof key);
  }
  const char *in = prev;
  if (rc == 0) rc = add_plain(g, "f-sum", "sum", &in, 1);
  return rc == 0 ? tsr_graph_want(g, "f-sum") : rc;
}

int add_tree(tsr_graph *g, const char *prefix, char **keys, size_t n, size_t fan_in, char *root, size_t cap)
{
  char **level = keys;
  size_t count = n;
  int depth = 0, rc = 0;
  char **owned = NULL;
  while (count > 1 && rc == 0) {
    size_t next_count = (count + fan_in - 1) / fan_in;
    char **next = calloc(next_count, sizeof *next);
    for (size_t i = 0; i < next_count && rc == 0; i++) {
      size_t lo = i * fan_in, hi = lo + fan_in < count ? lo + fan_in : count;
      next[i] = malloc(64);
      snprintf(next[i], 64, "%s-l%d-%zu", prefix, depth, i);
      if (hi - lo == 1) rc = add_scale(g, next[i], level[lo], 1.0, 0.0);
      else rc = add_plain(g, next[i], "add", (const char *const *)&level[lo], hi - lo);
    }
    if (owned != NULL) {
      for (size_t i = 0; i < count; i++) free(owned[i]);
      free(owned);
    }
    owned = level = next;
    count = next_count;
    depth++;
  }
  if (rc == 0) {
    snprintf(root, cap, "%s", level[0]);
    rc = tsr_graph_want(g, root);
  }
  if (owned != NULL) {
    for (size_t i = 0; i < count; i++) free(owned[i]);
    free(owned);
  }
  return rc;
}

int gather_f64(tsr_client *c, const char *key, double *value_p)
{
  tsr_chunk *chunk = NULL;
  int rc = tsr_gather(c, key, 60000, &chunk);
  if (rc != 0) return rc;
  if (chunk->dtype != TSR_F64 || chunk->nbytes != 8) rc = TSR_ESHAPE;
  else memcpy(value_p, chunk->data, 8);
  tsr_chunk_destroy(&chunk);
  return rc;
}

int svd_of_materialized_x2(const char *address, int64_t rows, int64_t cols, int64_t chunk_rows, int k,
                           int64_t timeout_ms, double *s, double *v)
{
  tsr_client *client = NULL;
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *x2 = NULL, *u = NULL, *sa = NULL, *va = NULL;
  int64_t shape[2] = {rows, cols}, chunks[2] = {chunk_rows, cols};
  tsr_svd_opts o = TSR_SVD_OPTS_DEFAULT;
  o.seed = 3;
  o.n_power_iter = 2;
  int rc = tsr_client_open(&client, address, NULL);
  if (rc == 0) rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0) rc = tsr_randint(ctx, 42, 0, 3, TSR_U8, 2, shape, chunks, &x);
  if (rc == 0) rc = tsr_scale(ctx, x, 1.0, 1.0, &x2);
  if (rc == 0) rc = tsr_svd_compressed(ctx, x2, k, &o, &u, &sa, &va);
  const tsr_array *outs[2] = {sa, va};
  void *bufs[2] = {s, v};
  size_t caps[2] = {(size_t)k * sizeof *s, (size_t)k * (size_t)cols * sizeof *v};
  if (rc == 0) rc = tsr_compute_many(ctx, outs, 2, bufs, caps, timeout_ms);
  if (rc != 0) fprintf(stderr, "  svd: %s: %s\n", tsr_err_name(rc), tsr_errmsg());
  tsr_array *all[] = {x, x2, u, sa, va};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tsr_array_free(ctx, &all[i]);
  tsr_array_ctx_destroy(&ctx);
  tsr_client_close(client);
  return rc;
}

int read_column(const char *path, int col, double *out, int max)
{
  FILE *f = fopen(path, "r");
  char line[1 << 16];
  int n = 0;
  while (f != NULL && n < max && fgets(line, sizeof line, f) != NULL) {
    if (line[0] == '#') continue;
    char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
    for (int i = 0; tok != NULL && i < col; i++) tok = strtok_r(NULL, " \t\n", &save);
    if (tok != NULL) out[n++] = strtod(tok, NULL);
  }
  if (f != NULL) fclose(f);
  return n;
}

const char *plink_data_dir(void)
{
  const char *env = getenv("TSR_PLINK_DATA");
  return env != NULL && env[0] != '\0' ? env : TSR_PLINK_DATA;
}
