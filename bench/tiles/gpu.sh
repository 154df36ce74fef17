#!/usr/bin/env bash
# bench/tiles/gpu.sh — tsr-tiles on one GPU worker (nvJPEG decode, tile
# statistics on the device) against the same run on CPU workers using every
# host core, on generated slides (bench/tiles/gen_slide.c from the CMU-1
# region). Run ON the GPU machine after scripts/device-tests.sh put the
# binaries on PATH: `bash scripts/device-tests.sh tiles [SIZE] [SLIDES]`.
#
#   tessera local --gpus 0 --worker-arg --threads --worker-arg 8 -- tsr-tiles --slides S... --drop-edges --out gpu.tsv
#   tessera local --cpu-workers $(nproc) --threads-per-worker 1 -- tsr-tiles --slides S... --drop-edges --out cpu.tsv
#
# GPU_THREADS (8) sets the GPU worker's executor threads; the GPU run is
# made twice, nvJPEG's default backend (the default) and, with
# TSR_NVJPEG_BACKEND=hardware, the JPEG engines (GPU_HW=0 skips it). Prints the times, decoded MB/s and the ratio, and compares the kept
# decisions of the two runs (nvJPEG's IDCT is not libjpeg-turbo's: a tile
# near a threshold may flip; the count of differing rows is printed).
# Then the Python GPU peer on the same slides:
#   python3 bench/tiles/peer_gpu.py S... 256 [BATCH]   (PEER_BATCH, default 256)
# and, with SEPARATE=1, one tsr-tiles run a slide (the job-array pattern).
set -uo pipefail
size=${1:-40000}; n=${2:-1}
ppm=${TSR_WSI_DATA:?}/CMU-1-Small-Region_level0_rgb.ppm
dir=/tmp/tsr-bench-tiles; mkdir -p "$dir"
slides=()
for i in $(seq 1 "$n"); do
  s=$dir/slide_${size}_$i.tif
  [ -f "$s" ] || { if [ "$i" -eq 1 ]; then tsr-gen-slide "$ppm" "$s" "$size" 3 >/dev/null; else cp "$dir/slide_${size}_1.tif" "$s"; fi; }
  slides+=("$s")
done
echo "# bench/tiles/gpu $(date -u +%Y-%m-%d) GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores: $n slide(s) ${size}x${size}, tile 256, seed filter"
mp=$(python3 -c "print($n * ($size // 256) ** 2 * 256 * 256 * 3 / 1e6)")
run() {
  local what=$1; shift
  local t0=$(date +%s.%N)
  timeout 500 tessera local "$@" -- tsr-tiles --slides "${slides[@]}" --drop-edges --out "$dir/$what.tsv" 2>&1 | grep -E "slides read|error" | tail -2
  python3 -c "print($(date +%s.%N) - $t0)"
}
gt=${GPU_THREADS:-8}
t_gpu=$(run gpu --gpus 0 --worker-arg --threads --worker-arg "$gt" | tail -1)
t_gpu_hw=nan
[ "${GPU_HW:-1}" = 0 ] || t_gpu_hw=$(TSR_NVJPEG_BACKEND=hardware run gpu_hw --gpus 0 --worker-arg --threads --worker-arg "$gt" | tail -1)
t_cpu=$(run cpu --cpu-workers "$(nproc)" --threads-per-worker 1 | tail -1)
printf "tsr-tiles, 1 GPU worker, %s threads, nvJPEG default    %8.2f s  %8.1f MB/s decoded\n" "$gt" "$t_gpu" "$(python3 -c "print($mp / $t_gpu)")"
[ "$t_gpu_hw" = nan ] || printf "tsr-tiles, 1 GPU worker, %s threads, nvJPEG hardware   %8.2f s  %8.1f MB/s decoded\n" "$gt" "$t_gpu_hw" "$(python3 -c "print($mp / $t_gpu_hw)")"
printf "tsr-tiles, %d CPU workers          %8.2f s  %8.1f MB/s decoded\n" "$(nproc)" "$t_cpu" "$(python3 -c "print($mp / $t_cpu)")"
python3 -c "print(f'ratio: the GPU worker is {$t_cpu/$t_gpu:.2f}x the $(nproc) CPU workers')"
# SEPARATE=1: the batch as one tsr-tiles run a slide (the seed's job-array
# pattern), each under its own `tessera local`, against the one graph.
if [ "${SEPARATE:-0}" = 1 ] && [ "$n" -gt 1 ]; then
  t0=$(date +%s.%N)
  for sl in "${slides[@]}"; do
    timeout 500 tessera local --gpus 0 --worker-arg --threads --worker-arg "$gt" -- tsr-tiles --slides "$sl" \
      --drop-edges --no-progress --out "$dir/one.tsv" >/dev/null 2>&1
  done
  t_sep=$(python3 -c "print($(date +%s.%N) - $t0)")
  printf "tsr-tiles, 1 GPU worker, %d separate runs     %8.2f s  %8.1f MB/s decoded\n" "$n" "$t_sep" "$(python3 -c "print($mp / $t_sep)")"
  python3 -c "print(f'ratio: one graph over the batch is {$t_sep/$t_gpu:.2f}x the separate runs')"
fi
# The Python GPU peer (bench/tiles/peer_gpu.py: tifffile, torchvision's
# batched nvJPEG decode, PyTorch statistics), where its packages exist.
if python3 -c "import torch, torchvision, tifffile" 2>/dev/null; then
  peer=$(timeout 900 python3 bench/tiles/peer_gpu.py "${slides[@]}" 256 ${PEER_BATCH:-256} 2>&1 | tail -1)
  t_peer=$(echo "$peer" | awk '/^tiles/ {print $6}')
  if [ -n "$t_peer" ]; then
    printf "Python GPU peer (tifffile + torchvision nvJPEG, batch %s)  %8.2f s  %8.1f MB/s decoded  (%s)\n" \
      "${PEER_BATCH:-256}" "$t_peer" "$(python3 -c "print($mp / $t_peer)")" "$peer"
    python3 -c "print(f'ratio: the GPU worker is {$t_peer/$t_gpu:.2f}x the Python GPU peer')"
  else
    echo "Python GPU peer failed: $peer"
  fi
else
  echo "Python GPU peer: torch, torchvision or tifffile missing here"
fi
python3 - "$dir/gpu.tsv" "$dir/cpu.tsv" <<'PY'
import sys
def rows(p):
    lines = [l.rstrip("\n").split("\t") for l in open(p) if not l.startswith("#")]
    head, body = lines[0], lines[1:]
    k = head.index("kept")
    return {tuple(r[:4]): r[k] for r in body}
g, c = rows(sys.argv[1]), rows(sys.argv[2])
diff = sum(1 for key in c if g.get(key) != c[key])
print(f"tiles: {len(c)}, kept on CPU {sum(v == '1' for v in c.values())}, on GPU {sum(v == '1' for v in g.values())}, decisions that differ {diff}")
PY
