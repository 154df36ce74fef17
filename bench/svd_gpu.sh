#!/usr/bin/env bash
# bench/svd_gpu.sh — randomized SVD (k=10) of an N x 20,000 uint8 genotype
# matrix (randint 0..2) on one GPU, same machine, same run:
#   1. the seed's Dask + CuPy code (bench/svd_gpu_dask.py), N = 1M and 4M,
#      against Tessera on `tessera local --gpus 0` on the same shapes:
#      tsr-svd-gpu, i.e. tsr_svd_compressed through the public API on X
#      persisted 2-bit packed (tsr_compress) or as u8 — f64 thin matrices,
#      the products on int8 tensor cores (the library folds the stored
#      blocks into matmul_chain) — with Dask's chunks (20,000, 5,000) and
#      with larger ones, --packed-chunks;
#   2. one pass X @ Om by a CuPy chunk loop and a PyTorch loop (fp32, bf16)
#      (bench/svd_gpu_torch.py), against Tessera's whole SVD;
#   3. 10,000,000 x 20,000 (200 GB as u8), kept 2-bit packed (50 GB), k=10,
#      checked against the f64 answer.
# Generation and SVD are timed apart; Tessera's times are the best of
# --repeat runs in one cluster (warm), Dask's the best of two runs (warm).
# Every packed run is checked against the f64 answer (--check).
#
# Usage (on the GPU machine, from the repository root, after
# scripts/device-tests.sh has put the binaries on PATH):
#   bash bench/svd_gpu.sh [--rows "1000000 4000000"] [--big 10000000] [--packed-chunks "20000,5000 100000,20000"]
#                         [--repeat 3] [--packed-dtype f64|f32] [--skip-dask] [--skip-loops] [--skip-u8] [--skip-8streams]
set -uo pipefail
cd "$(dirname "$0")/.."
rows="1000000 4000000" big=10000000 dask=1 loops=1 u8=1 streams8=1 repeat=3 pdt=f64
pchunks="20000,5000 100000,20000"
while [ $# -gt 0 ]; do
  case $1 in
    --rows) rows=$2; shift ;;
    --big) big=$2; shift ;;
    --packed-chunks) pchunks=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --packed-dtype) pdt=$2; shift ;;
    --skip-dask) dask=0 ;;
    --skip-loops) loops=0 ;;
    --skip-u8) u8=0 ;;
    --skip-8streams) streams8=0 ;;
    *) echo "svd_gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
command -v tessera >/dev/null || export PATH="$PWD/build-device/bin:$PATH"
results=$(mktemp)
gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)
echo "# bench/svd_gpu  $(date -u +%Y-%m-%d)  GPU: $gpu  $(nproc) cores"
echo "# dask:    python3 bench/svd_gpu_dask.py --rows $rows --repeat 2"
echo "# loops:   python3 bench/svd_gpu_torch.py --rows $rows"
echo "# tessera: tessera local --gpus 0 -- tsr-svd-gpu --rows N --cols 20000 --chunks 100000,20000 --k 10 --mode u8 --repeat $repeat --check"
echo "#          tessera local --gpus 0 -- tsr-svd-gpu --rows N --cols 20000 --chunks R,C --k 10 --mode packed --repeat $repeat --check   (R,C in: $pchunks)"
echo "#          tessera local --gpus 0 -- tsr-svd-gpu --rows $big --cols 20000 --chunks 100000,20000 --k 10 --mode packed --repeat 2 --check"

step() {  # label, timeout seconds, command...
  local label=$1 limit=$2; shift 2
  echo "== $label" | tee -a "$results.raw"
  local start=$(date +%s)
  timeout "$limit" "$@" 2>&1 | tee -a "$results.raw"
  local rc=${PIPESTATUS[0]}
  echo "== $label: exit $rc, $(( $(date +%s) - start )) s"
}

if [ $dask = 1 ]; then
  step dask 300 python3 bench/svd_gpu_dask.py --rows $rows --repeat 2
fi
if [ $loops = 1 ]; then
  step loops 240 python3 bench/svd_gpu_torch.py --rows $rows
fi
for n in $rows; do
  if [ $u8 = 1 ]; then
    step "tessera-u8-100000x20000 $n" 240 tessera local --gpus 0 -- tsr-svd-gpu --rows "$n" --cols 20000 \
      --chunks 100000,20000 --k 10 --mode u8 --repeat "$repeat" --check
  fi
  for ch in $pchunks; do
    step "tessera-packed-${ch/,/x}-$pdt $n" 240 tessera local --gpus 0 -- tsr-svd-gpu --rows "$n" --cols 20000 \
      --chunks "$ch" --k 10 --mode packed --repeat "$repeat" --check
  done
