/* Rechunk, slice and concatenate share one mechanism: the output is a
 * window onto a virtual array made of source arrays laid end to end along
 * one axis. Each output block is the tiling of the pieces of source blocks
 * it overlaps: a `slice` task per partial piece, an `assemble` task over
 * the pieces. An output block equal to a whole source block reuses that
 * block's key and costs nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs.h"

#define TSR_API __attribute__((visibility("default")))

typedef struct sources {
  const tsr_array *const *arrays;
  size_t n;
  int axis;                /* axis along which sources are laid out */
  int64_t start[TSR_MAX_NDIM]; /* window start in the virtual array */
} sources;

/* One axis's pieces of an output block: which source (only along the
 * layout axis), which chunk of it, and the range inside that chunk. */
typedef struct piece_axis {
  size_t src;
  int64_t chunk;
  int64_t lo, hi;          /* range inside the chunk */
  int64_t len;             /* chunk length */
} piece_axis;

#define MAX_PIECES_AXIS 4096

/* Lists the pieces covering virtual range [lo, hi) along axis d. */
static size_t axis_pieces(const sources *s, int d, int64_t lo, int64_t hi, piece_axis *out)
{
  size_t n = 0;
  int64_t base = 0;
  for (size_t k = 0; k < s->n; k++) {
    const tsr_array *a = s->arrays[d == s->axis ? k : 0];
    int64_t extent = a->shape[d];
    if (d != s->axis && k > 0) break;
    for (int64_t c = 0; c < a->nchunks[d] && n < MAX_PIECES_AXIS; c++) {
      int64_t c_lo = base + c * a->chunk[d], c_len = garray_chunk_len(a, d, c), c_hi = c_lo + c_len;
      int64_t o_lo = lo > c_lo ? lo : c_lo, o_hi = hi < c_hi ? hi : c_hi;
      if (o_lo >= o_hi) continue;
      out[n++] = (piece_axis){d == s->axis ? k : 0, c, o_lo - c_lo, o_hi - c_lo, c_len};
    }
    base += extent;
  }
  return n;
}

/* Builds the task (or alias) for output block b. */
static int build_block(tsr_array_ctx *ctx, const sources *s, tsr_array *out, size_t b, piece_axis **per_axis,
                       size_t *counts)
{
  int64_t idx[TSR_MAX_NDIM];
  garray_index(out, b, idx);
  size_t total = 1;
  for (int d = 0; d < out->ndim; d++) {
    int64_t lo = s->start[d] + idx[d] * out->chunk[d];
    counts[d] = axis_pieces(s, d, lo, lo + garray_chunk_len(out, d, idx[d]), per_axis[d]);
    total *= counts[d];
  }
  char **keys = calloc(total ? total : 1, sizeof *keys);
  if (keys == NULL) return client_fail(TSR_ENOMEM, "rechunk: out of memory");
  int rc = 0;
  bool single_whole = total == 1;
  for (size_t p = 0; p < total && rc == 0; p++) {
    size_t rem = p, src = 0;
    int64_t chunk_idx[TSR_MAX_NDIM], lo[TSR_MAX_NDIM], hi[TSR_MAX_NDIM];
    bool whole = true;
    for (int d = out->ndim - 1; d >= 0; d--) {
      const piece_axis *pa = &per_axis[d][rem % counts[d]];
      rem /= counts[d];
      if (d == s->axis) src = pa->src;
      chunk_idx[d] = pa->chunk;
      lo[d] = pa->lo;
      hi[d] = pa->hi;
      whole = whole && pa->lo == 0 && pa->hi == pa->len;
    }
    const char *in = s->arrays[src]->keys[garray_block(s->arrays[src], chunk_idx)];
    if (whole) {
      keys[p] = strdup(in);
      single_whole = single_whole && whole;
      continue;
    }
    single_whole = false;
    tsr_args *args = NULL;
    char key[256];
    rc = tsr_args_new(&args);
    if (rc == 0) rc = gargs_shape(args, "start", out->ndim, lo);
    if (rc == 0) rc = gargs_shape(args, "stop", out->ndim, hi);
    if (rc == 0) rc = gtask_add_tmp(ctx, "slice", "slice", args, &in, 1, key, sizeof key);
    tsr_args_destroy(&args);
    keys[p] = strdup(key);
  }
  if (rc == 0 && single_whole) {
    free(out->keys[b]);
    out->keys[b] = keys[0];       /* alias: the output block is a source block */
    keys[0] = NULL;
  } else if (rc == 0) {
    int64_t grid[TSR_MAX_NDIM];
    for (int d = 0; d < out->ndim; d++) grid[d] = (int64_t)counts[d];
    tsr_args *args = NULL;
    rc = tsr_args_new(&args);
    if (rc == 0) rc = gargs_shape(args, "grid", out->ndim, grid);
    if (rc == 0) rc = gtask_add(ctx, out->keys[b], "assemble", args, (const char *const *)keys, total);
    tsr_args_destroy(&args);
  }
  for (size_t p = 0; p < total; p++) free(keys[p]);
  free(keys);
  return rc;
}

