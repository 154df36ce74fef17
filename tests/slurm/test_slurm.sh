#!/usr/bin/env bash
# tests/slurm/test_slurm.sh BIN_DIR [CASE...] — docker/slurm/tessera.sbatch under a
# real one-node SLURM (munged, slurmctld, slurmd started here, in a temp
# dir, on free ports; tests/slurm/slurm-cluster.sh):
#
# Cases (all by default; CTest runs one per test):
#   e2e:       a job runs the scheduler, two workers and a client end to end, and
#      its output has the verified results (tsr-sum-random, tsr-svd);
#   scancel:   `scancel` of a job mid-graph leaves no tessera process behind;
#   sigterm:   SIGTERM to the batch script alone (what `--signal=B:TERM@60` sends
#      before the time limit) stops client, workers and scheduler in order:
#      the workers say goodbye, the job exits 143;
#   timelimit: the same from a real time limit (sbatch -t 1 --signal=B:TERM@50);
#   array:     the job-array pattern: one cluster per array task over its batch of
#      inputs, and one job over all inputs, give the same verified results.
#
# Exits 77 (CTest: skipped) with a SKIPPED line when it cannot run here:
# not root, or SLURM/munge not installed (scripts/install-deps.sh --deploy).
# TESSERA_TEST_KEEP_LOGS=DIR keeps the jobs' outputs and daemon logs.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN_DIR [CASE...]" >&2; exit 2; }
bin=$(cd "$1" && pwd) || exit 2
src=$(cd "$(dirname "$0")/../.." && pwd)
launcher=$src/docker/slurm/tessera.sbatch

