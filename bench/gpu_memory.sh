#!/usr/bin/env bash
# bench/gpu_memory.sh — the GPU half of the memory issue's acceptance, on
# the GPU machine (scripts/device-tests.sh memory): tsr-memory-svd
# (svd_compressed, k=10, n_power_iter=2: six passes over a materialized
# uint8 X2 = randint(0,3) + 1) on one GPU worker (tessera local --gpus 0),
# first without a device memory limit (X2 stays on the device), then with
# --device-memory-limit a tenth of X2 (X2's chunks move down to host
# memory and every pass copies them back up). Prints both wall times, the
# ratio, the device tier's counters and whether s and v are bit-identical
# (an FNV-1a hash of their bytes). Then the acceptance's own program:
# tsr-svd over a persisted uint8 X = randint(0, 3) under the same device
# limit, against the in-memory run (u, s, v compared byte for byte; the
# bytes spilled to disk, which must be 0 for the random X).
#
# Usage: bench/gpu_memory.sh [ROWS] [COLS] [CHUNK_ROWS]   (defaults 200000 20000 500)
#   env BIN=DIR (default: tessera, tsr-memory-svd and tsr-svd from PATH), STREAMS=N
#   (the GPU worker's --threads, default 4), LIMITED_ARGS="--worker-arg F
#   --worker-arg V ..." (more `tessera local` args for the limited run)
set -uo pipefail
rows=${1:-200000}; cols=${2:-20000}; chunk=${3:-500}
bin=${BIN:+$BIN/}
streams=${STREAMS:-4}
limit=$(( rows * cols / 10 ))
echo "# bench/gpu_memory  $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "# X2: $rows x $cols uint8 = $(( rows * cols / 1000000 )) MB in chunks of $chunk rows; one GPU worker, $streams streams${LIMITED_ARGS:+; limited run: $LIMITED_ARGS}"
run() {  # label, extra `tessera local` args...
  local label=$1; shift
  local out
  out=$("${bin}tessera" local --gpus 0 --worker-arg --threads --worker-arg "$streams" --worker-arg --log-level --worker-arg info "$@" -- "${bin}tsr-memory-svd" --rows "$rows" --cols "$cols" --chunk-rows "$chunk" \
          --k 10 --power-iters 2 2>&1)
  local line; line=$(echo "$out" | grep -E "^svd_s=")
  local wall; wall=$(echo "$line" | grep -oE "svd_s=[0-9.]+" | cut -d= -f2)
  local hash; hash=$(echo "$line" | grep -oE "hash=[0-9a-f]+" | cut -d= -f2)
  printf "%-34s wall_s=%-8s hash=%s\n" "$label" "${wall:-FAILED}" "${hash:-none}"
  echo "$out" | grep -E "^tiers:|copied up" | sed -E 's/^.*(gpu:[0-9]+: copied)/\1/; s/^/    /'
  [ -n "$wall" ] || echo "$out" | grep -iE "error|fail|limit" | head -20 | sed 's/^/    /'
  printf "%s %s\n" "${wall:-0}" "${hash:-none}" > "/tmp/gpu_memory.$label"
}
run unlimited
# shellcheck disable=SC2086
run "limit-$limit" --device-memory-limit "$limit" ${LIMITED_ARGS:-}
read -r w0 h0 < /tmp/gpu_memory.unlimited
read -r w1 h1 < "/tmp/gpu_memory.limit-$limit"
if [ "$h0" != none ] && [ "$h0" = "$h1" ]; then same=bit-identical; else same=DIFFERENT; fi
ratio=$(python3 -c "print(f'{$w1/$w0:.2f}' if $w0 > 0 else 'n/a')" 2>/dev/null || echo n/a)
echo "result: limited run $same to the unlimited one; time limited / unlimited = $ratio"
[ "$same" = bit-identical ] || status=1

# The acceptance's own program: tsr-svd over a PERSISTED uint8 X =
# randint(0, 3) (the seed's `x.persist()`) with the device limit a tenth of
# X, against the same persisted graph without a limit: u, s, v compared
# byte for byte. The fused run (X never stored) is shown for comparison:
# on the GPU it takes other kernels (matmul_random), so its bits may differ.
# tsr-svd's memory report gives what the worker's tiers did.
work=$(mktemp -d)
svd_run() {  # label, prefix, extra tsr-svd args, then -- and `tessera local` args
  local label=$1 prefix=$2; shift 2
  local svd_args=() ; while [ $# -gt 0 ] && [ "$1" != -- ]; do svd_args+=("$1"); shift; done; shift
  "${bin}tessera" local --gpus 0 --worker-arg --threads --worker-arg "$streams" --worker-arg --log-level --worker-arg info "$@" -- \
          "${bin}tsr-svd" --rows "$rows" --cols "$cols" --chunks "$chunk,$cols" --dtype u8 --dist randint:0:3 --k 10 --power-iters 2 \
          --save "$work/$prefix" --memory-report "${svd_args[@]}" >"$work/$prefix.log" 2>&1
  local out; out=$(cat "$work/$prefix.log")
  local gen svd; gen=$(echo "$out" | grep -oE "^generation: [0-9.]+" | cut -d' ' -f2); svd=$(echo "$out" | grep -oE "^svd: [0-9.]+" | cut -d' ' -f2)
  printf "%-34s generation_s=%-8s svd_s=%s\n" "$label" "${gen:--}" "${svd:-FAILED}"
  echo "$out" | grep -E "^memory:|copied up" | sed -E 's/^.*(gpu:[0-9]+: copied)/\1/; s/^/    /'
  [ -n "$svd" ] || echo "$out" | grep -iE "error|fail|limit" | head -20 | sed 's/^/    /'
}
echo "# tsr-svd, X = randint(0,3) uint8 $rows x $cols persisted, --device-memory-limit $limit, against the same graph without a limit"
svd_run "tsr-svd in memory (fused)" fused --
svd_run "tsr-svd persisted, no limit" ref --persist --
svd_run "tsr-svd persisted, limit-$limit" lim --persist -- --device-memory-limit "$limit" \
  --worker-arg --spill-dir --worker-arg "$work/spill"
same_files() { for f in u s v; do cmp -s "$work/$1_$f.npy" "$work/$2_$f.npy" || return 1; done; }
same=bit-identical; same_files ref lim || same=DIFFERENT
fused=bit-identical; same_files ref fused || fused=different
spilled=$(grep -E "^memory:" "$work/lim.log" | grep -oE " spilled=[0-9]+" | cut -d= -f2 | awk '{ s += $1 } END { print NR ? s : "unknown" }')
echo "result: tsr-svd persisted under the device limit $same (u, s, v) to the run without a limit; bytes spilled to disk: $spilled"
echo "       (the fused run, X never stored, is $fused to them)"
rm -rf "$work"
[ "$same" = bit-identical ] || status=1
exit "${status:-0}"
