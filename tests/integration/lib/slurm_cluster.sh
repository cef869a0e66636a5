# A private Slurm cluster on this machine for a test (sourced after lib.sh): munged on its own
# socket with a key made for it, slurmctld and two slurmd (the nodes loomnode0 and loomnode1,
# both this host, each configured with its CPUs) from a generated slurm.conf, everything (key,
# state, spool, logs, pid files) under one temporary directory, on ports picked free at start,
# so several tests, or a system Slurm, can run beside it. The client commands (sbatch, srun,
# sinfo, scancel) reach it through SLURM_CONF, which slurm_start exports.
#
# The daemons run without cgroups, capabilities or a systemd: proctrack/linuxproc (the job's
# processes found by their parent links), task/none (no CPU binding), jobacct_gather/none and no
# cgroup plugin anywhere, the configuration a container or a CI runner allows. slurmd runs as
# root: it starts each job as its submitter (setuid), which only root may.
#
#   slurm_missing          the Slurm and munge programs not on PATH (empty: all there)
#   slurm_start            start the cluster, wait until every node is idle; on failure return 1
#                          with the reason in SLURM_WHY and SLURM_ENV_REFUSED=1 when the host
#                          refused something (a permission, a capability), not the config
#   slurm_stop             cancel every job, stop the daemons, kill what is left of the jobs;
#                          1 (listing them) when a process of the cluster is still alive after
#   slurm_processes        the PIDs of this cluster's processes: daemons (their command lines
#                          name SLURM_DIR) and the job steps and tasks (SLURM_CONF=... in their
#                          environment)
# slurm_start also makes the EXIT trap run slurm_stop before lib.sh's cleanup, so a failing or
# interrupted test leaves no daemon and no job behind.
SLURM_NODES=(loomnode0 loomnode1) # one slurmd each, on this host (Debian's slurmd is built
                                  # with multiple-slurmd support: a port per node)
SLURM_DIR=
SLURM_DAEMONS=()
SLURM_WHY=
SLURM_ENV_REFUSED=0

slurm_missing() {
  local p f missing=""
  for p in munged mungekey slurmctld slurmd sbatch srun sinfo scancel; do
    f=$(PATH=$PATH:/usr/sbin:/sbin command -v "$p" 2>/dev/null)
    [ -f "$f" ] && [ -x "$f" ] || missing="$missing $p"
  done
  echo "${missing# }"
}

slurm_processes() {
  [ -n "$SLURM_DIR" ] || return 0
  # one grep over every process's files (a process may end between the listing and the read:
  # its files are gone, not an error); NUL-separated: -z, whole entries: -x. SLURM_CONF unset
  # first, so that this pipeline's own processes do not carry it.
  (
    conf=$SLURM_CONF
    unset SLURM_CONF
    {
      grep -lzF "$SLURM_DIR" /proc/[0-9]*/cmdline
      grep -lzxF "SLURM_CONF=$conf" /proc/[0-9]*/environ
    } 2>/dev/null | sed -E 's#^/proc/([0-9]+)/.*#\1#' | sort -un
  )
}

