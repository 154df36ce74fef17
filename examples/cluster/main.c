/* tsr-cluster: clusters of single cells (or of any rows) on a Tessera
 * cluster, scanpy's workflow with its defaults (cluster.h).
 *
 *   tessera local -- tsr-cluster --10x-h5 filtered_feature_bc_matrix.h5 --umap --out pbmc
 *
 * Flags, scanpy's step and defaults: docs/cluster-cli.md. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clireport.h"
#include "cluster.h"

double cl_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------- step lines and progress ---------- */

/* A ticker thread prints the running step's elapsed time every few
 * seconds: in place on a terminal, as plain lines in a log. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t thread;
  bool running;
  const char *name;
  double start;
  bool quiet;              /* a progress bar (or --no-progress) replaces the elapsed-time ticker */
} ticker = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false, NULL, 0, false};

static void *tick(void *arg)
{
  (void)arg;
  bool tty = isatty(STDERR_FILENO);
  pthread_mutex_lock(&ticker.lock);
  while (ticker.running) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += tty ? 1 : 10;
    pthread_cond_timedwait(&ticker.wake, &ticker.lock, &until);
    double elapsed = cl_now() - ticker.start;
    if (ticker.running && elapsed >= 2)
      fprintf(stderr, tty ? "\r  %s ... %.0f s " : "  %s ... %.0f s\n", ticker.name, elapsed);
  }
  if (tty) fprintf(stderr, "\r\033[K");
  pthread_mutex_unlock(&ticker.lock);
  return NULL;
}

void cl_step_begin(const char *name)
{
  fflush(stdout);
  ticker.name = name, ticker.start = cl_now(), ticker.running = !ticker.quiet;
  if (ticker.running && pthread_create(&ticker.thread, NULL, tick, NULL) != 0) ticker.running = false;
}

static void ticker_stop(void)
{
  pthread_mutex_lock(&ticker.lock);
  bool was = ticker.running;
  ticker.running = false;
  pthread_cond_signal(&ticker.wake);
  pthread_mutex_unlock(&ticker.lock);
  if (was) pthread_join(ticker.thread, NULL);
}

double cl_step_end(const char *name, const char *fmt, ...)
{
  ticker_stop();
  double t = cl_now() - ticker.start;
  /* a bar redrawn in place on the terminal: clear its line so the step line reads clean */
  if (ticker.quiet && isatty(STDERR_FILENO) && isatty(STDOUT_FILENO)) fputs("\r\033[K", stderr);
  printf("%-26s %8.3f s  ", name, t);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
  return t;
}

int cl_fail(const char *what, int rc)
{
  ticker_stop();
  fprintf(stderr, "tsr-cluster: %s: %s: %s\n", what, tsr_err_name(rc), tsr_errmsg());
  return rc;
}

/* ---------- flags ---------- */

static void usage(FILE *out)
{
  fprintf(out,
          "usage: tsr-cluster --10x-h5 FILE | --10x-mtx DIR | --mtx FILE [--transpose] [--barcodes FILE]\n"
          "                   | --npy FILE | --synthetic CELLS,GENES[,TYPES]  --out PREFIX\n"
          "   [--min-genes 200] [--min-cells 3] [--target-sum 1e4] [--n-top-genes 2000] [--max-value 10]\n"
          "   [--n-pcs 50] [--neighbors 15] [--metric euclidean|cosine] [--resolution 1.0]\n"
          "   [--method leiden|louvain|kmeans] [--kmeans-k K] [--umap] [--umap-init spectral|pca]\n"
          "   [--seed 0] [--row-chunk N]\n"
          "   [--kmeans-init CENTERS.npy] [--truth LABELS] [--no-progress] [--report FILE.html|.json]\n"
          "scanpy's workflow: filter_cells, filter_genes, normalize_total, log1p, highly_variable_genes\n"
          "(seurat), scale, pca, neighbors (exact kNN, UMAP connectivities), leiden | louvain | k-means,\n"
          "umap. --npy input is a dense cells x features matrix: no count preprocessing; --n-pcs 0 uses\n"
          "it as it is. --synthetic makes a seeded count matrix with TYPES cell types on the workers\n"
          "(tsr_random_counts) and scores the clusters against them; --truth scores them against given\n"
          "labels (one per line or a .npy). --target-sum 0: the median total. k-means starts from\n"
          "--kmeans-init (K x dims) or runs k-means++ 10 times (scikit-learn's n_init).\n"
          "Writes PREFIX.clusters.tsv, PREFIX.pca.npy, PREFIX.neighbors.mtx, and with --umap\n"
          "PREFIX.umap.tsv and PREFIX.umap.png. Connects to $TESSERA_SCHEDULER (`tessera local`).\n"
          "A progress bar of the tasks goes to stderr (--no-progress: none); --report writes an\n"
          "efficiency report at the end (docs/report.md).\n");
}

