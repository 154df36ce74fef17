#!/usr/bin/env bash
# bench/scale.sh — the scheduler at scale: one graph of TASKS no-op leaves
# (reduced into one wanted root) on 10 .. 1,000 simulated workers that
# speak the real worker protocol (bench/scale.c). Prints, per worker
# count, ingest, submit-to-last-task time, scheduling decisions per
# second and the scheduler's memory per task; Dask's published figure for
# comparison (about 5 minutes to ingest 2.5 M tasks).
#
# Usage: bench/scale.sh [TASKS] [WORKERS]   (defaults 1000000 and 10,30,100,300,1000)
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${1:-1000000}
workers=${2:-10,30,100,300,1000}
cmd="${BIN:-build/bin}/tsr-bench-scale --tasks $tasks --workers $workers"
echo "# bench/scale  $(date -u +%Y-%m-%d)  $(nproc) cores  $(uname -m)  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# tessera: $cmd"
echo "# dask (published, not run here): ~5 min to ingest a 2.5 M-task graph, i.e. ~8,300 tasks/s"
$cmd
