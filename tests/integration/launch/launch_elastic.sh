#!/bin/bash
# ctest: labels=integration,faults,multinode,matrix
# loom launch --min-nodes: an elastic restart on the nodes that remain, on one machine. The
# "nodes" nodeA and nodeB are this machine behind a fake remote shell (lib/fake_rsh.sh, mpirun's
# plm_rsh_agent and the probe's), and a node is gone when its marker file exists: the fault
# (LOOM_FAULT=2:7:kill with LOOM_FAULT_ONCE=$WORK/down/nodeB) kills rank 2, on nodeB, and makes
# the marker in one go, so from then on nodeB does not answer.
#   1. ZeRO-3 on 2 nodes x 2 ranks, checkpoints every 5 steps; rank 2 dies at step 7; the probe
#      finds nodeB silent (2 s timeout), the job restarts on nodeA: 2 ranks, grad_accum_steps
#      1 -> 2, the global batch of 16 sequences kept, the step-5 checkpoint (4 ZeRO-3 partitions)
#      resharded onto 2; steps 6-12 are bitwise the step-5 checkpoint resumed by hand on 2 ranks
#      with grad_accum_steps 2; the restart record says world 4 -> 2, accumulation 1 -> 2;
#   1b. nodeB's daemon and ranks SIGKILLed from outside mid-run: "node nodeB was lost", the job
#      back on nodeA within 30 s, bitwise the checkpoint it resumed from resumed by hand there;
#   2. refusals after the failure, each naming the numbers, exit status the job's (137):
#      fewer nodes than --min-nodes; 3 ranks left of a global batch of 16 (not a multiple of
#      micro 4 x dp 3); tp 2 on 3 ranks left;
#   3. before the start: a node that does not answer is refused by name, nothing runs.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/launch_lib.sh"
make_data
RSH=$TESTLIB/fake_rsh.sh
# Both "nodes" are this machine with one hostname: shared memory's segment files
# (vader_segment.HOST.JOB.LOCAL_RANK) of nodeA's and nodeB's local rank 0 would be one file, and
# the ranks crash in mca_btl_vader at MPI_Comm_dup. TCP only, on loopback, as between real nodes.
export OMPI_MCA_btl=self,tcp
export FAKE_RSH_DOWN=$WORK/down
mkdir -p "$FAKE_RSH_DOWN"
hosts() { # hosts FILE SLOTS_A SLOTS_B
  printf 'nodeA slots=%d\nnodeB slots=%d\n' "$2" "$3" >"$1"
}
hosts "$WORK/hosts22" 2 2
hosts "$WORK/hosts31" 3 1
Z3='parallel=[{"plugin":"zero3"}]'

# 1. the shrink
LOOM_FAULT=2:7:kill LOOM_FAULT_ONCE=$FAKE_RSH_DOWN/nodeB supervise shrink --hostfile "$WORK/hosts22" \
  --rsh "$RSH" --min-nodes 1 --probe-timeout 2 --backoff 0.5 -- --set "$Z3"
log=$WORK/shrink/out.log
grep "loom launch:" "$log"
[ "$RC" -eq 0 ] || { cat "$log"; die "the elastic restart failed ($RC)"; }
grep -q "attempt 1 failed .*rank 2 (node nodeB) was killed by signal 9" "$log" || die "no failure line"
grep -q "node nodeB (.*hosts22 line 2) does not answer '.*fake_rsh.sh nodeB true': no answer within 2 s" "$log" ||
  die "no line naming the silent node"
grep -q "elastic restart 1: 1 node(s), 2 ranks (were 4): grad_accum_steps 1 -> 2 keeps the global batch of 16 sequences" "$log" ||
  die "no elastic plan line"
grep -q "world 2 (dp 2) | global batch 16 x 64 tokens (micro 4 x accum 2 x dp 2)" "$log" ||
  die "the restarted run is not 2 ranks with accumulation 2"
grep -q "loom: resumed at step 5" "$log" || die "not resumed at step 5"
grep -q '"restart":{"attempt":1,"resumed_from_step":5,"world_size_before":4,"world_size":2,"grad_accum_steps_before":1,"grad_accum_steps":2' \
  "$WORK/shrink/metrics.jsonl" || { grep restart "$WORK/shrink/metrics.jsonl"; die "wrong restart record"; }
no_rank_left
hand_resume byhand shrink 5 2 --set "$Z3" --set train.grad_accum_steps=2
echo "== elastic restart on 2 ranks vs the step-5 checkpoint resumed by hand on 2 ranks, accum 2"
compare shrink byhand --bitwise --steps 6:12

# 1b. a node killed from outside: nodeB's daemon and its ranks SIGKILLed mid-run (what the
# multi-node test bed's node kill does to a namespace). mpirun loses the daemon, the job comes
# back on nodeA within 30 s of the kill, and continues bitwise like a hand resume there.
rm -f "$FAKE_RSH_DOWN/nodeB"
mkdir -p "$WORK/nodekill"
STEPS=200 job_sets nodekill
timeout 300 "$LOOM" launch --hostfile "$WORK/hosts22" --rsh "$RSH" --min-nodes 1 \
  --probe-timeout 5 --backoff 1 "$LOOM_SRC/configs/tiny.json" "${JOB_SETS[@]}" \
  >"$WORK/nodekill/out.log" 2>&1 &