skip() { echo "SKIPPED: test_slurm: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (slurmd starts jobs as their users, munged runs as user munge)"
for c in slurmctld slurmd sbatch squeue scancel scontrol munged runuser ss; do
  command -v "$c" >/dev/null || skip "$c is not installed (scripts/install-deps.sh --deploy installs slurm-wlm and munge)"
done
id munge >/dev/null 2>&1 || skip "there is no user munge (the munge package makes it)"
for b in tessera-scheduler tessera-worker tessera tsr-sum-random tsr-svd; do
  [ -x "$bin/$b" ] || { echo "FAIL: $bin/$b is not built"; exit 1; }
done

# shellcheck source=tests/slurm/slurm-cluster.sh
. "$src/tests/slurm/slurm-cluster.sh"
work=$(mktemp -d /tmp/tsr-slurm-test-XXXXXX)
chmod 755 "$work"
failures=0
start=$SECONDS

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# Processes of our jobs running one of our binaries: their executable is
# in BIN_DIR and their environment has this test's SLURM_CONF (every job
# of this SLURM inherits it from sbatch), so another test's run does not
# count.
our_procs() {
  local p exe
  [ -n "${SLURM_CONF:-}" ] || return 0
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in "$bin"/*) ;; *) continue ;; esac
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" || continue
    echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" | cut -c1-160)"
  done
}

dump() {
  local f
  for f in "$work"/*.out "$work"/*/*.log; do
    [ -f "$f" ] && { echo "----- $f"; tail -n 60 "$f"; }
  done
  slurm_dump
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ "$rc" -ne 0 ] || [ "$failures" -eq 0 ] || rc=1
  [ "$rc" -eq 0 ] || dump
  slurm_down
  local p
  for p in $(our_procs | cut -d' ' -f1); do kill -KILL "$p" 2>/dev/null; done
  # TESSERA_TEST_KEEP_LOGS=DIR keeps every job's output and logs (as the C tests do).
  [ -n "${TESSERA_TEST_KEEP_LOGS:-}" ] && cp -r "$work" "$TESSERA_TEST_KEEP_LOGS/slurm-$(date +%H%M%S)"
  rm -rf "$work"
  echo "test_slurm: $([ "$rc" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# Waits until job $1 has left the queue (at most $2 s). 0 when it did.
wait_gone() {
  for _ in $(seq 1 $(( $2 * 5 ))); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}

# Waits until file $1 has a line matching $2 (at most $3 s).
wait_line() {
  for _ in $(seq 1 $(( $3 * 5 ))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# Every process the launcher recorded for log dir $1 is gone, and no
# process runs one of our binaries.
check_nothing_left() {
  local what=$1 logs=$2 left pid
  sleep 1
  left=$(our_procs)
  for pid in $(cat "$logs/scheduler.pid" 2>/dev/null) $(cut -d' ' -f1 "$logs/workers.pids" 2>/dev/null); do
    kill -0 "$pid" 2>/dev/null && left="$left pid $pid (recorded by the launcher)"
  done
  if [ -n "$left" ]; then fail "$what: processes left behind: $left"; else pass "$what: no tessera process left"; fi
}

# A client that runs for minutes on two 1-thread workers (2e10 elements
# took 25 s on a quiet machine): always stopped mid-graph, also by the
# time limit, whose SIGTERM slurmctld sends on its next periodic check
# (up to ~30 s late).
long_client=(tsr-sum-random --n 200000000000 --chunk 10000000)

# Submits the launcher: submit NAME [SBATCH FLAGS...] -- [LAUNCHER FLAGS...] -- PROGRAM...
# Job output in $work/NAME.out ($work/NAME-TASK.out for an array), daemon logs in $work/NAME/tessera-JOBID.
# Prints the job id (sbatch --parsable).
submit() {
  local name=$1 sb=() ln=()
  shift
  while [ "$1" != "--" ]; do sb+=("$1"); shift; done
  shift
  while [ "$1" != "--" ]; do ln+=("$1"); shift; done
  shift
  mkdir -p "$work/$name"
  local out=$work/$name.out
  [[ " ${sb[*]}" == *" --array"* ]] && out=$work/$name-%a.out   # one file per array task
  sbatch --parsable -o "$out" "${sb[@]}" "$launcher" --bin-dir "$bin" --log-dir "$work/$name" "${ln[@]}" -- "$@"
}

case_e2e() {
  local jid logs
  jid=$(submit e2e --wait -c 2 -t 10 -- --workers-per-node 2 -- \
        bash -c 'tsr-sum-random --n 4000000 --chunk 250000 --verify &&
                 tsr-svd --rows 3000 --cols 400 --chunks 500,400 --k 5 --verify')
  local rc=$?
  jid=${jid%%;*}
  logs=$work/e2e/tessera-$jid
  [ "$rc" -eq 0 ] || fail "end to end: the job exited with $rc"
  grep -qx verified "$work/e2e.out" || fail "end to end: tsr-sum-random did not print 'verified'"
  if ! grep -q "^verify: residual" "$work/e2e.out" || grep -q "FAIL" "$work/e2e.out"; then
    fail "end to end: tsr-svd --verify did not pass"
  fi
  grep -q "2 cpu worker(s) connected" "$work/e2e.out" || fail "end to end: the launcher did not report 2 workers"
  [ "$(grep -c "left: said goodbye" "$logs/scheduler.log")" -ge 2 ] ||
    fail "end to end: the workers did not say goodbye to the scheduler"
  grep -q "shutting down" "$logs/scheduler.log" || fail "end to end: the scheduler did not shut down cleanly"
  [ "$failures" -eq 0 ] && pass "end to end: verified results in the job's output"
  check_nothing_left "end to end" "$logs"
}

# Submits the long client as job NAME and waits until it runs: prints the
# job id, or nothing.
submit_long() {
  local name=$1 jid
  shift
  jid=$(submit "$name" -c 2 "$@" -- --workers-per-node 2 -- "${long_client[@]}")
  if ! wait_line "$work/$name.out" "running:" 60; then
    fail "$name: the job did not start its client"
    return
  fi
  sleep 2
  local n
  n=$(our_procs | wc -l)
  # The scheduler, 2 workers and the client run: the later checks can fail.
  [ "$n" -ge 4 ] || fail "$name: expected the scheduler, 2 workers and the client running, saw: $(our_procs | tr '\n' ' ')"
  echo "$jid"
}

case_scancel() {
  local jid
  jid=$(submit_long scancel -t 10)
  [ -n "$jid" ] || return
  scancel "$jid"
  wait_gone "$jid" 60 || fail "scancel: job $jid still in the queue after 60 s"
  check_nothing_left "scancel" "$work/scancel/tessera-$jid"
}

# SIGTERM to the batch script alone: what --signal=B:TERM@60 sends.
case_sigterm() {
  local jid logs
  jid=$(submit_long sigterm -t 10)
  [ -n "$jid" ] || return
  logs=$work/sigterm/tessera-$jid
  scancel --batch --signal=TERM "$jid"
  wait_gone "$jid" 60 || fail "SIGTERM: job $jid still in the queue after 60 s"
  grep -q "PROGRAM stopped by SIGTERM" "$work/sigterm.out" || fail "SIGTERM: the launcher did not stop the client"
  [ "$(job_field "$jid" ExitCode)" = "143:0" ] || fail "SIGTERM: exit code $(job_field "$jid" ExitCode), want 143:0"
  [ "$(grep -c "left: said goodbye" "$logs/scheduler.log")" -ge 2 ] ||
    fail "SIGTERM: the workers did not say goodbye (they were killed, not stopped)"
  grep -q "shutting down" "$logs/scheduler.log" || fail "SIGTERM: the scheduler did not shut down cleanly"
  [ "$failures" -eq 0 ] && pass "SIGTERM: client, workers and scheduler stopped in order, exit 143"
  check_nothing_left "SIGTERM" "$logs"
}

# A real time limit: -t 1 with --signal=B:TERM@50. SLURM sends the signal
# up to 60 s early (its timer's resolution), so anywhere in the first
# minute; the launcher must stop everything before SLURM kills the job.
case_timelimit() {
  local jid logs
  jid=$(submit timelimit -c 2 -t 1 --signal=B:TERM@50 -- --workers-per-node 2 -- "${long_client[@]}")
  logs=$work/timelimit/tessera-$jid
  wait_gone "$jid" 150 || { fail "time limit: job $jid still in the queue after 150 s"; return; }
  grep -q "got SIGTERM" "$work/timelimit.out" || fail "time limit: the launcher never got SIGTERM"
  [ "$(job_field "$jid" JobState)" != TIMEOUT ] ||
    fail "time limit: SLURM had to kill the job (state TIMEOUT): the launcher did not stop in time"
  [ "$(job_field "$jid" ExitCode)" = "143:0" ] || fail "time limit: exit code $(job_field "$jid" ExitCode), want 143:0"
  grep -q "shutting down" "$logs/scheduler.log" || fail "time limit: the scheduler did not shut down cleanly"
  [ "$failures" -eq 0 ] && pass "time limit: the job's SIGTERM stopped everything before SLURM's kill"
  check_nothing_left "time limit" "$logs"
}

# "sum = S" per seed from run-inputs' prefixed output, sorted.
sums_by_seed() { sed -n 's/^\[\([0-9]*\)\] sum = \(.*\)/\1 \2/p' "$@" | sort -n; }

# The job-array pattern (one cluster per array task, each over its batch of
# 2 inputs) and its replacement (one job, one cluster, all 4 inputs at
# once) on the same inputs: both verified, the same sums.
case_array() {
  local list=$work/seeds.txt jid rc
  printf '# seeds of tsr-sum-random, one input a line\n11\n12\n\n13\n14\n' >"$list"
  local prog=("$src/docker/slurm/run-inputs.sh")
  jid=$(submit array --wait --array=0-1 -c 1 -t 10 -- -- "${prog[@]}" "$list" -- \
        tsr-sum-random --n 3000000 --chunk 200000 --seed '{}' --verify)
  rc=$?
  [ "$rc" -eq 0 ] || fail "array: the job array exited with $rc"
  local outs=("$work"/array-*.out)
  [ "$(cat "${outs[@]}" | grep -c "^\[1[1-4]\] verified")" -eq 4 ] || fail "array: not every input printed verified"
  [ "$(cat "${outs[@]}" | grep -c "^run-inputs: 2 of 2 inputs succeeded")" -eq 2 ] ||
    fail "array: each of the 2 array tasks should have run 2 inputs"
  [ "$(find "$work/array" -maxdepth 1 -name 'tessera-*_[01]' | wc -l)" -eq 2 ] ||
    fail "array: expected one cluster (log dir) per array task"
  jid=$(submit all --wait -c 2 -t 10 -- --workers-per-node 2 -- "${prog[@]}" --parallel 0 "$list" -- \
        tsr-sum-random --n 3000000 --chunk 200000 --seed '{}' --verify)
  rc=$?
  jid=${jid%%;*}
  [ "$rc" -eq 0 ] || fail "all inputs: the job exited with $rc"
  [ "$(grep -c "^\[1[1-4]\] verified" "$work/all.out")" -eq 4 ] || fail "all inputs: not every input printed verified"
  [ "$(grep -c "client .* submitted graph" "$work/all/tessera-$jid/scheduler.log")" -eq 4 ] ||
    fail "all inputs: the one scheduler did not get the 4 inputs' graphs"
  local a b
  a=$(sums_by_seed "${outs[@]}")
  b=$(sums_by_seed "$work/all.out")
  if [ -z "$a" ] || [ "$a" != "$b" ]; then fail "array and all-inputs runs disagree: [$a] vs [$b]"; fi
  [ "$failures" -eq 0 ] && pass "array: one cluster per array task and one job over all inputs agree, all verified"
  check_nothing_left "array" "$work/all/tessera-$jid"
}

cases=("${@:2}")
[ ${#cases[@]} -gt 0 ] || cases=(e2e scancel sigterm timelimit array)
for c in "${cases[@]}"; do
  declare -F "case_$c" >/dev/null || { echo "usage: $0 BIN_DIR [e2e|scancel|sigterm|timelimit|array]..." >&2; exit 2; }
done
slurm_up "$work/slurm" 2 || { fail "could not start SLURM"; exit 1; }
echo "test_slurm: SLURM up in $((SECONDS - start)) s ($SLURM_CONF)"
for c in "${cases[@]}"; do "case_$c"; done
[ "$failures" -eq 0 ] || exit 1
