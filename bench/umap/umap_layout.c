/* bench/umap/umap_layout.c — times the UMAP ops (kernels/cpu/umap.h) on a
 * graph written as raw CSR files by bench/umap/gen_graph.py, and draws the
 * result (plot/plot.h).
 *
 *   tsr-bench-umap DIR [synchronous|sequential] [N_EPOCHS] [PCS]
 *
 * DIR holds n.txt, indptr.i64, indices.i32, data.f32 (and labels.i32 for
 * the picture). PCS: "pca" takes DIR/x.npy's first 2 columns (f32 .npy,
 * n x d) as the init instead of the spectral one. Prints the CPU time of
 * each op; writes DIR/umap_tessera.tsv and DIR/umap_tessera.png. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/csr.h"
#include "cpu/umap.h"
#include "plot.h"

static void *slurp(const char *dir, const char *name, size_t *bytes)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc((size_t)len + 1);
  if (p != NULL && fread(p, 1, (size_t)len, f) != (size_t)len) free(p), p = NULL;
  fclose(f);
  *bytes = (size_t)len;
  return p;
}

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The CSR files as chunks of `rows` rows. */
static int make_chunks(const int64_t *ip, const int32_t *ix, const float *w, int64_t n, int64_t rows, tsr_buf **out_p)
{
  int chunks = (int)((n + rows - 1) / rows);
  tsr_buf *b = calloc((size_t)chunks, sizeof *b);
  for (int c = 0; c < chunks; c++) {
    int64_t r0 = c * rows, nr = r0 + rows < n ? rows : n - r0, nnz = ip[r0 + nr] - ip[r0];
    int64_t bytes = tsr_k_csr_bytes(nr, nnz, TSR_F32);
    tsr_k_csr v;
    b[c].data = malloc((size_t)bytes), b[c].nbytes = (size_t)bytes;
    b[c].meta.dtype = TSR_U8, b[c].meta.ndim = 1, b[c].meta.shape[0] = bytes;
    tsr_k_csr_init(b[c].data, nr, n, nnz, TSR_F32, &v);
    for (int64_t r = 0; r <= nr; r++) v.indptr[r] = ip[r0 + r] - ip[r0];
    memcpy(v.indices, ix + ip[r0], (size_t)nnz * 4), memcpy(v.values, w + ip[r0], (size_t)nnz * 4);
  }
  *out_p = b;
  return chunks;
}

/* The first 2 columns of an f32 .npy of n rows as an f32 [n, 2] buf. */
static int pca_init(const char *dir, int64_t n, tsr_buf *init)
{
  size_t bytes;
  unsigned char *p = slurp(dir, "x.npy", &bytes);
  if (p == NULL || bytes < 10) return -1;
  size_t hl = (size_t)(p[8] | p[9] << 8), off = 10 + hl;
  int64_t d = (int64_t)((bytes - off) / 4 / (size_t)n);
  float *x = (float *)(p + off), *y = malloc(sizeof(float) * 2 * (size_t)n);
  for (int64_t i = 0; i < n; i++) y[2 * i] = x[i * d], y[2 * i + 1] = x[i * d + 1];
  free(p);
  init->data = y, init->nbytes = sizeof(float) * 2 * (size_t)n;
  init->meta = (tsr_meta){0};
  init->meta.dtype = TSR_F32, init->meta.ndim = 2, init->meta.shape[0] = n, init->meta.shape[1] = 2;
  return 0;
}

static int run(const char *op, tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out)
{
  tsr_errbuf err;
  double t0 = now();
  int rc = tsr_op_run_cpu(tsr_op_find(op), p, in, n_in, out, &err);
  fprintf(stderr, "%-14s %8.2f s CPU%s%s\n", op, now() - t0, rc ? "  FAILED: " : "", rc ? err.text : "");
  tsr_params_clear(p);
  return rc;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [synchronous|sequential] [N_EPOCHS] [pca]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1], *scheme = argc > 2 ? argv[2] : "synchronous";
  size_t b1, b2, b3, b4;
  char *nt = slurp(dir, "n.txt", &b1);
  int64_t n = nt ? atoll(nt) : 0, epochs = argc > 3 ? atoll(argv[3]) : (n <= 10000 ? 500 : 200);
  int64_t *ip = slurp(dir, "indptr.i64", &b1);
  int32_t *ix = slurp(dir, "indices.i32", &b2), *lab = slurp(dir, "labels.i32", &b4);
  float *w = slurp(dir, "data.f32", &b3);
  if (n < 3 || ip == NULL || ix == NULL || w == NULL || b1 != 8 * (size_t)(n + 1)) {
    fprintf(stderr, "cannot read the graph in %s\n", dir);
    return 1;
  }
  tsr_buf *g, init, plan, emb;
  int chunks = make_chunks(ip, ix, w, n, 65536, &g);
  tsr_params p = TSR_PARAMS_INIT;
  fprintf(stderr, "%lld points, %lld edges, %d chunks, %lld epochs, %s\n", (long long)n, (long long)ip[n], chunks,
          (long long)epochs, scheme);
  int rc = 0;
  if (argc > 4 && strcmp(argv[4], "pca") == 0) rc = pca_init(dir, n, &init);
  else {
    tsr_params_add_int(&p, "n", n);
    rc = run("umap_spectral", &p, g, chunks, &init);
  }
  tsr_buf *in = calloc((size_t)chunks + 1, sizeof *in);
  memcpy(in, g, sizeof *g * (size_t)chunks), in[chunks] = init;
  tsr_params_add_int(&p, "n", n), tsr_params_add_int(&p, "n_epochs", epochs), tsr_params_add_int(&p, "graph_chunks", chunks);
  tsr_params_add_bool(&p, "scale_init", true);
  if (rc == 0) rc = run("umap_prepare", &p, in, chunks + 1, &plan);
  tsr_params_add_int(&p, "n", n), tsr_params_add_int(&p, "n_epochs", epochs);
  tsr_params_add_str(&p, "scheme", scheme, strlen(scheme));
  if (rc == 0) rc = run("umap_layout", &p, &plan, 1, &emb);
  if (rc != 0) return 1;
  char path[1024];
  snprintf(path, sizeof path, "%s/umap_tessera.tsv", dir);
  FILE *f = fopen(path, "w");
  const float *y = emb.data;
  for (int64_t i = 0; f != NULL && i < n; i++) fprintf(f, "%.5f\t%.5f\n", y[2 * i], y[2 * i + 1]);
  if (f != NULL) fclose(f);
  snprintf(path, sizeof path, "%s/umap_tessera.png", dir);
  char title[128];
  snprintf(title, sizeof title, "Tessera UMAP, %s (%lld points)", scheme, (long long)n);
  tsr_errbuf err;
  double t0 = now();
  if (lab != NULL && b4 == 4 * (size_t)n && tsr_plot_embedding_png(path, y, lab, n, title, &err) != 0) fprintf(stderr, "%s\n", err.text);
  fprintf(stderr, "%-14s %8.2f s CPU\n", "plot", now() - t0);
  return 0;
}
