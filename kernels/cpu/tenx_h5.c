/* kernels/cpu/tenx_h5.c — tenx_h5_read: one row chunk of a 10x Genomics
 * (Cell Ranger) HDF5 count matrix as a CSR chunk of f32 (csr.h).
 *
 * The file holds genes x cells in CSC under `group` (/matrix in the v3
 * layout, /<genome> in v2): data, indices (gene of each value), indptr
 * (n_cells + 1). CSC of genes x cells is CSR of cells x genes, so cells
 * [row0, row0 + rows) are indptr[row0 .. row0 + rows] and the values and
 * indices between its ends: three hyperslab reads, no transpose. The
 * client read indptr already (graphs/tenx_h5.c) and passes the chunk's
 * first value p0 and count nnz, so the output is sized exactly; the task
 * re-reads its slice and fails, naming the file, if it disagrees (the
 * file changed). Values of any numeric type are read as f32 (HDF5
 * converts); rows are then made canonical (tsr_k_csr_canonical_f32).
 *
 * Params: path, group str; n_cells, n_genes, entries (the file's nnz),
 * row0, rows, p0, nnz int. Output: u8 CSR chunk of rows x n_genes.
 *
 * HDF5 and threads: a thread-safe HDF5 build serializes every call behind
 * its own lock; a build without it must not be called from two threads at
 * once. The mutex below makes either safe at no cost (the library's lock
 * would serialize the calls anyway). Error printing is turned off for
 * this thread while the task runs: kernels never print. */
#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "csr_build.h"
#include "ops.h"

static pthread_mutex_t h5_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct h5_task {
  const char *path, *group;
  int64_t n_cells, n_genes, entries, row0, rows, p0, nnz;
} h5_task;

static int task_parse(const tsr_params *p, h5_task *t, tsr_errbuf *err)
{
  static const char *const names[] = {"n_cells", "n_genes", "entries", "row0", "rows", "p0", "nnz"};
  int64_t *dst[] = {&t->n_cells, &t->n_genes, &t->entries, &t->row0, &t->rows, &t->p0, &t->nnz};
  int rc = tsr_params_get_str(p, "path", &t->path, err);
  if (rc == 0) rc = tsr_params_get_str(p, "group", &t->group, err);
  for (size_t i = 0; rc == 0 && i < sizeof names / sizeof names[0]; i++)
    if ((rc = tsr_params_get_int(p, names[i], dst[i], err)) == 0 && *dst[i] < 0)
      return tsr_fail(err, TSR_EINVAL, "tenx_h5_read: '%s' must be >= 0, got %lld", names[i], (long long)*dst[i]);
  if (rc != 0) return tsr_k_param_fail("tenx_h5_read", rc, err);
  if (t->rows > t->n_cells - t->row0 || t->nnz > t->entries - t->p0 || t->n_genes > INT32_MAX)
    return tsr_fail(err, TSR_ESHAPE, "tenx_h5_read: %s: cells [%lld, +%lld) with values [%lld, +%lld) exceed %lld cells x %lld genes with %lld",
                    t->path, (long long)t->row0, (long long)t->rows, (long long)t->p0, (long long)t->nnz,
                    (long long)t->n_cells, (long long)t->n_genes, (long long)t->entries);
  return 0;
}

static int h5_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  h5_task t;
  int rc = task_parse(p, &t, err);
  int64_t bytes = rc == 0 ? tsr_k_csr_bytes(t.rows, t.nnz, TSR_F32) : 0;
  if (rc == 0 && bytes < 0) rc = tsr_fail(err, TSR_ELIMIT, "tenx_h5_read: %lld values are too many for a chunk", (long long)t.nnz);
  if (rc == 0) tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return rc;
}

/* ---------- reading ---------- */

/* Elements [start, start + count) of the 1-D dataset group/name, whose
 * length must be `length`, as mem_type into dst. */
