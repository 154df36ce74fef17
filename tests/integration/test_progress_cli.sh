#!/usr/bin/env bash
# The CLI progress bar (docs/progress.md), with real daemons under
# `tessera local`: on a pseudo-terminal (util-linux `script`) tsr-svd redraws
# one line with \r and ends at N/N tasks; with stderr a pipe it prints plain
# periodic lines without \r; --no-progress prints neither.
# Usage: test_progress_cli.sh BIN_DIR
set -euo pipefail
bin=${1:?usage: $0 BIN_DIR}
command -v script >/dev/null || { echo "FAIL: util-linux 'script' is missing (scripts/install-deps.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
svd=("$bin/tessera" local --cpu-workers 1 --threads-per-worker 2 -- "$bin/tsr-svd"
     --rows 200000 --cols 400 --chunks 2000,400 --k 5 --power-iters 2)
fail() { echo "FAIL: $*"; echo "--- output:"; cat -v "$2" | tail -c 3000; exit 1; }

# 1. a terminal: redraws in place, final line N/N
script -qfec "${svd[*]}" "$tmp/tty" >/dev/null 2>&1 || fail "tsr-svd under script exited non-zero" "$tmp/tty"
redraws=$(grep -a -o $'\rtsr-svd: \[' "$tmp/tty" | wc -l)
[ "$redraws" -ge 2 ] || fail "expected >= 2 redraws of the bar, saw $redraws" "$tmp/tty"
last=$(grep -a -o '[0-9]*/[0-9]* tasks' "$tmp/tty" | tail -1)
done_n=${last%%/*}; rest=${last#*/}; total_n=${rest%% *}
[ -n "$done_n" ] && [ "$done_n" = "$total_n" ] && [ "$total_n" -gt 0 ] || fail "last bar is '$last', not N/N" "$tmp/tty"
grep -a -q '100%' "$tmp/tty" || fail "the bar never reached 100%" "$tmp/tty"
grep -a -q 'singular values:' "$tmp/tty" || fail "no result after the bar" "$tmp/tty"

# 2. not a terminal: plain lines, no carriage returns
TESSERA_PROGRESS_INTERVAL=100ms "${svd[@]}" >"$tmp/out" 2>"$tmp/err" || fail "tsr-svd exited non-zero" "$tmp/err"
lines=$(grep -c '^tsr-svd: progress: ' "$tmp/err" || true)
[ "$lines" -ge 1 ] || fail "no plain progress lines on a pipe" "$tmp/err"
if grep -q $'\r' "$tmp/err"; then fail "carriage returns on a pipe" "$tmp/err"; fi
grep '^tsr-svd: progress: ' "$tmp/err" | tail -1 | grep -q ' 100% ' || fail "last plain line is not 100%" "$tmp/err"

# 3. --no-progress: nothing
"${svd[@]}" --no-progress >"$tmp/out" 2>"$tmp/err" || fail "tsr-svd --no-progress exited non-zero" "$tmp/err"
if grep -q 'progress' "$tmp/err"; then fail "--no-progress still printed progress" "$tmp/err"; fi
echo "OK: $redraws redraws on a tty (last $last), $lines plain lines on a pipe, none with --no-progress"
