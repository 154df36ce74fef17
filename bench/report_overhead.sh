#!/usr/bin/env bash
# What recording an efficiency report (--report, docs/report.md) costs a run:
# tsr-svd with and without --report FILE.json, alternated, ROUNDS rounds, on
# the same `tessera local` cluster shape. Prints tsr-svd's own "svd: S s"
# (the compute, where the sampling thread runs alongside) and the whole run's
# wall time (which includes the recorder's ~1 s settle for the last heartbeat),
# the median of each, and the ratio with / without.
#
#   BIN=build-cpu/bin bench/report_overhead.sh [ROUNDS] [ROWS]
#   # each run: tessera local --cpu-workers 2 --threads-per-worker 1 -- \
#   #   tsr-svd --rows ROWS --cols 400 --chunks 2000,400 --k 5 --power-iters 2 --no-progress [--report r.json]
set -euo pipefail
bin=$(cd "${BIN:-build-cpu/bin}" && pwd)
rounds=${1:-5}
rows=${2:-400000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# BIN=$bin bench/report_overhead.sh $rounds $rows   (load: $(cut -d' ' -f1-3 /proc/loadavg))"
run() {  # run LABEL [EXTRA...]: prints "LABEL svd_s wall_s"
  local label=$1; shift
  local t0 t1 svd
  t0=$(date +%s.%N)
  "$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 -- "$bin/tsr-svd" --rows "$rows" --cols 400 \
    --chunks 2000,400 --k 5 --power-iters 2 --no-progress "$@" >"$tmp/out" 2>"$tmp/err"
  t1=$(date +%s.%N)
  svd=$(sed -n 's/^svd: \([0-9.]*\) s$/\1/p' "$tmp/out")
  echo "$label $svd $(echo "$t1 - $t0" | bc -l)"
}
for r in $(seq "$rounds"); do
  run plain
  run report --report "$tmp/r.json"
done | tee "$tmp/all"
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
for col in 2 3; do
  name=$([ $col = 2 ] && echo "svd step" || echo "whole run")
  p=$(awk -v c=$col '$1=="plain" {print $c}' "$tmp/all" | median)
  q=$(awk -v c=$col '$1=="report" {print $c}' "$tmp/all" | median)
  printf 'median %s: plain %.3f s, --report %.3f s: report/plain = %.2fx\n' "$name" "$p" "$q" "$(echo "$q / $p" | bc -l)"
done
