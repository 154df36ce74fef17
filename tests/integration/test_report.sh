#!/usr/bin/env bash
# The per-job efficiency report (docs/report.md), with real daemons under
# `tessera local` (2 CPU workers, one thread each, a memory limit):
#  1. tsr-svd --report x.json: the JSON's fields and values are sane (wall > 0,
#     per-op busy times add up to the job's, efficiencies in (0,1], ...);
#  2. tsr-svd --report x.html: headless Chromium loads the page; its screenshot
#     is not blank (non-background pixel fraction, checked against a blank page
#     rendered the same way) and its DOM has the sections, charts and op names;
#  3. `tessera report` renders the saved JSON as text and as the same HTML;
#  4. tsr-cluster --report writes one too (many graphs in one report); its progress
#     bar prints plain lines on a pipe, none with --no-progress, and its step lines stay;
#  5. tessera report --scheduler ADDR --graph 1 follows another client's live graph to its end;
#  6. bad input: a --report name that is neither .html nor .json, a JSON file
#     that is not a report: clear errors naming the file / field.
# Chromium (Debian `chromium`) and Pillow (`python3-pil`, Debian's python3)
# come from scripts/install-deps.sh; without them the test FAILS, it does not skip.
# Usage: test_report.sh BIN_DIR
set -euo pipefail
bin=$(cd "${1:?usage: $0 BIN_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
py=${TSR_TEST_PYTHON:-/usr/bin/python3}
command -v chromium >/dev/null || { echo "FAIL: chromium is missing (scripts/install-deps.sh installs it)"; exit 1; }
"$py" -c 'import PIL' 2>/dev/null || { echo "FAIL: $py has no PIL (python3-pil, scripts/install-deps.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && { echo "--- $2:"; tail -c 3000 "$2"; }; exit 1; }
check() { "$py" "$here/check_report.py" "$@" || exit 1; }
local_run=("$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 --memory-limit 512MiB --)
svd=("$bin/tsr-svd" --rows 100000 --cols 400 --chunks 2000,400 --k 5 --power-iters 2 --no-progress)
# Chromium as root needs --no-sandbox; no GPU here; a fixed window so pixel fractions compare.
chrome() { timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1600 "$@" 2>/dev/null; }

# 1. JSON
"${local_run[@]}" "${svd[@]}" --report "$tmp/r.json" >out.txt 2>err.txt || fail "tsr-svd --report r.json failed" err.txt
grep -q "report written to $tmp/r.json" err.txt || fail "no 'report written' line" err.txt
check json "$tmp/r.json"
ops=$("$py" -c 'import json,sys; print(" ".join(o["op"] for o in json.load(open(sys.argv[1]))["ops"][:3]))' "$tmp/r.json")

# 2. HTML from the CLI, in Chromium
"${local_run[@]}" "${svd[@]}" --report "$tmp/r.html" >out.txt 2>err.txt || fail "tsr-svd --report r.html failed" err.txt
[ -s r.html ] || fail "r.html is empty" err.txt
printf '<!DOCTYPE html><html><body></body></html>\n' >blank.html
chrome --screenshot="$tmp/blank.png" "file://$tmp/blank.html" >/dev/null || fail "chromium could not screenshot a blank page"
chrome --screenshot="$tmp/r.png" "file://$tmp/r.html" >/dev/null || fail "chromium could not load r.html"
[ -s r.png ] && [ -s blank.png ] || fail "chromium wrote no screenshot"
check pixels "$tmp/blank.png" 0 0.001     # the measure sees a blank page as blank
check pixels "$tmp/r.png" 0.03            # the report is not
chrome --dump-dom "file://$tmp/r.html" >r.dom || fail "chromium --dump-dom failed"
# shellcheck disable=SC2086  # op names are words
check dom "$tmp/r.dom" $ops

# 3. tessera report: text, and HTML from the saved JSON
"$bin/tessera" report "$tmp/r.json" >text.txt 2>err.txt || fail "tessera report r.json failed" err.txt
grep -q '^bounded by: ' text.txt && grep -q '^time per op:' text.txt && grep -q '^workers:' text.txt ||
  fail "tessera report's text lacks a part" text.txt
"$bin/tessera" report --html "$tmp/again.html" "$tmp/r.json" 2>err.txt || fail "tessera report --html failed" err.txt
chrome --dump-dom "file://$tmp/again.html" >again.dom || fail "chromium --dump-dom again.html failed"
check dom "$tmp/again.dom" $ops
"$bin/tessera" report --json "$tmp/r.json" >again.json || fail "tessera report --json failed"
check json "$tmp/again.json"

# 4. tsr-cluster: a report over many graphs; its progress bar (plain lines on a pipe), none with --no-progress
cluster=("$bin/tsr-cluster" --synthetic 3000,2000,4 --min-genes 10 --n-pcs 10 --n-top-genes 500 --out "$tmp/cl")
"${local_run[@]}" "${cluster[@]}" --report "$tmp/c.json" >out.txt 2>err.txt || fail "tsr-cluster --report failed" err.txt
grep -q '^tsr-cluster: progress: 100% ' err.txt || fail "tsr-cluster drew no progress lines" err.txt
grep -q '^pp.neighbors ' out.txt || fail "tsr-cluster lost its step lines" out.txt
"${local_run[@]}" "${cluster[@]}" --no-progress >out.txt 2>err.txt || fail "tsr-cluster --no-progress failed" err.txt
if grep -q 'progress' err.txt; then fail "tsr-cluster --no-progress still printed progress" err.txt; fi
"$py" - "$tmp/c.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["program"] == "tsr-cluster" and d["tasks"]["graphs"] > 3, d["tasks"]
assert d["tasks"]["done"] == d["tasks"]["total"] > 0 and any(o["op"] == "community" for o in d["ops"]), d["ops"]
print("cluster ok: %d graphs, %d tasks" % (d["tasks"]["graphs"], d["tasks"]["total"]))
PY

# 5. tessera report --scheduler: a live graph of another client (tsr-svd --persist keeps graph 1,
#    the generation, alive while the SVD runs), followed until it completes
"$bin/tessera" local --cpu-workers 2 --threads-per-worker 1 >local.out 2>&1 &
local_pid=$!
trap 'kill -TERM $local_pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
addr=""
for _ in $(seq 100); do
  addr=$(grep -o 'tcp://[0-9.:]*' local.out | head -1 || true)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || fail "tessera local printed no address" local.out
TESSERA_SCHEDULER=$addr "${svd[@]}" --persist >svd_live.out 2>&1 &
svd_pid=$!
"$bin/tessera" report --scheduler "$addr" --graph 1 --timeout 120s --json >live.json 2>err.txt ||
  fail "tessera report --scheduler failed" err.txt
wait "$svd_pid" || fail "tsr-svd beside the live report failed" svd_live.out
kill -TERM "$local_pid"; wait "$local_pid" || true
"$py" - "$tmp/live.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
t = d["tasks"]
assert d["program"] == "graph 1" and t["total"] > 0 and t["done"] == t["total"], t
assert t["busy_s"] > 0 and len(d["ops"]) >= 1 and len(d["workers"]) == 2, d["ops"]
assert abs(sum(o["busy_s"] for o in d["ops"]) - t["busy_s"]) <= 0.01 * t["busy_s"] + 0.001
print("live ok: graph 1, %d tasks, busy %.2f s, %s" % (t["total"], t["busy_s"], d.get("note", "no note")))
PY

# 6. bad input
set +e
"$bin/tsr-svd" --rows 10 --cols 10 --report "$tmp/r.txt" >out.txt 2>err.txt; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "report '$tmp/r.txt'.*must end in .html" err.txt || fail "--report r.txt: rc $rc" err.txt
echo '{"hello": 1}' >notreport.json
set +e
"$bin/tessera" report "$tmp/notreport.json" >out.txt 2>err.txt; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "notreport.json' is not a Tessera report: field 'tessera_report'" err.txt ||
  fail "tessera report on a non-report: rc $rc" err.txt
echo "OK: JSON sane, HTML rendered and not blank with every section, tessera report text/html/json, tsr-cluster, bad input refused"