sup=$!
track_job "$sup"
for _ in $(seq 600); do [ -f "$WORK/nodekill/ckpt/latest" ] && break; sleep 0.1; done
[ -f "$WORK/nodekill/ckpt/latest" ] || { cat "$WORK/nodekill/out.log"; die "nodekill: no checkpoint"; }
# nodeB's daemon: the orted of this supervisor's job with vpid 2 (the HNP is 0, nodeA's 1)
orted=""
for p in $(descendants "$sup"); do
  tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -q "^orted .*ess_base_vpid 2 " && orted=$p
done
[ -n "$orted" ] || die "nodekill: nodeB's orted not found"
touch "$FAKE_RSH_DOWN/nodeB"
kill -9 $(descendants "$orted") "$orted"
t_kill=$SECONDS
for _ in $(seq 400); do grep -q "loom: resumed at step" "$WORK/nodekill/out.log" && break; sleep 0.1; done
t_back=$((SECONDS - t_kill))
wait "$sup" || { cat "$WORK/nodekill/out.log"; die "nodekill: the job did not finish"; }
grep "loom launch:" "$WORK/nodekill/out.log"
grep -q "attempt 1 failed .*: node nodeB was lost" "$WORK/nodekill/out.log" || die "nodekill: no lost-node line"
resumed=$(sed -n 's/^loom: resumed at step \([0-9]*\)$/\1/p' "$WORK/nodekill/out.log")
[ -n "$resumed" ] || die "nodekill: did not resume from a checkpoint"
[ "$t_back" -le 30 ] || die "nodekill: back after $t_back s, more than 30 s"
echo "nodekill: the job resumed at step $resumed on nodeA ${t_back} s after the kill"
no_rank_left
STEPS=200 hand_resume nodekill_byhand nodekill "$resumed" 2 --set train.grad_accum_steps=2
compare nodekill nodekill_byhand --bitwise --steps "$((resumed + 1)):200"

# 2. the restart refused
refused() { # refused NAME NEEDLE [supervise's arguments]
  local name=$1 needle=$2
  shift 2
  rm -f "$FAKE_RSH_DOWN/nodeB"
  # rank 3: nodeB's only rank under hosts31
  LOOM_FAULT=3:3:kill LOOM_FAULT_ONCE=$FAKE_RSH_DOWN/nodeB supervise "$name" "$@"
  [ "$RC" -eq 137 ] || { cat "$WORK/$name/out.log"; die "$name: exit $RC, expected the job's 137"; }
  grep -qF "$needle" "$WORK/$name/out.log" || { cat "$WORK/$name/out.log"; die "$name: no '$needle'"; }
  # no attempt after the refusal (an earlier one may have failed for another reason: a restart
  # before the fault fired is the supervisor doing its job)
  [ "$(grep -c "attempt [0-9]* of at most" "$WORK/$name/out.log")" -eq \
    "$(grep -c "attempt [0-9]* failed after" "$WORK/$name/out.log")" ] ||
    { cat "$WORK/$name/out.log"; die "$name: restarted all the same"; }
  echo "$name refused: $(grep -F "$needle" "$WORK/$name/out.log")"
}
refused min_nodes "only 1 of 2 nodes answer, fewer than --min-nodes 2: not restarting" \
  --hostfile "$WORK/hosts31" --rsh "$RSH" --min-nodes 2 --probe-timeout 2 --backoff 0
refused batch "3 ranks remain (dp 3 = 3 / (tp 1 x pp 1)), but the global batch of 16 sequences is not a multiple of micro_batch_size 4 x dp 3 = 12" \
  --hostfile "$WORK/hosts31" --rsh "$RSH" --min-nodes 1 --probe-timeout 2 --backoff 0
refused tp "3 ranks remain, but tensor-parallel 2 x pipeline 1 = 2 does not divide 3" \
  --hostfile "$WORK/hosts31" --rsh "$RSH" --min-nodes 1 --probe-timeout 2 --backoff 0 -- \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2},{"plugin":"ddp"}]'

# 3. a silent node before the start
touch "$FAKE_RSH_DOWN/nodeB"
supervise silent --hostfile "$WORK/hosts22" --rsh "$RSH" --min-nodes 1 --probe-timeout 2
[ "$RC" -eq 1 ] || { cat "$WORK/silent/out.log"; die "silent: exit $RC, expected 1"; }
grep -q "node nodeB (.*hosts22 line 2) does not answer" "$WORK/silent/out.log" &&
  grep -q "1 of the 2 nodes of .*hosts22 do not answer (above): not starting" "$WORK/silent/out.log" ||
  { cat "$WORK/silent/out.log"; die "silent: no refusal naming nodeB"; }
[ ! -e "$WORK/silent/metrics.jsonl" ] || die "silent: the job ran"
echo "launch elastic: 4 ranks -> 2 with accumulation doubled, bitwise the hand resume; refusals"
