#!/bin/bash
# ctest: labels=integration,multinode,matrix timeout=900
# The main job through a real Slurm, as a cluster user runs it: a private slurmctld + munged +
# two slurmd (two Slurm nodes on this machine: lib/slurm_cluster.sh), the README's job script
# submitted with `sbatch --wait` on 2 nodes x 1 task (srun --mpi=pmix starts the ranks), then
# `mpirun` inside such an allocation (sbatch --wrap), against the main job itself
# (tools/main_job.sh: plain mpirun, 2 ranks). Same ranks, same config, same text: the per-step
# losses and the final parameters must be bitwise equal, and the start-up line must show each
# rank's Slurm node and local rank. At the end, and on every
# failure, no daemon and no job step of the cluster may be left (checked with pgrep and the
# processes' environments).
# Skipped (77, with the reason) where Slurm or munge is not installed (tools/setup.sh --slurm
# installs them; tools/test.sh --full does), without root (slurmd starts jobs as their users),
# or where the host refuses the daemons something (the daemon's own line). ~1.5 min on 2 cores.
# Needs: LOOM_BUILD, LOOM_SRC; Debian's fortunes.
set -u
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/slurm_cluster.sh"
[ -d /usr/share/games/fortunes ] ||
  { echo "SKIP: /usr/share/games/fortunes not installed"; exit 77; }
missing=$(slurm_missing)
[ -z "$missing" ] || {
  echo "SKIP: Slurm is not installed (missing: $missing): apt-get install slurmctld slurmd" \
       "slurm-client munge, or tools/setup.sh --tests --slurm"
  exit 77
}
[ "$(id -u)" -eq 0 ] ||
  { echo "SKIP: slurmd must run as root (it starts each job as its user)"; exit 77; }
steps=30
# the main job's training, made short: the same overrides on every launcher
short=(--set train.steps=$steps --set lr_schedule.warmup_steps=5 --set sample.tokens=0)
# layout NAME: $WORK/NAME, the repository's layout (configs, tools, build linked) where a run
# writes its runs/ and reads data/fortunes, as a user's checkout on the cluster's shared disk
src=$(cd "$LOOM_SRC" && pwd) build=$(cd "$LOOM_BUILD" && pwd)
layout() {
  mkdir -p "$WORK/$1"
  ln -s "$src/configs" "$src/tools" "$WORK/$1/"
  ln -s "$build" "$WORK/$1/build"
}

