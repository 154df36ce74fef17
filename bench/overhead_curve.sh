#!/usr/bin/env bash
# bench/overhead_curve.sh — what CURVE costs (docs/security.md): no-op task
# throughput and round-trip latency of tessera local (2 CPU workers), once
# in plaintext and once with CURVE keys on every socket, in the same run.
# Prints both and the ratios.
#
# Usage: bench/overhead_curve.sh [SIZES] [ROUNDS]
#   SIZES default 10000,100000; ROUNDS (default 3) alternates plain and
#   CURVE runs so drift on a shared machine hits both alike.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-10000,100000}
rounds=${2:-3}
bin=${BIN:-build/bin}
keys=$(mktemp -d)
trap 'rm -rf "$keys"' EXIT
mkdir -p "$keys/allow"
"$bin/tessera" keygen --out "$keys" scheduler >/dev/null
"$bin/tessera" keygen --out "$keys/allow" worker >/dev/null
"$bin/tessera" keygen --out "$keys/allow" client >/dev/null
cmd_plain="$bin/tessera local --cpu-workers 2 --threads-per-worker 1 -- $bin/tsr-bench-overhead --sizes $sizes --shapes independent,chain"
curve_env="TESSERA_CURVE_SECRET=$keys/allow/client.key TESSERA_SCHEDULER_KEY=$keys/scheduler.pub"
curve_args="--scheduler-arg --curve-secret --scheduler-arg $keys/scheduler.key --scheduler-arg --allow-keys --scheduler-arg $keys/allow"
curve_args="$curve_args --worker-arg --curve-secret --worker-arg $keys/allow/worker.key --worker-arg --scheduler-key --worker-arg $keys/scheduler.pub"
cmd_curve="$bin/tessera local --cpu-workers 2 --threads-per-worker 1 $curve_args -- $bin/tsr-bench-overhead --sizes $sizes --shapes independent,chain"
echo "# bench/overhead_curve  $(date -u +%Y-%m-%d)  $(nproc) cores  $(uname -m)"
echo "# plain: $cmd_plain"
echo "# curve: env $curve_env $cmd_curve"
out=$(mktemp -d)
for r in $(seq "$rounds"); do
  $cmd_plain | sed 's/^tessera/plain/' | tee -a "$out/plain.txt"
  env $curve_env $cmd_curve | sed 's/^tessera/curve/' | tee -a "$out/curve.txt"
done
python3 - "$out/plain.txt" "$out/curve.txt" <<'PY'
import statistics, sys
def parse(path):
    rows = []
    for line in open(path):
        rows.append({k: v for k, v in (p.split("=", 1) for p in line.split()[1:] if "=" in p)})
    return rows
p, c = parse(sys.argv[1]), parse(sys.argv[2])
def med(rows, field, **match):
    vals = [float(r[field]) for r in rows if field in r and all(r.get(k) == v for k, v in match.items())]
    return statistics.median(vals) if vals else float("nan")
lp, lc = med(p, "latency_median_us"), med(c, "latency_median_us")
print(f"median of rounds: round trip plain {lp:.1f} us, curve {lc:.1f} us: curve/plain = {lc/lp:.2f}x")
for shape, tasks in sorted({(r["shape"], r["tasks"]) for r in p if "shape" in r}):
    tp, tc = med(p, "tasks_per_s", shape=shape, tasks=tasks), med(c, "tasks_per_s", shape=shape, tasks=tasks)
    print(f"median of rounds: {shape} {tasks} tasks: plain {tp:.0f}/s, curve {tc:.0f}/s: curve/plain = {tc/tp:.2f}x")
PY
rm -rf "$out"