static int parse_enum(const char *flag, const char *v, const char *const *names, int n, int *out)
{
  for (int i = 0; i < n; i++)
    if (strcmp(v, names[i]) == 0) return *out = i, 0;
  fprintf(stderr, "tsr-cluster: bad %s '%s'\n", flag, v);
  return -1;
}

static int parse_number(const char *flag, const char *v, double lo, double hi, double *out)
{
  char *end = NULL;
  double d = strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= lo && d <= hi)) {
    fprintf(stderr, "tsr-cluster: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi, v);
    return -1;
  }
  *out = d;
  return 0;
}

static int parse_synthetic(const char *v, cl_opts *o)
{
  long long c = 0, g = 0, t = 0;
  int n = sscanf(v, "%lld,%lld,%lld", &c, &g, &t);
  if (n < 2 || c < 1 || g < 1 || (n == 3 && t < 1)) {
    fprintf(stderr, "tsr-cluster: --synthetic needs CELLS,GENES[,TYPES], got '%s'\n", v);
    return -1;
  }
  o->synth_cells = c, o->synth_genes = g, o->synth_types = n == 3 ? t : 0;
  return 0;
}

/* Flags with a number value. */
static int parse_numeric(cl_opts *o, const char *a, const char *v, bool *known)
{
  double d = 0;
  int rc = 0;
  *known = true;
  if (strcmp(a, "--min-genes") == 0) rc = parse_number(a, v, 0, 1e12, &d), o->min_genes = (int64_t)d;
  else if (strcmp(a, "--min-cells") == 0) rc = parse_number(a, v, 0, 1e12, &d), o->min_cells = (int64_t)d;
  else if (strcmp(a, "--target-sum") == 0) rc = parse_number(a, v, 0, 1e300, &o->target_sum);
  else if (strcmp(a, "--n-top-genes") == 0) rc = parse_number(a, v, 1, 1e9, &d), o->n_top_genes = (int64_t)d;
  else if (strcmp(a, "--max-value") == 0) rc = parse_number(a, v, 0, 1e300, &o->max_value);
  else if (strcmp(a, "--n-pcs") == 0) rc = parse_number(a, v, 0, 10000, &d), o->n_pcs = (int)d;
  else if (strcmp(a, "--neighbors") == 0) rc = parse_number(a, v, 1, 10000, &d), o->neighbors = (int)d;
  else if (strcmp(a, "--resolution") == 0) rc = parse_number(a, v, 0, 1e6, &o->resolution);
  else if (strcmp(a, "--kmeans-k") == 0) rc = parse_number(a, v, 1, 1e7, &d), o->kmeans_k = (int)d;
  else if (strcmp(a, "--seed") == 0) rc = parse_number(a, v, 0, 9e18, &d), o->seed = (uint64_t)d;
  else if (strcmp(a, "--row-chunk") == 0) rc = parse_number(a, v, 1, 1e12, &d), o->row_chunk = (int64_t)d;
  else *known = false;
  return rc;
}

static int parse_value(cl_opts *o, const char *a, const char *v)
{
  static const char *const metrics[] = {"euclidean", "cosine"}, *const methods[] = {"leiden", "louvain", "kmeans"},
                           *const inits[] = {"spectral", "pca"};
  int e = 0;
  bool known = false;
  if (parse_numeric(o, a, v, &known) != 0) return -1;
  if (known) return 0;
  if (strcmp(a, "--10x-h5") == 0) o->h5 = v;
  else if (strcmp(a, "--10x-mtx") == 0) o->mtx_dir = v;
  else if (strcmp(a, "--mtx") == 0) o->mtx = v;
  else if (strcmp(a, "--npy") == 0) o->npy = v;
  else if (strcmp(a, "--out") == 0) o->out = v;
  else if (strcmp(a, "--report") == 0) return clireport_check_path("tsr-cluster", o->report = v);
  else if (strcmp(a, "--truth") == 0) o->truth = v;
  else if (strcmp(a, "--barcodes") == 0) o->barcodes = v;
  else if (strcmp(a, "--kmeans-init") == 0) o->kmeans_init = v;
  else if (strcmp(a, "--synthetic") == 0) return parse_synthetic(v, o);
  else if (strcmp(a, "--metric") == 0) {
    if (parse_enum(a, v, metrics, 2, &e) != 0) return -1;
    o->metric = (tsr_metric)e;
  } else if (strcmp(a, "--umap-init") == 0) {
    if (parse_enum(a, v, inits, 2, &e) != 0) return -1;
    o->umap_init_pca = e == 1;
  } else if (strcmp(a, "--method") == 0) {
    if (parse_enum(a, v, methods, 3, &e) != 0) return -1;
    o->method = (cl_method)e;
  } else {
    fprintf(stderr, "tsr-cluster: unknown option %s\n", a);
    usage(stderr);
    return -1;
  }
  return 0;
}

