#!/usr/bin/env bash
# bench/memory_issue.sh — the memory issue's acceptance run as a benchmark:
# tsr-svd, svd_compressed(k=10, n_power_iter=2) (six passes over X), of a
# PERSISTED uint8 X = randint(0, 3) (the seed's `x = ....persist()`) ten
# times larger than the sum of two workers' memory limits, on CPU workers;
# then the seed's code on Dask distributed, LocalCluster(n_workers=2,
# threads_per_worker=1, memory_limit=LIMIT), same machine, same run.
#
#   bench/memory_issue.sh [ROWS] [COLS] [LIMIT]     (defaults 1100000 20000 1GiB: X = 20.5 GiB)
#   env BIN=build/bin, CHUNKS=5000,5000, DASK_TIMEOUT=900 (s), SKIP_DASK=1
#
# Runs, each under bench/memory_run.py (worker peak RSS sampled every 50 ms,
# bytes written to storage by the whole process tree):
#  1. Tessera, in memory: the same SVD with X never stored (generation fused
#     into the passes; no limit). Its u, s, v are the reference: a persisted
#     X gives the same bits as the fused one (tile-order-independent kernels,
#     checked at 110,000 rows in bench/RESULTS.md), and an unlimited
#     persisted run would need X's 20 GiB in memory.
#  2. Tessera, X persisted, 2 workers x LIMIT: u, s, v compared byte for
#     byte with run 1; worker peak RSS against LIMIT; bytes written.
#  3. Dask, the seed's code with the same limits (stopped after DASK_TIMEOUT).
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-1100000}; cols=${2:-20000}; limit=${3:-1GiB}
chunks=${CHUNKS:-5000,5000}
bin=${BIN:-build/bin}
bench/setup-venv.sh >/dev/null
py=bench/.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/spill"
svd="$bin/tsr-svd --rows $rows --cols $cols --chunks $chunks --dtype u8 --dist randint:0:3 --k 10 --power-iters 2"
local_="$bin/tessera local --cpu-workers 2 --threads-per-worker 1"
echo "# bench/memory_issue  $(date -u +%Y-%m-%dT%H:%MZ)  $(nproc) cores  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# X: $rows x $cols uint8 = $(python3 -c "print(f'{$rows*$cols/2**30:.2f}')") GiB in chunks of $chunks; 2 workers x 1 thread x $limit"
echo "# command: bench/memory_issue.sh $rows $cols $limit"

report() {  # label, log: prints one line from tsr-svd's and memory_run.py's output
  local label=$1 log=$2
  local gen svd rss disk
  gen=$(grep -oE "^generation: [0-9.]+" "$log" | cut -d' ' -f2 || true)
  svd=$(grep -oE "^svd: [0-9.]+" "$log" | cut -d' ' -f2 || true)
  rss=$(grep -oE "worker_peak_rss_mb=[0-9]+" "$log" | cut -d= -f2 || true)
  disk=$(grep -oE "disk_written_mb=[0-9]+" "$log" | cut -d= -f2 || true)
  wall=$(grep -oE "wall_s=[0-9.]+" "$log" | cut -d= -f2 || true)
  printf "%-28s generation_s=%-8s svd_s=%-9s wall_s=%-8s worker_peak_rss_mb=%-6s disk_written_mb=%s\n" "$label" \
    "${gen:--}" "${svd:-FAILED}" "${wall:--}" "${rss:--}" "${disk:--}"
  [ -n "$svd" ] || tail -5 "$log" | sed 's/^/  /'
}

$py bench/memory_run.py tessera-worker $local_ -- $svd --save "$work/ref" >"$work/ref.log" 2>&1 || true
report "tessera in memory (fused)" "$work/ref.log"
$py bench/memory_run.py tessera-worker $local_ --memory-limit "$limit" \
  --worker-arg=--spill-dir --worker-arg="$work/spill" -- $svd --persist --save "$work/lim" --memory-report >"$work/lim.log" 2>&1 || true
report "tessera persisted, 2 x $limit" "$work/lim.log"
grep -E "^memory:" "$work/lim.log" | sed 's/^/  /' || true
same=yes
for f in s u v; do cmp -s "$work/ref_$f.npy" "$work/lim_$f.npy" || same=no; done
echo "bit-identical u, s, v (persisted under limits vs in memory): $same"
grep -E "^singular values" "$work/lim.log" | head -1

if [ "${SKIP_DASK:-0}" != 1 ]; then
  crow=${chunks%,*}; ccol=${chunks#*,}
  start=$(date +%s)
  timeout "${DASK_TIMEOUT:-900}" $py bench/memory_run.py spawn_main $py bench/memory_dask.py --input persisted \
    --rows "$rows" --cols "$cols" --chunk-rows "$crow" --chunk-cols "$ccol" --memory-limit "$limit" \
    --spill-dir "$work/spill" >"$work/dask.log" 2>&1 && rc=0 || rc=$?
  d=$(grep -oE "svd_s=[0-9.]+" "$work/dask.log" | cut -d= -f2 || true)
  g=$(grep -oE "gen_s=[0-9.]+" "$work/dask.log" | cut -d= -f2 || true)
  rss=$(grep -oE "worker_peak_rss_mb=[0-9]+" "$work/dask.log" | cut -d= -f2 || true)
  disk=$(grep -oE "disk_written_mb=[0-9]+" "$work/dask.log" | cut -d= -f2 || true)
  if [ -n "$d" ]; then
    printf "%-28s generation_s=%-8s total_s=%-9s worker_peak_rss_mb=%-6s disk_written_mb=%s\n" "dask persisted, 2 x $limit" \
      "${g:--}" "$d" "${rss:--}" "${disk:--}"
  else
    echo "dask persisted, 2 x $limit: did not finish (exit $rc after $(( $(date +%s) - start )) s)"
    grep -iE "error|killed|restart|exceed" "$work/dask.log" | sort | uniq -c | sort -rn | head -5 | cut -c1-200 | sed 's/^/  /'
  fi
fi
