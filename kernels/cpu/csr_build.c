/* kernels/cpu/csr_build.c — canonical CSR rows (csr_build.h). Rows that
 * are already sorted (Cell Ranger writes them so) take the fast path:
 * one pass that only drops zeros. */
#include <stdlib.h>

#include "csr_build.h"
#include "ops.h"

typedef struct entry {
  int32_t col;
  float value;
} entry;

/* By column, then by value bits: a total order, so qsort's result (and
 * the sum of repeats) is the same whatever order the file had. */
static int entry_cmp(const void *a, const void *b)
{
  const entry *x = a, *y = b;
  if (x->col != y->col) return x->col < y->col ? -1 : 1;
  uint32_t bx, by;
  memcpy(&bx, &x->value, 4), memcpy(&by, &y->value, 4);
  return bx < by ? -1 : bx > by;
}

static bool row_sorted(const int32_t *idx, int64_t n)
{
  for (int64_t i = 1; i < n; i++)
    if (idx[i] <= idx[i - 1]) return false;
  return true;
}

/* Row [b, e) sorted into scratch, repeats summed, written at w; returns
 * the new write position. */
static int64_t pack_unsorted(tsr_k_csr *v, float *val, int64_t b, int64_t e, int64_t w, entry *scratch)
{
  int64_t n = e - b;
  for (int64_t i = 0; i < n; i++) scratch[i] = (entry){v->indices[b + i], val[b + i]};
  qsort(scratch, (size_t)n, sizeof *scratch, entry_cmp);
  for (int64_t i = 0; i < n;) {
    int32_t col = scratch[i].col;
    double sum = 0;
    for (; i < n && scratch[i].col == col; i++) sum += scratch[i].value;
    if ((float)sum != 0.0f) v->indices[w] = col, val[w++] = (float)sum;
  }
  return w;
}

static int64_t max_row(const tsr_k_csr *v)
{
  int64_t m = 0;
  for (int64_t r = 0; r < v->rows; r++)
    if (v->indptr[r + 1] - v->indptr[r] > m) m = v->indptr[r + 1] - v->indptr[r];
  return m;
}

int tsr_k_csr_canonical_f32(tsr_k_csr *v, int64_t *nnz_p, tsr_errbuf *err)
{
  float *val = v->values;
  entry *scratch = NULL;
  int64_t w = 0, widest = max_row(v);  /* before indptr is rewritten below */
  for (int64_t r = 0; r < v->rows; r++) {
    int64_t b = v->indptr[r], e = v->indptr[r + 1];
    v->indptr[r] = w;
    if (row_sorted(v->indices + b, e - b)) {
      for (int64_t i = b; i < e; i++)
        if (val[i] != 0.0f) v->indices[w] = v->indices[i], val[w++] = val[i];
      continue;
    }
    if (scratch == NULL && (scratch = malloc((size_t)widest * sizeof *scratch)) == NULL)
      return tsr_fail(err, TSR_ENOMEM, "cannot allocate a row's sort scratch (%lld entries)", (long long)widest);
    w = pack_unsorted(v, val, b, e, w, scratch);
  }
  v->indptr[v->rows] = w;
  free(scratch);
  *nnz_p = w;
  return 0;
}
