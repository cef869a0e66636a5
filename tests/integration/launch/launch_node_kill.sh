#!/bin/bash
# ctest: labels=integration,faults,multinode,matrix timeout=400
# ctest: name=integration.launch_node_cut args=--cut labels=integration,faults,multinode,matrix timeout=400
# A node killed mid-run on tools/nodes.sh's test bed (2 nodes x 2 ranks, each node its own
# network namespace; skipped where beds cannot be built): loom launch runs in node 1 with the
# bed's hostfile and rsh agent, --min-nodes 1; `nodes.sh kill ID 2` SIGKILLs every process of
# node 2 (its daemon and ranks; the node no longer answers). The supervisor names the lost
# node, probes, restarts on node 1 alone (2 ranks, grad_accum_steps 1 -> 2, the global batch
# kept) and the job is back (its "resumed at step S" line) within 30 s of the kill; steps S+1..
# are bitwise the step-S checkpoint resumed by hand on 2 ranks with accumulation 2; no process
# is left in either node.
# With --cut (integration.launch_node_cut): the node's link is cut first (a power cut as the
# others see it: `nodes.sh kill ID 2 --cut`). Nothing tells the rest of the job: the ranks on
# node 1 wait in a collective until their watchdog (train.timeout_s = 8 here) ends them, and
# mpirun, which ends a job through every node's daemon, then waits on the silent node's TCP
# timeouts; loom launch ends mpirun itself 15 s after the first failure it saw (job.c,
# FAILURE_GRACE_S): back within 60 s of the cut, the rest as above.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/launch_lib.sh"
. "$TESTLIB/bed.sh"
bed_up 2
make_data
ID=$BED_ID
HOSTS=$("$NODES" hostfile "$ID")
CUT=${1:-} # --cut, or nothing
WHAT=kill LIMIT=30 EXTRA=()
[ "$CUT" = --cut ] && WHAT=cut LIMIT=60 EXTRA=(--set train.timeout_s=8)
NET=169.254.$ID.0/24 # the bed's addresses (nodes.sh: node K is 169.254.ID.K)
STEPS=300
mkdir -p "$WORK/job"
job_sets job
# inside node 1, as `nodes.sh mpirun` runs mpirun: the bed's interface only, ranks by slot
"$NODES" exec "$ID" 1 env OMPI_MCA_btl_tcp_if_include="$NET" OMPI_MCA_oob_tcp_if_include="$NET" \
  OMPI_MCA_plm_rsh_no_tree_spawn=1 OMPI_MCA_rmaps_base_mapping_policy=slot \
  timeout 300 "$LOOM" launch --hostfile "$HOSTS" --rsh "$NODES rsh" --min-nodes 1 \
  --probe-timeout 5 --backoff 1 "$LOOM_SRC/configs/tiny.json" "${JOB_SETS[@]}" "${EXTRA[@]}" \
  >"$WORK/job/out.log" 2>&1 &
sup=$!
track_job "$sup"
for _ in $(seq 900); do [ -f "$WORK/job/ckpt/latest" ] && break; sleep 0.1; done
[ -f "$WORK/job/ckpt/latest" ] || { cat "$WORK/job/out.log"; die "no checkpoint before the kill"; }
grep -q "world 4 (dp 4)" "$WORK/job/out.log" || { cat "$WORK/job/out.log"; die "not 4 ranks"; }
"$NODES" kill "$ID" 2 $CUT
t_kill=$(date +%s.%N)
for _ in $(seq $((LIMIT * 30))); do grep -q "^loom: resumed at step" "$WORK/job/out.log" && break; sleep 0.05; done
t_back=$(date +%s.%N)
wait "$sup" || { cat "$WORK/job/out.log"; die "the supervised job did not finish"; }
grep "loom launch:" "$WORK/job/out.log"
if [ "$CUT" = --cut ]; then # the watchdog's failure, and the stuck mpirun ended
  grep -q "attempt 1 failed" "$WORK/job/out.log" || { cat "$WORK/job/out.log"; die "no failure said"; }
  grep -q "mpirun has not ended the job" "$WORK/job/out.log" ||
    { cat "$WORK/job/out.log"; die "the supervisor did not end the stuck mpirun"; }
else
  grep -q "attempt 1 failed .*node loom$ID-n2" "$WORK/job/out.log" ||
    { cat "$WORK/job/out.log"; die "the failure does not name node loom$ID-n2"; }
fi
grep -q "node loom$ID-n2 (.* line 2) does not answer" "$WORK/job/out.log" || die "no probe line"
grep -q "world 2 (dp 2) | global batch 16 x 64 tokens (micro 4 x accum 2 x dp 2)" \
  "$WORK/job/out.log" || die "the restart is not 2 ranks with accumulation 2"
resumed=$(sed -n 's/^loom: resumed at step \([0-9]*\)$/\1/p' "$WORK/job/out.log")
[ -n "$resumed" ] || die "the restart did not resume from a checkpoint"
/usr/bin/python3 -c "import sys; t = $t_back - $t_kill; print(f'back on node 1 {t:.1f} s after the $WHAT, resumed at step $resumed'); sys.exit(t > $LIMIT)" ||
  die "the job was not back within $LIMIT s of the $WHAT"
no_rank_left
for k in 1 2; do # node 1 holds only its holder, node 2 nothing
  left=$(ip netns pids "loom${ID}n$k" | grep -vx "$(cat "/run/loom-nodes/$ID/n$k.pid" 2>/dev/null)")
  [ -z "$left" ] || { ps -o pid,args -p "$(echo $left | tr ' ' ,)"; die "node $k: processes left"; }
done
hand_resume byhand job "$resumed" 2 --set train.grad_accum_steps=2
echo "== node 2 ${WHAT}: the restart on node 1 vs the step-$resumed checkpoint resumed by hand"
compare job byhand --bitwise --steps "$((resumed + 1)):$STEPS"
echo "launch node $WHAT: back on the remaining node within $LIMIT s, bitwise the hand resume"