# _slurm_free_ports N: N distinct TCP ports on 127.0.0.1 that nothing listens on now
_slurm_free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# _slurm_fail WHY LOG...: record why the start failed (a log's first fatal or error line)
_slurm_fail() {
  local why=$1 log line
  shift
  for log in "$@"; do
    # the first fatal or error line, not the first start's missing state files; else the
    # log's last line (a shell's "Permission denied")
    line=$(grep -iE 'fatal|error' "$log" 2>/dev/null |
      grep -viE 'state file|NOTE: Trying backup|xcpuinfo_hwloc_topo_load' | head -n 1)
    [ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' "$log" 2>/dev/null | tail -n 1)
    [ -n "$line" ] && { why="$why: $(basename "$log"): $line"; break; }
  done
  SLURM_WHY=$why
  grep -qiE 'not permitted|permission denied|capabilit|cgroup|seccomp' <<<"$why" &&
    SLURM_ENV_REFUSED=1
  return 1
}

slurm_start() {
  PATH=$PATH:/usr/sbin:/sbin
  SLURM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/loom-slurm.XXXXXX")
  # munged wants its socket's directory searchable by everyone and its key readable by its
  # user only
  chmod 755 "$SLURM_DIR"
  local d=$SLURM_DIR ctld_port srun_base node ports
  mkdir -p "$d/munge" "$d/etc" "$d/state" "$d/log" "$d/run" "$d/tmp"
  for node in "${SLURM_NODES[@]}"; do mkdir -p "$d/spool/$node" "$d/tmp/$node"; done
  chmod 755 "$d/munge"
  export SLURM_CONF=$d/etc/slurm.conf
  trap 'slurm_stop >&2; on_exit' EXIT
  mungekey --create --keyfile="$d/munge/munge.key" >"$d/log/mungekey.out" 2>&1 ||
    { _slurm_fail "mungekey failed" "$d/log/mungekey.out"; return 1; }
  munged --foreground --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" \
    --log-file="$d/log/munged.log" --pid-file="$d/run/munged.pid" \
    --seed-file="$d/munge/munged.seed" >"$d/log/munged.out" 2>&1 &
  SLURM_DAEMONS+=($!)
  local i
  for i in $(seq 100); do [ -S "$d/munge/munge.sock" ] && break; sleep 0.1; done
  [ -S "$d/munge/munge.sock" ] ||
    { _slurm_fail "munged did not start" "$d/log/munged.out" "$d/log/munged.log"; return 1; }

  read -r ctld_port ports <<<"$(_slurm_free_ports $((1 + ${#SLURM_NODES[@]})))"
  srun_base=$((20000 + RANDOM % 30000)) # srun's own listening ports: the next one free in range
  local cpus
  cpus=$(nproc)
  # every node as configured (config_overrides), whatever the host has: 2 tasks fit on each
  [ "$cpus" -ge 2 ] || cpus=2
  cat >"$SLURM_CONF" <<EOF
# loom's test cluster ($(date -u +%FT%TZ)): everything under $d
ClusterName=loomtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SrunPortRange=$srun_base-$((srun_base + 199))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
# srun's PMIx plugin makes each step's spmix_appdir_UID_JOB.STEP here (default /tmp), one per
# node: every test cluster numbers its jobs from 1, two nodes on one host run the same step,
# and a killed run leaves its directory behind
TmpFS=$d/tmp/%n
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroups, no capabilities: what a container allows
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
# srun names its MPI plugin (--mpi=pmix), as the README's job script does
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# sbatch --wait polls the job after 2 s, then 4x longer up to MinJobAge / 2: the default (300)
# makes it 2, 8, 32 s (a 12 s job is seen done at 42 s); 4 keeps it every 2 s, and a finished
# job stays 4 s or more (purged every minute), longer than a poll
MinJobAge=4
SlurmdTimeout=60
EOF
  local k=0 nodelist
  for node in "${SLURM_NODES[@]}"; do
    k=$((k + 1))
    echo "NodeName=$node NodeHostname=$(hostname -s) NodeAddr=127.0.0.1" \
         "Port=$(cut -d' ' -f$k <<<"$ports") CPUs=$cpus State=UNKNOWN"
  done >>"$SLURM_CONF"
  nodelist=$(IFS=,; echo "${SLURM_NODES[*]}")
  echo "PartitionName=loom Nodes=$nodelist Default=YES MaxTime=30 State=UP" >>"$SLURM_CONF"
  slurmctld -D -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 &
  SLURM_DAEMONS+=($!)
  for node in "${SLURM_NODES[@]}"; do
    slurmd -D -N "$node" -f "$SLURM_CONF" >"$d/log/slurmd-$node.out" 2>&1 &
    SLURM_DAEMONS+=($!)
  done
  _slurm_reaper
  # idle: slurmctld answers, every slurmd registered, nothing runs
  local states="" want
  want=$(printf 'idle\n%.0s' "${SLURM_NODES[@]}")
  for i in $(seq 120); do
    states=$(sinfo -h -N -n "$nodelist" -o %T 2>/dev/null)
    [ "$states" = "${want%$'\n'}" ] && return 0
    kill -0 "${SLURM_DAEMONS[1]}" 2>/dev/null ||
      { _slurm_fail "slurmctld exited" "$d/log/slurmctld.out" "$d/log/slurmctld.log"; return 1; }
    k=2
    for node in "${SLURM_NODES[@]}"; do
      kill -0 "${SLURM_DAEMONS[$k]}" 2>/dev/null || {
        _slurm_fail "slurmd of $node exited" "$d/log/slurmd-$node.out" "$d/log/slurmd-$node.log"
        return 1
      }
      k=$((k + 1))
    done
    sleep 0.5
  done
  _slurm_fail "nodes $nodelist not idle after 60 s (states: $(echo ${states:-no answer}))" \
    "$d"/log/slurmd-*.log "$d/log/slurmctld.log"
}

# The EXIT trap cannot run when the test itself is SIGKILLed (ctest's timeout kills its process
# tree): a reaper outside that tree (double fork: its parent is init) waits for the test's shell
# to go, then stops the cluster and removes $WORK, so no daemon outlives the test. Its PID is in
# run/reaper.pid; slurm_stop ends it first.
_slurm_reaper() {
  local test_pid=$$
  ( (
    trap '' INT TERM HUP
    echo "$BASHPID" > "$SLURM_DIR/run/reaper.pid"
    while kill -0 "$test_pid" 2>/dev/null; do sleep 1; done
    slurm_stop >/dev/null 2>&1
    [ -n "${LOOM_KEEP_WORK:-}" ] || rm -rf "$WORK" # what lib.sh's EXIT trap would have done
  ) & ) </dev/null >/dev/null 2>&1
}

slurm_stop() {
  [ -n "$SLURM_DIR" ] || return 0
  local p i left
  p=$(cat "$SLURM_DIR/run/reaper.pid" 2>/dev/null)
  [ -n "$p" ] && [ "$p" != "$BASHPID" ] && kill -KILL "$p" 2>/dev/null
  scancel --full --quiet --partition=loom >/dev/null 2>&1
  # the slurmds, then slurmctld, then munged: each stops on SIGTERM
  for ((i = ${#SLURM_DAEMONS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${SLURM_DAEMONS[$i]}" 2>/dev/null
  done
  for i in $(seq 50); do
    left=$(slurm_processes)
    [ -z "$left" ] && break
    [ "$i" -eq 30 ] && kill -KILL $left 2>/dev/null # what ignored SIGTERM for 3 s
    sleep 0.1
  done
  for p in "${SLURM_DAEMONS[@]}"; do wait "$p" 2>/dev/null; done
  SLURM_DAEMONS=()
  left=$(slurm_processes)
  if [ -n "$left" ]; then
    echo "slurm_stop: processes of the test cluster still alive:" >&2
    # shellcheck disable=SC2086
    ps -o pid,ppid,args -p "$(echo $left | tr ' ' ,)" >&2
    return 1
  fi
  [ -n "${LOOM_KEEP_WORK:-}" ] || rm -rf "$SLURM_DIR"
  SLURM_DIR=
  return 0
}
