#!/bin/bash
# times a stalled rank's watchdog and a SIGTERM'd job's stop: it runs alone
# ctest: serial
# A rank that fails must bring the whole job down, non-zero, with a message, within seconds:
#  1. a rank returns an error mid-run (LOOM_FAULT=1:3:error)
#  2. a rank dies abruptly mid-run (LOOM_FAULT=1:3:exit)
#  3. a rank is killed with SIGKILL from outside while the others are in a collective
#  4. a rank stalls (SIGSTOP): the others' watchdogs (train.timeout_s) end the job
#  5. a rank gets SIGTERM (preemption): every rank stops after the same step, a checkpoint is
#     saved, the job exits 130, and a rerun resumes from it
. "$(dirname "$0")/../lib/lib.sh"
make_data
LIMIT=30 # seconds; a hang would run until the 300 s timeout

start_job() { # start_job NAME [env...] [-- loom args]: 2 ranks, many steps, in the background
  local name=$1
  shift
  local envs=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; args=("$@"); }
  mkdir -p "$WORK/$name"
  env "${envs[@]}" timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set train.steps=100000 \
    --set lr_schedule.warmup_steps=0 --set train.eval_interval=0 "${args[@]}" \
    >"$WORK/$name/out.log" 2>&1 &
  JOB=$!
  track_job "$JOB" # killed with its tree on every exit path (lib.sh)
}

wait_job() { # wait_job NAME: assert it ends non-zero within LIMIT seconds
  local name=$1 t0=$SECONDS rc
  while kill -0 "$JOB" 2>/dev/null && [ $((SECONDS - t0)) -lt $LIMIT ]; do sleep 0.2; done
  if kill -0 "$JOB" 2>/dev/null; then
    kill_tree "$JOB" # timeout, mpirun and every rank: killing timeout alone orphaned mpirun
    cat "$WORK/$name/out.log"
    die "$name: the job still runs ${LIMIT}s after the failure (hang)"
  fi
  wait "$JOB"
  rc=$?
  [ "$rc" -ne 0 ] || die "$name: the job exited 0 after a rank failed"
  echo "$name: job exited $rc after $((SECONDS - t0))s"
}

start_job error LOOM_FAULT=1:3:error
wait_job error
grep -q "loom\[1\]: error: fault injected" "$WORK/error/out.log" ||
  { cat "$WORK/error/out.log"; die "error: no message from the failing rank"; }

start_job exit LOOM_FAULT=1:3:exit
wait_job exit
grep -qi "exit" "$WORK/exit/out.log" || { cat "$WORK/exit/out.log"; die "exit: no message"; }

rank1_pid() { # rank1_pid NAME: wait until training runs, print world rank 1's pid
  # Only this job's processes are candidates: the descendants of its own mpirun ($JOB's tree),
  # and among them the loom process whose command line names this test's private $WORK.
  # (Matching every "$LOOM train" on the machine picked another job's rank 1 and killed it.)
  local name=$1 p
  for _ in $(seq 100); do grep -q "^step" "$WORK/$name/out.log" && break; sleep 0.2; done
  for p in $(descendants "$JOB"); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$LOOM train $LOOM_SRC/configs/tiny.json --set data.train=$WORK/" || continue
    grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" 2>/dev/null && { echo "$p"; return; }
  done
  cat "$WORK/$name/out.log" >&2
  die "$name: could not find rank 1"
}

# A decoy that looks like another job's rank 1 to a machine-wide search (its command line
# starts with "$LOOM train", its environment says world rank 1): it must survive this test.
OMPI_COMM_WORLD_RANK=1 bash -c "exec -a '$LOOM train decoy' sleep 300" &
DECOY=$!
track_job "$DECOY"

start_job kill
victim=$(rank1_pid kill) || die "kill: could not find rank 1"
kill -9 "$victim"
wait_job kill
grep -qiE "signal 9|killed" "$WORK/kill/out.log" || { cat "$WORK/kill/out.log"; die "kill: no message"; }
start_job stall -- --set train.timeout_s=3
victim=$(rank1_pid stall) || die "stall: could not find rank 1"
kill -STOP "$victim"
LIMIT=20 wait_job stall
kill -9 "$victim" 2>/dev/null || true
grep -q "error: no progress for" "$WORK/stall/out.log" ||
  { cat "$WORK/stall/out.log"; die "stall: no watchdog message"; }

ck="{\"plugin\":\"checkpoint\",\"dir\":\"$WORK/term/ckpt\",\"every\":0}"
start_job term -- --set "checkpoint=$ck"
victim=$(rank1_pid term) || die "term: could not find rank 1"
kill -TERM "$victim"
t0=$SECONDS
while kill -0 "$JOB" 2>/dev/null && [ $((SECONDS - t0)) -lt $LIMIT ]; do sleep 0.2; done
kill -0 "$JOB" 2>/dev/null &&
  { kill_tree "$JOB"; cat "$WORK/term/out.log"; die "term: the job still runs ${LIMIT}s after SIGTERM"; }
wait "$JOB"
rc=$?
[ "$rc" -eq 130 ] || { cat "$WORK/term/out.log"; die "term: expected exit 130, got $rc"; }
grep -q "stopped by a signal after step" "$WORK/term/out.log" || die "term: no message"
saved=$(cat "$WORK/term/ckpt/latest")
echo "term: job exited 130 after a SIGTERM, checkpoint $saved"
timeout 120 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" --set train.steps=$((10#${saved#step-} + 2)) \
  --set lr_schedule.warmup_steps=0 --set train.eval_interval=0 --set "checkpoint=$ck" \
  >"$WORK/term/resume.log" 2>&1 || { cat "$WORK/term/resume.log"; die "term: resume failed"; }
grep -q "resumed at step $((10#${saved#step-}))" "$WORK/term/resume.log" ||
  { cat "$WORK/term/resume.log"; die "term: did not resume from $saved"; }
kill -0 "$DECOY" 2>/dev/null || die "the decoy (another job's rank 1 look-alike) was killed"
echo "rank failures: every job came down with a message; the look-alike of another job's rank 1 survived"
