#!/usr/bin/env bash
# bench/encodings.sh — the persisted genotype matrix in each encoding: the
# bytes the workers hold and the time of tsr_svd_compressed (k=10, no
# power iterations) over it, for X = randint(0, 3) u8 kept as u8, 2-bit
# packed, and blosc (zstd level 5, bitshuffle), through tsr_compress.
#
#   bash bench/encodings.sh cpu [ROWS]    # tessera local --cpu-workers 2 --threads-per-worker 1 (default 100,000 rows)
#   bash bench/encodings.sh gpu [ROWS]    # tessera local --gpus 0 (default 1,000,000 rows)
# Each line runs, with MODE in u8, packed, blosc:
#   tessera local ARGS -- tsr-svd-gpu --rows ROWS --cols 20000 --chunks 100000,20000 --k 10 --mode MODE --repeat 2
# BIN (default build/bin, or the PATH on the GPU machine) holds the binaries.
set -uo pipefail
cd "$(dirname "$0")/.."
where=${1:-cpu}
bin=${BIN:-build/bin}
[ -x "$bin/tessera" ] || bin=$(dirname "$(command -v tessera)")
if [ "$where" = gpu ]; then rows=${2:-1000000} local_args="--gpus 0"; else rows=${2:-100000} local_args="--cpu-workers 2 --threads-per-worker 1"; fi
echo "# bench/encodings $where  $(date -u +%Y-%m-%d)  $(nproc) cores"
echo "# $bin/tessera local $local_args -- $bin/tsr-svd-gpu --rows $rows --cols 20000 --chunks 100000,20000 --k 10 --mode MODE --repeat 2"
printf "%-8s %16s %16s %10s %10s\n" mode held_bytes device_bytes gen_s svd_s
for mode in u8 packed blosc; do
  log=$("$bin/tessera" local $local_args -- "$bin/tsr-svd-gpu" --rows "$rows" --cols 20000 --chunks 100000,20000 \
          --k 10 --mode $mode --repeat 2 2>&1)
  best=$(echo "$log" | grep -E "^run [0-9]+:" | sort -t, -k3 -g | awk -F'[ ,;]+' '{print $4, $7, $13, $17}' | sort -k2 -g | head -1)
  if [ -z "$best" ]; then echo "$mode: FAILED"; echo "$log" | tail -5; continue; fi
  read -r gen svd held dev <<<"$best"
  printf "%-8s %16s %16s %10s %10s\n" $mode "$held" "$dev" "$gen" "$svd"
  echo "$log" | grep "singular values" | cut -c1-80 | sed "s/^/  $mode /"
done
