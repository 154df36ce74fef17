# Writes a scanpy UMAP connectivities graph (15 NN of 50 PCs) of the MNIST test
# digits for test_community_par (argv[1]) as int64 n, int64 nnz, int64
# indptr[n+1], int32 indices[nnz], float32 data[nnz]. Run with /tmp/pv (scanpy 1.11.5).
import gzip, numpy as np, scanpy as sc, anndata as ad, sys
raw = gzip.open('/work/shared/data/clustering_benchmarks/mnist_test/t10k-images-idx3-ubyte.gz').read()
x = np.frombuffer(raw, np.uint8, offset=16).reshape(10000, 784).astype(np.float32) / 255
a = ad.AnnData(x)
sc.pp.pca(a, n_comps=50)
sc.pp.neighbors(a, n_neighbors=15, random_state=0)
g = a.obsp['connectivities'].tocsr(); g.sort_indices()
with open(sys.argv[1], 'wb') as f:
    np.array([g.shape[0], g.nnz], np.int64).tofile(f)
    g.indptr.astype(np.int64).tofile(f); g.indices.astype(np.int32).tofile(f); g.data.astype(np.float32).tofile(f)
print(g.shape, g.nnz)
