#!/usr/bin/env bash
# Builds the libFuzzer targets (TSR_FUZZ=ON, clang, ASan + UBSan) into
# build-fuzz and fuzzes each for SECONDS (default 20) from its seed corpus
# in tests/fuzz/corpus/<target>, one after the other. New inputs go to a
# scratch corpus in build-fuzz/fuzz-work (the committed seeds stay as they
# are); a crash, leak, UBSan report or timeout leaves its input in
# build-fuzz/fuzz-artifacts/<target>/ and fails the run. docs/fuzzing.md.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]    (CI: scripts/test.sh runs it with 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/fuzz/targets.sh
seconds=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${fuzz_targets[@]}")
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
command -v clang >/dev/null || { echo "fuzz: clang is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
cmake -S . -B "$build_dir" -DCMAKE_C_COMPILER=clang -DTSR_FUZZ=ON -DTSR_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTSR_WERROR=ON >/dev/null
cmake --build "$build_dir" --target fuzz_all -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The file-reading targets write their input to a temporary file per run:
# in memory when /dev/shm is there.
[ -w /dev/shm ] && export TMPDIR=/dev/shm
failed=()
for t in "${targets[@]}"; do
  work="$build_dir/fuzz-work/$t" art="$build_dir/fuzz-artifacts/$t"
  mkdir -p "$work" "$art"
  log="$build_dir/fuzz-artifacts/$t.log"
  echo "fuzz: $t for ${seconds} s"
  if "$build_dir/bin/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
       -print_final_stats=1 -artifact_prefix="$art/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $t: ${runs:-?} executions, no crash"
  else
    tail -40 "$log" >&2
    echo "fuzz: $t FAILED: the input is in $art/ (replay: $build_dir/bin/fuzz_$t FILE)" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, no crash"
