# tests/hosts/netns.sh — sourced, not run: several "hosts" on one machine,
# each a network namespace with one interface (eth0) on a shared switch: a
# bridge in a namespace of its own, so that no end of any link is in the
# machine's own namespace. Used by tests/hosts/test_hosts.sh, test_faults.sh (their
# common frame: hosts_test_begin, at the end) and
# bench/hosts/*.sh. Needs root and iproute2.
#
#   . tests/hosts/netns.sh
#   hosts_up sched w1 w2 client   # 10.77.0.1, .2, .3, .4 in that order
#   hostx w1 tessera status ...   # runs a command on host w1
#   host_spawn w1 w1.log tessera-worker ...   # in the background: $HOST_PID
#   host_ip w1                    # 10.77.0.2
#   port_bytes w1                 # bytes both ways through w1's switch port
#   hosts_down                    # deletes every namespace it made
#
# Namespace names carry this shell's pid, so two runs never meet. Each
# host's switch port is named p-HOST inside the switch namespace; its byte
# counters (/sys/class/net/p-HOST/statistics) count every frame the host
# sent or received, so traffic between two hosts shows on their two ports
# and on no other (the bridge forwards known unicast addresses only).

HOSTS_PREFIX="tsr$$-"
HOSTS_NAMES=()
HOSTS_SUBNET=${HOSTS_SUBNET:-10.77.0}

_hosts_ns() { echo "${HOSTS_PREFIX}$1"; }

# hostx HOST CMD...: runs CMD in HOST's namespace, in the foreground.
hostx() {
  local h=$1
  shift
  ip netns exec "$(_hosts_ns "$h")" "$@"
}

# host_spawn HOST LOG CMD...: starts CMD in HOST's namespace in the
# background, output to LOG; sets HOST_PID to CMD's own pid (`ip netns
# exec` execs it). Not `hostx ... &`: a function in the background runs in
# a subshell of its own, whose pid is not CMD's, and killing it leaves CMD.
# Variables set before the call (VAR=x host_spawn ...) reach CMD.
host_spawn() {
  local h=$1 log=$2
  shift 2
  ip netns exec "$(_hosts_ns "$h")" "$@" >"$log" 2>&1 &
  # shellcheck disable=SC2034  # read by the caller
  HOST_PID=$!
}

# Stops every process whose pid is in the caller's array `pids` (TERM,
# up to 5 s each, then KILL), waits for them and empties the array.
stop_pids() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  wait 2>/dev/null
  pids=()
}

host_ip() {
  local i
  for i in "${!HOSTS_NAMES[@]}"; do
    [ "${HOSTS_NAMES[$i]}" = "$1" ] && { echo "$HOSTS_SUBNET.$((i + 1))"; return 0; }
  done
  return 1
}

# Bytes received plus sent by HOST's switch port so far.
port_bytes() {
  ip netns exec "$(_hosts_ns sw)" sh -c "cat /sys/class/net/p-$1/statistics/rx_bytes /sys/class/net/p-$1/statistics/tx_bytes" |
    awk '{ s += $1 } END { print s + 0 }'
}

# hosts_up NAME...: a switch and one host per name, all links up. 0 or 1.
hosts_up() {
  local sw i h
  sw=$(_hosts_ns sw)
  HOSTS_NAMES=()
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for h in "$@"; do
    [ ${#h} -le 12 ] || { echo "netns: host name '$h' longer than 12" >&2; return 1; }
    i=${#HOSTS_NAMES[@]}
    ip netns add "$(_hosts_ns "$h")" || return 1
    HOSTS_NAMES+=("$h")
    ip link add eth0 netns "$(_hosts_ns "$h")" type veth peer name "p-$h" netns "$sw" || return 1
    ip -n "$sw" link set "p-$h" master br0 up || return 1
    ip -n "$(_hosts_ns "$h")" addr add "$HOSTS_SUBNET.$((i + 1))/24" dev eth0 || return 1
    ip -n "$(_hosts_ns "$h")" link set eth0 up || return 1
    ip -n "$(_hosts_ns "$h")" link set lo up || return 1
  done
}

# Deletes the namespaces (their interfaces go with them). Processes still
# inside a namespace keep it alive: stop them first.
hosts_down() {
  local h
  for h in "${HOSTS_NAMES[@]}" sw; do ip netns del "$(_hosts_ns "$h")" 2>/dev/null; done
  HOSTS_NAMES=()
}

# ---- the frame of a hosts test (tests/hosts/test_*.sh) ----
#
#   hosts_test_begin TEST CASE BIN_DIR [TOOL...]
#
# Skips (exit 77, a SKIPPED line) unless root, network namespaces and every
# TOOL (besides ip) are there; fails unless the daemons and
# tsr-hosts-client are built in BIN_DIR. Sets logs (a fresh dir), pids,
# failures; defines fail and pass; on exit stops every pid in pids, tears
# the namespaces down, prints the logs' tails when the run failed (and
# copies them to $TESSERA_TEST_KEEP_LOGS when set), and exits 1 if any
# fail was called.
hosts_test_begin() {
  _HT_TEST=$1 _HT_CASE=$2
  local bin=$3 tool b probe="tsr-probe-$$"
  shift 3
  skip() { echo "SKIPPED: $_HT_TEST $_HT_CASE: $*"; exit 77; }
  [ "$(id -u)" = 0 ] || skip "needs root (network namespaces, veth links, iptables, tc)"
  for tool in ip "$@"; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps.sh --deploy)"
  done
  ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here"
  ip netns del "$probe"
  for b in tessera-scheduler tessera-worker tessera tsr-hosts-client; do
    [ -x "$bin/$b" ] || { echo "FAIL: $bin/$b is not built"; exit 1; }
  done
  logs=$(mktemp -d "/tmp/tsr-$_HT_TEST-XXXXXX")
  pids=()
  failures=0
  _HT_START=$SECONDS
  trap _hosts_test_end EXIT
  trap 'exit 130' INT TERM
}

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

_hosts_test_end() {
  local rc=$? f
  trap - EXIT INT TERM
  [ "$rc" -ne 0 ] || [ "$failures" -eq 0 ] || rc=1
  stop_pids
  hosts_down
  if [ "$rc" -ne 0 ]; then
    for f in "$logs"/*.log; do [ -f "$f" ] && { echo "----- $f"; tail -n 80 "$f"; }; done
  fi
  [ -n "${TESSERA_TEST_KEEP_LOGS:-}" ] && cp -r "$logs" "$TESSERA_TEST_KEEP_LOGS/$_HT_TEST-$_HT_CASE-$(date +%H%M%S)"
  rm -rf "$logs"
  echo "$_HT_TEST $_HT_CASE: $([ "$rc" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - _HT_START)) s"
  exit "$rc"
}
