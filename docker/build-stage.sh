#!/bin/sh
# The build stage of docker/Dockerfile and docker/Dockerfile.cuda: installs
# the build dependencies, builds what the images ship, installs it for
# PREFIX into the staging tree STAGE (STAGE/PREFIX/..., which the runtime
# stage copies: in a CUDA devel image PREFIX=/usr/local also holds the CUDA
# toolkit, which must not follow) and lists the distribution packages the
# runtime stage must install (STAGE/PREFIX/share/tessera/runtime-packages.txt).
# One script for both images, so the CPU and CUDA images cannot drift apart.
#
#   docker/build-stage.sh SRC STAGE PREFIX [CMAKE ARGS...]
set -eu
src=$1 stage=$2 prefix=$3
shift 3
"$src/scripts/install-deps.sh" --build
build=/tmp/tessera-build
# Only what is installed: everything but the tests and benchmarks (a list
# of targets here went stale when tsr-tiles was added).
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DTSR_TESTS=OFF -DTSR_BENCH=OFF "$@"
cmake --build "$build" -j"$(nproc)"
DESTDIR="$stage" cmake --install "$build"
list="$stage$prefix/share/tessera/runtime-packages.txt"
mkdir -p "$(dirname "$list")"
"$src/docker/runtime-packages.sh" "$stage$prefix" > "$list"
echo "build-stage: runtime packages: $(tr '\n' ' ' < "$list")"
rm -rf "$build"
