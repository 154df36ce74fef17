#!/usr/bin/env bash
# bench/hosts/transfer.sh — worker-to-worker chunk transfer across a veth
# link, against iperf3 (Debian's) on the same link, in the same run.
#
#   sudo bench/hosts/transfer.sh [BIN_DIR] [CHUNKS] [MIB] [REPEATS] [TRANSPORTS]
#   sudo bench/hosts/transfer.sh build-cpu/bin 16 64 5     # the recorded run
#
# Hosts (network namespaces on a switch, tests/hosts/netns.sh): sched (the
# scheduler), a and b (a worker each, --threads 1), client. The peer:
# iperf3 -c from a to an iperf3 -s on b, one TCP stream, CHUNKS x MIB MiB
# (-n). Tessera: tsr-hosts-client transfer (tests/hosts/hosts_client.c):
# CHUNKS chunks of MIB MiB made and kept on worker a, a's task slots held
# by two sleeping tasks, then one `noop` task per chunk, which only b can
# run: b fetches every chunk from a, one after another. Its number is the
# bytes over that graph's wall time (scheduling round trips included).
# Also printed: one chunk gathered by the client from a (worker-to-client).
# Each side runs REPEATS times, alternating; medians and bests compared,
# and one fetch's own time (b's debug log) against iperf3's median.
# TRANSPORTS (default "zmq ucx ucx-cold"): the Tessera runs, one per
# transport after each iperf3 run: both workers `--transport T`, the client
# TESSERA_TRANSPORT=T; ucx-nopool is ucx with TESSERA_RECV_POOL=0 (every
# chunk received into a fresh buffer, as before the receive pool);
# ucx-cold is ucx without warming (TESSERA_RECV_POOL_WARM=0,
# TESSERA_FETCH_AHEAD=off: b's first buffers and its connection to a are
# made inside its first fetches, as before warming; docs/transport.md). UCX runs with UCX_TLS=tcp (the link under test:
# UCX would otherwise move the bytes through shared memory between the
# namespaces, which share one kernel) and receives into the worker's
# receive pool (docs/transport.md). KEEP_LOGS=DIR keeps b's debug log of
# each run there (where each fetch's time went).
# Needs root, iproute2 and iperf3 (scripts/install-deps.sh --deploy).
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$src/build/bin}" && pwd) || exit 2
chunks=${2:-16} mib=${3:-64} repeats=${4:-3} transports=${5:-zmq ucx ucx-cold}
[ "$(id -u)" = 0 ] || { echo "transfer.sh: needs root (network namespaces)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "transfer.sh: iperf3 is not installed (scripts/install-deps.sh --deploy)" >&2; exit 2; }
for b in tessera-scheduler tessera-worker tsr-hosts-client; do
  [ -x "$bin/$b" ] || { echo "transfer.sh: $bin/$b is not built" >&2; exit 2; }
done

# shellcheck source=tests/hosts/netns.sh
. "$src/tests/hosts/netns.sh"
logs=$(mktemp -d /tmp/tsr-bench-hosts-XXXXXX)
pids=()
cleanup() { stop_pids; hosts_down; rm -rf "$logs"; }
# every log of this run, each under its name (a failed run's evidence)
show_logs() { local f; for f in "$logs/client.out" "$logs"/*.log; do echo "----- $f"; cat "$f"; done; }
trap cleanup EXIT
trap 'exit 130' INT TERM

hosts_up sched a b client || exit 1
echo "# bench/hosts/transfer.sh $bin $chunks $mib $repeats \"$transports\""
echo "# $(date -u +%Y-%m-%d) $(uname -n): $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), kernel $(uname -r)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# link: veth a <-> switch (bridge) <-> veth b; $chunks x $mib MiB = $((chunks * mib)) MiB a side"

# One iperf3 run, then one Tessera run, REPEATS times: both see the same
# background load (this machine is shared).
addr="tcp://$(host_ip sched):8786"
export UCX_TLS=tcp
iperf_runs=()
declare -A w2w_runs w2c_runs fetch_ms first_ms later_ms
# one Tessera run over transport $1: appends to the arrays above
tessera_run() {
  local t=$1 tr=${1%-*} pool=1 warm=3x64MiB ahead=on client w2w w2c ms
  [ "$t" = ucx-nopool ] && pool=0
  [ "$t" = ucx-cold ] && warm=0 ahead=off
  export TESSERA_RECV_POOL=$pool TESSERA_RECV_POOL_WARM=$warm TESSERA_FETCH_AHEAD=$ahead
  rm -f "$logs"/*.log "$logs/client.out"   # a failure shows this run's logs only
  host_spawn sched "$logs/scheduler.log" "$bin/tessera-scheduler" --listen "$addr" --log-level warn
  pids+=("$HOST_PID")
  TESSERA_TEST_OPS=1 host_spawn a "$logs/a.log" "$bin/tessera-worker" --scheduler "$addr" --name a --threads 1 \
    --transport "$tr" --log-level warn
  pids+=("$HOST_PID")
  TESSERA_TRANSPORT=$tr host_spawn client "$logs/client.out" "$bin/tsr-hosts-client" transfer "$addr" "$chunks" "$mib"
  client=$HOST_PID
  for _ in $(seq 1 600); do grep -q '^READY' "$logs/client.out" 2>/dev/null && break; kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
  grep -q '^READY' "$logs/client.out" || { echo "tsr-hosts-client never got ready ($t):"; show_logs; exit 1; }
  # debug: b logs each fetch with its time
  host_spawn b "$logs/b.log" "$bin/tessera-worker" --scheduler "$addr" --name b --threads 1 --transport "$tr" \
    --log-level debug
  pids+=("$HOST_PID")
  wait "$client" || { echo "tsr-hosts-client failed ($t):"; show_logs; exit 1; }
  w2w=$(sed -n 's/^worker-to-worker: .* = \([0-9.]*\) Gbit\/s.*/\1/p' "$logs/client.out")
  w2c=$(sed -n 's/^worker-to-client: .* = \([0-9.]*\) Gbit\/s.*/\1/p' "$logs/client.out")
  ms=$(sed -n "s/.*fetched input 'xfer\/c[0-9]*' .* in \([0-9.]*\) ms$/\1/p" "$logs/b.log" | tr '\n' ' ')
  [ -n "${KEEP_LOGS:-}" ] && mkdir -p "$KEEP_LOGS" && cp "$logs/b.log" "$KEEP_LOGS/b-$t-$r.log"
  w2w_runs[$t]+="$w2w " w2c_runs[$t]+="$w2c " fetch_ms[$t]+="$ms"
  # a fresh worker's first fetch against its later ones (warming, docs/transport.md)
  first_ms[$t]+="${ms%% *} " later_ms[$t]+="${ms#* }"
  echo "run $r $t: tessera worker-to-worker $w2w Gbit/s (graph wall time), worker-to-client $w2c Gbit/s;" \
    "fetches (ms): $ms"
  stop_pids
}
for r in $(seq 1 "$repeats"); do
  host_spawn b "$logs/iperf3-server.log" iperf3 -s -1 -p 5201
  srv=$HOST_PID
  sleep 0.5
  json=$(hostx a iperf3 -c "$(host_ip b)" -p 5201 -n "$((chunks * mib))M" -J 2>&1)
  wait "$srv" 2>/dev/null
  gbps=$(python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))' <<<"$json") ||
    { echo "iperf3 failed: $json" >&2; exit 1; }
  iperf_runs+=("$gbps")
  echo "run $r: iperf3 $gbps Gbit/s (load average $(cut -d" " -f1 /proc/loadavg))"
  for t in $transports; do tessera_run "$t"; done
