#!/usr/bin/env bash
# bench/memory.sh — the out-of-memory randomized SVD (k=10, n_power_iter=2:
# six passes over X2) of a materialized uint8 X2 = randint(0,3) + 1 on two
# memory-limited workers of one thread: Tessera without limits (the
# reference: time and result hash), Tessera with each limit in
# TESSERA_LIMITS, and Dask distributed with LocalCluster(n_workers=2,
# memory_limit=DASK_LIMIT), same machine, same run. Prints per run the wall
# time, the peak RSS of the largest worker process, the bytes written to
# disk by the whole process tree, and the ratios Dask/Tessera at the same
# limit. Dask's workers need ~150 MiB before holding any data, so limits
# under ~256 MiB are for Tessera only.
#
# Usage: bench/memory.sh [ROWS] [COLS] [CHUNK_ROWS]   (defaults 80000 16000 1000)
#   env TESSERA_LIMITS="64MiB 256MiB", DASK_LIMIT=256MiB, BIN=build/bin
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-80000}; cols=${2:-16000}; chunk=${3:-1000}
limits=${TESSERA_LIMITS:-64MiB 256MiB}
dask_limit=${DASK_LIMIT:-256MiB}
bin=${BIN:-build/bin}
bench/setup-venv.sh >/dev/null
py=bench/.venv/bin/python
spill=$(mktemp -d)
trap 'rm -rf "$spill"' EXIT
svd="$bin/tsr-memory-svd --rows $rows --cols $cols --chunk-rows $chunk"
echo "# bench/memory  $(date -u +%Y-%m-%dT%H:%MZ)  $(nproc) cores  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# X2: $rows x $cols uint8 = $(python3 -c "print(f'{$rows*$cols/2**30:.2f}')") GiB in chunks of $chunk rows; 2 workers x 1 thread"
run() {  # label, worker-name, command...
  local label=$1 name=$2; shift 2
  local out; out=$($py bench/memory_run.py "$name" "$@" 2>&1 | grep -E "svd_s=|worker_peak_rss_mb=|rror" | tr '\n' ' ')
  local wall rss disk hash
  wall=$(echo "$out" | grep -oE "svd_s=[0-9.]+" | cut -d= -f2)
  rss=$(echo "$out" | grep -oE "worker_peak_rss_mb=[0-9]+" | cut -d= -f2)
  disk=$(echo "$out" | grep -oE "disk_written_mb=[0-9]+" | cut -d= -f2)
  hash=$(echo "$out" | grep -oE "hash=[0-9a-f]+" | cut -d= -f2)
  printf "%-24s wall_s=%-9s worker_peak_rss_mb=%-6s disk_written_mb=%-7s %s\n" "$label" "${wall:-FAILED}" "$rss" "$disk" \
    "${hash:+hash=$hash}"
  [ -n "$wall" ] || echo "  $out" | cut -c1-400
  echo "$label ${wall:-0} ${rss:-0} ${disk:-0}" >> "$results"
}
results=$(mktemp)
run tessera-unlimited tessera-worker $bin/tessera local --cpu-workers 2 --threads-per-worker 1 -- $svd
for l in $limits; do
  run "tessera-$l" tessera-worker $bin/tessera local --cpu-workers 2 --threads-per-worker 1 --memory-limit "$l" \
    --worker-arg=--spill-dir --worker-arg="$spill" -- $svd
done
run "dask-$dask_limit" "spawn_main" timeout 900 $py bench/memory_dask.py --rows "$rows" --cols "$cols" \
  --chunk-rows "$chunk" --memory-limit "$dask_limit" --spill-dir "$spill"
python3 - "$results" "$dask_limit" <<'PY'
import sys
rows = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in open(sys.argv[1]) if len(l.split()) == 4}
t, d = rows.get("tessera-" + sys.argv[2]), rows.get("dask-" + sys.argv[2])
if t and d and t[0] > 0 and d[0] > 0:
    print(f"ratio dask/tessera at {sys.argv[2]}: time {d[0] / t[0]:.2f}x, worker peak RSS {d[1] / max(t[1], 1):.2f}x, "
          f"disk written {d[2] / max(t[2], 1):.2f}x")
PY
rm -f "$results"
