/* graphs/tenx_h5.c — tsr_from_10x_h5 (tessera/tenx.h): a Cell Ranger
 * HDF5 file. Here, on the client: the layout is found (v3 /matrix, or
 * one v2 /<genome> group), shape, indptr, barcodes and features are read
 * and checked against each other, and one `tenx_h5_read` task per row
 * chunk is recorded with its exact value range from indptr (the workers
 * read the values: kernels/cpu/tenx_h5.c).
 *
 * HDF5 prints its error stack by default; the library never prints, so
 * printing is off for this thread while a reader runs (restored after). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tenx_int.h"

#define TSR_API __attribute__((visibility("default")))
#define WHO "10x_h5"

typedef struct h5_src {
  const char *path;     /* as given, for messages */
  hid_t file;
  char group[256];      /* "/matrix" or "/<genome>" */
  bool v3;
  int64_t n_cells, n_genes, entries;
  int64_t *indptr;      /* n_cells + 1 */
  char *abs;            /* the path the workers open */
} h5_src;

static const char *const matrix_sets[] = {"data", "indices", "indptr", "shape", "barcodes"};
static const char *const v3_sets[] = {"features/id", "features/name", "features/feature_type"};
static const char *const v2_sets[] = {"genes", "gene_names"};

/* ---------- layout ---------- */

static bool has_link(hid_t file, const char *group, const char *name)
{
  char p[512];
  snprintf(p, sizeof p, "%s/%s", group, name);
  return H5Lexists(file, p, H5P_DEFAULT) > 0;
}

static bool is_group(hid_t file, const char *name)
{
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return false;
  hid_t g = H5Gopen2(file, name, H5P_DEFAULT);
  if (g >= 0) H5Gclose(g);
  return g >= 0;
}

/* The root's groups that hold an indptr (v2 genome groups), names
 * joined into list (for messages); the first into s->group. */
