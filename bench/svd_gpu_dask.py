"""The seed's randomized SVD on Dask + CuPy, on one GPU (bench/svd_gpu.sh).

    python3 bench/svd_gpu_dask.py --rows 1000000 4000000 --repeat 2

Exactly the seed's code (Dask's default threaded scheduler, CuPy chunks):
    rs = da.random.RandomState(RandomState=cupy.random.RandomState)
    x = rs.randint(0, 3, size=(N, 20_000), chunks=(20_000, 5_000), dtype="uint8").persist()
    u, s, v = da.linalg.svd_compressed(x, k=10, seed=rs)
    v.compute()
timed in two parts (generation = the persist, svd = v.compute()), each
ended by a device synchronize. Prints one line per run:
    dask N RUN gen_s=G svd_s=S
The first run of a size includes CuPy's kernel compilation (cold); the
driver reports the best of the runs (warm)."""
import argparse
import gc
import time

import cupy
import dask
import dask.array as da


def one_run(n):
    sync = cupy.cuda.Device().synchronize
    rs = da.random.RandomState(RandomState=cupy.random.RandomState)
    t0 = time.perf_counter()
    x = rs.randint(0, 3, size=(n, 20_000), chunks=(20_000, 5_000), dtype="uint8").persist()
    sync()
    t1 = time.perf_counter()
    u, s, v = da.linalg.svd_compressed(x, k=10, seed=rs)
    vv = v.compute()
    sync()
    t2 = time.perf_counter()
    sv = s.compute()
    del x, u, s, v, vv
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    return t1 - t0, t2 - t1, cupy.asnumpy(sv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    print(f"# dask {dask.__version__}, cupy {cupy.__version__}, {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    for n in a.rows:
        for r in range(a.repeat):
            g, s, sv = one_run(n)
            print(f"dask {n} {r} gen_s={g:.3f} svd_s={s:.3f} s0={sv[0]:.6g}", flush=True)


if __name__ == "__main__":
    main()
