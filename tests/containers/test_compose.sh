#!/usr/bin/env bash
# deploy.compose: docker/compose.yaml under podman-compose, with the CPU
# image built from docker/Dockerfile FROM a debootstrap base (no registry
# here). Checks, each of which fails the test:
#
#   1. the image builds, holds no compiler; its size is printed;
#   2. `up` with 2 workers; the time from `up` to the first task done is
#      printed; the compose health checks pass (podman healthcheck run);
#   3. tsr-svd --verify and tsr-sum-random --verify from a client container
#      (`run client ...`), which reaches the scheduler by service name and
#      gathers straight from the workers;
#   4. a longer SVD while scaling to 3 workers mid-run: the third worker
#      joins and runs tasks, the singular values equal an undisturbed run's;
#   5. the same SVD while one worker container is stopped mid-graph: the
#      same singular values, and the scheduler lists one worker fewer.
#
# Logs of every container are printed when a check fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_tools podman podman-compose debootstrap python3
setup_podman

PROJECT=tsrtest$$
COMPOSE=(podman-compose -p "$PROJECT" -f "$ROOT/docker/compose.yaml")
export TESSERA_IMAGE=$CPU_IMAGE TESSERA_WORKERS=2 TESSERA_PORT=$(free_port) TESSERA_LOG_LEVEL=info
# One executor thread per worker: this machine has 2 cores.
export TESSERA_THREADS=1
LOGDIR=$(mktemp -d /tmp/tsr-compose-XXXXXX)

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    for c in $(podman ps -a --format '{{.Names}}' | grep "^${PROJECT}_" || true); do
      echo "----- podman logs $c" >&2
      podman logs "$c" 2>&1 | tail -60 >&2 || true
    done
    for f in "$LOGDIR"/*; do [ -f "$f" ] && { echo "----- $f" >&2; tail -30 "$f" >&2; }; done
  fi
  "${COMPOSE[@]}" down -v > "$LOGDIR/down.log" 2>&1 || true
  # down in podman-compose 1.0.3 leaves the network and the named volume
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
  podman volume rm -f "${PROJECT}_spill" >/dev/null 2>&1 || true
  rm -rf "$LOGDIR" "$CONTAINERS_CONF"
  exit "$rc"
}
trap cleanup EXIT

# `run client ARGS...` without starting dependencies again (up did), no
# TTY. Through sh -c: podman-compose 1.0.3's argument parser takes a
# program's own flags (--n) for abbreviations of its own (--name).
client() { "${COMPOSE[@]}" run --rm --no-deps -T client sh -c "$*"; }

# The scheduler's status as JSON, from inside its container.
status_json() { podman exec "${PROJECT}_scheduler_1" tessera status --scheduler tcp://127.0.0.1:8786 --json; }

workers_alive() { status_json | json_get 'len(d["workers"])'; }

# Waits until the scheduler lists $1 workers (at most $2 s).
await_workers() {
  local n=$1 deadline=$(( $(date +%s) + $2 )) have=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    have=$(workers_alive 2>/dev/null || echo 0)
    [ "$have" = "$n" ] && return 0
    sleep 0.5
  done
  fail "the scheduler lists $have workers, not $n, after $2 s"
}

# podman has no systemd here to schedule health checks: run them as the
# engine would, until healthy (at most $2 s).
# Each failed attempt is kept (its time and output) and printed on failure.
await_healthy() {
  local deadline=$(( $(date +%s) + $2 )) tries=$LOGDIR/health-$1.log start
  while [ "$(date +%s)" -lt "$deadline" ]; do
    start=$(date +%s%N)
    podman healthcheck run "$1" > "$LOGDIR/health.out" 2>&1 && return 0
    { printf '%s: attempt took %d ms: ' "$(date +%T)" $(( ($(date +%s%N) - start) / 1000000 ))
      tr '\n' ' ' < "$LOGDIR/health.out"; echo; } >> "$tries"
    sleep 1
  done
  cat "$tries" >&2
  podman exec "$1" tessera health --timeout 4s --worker none >&2 || true
  # the usual culprit: the network's DNS (aardvark) not answering for it
  podman exec "$1" sh -c 'cat /etc/resolv.conf; t=$(date +%s%N); getent hosts scheduler;
    echo "getent hosts scheduler: exit $?, $(( ($(date +%s%N) - t) / 1000000 )) ms"' >&2 || true
  fail "container $1 is not healthy after $2 s"
}

# Sum of tasks_done over the workers, 0 when the scheduler does not answer.
tasks_done() { status_json 2>/dev/null | json_get 'sum(w["tasks_done"] for w in d["workers"])' 2>/dev/null || echo 0; }

# Waits until some graph is in flight with tasks done (at most $1 s): the
# moment to disturb it. Fails when the client finished first.
await_mid_graph() {
  local deadline=$(( $(date +%s) + $1 )) pid=$2
  while [ "$(date +%s)" -lt "$deadline" ]; do
    kill -0 "$pid" 2>/dev/null || fail "the client finished before the graph could be disturbed (make it longer)"
    local mid
    mid=$(status_json 2>/dev/null | json_get 'any(g["tasks_done"] > 0 and g["tasks_done"] < g["tasks_total"] for g in d["graphs"])' 2>/dev/null || true)
    if [ "$mid" = True ]; then
      return 0
    fi
    sleep 0.3
  done
  fail "no graph in flight after $1 s"
}

singular_values() { grep '^singular values:' "$1" || fail "no singular values in $1"; }

total_start=$(date +%s)
build_cpu_image

# ---- 2. up, first task, health
say "compose up: scheduler + $TESSERA_WORKERS workers (project $PROJECT)"
up_start=$(date +%s.%N)
"${COMPOSE[@]}" up -d --no-build scheduler worker > "$LOGDIR/up.log" 2>&1 || fail "compose up (see $LOGDIR/up.log)"
client tsr-sum-random --n 1000000 --chunk 100000 --verify > "$LOGDIR/first.log" 2>&1 &
first_pid=$!
first_task=""
for _ in $(seq 1 300); do
  if [ "$(tasks_done)" -gt 0 ]; then first_task=$(date +%s.%N); break; fi
  sleep 0.2
done
wait "$first_pid" || fail "the first client run failed"
[ -n "$first_task" ] || fail "no task done within 60 s of up"
grep -q verified "$LOGDIR/first.log" || fail "the first sum was not verified"
up_to_first=$(python3 -c "print(f'{$first_task - $up_start:.1f}')")
echo "up -> first task done: $up_to_first s"
ok "compose up; a client's first task done $up_to_first s after up"
await_workers 2 60
await_healthy "${PROJECT}_scheduler_1" 30
await_healthy "${PROJECT}_worker_1" 30
await_healthy "${PROJECT}_worker_2" 30
ok "health checks pass (scheduler, both workers)"

# ---- 3. the examples from a client container, verified
client tsr-svd --rows 20000 --cols 1000 --chunks 2000,1000 --k 5 --power-iters 2 --verify > "$LOGDIR/svd.log" 2>&1 ||
  fail "tsr-svd --verify from the client container"
grep -q '^verify: residual' "$LOGDIR/svd.log" && ! grep -q 'FAIL' "$LOGDIR/svd.log" || fail "tsr-svd did not verify"
ok "tsr-svd --verify from a client container"
client tsr-sum-random --n 20000000 --chunk 500000 --seed 11 --verify > "$LOGDIR/sum.log" 2>&1 ||
  fail "tsr-sum-random --verify from the client container"
grep -q '^verified' "$LOGDIR/sum.log" || fail "tsr-sum-random did not verify"
ok "tsr-sum-random --verify from a client container"

# ---- 4. and 5.: one SVD, long enough to be disturbed; the reference first
SVD=(tsr-svd --rows 300000 --cols 5000 --chunks 5000,5000 --dtype u8 --dist randint:0:3 --k 8 --power-iters 4 --seed 5)
svd_start=$(date +%s)
client "${SVD[@]}" > "$LOGDIR/svd-ref.log" 2>&1 || fail "reference SVD"
say "reference SVD on 2 workers: $(( $(date +%s) - svd_start )) s"
reference=$(singular_values "$LOGDIR/svd-ref.log")

client "${SVD[@]}" > "$LOGDIR/svd-scale.log" 2>&1 &
pid=$!
await_mid_graph 120 "$pid"
say "scaling to 3 workers mid-graph"
TESSERA_WORKERS=3 "${COMPOSE[@]}" up -d --no-build scheduler worker > "$LOGDIR/up3.log" 2>&1 || fail "compose up with 3 workers"
await_workers 3 60
wait "$pid" || fail "the SVD during scaling failed"
[ "$(singular_values "$LOGDIR/svd-scale.log")" = "$reference" ] || fail "scaling changed the singular values"
third_done=$(status_json | json_get '[w["tasks_done"] for w in d["workers"] if w["name"] == "'"$(podman exec "${PROJECT}_worker_3" cat /proc/sys/kernel/hostname)"'"][0]')
[ "$third_done" -gt 0 ] || fail "the third worker ran no task"
await_healthy "${PROJECT}_worker_3" 30
ok "scaled to 3 workers mid-graph: the third ran $third_done tasks, same singular values"

client "${SVD[@]}" > "$LOGDIR/svd-stop.log" 2>&1 &
pid=$!
await_mid_graph 120 "$pid"
say "stopping worker container ${PROJECT}_worker_1 mid-graph"
podman stop -t 10 "${PROJECT}_worker_1" > /dev/null || fail "podman stop"
wait "$pid" || fail "the SVD during a worker's stop failed"
[ "$(singular_values "$LOGDIR/svd-stop.log")" = "$reference" ] || fail "a stopped worker changed the singular values"
await_workers 2 30
ok "a worker container stopped mid-graph: same singular values, 2 workers left"

echo "deploy.compose: $PASSED checks passed in $(( $(date +%s) - total_start )) s (image $IMAGE_MB MB, up -> first task $up_to_first s)"
