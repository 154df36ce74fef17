/* kernels/cpu/counts_synth.c — a seeded sparse count matrix with cluster
 * structure, the input of the single-cell benchmarks (bench/cluster):
 * what a 10x run of n cells from K cell types looks like to the pipeline,
 * made on the workers instead of read from a 30 GB file.
 *
 * The model, per cell i (a pure function of seed and i, so the values never
 * depend on the chunking, as for every random array: docs/random.md):
 *   - its type c = cell_type(seed, i, K), uniform over 0..K-1;
 *   - a size factor s = exp(0.3 z), z standard normal;
 *   - background genes: each gene is detected with probability
 *     min(0.95, s · p_bg), p_bg = 0.55 · density;
 *   - marker genes of type c (each gene is a marker of each type with
 *     probability 4%): detected with probability min(0.95, s · p_mk),
 *     p_mk = 0.45 · density / 0.04;
 *   - a detected gene's count is 1 + a geometric number (mean 0.67 for the
 *     background, 1.9 for markers); a gene both background and marker gets
 *     the sum.
 * Expected nonzeros per cell: about density · genes. Detected genes come
 * out in increasing order because they are drawn by geometric gaps (the
 * number of genes skipped before the next detection), so a row costs
 * O(its nonzeros), not O(genes), and needs no sort.
 *
 * Ops:
 *   counts_synth: no inputs; params seed, rows, row0 (the first cell),
 *     genes, types, density → a CSR chunk of f32 counts (csr.h), inferred
 *     at a per-row cap of min(genes, 4 · density · genes + 64) values and
 *     shrunk to the real nnz.
 *   counts_synth_types: the same params less genes/density → i32 [rows],
 *     each cell's type (the labels the benchmark scores against). */
#include <math.h>
#include <stdlib.h>

#include "csr.h"
#include "ops.h"
#include "philox.h"

#define MARKER_RATE 0.04
#define ROW_BLOCKS_SHIFT 26 /* 2^26 Philox blocks (2^28 words) per cell */

typedef struct synth {
  uint64_t seed;
  int64_t rows, row0, genes, types;
  double density;
} synth;

/* The words of cell i's stream, drawn in order. */
typedef struct stream {
  uint64_t seed, base, block;
  uint32_t w[4];
  int used;
} stream;

static void stream_init(stream *s, uint64_t seed, int64_t cell)
{
  s->seed = seed, s->base = (uint64_t)cell << ROW_BLOCKS_SHIFT, s->block = 0, s->used = 4;
}

static uint32_t stream_word(stream *s)
{
  if (s->used == 4) {
    tsr_philox_block(s->seed, s->base + s->block++, s->w);
    s->used = 0;
  }
  return s->w[s->used++];
}

/* Uniform in (0, 1]: never 0, so its log is finite. */
static double stream_u01(stream *s) { return ((double)stream_word(s) + 1.0) * 0x1p-32; }

/* The number of failures before a success of probability p. */
static int64_t geometric(stream *s, double log1mp)
{
  double g = floor(log(stream_u01(s)) / log1mp);
  return g > (double)INT32_MAX ? INT32_MAX : (int64_t)g;
}

static uint64_t type_key(uint64_t seed) { return seed ^ 0x7f4a7c159e3779b9ull; }
static uint64_t marker_key(uint64_t seed) { return seed ^ 0x94d049bb133111ebull; }

static int32_t cell_type(uint64_t seed, int64_t cell, int64_t types)
{
  return (int32_t)(((uint64_t)tsr_philox_word(type_key(seed), (uint64_t)cell) * (uint64_t)types) >> 32);
}

static int parse(const char *op, const tsr_params *p, bool counts, synth *s, tsr_errbuf *err)
{
  int64_t seed = 0;
  s->genes = 1, s->density = 0;
  int rc = tsr_params_get_int(p, "seed", &seed, err);
  if (rc == 0) rc = tsr_params_get_int(p, "rows", &s->rows, err);
  if (rc == 0) rc = tsr_params_get_int(p, "row0", &s->row0, err);
  if (rc == 0) rc = tsr_params_get_int(p, "types", &s->types, err);
  if (rc == 0 && counts) rc = tsr_params_get_int(p, "genes", &s->genes, err);
  if (rc == 0 && counts) rc = tsr_params_get_float(p, "density", &s->density, err);
  if (rc != 0) return tsr_k_param_fail(op, rc, err);
  s->seed = (uint64_t)seed;
  if (s->rows < 1 || s->row0 < 0 || s->row0 + s->rows > ((int64_t)1 << 37) || s->types < 1 || s->types > 65536 ||
      s->genes < 1 || s->genes > INT32_MAX || !(s->density >= 0 && s->density <= 1))
    return tsr_fail(err, TSR_EINVAL,
                    "%s: needs 1 <= rows, row0 >= 0, cells < 2^37, 1 <= types <= 65536, 1 <= genes < 2^31 and "
                    "density in [0, 1]",
                    op);
  return 0;
}

static int64_t row_cap(const synth *s)
{
  double cap = 4.0 * s->density * (double)s->genes + 64.0;
  return cap >= (double)s->genes ? s->genes : (int64_t)cap;
}

/* ---------- counts_synth ---------- */

