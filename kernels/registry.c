/* kernels/registry.c — the op table and the end-to-end CPU runner.
 *
 * The table is two fixed lists (regular ops, then test-only ops) and one
 * flag saying whether the second is visible. tsr_ops_init() only sets the
 * flag, so the registry needs no allocation and is immutable once threads
 * start. The regular ops are visible even before tsr_ops_init(). Their
 * CUDA variants come from the table in cuda/variants.h (empty without
 * CUDA), merged once on first use. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "cuda/variants.h"

static const tsr_op_def *const regular_ops[] = {
  &tsr_op_random_uniform, &tsr_op_random_normal, &tsr_op_randint, &tsr_op_full,
  &tsr_op_add,            &tsr_op_mul,           &tsr_op_sub,     &tsr_op_div,
  &tsr_op_scale,          &tsr_op_astype,        &tsr_op_sum,     &tsr_op_matmul,
  &tsr_op_load_npy,       &tsr_op_save_npy,      &tsr_op_noop,    &tsr_op_transpose,
  &tsr_op_slice,          &tsr_op_assemble,      &tsr_op_view,    &tsr_op_qr,
  &tsr_op_svd,            &tsr_op_bmul,          &tsr_op_signs,   &tsr_op_matmul_random,
  &tsr_op_pack2bit,       &tsr_op_unpack2bit,    &tsr_op_matmul_2bit, &tsr_op_fillnan,
  &tsr_op_ufunc,          &tsr_op_matmul_chain,  &tsr_op_blosc_compress, &tsr_op_blosc_decompress,
  &tsr_op_zarr_read,      &tsr_op_zarr_write,     &tsr_op_read_bed,      &tsr_op_randint_packed,
  &tsr_op_tiff_read,      &tsr_op_tile_stats,     &tsr_op_tile_filter,   &tsr_op_tile_thumb,
  &tsr_op_csr_from_dense, &tsr_op_csr_densify,
  &tsr_op_counts_synth,   &tsr_op_counts_synth_types,
  &tsr_op_tenx_h5_read,   &tsr_op_mtx_read,
  &tsr_op_csr_sum,        &tsr_op_csr_map,        &tsr_op_csr_normalize_rows, &tsr_op_csr_gather,
  &tsr_op_mask_from_runs, &tsr_op_clip,           &tsr_op_csr_matmul,     &tsr_op_values_f64,
  &tsr_op_knn_tile,       &tsr_op_knn_merge,
  &tsr_op_knn_chain,      &tsr_op_knn_finish,
  &tsr_op_umap_membership, &tsr_op_umap_union,   &tsr_op_knn_distances_csr,
  &tsr_op_community,      &tsr_op_modularity,
  &tsr_op_umap_spectral,  &tsr_op_umap_prepare,  &tsr_op_umap_layout,
  &tsr_op_kmeans_partial, &tsr_op_kmeans_combine, &tsr_op_kmeans_pp,
  &tsr_op_kmeans_centers, &tsr_op_kmeans_init, &tsr_op_kmeans_step, &tsr_op_kmeans_update, &tsr_op_kmeans_labels,
  &tsr_op_kmeans_loop, &tsr_op_kmeans_model,
};
static const tsr_op_def *const test_ops[] = {&tsr_op_crash, &tsr_op_fail, &tsr_op_sleep};

#define N_REGULAR (sizeof regular_ops / sizeof regular_ops[0])
#define N_TEST (sizeof test_ops / sizeof test_ops[0])

static bool with_test_ops = false;

/* regular_ops with each cuda member taken from the variant table. */
static tsr_op_def with_cuda[N_REGULAR];
static pthread_once_t with_cuda_once = PTHREAD_ONCE_INIT;

static void merge_cuda_variants(void)
{
  for (size_t i = 0; i < N_REGULAR; i++) {
    with_cuda[i] = *regular_ops[i];
    for (size_t v = 0; v < tsr_cuda_variant_count; v++)
      if (strcmp(tsr_cuda_variants[v].op, with_cuda[i].name) == 0) with_cuda[i].cuda = tsr_cuda_variants[v].fn;
  }
}

void tsr_ops_init(bool test_ops_enabled)
{
  with_test_ops = test_ops_enabled;
}

/* Ops added at run time (a worker's plugins): appended after the others. */
#define MAX_EXTRA_OPS 256
static const tsr_op_def *extra_ops[MAX_EXTRA_OPS];
static size_t n_extra;

int tsr_ops_add(const tsr_op_def *op, tsr_errbuf *err)
{
  if (op == NULL || op->name == NULL || op->name[0] == '\0' || op->infer == NULL || op->cpu == NULL)
    return tsr_fail(err, TSR_EINVAL, "op without a name, infer or cpu function");
  if (tsr_op_find(op->name) != NULL) return tsr_fail(err, TSR_EEXIST, "op '%s' exists already", op->name);
  if (n_extra == MAX_EXTRA_OPS) return tsr_fail(err, TSR_ELIMIT, "more than %d added ops", MAX_EXTRA_OPS);
  extra_ops[n_extra++] = op;
  return 0;
}

static size_t n_builtin(void) { return N_REGULAR + (with_test_ops ? N_TEST : 0); }

size_t tsr_op_count(void)
{
  return n_builtin() + n_extra;
}

const tsr_op_def *tsr_op_at(size_t i)
{
  pthread_once(&with_cuda_once, merge_cuda_variants);
  if (i < N_REGULAR) return &with_cuda[i];
  if (with_test_ops && i - N_REGULAR < N_TEST) return test_ops[i - N_REGULAR];
  if (i >= n_builtin() && i - n_builtin() < n_extra) return extra_ops[i - n_builtin()];
  return NULL;
}

