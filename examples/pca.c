/* tsr-pca: the principal components of a genotype matrix, as PLINK 2's
 * --pca computes them, on a Tessera cluster.
 *
 *   tessera local -- tsr-pca --bed data/HM3 --k 10 --out hm3
 *
 * Input: a PLINK 1 binary fileset (--bed PREFIX: .bed/.bim/.fam), a Zarr
 * array (--zarr DIR) or a .npy file (--npy FILE), samples x variants. The
 * workers read the chunks (PLINK genotypes stay 2-bit packed) and keep
 * them (--no-persist reads the files on every pass instead). Each column
 * is standardized (--standardize binom2|center|none), folded into the
 * SVD's products, never stored; --method compressed (randomized SVD with
 * --power-iters) or exact. Output, in PLINK 2's layout: PREFIX.eigenval
 * (eigenvalues of the genomic relationship matrix Z Zᵀ / m),
 * PREFIX.eigenvec (#FID IID PC1..), and with --loadings
 * PREFIX.eigenvec.var (the variants' loadings). Prints each step's time.
 * Uses only the public API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clireport.h"
#include "tessera/linalg.h"
#include "tessera/plink.h"
#include "tessera/zarr.h"

typedef struct opts {
  const char *bed, *zarr, *npy, *out;
  int64_t chunk_rows, chunk_cols;  /* 0: chosen for the PCA (pca_chunks) */
  tsr_pca_opts pca;
  int missing;                     /* --missing for integer zarr/npy input, or -1 */
  bool loadings, persist, no_progress;
  const char *report;              /* --report FILE.html|.json (docs/report.md) */
} opts;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tsr-pca --bed PREFIX | --zarr DIR | --npy FILE [--k 10] [--power-iters 2]\n"
          "               [--oversamples 10] [--method compressed|exact] [--standardize binom2|center|none]\n"
          "               [--out PREFIX] [--loadings] [--chunks R,C] [--seed S] [--missing V] [--no-persist]\n"
          "               [--no-progress] [--report FILE.html|.json]\n"
          "Input is samples x variants. Writes PREFIX.eigenval and PREFIX.eigenvec (PLINK 2 layout),\n"
          "and PREFIX.eigenvec.var with --loadings. --missing V marks integer value V of a Zarr or\n"
          ".npy input as missing (PLINK's missing genotypes always are). Connects to\n"
          "$TESSERA_SCHEDULER (run it under `tessera local`).\n");
}

static int parse_enum(const char *flag, const char *v, const char *const *names, int n, int *out)
{
  for (int i = 0; i < n; i++)
    if (strcmp(v, names[i]) == 0) {
      *out = i;
      return 0;
    }
  fprintf(stderr, "tsr-pca: bad %s '%s'\n", flag, v);
  return -1;
}

