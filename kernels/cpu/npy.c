/* kernels/cpu/npy.c — load_npy and save_npy: chunks from and to NumPy .npy
 * files (C order, little-endian u1/i4/i8/f4/f8; the header itself is
 * common/util/npy.h's, shared with the client).
 *
 * load_npy reads a slice (offset, shape) of the file's array with pread,
 * one contiguous run at a time, so a chunk of a large file costs only its
 * own bytes. save_npy writes PATH.tmp.* and renames it over PATH, so a
 * reader never sees half a file and a recomputed save is harmless. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops.h"
#include "util/npy.h"

typedef struct npy_slice {
  const char *path;
  tsr_npy_info file;            /* the whole array in the file */
  int64_t offset[TSR_MAX_NDIM];
  tsr_meta meta;                /* the slice: the output chunk */
} npy_slice;

/* The graph may say what it expects of the file (the client read the
 * header when it built the graph): `global_shape` and `dtype`, optional.
 * A mismatch means the file changed since. */
static int check_expected(const tsr_params *p, const npy_slice *s, tsr_errbuf *err)
{
  const tsr_meta *fm = &s->file.meta;
  tsr_dtype dt;
  int rc = tsr_k_dtype_param("load_npy", p, fm->dtype, &dt, err);
  if (rc != 0) return rc;
  tsr_meta want = *fm;
  want.dtype = dt;
  if (tsr_params_find(p, "global_shape") != NULL &&
      (rc = tsr_k_shape_param("load_npy", p, "global_shape", want.shape, &want.ndim, err)) != 0)
    return rc;
  if (!tsr_meta_equal(&want, fm))
    return tsr_fail(err, TSR_ESHAPE, "load_npy: %s holds %s but the graph expects %s (did the file change?)", s->path,
                    tsr_k_str(fm).s, tsr_k_str(&want).s);
  return 0;
}

/* Header, size check and the slice params. Every message names the file. */
static int slice_parse(const tsr_params *p, npy_slice *s, tsr_errbuf *err)
{
  memset(s, 0, sizeof *s);
  int rc = tsr_params_get_str(p, "path", &s->path, err);
  if (rc != 0) return tsr_k_param_fail("load_npy", rc, err);
  if ((rc = tsr_npy_read_header(s->path, &s->file, err)) != 0) return tsr_k_param_fail("load_npy", rc, err);
  const tsr_meta *fm = &s->file.meta;
  struct stat st;
  uint64_t need = s->file.data_offset + (uint64_t)tsr_meta_nbytes(fm);
  if (stat(s->path, &st) != 0)
    return tsr_fail(err, TSR_EIO, "load_npy: cannot stat %s: %s", s->path, strerror(errno));
  if ((uint64_t)st.st_size < need)
    return tsr_fail(err, TSR_EIO, "load_npy: %s is truncated: %s needs %llu bytes, the file has %lld", s->path,
                    tsr_k_str(fm).s, (unsigned long long)need, (long long)st.st_size);
  if ((rc = check_expected(p, s, err)) != 0) return rc;
  int64_t shape[TSR_MAX_NDIM];
  int n_off = fm->ndim, n_shape = fm->ndim;
  if (tsr_params_find(p, "offset") && (rc = tsr_k_shape_param("load_npy", p, "offset", s->offset, &n_off, err)))
    return rc;
  for (int d = 0; d < fm->ndim; d++) shape[d] = fm->shape[d] - s->offset[d];
  if (tsr_params_find(p, "shape") && (rc = tsr_k_shape_param("load_npy", p, "shape", shape, &n_shape, err)))
    return rc;
  if (n_off != fm->ndim || n_shape != fm->ndim)
    return tsr_fail(err, TSR_ESHAPE, "load_npy: %s holds %s but 'offset'/'shape' have %d/%d dimensions", s->path,
                    tsr_k_str(fm).s, n_off, n_shape);
  for (int d = 0; d < fm->ndim; d++)
    if (shape[d] < 0 || s->offset[d] > fm->shape[d] - shape[d])
      return tsr_fail(err, TSR_ESHAPE, "load_npy: slice %s at offset %s exceeds %s's shape %s",
                      tsr_k_dims_str(shape, fm->ndim).s, tsr_k_dims_str(s->offset, fm->ndim).s, s->path,
                      tsr_k_dims_str(fm->shape, fm->ndim).s);
  tsr_k_meta_set(&s->meta, fm->dtype, fm->ndim, shape);
  return 0;
}

static int load_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  npy_slice s;
  int rc = slice_parse(p, &s, err);
  if (rc == 0) *out = s.meta;
  return rc;
}

