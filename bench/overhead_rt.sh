#!/usr/bin/env bash
# bench/overhead_rt.sh — issue 13's round trip: the floor under it and where
# its time goes. In one run: (1) the bare topology (client -> relay ->
# worker -> relay -> client, and a 2-leg ping-pong) over ZeroMQ and over
# TCP + epoll (tsr-bench-pingpong); (2) bench/overhead's command with the
# BASE build and this build alternately, PAIRS times; (3) one traced run
# of each (TESSERA_RTTRACE, bench/overhead_trace.py: the median of every
# hop), when TRACE_BASE names a base build that has the stamps.
#
# Usage: BASE=/work/main/build-cpu/bin [BIN=build-cpu/bin] [PAIRS=3] [TRACE_BASE=dir/bin] bench/overhead_rt.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-build-cpu/bin}
base=${BASE:?BASE=<bin dir of the build to compare with>}
pairs=${PAIRS:-3}
args="--sizes 100000,1000000 --shapes independent --reps 1000"
echo "# bench/overhead_rt  $(date -u '+%Y-%m-%d %H:%M')  $(nproc) cores  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# floor:  $bin/tsr-bench-pingpong --transport zmq|tcp|unix --legs 2|4 --reps 5000"
echo "# runs:   PATH=<bin>:\$PATH tessera local --cpu-workers 2 --threads-per-worker 1 -- <bin>/tsr-bench-overhead $args"
for t in zmq tcp unix; do
  for l in 2 4; do "$bin/tsr-bench-pingpong" --transport "$t" --legs "$l" --reps 5000; done
done
run() {   # label bindir [env...]
  local label=$1 dir=$2
  shift 2
  echo "## $label ($dir) load $(cut -d' ' -f1 /proc/loadavg)"
  local cli=$dir/tessera
  [ -x "$cli" ] || cli=$bin/tessera   # a tree built without the CLI: ours starts its daemons (found on PATH)
  env "$@" PATH="$dir:$PATH" "$cli" local --cpu-workers 2 --threads-per-worker 1 -- \
    "$dir/tsr-bench-overhead" $args 2>/dev/null | grep -E "latency|tasks=|bytes_per_task"
}
for i in $(seq 1 "$pairs"); do
  run base "$base"
  run after "$bin"
done
tmp=$(mktemp -d)
for side in base after; do
  dir=$bin
  if [ $side = base ]; then dir=${TRACE_BASE:-}; fi
  [ -n "$dir" ] || continue
  run "$side traced" "$dir" TESSERA_RTTRACE="$tmp/$side"
  bench/overhead_trace.py "$tmp/$side" --label "$side"
done
"$bin/tsr-bench-pingpong" --transport zmq --legs 4 --reps 5000
rm -rf "$tmp"
