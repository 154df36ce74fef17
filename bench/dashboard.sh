#!/usr/bin/env bash
# bench/dashboard.sh — what watching costs: bench/overhead's no-op task
# throughput with the dashboard and /metrics on and polled (a poller
# fetching /api/workers, /api/graphs, /api/tasks and /metrics every second,
# as the page does) against the dashboard off, in the same run, runs
# alternated (off, on, off, on, ...) so drift on a shared machine hits
# both. Prints tasks/s per shape for each run, the median ratio on/off,
# the scheduler's CPU seconds in each mode, and the event-loop time spent
# building snapshots (tessera_dashboard_build_seconds_total).
# Target (issue 15): throughput on within 5% of off.
#
# Usage: bench/dashboard.sh [SIZES] [ROUNDS]   (defaults 1000000 and 3)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-1000000}
rounds=${2:-3}
bin=${BIN:-build/bin}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="$bin/tessera local --cpu-workers 2 --threads-per-worker 1"
cmd_off="$base --no-dashboard -- $bin/tsr-bench-overhead --sizes $sizes --reps 200"
cmd_on="$base --dashboard 127.0.0.1:$port --worker-arg --metrics --worker-arg 127.0.0.1:0 -- \
bench/dashboard_poll.sh $port $bin/tsr-bench-overhead --sizes $sizes --reps 200"
echo "# bench/dashboard  $(date -u +%Y-%m-%d)  $(nproc) cores  $(uname -m)"
echo "# off: $cmd_off"
echo "# on:  $cmd_on"
out=$(mktemp -d)
for r in $(seq 1 "$rounds"); do
  TSR_BENCH_CPU_FILE="$out/off-$r.cpu" bench/dashboard_cpu.sh $cmd_off | sed "s/^/off$r /" | tee "$out/off-$r.txt"
  TSR_BENCH_CPU_FILE="$out/on-$r.cpu" bench/dashboard_cpu.sh $cmd_on | sed "s/^/on$r /" | tee "$out/on-$r.txt"
done
python3 - "$out" "$rounds" <<'PY'
import sys, os, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(path):
    res = {}
    for line in open(path):
        kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
        if "shape" in kv: res[kv["shape"]] = float(kv["tasks_per_s"])
        if "build_s" in kv: res["build_s"] = float(kv["build_s"])
    return res
def cpu(path):
    return float(open(path).read().split()[0]) if os.path.exists(path) else float("nan")
off = [rows(f"{out}/off-{r}.txt") for r in range(1, rounds + 1)]
on = [rows(f"{out}/on-{r}.txt") for r in range(1, rounds + 1)]
for shape in [s for s in off[0] if s != "build_s"]:
    o = statistics.median(x[shape] for x in off); n = statistics.median(x[shape] for x in on)
    print(f"{shape}: median tasks/s off {o:.0f}, on {n:.0f}: on/off = {n / o:.3f} ({(n / o - 1) * 100:+.1f}%)")
co = statistics.median(cpu(f"{out}/off-{r}.cpu") for r in range(1, rounds + 1))
cn = statistics.median(cpu(f"{out}/on-{r}.cpu") for r in range(1, rounds + 1))
print(f"scheduler CPU seconds per run (median): off {co:.2f}, on {cn:.2f}: the dashboard costs {cn - co:+.2f} s")
b = [x.get("build_s", float("nan")) for x in on]
print(f"event-loop time building snapshots per run (tessera_dashboard_build_seconds_total): {statistics.median(b):.3f} s")
PY
rm -rf "$out"