done

# median and best of a list of numbers
stats() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { printf "%s %s", a[int((NR + 1) / 2)], a[NR] }'; }
read -r iperf_med iperf_best < <(stats "${iperf_runs[@]}")
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "iperf3:                         median $iperf_med, best $iperf_best Gbit/s"
for t in $transports; do
  # shellcheck disable=SC2086  # word lists
  read -r w2w_med w2w_best < <(stats ${w2w_runs[$t]})
  # shellcheck disable=SC2086
  read -r w2c_med w2c_best < <(stats ${w2c_runs[$t]})
  # shellcheck disable=SC2086
  read -r nfetch fetch_med fetch_min < <(printf '%s\n' ${fetch_ms[$t]} | sort -g |
    awk '{ a[NR] = $1 } END { printf "%d %s %s", NR, a[int((NR + 1) / 2)], a[1] }')
  fetch_gbps=$(python3 -c "print('%.2f' % ($mib * 1048576 * 8 / ($fetch_med / 1e3) / 1e9))")
  echo "$t: tessera worker-to-worker: median $w2w_med, best $w2w_best Gbit/s (all $chunks chunks over the graph's wall time)"
  echo "$t:   one fetch (worker's log): median $fetch_med ms = $fetch_gbps Gbit/s, fastest $fetch_min ms ($nfetch fetches)"
  # shellcheck disable=SC2086
  echo "$t:   first fetch of each run: median $(printf '%s\n' ${first_ms[$t]} | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }') ms" \
    "(all: ${first_ms[$t]% }); later fetches: median" \
    "$(printf '%s\n' ${later_ms[$t]} | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }') ms"
  echo "$t: tessera worker-to-client:   median $w2c_med, best $w2c_best Gbit/s (tsr_gather of one chunk)"
  ratio=$(python3 -c "print('%.2f' % ($w2w_med / $iperf_med))")
  ratio_best=$(python3 -c "print('%.2f' % ($w2w_best / $iperf_best))")
  ratio_fetch=$(python3 -c "print('%.2f' % ($fetch_gbps / $iperf_med))")
  echo "$t: ratio tessera/iperf3, worker-to-worker, $mib MiB chunks: $ratio (medians), $ratio_best (bests), $ratio_fetch (one fetch, median)"
done
