#!/usr/bin/env bash
# scripts/device-run.sh — prepares, on this Debian build machine (nvcc, no
# GPU), everything a GPU machine (the `device` tool's: Ubuntu 24.04, CUDA
# 13, no package registry) needs to run the GPU tests and benchmarks, and
# prints the one `device` call that runs them. See docs/gpu.md.
#
#   scripts/device-run.sh [--no-build] [--no-wheels]
#
# 1. Builds with CUDA into build-device/ (Release, CMAKE_CUDA_ARCHITECTURES=90:
#    H100 and H200; one architecture halves the build time).
# 2. Finds the runtime libraries of our binaries with ldd, the Debian package
#    of each with dpkg -S, fetches those packages with `apt-get download` and
#    unpacks them with `dpkg -x` under .deps/ (git-ignored). libc and the
#    compiler runtime are the device's own (newer); the CUDA libraries
#    (cudart, cuBLAS, cuSOLVER) are the device's CUDA 13.
# 3. Packs the stripped binaries, the test runner's inputs (HapMap3's
#    genotypes and reference eigenvalues) and those libraries into
#    .deps/carry/tessera-device.tar.xz (xz: OpenBLAS alone is
#    35 MB unpacked; the device tool moves at most 64 MiB a call).
# 4. Downloads the wheels of the Dask benchmark (dask, distributed and the
#    pure-Python packages the device image lacks) into .whl/ (git-ignored).
#
# Only x86-64. Needs: cmake, nvcc, apt-get (network), python3 -m pip (network).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=1 wheels=1
for a in "$@"; do
  case $a in
    --no-build) build=0 ;;
    --no-wheels) wheels=0 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "device-run.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
[ "$(uname -m)" = x86_64 ] || { echo "device-run.sh: the device machine is x86-64; build there instead" >&2; exit 1; }

targets=(tessera_cli tessera-scheduler tessera-worker test_gpu test_gpu_cli test_kernels_cuda tsr-svd tsr-svd-gpu tsr-memory-svd tsr-pca tsr-gen-bed tsr-cluster test_gpu_cluster tsr-knn-time test_tiles_cuda tsr-tiles tsr-gen-slide tsr_tile_embed test_gpu_xfer tsr-bench-gpu-pair tsr-bench-transfer tsr-bench-overhead tsr-bench-pingpong)
if [ $build = 1 ]; then
  mkdir -p .deps
  log=.deps/build-device.log
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTSR_CUDA=ON \
        -DTSR_GPU_WORKER=ON >$log 2>&1 || { tail -30 $log; exit 1; }
  cmake --build build-device -j"$(nproc)" --target "${targets[@]}" >>$log 2>&1 \
    || { grep -E "error|Error" $log | head -30; exit 1; }
fi
bins=(tessera tessera-scheduler tessera-worker test_gpu test_gpu_cli test_kernels_cuda tsr-svd tsr-svd-gpu tsr-memory-svd tsr-pca tsr-gen-bed tsr-cluster test_gpu_cluster tsr-knn-time test_tiles_cuda tsr-tiles tsr-gen-slide test_gpu_xfer tsr-bench-gpu-pair tsr-bench-transfer tsr-bench-overhead tsr-bench-pingpong)
for b in "${bins[@]}"; do [ -x build-device/bin/$b ] || { echo "device-run.sh: build-device/bin/$b missing" >&2; exit 1; }; done
# grep reads all of ldd: with -q it stops early and pipefail reads ldd's SIGPIPE as "no CUDA"
if ! ldd build-device/bin/tessera-worker | grep libcudart >/dev/null; then
  echo "device-run.sh: warning: tessera-worker has no CUDA (GPU tests will skip)" >&2
fi

# ---- runtime libraries: ldd -> dpkg -S -> apt-get download -> dpkg -x ----
stage=.deps/stage
rm -rf "$stage" .deps/carry
mkdir -p "$stage/bin" "$stage/lib" .deps/debs .deps/root .deps/carry
for b in "${bins[@]}"; do strip -o "$stage/bin/$b" "build-device/bin/$b"; done
# The device's own: glibc, the compiler runtime, CUDA.
skip='^(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libcusolver|libcusparse|libnvJitLink)\.so'
declare -A want_pkg=() soname_path=()
while read -r soname path; do
  [[ $soname =~ $skip ]] && continue
  real=$(readlink -f "$path")
  if [[ $real == "$root/build-device/"* ]]; then   # ours (libtessera.so)
    cp -L "$real" "$stage/lib/$soname"
    continue
  fi
  pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1) || true
  if [ -z "$pkg" ]; then
    # alternatives links (libblas.so.3 -> openblas): ask about the link's target dir too
    pkg=$(dpkg -S "$(basename "$real")" 2>/dev/null | head -1 | cut -d: -f1) || true
  fi
  [ -n "$pkg" ] || { echo "device-run.sh: no Debian package owns $real ($soname)" >&2; exit 1; }
  want_pkg[$pkg]=1
  soname_path[$soname]=$real
