"""Makes a UMAP benchmark input and times the Python peer on it.

A Gaussian mixture (n points, 50 dims, 20 components, seed 0) -> the
15-NN connectivities as scanpy's pp.neighbors makes them (pynndescent's
kNN, umap's fuzzy_simplicial_set; called directly because scanpy 1.11.5's
own path fails on this scipy: csr_array has no getnnz), as raw CSR files
(OUT/indptr.i64, indices.i32, data.f32, labels.i32: the true component of
each point, n in OUT/n.txt); then scanpy's tl.umap (umap-learn's
simplicial_set_embedding, seeded: its single-threaded SGD) on that graph,
timed twice (the first run includes numba's compilation).
Run: /tmp/pv/bin/python bench/umap/gen_graph.py N OUT
"""
import sys
import time

import numpy as np
import scipy.sparse
from pynndescent import NNDescent
from sklearn.manifold import trustworthiness
from umap.umap_ import find_ab_params, fuzzy_simplicial_set, simplicial_set_embedding

n, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
centers = rng.normal(scale=4.0, size=(20, 50))
labels = rng.integers(0, 20, size=n).astype(np.int32)
x = (centers[labels] + rng.normal(size=(n, 50))).astype(np.float32)
t0 = time.time()
nnd = NNDescent(x, n_neighbors=15, random_state=0)
knn_i, knn_d = nnd.neighbor_graph
g, _, _ = fuzzy_simplicial_set(x, 15, np.random.RandomState(0), "euclidean", knn_indices=knn_i, knn_dists=knn_d)
print(f"neighbors: {time.time() - t0:.1f} s")
g = scipy.sparse.csr_matrix(g, dtype=np.float32)
g.sort_indices()
g.indptr.astype(np.int64).tofile(f"{out}/indptr.i64")
g.indices.astype(np.int32).tofile(f"{out}/indices.i32")
g.data.astype(np.float32).tofile(f"{out}/data.f32")
labels.tofile(f"{out}/labels.i32")
np.save(f"{out}/x.npy", x)
open(f"{out}/n.txt", "w").write(f"{n}\n")
a, b = find_ab_params(1.0, 0.5)
for run in range(2):
    t0 = time.time()
    y, _ = simplicial_set_embedding(data=x, graph=g.tocoo(), n_components=2, initial_alpha=1.0, a=a, b=b, gamma=1.0,
                                    negative_sample_rate=5, n_epochs=500 if n <= 10000 else 200, init="spectral",
                                    random_state=np.random.RandomState(0), metric="euclidean", metric_kwds={},
                                    densmap=False, densmap_kwds={}, output_dens=False)
    print(f"umap-learn simplicial_set_embedding run {run + 1}: {time.time() - t0:.1f} s")
np.savetxt(f"{out}/umap_learn.tsv", y, fmt="%.5f", delimiter="\t")
sub = rng.choice(n, size=min(n, 5000), replace=False)
print(f"umap-learn trustworthiness (5000-point sample, k=10): {trustworthiness(x[sub], y[sub], n_neighbors=10):.4f}")
