#!/usr/bin/env bash
# bench/cluster/run.sh — clustering on CPU workers: Tessera's tsr-cluster
# against the Python peers, same machine, same run, same matrix: a Gaussian
# mixture of CELLS x 50 with 30 clusters of known labels (mixture.py).
#
#   bench/cluster/run.sh [CELLS]          (default 100000; a quick run: 20000)
#
# The exact commands (DIR = bench/out/cluster-CELLS):
#   python bench/cluster/mixture.py --cells CELLS --dims 50 --clusters 30 --seed 0 --out DIR
#   build-cpu/bin/tessera local --cpu-workers 1 --threads-per-worker 2 -- \
#     build-cpu/bin/tsr-cluster --npy DIR/X.npy --n-pcs 0 --neighbors 15 --method leiden --truth DIR/labels.npy --out DIR/tsr
#   ... the same with --method louvain, and --method kmeans --kmeans-k 30 --kmeans-init DIR/init.npy
#   python bench/cluster/peers_cpu.py DIR     (sklearn brute kNN + umap-learn graph + leidenalg,
#                                             igraph Louvain, scanpy pp.neighbors + tl.leiden,
#                                             sklearn KMeans from the same init.npy)
# The peers are timed warm (numba compiled first). Each side gets the 2
# cores. kNN + graph + Leiden of Tessera (pp.neighbors + tl.leiden lines)
# against the fastest peer's kNN + graph + Leiden; ARI against the true
# labels for each.
set -euo pipefail
cd "$(dirname "$0")/../.."
cells=${1:-100000}
source bench/cluster/prepare.sh "scanpy, leidenalg, sklearn"

echo "# bench/cluster  $(date -u +%Y-%m-%d)  $(nproc) cores $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# data: mixture.py --cells $cells --dims 50 --clusters 30 --seed 0"
tsr() {
  "$bin/tessera" local --cpu-workers 1 --threads-per-worker "$(nproc)" -- \
    "$bin/tsr-cluster" --npy "$dir/X.npy" --n-pcs 0 --neighbors 15 --truth "$dir/labels.npy" --out "$dir/tsr" "$@"
}
tsr --method leiden | tee "$dir/tsr-leiden.log"
tsr --method louvain | tee "$dir/tsr-louvain.log"
tsr --method kmeans --kmeans-k 30 --kmeans-init "$dir/init.npy" | tee "$dir/tsr-kmeans.log"
"$py" bench/cluster/peers_cpu.py "$dir" 2>/dev/null | tee "$dir/peers.log"

# The table: Tessera's step times against the peers'.
"$py" - "$dir" <<'EOF'
import re, sys
d = sys.argv[1]
def steps(name):
    out = {}
    for line in open(f"{d}/{name}"):
        m = re.match(r"(\S+)\s+([0-9.]+) s", line)
        if m: out[m.group(1)] = float(m.group(2))
        m = re.match(r"ARI against the true labels: ([0-9.-]+)", line)
        if m: out["ari"] = float(m.group(1))
    return out
peer = {}
for line in open(f"{d}/peers.log"):
    f = line.split()
    if f and f[0] == "peer":
        peer[(f[1], f[2])] = (float(f[3]), dict(kv.split("=") for kv in f[4:]))
L, V, K = steps("tsr-leiden.log"), steps("tsr-louvain.log"), steps("tsr-kmeans.log")
tsr_graph = L["pp.neighbors"] + L["tl.leiden"]
sk = peer[("sklearn-brute", "knn")][0] + peer[("umap-learn", "connectivities")][0]
rows = [("sklearn brute + umap-learn + leidenalg", sk + peer[("leidenalg", "leiden")][0], peer[("leidenalg", "leiden")][1].get("ari")),
        ("sklearn brute + umap-learn + igraph Louvain", sk + peer[("igraph", "louvain")][0], peer[("igraph", "louvain")][1].get("ari")),
        ("scanpy pp.neighbors + tl.leiden", peer[("scanpy", "neighbors")][0] + peer[("scanpy", "leiden")][0], peer[("scanpy", "leiden")][1].get("ari"))]
print(f"\n{'':46s} {'seconds':>9s} {'ARI':>7s}")
print(f"{'Tessera pp.neighbors + tl.leiden':46s} {tsr_graph:9.3f} {L.get('ari', float('nan')):7.4f}   (kNN+graph {L['pp.neighbors']:.3f}, leiden {L['tl.leiden']:.3f})")
print(f"{'Tessera pp.neighbors + tl.louvain':46s} {V['pp.neighbors'] + V['tl.louvain']:9.3f} {V.get('ari', float('nan')):7.4f}")
for name, t, ari in rows:
    print(f"{name:46s} {t:9.3f} {float(ari):7.4f}")
best = min(t for _, t, _ in rows)
tsr_louvain = V["pp.neighbors"] + V["tl.louvain"]
best_leiden = min(rows[0][1], rows[2][1])
print(f"ratio, fastest Python Leiden pipeline / Tessera's Leiden pipeline: {best_leiden / tsr_graph:.2f}x")
print(f"ratio, Python Louvain pipeline / Tessera's Louvain pipeline: {rows[1][1] / tsr_louvain:.2f}x")
print(f"ratio, fastest Python peer of either / Tessera's Leiden pipeline: {best / tsr_graph:.2f}x")
print(f"kNN alone: sklearn brute {peer[('sklearn-brute', 'knn')][0]:.3f} s, scanpy (pynndescent, approximate) {peer[('scanpy', 'neighbors')][0]:.3f} s, Tessera exact kNN + graph {L['pp.neighbors']:.3f} s")
print(f"Leiden alone: leidenalg {peer[('leidenalg', 'leiden')][0]:.3f} s, Tessera {L['tl.leiden']:.3f} s ({peer[('leidenalg', 'leiden')][0] / L['tl.leiden']:.2f}x)")
km_t, km_q = peer[("sklearn", "kmeans")]
print(f"k-means from the same init: sklearn {km_t:.3f} s (inertia {km_q['inertia']}, ari {km_q['ari']}), "
      f"Tessera {K['kmeans']:.3f} s (ari {K.get('ari', float('nan')):.4f}): {km_t / K['kmeans']:.2f}x")
EOF
