#!/usr/bin/env bash
# bench/dashboard_cpu.sh CMD... — runs CMD (a `tessera local` command) and
# writes the CPU seconds (user + system) its tessera-scheduler child used
# to $TSR_BENCH_CPU_FILE, sampled from /proc just before it exits. Used by
# bench/dashboard.sh.
set -uo pipefail
"$@" &
local_pid=$!
tick=$(getconf CLK_TCK)
last=""
while kill -0 "$local_pid" 2>/dev/null; do
  sched=$(pgrep -P "$local_pid" -x tessera-schedul | head -n 1)
  if [ -n "$sched" ] && [ -r "/proc/$sched/stat" ]; then
    cpu=$(awk -v t="$tick" '{ print ($14 + $15) / t }' "/proc/$sched/stat" 2>/dev/null) && [ -n "$cpu" ] && last=$cpu
  fi
  sleep 0.2
done
wait "$local_pid"
rc=$?
echo "${last:-nan}" > "$TSR_BENCH_CPU_FILE"
exit $rc
