#!/usr/bin/env bash
# bench/cluster/gpu.sh — clustering on one GPU worker (run ON the GPU
# machine, after scripts/device-tests.sh put the binaries on PATH:
# `bash scripts/device-tests.sh cluster [CELLS]`).
#
# 1. CELLS x 50 Gaussian mixture, 30 clusters (mixture.py, seed 0):
#      python3 bench/cluster/peers_gpu.py DIR          (PyTorch blocked exact kNN, warm)
#      tessera local --gpus 0 -- tsr-knn-time DIR/X.npy 15          (tsr_knn alone, both outputs gathered)
#      tessera local --gpus 0 --worker-arg --threads --worker-arg 8 -- tsr-cluster --npy DIR/X.npy --n-pcs 0 \
#        --neighbors 15 --umap --truth DIR/labels.npy --out DIR/tsr
#    (pp.neighbors = exact kNN + UMAP graph, tl.leiden, tl.umap lines)
# 2. The whole pipeline from counts: CELLS x 28,000 with ~3% nonzero and 20
#    cell types, made on the workers (tsr_random_counts, seed 0):
#      tessera local --gpus 0 --worker-arg --threads --worker-arg 8 -- tsr-cluster --synthetic CELLS,28000 --out DIR/syn
#    (read = generating the counts; the pipeline = total - read)
# KNN_ONLY=1 stops after the kNN timings, KNN_RUNS=N repeats tsr-knn-time, SKIP_TORCH=1 leaves out PyTorch.
# Peers' published figures for comparison (RAPIDS, rapids-singlecell) are
# in bench/RESULTS.md.
set -uo pipefail
# One GPU worker alone with 8 executor threads (CUDA streams; the ops
# without a CUDA variant run on its host threads), so every chunk stays in
# the worker: with a CPU worker beside it, chunks made there cross the
# data plane to the GPU on every pass (WORKERS overrides).
workers=${WORKERS:---gpus 0 --worker-arg --threads --worker-arg 8}
cells=${1:-1300000}
dir=${2:-/tmp/tsr-cluster-gpu}
mkdir -p "$dir"
echo "# bench/cluster/gpu  $(date -u +%Y-%m-%d)  GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)  $(nproc) cores"
[ -f "$dir/X.npy" ] || python3 bench/cluster/mixture.py --cells "$cells" --dims 50 --clusters 30 --seed 0 --out "$dir"
echo "== PyTorch $(python3 -c 'import torch; print(torch.__version__)')"
[ -n "${SKIP_TORCH:-}" ] || timeout 300 python3 bench/cluster/peers_gpu.py "$dir" --neighbors 15 2>&1 | tail -3
echo "== tsr_knn alone (tsr-knn-time), one GPU worker, ${KNN_RUNS:-1} run(s), then one with the phases timed"
for r in $(seq "${KNN_RUNS:-1}"); do
  timeout 120 tessera local --gpus 0 -- tsr-knn-time "$dir/X.npy" 15 2>&1 | tail -1
done
KNN_TIME_PHASES=1 timeout 120 tessera local --gpus 0 -- tsr-knn-time "$dir/X.npy" 15 2>&1 | tail -2
[ -z "${KNN_ONLY:-}" ] || exit 0
echo "== tsr-cluster, mixture"
timeout 300 tessera local $workers -- tsr-cluster --npy "$dir/X.npy" --n-pcs 0 --neighbors 15 \
  --umap --umap-init ${UMAP_INIT:-spectral} --truth "$dir/labels.npy" --out "$dir/tsr" 2>&1 | grep -v " \.\.\. [0-9]* s"
[ -f "$dir/torch_knn.npy" ] && [ -f "$dir/tsr.neighbors.mtx" ] && echo "(kNN lists: compared by test_gpu; here only timed)"
echo "== tsr-cluster, whole pipeline from ${cells} x 28000 counts"
timeout 300 tessera local $workers -- tsr-cluster --synthetic "$cells,28000" --out "$dir/syn" 2>&1 \
  | grep -v " \.\.\. [0-9]* s" | tee "$dir/syn.log"
python3 - "$dir/syn.log" <<'PY'
import re, sys
t = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+([0-9.]+) s", line)
    if m: t[m.group(1)] = float(m.group(2))
if "total" in t and "read" in t:
    print(f"pipeline without generating the counts: {t['total'] - t['read']:.3f} s (read/generate {t['read']:.3f} s)")
PY
