#!/usr/bin/env bash
# Device chunks between two GPU workers (issue 16, bench/transfer): a
# scheduler and two tessera-worker --gpu 0 --transport ucx on the one GPU
# of the device machine (two H200s are not lent here; cuda_ipc between two
# processes on one GPU is the same path), the client tsr-bench-gpu-pair
# (public API: products of random arrays whose inputs sit on either
# worker), against ucx_perftest -m cuda on the same transports in the same
# run. Each fetch is timed by the fetching worker (its debug log):
#   "fetched input ... (N bytes) ... in X ms (K ms to keep it)"
#                                                  the whole fetch; K: making it a chunk
#   "ucx: ... reply after R ms, N bytes in Y ms (device buffer)"
#                                                  the server's answer; the data phase
# Runs three times: device to device in place (the device arena, the
# default), TESSERA_DEVICE_ARENA=0 (device to device through shared
# buffers: a device copy on each side) and TESSERA_DEVICE_TRANSFER=0
# (staged through host memory).
#
#   [MODES="device shared-buffers host-staged"] [MPS=1] \
#   bash scripts/device-tests.sh xferbench [SIZES] [CHUNKS] [REPS]
#   (= bash bench/transfer_gpu.sh ..., with the device scripts' PATH and UCX)
#
# Targets: >= 90% of ucx_perftest's tag_bw at 64 MiB; 1 KiB within 2x of its
# tag_lat round trip.
set -uo pipefail
cd "$(dirname "$0")/.."
sizes=${1:-1024,1048576,67108864,268435456}
chunks=${2:-8}
reps=${3:-4}   # rep 0 of each size is a warm-up, not counted
ucx=${UCX_PREFIX:-/tmp/tessera-device/ucx-cuda}
work=$(mktemp -d /tmp/tsr-xferbench-XXXXXX)
echo "# bench/transfer_gpu.sh $sizes $chunks $reps   ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $("$ucx/bin/ucx_info" -v | head -1 | tr -d '#'))"

# One cluster: scheduler, two GPU workers, the client; logs in $work/$1.
run_pair() {
  local label=$1 d="$work/$1"
  mkdir -p "$d"
  tessera-scheduler --listen tcp://127.0.0.1:0 --address-file "$d/addr" >"$d/scheduler.log" 2>&1 &
  local sched=$!
  for _ in $(seq 100); do [ -s "$d/addr" ] && break; sleep 0.1; done
  local addr
  addr=$(cat "$d/addr")
  local pids=()
  for i in 0 1; do
    tessera-worker --scheduler "$addr" --gpu 0 --threads 4 --transport ucx --log-level debug >"$d/worker-$i.log" 2>&1 &
    pids+=($!)
  done
  TESSERA_SCHEDULER=$addr TESSERA_TRANSPORT=ucx tsr-bench-gpu-pair --sizes "$sizes" --chunks "$chunks" --reps "$reps" \
    >"$d/client.log" 2>&1 || { echo "$label: client failed"; tail -5 "$d/client.log"; }
  kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
  kill "$sched" 2>/dev/null; wait "$sched" 2>/dev/null
  # fetches of each size: the whole fetch, and the UCX data phase
  python3 - "$label" "$d" <<'PY'
import re, sys, glob, statistics as st
label, d = sys.argv[1], sys.argv[2]
whole, data, reply, keep = {}, {}, {}, {}
# fetches before a size's rep 1 (its warm-up rep 0, or an earlier size) are left out
since = {}
for line in open(d + "/client.log", errors="replace"):
    m = re.match(r"size (\d+) rep 1 start (\S+):", line)
    if m: since[int(m.group(1))] = m.group(2)
def warm(line, size):
    return size in since and line[:12] >= since[size]
for f in glob.glob(d + "/worker-*.log"):
    for line in open(f, errors="replace"):
        m = re.search(r"fetched input '[^']*' \((\d+) bytes\) from \S+ in ([0-9.]+) ms \(([0-9.]+) ms to keep", line)
        if m and warm(line, int(m.group(1))):
            whole.setdefault(int(m.group(1)), []).append(float(m.group(2)))
            keep.setdefault(int(m.group(1)), []).append(float(m.group(3)))
        m = re.search(r"ucx: .* reply after ([0-9.]+) ms, (\d+) bytes in ([0-9.]+) ms \((\w+) buffer\)", line)
        if m and warm(line, int(m.group(2))):
            data.setdefault((int(m.group(2)), m.group(4)), []).append(float(m.group(3)))
            reply.setdefault(int(m.group(2)), []).append(float(m.group(1)))
for size in sorted(whole):
    w = whole[size]
    dd = [(k[1], v) for k, v in data.items() if k[0] == size]
    extra = "; ".join(f"data phase into {kind} median {st.median(v):.3f} ms" for kind, v in dd)
    if size in reply: extra += f"; reply after median {st.median(reply[size]):.3f} ms"
    if size in keep: extra += f"; keeping it as a chunk median {st.median(keep[size]):.3f} ms"
    print(f"{label}: {size} B: {len(w)} fetches, whole fetch median {st.median(w):.3f} ms (best {min(w):.3f}) = "
          f"{size / st.median(w) / 1e6:.2f} GB/s median, {size / min(w) / 1e6:.2f} best" + (f"; {extra}" if extra else ""))
PY
}

# MPS=1: the workers share the GPU through MPS, so their kernels run side
# by side; without it the GPU runs one process's work at a time, in time
# slices, and a fetch's copy may wait for the other worker's slice to end
# (two workers on two GPUs, the setting the targets are for, never wait so).
if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
    echo "(the workers share the GPU through MPS)"
  else
    echo "MPS=1, but nvidia-cuda-mps-control would not start: time slices as usual"
  fi
fi
for mode in ${MODES:-device shared-buffers host-staged}; do
  case $mode in
    device) run_pair device ;;
    shared-buffers) TESSERA_DEVICE_ARENA=0 run_pair shared-buffers ;;
    host-staged) TESSERA_DEVICE_TRANSFER=0 run_pair host-staged ;;
    *) echo "transfer_gpu.sh: unknown mode $mode (device, shared-buffers, host-staged)" >&2 ;;
  esac
done

# The peer: ucx_perftest between two processes, both buffers CUDA memory
# on GPU 0 (cuda_ipc), the same UCX.
port=$((20000 + RANDOM % 20000))
perftest() {
  UCX_TLS=cuda_ipc,cuda_copy,tcp,self ucx_perftest -p "$port" -m cuda >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  UCX_TLS=cuda_ipc,cuda_copy,tcp,self ucx_perftest 127.0.0.1 -p "$port" -m cuda -t "$1" -s "$2" -n "$3" 2>&1 |
    awk '/^Final:/ {print}'
  wait "$srv" 2>/dev/null
  port=$((port + 1))
}
export PATH="$ucx/bin:$PATH"
for size in ${sizes//,/ }; do
  n=$(( size >= 67108864 ? 50 : 1000 ))
  echo "ucx_perftest tag_bw $size B (cuda, cuda_ipc): $(perftest tag_bw "$size" "$n")"
done
echo "ucx_perftest tag_lat 1024 B (cuda): $(perftest tag_lat 1024 10000)"
echo "(Final: iterations, latency typical/avg/overall usec, bandwidth avg/overall MB/s (MiB), msgrate)"
[ -n "${KEEP_LOGS:-}" ] && cp -r "$work/." "$KEEP_LOGS/"   # the daemons' logs, for a closer look
rm -rf "$work"
