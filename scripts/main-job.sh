#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the main job on
# an embedded local cluster (a scheduler and two CPU workers on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/tessera local --cpu-workers 2 --threads-per-worker 1 -- \
  build/bin/tsr-sum-random --n 100000000 --chunk 1000000 --seed 42 --verify
