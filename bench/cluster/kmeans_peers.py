"""scikit-learn's KMeans from the init both sides start from, for
bench/cluster/kmeans.sh.

    python kmeans_peers.py DIR [--rounds 1] [--tsr-labels FILE]

DIR holds X.npy, labels.npy (the true labels) and init.npy. Each round
times KMeans(init=init, n_init=1, algorithm=A, max_iter=300, tol=1e-4).fit
for A = lloyd and elkan (warm: an untimed fit first), with the machine's
cores and with one thread (threadpoolctl: on a loaded machine OpenMP's
threads can cost more than they give, and the fastest peer counts), and
prints one line each: "peer sklearn-<A>[-1t] kmeans <seconds>
inertia=<x> iterations=<n> ari=<x>". With --tsr-labels (Tessera's clusters.tsv) it also prints how
many of Tessera's labels equal sklearn's lloyd labels.
"""
import argparse
import os
import time

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits


def fit(X, init, algorithm):
    t = time.perf_counter()
    km = KMeans(n_clusters=init.shape[0], init=init, n_init=1, algorithm=algorithm,
                max_iter=300, tol=1e-4).fit(X)
    return time.perf_counter() - t, km


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tsr-labels")
    a = ap.parse_args()
    X = np.load(os.path.join(a.dir, "X.npy"))
    truth = np.load(os.path.join(a.dir, "labels.npy"))
    init = np.load(os.path.join(a.dir, "init.npy")).astype(X.dtype)
    _, km = fit(X, init, "lloyd")  # warm: threadpool, first-touch of X
    for _ in range(a.rounds):
        for algorithm, one in (("lloyd", False), ("elkan", False), ("lloyd", True), ("elkan", True)):
            with threadpool_limits(limits=1 if one else None):
                t, m = fit(X, init, algorithm)
            print(f"peer sklearn-{algorithm}{'-1t' if one else ''} kmeans {t:.4f} inertia={m.inertia_:.9g} "
                  f"iterations={m.n_iter_} ari={adjusted_rand_score(truth, m.labels_):.4f}", flush=True)
    if a.tsr_labels:
        tsr = np.loadtxt(a.tsr_labels, skiprows=1, usecols=1, dtype=np.int64)
        print(f"labels equal to sklearn lloyd's: {int((tsr == km.labels_).sum())} of {len(tsr)}")


if __name__ == "__main__":
    main()
