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
/* full "f-0" -> scale "f-1" .. "f-8" -> sum "f-sum", wanting f-sum: a
 * chain the scheduler fuses into one task of 10 parts in three op groups
 * (default --fuse-width 1). */
int add_fused_chain(tsr_graph *g);
/* Adds a tree of n-ary `add` over keys (fan-in), wanting the root, whose
 * key is written to root (cap bytes). Returns 0 or an error code. */
int add_tree(tsr_graph *g, const char *prefix, char **keys, size_t n, size_t fan_in, char *root, size_t cap);
/* Gathers a 0-d f64 result. */
int gather_f64(tsr_client *c, const char *key, double *value_p);
/* s (k values) and v (k x cols) of svd_compressed(k, n_power_iter=2,
 * seed 3) of X2 = scale(randint(0, 3) u8 seed 42, 1, 1), rows x cols in
 * chunk_rows-row chunks: X2 is computed once, kept, and read by all six
 * passes (on a tight worker: dropped and made again, or spilled). Opens
 * its own client on address; prints the error on stderr. 0 or an error. */
int svd_of_materialized_x2(const char *address, int64_t rows, int64_t cols, int64_t chunk_rows, int k,
                           int64_t timeout_ms, double *s, double *v);
/* Up to max numbers from a text file: the col-th (from 0) whitespace-
 * separated field of each line not starting with '#' (reference result
 * files: PLINK's .eigenval/.eigenvec, SOURCE.md's tables). Returns the
 * count (0 when the file cannot be read). */
int read_column(const char *path, int col, double *out, int max);
/* The HapMap3 / 1000 Genomes directory: $TSR_PLINK_DATA, else the
 * build's ../shared/data/hapmap3_1kg_genotypes. Static. */
const char *plink_data_dir(void);

#endif
