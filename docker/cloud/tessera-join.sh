#!/bin/sh
# tessera-join: makes this machine a Tessera worker host. cloud-init's
# user-data (docker/cloud/user-data.yaml) writes this very file to
# /usr/local/sbin/tessera-join and runs it at first boot; the container tests
# (tests/containers/test_cloud.sh) run it in containers. docs/deploy.md,
# "Cloud VMs", has the walk-through.
#
# What it does, as root:
#   1. finds the scheduler: TESSERA_SCHEDULER_ADDRESS, else the instance
#      metadata attribute `tessera-scheduler` (TESSERA_METADATA_URL;
#      Google Cloud's metadata server by default), retried for 2 minutes;
#   2. installs a container engine when missing (docker.io from the
#      distribution; podman with TESSERA_ENGINE=podman) and, for GPU
#      workers, the NVIDIA container toolkit;
#   3. starts one worker container (CPU), or one per GPU, on the host's
#      network so peers and clients reach its data socket directly, with
#      restart policy unless-stopped. Running it again replaces them.
#
# Settings: the environment, or /etc/tessera/join.env (KEY=VALUE lines),
# which cloud-init writes from the user-data:
#   TESSERA_SCHEDULER_ADDRESS  tcp://HOST:8786 (else from the metadata)
#   TESSERA_IMAGE    the image to run (default tessera:cpu, or tessera:cuda
#                    with GPUs): push docker/Dockerfile's image to your
#                    registry and name it here
#   TESSERA_GPUS     auto (one worker per GPU nvidia-smi lists; default),
#                    none, or a count
#   TESSERA_ENGINE   docker (default), podman, or none: the Tessera
#                    binaries are installed here already (the image itself):
#                    run the workers as processes, in the foreground
#   TESSERA_DRY_RUN  1: print the commands instead of running them
#   Any other TESSERA_* variable (TESSERA_MEMORY_LIMIT=60GiB, ...) is handed
#   to the workers: docs/deploy.md has the table of every setting.
set -eu

log() { echo "tessera-join: $*" >&2; }
die() { log "error: $*"; exit 1; }
# Runs a command, or prints it under TESSERA_DRY_RUN=1.
run() {
  if [ "${TESSERA_DRY_RUN:-0}" = 1 ]; then echo "+ $*"; else "$@"; fi
}

load_settings() {
  if [ -r /etc/tessera/join.env ]; then
    set -a
    . /etc/tessera/join.env
    set +a
  fi
  : "${TESSERA_ENGINE:=docker}" "${TESSERA_GPUS:=auto}"
  : "${TESSERA_METADATA_URL:=http://metadata.google.internal/computeMetadata/v1/instance/attributes/tessera-scheduler}"
}

# The scheduler's address from the instance metadata, retried while the
# network comes up.
metadata_address() {
  for _ in $(seq 1 60); do
    if command -v curl >/dev/null; then
      curl -fsS -H 'Metadata-Flavor: Google' "$TESSERA_METADATA_URL" 2>/dev/null && return 0
    elif command -v wget >/dev/null; then
      wget -q -O - --header 'Metadata-Flavor: Google' "$TESSERA_METADATA_URL" 2>/dev/null && return 0
    else
      die "neither curl nor wget to read $TESSERA_METADATA_URL; set TESSERA_SCHEDULER_ADDRESS"
    fi
    sleep 2
  done
  return 1
}

find_scheduler() {
  if [ -z "${TESSERA_SCHEDULER_ADDRESS:-}" ]; then
    log "reading the scheduler's address from $TESSERA_METADATA_URL"
    TESSERA_SCHEDULER_ADDRESS=$(metadata_address) ||
      die "no scheduler address: set TESSERA_SCHEDULER_ADDRESS or the metadata attribute tessera-scheduler"
  fi
  case $TESSERA_SCHEDULER_ADDRESS in
    tcp://?*:[0-9]*) ;;
    *) die "TESSERA_SCHEDULER_ADDRESS \"$TESSERA_SCHEDULER_ADDRESS\" is not tcp://HOST:PORT" ;;
  esac
  export TESSERA_SCHEDULER_ADDRESS
  log "scheduler: $TESSERA_SCHEDULER_ADDRESS"
}

# How many GPU workers: TESSERA_GPUS, or the GPUs nvidia-smi lists.
gpu_count() {
  case $TESSERA_GPUS in
    none) echo 0 ;;
    auto) if command -v nvidia-smi >/dev/null; then nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; else echo 0; fi ;;
    *[!0-9]*|'') die "TESSERA_GPUS \"$TESSERA_GPUS\" is not auto, none or a count" ;;
    *) echo "$TESSERA_GPUS" ;;
  esac
}

install_engine() {
  command -v "$TESSERA_ENGINE" >/dev/null && [ "${TESSERA_DRY_RUN:-0}" != 1 ] && return 0
  log "installing $TESSERA_ENGINE"
  pkg=$TESSERA_ENGINE
  [ "$pkg" = docker ] && pkg=docker.io
  export DEBIAN_FRONTEND=noninteractive
  run apt-get update -qq
  run apt-get install -y -qq "$pkg" curl ca-certificates
}

