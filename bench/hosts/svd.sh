#!/usr/bin/env bash
# bench/hosts/svd.sh — the CPU SVD of README's main job on two hosts
# (network namespaces on a switch, tests/hosts/netns.sh) against one host.
#
#   sudo bench/hosts/svd.sh [BIN_DIR] [REPEATS]
#   sudo bench/hosts/svd.sh build/bin 3          # the recorded run
#
# The job: tsr-svd --rows 100000 --cols 20000 --chunks 20000,5000 --dtype u8
#          --dist randint:0:3 --k 10 --power-iters 2
# 1 host:  tessera local --cpu-workers 2 --threads-per-worker 1 (README's
#          command: scheduler, 2 workers and tsr-svd on one loopback), run
#          inside host h1's namespace.
# 2 hosts: h1 runs the scheduler, a worker (--threads 1) and tsr-svd; h2
#          runs the other worker (--threads 1): every chunk between the
#          workers, and to the client, crosses the veth link.
# Both on the same machine and CPUs: the difference is the network path
# (veth and a bridge instead of loopback), not more compute. Runs
# alternate; the medians are compared, and the singular values must agree.
# Needs root and iproute2 (scripts/install-deps.sh --deploy).
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$src/build/bin}" && pwd) || exit 2
repeats=${2:-3}
[ "$(id -u)" = 0 ] || { echo "svd.sh: needs root (network namespaces)" >&2; exit 2; }
for b in tessera tessera-scheduler tessera-worker tsr-svd; do
  [ -x "$bin/$b" ] || { echo "svd.sh: $bin/$b is not built" >&2; exit 2; }
done
job=(--rows 100000 --cols 20000 --chunks "20000,5000" --dtype u8 --dist randint:0:3 --k 10 --power-iters 2)

# shellcheck source=tests/hosts/netns.sh
. "$src/tests/hosts/netns.sh"
logs=$(mktemp -d /tmp/tsr-bench-svd-XXXXXX)
pids=()
cleanup() { stop_pids; hosts_down; rm -rf "$logs"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

hosts_up h1 h2 || exit 1
echo "# bench/hosts/svd.sh $bin $repeats"
echo "# $(date -u +%Y-%m-%d) $(uname -n): $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), kernel $(uname -r)"
echo "# tsr-svd ${job[*]}"

svd_time() { sed -n 's/^svd: \([0-9.]*\) s$/\1/p' "$1"; }
svals() { sed -n 's/^singular values: //p' "$1"; }

one=() two=()
addr="tcp://$(host_ip h1):8786"
for r in $(seq 1 "$repeats"); do
  hostx h1 "$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 -- "$bin/tsr-svd" "${job[@]}" \
    >"$logs/one.out" 2>&1 || { cat "$logs/one.out"; exit 1; }
  one+=("$(svd_time "$logs/one.out")")

  host_spawn h1 "$logs/scheduler.log" "$bin/tessera-scheduler" --listen "$addr" --log-level warn
  pids+=("$HOST_PID")
  for h in h1 h2; do
    host_spawn "$h" "$logs/worker-$h.log" "$bin/tessera-worker" --scheduler "$addr" --name "$h" --threads 1 --log-level warn
    pids+=("$HOST_PID")
  done
  for _ in $(seq 1 100); do
    hostx h1 "$bin/tessera" status --scheduler "$addr" --timeout 2s 2>/dev/null | grep -q "^scheduler .*: 2 workers" && break
    sleep 0.2
  done
  TESSERA_SCHEDULER=$addr hostx h1 "$bin/tsr-svd" "${job[@]}" >"$logs/two.out" 2>&1 || { cat "$logs/two.out"; exit 1; }
  two+=("$(svd_time "$logs/two.out")")
  stop_pids
  echo "run $r: 1 host ${one[-1]} s, 2 hosts ${two[-1]} s"
  echo "  1 host:  $(svals "$logs/one.out")"
  echo "  2 hosts: $(svals "$logs/two.out")"
  python3 - "$(svals "$logs/one.out")" "$(svals "$logs/two.out")" <<'EOF' || exit 1
import sys
a, b = ([float(x) for x in s.split()] for s in sys.argv[1:3])
worst = max(abs(x - y) / a[0] for x, y in zip(a, b))
print("  singular values agree to %.1e of s[0]" % worst)
sys.exit(0 if len(a) == len(b) == 10 and worst < 1e-9 else 1)
EOF
done
med() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
m1=$(med "${one[@]}") m2=$(med "${two[@]}")
echo "median svd time: 1 host $m1 s, 2 hosts $m2 s; ratio 2 hosts / 1 host: $(python3 -c "print('%.2f' % ($m2 / $m1))")"
