#!/bin/sh
# The images' entrypoint: runs its arguments (tessera-scheduler when none
# are given). A worker's name defaults to the container's hostname, which
# is unique per replica (compose --scale) and is what the worker's health
# check asks the scheduler about: tessera health --worker NAME
# (docs/deploy.md). TESSERA_NAME, or --name, overrides it.
set -e
if [ "${1:-}" = tessera-worker ] && [ -z "${TESSERA_NAME:-}" ]; then
  TESSERA_NAME=$(cat /proc/sys/kernel/hostname)
  export TESSERA_NAME
fi
exec "$@"
