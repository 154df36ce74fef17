#!/usr/bin/env bash
# bench/overhead.sh — no-op task throughput, round-trip latency and
# scheduler memory per task: Tessera (tessera local, 2 CPU workers) against
# Dask distributed (LocalCluster, 2 worker processes) on the same machine
# in the same run. Prints both and the ratios.
#
# Usage: bench/overhead.sh [TESSERA_SIZES] [DASK_SIZES]
#   defaults: 10000,100000,1000000 and 10000 (Dask manages ~500 tasks/s
#   here, so 10^6 tasks would take half an hour; the ratio is taken at the
#   sizes both ran).
set -euo pipefail
cd "$(dirname "$0")/.."
tsizes=${1:-10000,100000,1000000}
dsizes=${2:-10000}
bench/setup-venv.sh >/dev/null
cmd_t="${BIN:-build/bin}/tessera local --cpu-workers 2 --threads-per-worker 1 -- ${BIN:-build/bin}/tsr-bench-overhead --sizes $tsizes"
cmd_d="bench/.venv/bin/python bench/overhead_dask.py --sizes $dsizes"
echo "# bench/overhead  $(date -u +%Y-%m-%d)  $(nproc) cores  $(uname -m)"
echo "# tessera: $cmd_t"
echo "# dask:    $cmd_d   (dask $(bench/.venv/bin/python -c 'import dask; print(dask.__version__)'))"
out=$(mktemp -d)
$cmd_t | tee "$out/t.txt"
$cmd_d 2>/dev/null | tee "$out/d.txt"
python3 - "$out/t.txt" "$out/d.txt" <<'PY'
import sys
def parse(path):
    rows = []
    for line in open(path):
        parts = line.split()
        rows.append({k: v for k, v in (p.split("=", 1) for p in parts[1:] if "=" in p)})
    return rows
t, d = parse(sys.argv[1]), parse(sys.argv[2])
lat_t = next(r for r in t if "latency_median_us" in r)
lat_d = next(r for r in d if "latency_median_us" in r)
print(f"ratio latency: dask/tessera = {float(lat_d['latency_median_us'])/float(lat_t['latency_median_us']):.1f}x")
for rd in d:
    if "shape" not in rd: continue
    rt = next((r for r in t if r.get("shape") == rd["shape"] and r.get("tasks") and abs(int(r["tasks"]) - int(rd["tasks"])) <= 10), None)
    if rt:
        print(f"ratio throughput {rd['shape']} {rd['tasks']}: tessera/dask = {float(rt['tasks_per_s'])/float(rd['tasks_per_s']):.0f}x")
PY
rm -rf "$out"
