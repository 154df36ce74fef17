#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, build, run the whole
# test suite, then build again with AddressSanitizer + UBSan and run it
# there too (all but the deployment tests, label deploy, which run images,
# SLURM jobs and network namespaces rather than test memory). GPU tests
# print that they were skipped when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-deps.sh --deploy
start=$(date +%s)

scripts/build.sh
(cd build && ctest --output-on-failure --timeout 600 -j2 -LE deploy)
# The deployment tests (containers, SLURM, hosts in network namespaces;
# docs/deploy.md, slurm.md, hosts.md), one at a time, their output shown:
# the image size and the time from compose up to the first task.
(cd build && ctest -L deploy --timeout 600 -V)

# nvcc cannot take the sanitizer flags: the ASan build leaves out the CUDA
# variants (the build above compiled and linked them).
BUILD_DIR=build-asan scripts/build.sh -DTSR_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DTSR_CUDA=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp
(cd build-asan && ctest --output-on-failure --timeout 900 -j2 -LE "deploy|noasan")

# The decoders of outside input under libFuzzer (tests/fuzz, docs/fuzzing.md):
# each target's seeds and regressions replayed (ctest -L fuzz), then 10 s of
# fuzzing each (9 targets: under 2 minutes, plus the clang build: the CI
# budget). Any crash fails.
tests/fuzz/run.sh 10
(cd build-fuzz && ctest --output-on-failure --timeout 300 -L fuzz)

echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