const tsr_op_def *tsr_op_find(const char *name)
{
  if (name == NULL) return NULL;
  for (size_t i = 0, n = tsr_op_count(); i < n; i++)
    if (strcmp(tsr_op_at(i)->name, name) == 0) return tsr_op_at(i);
  return NULL;
}

/* Checks the input count and that each input's bytes match its meta. */
static int check_inputs(const tsr_op_def *op, const tsr_buf *in, int n_in, tsr_errbuf *err)
{
  if (n_in < 0 || (n_in > 0 && in == NULL)) return tsr_fail(err, TSR_EINVAL, "%s: no inputs given", op->name);
  if (n_in < op->min_inputs || (op->max_inputs >= 0 && n_in > op->max_inputs)) {
    if (op->max_inputs == op->min_inputs)
      return tsr_fail(err, TSR_EINVAL, "%s: takes %d input%s, got %d", op->name, op->min_inputs,
                      op->min_inputs == 1 ? "" : "s", n_in);
    if (op->max_inputs < 0)
      return tsr_fail(err, TSR_EINVAL, "%s: takes at least %d inputs, got %d", op->name, op->min_inputs, n_in);
    return tsr_fail(err, TSR_EINVAL, "%s: takes %d to %d inputs, got %d", op->name, op->min_inputs,
                    op->max_inputs, n_in);
  }
  for (int i = 0; i < n_in; i++) {
    tsr_errbuf why;
    if (tsr_meta_check(&in[i].meta, &why) != 0)
      return tsr_fail(err, TSR_ESHAPE, "%s: input %d: %s", op->name, i, why.text);
    int64_t want = tsr_meta_nbytes(&in[i].meta);
    if ((int64_t)in[i].nbytes != want || (want > 0 && in[i].data == NULL))
      return tsr_fail(err, TSR_ESHAPE, "%s: input %d holds %zu bytes but %s needs %lld", op->name, i,
                      in[i].nbytes, tsr_k_str(&in[i].meta).s, (long long)want);
  }
  return 0;
}

/* infer() over the inputs' metas (copied out of the bufs). */
static int infer_from_bufs(const tsr_op_def *op, const tsr_params *params, const tsr_buf *in, int n_in,
                           tsr_meta *meta_p, tsr_errbuf *err)
{
  tsr_meta small[16];
  tsr_meta *metas = n_in <= 16 ? small : malloc((size_t)n_in * sizeof *metas);
  if (metas == NULL) return tsr_fail(err, TSR_ENOMEM, "%s: out of memory for %d input metas", op->name, n_in);
  for (int i = 0; i < n_in; i++) metas[i] = in[i].meta;
  int rc = op->infer(params, metas, n_in, meta_p, err);
  if (metas != small) free(metas);
  return rc;
}

/* A shrinking op's output: at most the bound infer() gave, its meta else
 * unchanged; a much smaller one moves to a buffer of its own size (the
 * chunk store keeps what it is given, and compression is its purpose). */
static int shrink_output(const tsr_op_def *op, const tsr_meta *bound, tsr_buf *out, tsr_errbuf *err)
{
  tsr_meta want = *bound;
  want.shape[0] = out->meta.shape[0];
  int64_t nbytes = tsr_meta_nbytes(&out->meta);
  if (!tsr_meta_equal(&want, &out->meta) || nbytes < 0 || (size_t)nbytes > out->nbytes)
    return tsr_fail(err, TSR_EINTERNAL, "%s: output %s does not fit its bound %s", op->name, tsr_k_str(&out->meta).s,
                    tsr_k_str(bound).s);
  if ((size_t)nbytes + (1u << 16) < out->nbytes) {
    void *small = aligned_alloc(64, nbytes == 0 ? 64 : ((size_t)nbytes + 63) / 64 * 64);
    if (small == NULL) return tsr_fail(err, TSR_ENOMEM, "%s: cannot allocate %lld bytes", op->name, (long long)nbytes);
    memcpy(small, out->data, (size_t)nbytes);
    free(out->data);
    out->data = small;
  }
  out->nbytes = (size_t)nbytes;
  return 0;
}

int tsr_op_run_cpu(const tsr_op_def *op, const tsr_params *params, const tsr_buf *in, int n_in, tsr_buf *out,
                   tsr_errbuf *err)
{
  static const tsr_params no_params = TSR_PARAMS_INIT;
  if (op == NULL || out == NULL) return tsr_fail(err, TSR_EINVAL, "tsr_op_run_cpu: no op or no output");
  if (params == NULL) params = &no_params;
  int rc = check_inputs(op, in, n_in, err);
  tsr_meta meta;
  memset(&meta, 0, sizeof meta);
  if (rc == 0) rc = infer_from_bufs(op, params, in, n_in, &meta, err);
  if (rc != 0) return rc;
  tsr_errbuf why;
  if ((rc = tsr_meta_check(&meta, &why)) != 0) return tsr_fail(err, rc, "%s: output: %s", op->name, why.text);
  size_t nbytes = (size_t)tsr_meta_nbytes(&meta);
  /* aligned_alloc wants a multiple of the alignment; never 0 so data is
   * always a real pointer. */
  void *data = aligned_alloc(64, nbytes == 0 ? 64 : (nbytes + 63) / 64 * 64);
  if (data == NULL) return tsr_fail(err, TSR_ENOMEM, "%s: cannot allocate %zu bytes for %s", op->name, nbytes,
                                    tsr_k_str(&meta).s);
  tsr_buf result = {meta, data, nbytes};
  rc = op->cpu(params, in, n_in, &result, err);
  if (rc == 0 && !tsr_meta_equal(&meta, &result.meta)) rc = shrink_output(op, &meta, &result, err);
  if (rc != 0) {
    free(result.data);
    return rc;
  }
  *out = result;
  return 0;
}
