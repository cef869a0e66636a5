#!/bin/bash
# ctest: labels=integration,multinode,asan-full timeout=300 cost=18
# Two nodes x two ranks on tools/nodes.sh's test bed (each node its own network, UTS and mount
# namespace: its own hostname and /dev/shm, so Open MPI cannot use shared memory between them),
# started by mpirun in node 1 through the bed's hostfile and rsh agent. ddp on configs/tiny.json:
#   - the loss curve, grad norms and final parameters equal the one-host 4-rank run's within
#     compare_runs.py's tolerances (docs/tolerances.md);
#   - the bytes that cross between the nodes per step (the veth counters, two runs of 5 and 25
#     steps differenced: start-up and the last evaluation and checkpoint cancel) match
#     `loom estimate --ranks-per-node 2` within the framing tolerance (lib/bed.sh);
#   - hybrid ZeRO-3 with shard_size "node" (K = 2 from the bed's real nodes: shard in the node,
#     replicate across) likewise, against the one-host run of shard_size 2 (the same groups;
#     on one host "node" would be all 4): equal within the tolerances, and its bytes across
#     the nodes the estimate's dp_replica alone (0.34 of plain ZeRO-3's);
#   - a hostfile naming a node the bed does not have is refused at once, naming it, with no
#     process left in either node (bed_bad_host, in the full run, adds killed and cut nodes);
#   - `loom estimate --ranks-per-node 3` on 4 ranks is refused, naming both numbers.
# Skips (77) where namespaces cannot be made. The bed is torn down on every exit path.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/bed.sh"
bed_up 2
make_data
DDP='parallel=[{"plugin":"ddp","bucket_size_mb":0.05}]'
measured=$(bed_step_bytes 5 25 4 bed --set "$DDP") || die "bed runs failed"
est=$(estimate_inter_node 4 --set "$DDP") || die "loom estimate --ranks-per-node failed"
check_step_bytes "ddp 2x2" "$measured" "$est" 4
on_host run 4 host --set train.steps=25 --set train.eval_interval=100000 --set "$DDP"
compare bed_s25 host
HYB='parallel=[{"plugin":"zero3","shard_size":"node"}]'
measured=$(bed_step_bytes 5 25 4 hyb --set "$HYB") || die "hybrid zero3 bed runs failed"
est=$(estimate_inter_node 4 --set "$HYB") || die "loom estimate --ranks-per-node failed (hybrid)"
check_step_bytes "hybrid zero3 (shard_size node) 2x2" "$measured" "$est" 4
on_host run 4 hyb_host --set train.steps=25 --set train.eval_interval=100000 \
  --set 'parallel=[{"plugin":"zero3","shard_size":2}]'
compare hyb_s25 hyb_host
n3=$("$NODES" host "$BED_ID" 3)
printf '%s slots=2\n%s slots=2\n' "$("$NODES" host "$BED_ID" 1)" "$n3" >"$WORK/missing.hosts"
LOOM_NODES_HOSTFILE=$WORK/missing.hosts expect_refused 4 "node '$n3' does not exist" \
  --set train.steps=2
for k in 1 2; do
  [ "$(ip netns pids "loom${BED_ID}n$k")" = "$(cat "/run/loom-nodes/$BED_ID/n$k.pid")" ] ||
    die "node $k: processes left behind after the refusal: $(ip netns pids "loom${BED_ID}n$k")"
done
if "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 4 --ranks-per-node 3 >"$WORK/rpn.log" 2>&1; then
  die "--ranks-per-node 3 on 4 ranks was accepted"
fi
grep -q "ranks-per-node 3: the world of 4 ranks" "$WORK/rpn.log" || { cat "$WORK/rpn.log"; die "no message naming --ranks-per-node 3"; }
echo "refused: $(cat "$WORK/rpn.log")"
echo "ok: ddp and hybrid zero3 across 2 nodes x 2 ranks equal the one-host runs;" \
  "inter-node bytes match the estimate"
