"""Scores the embeddings in DIR (umap_learn.tsv from gen_graph.py,
umap_tessera.tsv from tsr-bench-umap) the same way: sklearn's
trustworthiness (k=10) against DIR/x.npy on the first 5,000 points (the
points are in random order), and the fraction of each point's 10 nearest
points in 2-D (all points) sharing its true component (labels.i32).
Run: /tmp/pv/bin/python bench/umap/compare.py DIR
"""
import sys

import numpy as np
from sklearn.manifold import trustworthiness
from sklearn.neighbors import NearestNeighbors

d = sys.argv[1]
x = np.load(f"{d}/x.npy")
labels = np.fromfile(f"{d}/labels.i32", dtype=np.int32)
for name in ("umap_learn", "umap_tessera"):
    try:
        y = np.loadtxt(f"{d}/{name}.tsv", dtype=np.float32)
    except OSError:
        continue
    m = min(5000, len(y))
    t = trustworthiness(x[:m], y[:m], n_neighbors=10)
    idx = NearestNeighbors(n_neighbors=11).fit(y).kneighbors(y, return_distance=False)[:, 1:]
    agree = float(np.mean(labels[idx] == labels[:, None]))
    print(f"{name}: trustworthiness {t:.4f}, 10-NN label agreement {agree:.4f}")
