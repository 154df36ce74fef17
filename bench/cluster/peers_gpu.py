"""The GPU peer of bench/cluster/gpu.sh: exact kNN by PyTorch in blocks
on one GPU, the brute-force method cuML's NearestNeighbors(algorithm=
"brute") and FAISS's IndexFlatL2 use (their wheels are too large to carry
to the device machine: bench/RESULTS.md).

    python peers_gpu.py DIR [--neighbors 15] [--block 2048]

DIR/X.npy (f32). Prints "peer torch knn <seconds>" for a warm run (the
first run, untimed, loads cuBLAS and allocates), the data already on the
GPU as a RAPIDS user's would be, and the result copied back to the host.
Distances by |x|^2 + |y|^2 - 2 x.y in f32, top-k per block with topk.
"""
import argparse
import os
import time

import numpy as np
import torch


def knn(X, k, block):
    n = X.shape[0]
    sq = (X * X).sum(1)
    idx = torch.empty((n, k), dtype=torch.int64, device=X.device)
    dist = torch.empty((n, k), dtype=torch.float32, device=X.device)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        d = sq[lo:hi, None] + sq[None, :] - 2.0 * (X[lo:hi] @ X.T)
        v, i = torch.topk(d, k, dim=1, largest=False, sorted=True)
        idx[lo:hi], dist[lo:hi] = i, v.clamp_min_(0).sqrt_()
    return idx.cpu().numpy(), dist.cpu().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--neighbors", type=int, default=15)
    ap.add_argument("--block", type=int, default=2048)
    a = ap.parse_args()
    X = torch.from_numpy(np.load(os.path.join(a.dir, "X.npy"))).cuda()
    knn(X[:50000], a.neighbors, a.block)
    torch.cuda.synchronize()
    t = time.perf_counter()
    idx, _ = knn(X, a.neighbors, a.block)
    torch.cuda.synchronize()
    print(f"peer torch knn {time.perf_counter() - t:.3f}", flush=True)
    np.save(os.path.join(a.dir, "torch_knn.npy"), idx)


if __name__ == "__main__":
    main()