static int counts_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  synth s;
  int rc = parse("counts_synth", p, true, &s, err);
  if (rc != 0) return rc;
  int64_t bytes = tsr_k_csr_bytes(s.rows, s.rows * row_cap(&s), TSR_F32);
  if (bytes < 0) return tsr_fail(err, TSR_ELIMIT, "counts_synth: %lld rows are too many for one chunk", (long long)s.rows);
  tsr_k_meta_set(out, TSR_U8, 1, &bytes);
  return 0;
}

/* The marker genes of every type, increasing: markers + off[t] .. off[t+1]. */
static int marker_lists(const synth *s, int32_t **markers_p, int64_t **off_p)
{
  int64_t cap = (int64_t)(s->types * s->genes * (MARKER_RATE * 1.5) + 1024 * s->types);
  int32_t *markers = malloc((size_t)cap * sizeof *markers);
  int64_t *off = malloc((size_t)(s->types + 1) * sizeof *off), n = 0;
  if (markers == NULL || off == NULL) return free(markers), free(off), -1;
  uint32_t threshold = (uint32_t)(MARKER_RATE * 4294967296.0);
  for (int64_t t = 0; t < s->types; t++) {
    off[t] = n;
    for (int64_t g = 0; g < s->genes && n < cap; g++)
      if (tsr_philox_word(marker_key(s->seed), (uint64_t)(t * s->genes + g)) < threshold) markers[n++] = (int32_t)g;
  }
  off[s->types] = n;
  *markers_p = markers, *off_p = off;
  return 0;
}

/* The next detected position at or after `from` among `len`, or len. */
static int64_t next_hit(stream *st, int64_t from, int64_t len, double log1mp)
{
  if (log1mp == 0) return len;
  int64_t at = from + geometric(st, log1mp);
  return at > len ? len : at;
}

/* Writes one cell's row (increasing genes) at idx/val; returns its nnz. */
static int64_t synth_row(const synth *s, int64_t cell, const int32_t *markers, const int64_t *off, int64_t cap,
                         int32_t *idx, float *val)
{
  stream st;
  stream_init(&st, s->seed, cell);
  double u1 = stream_u01(&st), u2 = stream_u01(&st);
  double size = exp(0.3 * sqrt(-2.0 * log(u1)) * cos(TSR_TWO_PI * u2));
  double p_bg = fmin(0.95, size * 0.55 * s->density), p_mk = fmin(0.95, size * 0.45 * s->density / MARKER_RATE);
  double l_bg = log1p(-p_bg), l_mk = log1p(-p_mk), l_vbg = log(0.6), l_vmk = log(0.35);
  int32_t t = cell_type(s->seed, cell, s->types);
  const int32_t *mk = markers + off[t];
  int64_t n_mk = off[t + 1] - off[t], n = 0;
  int64_t g = next_hit(&st, 0, s->genes, l_bg), m = next_hit(&st, 0, n_mk, l_mk);
  while ((g < s->genes || m < n_mk) && n < cap) {
    int64_t gene_m = m < n_mk ? mk[m] : s->genes;
    int64_t gene = g < gene_m ? g : gene_m;
    float v = 0;
    if (g == gene) v += 1.0f + (float)geometric(&st, l_vbg), g = next_hit(&st, g + 1, s->genes, l_bg);
    if (gene_m == gene) v += 1.0f + (float)geometric(&st, l_vmk), m = next_hit(&st, m + 1, n_mk, l_mk);
    idx[n] = (int32_t)gene, val[n] = v, n++;
  }
  return n;
}

static int counts_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n_in;
  synth s;
  int rc = parse("counts_synth", p, true, &s, err);
  int32_t *markers = NULL;
  int64_t *off = NULL;
  if (rc != 0) return rc;
  if (marker_lists(&s, &markers, &off) != 0) return tsr_fail(err, TSR_ENOMEM, "counts_synth: out of memory");
  int64_t cap = row_cap(&s), nnz = 0;
  tsr_k_csr v;
  tsr_k_csr_init(out->data, s.rows, s.genes, s.rows * cap, TSR_F32, &v);
  float *values = v.values;
  for (int64_t r = 0; r < s.rows; r++) {
    v.indptr[r] = nnz;
    nnz += synth_row(&s, s.row0 + r, markers, off, cap, v.indices + nnz, values + nnz);
  }
  v.indptr[s.rows] = nnz;
  free(markers), free(off);
  tsr_k_csr_shrink(out, &v, nnz);
  return 0;
}

/* ---------- counts_synth_types ---------- */

static int types_infer(const tsr_params *p, const tsr_meta *in, int n, tsr_meta *out, tsr_errbuf *err)
{
  (void)in, (void)n;
  synth s;
  int rc = parse("counts_synth_types", p, false, &s, err);
  if (rc == 0) tsr_k_meta_set(out, TSR_I32, 1, &s.rows);
  return rc;
}

static int types_cpu(const tsr_params *p, const tsr_buf *in, int n_in, tsr_buf *out, tsr_errbuf *err)
{
  (void)in, (void)n_in;
  synth s;
  int rc = parse("counts_synth_types", p, false, &s, err);
  int32_t *types = out->data;
  for (int64_t r = 0; rc == 0 && r < s.rows; r++) types[r] = cell_type(s.seed, s.row0 + r, s.types);
  return rc;
}

const tsr_op_def tsr_op_counts_synth = {"counts_synth", 0, 0, counts_infer, counts_cpu, false, NULL};
const tsr_op_def tsr_op_counts_synth_types = {"counts_synth_types", 0, 0, types_infer, types_cpu, false, NULL};
