/* tsr-cluster: scanpy's clustering workflow on a Tessera cluster.
 *
 *   read → pp.filter_cells → pp.filter_genes → pp.normalize_total →
 *   pp.log1p → pp.highly_variable_genes → pp.scale → tl.pca →
 *   pp.neighbors → tl.leiden | tl.louvain | k-means → tl.umap
 *
 * main.c parses the flags and opens the client, pipeline.c runs the steps
 * (each persisted and timed, so a step's line is its real cost), output.c
 * writes the files. Uses only the public API. */
#ifndef TSR_EXAMPLES_CLUSTER_H
#define TSR_EXAMPLES_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "tessera/array.h"
#include "tessera/cluster.h"

typedef enum cl_method { CL_LEIDEN = 0, CL_LOUVAIN = 1, CL_KMEANS = 2 } cl_method;

typedef struct cl_opts {
  const char *h5, *mtx_dir, *mtx, *npy, *out, *truth, *barcodes, *kmeans_init;
  int64_t synth_cells, synth_genes, synth_types;  /* --synthetic CELLS,GENES[,TYPES] */
  bool transpose;          /* --mtx file is genes x cells */
  int64_t min_genes, min_cells;
  double target_sum;       /* <= 0: the median of the totals (scanpy's default) */
  int64_t n_top_genes;
  double max_value;        /* pp.scale's clip; <= 0: none */
  int n_pcs;               /* 0: use the input as the representation (--npy) */
  int neighbors;
  tsr_metric metric;
  double resolution;
  cl_method method;
  int kmeans_k;
  bool umap;
  bool no_progress;         /* --no-progress: no bar (and no step ticker) on stderr */
  const char *report;       /* --report FILE.html|.json (docs/report.md) */
  bool umap_init_pca;      /* --umap-init pca: the first two PCs, else spectral */
  uint64_t seed;
  int64_t row_chunk;       /* 0: chosen from the input */
} cl_opts;

/* What the run produced, on the client, for output.c. */
typedef struct cl_result {
  int64_t n_cells;
  char **barcodes;         /* [n_barcodes] (n_cells after filtering), or NULL: indices */
  int64_t n_barcodes;
  int32_t *labels;         /* [n_cells] */
  int32_t *truth;          /* [n_cells] true labels (--synthetic, --truth) or NULL */
  float *umap;             /* [n_cells x 2] with --umap */
  int n_clusters;
} cl_result;

double cl_now(void);
/* Prints "  name ... s" while a long step runs (a progress indication
 * for a terminal or a log); cl_step_end stops it and prints the step's
 * line with its time. */
void cl_step_begin(const char *name);
double cl_step_end(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cl_fail(const char *what, int rc);

/* The whole pipeline on an open client; fills r and writes PREFIX.pca.npy
 * and PREFIX.neighbors.mtx as the arrays are made. */
int cl_run(tsr_client *client, const cl_opts *o, cl_result *r);

/* PREFIX.clusters.tsv, PREFIX.umap.tsv and PREFIX.umap.png. */
int cl_write_clusters(const cl_opts *o, const cl_result *r);
int cl_write_umap(const cl_opts *o, const cl_result *r);
/* The connectivities (a persisted CSR array) as a Matrix Market file,
 * chunk by chunk, never dense. */
int cl_write_mtx(tsr_client *client, const tsr_array *graph, const char *path);
/* n numbers of a .npy file (i4, i8, f4, f8) as doubles. */
int cl_read_npy(const char *path, int64_t n, double **values_p);
/* Integer labels, one per line, or an i32/i64 .npy file. */
int cl_read_labels(const char *path, int64_t n, int32_t **labels_p);
void cl_result_free(cl_result *r);

#endif
