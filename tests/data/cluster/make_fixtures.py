"""Reference values for tests/integration/test_clustering.c, computed once
by the peers (scikit-learn, scanpy/umap-learn, leidenalg) — never by Tessera.

Run: /tmp/pv/bin/python tests/data/cluster/make_fixtures.py DATA_DIR OUT_DIR
(DATA_DIR = ../shared/data). Versions are written into each file's header.
"""
import sys, os
import numpy as np

data, out = sys.argv[1], sys.argv[2]


def versions():
    import sklearn, scanpy, umap, leidenalg, igraph
    return (f"numpy {np.__version__}, scikit-learn {sklearn.__version__}, scanpy {scanpy.__version__}, "
            f"umap-learn {umap.__version__}, leidenalg {leidenalg.__version__}, igraph {igraph.__version__}")


def optdigits():
    from sklearn.cluster import KMeans
    from sklearn.cluster._kmeans import _kmeans_plusplus
    raw = np.loadtxt(os.path.join(data, "clustering_benchmarks/optdigits_test/optdigits.tes"), delimiter=",")
    X = raw[:, :64].astype(np.float64)
    # the k-means++ centers sklearn draws for random_state=0, then one Lloyd run from them
    x_sq = (X * X).sum(axis=1)
    init, _ = _kmeans_plusplus(X, 10, x_squared_norms=x_sq, sample_weight=np.ones(X.shape[0]), random_state=np.random.RandomState(0))
    km = KMeans(10, init=init, n_init=1, max_iter=300, tol=1e-4, algorithm="lloyd").fit(X)
    best = KMeans(10, init="k-means++", n_init=10, random_state=0, algorithm="lloyd").fit(X)
    with open(os.path.join(out, "optdigits_kmeans.txt"), "w") as f:
        f.write(f"# optdigits.tes (1797 x 64, raw values), sklearn KMeans(10, init=centers, n_init=1, tol=1e-4, lloyd); {versions()}\n")
        f.write(f"inertia {km.inertia_!r}\n")
        f.write(f"n_iter {km.n_iter_}\n")
        f.write(f"best_of_10_inertia {best.inertia_!r}\n")
        f.write("init\n")
        for r in init:
            f.write(" ".join(repr(float(v)) for v in r) + "\n")
        f.write("labels\n" + " ".join(str(int(v)) for v in km.labels_) + "\n")


def pbmc():
    import scanpy as sc, anndata as ad, leidenalg, igraph as ig
    pcs = np.loadtxt(os.path.join(data, "pbmc68k_reduced_10x/X_pca_stored.tsv"), dtype=np.float32)
    a = ad.AnnData(np.zeros((pcs.shape[0], 1), dtype=np.float32))
    a.obsm["X_pca"] = pcs
    sc.pp.neighbors(a, n_neighbors=10, use_rep="X_pca")
    C = a.obsp["connectivities"].tocoo()
    D = a.obsp["distances"].tocoo()
    # What scanpy hands leidenalg: a directed graph with every stored entry
    # (scanpy's get_igraph_from_adjacency(directed=True)). The modularity is
    # igraph's Graph.modularity of leidenalg's partition (Newman's weighted
    # Q, resolution 1): leidenalg's own partition.modularity normalizes a
    # directed graph differently (0.7525 where igraph says 0.7780 for seed 0).
    Ccsr = a.obsp["connectivities"].tocsr()
    src, dst = Ccsr.nonzero()
    g = ig.Graph(n=pcs.shape[0], edges=list(zip(src, dst)), directed=True)
    g.es["weight"] = np.asarray(Ccsr[src, dst]).ravel().tolist()
    quals = []
    for seed in range(5):
        p = leidenalg.find_partition(g, leidenalg.RBConfigurationVertexPartition, weights="weight",
                                     resolution_parameter=1.0, n_iterations=-1, seed=seed)
        quals.append(g.modularity(p.membership, weights="weight", resolution=1.0))
    with open(os.path.join(out, "pbmc68k_neighbors.txt"), "w") as f:
        f.write(f"# X_pca_stored.tsv (700 x 50 as f32), sc.pp.neighbors(n_neighbors=10, use_rep='X_pca'); {versions()}\n")
        f.write("# leidenalg RBConfigurationVertexPartition(weights, resolution 1, n_iterations -1), seeds 0..4: igraph Graph.modularity of each partition\n")
        f.write("leiden_modularity " + " ".join(repr(q) for q in quals) + "\n")
        f.write(f"connectivities {C.nnz}\n")
        for i, j, v in zip(C.row, C.col, C.data):
            f.write(f"{i} {j} {float(v)!r}\n")
        f.write(f"distances {D.nnz}\n")
        for i, j, v in zip(D.row, D.col, D.data):
            f.write(f"{i} {j} {float(v)!r}\n")


optdigits()
pbmc()
