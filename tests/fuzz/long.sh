#!/usr/bin/env bash
# The long fuzz run of bench/RESULTS.md: every target at once, at the
# lowest CPU priority (nice 19, so it only takes idle time on a shared
# machine), each until RUNS executions or CAP seconds, whichever first,
# from its seeds plus what earlier long runs found (build-fuzz/fuzz-long/).
# Prints one line per target: executions, seconds, coverage, result.
# Needs tests/fuzz/run.sh to have built build-fuzz.
#
#   tests/fuzz/long.sh [RUNS] [CAP_SECONDS] [TARGET...]   (default 10000000 2700, all)
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/fuzz/targets.sh
runs=${1:-10000000} cap=${2:-2700}
shift 2 2>/dev/null || shift $#
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${fuzz_targets[@]}")
dir=build-fuzz/fuzz-long
[ -w /dev/shm ] && export TMPDIR=/dev/shm
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${targets[@]}"; do
  mkdir -p "$dir/work/$t" "$dir/art/$t"
  ( start=$(date +%s)
    nice -n 19 "build-fuzz/bin/fuzz_$t" -runs="$runs" -max_total_time="$cap" -timeout=10 -rss_limit_mb=2048 \
      -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$dir/art/$t/" "$dir/work/$t" "tests/fuzz/corpus/$t" \
      >"$dir/$t.log" 2>&1
    echo "$? $(( $(date +%s) - start ))" >"$dir/$t.rc" ) &
done
wait
status=0
for t in "${targets[@]}"; do
  read -r rc secs <"$dir/$t.rc"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/$t.log")
  cov=$(grep -a -o 'cov: [0-9]* ft: [0-9]*' "$dir/$t.log" | tail -1)
  result="no crash"
  [ "$rc" -eq 0 ] || { result="CRASH: see $dir/art/$t/ and $dir/$t.log"; status=1; }
  printf '%-6s %12s executions %6s s  %-22s %s\n' "$t" "${execs:-?}" "$secs" "$cov" "$result"
done
exit $status