done < <(for b in "${bins[@]}"; do ldd "build-device/bin/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
echo "packages: ${!want_pkg[*]}"
(cd .deps/debs && apt-get -o DPkg::Lock::Timeout=120 download "${!want_pkg[@]}" >/dev/null)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
# One file per soname, taken from the unpacked packages (not this machine).
for soname in "${!soname_path[@]}"; do
  real=${soname_path[$soname]}
  src=".deps/root$real"
  [ -e "$src" ] || src=$(find .deps/root -name "$(basename "$real")" | head -1)
  [ -n "$src" ] && [ -e "$src" ] || { echo "device-run.sh: $real not in the downloaded packages" >&2; exit 1; }
  cp -L "$src" "$stage/lib/$soname"
done
# The HapMap3 genotypes and their reference eigenvalues, for test_gpu's
# PCA (../shared does not travel to the GPU machine).
hm3=../shared/data/hapmap3_1kg_genotypes
mkdir -p "$stage/data/reference"
cp $hm3/HM3_thinned_autosomal_overlap.{bed,bim,fam} "$stage/data/"
cp $hm3/reference/hm3.exact_eigh_binom2.txt "$stage/data/reference/"
# The CMU-1 slide region: test_tiles_cuda, and bench/tiles/gpu.sh's slides
# are made from its decoded PPM.
mkdir -p "$stage/data/wsi"
cp ../shared/data/wsi_cmu1_small_region/CMU-1-Small-Region{.svs,_level0_rgb.ppm} "$stage/data/wsi/"
# The example op plugin with its CUDA entry (test_gpu's plugin test).
mkdir -p "$stage/plugins" && strip -o "$stage/plugins/libtsr_tile_embed.so" build-device/plugins/libtsr_tile_embed.so
tar -C "$stage" -cf - bin lib data plugins | xz -T0 -6 > .deps/carry/tessera-device.tar.xz
# A CUDA-aware UCX for device-to-device chunks (docs/gpu.md): the one a
# device run built before (its $OUT/ucx-cuda.tar.xz, kept as
# .deps/ucx-cuda.tar.xz), else the source with its configure, built there
# by scripts/device-tests.sh (about 90 s).
if [ -f .deps/ucx-cuda.tar.xz ]; then
  cp .deps/ucx-cuda.tar.xz .deps/carry/
elif [ -x third_party/ucx-src/ucx/configure ]; then
  tar -C third_party/ucx-src -cf - --exclude=ucx/build-cuda ucx | xz -T0 -6 > .deps/carry/ucx-src.tar.xz
else
  echo "device-run.sh: no CUDA-aware UCX to carry (scripts/build-ucx-cuda.sh --fetch-only): gpu.xfer will skip" >&2
fi

# ---- wheels for bench/svd_gpu_dask.py ----
if [ $wheels = 1 ]; then
  mkdir -p .whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl \
    dask==2026.8.0 distributed==2026.8.0 partd locket tblib zict tornado
fi

size=$(du -cb .deps/carry $( [ -d .whl ] && echo .whl ) $(git ls-files -co --exclude-standard) 2>/dev/null | tail -1 | cut -f1)
echo
echo "ready: .deps/carry/tessera-device.tar.xz ($(du -h .deps/carry/tessera-device.tar.xz | cut -f1)), .whl/ ($(ls .whl 2>/dev/null | wc -l) wheels); ~$((size / 1048576)) MiB travel (limit 64)"
echo
echo "device call (kind nvidia-h200 for the 200 GB run; timeout_s 600):"
echo "  carry:   [\".deps/carry\", \".whl\"]"
echo "  command: bash scripts/device-tests.sh all"
echo "(or 'tests' / 'bench' alone; logs come back under \$OUT)"
