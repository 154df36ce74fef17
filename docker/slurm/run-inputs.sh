#!/usr/bin/env bash
# run-inputs.sh — runs a Tessera client once per input against the cluster
# of the job it runs in (PROGRAM of docker/slurm/tessera.sbatch): the
# job-array pattern, and the one-job-over-all-inputs pattern that replaces it.
#
#   run-inputs.sh [--parallel P] [--batch auto|all|K/N] LIST -- COMMAND [ARGS...]
#
# LIST has one input a line (a file, a prefix, a seed; blank lines and
# lines starting with # are skipped). In ARGS, {} is the input, {/} its
# last path component and {#} its line number among the inputs (from 0).
#   --batch auto   (default) inside a job array, array task k of N takes
#                  batch k (the k-th of N contiguous slices of LIST); else all
#   --batch K/N    batch K (from 0) of N; --batch all: every input
#   --parallel P   run P inputs at once (default 1); 0: all at once, so the
#                  scheduler holds every input's graph together and keeps
#                  all workers busy
# Each line of a run's output is prefixed with "[input] "; a last line per
# input says "input X: ok" or "input X: FAILED (status S)". Exits 0 when
# every input succeeded, else 1 (2 on a usage error).
#
# One cluster per array task, each over its batch (4 array tasks, 1 node each):
#   sbatch --array=0-3 -N 1 docker/slurm/tessera.sbatch -- \
#     docker/slurm/run-inputs.sh cohorts.txt -- tsr-pca --bed {} --k 10 --out pcs/{/}
# One job, one cluster, all inputs at once (better: one startup, no idle nodes):
#   sbatch -N 4 docker/slurm/tessera.sbatch -- \
#     docker/slurm/run-inputs.sh --parallel 0 cohorts.txt -- tsr-pca --bed {} --k 10 --out pcs/{/}
set -uo pipefail

usage() { sed -n '/^#   run-inputs.sh \[/p' "$0" | sed 's/^#   /usage: /' >&2; exit 2; }
parallel=1 batch=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --parallel) parallel=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --help|-h) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-inputs: unknown flag '$1'" >&2; usage ;;
    *) break ;;
  esac
done
{ [ $# -ge 3 ] && [ "$2" = "--" ]; } || usage
list=$1
shift 2
[ -r "$list" ] || { echo "run-inputs: cannot read the input list '$list'" >&2; exit 2; }
[[ "$parallel" =~ ^[0-9]+$ ]] || { echo "run-inputs: --parallel wants a number" >&2; exit 2; }

inputs=()
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ''|'#'*) continue ;; esac
  inputs+=("$line")
done <"$list"
n=${#inputs[@]}

if [ "$batch" = auto ]; then
  if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
    batch="$(( SLURM_ARRAY_TASK_ID - ${SLURM_ARRAY_TASK_MIN:-0} ))/${SLURM_ARRAY_TASK_COUNT:-1}"
  else
    batch=all
  fi
fi
first=0 end=$n
if [ "$batch" != all ]; then
  { [[ "$batch" =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -lt "${BASH_REMATCH[2]}" ]; } ||
    { echo "run-inputs: --batch wants auto, all or K/N with K < N, not '$batch'" >&2; exit 2; }
  k=${BASH_REMATCH[1]} parts=${BASH_REMATCH[2]}
  first=$(( k * n / parts )) end=$(( (k + 1) * n / parts ))
fi
echo "run-inputs: inputs $first to $((end - 1)) of $n (batch $batch), $([ "$parallel" -eq 0 ] && echo all || echo "$parallel") at a time"

# Runs COMMAND for input $1 (line $2), its output prefixed; returns its status.
run_one() {
  local input=$1 idx=$2 a args=()
  for a in "${cmd[@]}"; do
    # Quoted replacements: bash 5.2 would otherwise read & in them as the match.
    local base=${input##*/}
    a=${a//\{\#\}/"$idx"}
    a=${a//\{\/\}/"$base"}
    args+=("${a//\{\}/"$input"}")
  done
  "${args[@]}" 2>&1 | while IFS= read -r line || [ -n "$line" ]; do printf '[%s] %s\n' "$input" "$line"; done
  local status=${PIPESTATUS[0]}
  if [ "$status" -eq 0 ]; then echo "input $input: ok"; else echo "input $input: FAILED (status $status)"; fi
  return "$status"
}

cmd=("$@")
failed=0 running=0
pids=()
for (( i = first; i < end; i++ )); do
  run_one "${inputs[$i]}" "$i" &
  pids+=($!)
  running=$((running + 1))
  if [ "$parallel" -gt 0 ] && [ "$running" -ge "$parallel" ]; then
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=$((failed + 1))
  running=$((running - 1))
done
echo "run-inputs: $((end - first - failed)) of $((end - first)) inputs succeeded"
[ "$failed" -eq 0 ]
