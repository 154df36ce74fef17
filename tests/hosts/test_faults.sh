#!/usr/bin/env bash
# tests/hosts/test_faults.sh BIN_DIR CASE — network faults between hosts:
# the scheduler, two workers (w1, w2) and the client each in a network
# namespace of their own (tests/hosts/netns.sh), a fault on w2's link in
# the middle of a graph whose chunks cross between the workers. Every case
# runs the graph undisturbed first, then under the fault, and requires the
# right answer (the stencil's exact total) within a bound (docs/hosts.md,
# "Network faults"). CASE:
#
#   loss       10% of w2's packets dropped each way (iptables statistic);
#   rate       w2's link limited to 40 Mbit/s each way (tc tbf);
#   partition  w2 cut off for 1 s, shorter than the heartbeat timeout
#              (3 s): nobody is declared dead, the graph goes on; then for
#              15 s, longer: w2 is declared dead, its work is redone on w1
#              and the graph ends while w2 is still cut off (fetches from
#              it abandoned on the scheduler's word, not at the 20 s fetch
#              timeout); once the link is back w2 reconnects and serves;
#   latency    every control message and w2's chunks through a proxy that
#              delays each direction by 50 ms (tests/hosts/delay_proxy.py;
#              the kernel has no netem).
#
# Exits 77 (CTest: skipped) with a SKIPPED line when it cannot run here.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR loss|rate|partition|latency" >&2; exit 2; }
bin=$(cd "$1" && pwd) || exit 2
case_name=$2
src=$(cd "$(dirname "$0")/../.." && pwd)

# shellcheck source=tests/hosts/netns.sh
. "$src/tests/hosts/netns.sh"
hosts_test_begin test_faults "$case_name" "$bin" iptables tc python3

HEARTBEAT=3s
# The bound on any one graph under a fault: a worker silent for the
# heartbeat timeout is dropped and its work redone; fetches from it are
# abandoned then (the fetch timeout, 20 s, bounds them only when the
# scheduler is unreachable). Far above either, far below a hang.
BOUND_S=90

hosts_up sched w1 w2 client || { fail "could not make the namespaces"; exit 1; }
sched_addr="tcp://$(host_ip sched):8786"
# What workers and the client dial: the scheduler, or (latency) its proxy.
dial=$sched_addr

start_proxy() { # HOST LISTEN_PORT TARGET_ADDR DELAY_MS
  host_spawn "$1" "$logs/proxy-$1-$2.log" python3 "$src/tests/hosts/delay_proxy.py" "$(host_ip "$1"):$2" "$3" "$4"
  pids+=("$HOST_PID")
  for _ in $(seq 1 50); do grep -q listening "$logs/proxy-$1-$2.log" && return 0; sleep 0.1; done
  fail "the delaying proxy on $1:$2 did not start"
  return 1
}

start_cluster() {
  host_spawn sched "$logs/scheduler.log" "$bin/tessera-scheduler" --listen "$sched_addr" --heartbeat-timeout $HEARTBEAT \
    --log-level debug
  pids+=("$HOST_PID")
  local w extra
  for w in w1 w2; do
    extra=()
    # latency: w2 advertises its proxy's port, so peers fetch through it
    [ "$case_name" = latency ] && [ "$w" = w2 ] &&
      extra=(--listen-data "tcp://$(host_ip w2):9000" --contact-address "tcp://$(host_ip w2):9001")
    TESSERA_TEST_OPS=1 host_spawn "$w" "$logs/$w.log" "$bin/tessera-worker" --scheduler "$dial" --name "$w" --threads 1 \
      --heartbeat-timeout $HEARTBEAT --fetch-timeout 20s --log-level debug "${extra[@]}"
    pids+=("$HOST_PID")
  done
  await_workers 2 20 || { fail "the two workers did not connect"; exit 1; }
}

# await_workers N SECONDS: until the scheduler lists N workers. 0 or 1.
await_workers() {
  local deadline=$((SECONDS + $2))
  while [ "$SECONDS" -lt "$deadline" ]; do
    hostx client "$bin/tessera" status --scheduler "$sched_addr" --timeout 2s 2>/dev/null |
      grep -q "^scheduler .*: $1 workers" && return 0
    sleep 0.2
  done
  return 1
}

# run_graph NAME CHUNKS SLOW_MS: the stencil graph from the client host,
# in the background; sets GRAPH_PID.
run_graph() {
  host_spawn client "$logs/client-$1.log" "$bin/tsr-hosts-client" stencil "$dial" "$1" "$2" 1000000 "$3"
  GRAPH_PID=$HOST_PID
  pids+=("$GRAPH_PID")
}

# finish_graph NAME T0: waits for the graph, checks its answer and bound;
# prints and sets GRAPH_S (seconds since T0).
finish_graph() {
  local deadline=$((SECONDS + BOUND_S)) rc
  while kill -0 "$GRAPH_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if kill -0 "$GRAPH_PID" 2>/dev/null; then
    fail "graph $1 still running after $BOUND_S s: a hang"
    kill -KILL "$GRAPH_PID"
  fi
  wait "$GRAPH_PID"
  rc=$?
  GRAPH_S=$(python3 -c "import time; print(f'{time.monotonic() - $2:.1f}')")
  grep -qx verified "$logs/client-$1.log" || fail "graph $1 (exit $rc) did not give the right total: $(cat "$logs/client-$1.log")"
  echo "graph $1: $GRAPH_S s"
}

mono() { python3 -c 'import time; print(time.monotonic())'; }

# w2 cut off from everything (both ways), and back.
cut_off() { hostx w2 iptables -I INPUT -j DROP && hostx w2 iptables -I OUTPUT -j DROP; }
reconnect() { hostx w2 iptables -D INPUT -j DROP && hostx w2 iptables -D OUTPUT -j DROP; }

