"""Makes a UMAP benchmark input and times the Python peer on it.

A Gaussian mixture (n points, 50 dims, 20 components, seed 0) -> scanpy's
pp.neighbors(n_neighbors=15) connectivities, written as raw CSR files
(OUT/indptr.i64, indices.i32, data.f32, labels.i32: the true component of
each point, n in OUT/n.txt); then scanpy's tl.umap (umap-learn's
simplicial_set_embedding, seeded: its single-threaded SGD) on that graph,
timed twice (the first run includes numba's compilation).
Run: /tmp/pv/bin/python bench/umap/gen_graph.py N OUT
"""
import sys
import time

import anndata
import numpy as np
import scanpy as sc
from sklearn.manifold import trustworthiness

n, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
centers = rng.normal(scale=4.0, size=(20, 50))
labels = rng.integers(0, 20, size=n).astype(np.int32)
x = (centers[labels] + rng.normal(size=(n, 50))).astype(np.float32)
ad = anndata.AnnData(X=np.zeros((n, 1), dtype=np.float32))
ad.obsm["X_pca"] = x
t0 = time.time()
sc.pp.neighbors(ad, n_neighbors=15, use_rep="X_pca", random_state=0)
print(f"neighbors: {time.time() - t0:.1f} s")
g = ad.obsp["connectivities"].tocsr().astype(np.float32)
g.sort_indices()
g.indptr.astype(np.int64).tofile(f"{out}/indptr.i64")
g.indices.astype(np.int32).tofile(f"{out}/indices.i32")
g.data.astype(np.float32).tofile(f"{out}/data.f32")
labels.tofile(f"{out}/labels.i32")
np.save(f"{out}/x.npy", x)
open(f"{out}/n.txt", "w").write(f"{n}\n")
for run in range(2):
    t0 = time.time()
    sc.tl.umap(ad, random_state=0)
    print(f"scanpy tl.umap run {run + 1}: {time.time() - t0:.1f} s")
np.savetxt(f"{out}/umap_learn.tsv", ad.obsm["X_umap"], fmt="%.5f", delimiter="\t")
sub = rng.choice(n, size=min(n, 5000), replace=False)
print(f"trustworthiness (5000-point sample, k=10): {trustworthiness(x[sub], ad.obsm['X_umap'][sub], n_neighbors=10):.4f}")
