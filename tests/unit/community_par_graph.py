# Writes a UMAP connectivities graph (umap-learn's membership strengths of the
# exact 15 NN of 50 PCs, as scanpy builds it) of the MNIST test digits for
# test_community_par (argv[1]) as int64 n, int64 nnz, int64 indptr[n+1],
# int32 indices[nnz], float32 data[nnz]. Run with /tmp/pv (umap-learn, sklearn).
import gzip, sys
import numpy as np, scipy.sparse as sp
from sklearn.decomposition import PCA
from sklearn.neighbors import NearestNeighbors
from umap.umap_ import smooth_knn_dist, compute_membership_strengths
raw = gzip.open('/work/shared/data/clustering_benchmarks/mnist_test/t10k-images-idx3-ubyte.gz').read()
x = np.frombuffer(raw, np.uint8, offset=16).reshape(10000, 784).astype(np.float32) / 255
p = PCA(50, random_state=0).fit_transform(x)
d, i = NearestNeighbors(n_neighbors=15).fit(p).kneighbors(p)
sig, rho = smooth_knn_dist(d.astype(np.float32), 15.0)
r, c, v = compute_membership_strengths(i.astype(np.int32), d.astype(np.float32), sig, rho)[:3]
a = sp.coo_matrix((v, (r, c)), shape=(len(p), len(p))).tocsr()
g = a + a.T - a.multiply(a.T)  # umap-learn's fuzzy union (set_op_mix_ratio 1)
g.eliminate_zeros()
g = sp.csr_matrix(g, dtype=np.float32); g.sort_indices()
with open(sys.argv[1], 'wb') as f:
    np.array([g.shape[0], g.nnz], np.int64).tofile(f)
    g.indptr.astype(np.int64).tofile(f); g.indices.astype(np.int32).tofile(f); g.data.astype(np.float32).tofile(f)
print(g.shape, g.nnz)
