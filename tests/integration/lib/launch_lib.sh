# Shared by the loom launch tests (tests/integration/launch/; sourced after lib.sh): a tiny job
# that checkpoints every 5 steps, run under the supervisor, and the same job resumed by hand.
# mpirun binds no rank to a core (the MCA variable, since loom launch owns mpirun's command line).
export OMPI_MCA_hwloc_base_binding_policy=none
STEPS=${STEPS:-12}
EVERY=${EVERY:-5}

# The job's train options into the array JOB_SETS for run NAME (its files in $WORK/NAME).
job_sets() {
  local name=$1
  JOB_SETS=(--set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin"
    --set "data.vocab=$WORK/data/vocab.json" --set train.steps="$STEPS"
    --set train.eval_interval=0 --set logging.interval=1
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set "logging.tensorboard=$WORK/$name/tb"
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":$EVERY,\"keep\":0}")
}

# supervise NAME [launch options] -- [--set ...]: loom launch on the tiny config into
# $WORK/NAME (log: out.log); sets RC to its exit status.
supervise() {
  local name=$1 opts=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  mkdir -p "$WORK/$name"
  job_sets "$name"
  RC=0
  timeout 300 "$LOOM" launch "${opts[@]}" "$LOOM_SRC/configs/tiny.json" "${JOB_SETS[@]}" "$@" \
    >"$WORK/$name/out.log" 2>&1 || RC=$?
}

# hand_resume NAME FROM STEP NP [--set ...]: the step-STEP checkpoint of run FROM, copied to
# $WORK/NAME/ckpt, resumed by hand with `mpirun -np NP loom train` and the same options.
hand_resume() {
  local name=$1 from=$2 step=$3 np=$4 dir
  shift 4
  dir=$(printf 'step-%08d' "$step")
  rm -rf "$WORK/$name"
  mkdir -p "$WORK/$name/ckpt"
  cp -r "$WORK/$from/ckpt/$dir" "$WORK/$name/ckpt/" || die "$from has no $dir"
  printf '%s' "$dir" >"$WORK/$name/ckpt/latest"
  job_sets "$name"
  timeout 300 mpirun -np "$np" "$LOOM" train "$LOOM_SRC/configs/tiny.json" "${JOB_SETS[@]}" "$@" \
    >"$WORK/$name/out.log" 2>&1 || { cat "$WORK/$name/out.log"; die "hand resume $name failed"; }
  grep -q "resumed at step $step" "$WORK/$name/out.log" || die "$name did not resume at $step"
}

# No process of this test's jobs is left: none names $WORK on its command line.
no_rank_left() {
  local p left=""
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF "$LOOM train $LOOM_SRC/configs/tiny.json --set data.train=$WORK/" &&
      left="$left ${p#/proc/}"
  done
  [ -z "$left" ] || { ps -o pid,stat,args -p $left; die "processes left behind:$left"; }
}
