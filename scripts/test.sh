#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, build, run the whole
# test suite, then build again with AddressSanitizer + UBSan and run it
# there too. GPU tests print that they were skipped when no GPU is present;
# the deployment tests (label deploy: SLURM, hosts in network namespaces)
# run in the first pass only (they test scripts and daemons' behaviour
# across processes, not memory), and print that they were skipped when not
# run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
start=$(date +%s)

scripts/build.sh
(cd build && ctest --output-on-failure --timeout 600 -j2)

# nvcc cannot take the sanitizer flags: the ASan build leaves out the CUDA
# variants (the build above compiled and linked them).
BUILD_DIR=build-asan scripts/build.sh -DTSR_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DTSR_CUDA=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp
(cd build-asan && ctest --output-on-failure --timeout 900 -j2 --label-exclude deploy)

echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