static int build_window(tsr_array_ctx *ctx, const sources *s, tsr_array *out)
{
  piece_axis *per_axis[TSR_MAX_NDIM] = {0};
  size_t counts[TSR_MAX_NDIM];
  int rc = 0;
  for (int d = 0; d < out->ndim && rc == 0; d++) {
    per_axis[d] = calloc(MAX_PIECES_AXIS, sizeof(piece_axis));
    if (per_axis[d] == NULL) rc = client_fail(TSR_ENOMEM, "rechunk: out of memory");
  }
  for (size_t b = 0; b < out->nblocks && rc == 0; b++) rc = build_block(ctx, s, out, b, per_axis, counts);
  for (int d = 0; d < out->ndim; d++) free(per_axis[d]);
  return rc;
}

static int finish(tsr_array_ctx *ctx, int rc, tsr_array *out, tsr_array **out_p)
{
  if (rc != 0) {
    tsr_array_free(ctx, &out);
    return rc;
  }
  *out_p = out;
  return 0;
}

TSR_API int tsr_rechunk(tsr_array_ctx *ctx, const tsr_array *a, const int64_t *chunks, tsr_array **out_p)
{
  if (a == NULL || chunks == NULL || out_p == NULL) return client_fail(TSR_EINVAL, "rechunk: NULL argument");
  int rc0 = garray_dense(ctx, a, &a);
  if (rc0 != 0) return rc0;
  int64_t want[TSR_MAX_NDIM];
  for (int d = 0; d < a->ndim; d++) want[d] = chunks[d] < 0 ? a->chunk[d] : chunks[d];
  tsr_array *out = NULL;
  int rc = garray_new(ctx, "rechunk", a->dtype, a->ndim, a->shape, want, &out);
  if (rc != 0) return rc;
  sources s = {&a, 1, 0, {0}};
  return finish(ctx, build_window(ctx, &s, out), out, out_p);
}

TSR_API int tsr_slice(tsr_array_ctx *ctx, const tsr_array *a, const int64_t *start, const int64_t *stop,
                      tsr_array **out_p)
{
  if (a == NULL || start == NULL || stop == NULL || out_p == NULL)
    return client_fail(TSR_EINVAL, "slice: NULL argument");
  int rc0 = garray_dense(ctx, a, &a);
  if (rc0 != 0) return rc0;
  int64_t shape[TSR_MAX_NDIM];
  for (int d = 0; d < a->ndim; d++) {
    if (start[d] < 0 || stop[d] > a->shape[d] || start[d] > stop[d])
      return client_fail(TSR_ESHAPE, "slice: axis %d range [%lld, %lld) outside [0, %lld)", d, (long long)start[d],
                         (long long)stop[d], (long long)a->shape[d]);
    shape[d] = stop[d] - start[d];
  }
  tsr_array *out = NULL;
  int rc = garray_new(ctx, "getitem", a->dtype, a->ndim, shape, a->chunk, &out);
  if (rc != 0) return rc;
  sources s = {&a, 1, 0, {0}};
  memcpy(s.start, start, sizeof(int64_t) * (size_t)a->ndim);
  return finish(ctx, build_window(ctx, &s, out), out, out_p);
}

TSR_API int tsr_concatenate(tsr_array_ctx *ctx, const tsr_array *const *arrays, size_t n, int axis, tsr_array **out_p)
{
  if (arrays == NULL || n == 0 || out_p == NULL) return client_fail(TSR_EINVAL, "concatenate: no arrays");
  const tsr_array *first = arrays[0];
  if (axis < 0 || axis >= first->ndim)
    return client_fail(TSR_EINVAL, "concatenate: axis %d outside 0..%d", axis, first->ndim - 1);
  int64_t shape[TSR_MAX_NDIM];
  memcpy(shape, first->shape, sizeof shape);
  shape[axis] = 0;
  for (size_t k = 0; k < n; k++) {
    const tsr_array *a = arrays[k];
    bool fits = a->ndim == first->ndim && a->dtype == first->dtype;
    for (int d = 0; fits && d < a->ndim; d++) fits = d == axis || a->shape[d] == first->shape[d];
    if (!fits)
      return client_fail(TSR_ESHAPE, "concatenate: array %zu differs from array 0 in dtype or in a dimension other than axis %d",
                         k, axis);
    shape[axis] += a->shape[axis];
  }
  /* Pieces are located with array 0's chunking on the other axes, so every
   * source must share it: rechunk those that do not. */
  const tsr_array **aligned = calloc(n, sizeof *aligned);
  if (aligned == NULL) return client_fail(TSR_ENOMEM, "concatenate: out of memory");
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++) {
    int64_t want[TSR_MAX_NDIM];
    bool same = true;
    for (int d = 0; d < first->ndim; d++) {
      want[d] = d == axis ? arrays[k]->chunk[d] : first->chunk[d];
      same = same && want[d] == arrays[k]->chunk[d];
    }
    tsr_array *re = NULL;
    rc = garray_dense(ctx, arrays[k], &aligned[k]);
    if (rc == 0 && !same && (rc = tsr_rechunk(ctx, arrays[k], want, &re)) == 0) aligned[k] = re;
  }
  tsr_array *out = NULL;
  if (rc == 0) rc = garray_new(ctx, "concatenate", first->dtype, first->ndim, shape, first->chunk, &out);
  if (rc == 0) {
    sources s = {aligned, n, axis, {0}};
    rc = finish(ctx, build_window(ctx, &s, out), out, out_p);
  }
  free(aligned);
  return rc;
}