done
# the same with 8 streams (executor threads) on the GPU worker instead of 4
if [ $streams8 = 1 ]; then
  n=${rows##* } ch=${pchunks##* }
  step "tessera-packed-${ch/,/x}-$pdt-8streams $n" 240 tessera local --gpus 0 --worker-arg --threads --worker-arg 8 -- \
    tsr-svd-gpu --rows "$n" --cols 20000 --chunks "$ch" --k 10 --mode packed --repeat "$repeat"
fi
if [ -n "$big" ] && [ "$big" != 0 ]; then
  step "tessera-packed-100000x20000-$pdt $big" 420 tessera local --gpus 0 -- tsr-svd-gpu --rows "$big" --cols 20000 \
    --chunks 100000,20000 --k 10 --mode packed --repeat 2 --check
fi

# ---- summary: best (warm) times, the f64 checks and the ratios ----
python3 - "$results.raw" "$rows" "$big" <<'PY'
import re, sys
raw = open(sys.argv[1]).read().splitlines()
sizes = [int(s) for s in sys.argv[2].split()] + ([int(sys.argv[3])] if sys.argv[3] not in ("", "0") else [])
best, checks, labels = {}, {}, []
def keep(key, gen, svd):
    if key[0] not in labels:
        labels.append(key[0])
    if key not in best or gen + svd < sum(best[key]):
        best[key] = (gen, svd)
label, step, n = None, None, 0
for line in raw:
    m = re.match(r"dask (\d+) \d+ gen_s=([\d.]+) svd_s=([\d.]+)", line)
    if m: keep(("dask", int(m[1])), float(m[2]), float(m[3]))
    m = re.match(r"loop (\S+) (\d+) pass_s=([\d.]+)", line)
    if m: best[(m[1], int(m[2]))] = (0.0, float(m[3]))
    m = re.match(r"== (tessera-\S+) \d+$", line)
    if m: step = m[1]
    m = re.match(r"tsr-svd-gpu (\d+) x", line)
    if m: label, n = step, int(m[1])
    m = re.match(r"run \d+: generation ([\d.]+) s, svd ([\d.]+) s", line)
    if m and label: keep((label, n), float(m[1]), float(m[2]))
    m = re.match(r"check: .*max error s ([\d.e+-]+), v ([\d.e+-]+)", line)
    if m and label: checks[(label, n)] = (float(m[1]), float(m[2]))
tessera = [l for l in labels if l.startswith("tessera")]
print()
print(f"{'N':>10} {'what':<36} {'gen_s':>8} {'svd_s':>8} {'total_s':>8}")
for n in sizes:
    for what in ["dask"] + tessera + ["cupy", "torch-fp32", "torch-bf16"]:
        if (what, n) in best:
            g, s = best[(what, n)]
            print(f"{n:>10} {what:<36} {g:>8.3f} {s:>8.3f} {g + s:>8.3f}")
    for (what, m), (es, ev) in checks.items():
        if m == n:
            print(f"{n:>10} {what:<36} check vs f64: s {es:.2e}, v {ev:.2e} ({'OK' if max(es, ev) <= 1e-4 else 'above 1e-4'})")
print()
for n in sizes:
    for t in tessera:
        if (t, n) not in best:
            continue
        g, s = best[(t, n)]
        if ("dask", n) in best:
            dg, ds = best[("dask", n)]
            print(f"ratio dask/{t} N={n}: generation {dg / g:.1f}x, svd {ds / s:.1f}x, total {(dg + ds) / (g + s):.1f}x (target >= 10x)")
        for loop, target in (("cupy", 3), ("torch-fp32", None), ("torch-bf16", 1.5)):
            if (loop, n) in best:
                lp = best[(loop, n)][1]
                tt = f" (target >= {target}x)" if target else ""
                print(f"ratio {loop}-one-pass/{t}-svd N={n}: {lp / s:.2f}x{tt}")
if sys.argv[3] not in ("", "0"):
    key = next((k for k in best if k[1] == sizes[-1] and k[0].startswith("tessera-packed-100000x20000")), None)
    if key is not None:
        g, s = best[key]
        print(f"{sizes[-1]} x 20000 packed: generation + svd {g + s:.3f} s (target <= 2 s), svd {s:.3f} s (target <= 1 s)")
PY
rm -f "$results" "$results.raw"
