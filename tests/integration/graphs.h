/* Small graph-building helpers for integration tests, over the public API. */
#ifndef TSR_TESTS_GRAPHS_H
#define TSR_TESTS_GRAPHS_H

#include "tessera/tessera.h"

/* full(shape=[n], dtype=f64, value) */
int add_full(tsr_graph *g, const char *key, int64_t n, double value);
/* random_uniform f64 chunk [offset, offset+n) of a [total] array */
int add_uniform(tsr_graph *g, const char *key, int64_t n, int64_t offset, int64_t total, int64_t seed);
/* scale(factor, offset) of input */
int add_scale(tsr_graph *g, const char *key, const char *input, double factor, double offset);
/* op with no params over inputs */
int add_plain(tsr_graph *g, const char *key, const char *op, const char *const *inputs, size_t n);
/* sleep(ms) test op */
int add_sleep(tsr_graph *g, const char *key, int64_t ms, const char *const *inputs, size_t n);
/* Adds a tree of n-ary `add` over keys (fan-in), wanting the root, whose
 * key is written to root (cap bytes). Returns 0 or an error code. */
int add_tree(tsr_graph *g, const char *prefix, char **keys, size_t n, size_t fan_in, char *root, size_t cap);
/* Gathers a 0-d f64 result. */
int gather_f64(tsr_client *c, const char *key, double *value_p);

#endif
