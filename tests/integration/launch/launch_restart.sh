#!/bin/bash
# ctest: labels=integration,faults,multinode
# loom launch restarts a job whose rank is killed, from the newest complete checkpoint:
#   4 ranks, checkpoints every 5 steps; rank 1 SIGKILLs itself at step 7, once (LOOM_FAULT=1:7:kill,
#   LOOM_FAULT_ONCE); the supervisor names rank 1 and signal 9, restarts after its back-off, and
#   the job resumes at step 5 and finishes (exit 0, no rank left behind);
#   the continuation (steps 6-12: loss, grad norm, final parameters) is bitwise the step-5
#   checkpoint resumed by hand on 4 ranks;
#   the restart is a record in metrics.jsonl (attempt 1, resumed_from_step 5, world 4 -> 4, the
#   reason) and in the TensorBoard files (its scalars and text; the failed run's steps 6-7
#   dropped by the restarted process's SessionLog START, read by tb_read.py as TensorBoard does).
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/launch_lib.sh"
make_data
/usr/bin/python3 -c "import google.protobuf, crc32c" 2>/dev/null && HAVE_TB=1 || HAVE_TB=0

LOOM_FAULT=1:7:kill LOOM_FAULT_ONCE=$WORK/fault.fired supervise job --np 4 --backoff 0.5
log=$WORK/job/out.log
[ "$RC" -eq 0 ] || { cat "$log"; die "loom launch exited $RC, expected 0 after one restart"; }
[ -f "$WORK/fault.fired" ] || die "the fault never fired"
grep -q "loom launch: attempt 1 failed after .* (exit status 137): rank 1 (node [^)]*) was killed by signal 9 (Killed)" "$log" ||
  { cat "$log"; die "no line naming rank 1 and signal 9"; }
grep -q "loom launch: restart 1 of 3 in 0.5 s" "$log" || { cat "$log"; die "no back-off line"; }
grep -q "loom: resumed at step 5" "$log" || { cat "$log"; die "the restart did not resume at step 5"; }
grep -q "loom launch: the job finished after 1 restart(s)" "$log" || { cat "$log"; die "no end line"; }
no_rank_left
grep "loom launch:" "$log"

hand_resume byhand job 5 4
echo "== supervised restart vs the step-5 checkpoint resumed by hand, steps 6-12"
compare job byhand --bitwise --steps 6:12

rec=$(grep '"restart"' "$WORK/job/metrics.jsonl") || die "no restart record in metrics.jsonl"
echo "$rec"
/usr/bin/python3 - "$rec" <<'EOF' || die "the restart record is wrong"
import json, sys
r = json.loads(sys.argv[1])
x = r["restart"]
want = {"attempt": 1, "resumed_from_step": 5, "world_size_before": 4, "world_size": 4,
        "grad_accum_steps_before": 1, "grad_accum_steps": 1}
assert r["step"] == 5, r
assert {k: x[k] for k in want} == want, x
assert "rank 1" in x["reason"] and "signal 9" in x["reason"], x["reason"]
EOF
[ "$(grep -c '"loss"' "$WORK/job/metrics.jsonl")" -eq 12 ] || die "expected each of the 12 steps once"
if [ "$HAVE_TB" -eq 1 ]; then
  /usr/bin/python3 "$TESTLIB/tb_read.py" "$WORK/job/tb" --jsonl "$WORK/job/metrics.jsonl" \
    >"$WORK/tb.txt" || { cat "$WORK/tb.txt"; die "the TensorBoard files disagree with the JSONL"; }
  cat "$WORK/tb.txt"
  grep -q "2 file(s)" "$WORK/tb.txt" || die "expected the two attempts' event files"
  grep -q "scalars of steps a restart replaced purged" "$WORK/tb.txt" ||
    die "the failed attempt's steps after the checkpoint were not purged (SessionLog START)"
  grep -q "restart text: 'restart 1: rank 1 .*signal 9" "$WORK/tb.txt" || die "no restart text"
else
  echo "(TensorBoard check skipped: python3-protobuf or python3-crc32c not installed)"
fi
echo "launch restart: rank 1 killed at step 7, restarted from step 5, bitwise the hand resume"
