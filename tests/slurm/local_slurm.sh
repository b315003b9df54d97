# Sourced: start and stop a private single-node Slurm (munged, slurmctld, slurmd) for tests.
#   slurm_start DIR     writes DIR/slurm.conf, starts the daemons (remembering their PIDs), waits
#                       until the node is idle; exports SLURM_CONF so sbatch/squeue/scontrol use it
#   slurm_stop          stops exactly the daemons slurm_start started (by PID)
# Everything (key, sockets, state, logs) lives under DIR; nothing system-wide is touched.

slurm_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

slurm_start() {
  SLURM_DIR=$1
  mkdir -p "$SLURM_DIR"/{state,spool,munge}
  chmod 700 "$SLURM_DIR/munge"
  dd if=/dev/urandom of="$SLURM_DIR/munge/munge.key" bs=1 count=1024 status=none
  chmod 400 "$SLURM_DIR/munge/munge.key"
  local host cpus mem
  host=$(hostname -s)
  cpus=8   # declared above the real count, so oversubscribed test jobs can start (config_overrides)
  mem=$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)
  munged --force --key-file="$SLURM_DIR/munge/munge.key" --socket="$SLURM_DIR/munge/munge.socket" \
         --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/munge/munged.log" \
         --seed-file="$SLURM_DIR/munge/munge.seed"
  SLURM_PIDS="$(cat "$SLURM_DIR/munge/munged.pid")"
  cat > "$SLURM_DIR/slurm.conf" <<CONF
ClusterName=drtest
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.socket
CredType=cred/munge
SlurmctldPort=$(slurm_free_port)
SlurmdPort=$(slurm_free_port)
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$SLURM_DIR/slurm.conf"
  slurmctld -f "$SLURM_CONF"   # daemonises; PID in SlurmctldPidFile
  slurmd -f "$SLURM_CONF"
  local i
  for i in $(seq 1 100); do
    [ -s "$SLURM_DIR/slurmctld.pid" ] && [ -s "$SLURM_DIR/slurmd.pid" ] && break
    sleep 0.1
  done
  SLURM_PIDS="$SLURM_PIDS $(cat "$SLURM_DIR/slurmctld.pid" 2>/dev/null) $(cat "$SLURM_DIR/slurmd.pid" 2>/dev/null)"
  for i in $(seq 1 100); do
    sinfo -h -o %T 2>/dev/null | grep -qx idle && return 0
    sleep 0.2
  done
  echo "local Slurm did not come up; logs in $SLURM_DIR" >&2
  tail -5 "$SLURM_DIR/slurmctld.log" "$SLURM_DIR/slurmd.log" >&2 || true
  return 1
}

slurm_stop() {
  local pid
  for pid in $SLURM_PIDS; do kill "$pid" 2>/dev/null || true; done
  for pid in $SLURM_PIDS; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  SLURM_PIDS=""
}
