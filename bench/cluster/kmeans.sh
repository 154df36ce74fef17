#!/usr/bin/env bash
# bench/cluster/kmeans.sh — k-means on CPU workers (issue 11) against
# scikit-learn, same machine, same run, same matrix and initial centers,
# ROUNDS rounds alternating the two sides; medians.
#
#   bench/cluster/kmeans.sh [CELLS] [ROUNDS]     (default 100000 7)
#
# The exact commands (DIR = bench/out/cluster-CELLS; data as run.sh makes it):
#   python bench/cluster/mixture.py --cells CELLS --dims 50 --clusters 30 --seed 0 --out DIR
#   init: sklearn.cluster.kmeans_plusplus(X, 30, random_state=0) -> DIR/init.npy
#   each round:
#     build-cpu/bin/tessera local --cpu-workers 1 --threads-per-worker $(nproc) -- \
#       build-cpu/bin/tsr-cluster --npy DIR/X.npy --n-pcs 0 --method kmeans --kmeans-k 30 \
#       --kmeans-init DIR/init.npy --truth DIR/labels.npy --out DIR/tsr-km
#     python bench/cluster/kmeans_peers.py DIR --rounds 1     (KMeans lloyd and elkan, warm,
#                                                             all cores and one thread)
# BASE_BIN=DIR (optional): a second build's bin/ (the code before a change)
# timed in the same rounds as "tessera-base".
# Tessera's time is tsr-cluster's "kmeans" line (the Lloyd loop and the
# labels gathered to the client, x already in worker memory); sklearn's is
# KMeans.fit (labels included). Both get the machine's cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cells=${1:-100000}
rounds=${2:-7}
source bench/cluster/prepare.sh "sklearn"

echo "# bench/cluster/kmeans.sh $cells $rounds  $(date -u +%Y-%m-%d)  $(nproc) cores $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
log=$dir/kmeans-bench.log
: > "$log"
for i in $(seq "$rounds"); do
  "$bin/tessera" local --cpu-workers 1 --threads-per-worker "$(nproc)" -- \
    "$bin/tsr-cluster" --npy "$dir/X.npy" --n-pcs 0 --method kmeans --kmeans-k 30 \
    --kmeans-init "$dir/init.npy" --truth "$dir/labels.npy" --out "$dir/tsr-km" | grep -E "^kmeans|^ARI" >> "$log"
  "$py" bench/cluster/kmeans_peers.py "$dir" --rounds 1 >> "$log"
  if [ -n "${BASE_BIN:-}" ]; then
    "$BASE_BIN/tessera" local --cpu-workers 1 --threads-per-worker "$(nproc)" -- \
      "$BASE_BIN/tsr-cluster" --npy "$dir/X.npy" --n-pcs 0 --method kmeans --kmeans-k 30 \
      --kmeans-init "$dir/init.npy" --out "$dir/tsr-km-base" | grep -E "^kmeans" | sed 's/^kmeans/kmeans-base/' >> "$log"
  fi
done
"$py" bench/cluster/kmeans_peers.py "$dir" --rounds 0 --tsr-labels "$dir/tsr-km.clusters.tsv" >> "$log"
"$py" - "$log" <<'PY'
import re, statistics, sys
t = {"tessera": [], "tessera-base": [], "sklearn-lloyd": [], "sklearn-elkan": [], "sklearn-lloyd-1t": [], "sklearn-elkan-1t": []}
q = {}
for line in open(sys.argv[1]):
    m = re.match(r"kmeans(-base)?\s+([0-9.]+) s\s+k \d+: inertia (\S+)", line)
    if m:
        name = "tessera-base" if m.group(1) else "tessera"
        t[name].append(float(m.group(2))); q[name] = "inertia " + m.group(3)
    m = re.match(r"peer (\S+) kmeans ([0-9.]+) inertia=(\S+) iterations=(\d+) ari=(\S+)", line)
    if m: t[m.group(1)].append(float(m.group(2))); q[m.group(1)] = f"inertia {m.group(3)}, {m.group(4)} iterations, ARI {m.group(5)}"
    if line.startswith("ARI"): q["tessera"] += ", " + line.strip()
    if line.startswith("labels equal"): print(line.strip())
med = {k: statistics.median(v) for k, v in t.items() if v}
for k, v in t.items():
    if not v: continue
    print(f"{k:16s} median {med[k]:.4f} s  (rounds: {' '.join(f'{x:.3f}' for x in v)})  {q.get(k, '')}")
best = min((k for k in med if k.startswith("sklearn")), key=lambda k: med[k])
print(f"ratio, fastest peer ({best}) / Tessera: {med[best] / med['tessera']:.2f}x")
if "tessera-base" in med:
    print(f"ratio, Tessera before / after: {med['tessera-base'] / med['tessera']:.2f}x; "
          f"fastest peer / Tessera before: {med[best] / med['tessera-base']:.2f}x")
PY