# 1. the cluster (first: a host that refuses it is known at once)
t0=$SECONDS
if ! slurm_start; then
  if [ "$SLURM_ENV_REFUSED" = 1 ]; then
    echo "SKIP: the Slurm daemons cannot run here: $SLURM_WHY"
    exit 77
  fi
  for f in "$SLURM_DIR"/log/*; do echo "== $f"; tail -n 20 "$f"; done
  die "the test cluster did not start: $SLURM_WHY"
fi
cluster_dir=$SLURM_DIR
echo "ok: slurmctld + 2 slurmd + munged up, the nodes idle ($((SECONDS - t0)) s):" \
  "$(sinfo -h -o '%P %a %D %T %N %c CPUs')"
srun --mpi=list 2>&1 | grep -qw pmix ||
  die "srun --mpi=list does not name pmix: $(srun --mpi=list 2>&1)"

# 2. the main job (plain mpirun, 2 ranks): prepares data/fortunes, trains, judges
layout mpirun
t0=$SECONDS
# (long commands run in the background and are waited for: a signal to the test acts at once,
# bash runs no trap while a foreground command runs)
LOOM_NO_SETUP=1 LOOM_BUILD_DIR="$LOOM_BUILD" LOOM_WORK_DIR="$WORK/mpirun" \
  timeout 600 bash "$LOOM_SRC/tools/main_job.sh" -- "${short[@]}" > "$WORK/mpirun.log" 2>&1 &
track_job $!
wait $! || { cat "$WORK/mpirun.log"; die "the main job (mpirun) failed"; }
echo "ok: the main job through mpirun ($((SECONDS - t0)) s):" \
  "$(grep 'main job: validation loss' "$WORK/mpirun.log")"
ref=$WORK/mpirun/runs/fortunes_ddp

# submit NAME SBATCH_ARGS...: sbatch --wait from $WORK/NAME (a layout with the main job's data)
# on 2 nodes x 1 task, the main job's 2 ranks (the command line overrides a script's #SBATCH
# lines); the job's output in $WORK/NAME.out
submit() {
  local name=$1
  shift
  layout "$name"
  ln -s "$WORK/mpirun/data" "$WORK/$name/data"
  t0=$SECONDS
  (cd "$WORK/$name" && exec timeout 600 sbatch --wait --quiet --job-name="$name" --nodes=2 \
     --ntasks-per-node=1 --time=10 --output="$WORK/$name.out" "$@") &
  track_job $!
  wait $! || {
    cat "$WORK/$name.out" 2>/dev/null
    tail -n 30 "$cluster_dir"/log/slurm*.log
    die "the $name job failed"
  }
  # (srun exits 0 when its step failed to launch: Slurm 22.05 with a PMIx setup error)
  grep -q '^loom: finished at step' "$WORK/$name.out" ||
    { cat "$WORK/$name.out"; tail -n 30 "$cluster_dir"/log/slurmd*.log; die "$name: no training"; }
  echo "ok: the $name job: $(grep -m1 '^loom: finished' "$WORK/$name.out") ($((SECONDS - t0)) s)"
}

# placed NAME LINE: the job's start-up line is LINE
placed() {
  local got
  got=$(grep '^loom: placement: ' "$WORK/$1.out")
  [ "$got" = "$2" ] || die "$1: the placement line is
  $got
expected
  $2"
  echo "ok: $1: $got"
}

# same NAME: its run equals the main job's, bitwise (per-step loss and grad norm, the final
# validation loss, the final parameters)
same() {
  local run=$WORK/$1/runs/fortunes_ddp
  /usr/bin/python3 "$TESTLIB/compare_runs.py" --bitwise "$run/metrics.jsonl" "$run/ckpt" \
    "$ref/metrics.jsonl" "$ref/ckpt" || die "$1: not the main job's run"
  local a b
  a=$(grep '"val_loss"' "$run/metrics.jsonl" | tail -n 1)
  b=$(grep '"val_loss"' "$ref/metrics.jsonl" | tail -n 1)
  [ -n "$b" ] && [ "$a" = "$b" ] || die "$1: final validation loss $a, the main job's $b"
  echo "ok: $1 = the main job, bitwise: final $a"
}

# 3. the README's job script: srun --mpi=pmix starts the ranks
awk '/slurm.sh submits the script below/ { want = 1; next }
     want && /^```sh/ { inside = 1; next }
     inside && /^```/ { exit }
     inside { print }' "$LOOM_SRC/README.md" > "$WORK/train.sbatch"
grep -q '^srun --mpi=pmix .*loom train' "$WORK/train.sbatch" ||
  die "README.md: the Slurm job script (after its marker comment) was not found"
submit srun "$WORK/train.sbatch" "${short[@]}"
placed srun "loom: placement: 2 ranks on 2 nodes (node from SLURMD_NODENAME and SLURM_NODEID,\
 local rank from SLURM_LOCALID) | node 0 loomnode0: rank 0, local 0 |\
 node 1 loomnode1: rank 1, local 0"
same srun

# 4. mpirun inside the allocation: Open MPI reads the allocation from Slurm's variables and
# starts its daemon on the other node with srun
submit mpirun_in_slurm \
  --wrap "mpirun --bind-to none build/bin/loom train configs/fortunes_ddp.json ${short[*]}"
placed mpirun_in_slurm "loom: placement: 2 ranks on 2 nodes (node from SLURMD_NODENAME, local\
 rank from OMPI_COMM_WORLD_LOCAL_RANK) | node 0 loomnode0: rank 0, local 0 |\
 node 1 loomnode1: rank 1, local 0"
same mpirun_in_slurm

# 5. torn down: no daemon (pgrep on the cluster's directory) and no job step left
slurm_stop || die "the test cluster left processes behind"
left=$(pgrep -f "$cluster_dir")
[ -z "$left" ] || die "daemons of the test cluster still running: $(ps -o pid,args -p "$left")"
echo "ok: the cluster is gone: no process names $cluster_dir or carries its SLURM_CONF"
echo "all checks passed"
