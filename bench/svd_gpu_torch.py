"""One pass Y = X @ Om over a resident N x 20,000 uint8 X in chunks of
(20,000, 5,000), Om 20,000 x 20: the CuPy chunk loop (astype + matmul) and
a PyTorch loop (convert + GEMM, fp32 and bf16). bench/svd_gpu.sh compares
Tessera's whole SVD (two such passes and the rest) against one pass here.

    python3 bench/svd_gpu_torch.py --rows 1000000 4000000

Prints per size:  loop NAME N pass_s=T   (median of 5 after 2 warm-ups,
CUDA events around each pass)."""
import argparse
import gc
import statistics

import cupy
import torch

R, C, COLS, L = 20_000, 5_000, 20_000, 20


def timed(fn, reps=5, warm=2):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def torch_loops(n):
    g = torch.Generator(device="cuda").manual_seed(1)
    xs = [[torch.randint(0, 3, (R, C), dtype=torch.uint8, device="cuda", generator=g) for _ in range(COLS // C)]
          for _ in range(n // R)]
    om = torch.randn(COLS, L, device="cuda", generator=g)
    oms = {torch.float32: [om[j * C:(j + 1) * C] for j in range(COLS // C)]}
    oms[torch.bfloat16] = [o.to(torch.bfloat16) for o in oms[torch.float32]]
    y = torch.empty(n, L, device="cuda")
    out = {}
    for name, dt in (("torch-fp32", torch.float32), ("torch-bf16", torch.bfloat16)):
        def one_pass():
            for i, row in enumerate(xs):
                acc = None
                for j, x in enumerate(row):
                    p = x.to(dt) @ oms[dt][j]
                    acc = p if acc is None else acc + p
                y[i * R:(i + 1) * R] = acc
        out[name] = timed(one_pass)
    del xs, y
    gc.collect()
    torch.cuda.empty_cache()
    return out


def cupy_loop(n):
    rs = cupy.random.RandomState(1)
    xs = [[rs.randint(0, 3, size=(R, C), dtype=cupy.uint8) for _ in range(COLS // C)] for _ in range(n // R)]
    oms = [cupy.asarray(rs.standard_normal((C, L)), dtype=cupy.float32) for _ in range(COLS // C)]
    y = cupy.empty((n, L), dtype=cupy.float32)

    def one_pass():
        for i, row in enumerate(xs):
            acc = None
            for j, x in enumerate(row):
                p = x.astype(cupy.float32) @ oms[j]
                acc = p if acc is None else acc + p
            y[i * R:(i + 1) * R] = acc
    # torch's events time cupy's work on the same (legacy default) stream
    t = timed(lambda: (one_pass(), cupy.cuda.Device().synchronize()))
    del xs, y
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    a = ap.parse_args()
    print(f"# torch {torch.__version__}, cupy {cupy.__version__}, {torch.cuda.get_device_name(0)}")
    for n in a.rows:
        print(f"loop cupy {n} pass_s={cupy_loop(n):.4f}", flush=True)
        for name, t in torch_loops(n).items():
            print(f"loop {name} {n} pass_s={t:.4f}", flush=True)


if __name__ == "__main__":
    main()
