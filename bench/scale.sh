#!/usr/bin/env bash
# bench/scale.sh — the scheduler at scale: one graph of TASKS no-op leaves
# (reduced into one wanted root) on 10 .. 1,000 simulated workers that
# speak the real worker protocol (bench/scale.c). Prints, per worker
# count, ingest, submit-to-last-task time, scheduling decisions per
# second and the scheduler's memory per task; Dask's published figure for
# comparison (about 5 minutes to ingest 2.5 M tasks).
#
# Usage: bench/scale.sh [TASKS] [WORKERS]   (defaults 1000000 and 10,30,100,300,1000)
#   BIN=DIR       where tsr-bench-scale and tessera-scheduler are (build/bin)
#   BASELINE=EXE  another tessera-scheduler (e.g. a build of the commit
#                 before a change): each point runs on it too, right after
#                 the point on BIN's, with lines labelled "baseline"
#   TESSERA_HEARTBEAT_TIMEOUT=DUR  read by the scheduler (peers silent this
#                 long are dropped) and the client (the scheduler silent this
#                 long is lost); default 10s, which a 10^7-task run no longer
#                 needs raised (the submit is admitted in slices, issue 13);
#                 the header prints the value used.
# Each output line ends with the scheduler's "admitted in" seconds and its
# longest logged loop iteration (iterations of 0.5 s or more are printed
# on stderr with where the time went).
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${1:-1000000}
workers=${2:-10,30,100,300,1000}
bin=${BIN:-build/bin}
cmd="$bin/tsr-bench-scale --tasks $tasks"
echo "# bench/scale  $(date -u +%Y-%m-%d)  $(nproc) cores  $(uname -m)  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# tessera: $cmd --workers $workers"
[ -n "${BASELINE:-}" ] && echo "# baseline: $cmd --workers N --scheduler $BASELINE --label baseline (after each tessera point)"
echo "# TESSERA_HEARTBEAT_TIMEOUT=${TESSERA_HEARTBEAT_TIMEOUT:-unset (10s)}"
echo "# dask (published, not run here): ~5 min to ingest a 2.5 M-task graph, i.e. ~8,300 tasks/s"
for n in ${workers//,/ }; do
  $cmd --workers "$n"
  [ -n "${BASELINE:-}" ] && $cmd --workers "$n" --scheduler "$BASELINE" --label baseline
done
exit 0
