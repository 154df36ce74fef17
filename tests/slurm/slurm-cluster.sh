# tests/slurm/slurm-cluster.sh — sourced, not run: a one-node SLURM cluster
# (munged, slurmctld, slurmd) in a private directory, for the tests and for
# trying docker/slurm/tessera.sbatch on one machine (docs/slurm.md).
#
#   . tests/slurm/slurm-cluster.sh
#   slurm_up /tmp/my-slurm 2      # dir (created), CPUs of the node; exports SLURM_CONF
#   sbatch -c 2 docker/slurm/tessera.sbatch --bin-dir build/bin -- tsr-sum-random ...
#   slurm_down                    # cancels every job, stops the daemons (by their pids)
#
# Needs root (slurmd runs jobs as their users), slurm-wlm and munge
# (scripts/install-deps.sh --deploy). Nothing outside the directory is
# touched: its own munge key and socket, state, spool, logs, and free TCP
# ports, so it does not meet a system SLURM or another test's.

SLURM_TEST_DIR=""

# A free TCP port on this machine (not listened on now), from a random start.
_slurm_free_port() {
  local port=$(( 20000 + RANDOM % 20000 ))
  while ss -Htln "sport = :$port" 2>/dev/null | grep -q .; do port=$(( port + 1 )); done
  echo "$port"
}

_slurm_pid() { cat "$SLURM_TEST_DIR/$1.pid" 2>/dev/null; }

# slurm_up DIR CPUS: starts the three daemons; 0 once the node is idle.
slurm_up() {
  local dir=$1 cpus=${2:-2}
  mkdir -p "$dir" && chmod 755 "$dir" || return 1
  SLURM_TEST_DIR=$(cd "$dir" && pwd)
  dir=$SLURM_TEST_DIR
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
  chown munge:munge "$dir/munge" && chmod 755 "$dir/munge" || return 1
  # munged wants its key readable by its own user only, and refuses root.
  runuser -u munge -- sh -c "head -c 1024 /dev/urandom >'$dir/munge/munge.key' && chmod 400 '$dir/munge/munge.key'" || return 1
  runuser -u munge -- munged --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" || return 1
  cp "$dir/munge/munged.pid" "$dir/munged.pid"
  local ctld_port slurmd_port
  ctld_port=$(_slurm_free_port)
  slurmd_port=$(_slurm_free_port)
  [ "$slurmd_port" != "$ctld_port" ] || slurmd_port=$(( ctld_port + 1 ))
  cat >"$dir/slurm.conf" <<EOF
ClusterName=tsrtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.daemon.pid
SlurmdPidFile=$dir/slurmd.daemon.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=10
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -D -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  slurmd -D -N localhost -f "$SLURM_CONF" >"$dir/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"
  for _ in $(seq 1 150); do
    sinfo -h -o '%t' 2>/dev/null | grep -qx idle && return 0
    sleep 0.2
  done
  echo "slurm-cluster: the node did not become idle within 30 s" >&2
  return 1
}

# Prints the daemons' logs (on a failure).
slurm_dump() {
  local f
  for f in "$SLURM_TEST_DIR"/slurmctld.log "$SLURM_TEST_DIR"/slurmd.log "$SLURM_TEST_DIR"/munge/munged.log; do
    [ -f "$f" ] && { echo "----- $f (last 40 lines)"; tail -n 40 "$f"; }
  done
}

# Cancels every job, then stops slurmd, slurmctld and munged, each by its pid.
slurm_down() {
  [ -n "$SLURM_TEST_DIR" ] || return 0
  local name pid
  scancel --full --signal=KILL --user=root 2>/dev/null
  for _ in $(seq 1 50); do
    [ -z "$(squeue -h 2>/dev/null)" ] && break
    sleep 0.2
  done
  for name in slurmd slurmctld munged; do
    pid=$(_slurm_pid "$name")
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  SLURM_TEST_DIR=""
}
