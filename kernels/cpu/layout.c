/* kernels/cpu/layout.c — ops that move elements without changing them:
 * transpose (2-D), slice (a sub-block), assemble (tile pieces into one
 * block) and view (a flat range, reshaped). All dtypes; the output always
 * has the input's dtype. */
#include <string.h>

#include "ops.h"

/* ---------- transpose ---------- */

#define TILE 32

/* dst[c][r] = src[r][c] for an R x C src, in TILE x TILE blocks so both
 * sides stay in cache. */
#define TRANSPOSE_FN(NAME, T)                                                  \
  static void NAME(const void *src_, void *dst_, int64_t R, int64_t C)         \
  {                                                                            \
    const T *src = src_;                                                       \
    T *dst = dst_;                                                             \
    for (int64_t r0 = 0; r0 < R; r0 += TILE)                                   \
      for (int64_t c0 = 0; c0 < C; c0 += TILE) {                               \
        int64_t r1 = r0 + TILE < R ? r0 + TILE : R, c1 = c0 + TILE < C ? c0 + TILE : C; \
        for (int64_t r = r0; r < r1; r++)                                      \
          for (int64_t c = c0; c < c1; c++) dst[c * R + r] = src[r * C + c];   \
      }                                                                        \
  }

TRANSPOSE_FN(transpose_1, uint8_t)
TRANSPOSE_FN(transpose_4, uint32_t)
TRANSPOSE_FN(transpose_8, uint64_t)

static int transpose_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)p;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "transpose: takes 1 input, got %d", n);
  if (in[0].ndim != 2) return tsr_fail(err, TSR_ESHAPE, "transpose: input must be 2-D, got %s", tsr_k_str(&in[0]).s);
  int64_t shape[2] = {in[0].shape[1], in[0].shape[0]};
  tsr_k_meta_set(out, in[0].dtype, 2, shape);
  return 0;
}

static int transpose_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)p, (void)n, (void)err;
  int64_t R = in[0].meta.shape[0], C = in[0].meta.shape[1];
  size_t es = tsr_dtype_size(in[0].meta.dtype);
  if (es == 1) transpose_1(in[0].data, out->data, R, C);
  else if (es == 4) transpose_4(in[0].data, out->data, R, C);
  else transpose_8(in[0].data, out->data, R, C);
  return 0;
}

/* ---------- slice ---------- */

/* Reads start/stop (one per axis of m) and checks 0 <= start <= stop <= shape. */
static int slice_params(const tsr_params *p, const tsr_meta *m, int64_t *start, int64_t *stop, tsr_errbuf *err)
{
  int ns = 0, ne = 0;
  int rc = tsr_k_shape_param("slice", p, "start", start, &ns, err);
  if (rc == 0) rc = tsr_k_shape_param("slice", p, "stop", stop, &ne, err);
  if (rc == TSR_ENOTFOUND) rc = TSR_EINVAL;
  if (rc != 0) return rc;
  if (ns != m->ndim || ne != m->ndim)
    return tsr_fail(err, TSR_ESHAPE, "slice: start %s and stop %s need one entry per axis of %s",
                    tsr_k_dims_str(start, ns).s, tsr_k_dims_str(stop, ne).s, tsr_k_str(m).s);
  for (int d = 0; d < m->ndim; d++)
    if (start[d] > stop[d] || stop[d] > m->shape[d])
      return tsr_fail(err, TSR_ESHAPE, "slice: [%s, %s) is not inside %s", tsr_k_dims_str(start, ns).s,
                      tsr_k_dims_str(stop, ne).s, tsr_k_str(m).s);
  return 0;
}

static int slice_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t start[TSR_MAX_NDIM], stop[TSR_MAX_NDIM], shape[TSR_MAX_NDIM];
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "slice: takes 1 input, got %d", n);
  int rc = slice_params(p, &in[0], start, stop, err);
  if (rc != 0) return rc;
  for (int d = 0; d < in[0].ndim; d++) shape[d] = stop[d] - start[d];
  tsr_k_meta_set(out, in[0].dtype, in[0].ndim, shape);
  return 0;
}

static int slice_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t start[TSR_MAX_NDIM], stop[TSR_MAX_NDIM], zero[TSR_MAX_NDIM] = {0};
  const tsr_meta *m = &in[0].meta;
  int rc = slice_params(p, m, start, stop, err);
  if (rc == 0)
    tsr_k_copy_block(tsr_dtype_size(m->dtype), m->ndim, out->meta.shape, in[0].data, m->shape, start, out->data,
                     out->meta.shape, zero);
  return rc;
}

/* ---------- assemble ---------- */

/* Piece index of grid coordinates c. */
static int64_t piece_at(const int64_t *grid, int nd, const int64_t *c)
{
  int64_t i = 0;
  for (int d = 0; d < nd; d++) i = i * grid[d] + c[d];
  return i;
}

/* Grid coordinates of piece i. */
static void piece_coords(const int64_t *grid, int nd, int64_t i, int64_t *c)
{
  for (int d = nd - 1; d >= 0; d--) {
    c[d] = i % grid[d];
    i /= grid[d];
  }
}

/* Extent along axis d of grid slot g: that of the piece at (0,..,g,..,0). */
static int64_t slot_extent(const tsr_meta *in, const int64_t *grid, int nd, int d, int64_t g)
{
  int64_t c[TSR_MAX_NDIM] = {0};
  c[d] = g;
  return in[piece_at(grid, nd, c)].shape[d];
}

