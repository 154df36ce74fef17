#!/usr/bin/env bash
# bench/pca_gpu.sh — the real-file GPU case: a PLINK 1 .bed of 1,000,000
# samples x 100,000 SNPs (25 GB, 5 populations, 1% missing) generated on
# the GPU machine's disk, then tsr-pca end to end (read, standardize, PCA)
# on one GPU worker, against `dd` reading the same file.
#
#   bash bench/pca_gpu.sh [SAMPLES [SNPS [DIR]]]     (on the GPU machine, after
#                                                    scripts/device-tests.sh put the binaries on PATH)
# The exact commands (PREFIX = DIR/gen, DIR default /tmp/tsr-pca-gpu):
#   tsr-gen-bed --out PREFIX --samples SAMPLES --snps SNPS --missing 0.01 --pops 5 --fst 0.05 --seed 1
#   dd if=PREFIX.bed of=/dev/null bs=64M                  (after dropping the page cache, where allowed)
#   tessera local --gpus 0 [--worker-arg --threads --worker-arg 8] -- tsr-pca --bed PREFIX --k 20 --power-iters 2 --out DIR/tsr
# (4 executor threads = CUDA streams, the default, then 8: the reading
# and 2-bit transposing of chunks runs on them)
# tsr-pca prints its steps: read (the chunks read, packed, onto the GPU),
# pca (column statistics, the folded standardization, the Krylov passes)
# and write; read throughput = .bed bytes / read seconds.
set -uo pipefail
samples=${1:-1000000} snps=${2:-100000} dir=${3:-/tmp/tsr-pca-gpu}
mkdir -p "$dir"
prefix=$dir/gen
echo "# bench/pca_gpu  $(date -u +%Y-%m-%d)  GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)  $(nproc) cores"
echo "# disk: $(df -h "$dir" | tail -1)"
start=$(date +%s.%N)
tsr-gen-bed --out "$prefix" --samples "$samples" --snps "$snps" --missing 0.01 --pops 5 --fst 0.05 --seed 1 || exit 1
bytes=$(stat -c %s "$prefix.bed")
python3 -c "print('generated $prefix.bed: $bytes bytes in %.1f s' % ($(date +%s.%N) - $start))"
drop_cache() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || echo "(page cache could not be dropped: the file may be cached)"; }
drop_cache
dd if="$prefix.bed" of=/dev/null bs=64M 2>&1 | tail -1 | sed 's/^/dd: /'
for threads in 4 8; do
  drop_cache
  echo "== tsr-pca, $threads streams"
  tessera local --gpus 0 --worker-arg --threads --worker-arg $threads -- \
    tsr-pca --bed "$prefix" --k 20 --power-iters 2 --out "$dir/tsr" 2>&1 | tee "$dir/tsr.log"
  read_s=$(awk '/^read:/{print $2}' "$dir/tsr.log")
  [ -n "$read_s" ] && python3 -c "print('tsr-pca read throughput: %.2f GB/s (%d bytes in %s s)' % ($bytes / $read_s / 1e9, $bytes, '$read_s'))"
done
head -3 "$dir/tsr.eigenval"
