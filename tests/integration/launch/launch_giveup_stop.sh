#!/bin/bash
# ctest: labels=integration,faults,multinode,matrix
# loom launch's limits and its stop:
#   1. restarts run out: rank 1 exits with status 3 at step 3 on every attempt (checkpoints every
#      2 steps, so each attempt resumes at step 2 and fails again); with --max-restarts 2 the
#      supervisor makes 3 attempts with back-offs 0.2 s, 0.4 s, says the job failed the same way
#      3 times in a row and exits with the job's status 3; restart records 1 and 2 both stay in
#      metrics.jsonl (both at step 2);
#   2. a failure before the first checkpoint restarts from scratch (step 0), its record says so;
#   3. SIGTERM to the supervisor mid-run: the ranks get SIGUSR1 through mpirun, save a
#      checkpoint and exit; the supervisor does not restart, exits 143, no rank is left behind,
#      and a rerun resumes from the saved step; SIGINT (Ctrl-C) the same with exit 130.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/launch_lib.sh"
make_data

# 1. the same failure every time
EVERY=2 LOOM_FAULT=1:3:exit supervise giveup --np 2 --max-restarts 2 --backoff 0.2
log=$WORK/giveup/out.log
grep "loom launch:" "$log"
[ "$RC" -eq 3 ] || { cat "$log"; die "expected the job's exit status 3 when restarts run out, got $RC"; }
[ "$(grep -c 'failed after .* rank 1 exited with status 3' "$log")" -eq 3 ] ||
  { cat "$log"; die "expected 3 failed attempts naming rank 1 and status 3"; }
grep -q "restart 1 of 2 in 0.2 s" "$log" && grep -q "restart 2 of 2 in 0.4 s" "$log" ||
  die "expected back-offs of 0.2 s then 0.4 s"
grep -q "giving up: the job failed the same way 3 times in a row (--max-restarts 2), the last two from the checkpoint of step 2, without saving a newer one: rank 1 exited with status 3" "$log" ||
  die "no give-up message"
[ "$(grep -c '"restart"' "$WORK/giveup/metrics.jsonl")" -eq 2 ] || die "expected 2 restart records"
grep -q '"step":2,"restart":{"attempt":2,"resumed_from_step":2' "$WORK/giveup/metrics.jsonl" ||
  die "restart 2 not recorded at step 2"
no_rank_left

# 2. before the first checkpoint: from scratch
LOOM_FAULT=0:3:error LOOM_FAULT_ONCE=$WORK/scratch.fired supervise scratch --np 2 --backoff 0
log=$WORK/scratch/out.log
[ "$RC" -eq 0 ] || { cat "$log"; die "the from-scratch restart failed ($RC)"; }
# (mpirun's MPI_Abort summary is not always printed: "rank 0 failed" names the rank then)
grep -qE "attempt 1 failed after .*: rank 0 (called MPI_Abort \(error code 1\)|failed \(the launcher exited with status 1\)): loom\[0\]: error: fault injected by LOOM_FAULT=0:3:error at step 3" "$log" ||
  { cat "$log"; die "the reason does not quote rank 0's error line"; }
grep -q "loom: restart 1 of this job (.*): started over from step 0" "$log" || die "not from step 0"
grep -q '"step":0,"restart":{"attempt":1,"resumed_from_step":0' "$WORK/scratch/metrics.jsonl" ||
  die "no restart record at step 0"
[ "$(grep -c '"loss"' "$WORK/scratch/metrics.jsonl")" -eq "$STEPS" ] || die "steps logged twice"

# 3. a stop signal to the supervisor: no restart
stop_test() { # stop_test NAME SIGNAL EXPECTED_STATUS
  local name=$1 sig=$2 want=$3 pid t0
  mkdir -p "$WORK/$name"
  job_sets "$name"
  STEPS=100000
  timeout 300 "$LOOM" launch --np 2 --backoff 0 "$LOOM_SRC/configs/tiny.json" "${JOB_SETS[@]}" \
    --set train.steps=100000 >"$WORK/$name/out.log" 2>&1 &
  pid=$!
  track_job "$pid"
  for _ in $(seq 300); do grep -q "^step .*/100000" "$WORK/$name/out.log" && break; sleep 0.1; done
  grep -q "^step" "$WORK/$name/out.log" || { cat "$WORK/$name/out.log"; die "$name: never trained"; }
  kill "-$sig" "$pid"
  t0=$SECONDS
  rc=0
  wait "$pid" || rc=$?
  cat "$WORK/$name/out.log" | grep -E "loom launch:|stopped by a signal"
  [ "$rc" -eq "$want" ] || { cat "$WORK/$name/out.log"; die "$name: exit $rc, expected $want"; }
  [ $((SECONDS - t0)) -lt 30 ] || die "$name: the stop took $((SECONDS - t0)) s"
  grep -q "loom: stopped by a signal after step" "$WORK/$name/out.log" || die "$name: the ranks did not stop cleanly"
  grep -q "not restarting" "$WORK/$name/out.log" || die "$name: no 'not restarting'"
  ! grep -q "attempt 2" "$WORK/$name/out.log" || die "$name: restarted after a stop"
  no_rank_left
  saved=$(cat "$WORK/$name/ckpt/latest") || die "$name: no checkpoint saved at the stop"
  echo "$name: stopped with $rc, checkpoint $saved"
}
stop_test term TERM 143
stop_test int INT 130
# the stop's checkpoint resumes
s=$((10#$(cat "$WORK/term/ckpt/latest" | sed 's/step-//')))
STEPS=$((s + 2)) supervise term --np 2
[ "$RC" -eq 0 ] && grep -q "loom: resumed at step $s" "$WORK/term/out.log" ||
  { cat "$WORK/term/out.log"; die "the rerun did not resume from step $s"; }
echo "launch limits: restarts run out with the job's status; from scratch; stops without restarting"
