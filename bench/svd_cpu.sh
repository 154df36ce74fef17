#!/usr/bin/env bash
# bench/svd_cpu.sh — randomized SVD (k=10) of an N x 20,000 random matrix in
# chunks of (20,000, 5,000): Dask (threaded and distributed schedulers)
# against Tessera (tessera local with 1 worker x 2 threads and 2 workers x 1
# thread), same machine, same run. Prints wall time, peak RSS of all
# processes together, and the ratios.
#
# Usage: bench/svd_cpu.sh [ROWS] [DTYPE]    (defaults: 200000 f64; DTYPE f64|u8)
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-200000}
dtype=${2:-f64}
bench/setup-venv.sh >/dev/null
py=bench/.venv/bin/python
dist=uniform; [ "$dtype" = u8 ] && dist=randint:0:3
tsvd="${BIN:-build/bin}/tsr-svd --rows $rows --cols 20000 --chunks 20000,5000 --dtype $dtype --dist $dist --k 10"
echo "# bench/svd_cpu  $(date -u +%Y-%m-%d)  $(nproc) cores  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# dask $($py -c 'import dask; print(dask.__version__)'): $py bench/svd_dask.py --rows $rows --dtype $dtype --scheduler threads|distributed"
echo "# tessera: ${BIN:-build/bin}/tessera local --cpu-workers 1|2 --threads-per-worker 2|1 -- $tsvd"
run() {  # label, command...
  local label=$1; shift
  local out; out=$($py bench/peakrss.py "$@" 2>&1 | grep -E "svd_s=|^svd:|peak_rss_mb=" | tr '\n' ' ' || true)
  local wall rss
  wall=$(echo "$out" | grep -oE "(svd_s=|svd: )[0-9.]+" | grep -oE "[0-9.]+$" | head -1)
  rss=$(echo "$out" | grep -oE "peak_rss_mb=[0-9]+" | cut -d= -f2)
  if [ -z "$wall" ]; then
    printf "%-28s FAILED (no result; rerun it alone to see why)\n" "$label"
    return 0
  fi
  printf "%-28s wall_s=%-8s peak_rss_mb=%s\n" "$label" "$wall" "$rss"
  echo "$label $wall $rss" >> "$results"
}
results=$(mktemp)
run dask-threads        $py bench/svd_dask.py --rows "$rows" --dtype "$dtype" --scheduler threads
run dask-distributed    $py bench/svd_dask.py --rows "$rows" --dtype "$dtype" --scheduler distributed --workers 2
run tessera-1x2         ${BIN:-build/bin}/tessera local --cpu-workers 1 --threads-per-worker 2 -- $tsvd
run tessera-2x1         ${BIN:-build/bin}/tessera local --cpu-workers 2 --threads-per-worker 1 -- $tsvd
python3 - "$results" <<'PY'
import sys
rows = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(sys.argv[1]) if len(l.split()) == 3}
best = min((rows[k] for k in rows if k.startswith("tessera")), key=lambda r: r[0])
for peer in ("dask-threads", "dask-distributed"):
    if peer in rows:
        print(f"ratio {peer}/tessera: time {rows[peer][0] / best[0]:.1f}x, peak memory {rows[peer][1] / best[1]:.1f}x")
PY
rm -f "$results"
