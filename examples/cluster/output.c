/* tsr-cluster's files (cluster.h): the clusters and the embedding as TSV,
 * the picture, and the connectivities as Matrix Market. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "plot/plot.h"

static FILE *create(const char *prefix, const char *suffix, char *path, size_t cap)
{
  snprintf(path, cap, "%s%s", prefix, suffix);
  FILE *f = fopen(path, "w");
  if (f == NULL) fprintf(stderr, "tsr-cluster: cannot create %s\n", path);
  return f;
}

static int finish(FILE *f, const char *path)
{
  if (fclose(f) != 0) return fprintf(stderr, "tsr-cluster: cannot write %s\n", path), TSR_EIO;
  printf("  wrote %s\n", path);
  return 0;
}

static void cell_id(const cl_result *r, int64_t i, FILE *f)
{
  if (r->barcodes != NULL && r->barcodes[i] != NULL) fputs(r->barcodes[i], f);
  else fprintf(f, "%lld", (long long)i);
}

int cl_write_clusters(const cl_opts *o, const cl_result *r)
{
  char path[4096];
  FILE *f = create(o->out, ".clusters.tsv", path, sizeof path);
  if (f == NULL) return TSR_EIO;
  fprintf(f, "barcode\tcluster\n");
  for (int64_t i = 0; i < r->n_cells; i++) {
    cell_id(r, i, f);
    fprintf(f, "\t%d\n", r->labels[i]);
  }
  return finish(f, path);
}

int cl_write_umap(const cl_opts *o, const cl_result *r)
{
  char path[4096], title[256];
  FILE *f = create(o->out, ".umap.tsv", path, sizeof path);
  if (f == NULL) return TSR_EIO;
  fprintf(f, "barcode\tUMAP1\tUMAP2\tcluster\n");
  for (int64_t i = 0; i < r->n_cells; i++) {
    cell_id(r, i, f);
    fprintf(f, "\t%.6g\t%.6g\t%d\n", r->umap[2 * i], r->umap[2 * i + 1], r->labels[i]);
  }
  int rc = finish(f, path);
  if (rc != 0) return rc;
  const char *method = o->method == CL_LEIDEN ? "Leiden" : o->method == CL_LOUVAIN ? "Louvain" : "k-means";
  const char *name = strrchr(o->out, '/') != NULL ? strrchr(o->out, '/') + 1 : o->out;
  snprintf(title, sizeof title, "%s: %lld cells, %d %s clusters", name, (long long)r->n_cells, r->n_clusters, method);
  snprintf(path, sizeof path, "%s.umap.png", o->out);
  tsr_errbuf err = {0};
  rc = tsr_plot_embedding_png(path, r->umap, r->labels, r->n_cells, title, &err);
  if (rc != 0) return fprintf(stderr, "tsr-cluster: %s\n", err.text), rc;
  printf("  wrote %s\n", path);
  return 0;
}

/* ---------- Matrix Market ---------- */

/* Appends "ROW COL VALUE\n": the integers by hand and a value in [0, 1]
 * (every connectivity is) as 0.ddddddddd, nine decimals being more than
 * an f32 holds; fprintf's %g made writing a 1.3M-cell graph take 10 s. */
static char *put_entry(char *p, int64_t row, int64_t col, float v)
{
  char tmp[24];
  int64_t nums[2] = {row, col};
  for (int k = 0; k < 2; k++) {
    int n = 0;
    do tmp[n++] = (char)('0' + nums[k] % 10), nums[k] /= 10;
    while (nums[k] > 0);
    while (n > 0) *p++ = tmp[--n];
    *p++ = ' ';
  }
  if (!(v >= 0 && v <= 1)) return p + sprintf(p, "%.9g\n", (double)v);
  int64_t u = llround((double)v * 1e9);
  if (u >= 1000000000) return memcpy(p, "1\n", 2), p + 2;
  *p++ = '0', *p++ = '.';
  for (int d = 8; d >= 0; d--) p[d] = (char)('0' + u % 10), u /= 10;
  p += 9;
  *p++ = '\n';
  return p;
}

/* Counts the stored values of every chunk, gathered one at a time. */
static int write_chunk(tsr_client *client, const tsr_array *g, int64_t c, int64_t row0, FILE *f, int64_t *nnz)
{
  int64_t idx[2] = {c, 0};
  tsr_chunk *chunk = NULL;
  tsr_csr_parts p;
  int rc = tsr_gather(client, tsr_array_chunk_key(g, idx), -1, &chunk);
  if (rc == 0) rc = tsr_csr_chunk_parts(chunk->data, chunk->nbytes, &p);
  if (rc == 0 && p.dtype != TSR_F32) rc = TSR_EPROTO;
  static char buf[1 << 16];
  char *at = buf;
  for (int64_t r = 0; rc == 0 && f != NULL && r < p.rows; r++)
    for (int64_t i = p.indptr[r]; i < p.indptr[r + 1]; i++) {
      if (at > buf + sizeof buf - 128) fwrite(buf, 1, (size_t)(at - buf), f), at = buf;
      at = put_entry(at, row0 + r + 1, p.indices[i] + 1, ((const float *)p.values)[i]);
    }
  if (at > buf) fwrite(buf, 1, (size_t)(at - buf), f);
  if (rc == 0) *nnz += p.nnz;
  tsr_chunk_destroy(&chunk);
  return rc;
}