static int assemble_grid(const tsr_params *p, const tsr_meta *in, int n, int64_t *grid, tsr_errbuf *err)
{
  int ng = 0;
  if (n < 1) return tsr_fail(err, TSR_EINVAL, "assemble: takes at least 1 input, got %d", n);
  int rc = tsr_k_shape_param("assemble", p, "grid", grid, &ng, err);
  if (rc != 0) return rc == TSR_ENOTFOUND ? TSR_EINVAL : rc;
  int64_t pieces = 1;
  for (int d = 0; d < ng; d++)  /* stays <= n * n: no overflow */
    pieces = pieces >= 1 && pieces <= n && grid[d] >= 1 && grid[d] <= n ? pieces * grid[d] : -1;
  if (ng != in[0].ndim || pieces != n)
    return tsr_fail(err, TSR_ESHAPE, "assemble: grid %s does not fit %d pieces of %d dimensions",
                    tsr_k_dims_str(grid, ng).s, n, in[0].ndim);
  return 0;
}

static int assemble_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t grid[TSR_MAX_NDIM], shape[TSR_MAX_NDIM] = {0}, c[TSR_MAX_NDIM];
  int rc = assemble_grid(p, in, n, grid, err);
  if (rc != 0) return rc;
  int nd = in[0].ndim;
  for (int i = 0; i < n; i++) {
    if (in[i].dtype != in[0].dtype || in[i].ndim != nd)
      return tsr_fail(err, TSR_ESHAPE, "assemble: piece %d is %s but piece 0 is %s", i, tsr_k_str(&in[i]).s,
                      tsr_k_str(&in[0]).s);
    piece_coords(grid, nd, i, c);
    for (int d = 0; d < nd; d++)
      if (in[i].shape[d] != slot_extent(in, grid, nd, d, c[d]))
        return tsr_fail(err, TSR_ESHAPE, "assemble: piece %d is %s but its grid slot along axis %d is %lld wide", i,
                        tsr_k_str(&in[i]).s, d, (long long)slot_extent(in, grid, nd, d, c[d]));
  }
  for (int d = 0; d < nd; d++)
    for (int64_t g = 0; g < grid[d]; g++) shape[d] += slot_extent(in, grid, nd, d, g);
  tsr_k_meta_set(out, in[0].dtype, nd, shape);
  return 0;
}

static int assemble_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  int64_t grid[TSR_MAX_NDIM], c[TSR_MAX_NDIM], at[TSR_MAX_NDIM], zero[TSR_MAX_NDIM] = {0};
  tsr_meta first = in[0].meta;
  int nd = first.ndim, rc = assemble_grid(p, &first, n, grid, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n; i++) {
    piece_coords(grid, nd, i, c);
    for (int d = 0; d < nd; d++) {
      at[d] = 0;
      for (int64_t g = 0; g < c[d]; g++) {
        int64_t s[TSR_MAX_NDIM] = {0};
        s[d] = g;
        at[d] += in[piece_at(grid, nd, s)].meta.shape[d];
      }
    }
    tsr_k_copy_block(tsr_dtype_size(first.dtype), nd, in[i].meta.shape, in[i].data, in[i].meta.shape, zero,
                     out->data, out->meta.shape, at);
  }
  return 0;
}

/* ---------- view ---------- */

static int view_params(const tsr_params *p, const tsr_meta *m, int64_t *offset_p, tsr_meta *out, tsr_errbuf *err)
{
  int64_t shape[TSR_MAX_NDIM];
  int nd = 0;
  int rc = tsr_params_get_int(p, "offset", offset_p, err);
  if (rc != 0) return tsr_k_param_fail("view", rc, err);
  if ((rc = tsr_k_shape_param("view", p, "shape", shape, &nd, err)) != 0) return rc == TSR_ENOTFOUND ? TSR_EINVAL : rc;
  tsr_k_meta_set(out, m->dtype, nd, shape);
  int64_t count = tsr_meta_count(out), have = tsr_meta_count(m);
  if (*offset_p < 0 || count < 0 || *offset_p > have - count)
    return tsr_fail(err, TSR_ESHAPE, "view: elements [%lld, +%s) are not inside %s (%lld elements)",
                    (long long)*offset_p, tsr_k_dims_str(shape, nd).s, tsr_k_str(m).s, (long long)have);
  return 0;
}

static int view_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  int64_t offset;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "view: takes 1 input, got %d", n);
  return view_params(p, &in[0], &offset, out, err);
}

static int view_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  int64_t offset;
  tsr_meta m;
  int rc = view_params(p, &in[0].meta, &offset, &m, err);
  if (rc == 0)
    memcpy(out->data, (const char *)in[0].data + (size_t)offset * tsr_dtype_size(m.dtype), out->nbytes);
  return rc;
}

const tsr_op_def tsr_op_transpose = {"transpose", 1, 1, transpose_infer, transpose_cpu, false, NULL};
const tsr_op_def tsr_op_slice = {"slice", 1, 1, slice_infer, slice_cpu, false, NULL};
const tsr_op_def tsr_op_assemble = {"assemble", 1, -1, assemble_infer, assemble_cpu, false, NULL};
const tsr_op_def tsr_op_view = {"view", 1, 1, view_infer, view_cpu, false, NULL};
