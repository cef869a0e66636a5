#!/bin/bash
# ctest: labels=integration,multinode,matrix timeout=2400
# Every strategy and composition of the equivalence matrix across 2 nodes x 2 ranks of
# tools/nodes.sh's test bed (a bed of 4 nodes: 4 ranks fill the first two, tp2 x pp2 x dp2's 8
# ranks all four) (tools/test.sh --full; CI runs multinode.bed_ddp):
#   1. for each layout below, a 25-step run on the bed equals the same run on one host within
#      compare_runs.py's tolerances, and the bytes that cross between the nodes per step (veth
#      counters, 5- and 25-step runs differenced) match `loom estimate --ranks-per-node 2`
#      within the framing tolerance (lib/bed.sh). Placement by block: tp groups are ranks
#      {0,1} and {2,3} (within a node), so tp2 x dp2 sends only dp traffic across; pp2 puts
#      stage 0 on node 1 and stage 1 on node 2 (the boundary sends and the tied embedding's sum
#      cross, dp stays in the node). Hybrid ZeRO-3 (shard_size 2, and "node": K from the
#      bed's real nodes) shards in the node and replicates across, and ddp over mpi.so's
#      hierarchical all-reduce finds the nodes by itself (MPI_COMM_TYPE_SHARED, no node_size:
#      its start-up line must say 2 nodes of 2 ranks, and its bytes are the hierarchical
#      estimate, half the flat one's, which the band tells apart); their one-host runs are
#      the same schedules spelled for one host (shard_size 2, node_size 2: a 5th field);
#   2. the equivalence scripts themselves (ddp, ZeRO covering subset, offload, tp, pp) with their
#      ranks on the bed (LOOM_BED: lib.sh's launcher), each against its 1-rank reference.
# Skips (77) where namespaces cannot be made.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/bed.sh"
bed_up 4
make_data
TP2='{"plugin":"tensor_parallel","size":2}'
PP2='{"plugin":"pipeline","size":2,"schedule":"1f1b"}'
OFF='{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}'
HYB2='[{"plugin":"zero3","shard_size":2}]'
HIER='comm={"plugin":"mpi","hierarchical":true}'
HIER_HOST='comm={"plugin":"mpi","hierarchical":true,"node_size":2}'
# NAME | ranks | parallel | extra --set (one, or empty) | the one-host run's extra --set (empty:
# the same). 4 ranks fill nodes 1-2 (slots=2, by slot), 8 ranks all four nodes
LAYOUTS="ddp|4|[{\"plugin\":\"ddp\"}]|
zero1|4|[{\"plugin\":\"zero1\"}]|
zero2|4|[{\"plugin\":\"zero2\"}]|
zero3|4|[{\"plugin\":\"zero3\"}]|
hybrid_zero3|4|[{\"plugin\":\"zero3\",\"shard_size\":2}]|
hybrid_zero3_node|4|[{\"plugin\":\"zero3\",\"shard_size\":\"node\"}]||parallel=$HYB2
ddp_hier|4|[{\"plugin\":\"ddp\"}]|$HIER|$HIER_HOST
zero2_acc2|4|[{\"plugin\":\"zero2\"}]|train.grad_accum_steps=2
ddp_offload|4|[{\"plugin\":\"ddp\"},$OFF]|
zero3_offload|4|[{\"plugin\":\"zero3\"},$OFF]|
tp2_dp2|4|[$TP2,{\"plugin\":\"ddp\"}]|
zero3_tp2|4|[$TP2,{\"plugin\":\"zero3\"}]|
pp2_dp2|4|[$PP2,{\"plugin\":\"ddp\"}]|train.grad_accum_steps=2
zero1_pp2|4|[{\"plugin\":\"pipeline\",\"size\":2,\"schedule\":\"gpipe\"},{\"plugin\":\"zero1\"}]|train.grad_accum_steps=2
tp2_pp2|4|[$TP2,$PP2]|train.grad_accum_steps=2
tp2_pp2_dp2|8|[$TP2,$PP2,{\"plugin\":\"ddp\"}]|train.grad_accum_steps=2"
summary=()
while IFS='|' read -r -u 3 name np par extra host_extra; do  # fd 3: mpirun reads stdin
  sets=(--set "parallel=$par")
  [ -z "$extra" ] || sets+=(--set "$extra")
  # LOOM_BED_LAYOUTS=NAME,... (by hand): those layouts only, and no equivalence script
  [ -z "${LOOM_BED_LAYOUTS:-}" ] || [[ ",$LOOM_BED_LAYOUTS," == *",$name,"* ]] || continue
  host_sets=("${sets[@]}")
  [ -z "$host_extra" ] || host_sets+=(--set "$host_extra")
  measured=$(bed_step_bytes 5 25 "$np" "$name" "${sets[@]}") || die "$name: bed runs failed"
  est=$(estimate_inter_node "$np" "${sets[@]}") || die "$name: loom estimate failed"
  line=$(check_step_bytes "$name" "$measured" "$est" "$np") ||
    { echo "$line"; die "$name: bytes"; }
  echo "$line"
  summary+=("$line")
  on_host run "$np" "${name}_host" --set train.steps=25 --set train.eval_interval=100000 \
    "${host_sets[@]}"
  if [ "$name" = ddp_hier ]; then # the nodes found by mpi.so itself, not by a node_size
    log=$WORK/${name}_s25/out.log
    grep -q "hierarchical all-reduce: 2 nodes of 2 ranks (MPI_COMM_TYPE_SHARED)" "$log" ||
      { cat "$log"; die "$name: no node split"; }
    grep -m1 "hierarchical all-reduce:" "$log"
  fi
  compare "${name}_s25" "${name}_host"
done 3<<<"$LAYOUTS"
for s in equivalence_ddp equivalence_zero equivalence_offload equivalence_tp equivalence_pp; do
  [ -z "${LOOM_BED_LAYOUTS:-}" ] || break
  echo "== $s across the bed"
  # equivalence_offload whole, as this ran it before it had a covering subset (its CI one);
  # equivalence_zero: its covering subset, as before
  args=()
  [ $s = equivalence_offload ] && args=(--matrix)
  LOOM_BED=$BED_ID bash "$LOOM_SRC/tests/integration/equivalence/$s.sh" "${args[@]}" \
    >"$WORK/$s.log" 2>&1 ||
    { tail -30 "$WORK/$s.log"; die "$s across the bed failed"; }
  tail -1 "$WORK/$s.log"
done
printf '%s\n' "${summary[@]}"
echo "ok: every layout across the nodes equals its one-host run; bytes match the estimate"