# The NVIDIA container toolkit, from NVIDIA's repository (the driver must be
# on the image already: GPU images of the clouds ship it).
install_gpu_toolkit() {
  command -v nvidia-ctk >/dev/null && [ "${TESSERA_DRY_RUN:-0}" != 1 ] && return 0
  log "installing the NVIDIA container toolkit"
  repo=https://nvidia.github.io/libnvidia-container
  run sh -c "curl -fsSL $repo/gpgkey | gpg --dearmor -o /usr/share/keyrings/nvidia-container-toolkit.gpg"
  run sh -c "curl -fsSL $repo/stable/deb/nvidia-container-toolkit.list | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit.gpg] https://#' > /etc/apt/sources.list.d/nvidia-container-toolkit.list"
  run apt-get update -qq
  run apt-get install -y -qq nvidia-container-toolkit
  if [ "$TESSERA_ENGINE" = docker ]; then
    run nvidia-ctk runtime configure --runtime=docker
    run systemctl restart docker
  else
    run nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml
  fi
}

# The TESSERA_* settings the workers get: all but this script's own.
worker_env() {
  env | grep '^TESSERA_' | grep -v -e '^TESSERA_IMAGE=' -e '^TESSERA_GPUS=' -e '^TESSERA_ENGINE=' \
    -e '^TESSERA_METADATA_URL=' -e '^TESSERA_DRY_RUN=' -e '^TESSERA_NAME=' | sort || true
}

write_worker_env() {
  if [ "${TESSERA_DRY_RUN:-0}" = 1 ]; then
    echo "+ /etc/tessera/worker.env:"
    worker_env | sed 's/^/    /'
    return 0
  fi
  mkdir -p /etc/tessera /var/lib/tessera/spill
  worker_env > /etc/tessera/worker.env
}

# One worker container: $1 its name, $2 the GPU index or -1.
start_container() {
  name=$1 gpu=$2 host=$(hostname)
  run "$TESSERA_ENGINE" rm -f "$name" >/dev/null 2>&1 || true
  if [ "$gpu" -lt 0 ]; then
    run "$TESSERA_ENGINE" run -d --name "$name" --restart unless-stopped --network host \
      --env-file /etc/tessera/worker.env -e "TESSERA_NAME=${TESSERA_NAME:-$host}" \
      -v /var/lib/tessera/spill:/var/lib/tessera/spill "$TESSERA_IMAGE" tessera-worker
  else
    devices="--gpus device=$gpu"
    [ "$TESSERA_ENGINE" = podman ] && devices="--device nvidia.com/gpu=$gpu"
    # shellcheck disable=SC2086  # $devices is two words on purpose
    run "$TESSERA_ENGINE" run -d --name "$name" --restart unless-stopped --network host $devices \
      --env-file /etc/tessera/worker.env -e "TESSERA_NAME=${TESSERA_NAME:-$host}-gpu$gpu" \
      -v /var/lib/tessera/spill:/var/lib/tessera/spill "$TESSERA_IMAGE" tessera-worker --gpu 0
  fi
}

# TESSERA_ENGINE=none: the workers as processes of this machine.
run_processes() {
  gpus=$1
  : "${TESSERA_NAME:=$(hostname)}"
  export TESSERA_NAME
  if [ "$gpus" -eq 0 ]; then
    log "starting tessera-worker as $TESSERA_NAME"
    [ "${TESSERA_DRY_RUN:-0}" = 1 ] && { echo "+ tessera-worker"; return 0; }
    exec tessera-worker
  fi
  i=0
  while [ "$i" -lt "$gpus" ]; do
    run env TESSERA_NAME="$TESSERA_NAME-gpu$i" tessera-worker --gpu "$i" &
    i=$((i + 1))
  done
  wait
}

main() {
  load_settings
  find_scheduler
  gpus=$(gpu_count) || exit 1
  if [ "$TESSERA_ENGINE" = none ]; then
    run_processes "$gpus"
    return 0
  fi
  case $TESSERA_ENGINE in docker|podman) ;; *) die "TESSERA_ENGINE \"$TESSERA_ENGINE\" is not docker, podman or none" ;; esac
  if [ "$gpus" -gt 0 ]; then : "${TESSERA_IMAGE:=tessera:cuda}"; else : "${TESSERA_IMAGE:=tessera:cpu}"; fi
  install_engine
  [ "$gpus" -gt 0 ] && install_gpu_toolkit
  write_worker_env
  run "$TESSERA_ENGINE" pull "$TESSERA_IMAGE" || log "could not pull $TESSERA_IMAGE; using a local one"
  if [ "$gpus" -eq 0 ]; then
    start_container tessera-worker -1
  else
    i=0
    while [ "$i" -lt "$gpus" ]; do
      start_container "tessera-worker-gpu$i" "$i"
      i=$((i + 1))
    done
  fi
  log "started $([ "$gpus" -gt 0 ] && echo "$gpus GPU workers" || echo "a CPU worker") from $TESSERA_IMAGE"
}

main "$@"