# A fault for the whole graph: undisturbed, then with APPLY, then REMOVE.
steady_fault() { # APPLY REMOVE WHAT
  local t0
  t0=$(mono); run_graph clean 16 0; finish_graph clean "$t0"
  local clean_s=$GRAPH_S
  $1 || { fail "could not apply the fault ($3)"; return; }
  t0=$(mono); run_graph faulty 16 0; finish_graph faulty "$t0"
  $2
  [ "$failures" -eq 0 ] && pass "$3: right answer in $GRAPH_S s (undisturbed $clean_s s, bound $BOUND_S s)"
}

loss_on() {
  hostx w2 iptables -I INPUT -m statistic --mode random --probability 0.1 -j DROP &&
    hostx w2 iptables -I OUTPUT -m statistic --mode random --probability 0.1 -j DROP
}
loss_off() { hostx w2 iptables -F INPUT; hostx w2 iptables -F OUTPUT; }

# tbf shapes what leaves an interface: w2's eth0 (w2 -> switch) and its
# switch port (switch -> w2).
rate_on() {
  hostx w2 tc qdisc add dev eth0 root tbf rate 40mbit burst 64kb latency 200ms &&
    ip netns exec "$(_hosts_ns sw)" tc qdisc add dev p-w2 root tbf rate 40mbit burst 64kb latency 200ms
}
rate_off() { hostx w2 tc qdisc del dev eth0 root; ip netns exec "$(_hosts_ns sw)" tc qdisc del dev p-w2 root; }

# 12 chunks through a 400 ms step each: ~2.5 s on two workers, long
# enough to cut w2 off in the middle.
partition_for() { # SECONDS NAME
  local t0 cut_at
  t0=$(mono); run_graph "$2" 12 400
  for _ in $(seq 1 100); do grep -q "task $2/.* done" "$logs/w2.log" && break; sleep 0.05; done
  kill -0 "$GRAPH_PID" 2>/dev/null || fail "graph $2 ended before w2 could be cut off"
  cut_off || { fail "iptables could not cut w2 off"; return; }
  cut_at=$SECONDS
  # while the cut lasts, note whether the graph finishes without w2
  FINISHED_CUT=no
  local done_at=""
  while [ $((SECONDS - cut_at)) -lt "$1" ]; do
    kill -0 "$GRAPH_PID" 2>/dev/null || { FINISHED_CUT=yes; done_at=$((SECONDS - cut_at)); break; }
    sleep 0.1
  done
  while [ $((SECONDS - cut_at)) -lt "$1" ]; do sleep 0.1; done
  reconnect
  finish_graph "$2" "$t0"
  echo "w2 cut off for $1 s; the graph finished ${done_at:-$((SECONDS - cut_at))} s after the cut" \
       "($([ "$FINISHED_CUT" = yes ] && echo "while w2 was still cut off" || echo "after the link came back"))"
}

run_partition() {
  hostx w2 iptables -L -n >/dev/null 2>&1 || skip "iptables does not work in a network namespace here"
  partition_for 1 short
  if grep -q "worker 'w2' .* left" "$logs/scheduler.log"; then
    fail "a 1 s partition (heartbeat timeout $HEARTBEAT) got w2 declared dead: $(grep "worker 'w2' .* left" "$logs/scheduler.log")"
  fi
  [ "$failures" -eq 0 ] && pass "w2 cut off for 1 s (< $HEARTBEAT): nobody declared dead, right answer"
  partition_for 15 long
  grep -q "worker 'w2' .* left" "$logs/scheduler.log" || fail "w2, cut off for 15 s, was not declared dead"
  # w1's fetches from w2 are abandoned when the scheduler declares w2 dead
  # (peer_gone), not at the 20 s fetch timeout: the graph ends while w2
  # is still cut off.
  [ "$FINISHED_CUT" = yes ] || fail "the graph waited for w2's link to come back (fetches from w2 not abandoned)"
  # w2 notices the scheduler's silence too, and reconnects once it can.
  await_workers 2 30 || fail "w2 did not rejoin within 30 s of its link coming back"
  local t0
  t0=$(mono); run_graph after 16 0; finish_graph after "$t0"
  [ "$failures" -eq 0 ] && pass "w2 cut off for 15 s (> $HEARTBEAT): declared dead, work redone without it, right answer; w2 rejoined"
}

run_latency() {
  # both proxies up before the daemons that dial them
  start_proxy sched 8787 "$(host_ip sched):8786" 50 || return
  start_proxy w2 9001 "$(host_ip w2):9000" 50 || return
  dial="tcp://$(host_ip sched):8787"
}

case "$case_name" in
  loss)
    start_cluster
    steady_fault loss_on loss_off "10% packet loss on w2's link each way" ;;
  rate)
    start_cluster
    steady_fault rate_on rate_off "w2's link limited to 40 Mbit/s each way" ;;
  partition)
    start_cluster
    run_partition ;;
  latency)
    # Through the proxies from the start: the undisturbed reference comes
    # from a graph of the same size without them, measured in the
    # partition-free cases; here the bound and the answer are what count.
    run_latency
    start_cluster
    t0=$(mono); run_graph delayed 16 0; finish_graph delayed "$t0"
    fetched=$(grep -c "fetched input 'delayed/" "$logs/w1.log")
    echo "w1 fetched $fetched chunks from w2 through its 50 ms proxy"
    [ "$fetched" -ge 1 ] || fail "no chunk went through w2's delaying proxy"
    [ "$failures" -eq 0 ] && pass "50 ms each way on every control message and w2's chunks: right answer in $GRAPH_S s" ;;
  *) fail "unknown case '$case_name'" ;;
esac
[ "$failures" -eq 0 ] || exit 1