/* Two passes over the chunks (the header needs the count first), so
 * only one chunk is on the client at a time. */
int cl_write_mtx(tsr_client *client, const tsr_array *g, const char *path)
{
  int64_t n = tsr_array_dim(g, 0), nnz = 0, chunk = tsr_array_chunk(g, 0), chunks = tsr_array_nchunks(g, 0);
  int rc = 0;
  for (int64_t c = 0; rc == 0 && c < chunks; c++) rc = write_chunk(client, g, c, c * chunk, NULL, &nnz);
  FILE *f = rc == 0 ? fopen(path, "w") : NULL;
  if (rc == 0 && f == NULL) return fprintf(stderr, "tsr-cluster: cannot create %s\n", path), TSR_EIO;
  if (rc != 0) return cl_fail("gathering the neighbors graph", rc);
  fprintf(f, "%%%%MatrixMarket matrix coordinate real general\n%% scanpy's obsp['connectivities'] (tsr-cluster)\n");
  fprintf(f, "%lld %lld %lld\n", (long long)n, (long long)n, (long long)nnz);
  int64_t written = 0;
  for (int64_t c = 0; rc == 0 && c < chunks; c++) rc = write_chunk(client, g, c, c * chunk, f, &written);
  if (fclose(f) != 0 && rc == 0) rc = TSR_EIO;
  if (rc != 0) return cl_fail("writing the neighbors graph", rc);
  return 0;
}

/* ---------- labels in ---------- */

static int read_text_labels(FILE *f, int64_t n, int32_t *labels)
{
  int64_t i = 0;
  long v;
  while (i < n && fscanf(f, "%ld", &v) == 1) labels[i++] = (int32_t)v;
  return i == n && fscanf(f, "%ld", &v) != 1 ? 0 : -1;
}

/* n values of a .npy file (C order, little-endian i4, i8, f4 or f8),
 * as doubles. */
static int read_npy_values(FILE *f, int64_t n, double *out)
{
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) return -1;
  size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
  char header[65536];
  if (pre[6] != 1 || hlen >= sizeof header || fread(header, 1, hlen, f) != hlen) return -1;
  header[hlen] = '\0';
  static const char *const descr[4] = {"<i4", "<i8", "<f4", "<f8"};
  int kind = -1;
  for (int k = 0; k < 4; k++)
    if (strstr(header, descr[k]) != NULL) kind = k;
  if (kind < 0 || strstr(header, "True") != NULL) return -1;
  for (int64_t i = 0; i < n; i++) {
    union { int32_t i4; int64_t i8; float f4; double f8; } v;
    if (fread(&v, kind == 0 || kind == 2 ? 4 : 8, 1, f) != 1) return -1;
    out[i] = kind == 0 ? v.i4 : kind == 1 ? (double)v.i8 : kind == 2 ? v.f4 : v.f8;
  }
  return fgetc(f) == EOF ? 0 : -1;
}

int cl_read_npy(const char *path, int64_t n, double **values_p)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return fprintf(stderr, "tsr-cluster: cannot open %s\n", path), TSR_EIO;
  double *v = malloc((size_t)n * sizeof *v);
  int rc = v == NULL ? -1 : read_npy_values(f, n, v);
  fclose(f);
  if (rc != 0) {
    free(v);
    fprintf(stderr, "tsr-cluster: %s: want a .npy of %lld numbers (i4, i8, f4 or f8, C order)\n", path, (long long)n);
    return TSR_EINVAL;
  }
  *values_p = v;
  return 0;
}

int cl_read_labels(const char *path, int64_t n, int32_t **labels_p)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return fprintf(stderr, "tsr-cluster: cannot open %s\n", path), TSR_EIO;
  int32_t *labels = malloc((size_t)n * sizeof *labels);
  size_t len = strlen(path);
  bool npy = len > 4 && strcmp(path + len - 4, ".npy") == 0;
  double *values = NULL;
  int rc = labels == NULL ? -1 : npy ? 0 : read_text_labels(f, n, labels);
  fclose(f);
  if (rc == 0 && npy && (rc = cl_read_npy(path, n, &values)) == 0)
    for (int64_t i = 0; i < n; i++) labels[i] = (int32_t)values[i];
  free(values);
  if (rc != 0) {
    free(labels);
    fprintf(stderr, "tsr-cluster: %s: want %lld integer labels (one per line, or an i4/i8 .npy)\n", path,
            (long long)n);
    return TSR_EINVAL;
  }
  *labels_p = labels;
  return 0;
}

void cl_result_free(cl_result *r)
{
  for (int64_t i = 0; r->barcodes != NULL && i < r->n_barcodes; i++) free(r->barcodes[i]);
  free(r->barcodes), free(r->labels), free(r->truth), free(r->umap);
  *r = (cl_result){0};
}
