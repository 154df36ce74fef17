#!/usr/bin/env bash
# bench/tiles: tsr-tiles (seed filter, 2 CPU workers) against the seed's
# Python approach (tifffile + numpy) and OpenSlide (python3-openslide) on
# the same generated slides, in one run; prints each and the ratio.
# OpenSlide runs under Debian's /usr/bin/python3 (python3-openslide, python3-numpy).
#
#   bench/tiles/tiles.sh [SIZE (40000)] [SLIDES (1)] [BUILD (build-cpu)]
#
# Slides: bench/tiles/gen_slide.c tiles the CMU-1 region into SIZE x SIZE
# pyramidal JPEG TIFFs (made once, kept in /tmp/tsr-bench-tiles).
# Python: the tiles test venv (scripts/test-venv.sh with tests/tiles/requirements.txt).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
size=${1:-40000}; n=${2:-1}; build=$root/${3:-build-cpu}
bin=$build/bin; dir=/tmp/tsr-bench-tiles; mkdir -p "$dir"
ppm=$root/../shared/data/wsi_cmu1_small_region/CMU-1-Small-Region_level0_rgb.ppm
venv=$build/test-venv-tiles
"$root/scripts/test-venv.sh" "$venv" "$root/tests/tiles/requirements.txt" "numpy tifffile imagecodecs" >/dev/null
slides=()
for i in $(seq 1 "$n"); do
  s=$dir/slide_${size}_$i.tif
  [ -f "$s" ] || { if [ "$i" -eq 1 ]; then "$bin/tsr-gen-slide" "$ppm" "$s" "$size" 3 >/dev/null; else cp "$dir/slide_${size}_1.tif" "$s"; fi; }
  slides+=("$s")
done
echo "# bench/tiles $(date -I) $(nproc) cores: $n slide(s) ${size}x${size}, tile 256, seed filter"
echo "# command: $0 $size $n ${3:-build-cpu}"
mp=$(python3 -c "print($n * ($size // 256) ** 2 * 256 * 256 * 3 / 1e6)")
t0=$(date +%s.%N)
"$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 -- "$bin/tsr-tiles" --slides "${slides[@]}" --drop-edges \
  --out "$dir/tiles.tsv" 2>&1 | grep "slides read"
t_tsr=$(python3 -c "print($(date +%s.%N) - $t0)")
py_tiff=$("$venv/bin/python" "$root/bench/tiles/peer.py" tifffile "${slides[@]}" 256)
py_os=$(/usr/bin/python3 "$root/bench/tiles/peer.py" openslide "${slides[@]}" 256)
t_tiff=$(echo "$py_tiff" | awk '{print $6}'); t_os=$(echo "$py_os" | awk '{print $6}')
printf "tsr-tiles (2 workers)      %8.2f s  %8.1f MB/s decoded\n" "$t_tsr" "$(python3 -c "print($mp / $t_tsr)")"
printf "tifffile + numpy           %8.2f s  %8.1f MB/s   (%s)\n" "$t_tiff" "$(python3 -c "print($mp / $t_tiff)")" "$py_tiff"
printf "openslide + numpy          %8.2f s  %8.1f MB/s   (%s)\n" "$t_os" "$(python3 -c "print($mp / $t_os)")" "$py_os"
python3 -c "b=min($t_tiff,$t_os); print(f'ratio: tsr-tiles is {b/$t_tsr:.2f}x the faster Python peer')"
