#!/usr/bin/env bash
# tests/hosts/test_hosts.sh BIN_DIR CASE — Tessera on several hosts: the
# scheduler, two workers and the client each in a network namespace of
# their own, joined through a switch (tests/hosts/netns.sh). CASE:
#
#   traffic  workers advertise their own host's address; a graph whose
#            tasks need chunks from the other worker gives the right
#            answer; those chunks cross the two workers' links, and a
#            chunk gathered by the client comes from its worker, never
#            through the scheduler's link (bytes counted per switch port);
#   cutoff   a worker's host cut off with iptables in the middle of a graph
#            is declared dead by the scheduler and its work is done again
#            on the other worker: the answer is still right.
#
# Exits 77 (CTest: skipped) with a SKIPPED line when it cannot run here:
# not root, no network namespaces, or (cutoff) no working iptables.
# TESSERA_TEST_KEEP_LOGS=DIR keeps the daemons' logs.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR traffic|cutoff" >&2; exit 2; }
bin=$(cd "$1" && pwd) || exit 2
case_name=$2
src=$(cd "$(dirname "$0")/../.." && pwd)

# shellcheck source=tests/hosts/netns.sh
. "$src/tests/hosts/netns.sh"
if [ "$case_name" = cutoff ]; then hosts_test_begin test_hosts "$case_name" "$bin" iptables
else hosts_test_begin test_hosts "$case_name" "$bin"; fi

hosts_up sched w1 w2 client || { fail "could not make the namespaces"; exit 1; }
addr="tcp://$(host_ip sched):8786"
# A short heartbeat timeout: a cut-off worker is declared dead in 3 s.
host_spawn sched "$logs/scheduler.log" "$bin/tessera-scheduler" --listen "$addr" --heartbeat-timeout 3s --log-level debug
pids+=("$HOST_PID")
for w in w1 w2; do
  TESSERA_TEST_OPS=1 host_spawn "$w" "$logs/$w.log" "$bin/tessera-worker" --scheduler "$addr" --name "$w" --threads 1 \
    --heartbeat-timeout 3s --fetch-timeout 5s --log-level debug
  pids+=("$HOST_PID")
done

# Both workers connected, each advertising its own host's address.
status=""
for _ in $(seq 1 100); do
  status=$(hostx client "$bin/tessera" status --scheduler "$addr" --timeout 2s 2>&1)
  grep -q "^scheduler .*: 2 workers" <<<"$status" && break
  sleep 0.2
done
grep -q "^scheduler .*: 2 workers" <<<"$status" || { fail "the two workers did not connect: $status"; exit 1; }
for w in w1 w2; do
  grep -Eq "^$w +tcp://$(host_ip "$w"):[0-9]+ " <<<"$status" ||
    fail "$w does not advertise its host's address $(host_ip "$w"): $status"
done
[ "$failures" -eq 0 ] && pass "each worker advertises its own host's address"

# Where the kernel gives huge pages on request only, a worker re-executes
# itself with glibc's tunable so that received chunks land on them
# (tsr_worker_start_env): same pid, tunable in its environment.
if grep -q '\[madvise\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null &&
   [[ "${GLIBC_TUNABLES:-}" != *glibc.malloc.hugetlb* ]]; then
  tr '\0' '\n' <"/proc/${pids[1]}/environ" | grep -q '^GLIBC_TUNABLES=.*glibc\.malloc\.hugetlb=1' ||
    fail "worker w1 (pid ${pids[1]}) runs without glibc.malloc.hugetlb=1 although THP is madvise-only"
  [ "$(readlink "/proc/${pids[1]}/exe")" = "$bin/tessera-worker" ] || fail "pid ${pids[1]} is not the worker after its re-exec"
  [ "$failures" -eq 0 ] && pass "workers run with large buffers on transparent huge pages (THP madvise)"
else
  echo "note: THP is not madvise-only here (or GLIBC_TUNABLES names hugetlb): the huge-page check does not apply"
fi
# ... and with OpenBLAS's own thread pool off (its threads spin ~0.1 s at
# start; the executor threads are the parallelism), unless the user set it.
if [ -z "${OPENBLAS_NUM_THREADS:-}" ]; then
  tr '\0' '\n' <"/proc/${pids[1]}/environ" | grep -qx 'OPENBLAS_NUM_THREADS=1' ||
    fail "worker w1 (pid ${pids[1]}) runs without OPENBLAS_NUM_THREADS=1"
  [ "$failures" -eq 0 ] && pass "workers start without OpenBLAS's thread pool"
else
  echo "note: OPENBLAS_NUM_THREADS is set here ($OPENBLAS_NUM_THREADS): the worker keeps it, the pool check does not apply"
fi

