#!/usr/bin/env bash
# deploy.cuda_image: docker/Dockerfile.cuda as far as this machine can take
# it. Its real bases (nvidia/cuda devel and runtime images) cannot be pulled
# here (no registry), so it is built with both bases replaced by the
# debootstrap Debian image: every stage, argument and script of the file
# runs, with -DTSR_CUDA=ON finding no nvcc (the CUDA kernels are then left
# out, as the build does on any machine without one). Checks:
#
#   1. the defaults name CUDA devel and runtime bases and -DTSR_CUDA=ON;
#   2. it builds; the runtime image holds no compiler, has the GPU
#      environment for the NVIDIA container toolkit, and its default
#      command is a GPU worker;
#   3. that worker, without a CUDA build and GPU, fails with a clear
#      message and status 1 (on a GPU machine it would run).
# What is not tested here: the CUDA compile itself, NVML and real GPUs
# (docs/deploy.md, "What was tested").
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_tools podman debootstrap
setup_podman

FILE=$ROOT/docker/Dockerfile.cuda
IMAGE=${CPU_IMAGE%:*}:cuda-debian
start=$(date +%s)

grep -q '^ARG BASE=nvidia/cuda:[0-9.]*-runtime-' "$FILE" || fail "Dockerfile.cuda's BASE is not a CUDA runtime image"
grep -q '^ARG BUILD_BASE=nvidia/cuda:[0-9.]*-devel-' "$FILE" || fail "Dockerfile.cuda's BUILD_BASE is not a CUDA devel image"
grep -q -- '-DTSR_CUDA=ON' "$FILE" || fail "Dockerfile.cuda does not build with -DTSR_CUDA=ON"
ok "Dockerfile.cuda: CUDA devel/runtime bases, -DTSR_CUDA=ON"

"$ROOT/tests/containers/base-image.sh" "$BASE_IMAGE" || fail "no base image"
old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build -q --network host --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 -f "$FILE" \
  --build-arg "BASE=$BASE_IMAGE" --build-arg "BUILD_BASE=$BASE_IMAGE" -t "$IMAGE" "$ROOT" > /tmp/tsr-cuda-$$.log 2>&1 ||
  { tail -40 /tmp/tsr-cuda-$$.log >&2; rm -f /tmp/tsr-cuda-$$.log; fail "podman build of docker/Dockerfile.cuda on a Debian base"; }
rm -f /tmp/tsr-cuda-$$.log
new=$(podman image inspect --format '{{.Id}}' "$IMAGE")
[ -n "$old" ] && [ "$old" != "$new" ] && podman rmi "$old" > /dev/null 2>&1 || true
if podman run --rm "$IMAGE" sh -c 'command -v cc || command -v gcc || command -v cmake'; then
  fail "the CUDA runtime image holds a compiler"
fi
env=$(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE")
grep -q '^NVIDIA_DRIVER_CAPABILITIES=compute,utility$' <<< "$env" || fail "no NVIDIA_DRIVER_CAPABILITIES=compute,utility (NVML needs utility)"
cmd=$(podman image inspect --format '{{json .Config.Cmd}}' "$IMAGE")
[ "$cmd" = '["tessera-worker","--gpu","0"]' ] || fail "the default command is $cmd, not a GPU worker"
ok "Dockerfile.cuda builds (Debian bases), no compiler at run time, GPU environment and command"

set +e
podman run --rm -e TESSERA_SCHEDULER_ADDRESS=tcp://127.0.0.1:1 "$IMAGE" > /tmp/tsr-cuda-run-$$.log 2>&1
rc=$?
set -e
msg=$(cat /tmp/tsr-cuda-run-$$.log)
rm -f /tmp/tsr-cuda-run-$$.log
[ "$rc" = 1 ] || fail "the GPU worker without CUDA exited $rc, not 1: $msg"
grep -q -- '--gpu 0' <<< "$msg" || fail "no clear message from the GPU worker without CUDA: $msg"
ok "its GPU worker, here without CUDA, stops with status 1: $(tail -n 1 <<< "$msg")"

echo "deploy.cuda_image: $PASSED checks passed in $(( $(date +%s) - start )) s"
