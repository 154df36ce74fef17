#!/usr/bin/env bash
# Chunk transfer through Tessera's data plane (tsr_xfer_*, bench/transfer/
# transfer.c) over UCX and ZeroMQ, 1 KiB .. 256 MiB, against ucx_perftest
# (Debian ucx-utils) on the same path: loopback tcp, and shared memory
# (UCX_TLS=sm: posix/sysv eager, cma rendezvous). ZeroMQ has only tcp.
#
#   bench/transfer.sh [BUILD_DIR]       (default build-cpu)
#
# Targets (docs/transport.md): Tessera over UCX >= 90% of ucx_perftest's
# tag_bw at 64 MiB, and its 1 KiB fetch (one round trip: request + reply)
# within 2x of ucx_perftest's tag_lat round trip (2x its one-way latency).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cpu}
bench=$build/bin/tsr-bench-transfer
[ -x "$bench" ] || { echo "transfer.sh: build $bench first" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "transfer.sh: ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 1; }
echo "# bench/transfer.sh $build   ($(date -u +%F), $(nproc) cores, $(ucx_info -v | head -1 | tr -d '#'))"

# Received chunks land in fresh buffers, as in a worker; a worker puts
# large ones on transparent huge pages by re-executing itself with this
# tunable (worker/worker.h), so the benchmark runs with it too.
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1
port=$((20000 + RANDOM % 20000))
# One ucx_perftest run: test size iters -> the Final line's fields.
perftest() {
  ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" 2>/dev/null | awk '/^Final:/ {print}'
  wait "$srv" 2>/dev/null || true
  port=$((port + 1))
}

# Shared memory: ucx_perftest exchanges addresses itself, so sm,self is
# enough; Tessera connects through a ucp_listener, whose connection
# manager needs tcp on the loopback device (the data still takes sm).
for tls in tcp sm; do
  export UCX_TLS=$tls
  [ "$tls" = sm ] && export UCX_TLS=sm,self
  echo
  echo "## UCX_TLS=$UCX_TLS"
  echo "### ucx_perftest"
  lat=$(perftest tag_lat 1024 20000)
  lat_us=$(echo "$lat" | awk '{print $3}')   # one-way, 50th percentile
  echo "tag_lat 1 KiB: one-way ${lat_us} us (round trip $(awk "BEGIN{print 2*$lat_us}") us)"
  bw=$(perftest tag_bw 67108864 40)
  bw_mb=$(echo "$bw" | awk '{printf "%.1f", $6 * 1.048576}')   # its MB is MiB
  echo "tag_bw 64 MiB: ${bw_mb} MB/s"
  echo "### tessera over ucx"
  out=$( [ "$tls" = sm ] && export UCX_TLS=sm,self,tcp; "$bench" ucx)
  echo "$out"
  t_lat=$(echo "$out" | awk '$1 == 1024 {print $3}')
  t_bw=$(echo "$out" | awk '$1 == 67108864 {print $4}')
  echo "RATIO $tls: bandwidth at 64 MiB $(awk "BEGIN{printf \"%.2f\", $t_bw / $bw_mb}") of ucx_perftest (target >= 0.90);" \
       "1 KiB round trip $(awk "BEGIN{printf \"%.2f\", $t_lat / (2 * $lat_us)}")x ucx_perftest's (target <= 2)"
  if [ "$tls" = tcp ]; then
    echo "### tessera over zmq (tcp)"
    out=$("$bench" zmq)
    echo "$out"
    z_bw=$(echo "$out" | awk '$1 == 67108864 {print $4}')
    echo "RATIO zmq: bandwidth at 64 MiB $(awk "BEGIN{printf \"%.2f\", $z_bw / $bw_mb}") of ucx_perftest tcp"
  fi
done