# Chunks fetched by workers from each other (the workers' debug log lines).
fetched_bytes() {
  cat "$logs/w1.log" "$logs/w2.log" | sed -n "s|.*fetched input '$1[^']*' (\([0-9]*\) bytes).*|\1|p" |
    awk '{ s += $1 } END { print s + 0 }'
}

run_traffic() {
  local before_s before_w before_c after_s after_w after_c chunk=$((8 * 1000000)) moved out
  before_s=$(port_bytes sched)
  before_w=$(( $(port_bytes w1) + $(port_bytes w2) ))
  before_c=$(port_bytes client)
  out=$(hostx client "$bin/tsr-hosts-client" stencil "$addr" traffic 16 1000000 --gather 2>&1)
  echo "$out"
  grep -qx verified <<<"$out" || fail "the stencil graph did not give the right total"
  grep -q "gathered y0 .*: all 3" <<<"$out" || fail "the chunk gathered by the client is wrong"
  after_s=$(port_bytes sched)
  after_w=$(( $(port_bytes w1) + $(port_bytes w2) ))
  after_c=$(port_bytes client)
  moved=$(fetched_bytes traffic/)
  echo "chunk bytes fetched worker to worker: $moved; bytes through the switch ports: scheduler" \
       "$((after_s - before_s)), workers $((after_w - before_w)), client $((after_c - before_c))"
  # The graph needs chunks from the other worker: a few 8 MB chunks crossed.
  [ "$moved" -ge $((2 * chunk)) ] || fail "only $moved bytes of chunks moved between the workers"
  # They crossed the workers' links (each byte counted on both ports), with the gathered y0.
  [ $((after_w - before_w)) -ge $((2 * moved + chunk)) ] ||
    fail "the workers' ports carried $((after_w - before_w)) bytes, less than the $moved fetched (x2) plus y0"
  [ $((after_c - before_c)) -ge "$chunk" ] || fail "the client's port carried less than the gathered y0"
  # And not through the scheduler: its link carries control messages only.
  [ $((after_s - before_s)) -lt $((chunk / 4)) ] ||
    fail "the scheduler's port carried $((after_s - before_s)) bytes: chunk data went through it"
  [ "$failures" -eq 0 ] && pass "chunks moved worker to worker and to the client, not through the scheduler's link"
}

# Cuts host $1 off the switch: every packet in or out dropped.
cut_off() {
  hostx "$1" iptables -A INPUT -j DROP && hostx "$1" iptables -A OUTPUT -j DROP
}

run_cutoff() {
  hostx w2 iptables -L -n >/dev/null 2>&1 ||
    skip "iptables does not work in a network namespace here: $(hostx w2 iptables -L -n 2>&1 | head -n 1)"
  local out client t_cut
  # 12 chunks, each through a 400 ms step: about 2.5 s on two workers.
  host_spawn client "$logs/client.log" "$bin/tsr-hosts-client" stencil "$addr" cutoff 12 1000000 400
  client=$HOST_PID
  pids+=("$client")
  # Mid-graph: once w2 has finished a task and holds results others need.
  for _ in $(seq 1 100); do
    grep -q "task cutoff/.* done" "$logs/w2.log" && break
    sleep 0.05
  done
  grep -q "task cutoff/.* done" "$logs/w2.log" || fail "w2 finished no task of the graph"
  kill -0 "$client" 2>/dev/null || fail "the graph ended before w2 could be cut off"
  cut_off w2 || { fail "iptables could not cut w2 off"; return; }
  t_cut=$SECONDS
  echo "cut w2 off at $(date +%T.%N | cut -c1-12)"
  wait "$client"
  local rc=$?
  cat "$logs/client.log"
  [ "$rc" -eq 0 ] || fail "the client exited with $rc after w2 was cut off"
  grep -qx verified "$logs/client.log" || fail "the graph did not give the right total after w2 was cut off"
  out=$(grep "worker 'w2' .* left" "$logs/scheduler.log")
  echo "scheduler: ${out#*info: }"
  grep -q "left: .*timed out\|left: .*silent" <<<"$out" || fail "the scheduler did not declare w2 dead (timed out)"
  local again
  again=$(sed -n 's/.* left: .*; \([0-9]*\) tasks rescheduled, \([0-9]*\) results lost.*/\1 \2/p' <<<"$out" | awk '{ print $1 + $2 }')
  [ "${again:-0}" -ge 1 ] || fail "w2 was declared dead with no task to reschedule nor result lost: nothing was redone"
  [ $((SECONDS - t_cut)) -lt 60 ] || fail "the graph took $((SECONDS - t_cut)) s to finish after the cut"
  [ "$failures" -eq 0 ] && pass "w2 cut off mid-graph: declared dead, its work redone on w1, right answer"
}

case "$case_name" in
  traffic) run_traffic ;;
  cutoff) run_cutoff ;;
  *) fail "unknown case '$case_name'" ;;
esac
[ "$failures" -eq 0 ] || exit 1
