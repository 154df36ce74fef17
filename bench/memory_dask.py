"""The Dask side of bench/memory.sh and bench/memory_issue.sh:
svd_compressed(k, n_power_iter) on LocalCluster(n_workers=2,
threads_per_worker=1, memory_limit=LIMIT) of either
  --input x2:        X2 = randint(0, 3, uint8) + 1, shared by every pass as
                     in tsr-memory-svd (bench/memory.sh), or
  --input persisted: the issue's seed code, X = randint(0, 3, uint8)
                     .persist() (X wholly in the workers' memory or spill
                     before the passes), then svd_compressed(X).
Prints svd_s (and gen_s for persisted) and the singular values."""
import argparse
import time

import dask
import dask.array as da
from dask.distributed import Client, LocalCluster


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=40000)
    p.add_argument("--cols", type=int, default=16000)
    p.add_argument("--chunk-rows", type=int, default=1000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--power-iters", type=int, default=2)
    p.add_argument("--memory-limit", default="1GiB")
    p.add_argument("--spill-dir", default=None)
    p.add_argument("--input", choices=["x2", "persisted"], default="x2")
    p.add_argument("--chunk-cols", type=int, default=0, help="0: all columns in one chunk")
    a = p.parse_args()
    cols_chunk = a.chunk_cols or a.cols
    with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=a.memory_limit,
                      local_directory=a.spill_dir, dashboard_address=None) as cluster, Client(cluster):
        t0 = time.monotonic()
        x = da.random.RandomState(42).randint(0, 3, size=(a.rows, a.cols), chunks=(a.chunk_rows, cols_chunk),
                                               dtype="u1")
        if a.input == "persisted":
            from dask.distributed import wait
            x = x.persist()
            wait(x)
            print(f"gen_s={time.monotonic() - t0:.3f}", flush=True)
        else:
            x = x + 1
        u, s, v = da.linalg.svd_compressed(x, k=a.k, n_power_iter=a.power_iters, seed=0)
        s, v = dask.compute(s, v)
        print(f"svd_s={time.monotonic() - t0:.3f} s=" + ",".join(f"{x:.10g}" for x in s), flush=True)


if __name__ == "__main__":
    main()