static int genome_groups(h5_src *s, char *list, size_t cap)
{
  H5G_info_t gi;
  int found = 0;
  list[0] = '\0';
  if (H5Gget_info(s->file, &gi) < 0) return 0;
  for (hsize_t i = 0; i < gi.nlinks; i++) {
    char name[200], slash[202];
    if (H5Lget_name_by_idx(s->file, "/", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0) continue;
    snprintf(slash, sizeof slash, "/%s", name);
    size_t used = strlen(list);
    snprintf(list + used, cap - used, "%s%s", used ? ", " : "", slash);
    if (!is_group(s->file, slash) || !has_link(s->file, slash, "indptr")) continue;
    if (found++ == 0) snprintf(s->group, sizeof s->group, "%s", slash);
  }
  return found;
}

static int check_sets(const h5_src *s, const char *const *names, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (!has_link(s->file, s->group, names[i]))
      return client_fail(TSR_EINVAL, WHO ": %s: the 10x dataset %s/%s is missing (a %s layout needs %s/{data,indices,indptr,shape,barcodes,%s})",
                         s->path, s->group, names[i], s->v3 ? "v3" : "v2", s->group,
                         s->v3 ? "features/{id,name,feature_type}" : "genes,gene_names");
  return 0;
}

static int find_layout(h5_src *s)
{
  char list[400];
  s->v3 = is_group(s->file, "/matrix");
  if (s->v3) snprintf(s->group, sizeof s->group, "/matrix");
  int n = s->v3 ? 1 : genome_groups(s, list, sizeof list);
  if (n == 0)
    return client_fail(TSR_EINVAL,
                       WHO ": %s is not a 10x HDF5 matrix: no /matrix group (v3) and no /<genome> group with indptr (v2); "
                       "its root holds: %s", s->path, list[0] ? list : "nothing");
  if (n > 1)
    return client_fail(TSR_EINVAL, WHO ": %s holds %d genome groups (%s); reading one of several is not supported", s->path,
                       n, list);
  int rc = check_sets(s, matrix_sets, sizeof matrix_sets / sizeof *matrix_sets);
  if (rc == 0 && s->v3) rc = check_sets(s, v3_sets, sizeof v3_sets / sizeof *v3_sets);
  if (rc == 0 && !s->v3) rc = check_sets(s, v2_sets, sizeof v2_sets / sizeof *v2_sets);
  return rc;
}

/* ---------- datasets ---------- */

/* Opens group/name, which must be 1-D: its length into *len_p. */
static int open_1d(const h5_src *s, const char *name, hid_t *ds_p, int64_t *len_p)
{
  char p[512];
  snprintf(p, sizeof p, "%s/%s", s->group, name);
  hid_t ds = H5Dopen2(s->file, p, H5P_DEFAULT);
  if (ds < 0) return client_fail(TSR_EINVAL, WHO ": %s: %s is not a dataset", s->path, p);
  hid_t space = H5Dget_space(ds);
  hsize_t dims[2];
  int nd = space >= 0 ? H5Sget_simple_extent_dims(space, dims, NULL) : -1;
  if (space >= 0) H5Sclose(space);
  if (nd != 1) {
    H5Dclose(ds);
    return client_fail(TSR_EINVAL, WHO ": %s: %s is not a 1-D dataset", s->path, p);
  }
  *ds_p = ds, *len_p = (int64_t)dims[0];
  return 0;
}

/* All of group/name as int64 (length want) into a new array. */
static int read_ints(const h5_src *s, const char *name, int64_t want, int64_t **out_p)
{
  hid_t ds;
  int64_t len;
  int rc = open_1d(s, name, &ds, &len);
  if (rc != 0) return rc;
  int64_t *v = len == want ? malloc((size_t)(want > 0 ? want : 1) * sizeof *v) : NULL;
  if (len != want) rc = client_fail(TSR_EINVAL, WHO ": %s: %s/%s has %lld values, not %lld", s->path, s->group, name, (long long)len, (long long)want);
  else if (v == NULL) rc = client_fail(TSR_ENOMEM, WHO ": %s: out of memory for %s/%s", s->path, s->group, name);
  hid_t type = H5Dget_type(ds);
  if (rc == 0 && (H5Tget_class(type) != H5T_INTEGER || H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0))
    rc = client_fail(TSR_EINVAL, WHO ": %s: %s/%s cannot be read as integers", s->path, s->group, name);
  if (type >= 0) H5Tclose(type);
  H5Dclose(ds);
  if (rc != 0) free(v);
  else *out_p = v;
  return rc;
}

/* A string dataset, fixed-length or variable-length, into l. */
static int read_strs_ds(hid_t ds, hid_t ftype, int64_t n, tenx_strs *l)
{
  hid_t mtype = H5Tcopy(H5T_C_S1);
  int rc = 0;
  if (H5Tis_variable_str(ftype) > 0) {
    char **v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    H5Tset_size(mtype, H5T_VARIABLE);
    if (v == NULL || H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) rc = TSR_EIO;
    for (int64_t i = 0; rc == 0 && i < n; i++) rc = tenx_strs_add(l, v[i] ? v[i] : "", v[i] ? strlen(v[i]) : 0);
    for (int64_t i = 0; v != NULL && i < n; i++) H5free_memory(v[i]);
    free(v);
  } else {
    size_t w = H5Tget_size(ftype);
    char *v = malloc((size_t)(n > 0 ? n : 1) * w);
    H5Tset_size(mtype, w);
    H5Tset_strpad(mtype, H5T_STR_NULLPAD);
    if (v == NULL || H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) rc = TSR_EIO;
    for (int64_t i = 0; rc == 0 && i < n; i++) rc = tenx_strs_add(l, v + (size_t)i * w, strnlen(v + (size_t)i * w, w));
    free(v);
  }
  H5Tclose(mtype);
  return rc;
}

/* group/name: n strings (what they are, for messages) into *out_p. */
static int read_strs(const h5_src *s, const char *name, const char *what, int64_t n, const char *n_says, char ***out_p)
{
  hid_t ds;
  int64_t len;
  int rc = open_1d(s, name, &ds, &len);
  if (rc != 0) return rc;
  hid_t ftype = H5Dget_type(ds);
  tenx_strs l = {0};
  if (len != n)
    rc = client_fail(TSR_EINVAL, WHO ": %s: %s/%s has %lld %s but %s/shape says %lld %s", s->path, s->group, name,
                     (long long)len, what, s->group, (long long)n, n_says);
  else if (H5Tget_class(ftype) != H5T_STRING)
    rc = client_fail(TSR_EINVAL, WHO ": %s: %s/%s is not a string dataset", s->path, s->group, name);
  else if ((rc = read_strs_ds(ds, ftype, n, &l)) == TSR_EIO)
    rc = client_fail(rc, WHO ": %s: reading %s/%s failed", s->path, s->group, name);
  H5Tclose(ftype);
  H5Dclose(ds);
  char **out = rc == 0 ? tenx_strs_finish(&l) : NULL;
  tenx_strs_clear(&l);
  if (rc == 0 && out == NULL) rc = TSR_ENOMEM;
  if (rc == 0) *out_p = out;
  return rc;
}

/* ---------- shape and indptr ---------- */

static int read_shape(h5_src *s)
{
  int64_t *shape = NULL, len;
  hid_t ds;
  int rc = open_1d(s, "shape", &ds, &len);
  if (rc == 0) H5Dclose(ds);
  if (rc == 0 && len != 2) return client_fail(TSR_EINVAL, WHO ": %s: %s/shape has %lld values, not 2 (genes, cells)", s->path, s->group, (long long)len);
  if (rc == 0) rc = read_ints(s, "shape", 2, &shape);
  if (rc != 0) return rc;
  s->n_genes = shape[0], s->n_cells = shape[1];
  free(shape);
  if (s->n_genes <= 0 || s->n_cells <= 0 || s->n_genes > INT32_MAX || s->n_cells > INT32_MAX)
    return client_fail(s->n_genes <= 0 || s->n_cells <= 0 ? TSR_EINVAL : TSR_ELIMIT,
                       WHO ": %s: %s/shape is %lld genes x %lld cells: each must be in 1..2^31-1", s->path, s->group,
                       (long long)s->n_genes, (long long)s->n_cells);
  return 0;
}

/* indptr (n_cells + 1, from 0, nondecreasing) against data and indices. */
static int read_indptr(h5_src *s)
{
  hid_t ds;
  int64_t nd = -1, ni = -1;
  int rc = read_ints(s, "indptr", s->n_cells + 1, &s->indptr);
  if (rc == 0 && (rc = open_1d(s, "data", &ds, &nd)) == 0) H5Dclose(ds);
  if (rc == 0 && (rc = open_1d(s, "indices", &ds, &ni)) == 0) H5Dclose(ds);
  if (rc != 0) return rc;
  const int64_t *ip = s->indptr;
  if (nd != ni)
    return client_fail(TSR_EINVAL, WHO ": %s: %s/data has %lld values but %s/indices %lld", s->path, s->group, (long long)nd, s->group, (long long)ni);
  for (int64_t c = 0; c < s->n_cells; c++)
    if (ip[c + 1] < ip[c])
      return client_fail(TSR_EINVAL, WHO ": %s: %s/indptr decreases at cell %lld", s->path, s->group, (long long)c);
  if (ip[0] != 0 || ip[s->n_cells] != nd)
    return client_fail(TSR_EINVAL, WHO ": %s: %s/indptr runs from %lld to %lld, not from 0 to the %lld values of %s/data",
                       s->path, s->group, (long long)ip[0], (long long)ip[s->n_cells], (long long)nd, s->group);
  s->entries = nd;
  return 0;
}

/* ---------- info ---------- */

/* Every gene's genome: features/genome (v3, when present) or the group's name (v2). */
static int read_genomes(const h5_src *s, char ***out_p)
{
  if (s->v3 && !has_link(s->file, s->group, "features/genome")) return 0;
  if (s->v3) return read_strs(s, "features/genome", "genomes", s->n_genes, "genes", out_p);
  tenx_strs l = {0};
  int rc = 0;
  for (int64_t g = 0; rc == 0 && g < s->n_genes; g++) rc = tenx_strs_add(&l, s->group + 1, strlen(s->group + 1));
  char **out = rc == 0 ? tenx_strs_finish(&l) : NULL;
  tenx_strs_clear(&l);
  if (rc == 0 && out == NULL) rc = TSR_ENOMEM;
  if (rc == 0) *out_p = out;
  return rc;
}

static int read_info(const h5_src *s, tsr_tenx_info *info)
{
  int rc = read_strs(s, "barcodes", "barcodes", s->n_cells, "cells", &info->barcodes);
  if (rc == 0) rc = read_strs(s, s->v3 ? "features/id" : "genes", "gene ids", s->n_genes, "genes", &info->gene_ids);
  if (rc == 0) rc = read_strs(s, s->v3 ? "features/name" : "gene_names", "gene names", s->n_genes, "genes", &info->gene_names);
  if (rc == 0 && s->v3) rc = read_strs(s, "features/feature_type", "feature types", s->n_genes, "genes", &info->feature_types);
  if (rc == 0) rc = read_genomes(s, &info->genomes);
  info->n_cells = s->n_cells, info->n_genes = s->n_genes, info->nnz = s->entries;
  return rc;
}

/* ---------- the array ---------- */

static int chunk_args(const void *arg, int64_t chunk, int64_t row0, int64_t rows, tsr_args *a)
{
  (void)chunk;
  const h5_src *s = arg;
  int rc = tsr_args_str(a, "path", s->abs);
  if (rc == 0) rc = tsr_args_str(a, "group", s->group);
  if (rc == 0) rc = tsr_args_int(a, "n_cells", s->n_cells);
  if (rc == 0) rc = tsr_args_int(a, "n_genes", s->n_genes);
  if (rc == 0) rc = tsr_args_int(a, "entries", s->entries);
  if (rc == 0) rc = tsr_args_int(a, "row0", row0);
  if (rc == 0) rc = tsr_args_int(a, "rows", rows);
  if (rc == 0) rc = tsr_args_int(a, "p0", s->indptr[row0]);
  if (rc == 0) rc = tsr_args_int(a, "nnz", s->indptr[row0 + rows] - s->indptr[row0]);
  return rc;
}

/* Everything read from the open file: layout, shape, indptr, names. */
static int read_file(h5_src *s, tsr_tenx_info *info)
{
  int rc = find_layout(s);
  if (rc == 0) rc = read_shape(s);
  if (rc == 0) rc = read_indptr(s);
  if (rc == 0) rc = read_info(s, info);
  return rc;
}

static int open_file(h5_src *s)
{
  int rc = tenx_abs_path(WHO, s->path, &s->abs);
  if (rc != 0) return rc;
  if (H5Fis_hdf5(s->abs) <= 0) return client_fail(TSR_EINVAL, WHO ": %s is not an HDF5 file", s->path);
  s->file = H5Fopen(s->abs, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (s->file < 0) return client_fail(TSR_EIO, WHO ": %s: HDF5 cannot open it", s->path);
  return 0;
}

TSR_API int tsr_from_10x_h5(tsr_array_ctx *ctx, const char *path, int64_t row_chunk, tsr_array **x_p, tsr_tenx_info *info)
{
  if (ctx == NULL || path == NULL || x_p == NULL) return client_fail(TSR_EINVAL, WHO ": NULL argument");
  H5E_auto2_t old_fn;
  void *old_data;
  H5Eget_auto2(H5E_DEFAULT, &old_fn, &old_data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  h5_src s = {.path = path, .file = -1};
  tsr_tenx_info got = {0};
  int rc = open_file(&s);
  if (rc == 0) rc = read_file(&s, &got);
  if (s.file >= 0) H5Fclose(s.file);
  H5Eset_auto2(H5E_DEFAULT, old_fn, old_data);
  int64_t rpc = tenx_row_chunk(row_chunk, s.n_cells, s.entries);
  if (rc == 0) rc = tenx_record(ctx, "tenx_h5_read", s.n_cells, s.n_genes, rpc, chunk_args, &s, x_p);
  free(s.indptr), free(s.abs);
  if (rc == 0 && info != NULL) *info = got;
  else tsr_tenx_info_free(&got);
  return rc;
}
