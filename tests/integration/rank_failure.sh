#!/bin/bash
# A rank that fails must bring the whole job down, non-zero, with a message, within seconds:
#  1. a rank returns an error mid-run (LOOM_FAULT=1:3:error)
#  2. a rank dies abruptly mid-run (LOOM_FAULT=1:3:exit)
#  3. a rank is killed with SIGKILL from outside while the others are in a collective
. "$(dirname "$0")/lib.sh"
make_data
LIMIT=30 # seconds; a hang would run until the 300 s timeout

start_job() { # start_job NAME [env...]: 2 ranks, many steps, in the background
  local name=$1
  shift
  mkdir -p "$WORK/$name"
  env "$@" timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set train.steps=100000 \
    --set lr_schedule.warmup_steps=0 --set train.eval_interval=0 \
    >"$WORK/$name/out.log" 2>&1 &
  JOB=$!
}

wait_job() { # wait_job NAME: assert it ends non-zero within LIMIT seconds
  local name=$1 t0=$SECONDS rc
  while kill -0 "$JOB" 2>/dev/null && [ $((SECONDS - t0)) -lt $LIMIT ]; do sleep 0.2; done
  if kill -0 "$JOB" 2>/dev/null; then
    kill -9 "$JOB"
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

start_job kill
# wait until training runs, then SIGKILL world rank 1
for _ in $(seq 100); do grep -q "^step" "$WORK/kill/out.log" && break; sleep 0.2; done
victim=""
for p in $(pgrep -f "$LOOM train"); do
  grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" 2>/dev/null && victim=$p
done
[ -n "$victim" ] || { cat "$WORK/kill/out.log"; die "kill: could not find rank 1"; }
kill -9 "$victim"
wait_job kill
grep -qiE "signal 9|killed" "$WORK/kill/out.log" || { cat "$WORK/kill/out.log"; die "kill: no message"; }
echo "rank failures: every job came down with a message"
