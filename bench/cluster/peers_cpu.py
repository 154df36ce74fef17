"""The CPU peers of bench/cluster/run.sh, timed on the same input.

    python peers_cpu.py DIR [--neighbors 15] [--seed 0] [--kmeans-k 30]
                            [--skip-scanpy] [--skip-kmeans]

DIR holds X.npy and labels.npy (mixture.py) and, for k-means, init.npy
(the initial centers Tessera's run also starts from). Prints one line per
measurement, "peer <name> <step> <seconds> [ari=<x>] [modularity=<x>]
[inertia=<x>]", which run.sh turns into its table.

Peers: scikit-learn NearestNeighbors(algorithm="brute") for the exact
15-NN, umap-learn's fuzzy_simplicial_set for the graph scanpy builds,
leidenalg (RBConfiguration, resolution 1, the scanpy default) and
igraph's multilevel Louvain on it; scanpy's own pp.neighbors (its default
transformer, pynndescent, approximate) + tl.leiden; scikit-learn KMeans
with Tessera's initial centers (n_init=1, Lloyd).
"""
import argparse
import contextlib
import io
import os
import time

import numpy as np


def log(name, step, seconds, **quality):
    extra = " ".join(f"{k}={v:.6g}" for k, v in quality.items())
    print(f"peer {name} {step} {seconds:.3f} {extra}".rstrip(), flush=True)


def ari(labels, truth):
    from sklearn.metrics import adjusted_rand_score
    return adjusted_rand_score(truth, labels)


def igraph_of(conn):
    import igraph as ig
    coo = conn.tocoo()
    keep = coo.row < coo.col
    g = ig.Graph(n=conn.shape[0], edges=np.stack([coo.row[keep], coo.col[keep]], 1),
                 directed=False)
    g.es["weight"] = coo.data[keep]
    return g


def sklearn_leidenalg(X, truth, k, seed):
    from sklearn.neighbors import NearestNeighbors
    from umap.umap_ import fuzzy_simplicial_set
    import leidenalg
    t = time.perf_counter()
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(X)
    dist, idx = nn.kneighbors(X)
    log("sklearn-brute", "knn", time.perf_counter() - t)
    t = time.perf_counter()
    conn, _, _ = fuzzy_simplicial_set(X, k, seed, "euclidean",
                                      knn_indices=idx, knn_dists=dist)
    log("umap-learn", "connectivities", time.perf_counter() - t)
    g = igraph_of(conn.tocsr())
    t = time.perf_counter()
    part = leidenalg.find_partition(g, leidenalg.RBConfigurationVertexPartition,
                                    weights="weight", resolution_parameter=1.0,
                                    n_iterations=-1, seed=seed)
    lab = np.array(part.membership)
    log("leidenalg", "leiden", time.perf_counter() - t, ari=ari(lab, truth),
        modularity=g.modularity(lab, weights="weight"))
    t = time.perf_counter()
    part = g.community_multilevel(weights="weight")
    lab = np.array(part.membership)
    log("igraph", "louvain", time.perf_counter() - t, ari=ari(lab, truth),
        modularity=g.modularity(lab, weights="weight"))


def scanpy_run(X, truth, k, seed):
    import anndata
    import scanpy as sc
    import scipy.sparse as sp
    # scanpy 1.11.5 calls csr_array.getnnz, which SciPy >= 1.15 removed
    # from sparse arrays (kept on matrices); numpy 2.4 needs such a SciPy.
    if not hasattr(sp.csr_array, "getnnz"):
        sp.csr_array.getnnz = lambda self, axis=None: self._getnnz(axis=axis)
    adata = anndata.AnnData(X)
    t = time.perf_counter()
    sc.pp.neighbors(adata, n_neighbors=k, use_rep="X", random_state=seed)
    log("scanpy", "neighbors", time.perf_counter() - t)
    t = time.perf_counter()
    sc.tl.leiden(adata, resolution=1.0, random_state=seed, flavor="leidenalg",
                 n_iterations=-1)
    lab = adata.obs["leiden"].astype(int).to_numpy()
    log("scanpy", "leiden", time.perf_counter() - t, ari=ari(lab, truth))


def sklearn_kmeans(X, truth, init):
    from sklearn.cluster import KMeans
    t = time.perf_counter()
    km = KMeans(n_clusters=init.shape[0], init=init, n_init=1, algorithm="lloyd",
                max_iter=300, tol=1e-4).fit(X)
    log("sklearn", "kmeans", time.perf_counter() - t, ari=ari(km.labels_, truth),
        inertia=km.inertia_, iterations=km.n_iter_)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--neighbors", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-scanpy", action="store_true")
    ap.add_argument("--skip-kmeans", action="store_true")
    a = ap.parse_args()
    X = np.load(os.path.join(a.dir, "X.npy"))
    truth = np.load(os.path.join(a.dir, "labels.npy"))
    # Numba compiles umap-learn's and pynndescent's kernels on first use
    # (~25 s), and pynndescent compiles more past 5,000 rows: an untimed
    # first run on the same matrix pays for it, so the peers are timed warm.
    with contextlib.redirect_stdout(io.StringIO()):
        sklearn_leidenalg(X[:5000], truth[:5000], a.neighbors, a.seed)
        if not a.skip_scanpy:
            scanpy_run(X, truth, a.neighbors, a.seed)
    sklearn_leidenalg(X, truth, a.neighbors, a.seed)
    if not a.skip_scanpy:
        scanpy_run(X, truth, a.neighbors, a.seed)
    init = os.path.join(a.dir, "init.npy")
    if not a.skip_kmeans and os.path.exists(init):
        sklearn_kmeans(X, truth, np.load(init).astype(X.dtype))


if __name__ == "__main__":
    main()
