/* tsr_random_counts: the seeded sparse count matrix with cluster structure
 * of kernels/cpu/counts_synth.c, one counts_synth task per row chunk, and
 * the cells' true types beside it. */
#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

static int synth_args(tsr_args *args, uint64_t seed, int64_t rows, int64_t row0, int64_t types)
{
  int rc = tsr_args_int(args, "seed", (int64_t)seed);
  if (rc == 0) rc = tsr_args_int(args, "rows", rows);
  if (rc == 0) rc = tsr_args_int(args, "row0", row0);
  if (rc == 0) rc = tsr_args_int(args, "types", types);
  return rc;
}

/* Chunk b's task of a (counts when genes > 0, else the types). */
static int synth_task(tsr_array_ctx *ctx, const tsr_array *a, size_t b, const tsr_random_counts_opts *o,
                      uint64_t seed, bool counts)
{
  int64_t idx[2], shape[2], offset[2];
  garray_index(a, b, idx);
  garray_block_shape(a, idx, shape);
  garray_block_offset(a, idx, offset);
  tsr_args *args = NULL;
  int rc = tsr_args_new(&args);
  if (rc == 0) rc = synth_args(args, seed, shape[0], offset[0], o->n_types);
  if (rc == 0 && counts) rc = tsr_args_int(args, "genes", a->shape[1]);
  if (rc == 0 && counts) rc = tsr_args_float(args, "density", o->density);
  if (rc == 0) rc = gtask_add(ctx, a->keys[b], counts ? "counts_synth" : "counts_synth_types", args, NULL, 0);
  tsr_args_destroy(&args);
  return rc;
}

TSR_API int tsr_random_counts(tsr_array_ctx *ctx, uint64_t seed, int64_t n_cells, int64_t n_genes, int64_t row_chunk,
                              const tsr_random_counts_opts *opts, tsr_array **counts_p, tsr_array **types_p)
{
  tsr_random_counts_opts o = opts != NULL ? *opts : (tsr_random_counts_opts)TSR_RANDOM_COUNTS_OPTS_DEFAULT;
  if (ctx == NULL || counts_p == NULL) return client_fail(TSR_EINVAL, "random_counts: NULL argument");
  if (n_cells < 1 || n_genes < 1 || n_genes > INT32_MAX || row_chunk < 1 || o.n_types < 1 || o.n_types > 65536 ||
      !(o.density > 0 && o.density <= 1))
    return client_fail(TSR_EINVAL, "random_counts: needs cells >= 1, 1 <= genes < 2^31, row_chunk >= 1, "
                                   "1 <= n_types <= 65536 and density in (0, 1]");
  int64_t shape[2] = {n_cells, n_genes}, chunks[2] = {row_chunk, n_genes};
  tsr_array *x = NULL, *t = NULL;
  int rc = garray_new(ctx, "random_counts", TSR_F32, 2, shape, chunks, &x);
  for (size_t b = 0; rc == 0 && b < x->nblocks; b++) rc = synth_task(ctx, x, b, &o, seed, true);
  if (rc == 0 && types_p != NULL) rc = garray_new(ctx, "random_counts_types", TSR_I32, 1, shape, chunks, &t);
  for (size_t b = 0; rc == 0 && t != NULL && b < t->nblocks; b++) rc = synth_task(ctx, t, b, &o, seed, false);
  if (rc != 0) {
    tsr_array_free(ctx, &x), tsr_array_free(ctx, &t);
    return rc;
  }
  x->encoding = TSR_ENC_CSR;
  *counts_p = x;
  if (types_p != NULL) *types_p = t;
  return 0;
}