/* Reads exactly len bytes at off. */
static int read_at(int fd, const npy_slice *s, char *dst, size_t len, uint64_t off, tsr_errbuf *err)
{
  while (len > 0) {
    ssize_t got = pread(fd, dst, len, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return tsr_fail(err, TSR_EIO, "load_npy: reading %s: %s", s->path, got < 0 ? strerror(errno) : "unexpected end");
    dst += got, len -= (size_t)got, off += (uint64_t)got;
  }
  return 0;
}

/* Copies the slice run by run: a run spans the innermost dims the slice
 * covers whole, plus the first one it does not. */
static int read_slice(int fd, const npy_slice *s, char *out, tsr_errbuf *err)
{
  const tsr_meta *fm = &s->file.meta, *m = &s->meta;
  int nd = m->ndim, j = nd - 1;
  size_t es = tsr_dtype_size(m->dtype);
  if (tsr_meta_count(m) == 0) return 0;
  while (j > 0 && m->shape[j] == fm->shape[j]) j--;
  size_t run = es, runs = 1;
  for (int d = nd - 1; d >= j && d >= 0; d--) run *= (size_t)m->shape[d];
  for (int d = 0; d < j; d++) runs *= (size_t)m->shape[d];
  int64_t idx[TSR_MAX_NDIM] = {0};
  for (size_t r = 0; r < runs; r++) {
    uint64_t L = 0;  /* the run's first element, as a row-major index in the file */
    for (int d = 0; d < nd; d++) L = L * (uint64_t)fm->shape[d] + (uint64_t)(s->offset[d] + (d < j ? idx[d] : 0));
    int rc = read_at(fd, s, out + r * run, run, s->file.data_offset + L * es, err);
    if (rc != 0) return rc;
    for (int d = j - 1; d >= 0; d--) {
      if (++idx[d] < m->shape[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

static int load_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  npy_slice s;
  int rc = slice_parse(p, &s, err);
  if (rc != 0) return rc;
  if (!tsr_meta_equal(&s.meta, &out->meta))
    return tsr_fail(err, TSR_ESHAPE, "load_npy: %s changed: the slice is now %s, the output %s", s.path,
                    tsr_k_str(&s.meta).s, tsr_k_str(&out->meta).s);
  int fd = open(s.path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return tsr_fail(err, TSR_EIO, "load_npy: cannot open %s: %s", s.path, strerror(errno));
  rc = read_slice(fd, &s, out->data, err);
  close(fd);
  return rc;
}

static int save_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in;
  const char *path;
  if (n != 1) return tsr_fail(err, TSR_EINVAL, "save_npy: takes 1 input, got %d", n);
  int rc = tsr_params_get_str(p, "path", &path, err);
  if (rc != 0) return tsr_k_param_fail("save_npy", rc, err);
  if (path[0] == '\0') return tsr_fail(err, TSR_EINVAL, "save_npy: 'path' is empty");
  tsr_k_meta_set(out, TSR_I64, 0, NULL);
  return 0;
}

static int io_fail(const char *what, const char *path, tsr_errbuf *err)
{
  int code = errno == ENOSPC ? TSR_ENOSPC : TSR_EIO;
  return tsr_fail(err, code, "save_npy: %s %s: %s", what, path, strerror(errno));
}

/* Header then data into tmp; returns the bytes written via *bytes_p. */
static int write_file(const char *tmp, const tsr_buf *in, int64_t *bytes_p, tsr_errbuf *err)
{
  FILE *f = fopen(tmp, "wbx");
  if (f == NULL) return io_fail("cannot create", tmp, err);
  tsr_errbuf why;
  int rc = tsr_npy_write_header(f, &in->meta, &why);
  if (rc != 0) tsr_fail(err, rc, "save_npy: %s: %s", tmp, why.text);
  if (rc == 0 && fwrite(in->data, 1, in->nbytes, f) != in->nbytes) rc = io_fail("writing", tmp, err);
  long end = rc == 0 ? ftell(f) : -1;
  if (fclose(f) != 0 && rc == 0) rc = io_fail("writing", tmp, err);
  if (rc == 0) *bytes_p = end;
  return rc;
}

static int save_cpu(const tsr_params *p, const tsr_buf *in, int n, tsr_buf *out, tsr_errbuf *err)
{
  (void)n;
  static atomic_ulong serial;
  const char *path;
  int rc = tsr_params_get_str(p, "path", &path, err);
  if (rc != 0) return tsr_k_param_fail("save_npy", rc, err);
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), atomic_fetch_add(&serial, 1)) >=
      (int)sizeof tmp)
    return tsr_fail(err, TSR_EINVAL, "save_npy: path is too long: %.200s...", path);
  int64_t bytes = 0;
  rc = write_file(tmp, &in[0], &bytes, err);
  if (rc == 0 && rename(tmp, path) != 0) rc = io_fail("cannot rename the temporary file to", path, err);
  if (rc != 0) {
    unlink(tmp);
    return rc;
  }
  *(int64_t *)out->data = bytes;
  return 0;
}

const tsr_op_def tsr_op_load_npy = {"load_npy", 0, 0, load_infer, load_cpu, false, NULL};
const tsr_op_def tsr_op_save_npy = {"save_npy", 1, 1, save_infer, save_cpu, false, NULL};
