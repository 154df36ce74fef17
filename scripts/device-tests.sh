#!/usr/bin/env bash
# scripts/device-tests.sh — runs ON the GPU machine (the `device` tool),
# from the repository root, with what scripts/device-run.sh prepared here
# carried along (.deps/carry, .whl). Unpacks the binaries and libraries,
# finds the machine's CUDA libraries, runs each GPU test binary directly
# (CTest does not travel: the build tree's paths are this machine's) and
# the GPU benchmark. Logs go to $OUT (or ./device-out).
#
#   bash scripts/device-tests.sh [all|tests|xfer|xferbench|transfer|overhead|sc|tiles|bench|kbench|memory|pca|cluster|smoke|one NAME [SECONDS]] [BENCH ARGS...]
# (xfer: gpu.xfer, device chunks between two GPU workers; xferbench: bench/transfer_gpu.sh ARGS;
# transfer: bench/transfer.sh, host chunks over tcp and shared memory against ucx_perftest;
# overhead: the scheduler's round trip and 10^6-task ingest (bench/overhead) with the ZeroMQ/TCP floor;
# kbench: test_kernels_cuda --bench ARGS, e.g. genotype64; memory: bench/gpu_memory.sh, the
# device-limited SVD against an unlimited one; pca: bench/pca_gpu.sh, tsr-pca on a 25 GB .bed
# generated on the machine's disk, ARGS: SAMPLES SNPS DIR; cluster: bench/cluster/gpu.sh, kNN, Leiden,
# UMAP and the whole single-cell pipeline on one GPU worker, ARGS: CELLS DIR; sc: test_kernels_cuda
# and test_gpu_cluster, the single-cell GPU = CPU checks; tiles: the nvJPEG ABI check, test_tiles_cuda
# and bench/tiles/gpu.sh, ARGS: SIZE SLIDES, TILES_TESTS_ONLY=1 skips the bench)
set -uo pipefail
what=${1:-all}
shift || true
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
t=/tmp/tessera-device
rm -rf "$t" && mkdir -p "$t"
tar -C "$t" -xJf .deps/carry/tessera-device.tar.xz || { echo "no .deps/carry/tessera-device.tar.xz: run scripts/device-run.sh here and carry .deps/carry" >&2; exit 1; }

# CUDA 13 runtime libraries of the machine: the toolkit's, else the
# Python wheels' (nvidia-*-cu13 in the torch environment).
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64; do
  [ -e "$d/libcublas.so.13" ] && cuda_dirs="$cuda_dirs:$d"