/* One flag with a value; -1 on a bad value. */
static int parse_value(opts *o, const char *a, const char *v)
{
  static const char *const methods[] = {"compressed", "exact"}, *const modes[] = {"none", "center", "binom2"};
  int e = 0;
  long long r, c;
  if (strcmp(a, "--bed") == 0) o->bed = v;
  else if (strcmp(a, "--report") == 0) return clireport_check_path("tsr-pca", o->report = v);
  else if (strcmp(a, "--zarr") == 0) o->zarr = v;
  else if (strcmp(a, "--npy") == 0) o->npy = v;
  else if (strcmp(a, "--out") == 0) o->out = v;
  else if (strcmp(a, "--k") == 0) o->pca.k = atoi(v);
  else if (strcmp(a, "--power-iters") == 0) o->pca.svd.n_power_iter = atoi(v);
  else if (strcmp(a, "--oversamples") == 0) o->pca.svd.n_oversamples = atoi(v);
  else if (strcmp(a, "--seed") == 0) o->pca.svd.seed = strtoull(v, NULL, 10);
  else if (strcmp(a, "--missing") == 0) o->missing = atoi(v);
  else if (strcmp(a, "--method") == 0) {
    if (parse_enum(a, v, methods, 2, &e) != 0) return -1;
    o->pca.method = (tsr_pca_method)e;
  } else if (strcmp(a, "--standardize") == 0) {
    if (parse_enum(a, v, modes, 3, &e) != 0) return -1;
    o->pca.standardize = (tsr_standardize_mode)e;
  } else if (strcmp(a, "--chunks") == 0) {
    if (sscanf(v, "%lld,%lld", &r, &c) != 2 || r <= 0 || c <= 0) {
      fprintf(stderr, "tsr-pca: --chunks needs R,C (two positive numbers), got '%s'\n", v);
      return -1;
    }
    o->chunk_rows = r, o->chunk_cols = c;
  } else {
    fprintf(stderr, "tsr-pca: unknown option %s\n", a);
    usage(stderr);
    return -1;
  }
  return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
  tsr_pca_opts defaults = TSR_PCA_OPTS_DEFAULT;
  *o = (opts){NULL, NULL, NULL, "tsr-pca", 0, 0, defaults, -1, false, true, false, NULL};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0) usage(stdout), exit(0);
    else if (strcmp(a, "--version") == 0) printf("tsr-pca %s\n", TSR_VERSION_STRING), exit(0);
    else if (strcmp(a, "--loadings") == 0) o->loadings = true;
    else if (strcmp(a, "--no-persist") == 0) o->persist = false;
    else if (strcmp(a, "--no-progress") == 0) o->no_progress = true;
    else if (i + 1 >= argc) {
      fprintf(stderr, "tsr-pca: %s needs a value\n", a);
      return -1;
    } else if (parse_value(o, a, argv[++i]) != 0)
      return -1;
  }
  if ((o->bed != NULL) + (o->zarr != NULL) + (o->npy != NULL) != 1) {
    fprintf(stderr, "tsr-pca: give exactly one input: --bed PREFIX, --zarr DIR or --npy FILE\n");
    return -1;
  }
  if (o->pca.k < 1 || o->pca.svd.n_power_iter < 0 || o->pca.svd.n_oversamples < 0) {
    fprintf(stderr, "tsr-pca: --k must be positive, --power-iters and --oversamples not negative\n");
    return -1;
  }
  return 0;
}

/* ---------- input ---------- */

/* Chunks for the PCA when none were given. Each product's partial
 * results are a chunk's rows (or columns) times the subspace, so chunks
 * are large: on CPU workers about square blocks of 2^28 genotypes (64 MB
 * packed: all-samples chunks would make every partial a full n x l matrix
 * in host memory); on GPUs all samples (up to 2^21) by 2^32 genotypes
 * (1 GB packed), each a contiguous stretch of the SNP-major .bed, read at
 * disk speed, and the partials summed at device speed. */
static void pca_chunks(opts *o, int64_t n, int64_t m, bool gpu)
{
  if (o->chunk_rows > 0) return;
  int64_t side = gpu ? (int64_t)1 << 21 : 16384, target = gpu ? (int64_t)1 << 32 : (int64_t)1 << 28;
  o->chunk_rows = n < side ? n : side;
  int64_t c = target / o->chunk_rows;
  o->chunk_cols = c >= m ? m : c / 4 * 4;
}

/* The input, chunked for the PCA (pca_chunks) unless --chunks said how;
 * a Zarr array keeps its own chunks unless --chunks is given. info: the
 * .fam/.bim of a --bed input. */
static int open_input(tsr_array_ctx *ctx, const opts *o, const tsr_plink_info *info, bool gpu, tsr_array **x_p)
{
  opts c = *o;
  tsr_array *raw = NULL;
  int rc = 0;
  if (o->bed != NULL) {
    pca_chunks(&c, info->n_samples, info->n_variants, gpu);
    int64_t chunks[2] = {c.chunk_rows, c.chunk_cols};
    return tsr_from_plink(ctx, o->bed, chunks, x_p);
  }
  rc = o->zarr != NULL ? tsr_from_zarr(ctx, o->zarr, &raw) : tsr_from_npy(ctx, o->npy, NULL, &raw);
  if (rc == 0 && tsr_array_ndim(raw) != 2) {
    fprintf(stderr, "tsr-pca: %s is %d-D; a samples x variants matrix is 2-D\n", o->zarr ? o->zarr : o->npy,
            tsr_array_ndim(raw));
    return TSR_ESHAPE;
  }
  if (rc == 0 && (o->npy != NULL || o->chunk_rows > 0)) {
    pca_chunks(&c, tsr_array_dim(raw, 0), tsr_array_dim(raw, 1), gpu);
    int64_t chunks[2] = {c.chunk_rows, c.chunk_cols};
    rc = o->npy != NULL ? tsr_from_npy(ctx, o->npy, chunks, &raw) : tsr_rechunk(ctx, raw, chunks, &raw);
  }
  if (rc == 0 && o->missing >= 0) rc = tsr_with_missing(ctx, raw, o->missing, &raw);
  if (rc == 0) *x_p = raw;
  return rc;
}

