#!/usr/bin/env bash
# Configures and builds Tessera into BUILD_DIR (default build/). Extra
# arguments go to CMake's configure step (e.g. -DTSR_SANITIZE=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DTSR_WERROR=ON "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
