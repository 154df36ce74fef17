#!/usr/bin/env bash
# Chaos runs (docs/journal.md, "Chaos"): a real scheduler (with --journal)
# and workers on loopback, and the README's SVD (tsr-svd, plain and with
# --persist: the persisted-array graph) run again and again, each run with
# one random fault injected at a random moment:
#
#   kill     a random worker SIGKILLed (a fresh one started in its place)
#   stop     a random worker SIGSTOPped for longer than the heartbeat
#            timeout, then SIGCONTed (it comes back with its results)
#   restart  a random worker SIGTERMed and started again
#   two      two workers SIGKILLed at once (two fresh ones started)
#   sched    the scheduler SIGKILLed and started again on the same port
#            with its journal
#
# Every run must finish and its u, s, v must equal the undisturbed run's
# byte for byte (cmp). Prints one line per run and a count per kind; exits
# 1 when any run failed or differed (its logs are printed).
#
# usage: tests/chaos/chaos.sh BIN_DIR RUNS [KINDS] [SEED]
#   KINDS: comma-separated subset of kill,stop,restart,two,sched (all)
#   RUNS: runs of each kind, each over both graphs (plain and persist)
# Environment: CHAOS_ROWS/CHAOS_COLS/CHAOS_CHUNKS (40000/2000/4000,1000),
# CHAOS_WORKERS (3), CHAOS_KEEP=1 keeps the directory.
set -uo pipefail

bin=${1:?usage: chaos.sh BIN_DIR RUNS [KINDS] [SEED]}
runs=${2:?usage: chaos.sh BIN_DIR RUNS [KINDS] [SEED]}
kinds=${3:-kill,stop,restart,two,sched}
RANDOM=${4:-$$}
rows=${CHAOS_ROWS:-40000} cols=${CHAOS_COLS:-2000} chunks=${CHAOS_CHUNKS:-4000,1000}
nworkers=${CHAOS_WORKERS:-3}
hb_timeout=2s

dir=$(mktemp -d /tmp/tsr-chaos-XXXXXX)
declare -a wpid
sched_pid=0 address="" failures=0

log() { printf '%s\n' "$*"; }

start_scheduler() {  # [address]: the first start picks a port
  local listen=${1:-tcp://127.0.0.1:0}
  for _ in $(seq 50); do
    "$bin/tessera-scheduler" --listen "$listen" --address-file "$dir/address" --journal "$dir/journal" \
      --heartbeat-timeout $hb_timeout --heartbeat-interval 250ms >>"$dir/scheduler.log" 2>&1 &
    sched_pid=$!
    sleep 0.2
    kill -0 $sched_pid 2>/dev/null && break   # a busy port fails at once: try again
  done
  for _ in $(seq 200); do [ -s "$dir/address" ] && break; sleep 0.05; done
  address=$(cat "$dir/address")
}

start_worker() {  # index
  "$bin/tessera-worker" --scheduler "$address" --threads 1 --name "chaos-w$1" \
    --heartbeat-interval 250ms --heartbeat-timeout $hb_timeout >>"$dir/worker-$1.log" 2>&1 &
  wpid[$1]=$!
}

stop_all() {
  for p in "${wpid[@]}" $sched_pid; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap 'stop_all; [ "${CHAOS_KEEP:-0}" = 1 ] || rm -rf "$dir"' EXIT

svd() {  # prefix persist(0|1)
  local extra=()
  [ "$2" = 1 ] && extra=(--persist)
  TESSERA_SCHEDULER=$address TESSERA_HEARTBEAT_TIMEOUT=$hb_timeout \
    timeout 300 "$bin/tsr-svd" --rows "$rows" --cols "$cols" --chunks "$chunks" --k 5 --power-iters 2 \
    --save "$1" "${extra[@]}" >"$1.log" 2>&1
}

fault() {  # kind
  local i=$((RANDOM % nworkers)) j
  case $1 in
    kill) kill -KILL "${wpid[$i]}"; wait "${wpid[$i]}" 2>/dev/null; start_worker "$i" ;;
    stop) kill -STOP "${wpid[$i]}"; sleep 3; kill -CONT "${wpid[$i]}" ;;
    restart) kill -TERM "${wpid[$i]}"; wait "${wpid[$i]}" 2>/dev/null; start_worker "$i" ;;
    two) j=$(((i + 1) % nworkers))
         kill -KILL "${wpid[$i]}" "${wpid[$j]}"; wait "${wpid[$i]}" "${wpid[$j]}" 2>/dev/null
         start_worker "$i"; start_worker "$j" ;;
    sched) kill -KILL $sched_pid; wait $sched_pid 2>/dev/null; sleep 0.$((RANDOM % 5)); start_scheduler "$address" ;;
  esac
}

same() {  # prefix base
  for f in u s v; do cmp -s "$1_$f.npy" "$2_$f.npy" || return 1; done
}

start_scheduler
for i in $(seq 0 $((nworkers - 1))); do start_worker "$i"; done
sleep 1
log "# tests/chaos/chaos.sh $bin $runs $kinds: ${rows}x${cols} chunks $chunks, $nworkers workers, heartbeat timeout $hb_timeout"
for p in 0 1; do
  t0=$(date +%s.%N)
  svd "$dir/base$p" $p || { log "undisturbed run (persist=$p) failed:"; cat "$dir/base$p.log"; exit 1; }
  log "undisturbed (persist=$p): $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s"
done

declare -A ok bad
for kind in ${kinds//,/ }; do
  ok[$kind]=0 bad[$kind]=0
  for r in $(seq "$runs"); do
    p=$((r % 2))
    prefix="$dir/$kind-$r"
    t0=$(date +%s.%N)
    svd "$prefix" $p & client=$!
    sleep "0.$((RANDOM % 9 + 1))"
    fault "$kind"
    wait $client; rc=$?
    took=$(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}")
    if [ $rc = 0 ] && same "$prefix" "$dir/base$p"; then
      ok[$kind]=$((ok[$kind] + 1)); log "run $kind $r (persist=$p): ok, ${took} s"
      rm -f "$prefix"_*.npy "$prefix.log"
    else
      bad[$kind]=$((bad[$kind] + 1)); failures=$((failures + 1))
      log "run $kind $r (persist=$p): FAILED (rc $rc, ${took} s)"; cat "$prefix.log"
    fi
  done
done
for kind in ${kinds//,/ }; do log "kind $kind: ${ok[$kind]} identical, ${bad[$kind]} failed"; done
if [ $failures -gt 0 ]; then
  log "----- scheduler.log (tail) -----"; tail -n 80 "$dir/scheduler.log"
  exit 1
fi