/* ---------- output ---------- */

/* Sample i's ID columns: "FID\tIID" from the .fam, else its index. */
static void sample_ids(const tsr_plink_info *info, int64_t i, FILE *f)
{
  if (info != NULL) fprintf(f, "%s\t%s", info->fid[i], info->iid[i]);
  else fprintf(f, "%lld", (long long)i);
}

static void variant_ids(const tsr_plink_info *info, int64_t j, FILE *f)
{
  if (info != NULL) fprintf(f, "%s\t%s\t%s\t%s", info->chrom[j], info->variant_id[j], info->allele1[j], info->allele2[j]);
  else fprintf(f, "%lld", (long long)j);
}

/* A table of n rows x k values, each row led by its IDs. */
static int write_table(const char *path, const char *header, const double *v, int64_t n, int k,
                       void (*ids)(const tsr_plink_info *, int64_t, FILE *), const tsr_plink_info *info)
{
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "tsr-pca: cannot create %s\n", path);
    return TSR_EIO;
  }
  fprintf(f, "%s", header);
  for (int c = 0; c < k; c++) fprintf(f, "\tPC%d", c + 1);
  fprintf(f, "\n");
  for (int64_t i = 0; i < n; i++) {
    ids(info, i, f);
    for (int c = 0; c < k; c++) fprintf(f, "\t%.8g", v[i * k + c]);
    fprintf(f, "\n");
  }
  if (fclose(f) != 0) {
    fprintf(stderr, "tsr-pca: cannot write %s\n", path);
    return TSR_EIO;
  }
  return 0;
}

static int write_eigenval(const char *prefix, const double *ev, int k)
{
  char path[4096];
  snprintf(path, sizeof path, "%s.eigenval", prefix);
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "tsr-pca: cannot create %s\n", path);
    return TSR_EIO;
  }
  for (int i = 0; i < k; i++) fprintf(f, "%.10g\n", ev[i]);
  return fclose(f) == 0 ? 0 : TSR_EIO;
}

typedef struct results {
  double *eigval, *eigvec, *loadings;
  int64_t n, m;
  int k;
} results;

static int write_outputs(const opts *o, const results *r, const tsr_plink_info *info)
{
  char path[4096];
  int rc = write_eigenval(o->out, r->eigval, r->k);
  snprintf(path, sizeof path, "%s.eigenvec", o->out);
  if (rc == 0) rc = write_table(path, info ? "#FID\tIID" : "#IID", r->eigvec, r->n, r->k, sample_ids, info);
  snprintf(path, sizeof path, "%s.eigenvec.var", o->out);
  if (rc == 0 && o->loadings)
    rc = write_table(path, info ? "#CHROM\tID\tA1\tA2" : "#ID", r->loadings, r->m, r->k, variant_ids, info);
  return rc;
}

/* ---------- running ---------- */

static int fail(const char *what, int rc)
{
  fprintf(stderr, "tsr-pca: %s: %s: %s\n", what, tsr_err_name(rc), tsr_errmsg());
  return rc;
}

/* Prints the cluster; returns its GPU workers' count. */
static size_t print_cluster(tsr_client *client)
{
  tsr_cluster_info *info = NULL;
  if (tsr_cluster_info_get(client, 10000, &info) != 0) return 0;
  size_t gpus = 0;
  for (size_t i = 0; i < info->n_workers; i++) gpus += strncmp(info->workers[i].device, "gpu", 3) == 0;
  printf("cluster: %zu workers (%zu GPU)\n", info->n_workers, gpus);
  tsr_cluster_info_destroy(&info);
  return gpus;
}