done
if [ -z "$cuda_dirs" ]; then
  for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, s, "lib") for s in os.listdir(p)))' 2>/dev/null); do
    [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
  done
fi
# Our binaries see the carried Debian libraries; Python (the Dask, CuPy and
# PyTorch benchmarks) does not: each binary is reached through a wrapper
# that sets LD_LIBRARY_PATH for it and its children.
libpath="$t/lib${cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A CUDA-aware UCX (cuda_copy, cuda_ipc) ahead of the carried Debian one:
# unpacked when a previous run built it, else built from the carried
# source and packed into $OUT/ucx-cuda.tar.xz (keep it as
# .deps/ucx-cuda.tar.xz for the next run). TSR_UCX_CUDA=1 tells gpu.xfer.
setup_ucx_cuda() {
  local prefix="$t/ucx-cuda"
  if [ -f .deps/carry/ucx-cuda.tar.xz ]; then
    tar -C "$t" -xJf .deps/carry/ucx-cuda.tar.xz
  elif [ -f .deps/carry/ucx-src.tar.xz ]; then
    mkdir -p third_party/ucx-src && tar -C third_party/ucx-src -xJf .deps/carry/ucx-src.tar.xz
    bash scripts/build-ucx-cuda.sh "$prefix" > "$out/ucx-build.log" 2>&1 || { tail -20 "$out/ucx-build.log"; return; }
    tail -8 "$out/ucx-build.log"
    tar -C "$t" -cf - ucx-cuda | xz -T0 -6 > "$out/ucx-cuda.tar.xz"
  fi
  if LD_LIBRARY_PATH="$prefix/lib:$libpath" "$prefix/bin/ucx_info" -d 2>/dev/null | grep -q "Transport: cuda_ipc"; then
    echo "UCX with CUDA: $prefix ($(LD_LIBRARY_PATH="$prefix/lib:$libpath" "$prefix/bin/ucx_info" -v | head -1))"
  else
    echo "no CUDA-aware UCX: gpu.xfer will skip"
  fi
}
setup_ucx_cuda 2>&1 | tee "$out/ucx.log"
grep -q "^UCX with CUDA" "$out/ucx.log" && { libpath="$t/ucx-cuda/lib:$libpath"; export TSR_UCX_CUDA=1; }
mkdir -p "$t/wrap"
for b in "$t"/bin/*; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libpath" "$b" > "$t/wrap/$(basename "$b")"
  chmod +x "$t/wrap/$(basename "$b")"
done
export PATH="$t/wrap:$PATH"
export TESSERA_TEST_BIN_DIR="$t/bin"
export TSR_PLINK_DATA="$t/data"   # HapMap3 for test_gpu's PCA (scripts/device-run.sh packs it)
export TSR_WSI_DATA="$t/data/wsi" # the CMU-1 slide region (test_tiles_cuda, bench/tiles/gpu.sh, test_gpu)
export TSR_PLUGIN_DATA="$t/plugins" # the example op plugin with its CUDA entry (test_gpu)
{
  echo "== $(date -u) $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "LD_LIBRARY_PATH for our binaries: $libpath"
  LD_LIBRARY_PATH="$libpath" ldd "$t/bin/tessera-worker" | grep -E "not found|cublas|cudart|cusolver|openblas|zmq" || true
  tessera-worker --list-gpus
} 2>&1 | tee "$out/env.log"

rc=0
run_tests() {
  echo "== gpu tests" | tee "$out/tests.log"
  local start=$(date +%s)
  (cd /tmp && timeout 420 "$t/wrap/test_gpu") >>"$out/tests.log" 2>&1
  local r=$?
  echo "test_gpu exit $r ($(( $(date +%s) - start )) s)" | tee -a "$out/tests.log"
  (cd /tmp && timeout 120 "$t/wrap/test_gpu_cli") >>"$out/tests.log" 2>&1
  local r2=$?
  echo "test_gpu_cli exit $r2" | tee -a "$out/tests.log"
  [ $r2 = 0 ] || rc=1
  run_xfer
  (cd /tmp && timeout 300 "$t/wrap/test_kernels_cuda") >"$out/kernels.log" 2>&1
  local r3=$?
  echo "test_kernels_cuda exit $r3" | tee -a "$out/tests.log"
  grep -E "^\[ (FAIL)|passed|failed|:[0-9]+: " "$out/kernels.log" | head -20
  [ $r3 = 0 ] || rc=1
  grep -E "^\[ (RUN|FAIL|  OK  )|passed|relative|bit-identical|SIGKILL|eight chunks|one big|limited:|DIFFERENT|svd:|after the kill|SKIPPED|:[0-9]+: " "$out/tests.log" | head -60
  [ $r = 0 ] || rc=1
}
# Device chunks between two GPU workers (gpu.xfer), logs kept: each
# worker's transfer counters and its per-fetch times.
run_xfer() {
  local logs=/tmp/tessera-xfer-logs
  rm -rf "$logs" && mkdir -p "$logs"
  (cd /tmp && TESSERA_TEST_KEEP_LOGS="$logs" timeout 300 "$t/wrap/test_gpu_xfer") >"$out/xfer.log" 2>&1
  local r=$?
  echo "test_gpu_xfer exit $r" | tee -a "$out/tests.log"
  grep -E "^\[ |SKIPPED|served|held|:[0-9]+: " "$out/xfer.log" | head -20
  grep -hoE "ucx: '[^']*' from [^ ]* sent in [0-9.]+ ms, reply after [0-9.]+ ms, [0-9]+ bytes in [0-9.]+ ms \([a-z]+ buffer\)" \
    "$logs"/*.log 2>/dev/null | sed -E "s/'[^']*' from [^ ]* //" | sort | uniq -c | sort -rn | head -12
  tar -C "$logs" -cf - . | xz -T0 -6 >"$out/xfer-logs.tar.xz"
  [ $r = 0 ] || rc=1
}
# The single-cell GPU checks: the kernels against the CPU ops, and
# test_gpu_cluster (PCA, kNN, Leiden on a GPU worker against a CPU cluster).
run_sc_tests() {
  (cd /tmp && timeout 200 "$t/wrap/test_kernels_cuda") >"$out/kernels.log" 2>&1
  local r=$?
  echo "test_kernels_cuda exit $r" | tee -a "$out/sc.log"
  grep -E "^\[ FAIL|passed|:[0-9]+: " "$out/kernels.log" | head -20
  (cd /tmp && timeout 400 "$t/wrap/test_gpu_cluster") >>"$out/sc.log" 2>&1
  local r2=$?
  echo "test_gpu_cluster exit $r2" | tee -a "$out/sc.log"
  grep -E "^\[|PCA:|:[0-9]+: |SKIPPED" "$out/sc.log" | head -20
  [ $r = 0 ] && [ $r2 = 0 ] || rc=1
}
run_bench() {
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site
  fi
  PYTHONUNBUFFERED=1 bash bench/svd_gpu.sh "$@" 2>&1 | tee "$out/bench.log"
  [ ${PIPESTATUS[0]} = 0 ] || rc=1
}
# Whole-slide images on the GPU: our nvJPEG declarations against the real
# nvjpeg.h, the CUDA tile ops against the CPU on the CMU-1 region, then
# bench/tiles/gpu.sh (ARGS: SIZE SLIDES).
run_tiles() {
  local abi=/tmp/nvjpeg-abi
  mkdir -p $abi
  gcc -DREAL -I/usr/local/cuda/include tests/unit/nvjpeg_abi.c -o $abi/real && \
    gcc -Ikernels/cuda -I/usr/local/cuda/include tests/unit/nvjpeg_abi.c -o $abi/ours && \
    $abi/real >$abi/real.txt && $abi/ours >$abi/ours.txt
  if diff $abi/real.txt $abi/ours.txt >/dev/null; then echo "nvjpeg ABI: ours equals nvjpeg.h ($(tr '\n' ';' <$abi/real.txt))"
  else echo "nvjpeg ABI: DIFFERENT"; diff $abi/real.txt $abi/ours.txt; rc=1; fi
  (cd /tmp && timeout 200 "$t/wrap/test_tiles_cuda") >"$out/tiles_tests.log" 2>&1
  local r=$?
  echo "test_tiles_cuda exit $r"
  grep -vE "^\[ (RUN|  OK  )" "$out/tiles_tests.log" | head -30
  [ $r = 0 ] || rc=1
  [ -n "${TILES_TESTS_ONLY:-}" ] || { bash bench/tiles/gpu.sh "$@" 2>&1 | tee "$out/tiles_bench.log"; [ ${PIPESTATUS[0]} = 0 ] || rc=1; }
}
# The dashboard and /metrics of a GPU worker while an SVD runs: the NVML
# samples (utilization, memory, power) must reach the worker's /metrics and
# the scheduler's /api/workers (docs/dashboard.md, docs/metrics.md).
run_watch() {
  tessera local --gpus 0 --dashboard 127.0.0.1:8787 --worker-arg --metrics --worker-arg 127.0.0.1:9400 -- \
    tsr-svd --rows 4000000 --cols 2000 --chunks 250000,2000 --k 10 --power-iters 60 >"$out/watch_svd.log" 2>&1 &
  local pid=$!
  sleep 4
  python3 - <<'PY' 2>&1 | tee "$out/watch.log"
import json, urllib.request
get = lambda u: urllib.request.urlopen(u, timeout=5).read().decode()
m = [l for l in get("http://127.0.0.1:9400/metrics").splitlines() if "gpu" in l and not l.startswith("#")]
print("worker /metrics gpu lines:", len(m)); print("\n".join(m[:8]))
w = json.loads(get("http://127.0.0.1:8787/api/workers"))
ws = w["workers"] if isinstance(w, dict) else w
for x in ws:
    print("api/workers:", {k: v for k, v in x.items() if k.startswith("gpu")})
ok = len(m) >= 3 and all(x.get("gpu_memory_total") for x in ws)
print("watch: NVML values reach /metrics and /api/workers" if ok else "watch: MISSING NVML values")
PY
  wait $pid
  tail -3 "$out/watch_svd.log"
  # The efficiency report of a GPU run (docs/report.md): GPU utilization and
  # memory over time must be in its samples, and the HTML must plot them.
  tessera local --gpus 0 --no-dashboard -- tsr-svd --rows 4000000 --cols 2000 --chunks 250000,2000 --k 10 \
    --power-iters 60 --report "$out/gpu_report.json" >"$out/report_svd.log" 2>&1
  tessera report --html "$out/gpu_report.html" "$out/gpu_report.json" >/dev/null 2>&1
  python3 - "$out/gpu_report.json" "$out/gpu_report.html" <<'PY' 2>&1 | tee -a "$out/watch.log"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["samples"]
util = [u for u in s.get("gpu_util", []) if u is not None]
mem = [m for m in s.get("gpu_memory_used", []) if m is not None]
w = r["workers"][0]
print(f"report: wall {r['wall_s']:.2f} s, {len(s['t'])} samples, gpu_util max {max(util) if util else None}, "
      f"gpu_memory_used max {max(mem) if mem else None}, device_memory_peak {w.get('device_memory_peak')}, bound by {r['bound']['by']}")
html = open(sys.argv[2]).read()
ok = len(util) >= 2 and max(util) > 0 and len(mem) >= 2 and "GPU" in html
print("report: GPU utilization and memory over time recorded and plotted" if ok else "report: MISSING GPU series")
PY
}
# One test of test_gpu (KIT_ONLY=NAME) with every cluster's logs kept,
# summarized here and packed (xz) into $OUT: a diagnosis run.
run_one() {
  local name=$1 limit=${2:-200}
  local logs=/tmp/tessera-logs
  rm -rf "$logs" && mkdir -p "$logs"
  (cd /tmp && KIT_ONLY="$name" TESSERA_TEST_KEEP_LOGS="$logs" timeout "$limit" "$t/wrap/test_gpu") >"$out/one.log" 2>&1
  local r=$?
  echo "test_gpu (KIT_ONLY=$name) exit $r" | tee -a "$out/one.log"
  grep -vE "^(----- |[0-9]{4}-)" "$out/one.log" | grep -v "^\s*$" | head -40
  for f in "$logs"/*.log; do
    echo "== $(basename "$f"): $(wc -l <"$f") lines"
    grep -oE "(dropped|moved|spilled|recomput|missing|paused|resumed|will be spilled)[a-z ]*" "$f" | sort | uniq -c | sort -rn | head -12
  done
  tar -C "$logs" -cf - . | xz -T0 -6 >"$out/logs.tar.xz"
  [ $r = 0 ] || rc=1
}
case $what in
  one) run_one "$@" ;;
  smoke) tessera local --gpus all -- tessera status 2>&1 | tee "$out/smoke.log" ;;
  memory) bash bench/gpu_memory.sh "$@" 2>&1 | tee "$out/memory.log"; [ ${PIPESTATUS[0]} = 0 ] || rc=1 ;;
  pca) bash bench/pca_gpu.sh "$@" 2>&1 | tee "$out/pca.log"; [ ${PIPESTATUS[0]} = 0 ] || rc=1 ;;
  cluster) bash bench/cluster/gpu.sh "$@" 2>&1 | tee "$out/cluster.log"; [ ${PIPESTATUS[0]} = 0 ] || rc=1 ;;
  tests) run_tests ;;
  xfer) run_xfer ;;
  transfer) mkdir -p /tmp/tsr-wrapbuild && ln -sfn "$t/wrap" /tmp/tsr-wrapbuild/bin &&
    PATH="$t/ucx-cuda/bin:$PATH" bash bench/transfer.sh /tmp/tsr-wrapbuild 2>&1 | tee "$out/transfer.log" ;;
  overhead) for tl in "zmq 2 0" "zmq 4 0" "tcp 2 0" "tcp 4 0" "unix 2 0" "unix 4 0" "tcp 4 200" "unix 4 200"; do set -- $tl
      tsr-bench-pingpong --transport $1 --legs $2 --reps 5000 --client-spin-us $3; done 2>&1 | tee "$out/overhead.log"
    for i in 1 2 3; do tessera local --cpu-workers 2 --threads-per-worker 1 -- tsr-bench-overhead --sizes 100000,1000000 \
      --shapes independent --reps 1000 2>/dev/null | grep -E "latency|tasks=|bytes_per_task"; done 2>&1 | tee -a "$out/overhead.log" ;;
  xferbench) bash bench/transfer_gpu.sh "$@" 2>&1 | tee "$out/xferbench.log"; [ ${PIPESTATUS[0]} = 0 ] || rc=1 ;;
  tiles) run_tiles "$@" ;;
  watch) run_watch ;;
  sc) run_sc_tests ;;
  bench) run_bench "$@" ;;
  kbench) (cd /tmp && timeout 300 "$t/wrap/test_kernels_cuda" --bench "$@") 2>&1 | tee "$out/kbench.log" ;;
  all) run_tests; run_bench "$@" ;;
  *) echo "device-tests.sh: all|tests|xfer|xferbench|transfer|overhead|sc|tiles|watch|bench|kbench|memory|pca|cluster|smoke|one NAME [SECONDS]" >&2; exit 2 ;;
esac
exit $rc
