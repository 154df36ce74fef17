"""Dask distributed peer for bench/overhead: the same no-op shapes on a
LocalCluster with 2 worker processes. Prints lines in the same key=value
form as tsr-bench-overhead."""
import argparse
import statistics
import time

from dask.distributed import Client, LocalCluster, wait


def noop(*args):
    return None


def run_shape(client, shape, n):
    t0 = time.perf_counter()
    if shape == "independent":
        futures = client.map(noop, range(n), pure=False)
        wait(futures)
    elif shape == "chain":
        dsk = {f"c-0": (noop,)}
        for i in range(1, n):
            dsk[f"c-{i}"] = (noop, f"c-{i-1}")
        client.get(dsk, f"c-{n-1}")
    else:
        width = n // 2
        dsk = {f"t-0-{i}": (noop,) for i in range(width)}
        level = 0
        while width > 1:
            nxt = (width + 1) // 2
            for i in range(nxt):
                args = [f"t-{level}-{2*i}"] + ([f"t-{level}-{2*i+1}"] if 2 * i + 1 < width else [])
                dsk[f"t-{level+1}-{i}"] = (noop, *args)
            width, level = nxt, level + 1
        client.get(dsk, f"t-{level}-0")
    total = time.perf_counter() - t0
    tasks = n if shape != "tree" else None
    print(f"dask shape={shape} tasks={n} total_s={total:.4f} tasks_per_s={n/total:.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--shapes", default="independent,chain,tree")
    ap.add_argument("--reps", type=int, default=1000)
    args = ap.parse_args()
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    lat = []
    for i in range(args.reps):
        t0 = time.perf_counter()
        client.submit(noop, i, pure=False).result()
        lat.append(time.perf_counter() - t0)
    lat.sort()
    print(f"dask latency_median_us={statistics.median(lat)*1e6:.1f} p90_us={lat[len(lat)*9//10]*1e6:.1f} reps={args.reps}", flush=True)
    for shape in args.shapes.split(","):
        for n in args.sizes.split(","):
            run_shape(client, shape, int(n))
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
