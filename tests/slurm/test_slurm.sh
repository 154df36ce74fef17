#!/usr/bin/env bash
# tests/slurm/test_slurm.sh BIN_DIR — docker/slurm/tessera.sbatch under a
# real one-node SLURM (munged, slurmctld, slurmd started here, in a temp
# dir, on free ports; tests/slurm/slurm-cluster.sh):
#
#   1. a job runs the scheduler, two workers and a client end to end, and
#      its output has the verified results (tsr-sum-random, tsr-svd);
#   2. `scancel` of a job mid-graph leaves no tessera process behind;
#   3. SIGTERM to the batch script alone (what `--signal=B:TERM@60` sends
#      before the time limit) stops client, workers and scheduler in order:
#      the workers say goodbye, the job exits 143;
#   4. the same from a real time limit (sbatch -t 1 --signal=B:TERM@50);
#   5. the job-array pattern: one cluster per array task over its batch of
#      inputs, and one job over all inputs, give the same verified results.
#
# Exits 77 (CTest: skipped) with a SKIPPED line when it cannot run here:
# not root, or SLURM/munge not installed (scripts/install-deps.sh --test).
# TESSERA_TEST_KEEP_LOGS=DIR keeps the jobs' outputs and daemon logs.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN_DIR" >&2; exit 2; }
bin=$(cd "$1" && pwd) || exit 2
src=$(cd "$(dirname "$0")/../.." && pwd)
launcher=$src/docker/slurm/tessera.sbatch

skip() { echo "SKIPPED: test_slurm: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (slurmd starts jobs as their users, munged runs as user munge)"
for c in slurmctld slurmd sbatch squeue scancel scontrol munged runuser ss; do
  command -v "$c" >/dev/null || skip "$c is not installed (scripts/install-deps.sh --test installs slurm-wlm and munge)"
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

# Processes running one of our binaries (their executable in BIN_DIR).
# Tests run serially (RUN_SERIAL): any such process is a leftover of ours.
our_procs() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case "$exe" in "$bin"/*) echo "${p#/proc/} ${exe##*/}" ;; esac
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
  local i
  for i in $(seq 1 $(( $2 * 5 ))); do
    [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}

# Waits until file $1 has a line matching $2 (at most $3 s).
wait_line() {
  local i
  for i in $(seq 1 $(( $3 * 5 ))); do
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

# A client that runs for a minute or more on two 1-thread workers: enough
# to be stopped mid-graph.
long_client=(tsr-sum-random --n 20000000000 --chunk 10000000)

slurm_up "$work/slurm" 2 || { fail "could not start SLURM"; exit 1; }
echo "test_slurm: SLURM up in $((SECONDS - start)) s ($SLURM_CONF)"

# ---------- 1. end to end ----------
sbatch --wait -c 2 -t 10 -o "$work/e2e.out" "$launcher" --bin-dir "$bin" --workers-per-node 2 \
  --log-dir "$work/e2e" -- bash -c 'tsr-sum-random --n 4000000 --chunk 250000 --verify &&
                                   tsr-svd --rows 3000 --cols 400 --chunks 500,400 --k 5 --verify' >/dev/null
rc=$?
[ "$rc" -eq 0 ] || fail "end to end: the job exited with $rc"
grep -qx verified "$work/e2e.out" || fail "end to end: tsr-sum-random did not print 'verified'"
grep -q "^verify: residual" "$work/e2e.out" && ! grep -q "FAIL" "$work/e2e.out" ||
  fail "end to end: tsr-svd --verify did not pass"
grep -q "2 cpu worker(s) connected" "$work/e2e.out" || fail "end to end: the launcher did not report 2 workers"
[ "$(grep -c "left: said goodbye" "$work/e2e/scheduler.log")" -ge 2 ] ||
  fail "end to end: the workers did not say goodbye to the scheduler"
grep -q "shutting down" "$work/e2e/scheduler.log" || fail "end to end: the scheduler did not shut down cleanly"
[ "$failures" -eq 0 ] && pass "end to end: verified results in the job's output"
check_nothing_left "end to end" "$work/e2e"

# ---------- 2. scancel mid-graph ----------
jid=$(sbatch --parsable -c 2 -t 10 -o "$work/cancel.out" "$launcher" --bin-dir "$bin" --workers-per-node 2 \
        --log-dir "$work/cancel" -- "${long_client[@]}")
if ! wait_line "$work/cancel.out" "running:" 60; then
  fail "scancel: the job did not start its client"
else
  sleep 2
  n=$(our_procs | wc -l)
  # scheduler, 2 workers, the client (and nothing yet stopped): the check below can fail
  [ "$n" -ge 4 ] || fail "scancel: expected the scheduler, 2 workers and the client running, saw: $(our_procs | tr '\n' ' ')"
  scancel "$jid"
  wait_gone "$jid" 60 || fail "scancel: job $jid still in the queue after 60 s"
  check_nothing_left "scancel" "$work/cancel"
fi

# ---------- 3. SIGTERM to the batch script (the time limit's signal) ----------
jid=$(sbatch --parsable -c 2 -t 10 -o "$work/term.out" "$launcher" --bin-dir "$bin" --workers-per-node 2 \
        --log-dir "$work/term" -- "${long_client[@]}")
if ! wait_line "$work/term.out" "running:" 60; then
  fail "SIGTERM: the job did not start its client"
else
  sleep 2
  scancel --batch --signal=TERM "$jid"
  wait_gone "$jid" 60 || fail "SIGTERM: job $jid still in the queue after 60 s"
  grep -q "PROGRAM stopped by SIGTERM" "$work/term.out" || fail "SIGTERM: the launcher did not stop the client"
  [ "$(job_field "$jid" ExitCode)" = "143:0" ] || fail "SIGTERM: exit code $(job_field "$jid" ExitCode), want 143:0"
  [ "$(grep -c "left: said goodbye" "$work/term/scheduler.log")" -ge 2 ] ||
    fail "SIGTERM: the workers did not say goodbye (they were killed, not stopped)"
  grep -q "shutting down" "$work/term/scheduler.log" || fail "SIGTERM: the scheduler did not shut down cleanly"
  check_nothing_left "SIGTERM" "$work/term"
fi

# ---------- 4. a real time limit ----------
# --signal=B:TERM@50 on a 1-minute job: SLURM signals the script 10 to 40 s
# in (its timer runs every 30 s), well before it would kill the job.
jid=$(sbatch --parsable -c 2 -t 1 --signal=B:TERM@50 -o "$work/limit.out" "$launcher" --bin-dir "$bin" \
        --workers-per-node 2 --log-dir "$work/limit" -- "${long_client[@]}")
if ! wait_gone "$jid" 150; then
  fail "time limit: job $jid still in the queue after 150 s"
else
  grep -q "got SIGTERM" "$work/limit.out" || fail "time limit: the launcher never got SIGTERM"
  state=$(job_field "$jid" JobState)
  [ "$state" != TIMEOUT ] || fail "time limit: SLURM had to kill the job (state TIMEOUT): the launcher did not stop in time"
  [ "$(job_field "$jid" ExitCode)" = "143:0" ] || fail "time limit: exit code $(job_field "$jid" ExitCode), want 143:0"
  grep -q "shutting down" "$work/limit/scheduler.log" || fail "time limit: the scheduler did not shut down cleanly"
  check_nothing_left "time limit" "$work/limit"
fi

[ "$failures" -eq 0 ] || exit 1