/* The whole job on an open client: read, PCA, write. */
static int run(tsr_client *client, const opts *o, const tsr_plink_info *info, bool gpu, results *r)
{
  tsr_array_ctx *ctx = NULL;
  tsr_array *x = NULL, *e = NULL, *s = NULL, *l = NULL;
  double t0 = now_s();
  int rc = tsr_array_ctx_new(client, &ctx);
  if (rc == 0 && (rc = open_input(ctx, o, info, gpu, &x)) != 0) fail("reading the input", rc);
  if (rc == 0) {
    r->n = tsr_array_dim(x, 0), r->m = tsr_array_dim(x, 1), r->k = o->pca.k;
    printf("input: %lld samples x %lld variants (%s, chunks %lld x %lld)\n", (long long)r->n, (long long)r->m,
           tsr_array_encoding(x) == TSR_ENC_PACKED2 ? "2-bit packed" : tsr_dtype_name(tsr_array_dtype(x)),
           (long long)tsr_array_chunk(x, 0), (long long)tsr_array_chunk(x, 1));
  }
  if (rc == 0 && o->persist && (rc = tsr_persist(ctx, x, -1, &x)) != 0) fail("reading the input", rc);
  double t1 = now_s();
  if (rc == 0 && o->persist) printf("read:     %8.3f s\n", t1 - t0);
  if (rc == 0 && (rc = tsr_pca(ctx, x, &o->pca, &e, &s, &l)) != 0) fail("building the PCA", rc);
  if (rc == 0) {
    r->eigval = calloc((size_t)r->k, sizeof(double));
    r->eigvec = calloc((size_t)(r->n * r->k), sizeof(double));
    r->loadings = o->loadings ? calloc((size_t)(r->m * r->k), sizeof(double)) : NULL;
    const tsr_array *arrays[3] = {s, e, l};
    void *bufs[3] = {r->eigval, r->eigvec, r->loadings};
    size_t caps[3] = {(size_t)r->k * 8, (size_t)(r->n * r->k) * 8, (size_t)(r->m * r->k) * 8};
    rc = tsr_compute_many(ctx, arrays, o->loadings ? 3 : 2, bufs, caps, -1);
    if (rc != 0) fail("computing the PCA", rc);
  }
  if (rc == 0) printf("pca:      %8.3f s (%s, %s)\n", now_s() - t1, o->pca.method == TSR_PCA_EXACT ? "exact" : "compressed",
                      o->pca.standardize == TSR_STANDARDIZE_BINOM2 ? "binom2" : o->pca.standardize == TSR_STANDARDIZE_CENTER ? "center" : "none");
  tsr_array_ctx_destroy(&ctx);
  return rc;
}

int main(int argc, char **argv)
{
  opts o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  tsr_plink_info *info = NULL;
  int rc = o.bed != NULL ? tsr_plink_info_read(o.bed, &info) : 0;
  if (rc != 0) return fail("reading the .fam/.bim", rc), 1;
  tsr_client *client = NULL;
  tsr_client_opts copts = TSR_CLIENT_OPTS_DEFAULT;
  copts.name = "tsr-pca";
  double t0 = now_s();
  if ((rc = tsr_client_open(&client, NULL, &copts)) != 0) {
    tsr_plink_info_destroy(&info);
    return fail("connecting", rc), 1;
  }
  bool gpu = print_cluster(client) > 0;
  results r = {0};
  clireport cr;
  rc = clireport_begin(&cr, client, "tsr-pca", argc, argv, o.report, !o.no_progress);
  if (rc == 0) rc = run(client, &o, info, gpu, &r);
  clireport_stop_bar(&cr);
  double t1 = now_s();
  if (rc == 0) rc = write_outputs(&o, &r, info);
  if (rc == 0) {
    printf("write:    %8.3f s\ntotal:    %8.3f s\neigenvalues:", now_s() - t1, now_s() - t0);
    for (int i = 0; i < r.k; i++) printf(" %.6g", r.eigval[i]);
    printf("\nwrote %s.eigenval, %s.eigenvec%s%s%s\n", o.out, o.out, o.loadings ? ", " : "", o.loadings ? o.out : "",
           o.loadings ? ".eigenvec.var" : "");
  }
  int status = clireport_end(&cr, rc == 0 ? 0 : 1);
  free(r.eigval), free(r.eigvec), free(r.loadings);
  tsr_plink_info_destroy(&info);
  tsr_client_close(client);
  return status;
}