static int read_slice(hid_t file, const h5_task *t, const char *name, int64_t length, int64_t start, int64_t count,
                      hid_t mem_type, void *dst, tsr_errbuf *err)
{
  char dpath[512];
  snprintf(dpath, sizeof dpath, "%s/%s", t->group, name);
  hid_t ds = H5Dopen2(file, dpath, H5P_DEFAULT);
  hid_t space = ds >= 0 ? H5Dget_space(ds) : -1;
  hsize_t dims[2] = {0, 0}, off[1] = {(hsize_t)start}, cnt[1] = {(hsize_t)count};
  int nd = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
  int rc = 0;
  if (ds < 0) rc = tsr_fail(err, TSR_EINVAL, "tenx_h5_read: %s has no dataset %s (did the file change?)", t->path, dpath);
  else if (nd != 1 || (int64_t)dims[0] != length)
    rc = tsr_fail(err, TSR_EINVAL, "tenx_h5_read: %s: %s is not 1-D of length %lld: the file changed", t->path, dpath,
                  (long long)length);
  hid_t mem = rc == 0 ? H5Screate_simple(1, cnt, NULL) : -1;
  if (rc == 0 && count > 0 &&
      (H5Sselect_hyperslab(space, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0 || H5Dread(ds, mem_type, mem, space, H5P_DEFAULT, dst) < 0))
    rc = tsr_fail(err, TSR_EIO, "tenx_h5_read: %s: reading %s [%lld, +%lld) failed", t->path, dpath, (long long)start,
                  (long long)count);
  if (mem >= 0) H5Sclose(mem);
  if (space >= 0) H5Sclose(space);
  if (ds >= 0) H5Dclose(ds);
  return rc;
}

/* The chunk's indptr slice (rows + 1 values) must run from p0 to p0 + nnz. */
static int check_indptr(const h5_task *t, const int64_t *ip, tsr_errbuf *err)
{
  if (ip[0] != t->p0 || ip[t->rows] - ip[0] != t->nnz)
    return tsr_fail(err, TSR_EINVAL, "tenx_h5_read: %s: indptr of cells [%lld, +%lld) runs %lld..%lld, not %lld..%lld: the file changed",
                    t->path, (long long)t->row0, (long long)t->rows, (long long)ip[0], (long long)ip[t->rows],
                    (long long)t->p0, (long long)(t->p0 + t->nnz));
  for (int64_t r = 0; r < t->rows; r++)
    if (ip[r + 1] < ip[r])
      return tsr_fail(err, TSR_EINVAL, "tenx_h5_read: %s: %s/indptr decreases at cell %lld", t->path, t->group,
                      (long long)(t->row0 + r));
  return 0;
}

/* indptr, then the values (as f32, straight into v) and the gene indices
 * (int64, into idx) of the chunk, under the HDF5 lock. */
static int read_parts(const h5_task *t, tsr_k_csr *v, int64_t *idx, tsr_errbuf *err)
{
  pthread_mutex_lock(&h5_lock);
  H5E_auto2_t old_fn;
  void *old_data;
  H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t file = H5Fopen(t->path, H5F_ACC_RDONLY, H5P_DEFAULT);
  int rc = file >= 0 ? 0 : tsr_fail(err, TSR_EIO, "tenx_h5_read: cannot open %s as an HDF5 file", t->path);
  if (rc == 0) rc = read_slice(file, t, "indptr", t->n_cells + 1, t->row0, t->rows + 1, H5T_NATIVE_INT64, v->indptr, err);
  if (rc == 0) rc = check_indptr(t, v->indptr, err);
  if (rc == 0) rc = read_slice(file, t, "data", t->entries, t->p0, t->nnz, H5T_NATIVE_FLOAT, v->values, err);
  if (rc == 0) rc = read_slice(file, t, "indices", t->entries, t->p0, t->nnz, H5T_NATIVE_INT64, idx, err);
  if (file >= 0) H5Fclose(file);
  H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
  pthread_mutex_unlock(&h5_lock);
  return rc;
}

/* Row starts relative to p0, gene indices checked and narrowed. */
static int fill_rows(const h5_task *t, tsr_k_csr *v, const int64_t *idx, tsr_errbuf *err)
{
  for (int64_t r = 0; r <= t->rows; r++) v->indptr[r] -= t->p0;
  for (int64_t k = 0; k < t->nnz; k++) {
    if (idx[k] < 0 || idx[k] >= t->n_genes)
      return tsr_fail(err, TSR_EINVAL, "tenx_h5_read: %s: %s/indices[%lld] = %lld is outside 0..%lld (the genes)", t->path,
                      t->group, (long long)(t->p0 + k), (long long)idx[k], (long long)t->n_genes - 1);
    v->indices[k] = (int32_t)idx[k];
  }
  return 0;
}

static int h5_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  h5_task t;
  int rc = task_parse(p, &t, err);
  if (rc != 0) return rc;
  tsr_k_csr v;
  tsr_k_csr_init(out->data, t.rows, t.n_genes, t.nnz, TSR_F32, &v);
  int64_t *idx = malloc((size_t)(t.nnz > 0 ? t.nnz : 1) * sizeof *idx), nnz = 0;
  if (idx == NULL) return tsr_fail(err, TSR_ENOMEM, "tenx_h5_read: %s: cannot allocate %lld indices", t.path, (long long)t.nnz);
  rc = read_parts(&t, &v, idx, err);
  if (rc == 0) rc = fill_rows(&t, &v, idx, err);
  free(idx);
  if (rc == 0) rc = tsr_k_csr_canonical_f32(&v, &nnz, err);
  if (rc == 0 && nnz != t.nnz) tsr_k_csr_shrink(out, &v, nnz);
  return rc;
}

const tsr_op_def tsr_op_tenx_h5_read = {"tenx_h5_read", 0, 0, h5_infer, h5_cpu, false, NULL};
