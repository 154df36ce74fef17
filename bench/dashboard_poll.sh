#!/usr/bin/env bash
# bench/dashboard_poll.sh PORT PROGRAM ARGS... — runs PROGRAM while polling
# the scheduler's dashboard at 127.0.0.1:PORT once a second as the page does
# (/api/workers, /api/graphs, /api/tasks) plus /metrics; at the end prints
# build_s=, the event-loop seconds spent building snapshots. Used by
# bench/dashboard.sh under `tessera local`.
set -uo pipefail
port=$1
shift
( while :; do
    for p in /api/workers /api/graphs /api/tasks /metrics; do curl -s -o /dev/null "http://127.0.0.1:$port$p"; done
    sleep 1
  done ) &
poller=$!
"$@"
rc=$?
build=$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "tessera_dashboard_build_seconds_total" { print $2 }')
kill "$poller" 2>/dev/null
wait "$poller" 2>/dev/null
echo "tessera build_s=${build:-nan}"
exit $rc
