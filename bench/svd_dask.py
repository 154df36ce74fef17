"""Dask peer for bench/svd_cpu: the blog's randomized SVD, timed.

  x = da.random.random(size=(N, 20_000), chunks=(20_000, 5_000))
  u, s, v = da.linalg.svd_compressed(x, k=10)
  v.compute()

--scheduler threads (the default threaded scheduler) or distributed
(LocalCluster, --workers processes). --dtype u8 uses randint(0, 3)."""
import argparse
import time

import dask
import dask.array as da
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--cols", type=int, default=20_000)
    ap.add_argument("--chunks", default="20000,5000")
    ap.add_argument("--dtype", default="f64", choices=["f64", "u8"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--power-iters", type=int, default=0)
    ap.add_argument("--scheduler", default="threads", choices=["threads", "distributed"])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    chunks = tuple(int(c) for c in args.chunks.split(","))
    client = None
    if args.scheduler == "distributed":
        from dask.distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=args.workers, threads_per_worker=2 // args.workers or 1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    shape = (args.rows, args.cols)
    t0 = time.perf_counter()
    if args.dtype == "f64":
        x = da.random.random(size=shape, chunks=chunks)
    else:
        x = da.random.randint(0, 3, size=shape, chunks=chunks, dtype=np.uint8)
    u, s, v = da.linalg.svd_compressed(x, k=args.k, n_power_iter=args.power_iters)
    v = v.compute()   # exactly the blog's measurement: only v is computed
    total = time.perf_counter() - t0
    print(f"dask scheduler={args.scheduler} rows={args.rows} dtype={args.dtype} svd_s={total:.2f} "
          f"v00={float(v[0, 0]):.6g}", flush=True)
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()
