"""Reference values for the UMAP tests (tests/unit/test_kernels_umap.c).

From ../shared/data/pbmc68k_reduced_10x (X_pca_stored.tsv, obs.tsv):
  1. scanpy's connectivities graph: sc.pp.neighbors(n_neighbors=10,
     use_rep='X_pca') on an AnnData holding the stored 50 PCs
     -> pbmc68k_connectivities.mtx (Matrix Market, 700 x 700, symmetric
     stored as general, 1-based).
  2. scanpy's tl.umap on that graph (umap-learn's optimize_layout_euclidean,
     min_dist 0.5, spread 1, 500 epochs for <= 10k points, spectral init) for
     seeds 0..4 -> per seed: trustworthiness (sklearn, k=10, against the 50
     PCs) and the 10-NN louvain label agreement in 2-D
     -> reference.tsv (also a, b from find_ab_params(1.0, 0.5)).
Run: /tmp/pv/bin/python tests/data/umap/make_fixture.py DATA_DIR OUT_DIR
"""
import sys
from importlib.metadata import version

import anndata
import numpy as np
import scanpy as sc
import scipy.io
import scipy.sparse
from sklearn.manifold import trustworthiness
from sklearn.neighbors import NearestNeighbors
from umap.umap_ import find_ab_params

data, out = sys.argv[1], sys.argv[2]
pcs = np.loadtxt(f"{data}/X_pca_stored.tsv", dtype=np.float32)
labels = np.loadtxt(f"{data}/obs.tsv", dtype=str, delimiter="\t", skiprows=1, usecols=2).astype(int)

ad = anndata.AnnData(X=np.zeros((pcs.shape[0], 1), dtype=np.float32))
ad.obsm["X_pca"] = pcs
sc.pp.neighbors(ad, n_neighbors=10, use_rep="X_pca")
g = scipy.sparse.csr_matrix(ad.obsp["connectivities"], dtype=np.float32)
g.sort_indices()
scipy.io.mmwrite(f"{out}/pbmc68k_connectivities.mtx", g, field="real", precision=9)


def label_agreement(y, labels, k=10):
    nn = NearestNeighbors(n_neighbors=k + 1).fit(y)
    idx = nn.kneighbors(y, return_distance=False)[:, 1:]
    return float(np.mean(labels[idx] == labels[:, None]))


a, b = find_ab_params(1.0, 0.5)
rows = []
for seed in range(5):
    sc.tl.umap(ad, random_state=seed)
    y = ad.obsm["X_umap"]
    rows.append((seed, trustworthiness(pcs, y, n_neighbors=10), label_agreement(y, labels)))
with open(f"{out}/reference.tsv", "w") as f:
    f.write("# " + " ".join(f"{p} {version(p)}" for p in ("scanpy", "umap-learn", "scikit-learn", "numpy", "anndata")) + "\n")
    f.write(f"a\t{a:.9f}\nb\t{b:.9f}\n")
    for seed, t, agree in rows:
        f.write(f"seed{seed}\t{t:.6f}\t{agree:.6f}\n")
print(open(f"{out}/reference.tsv").read())
