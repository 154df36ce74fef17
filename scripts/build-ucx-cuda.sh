#!/usr/bin/env bash
# Builds a CUDA-aware UCX (cuda_copy, cuda_ipc, gdr_copy when present) from
# Debian's source package, for GPU workers that move chunks device to
# device (docs/transport.md, docs/gpu.md). Meant for the device machine
# (it has CUDA with nvml.h, autoconf, automake; no package registry): carry
# the source there, e.g. prepare it here with
#   scripts/build-ucx-cuda.sh --fetch-only        (apt-get source ucx into third_party/ucx-src, and
#                                                  its configure: autoconf, automake, libtool)
# then on the device:
#   scripts/build-ucx-cuda.sh [PREFIX]            (default third_party/ucx-cuda)
# Configured with only what a worker needs (no verbs/rdmacm probing, no
# docs, examples, Java, Go, tests) and built with make -j$(nproc), to stay
# well under the device's 10-minute per-call limit. Check the result with
#   PREFIX/bin/ucx_info -d | grep -E 'Transport|Device'     (cuda_copy, cuda_ipc)
# and run workers with LD_LIBRARY_PATH=PREFIX/lib (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
src=third_party/ucx-src
if [ "${1:-}" = "--fetch-only" ]; then
  mkdir -p "$src"
  grep -qsE '^deb-src|^Types:.*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null ||
    { echo "build-ucx-cuda: no deb-src line in apt sources; add one for bookworm (main) first" >&2; exit 1; }
  (cd "$src" && apt-get source --download-only ucx && dpkg-source -x ucx_*.dsc ucx)
  # configure is generated here: the device machine has autoconf and
  # automake but no libtool (autogen.sh fails there on AC_PROG_LIBTOOL)
  for tool in autoconf automake libtoolize; do
    command -v $tool >/dev/null || { echo "build-ucx-cuda: $tool missing (apt-get install autoconf automake libtool)" >&2; exit 1; }
  done
  (cd "$src/ucx" && ./autogen.sh >autogen.log 2>&1) || { tail -20 "$src/ucx/autogen.log"; exit 1; }
  echo "build-ucx-cuda: source with its configure in $src/ucx; carry it to the device machine"
  exit 0
fi
prefix=$(realpath -m "${1:-third_party/ucx-cuda}")
[ -d "$src/ucx" ] || { echo "build-ucx-cuda: no source in $src/ucx (run with --fetch-only first)" >&2; exit 1; }
cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
[ -f "$cuda/include/cuda.h" ] || { echo "build-ucx-cuda: no CUDA at $cuda (set CUDA_HOME)" >&2; exit 1; }
[ -f "$cuda/include/nvml.h" ] || echo "build-ucx-cuda: warning: no nvml.h under $cuda; cuda_ipc topology needs it" >&2
cd "$src/ucx"
[ -x configure ] || ./autogen.sh
start=$(date +%s)
mkdir -p build-cuda && cd build-cuda
# UCX 1.13 compiles with -Werror, and the device's newer gcc (Ubuntu 24.04)
# warns about uct_md_mem_advise's two declarations: -Wno-error after it.
../configure --prefix="$prefix" --with-cuda="$cuda" --enable-mt CFLAGS="-O3 -g -Wno-error" \
  --disable-logging --disable-debug --disable-assertions --disable-params-check \
  --without-verbs --without-rdmacm --without-knem --without-xpmem --without-java --without-go \
  --without-rocm --without-ugni --disable-examples --disable-doxygen-doc \
  --enable-cma >configure.log 2>&1 || { tail -30 configure.log; exit 1; }
# -k: test/apps does not compile with the device's g++ 13; the libraries,
# their transport modules and ucx_info do, and are what is checked
make -k -j"$(nproc)" >make.log 2>&1 || echo "build-ucx-cuda: some of make failed (test/apps); checking the install" >&2
make -k install >install.log 2>&1 || true
[ -x "$prefix/bin/ucx_info" ] && [ -e "$prefix/lib/libucp.so" ] || { grep -B2 -A6 "error" make.log | head -40; exit 1; }
echo "build-ucx-cuda: installed into $prefix in $(( $(date +%s) - start )) s"
"$prefix/bin/ucx_info" -d | grep -E 'Transport: (cuda|tcp|posix|sysv|cma)' | sort | uniq -c
