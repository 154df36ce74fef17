/* scanpy's neighbors graph (tessera/cluster.h, tsr_knn_graph): per row
 * block an umap_membership task (P's rows), then per row block an
 * umap_union task over every block's P (the transpose's entries of a row
 * block live in all of them), and a knn_distances_csr task per block
 * (kernels/cpu/knn_graph.c). */
#include "graphs.h"
#include "tessera/cluster.h"

#define TSR_API __attribute__((visibility("default")))

static int graph_check(const tsr_array *idx, const tsr_array *dist)
{
  if (idx == NULL || dist == NULL) return client_fail(TSR_EINVAL, "knn_graph: indices or distances is NULL");
  if (idx->ndim != 2 || dist->ndim != 2 || idx->dtype != TSR_I64 || dist->dtype != TSR_F32 ||
      idx->shape[0] != dist->shape[0] || idx->shape[1] != dist->shape[1] || idx->chunk[0] != dist->chunk[0] ||
      idx->nchunks[1] != 1 || dist->nchunks[1] != 1)
    return client_fail(TSR_ESHAPE, "knn_graph: needs indices i64 and distances f32 of the same shape and chunks, as tsr_knn gives them");
  if (idx->shape[1] < 2) return client_fail(TSR_EINVAL, "knn_graph: needs k >= 2 (the point itself and a neighbour)");
  return 0;
}

static int int_args(tsr_args **a, const char *n1, int64_t v1, const char *n2, int64_t v2)
{
  int rc = tsr_args_new(a);
  if (rc == 0) rc = tsr_args_int(*a, n1, v1);
  if (rc == 0 && n2 != NULL) rc = tsr_args_int(*a, n2, v2);
  return rc;
}

static int csr_array(tsr_array_ctx *ctx, const char *label, const tsr_array *idx, tsr_array **out_p)
{
  int64_t n = idx->shape[0], shape[2] = {n, n}, chunks[2] = {idx->chunk[0], n};
  int rc = garray_new(ctx, label, TSR_F32, 2, shape, chunks, out_p);
  if (rc == 0) (*out_p)->encoding = TSR_ENC_CSR;
  return rc;
}

static int connectivities(tsr_array_ctx *ctx, const tsr_array *idx, const tsr_array *dist, tsr_array *out)
{
  tsr_array *mean = NULL, *p = NULL;
  int rc = tsr_mean(ctx, dist, -1, 0, &mean);
  if (rc == 0) rc = csr_array(ctx, "umap-p", idx, &p);
  int64_t nb = idx->nchunks[0], n = idx->shape[0];
  for (int64_t i = 0; rc == 0 && i < nb; i++) {
    tsr_args *a = NULL;
    const char *in[3] = {idx->keys[i], dist->keys[i], mean->keys[0]};
    rc = int_args(&a, "n", n, "row0", i * idx->chunk[0]);
    if (rc == 0) rc = gtask_add(ctx, p->keys[i], "umap_membership", a, in, 3);
    tsr_args_destroy(&a);
  }
  for (int64_t i = 0; rc == 0 && i < nb; i++) {
    tsr_args *a = NULL;
    rc = int_args(&a, "row0", i * idx->chunk[0], "rows", garray_chunk_len(idx, 0, i));
    if (rc == 0) rc = gtask_add(ctx, out->keys[i], "umap_union", a, (const char *const *)p->keys, (size_t)nb);
    tsr_args_destroy(&a);
  }
  return rc;
}

static int distances_graph(tsr_array_ctx *ctx, const tsr_array *idx, const tsr_array *dist, tsr_array *out)
{
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < idx->nchunks[0]; i++) {
    tsr_args *a = NULL;
    const char *in[2] = {idx->keys[i], dist->keys[i]};
    rc = int_args(&a, "n", idx->shape[0], NULL, 0);
    if (rc == 0) rc = gtask_add(ctx, out->keys[i], "knn_distances_csr", a, in, 2);
    tsr_args_destroy(&a);
  }
  return rc;
}

TSR_API int tsr_knn_graph(tsr_array_ctx *ctx, const tsr_array *indices, const tsr_array *distances,
                          tsr_array **connectivities_p, tsr_array **distances_graph_p)
{
  if (ctx == NULL) return client_fail(TSR_EINVAL, "knn_graph: NULL context");
  int rc = graph_check(indices, distances);
  if (rc == 0) rc = garray_dense(ctx, indices, &indices);
  if (rc == 0) rc = garray_dense(ctx, distances, &distances);
  tsr_array *conn = NULL, *dg = NULL;
  if (rc == 0 && connectivities_p != NULL) rc = csr_array(ctx, "connectivities", indices, &conn);
  if (rc == 0 && conn != NULL) rc = connectivities(ctx, indices, distances, conn);
  if (rc == 0 && distances_graph_p != NULL) rc = csr_array(ctx, "distances", indices, &dg);
  if (rc == 0 && dg != NULL) rc = distances_graph(ctx, indices, distances, dg);
  if (rc != 0) {
    tsr_array_free(ctx, &conn);
    tsr_array_free(ctx, &dg);
    return rc;
  }
  if (connectivities_p != NULL) *connectivities_p = conn;
  if (distances_graph_p != NULL) *distances_graph_p = dg;
  return 0;
}
