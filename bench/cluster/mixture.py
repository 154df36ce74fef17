"""Writes the benchmark's input: a Gaussian mixture with known labels.

    python mixture.py --cells 100000 --dims 50 --clusters 30 --seed 0 --out DIR

DIR/X.npy (float32, cells x dims, C order) and DIR/labels.npy (int32).
Cluster sizes are unequal (Dirichlet), each cluster has its own spread
and a few stretched axes, so neither k-means nor a graph method finds
the labels for free. Same seed, same file, on any machine (numpy's
PCG64).
"""
import argparse
import os

import numpy as np


def mixture(cells, dims, clusters, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.6, size=(clusters, dims)).astype(np.float32)
    weights = rng.dirichlet(np.full(clusters, 2.0))
    labels = rng.choice(clusters, size=cells, p=weights).astype(np.int32)
    spread = rng.uniform(0.6, 1.2, size=clusters).astype(np.float32)
    stretch = np.ones((clusters, dims), np.float32)
    axes = rng.integers(0, dims, size=(clusters, 3))
    for c in range(clusters):
        stretch[c, axes[c]] = 2.0
    X = np.empty((cells, dims), np.float32)
    block = 1 << 16
    for lo in range(0, cells, block):
        hi = min(cells, lo + block)
        lab = labels[lo:hi]
        noise = rng.standard_normal((hi - lo, dims), dtype=np.float32)
        X[lo:hi] = centers[lab] + noise * (spread[lab, None] * stretch[lab])
    return X, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=100000)
    ap.add_argument("--dims", type=int, default=50)
    ap.add_argument("--clusters", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    X, labels = mixture(a.cells, a.dims, a.clusters, a.seed)
    np.save(os.path.join(a.out, "X.npy"), X)
    np.save(os.path.join(a.out, "labels.npy"), labels)
    print(f"mixture: {a.cells} x {a.dims}, {a.clusters} clusters, seed {a.seed} -> {a.out}")


if __name__ == "__main__":
    main()
