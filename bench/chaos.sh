#!/usr/bin/env bash
# The long chaos run (issue 13; docs/journal.md "Chaos"): RUNS runs (default
# 100) of each fault kind over the README's SVD, plain and persisted,
# every result compared byte for byte with the undisturbed run.
#
#   bench/chaos.sh [BIN_DIR] [RUNS] [KINDS] [SEED]
#
# It prints the harness's command, one line per run and the count per kind;
# record the counts in bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/bin} runs=${2:-100} kinds=${3:-kill,stop,restart,two,sched} seed=${4:-$$}
echo "# command: tests/chaos/chaos.sh $bin $runs $kinds $seed  ($(nproc) cores, $(date -I))"
exec tests/chaos/chaos.sh "$bin" "$runs" "$kinds" "$seed"