static int check_opts(const cl_opts *o)
{
  int inputs = (o->h5 != NULL) + (o->mtx_dir != NULL) + (o->mtx != NULL) + (o->npy != NULL) + (o->synth_cells > 0);
  if (inputs != 1) {
    fprintf(stderr, "tsr-cluster: give exactly one input: --10x-h5, --10x-mtx, --mtx, --npy or --synthetic\n");
    return -1;
  }
  if (o->out == NULL) return fprintf(stderr, "tsr-cluster: --out PREFIX is required\n"), -1;
  if (o->method == CL_KMEANS && o->kmeans_k < 1)
    return fprintf(stderr, "tsr-cluster: --method kmeans needs --kmeans-k K\n"), -1;
  if (o->transpose && o->mtx == NULL) return fprintf(stderr, "tsr-cluster: --transpose goes with --mtx\n"), -1;
  if (o->npy == NULL && o->n_pcs < 1)
    return fprintf(stderr, "tsr-cluster: --n-pcs 0 (no PCA) is for --npy input; counts need a PCA\n"), -1;
  return 0;
}

static int parse_args(int argc, char **argv, cl_opts *o)
{
  *o = (cl_opts){.min_genes = 200, .min_cells = 3, .target_sum = 1e4, .n_top_genes = 2000, .max_value = 10,
                 .n_pcs = 50, .neighbors = 15, .metric = TSR_METRIC_EUCLIDEAN, .resolution = 1.0,
                 .method = CL_LEIDEN};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0) usage(stdout), exit(0);
    else if (strcmp(a, "--version") == 0) printf("tsr-cluster %s\n", TSR_VERSION_STRING), exit(0);
    else if (strcmp(a, "--umap") == 0) o->umap = true;
    else if (strcmp(a, "--transpose") == 0) o->transpose = true;
    else if (strcmp(a, "--no-progress") == 0) o->no_progress = true;
    else if (i + 1 >= argc) return fprintf(stderr, "tsr-cluster: %s needs a value\n", a), -1;
    else if (parse_value(o, a, argv[++i]) != 0) return -1;
  }
  return check_opts(o);
}

/* ---------- main ---------- */

static void print_cluster(tsr_client *client)
{
  tsr_cluster_info *info = NULL;
  if (tsr_cluster_info_get(client, 10000, &info) != 0) return;
  size_t gpus = 0;
  for (size_t i = 0; i < info->n_workers; i++) gpus += strncmp(info->workers[i].device, "gpu", 3) == 0;
  printf("cluster: %zu workers (%zu GPU)\n", info->n_workers, gpus);
  tsr_cluster_info_destroy(&info);
}

static void print_summary(const cl_result *r, double t0)
{
  printf("%-26s %8.3f s  %lld cells, %d clusters\n", "total", cl_now() - t0, (long long)r->n_cells, r->n_clusters);
  if (r->truth != NULL) printf("ARI against the true labels: %.4f\n", tsr_adjusted_rand_index(r->labels, r->truth, r->n_cells));
}

int main(int argc, char **argv)
{
  cl_opts o;
  if (parse_args(argc, argv, &o) != 0) return 2;
  tsr_client *client = NULL;
  tsr_client_opts copts = TSR_CLIENT_OPTS_DEFAULT;
  copts.name = "tsr-cluster";
  double t0 = cl_now();
  int rc = tsr_client_open(&client, NULL, &copts);
  if (rc != 0) return cl_fail("connecting", rc), 1;
  print_cluster(client);
  cl_result r = {0};
  clireport cr;
  rc = clireport_begin(&cr, client, "tsr-cluster", argc, argv, o.report, !o.no_progress);
  ticker.quiet = o.no_progress || cr.bar != NULL;
  if (rc == 0) rc = cl_run(client, &o, &r);
  if (rc == 0) rc = cl_write_clusters(&o, &r);
  if (rc == 0 && o.umap) rc = cl_write_umap(&o, &r);
  clireport_stop_bar(&cr);
  if (rc == 0) print_summary(&r, t0);
  int status = clireport_end(&cr, rc == 0 ? 0 : 1);
  cl_result_free(&r);
  tsr_client_close(client);
  return status;
}
