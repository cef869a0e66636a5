#!/bin/bash
# ctest: labels=integration,multinode processors=1
# `loom estimate --ranks-per-node K` against the formulas worked by hand (no bed, no MPI; runs
# anywhere), configs/tiny.json (Psi = 35712, B 4, T 64, C 32, V 256) on 4 ranks:
#   ddp, K 2: every rank sends 2(N-1)/N * 4Psi = 214272, 2 of its 3 peers off-node: 4 x 142848
#   ddp, K 1: every peer off-node (857088); K 4: one node (0)
#   tp2 x dp2, K 2: tp groups are ranks {0,1}, {2,3} (in the node): tp 0 across, all of dp
#   pp2 x dp2 (1f1b, accumulation 2), K 2: stage 0 on node 1, stage 1 on node 2: the boundary
#     sends A*4BTC = 65536 per rank all cross (262144); the tied wte's 2(2N-1)/2N * 4VC = 49152 per
#     rank, 2 of 3 peers off-node (131072); dp within the node (0)
#   hybrid zero3, shard_size 2, K 2: dp_shard is ZeRO-3 over N = 2 in the node, (N-1)/N *
#     4(3Psi - wpe - head) = 1/2 * 4 * 105024 = 210048 per rank, none across; dp_replica the sum
#     of the partition over R = 2, 2(R-1)/R * 4Psi/2 = 71424 per rank, its one peer on the
#     other node: 4 x 71424 = 285696 across (plain zero3: 4 x 315072 x 2/3 = 840192; 0.340)
#   shard_size "node": K 2 the same (K = ranks per node / tp = 2); K 4 one node, plain zero3's
#     single dp row (0 across); without --ranks-per-node refused, naming it; shard_size 2 on
#     6 ranks of nodes of 3 refused (a shard group would straddle the nodes), naming 2 and 3
#   ddp over the hierarchical all-reduce, K 2, nodes the launcher's (no node_size): dp_node
#     2(k-1)/k * S = 142848 per rank in the node (0 across), dp_cross 2(M-1)/M * S/k = 71424
#     per rank to the other node: 285696, 1/k = 1/2 of flat ddp's 571392; node_size 2 but
#     K 1 (every rank its own node): the in-node groups' peers are off-node too, all 857088
#     bytes cross, as flat ddp's on K 1 (shares from the groups, not assumed)
#   K 3 on 4 ranks: refused, naming both numbers.
. "$(dirname "$0")/../lib/lib.sh"
est() { "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 4 --json "$@"; }
check() { # check 'PYTHON EXPR over inter_node (j)' ESTIMATE ARGS...
  local expr=$1
  shift
  est "$@" >"$WORK/e.json" || die "loom estimate $* failed"
  /usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[2]))["inter_node"]
ok = eval("(" + sys.argv[1] + ")")
print(("ok   " if ok else "BAD  ") + " ".join(sys.argv[1].split()) + ": " + json.dumps(j))
sys.exit(0 if ok else 1)' "$expr" "$WORK/e.json" || die "inter-node bytes: $expr does not hold"
}
DDP='parallel=[{"plugin":"ddp"}]'
check 'j["bytes_per_step"] == 4 * 142848 and j["max_node_tx_bytes_per_step"] == 2 * 142848' \
  --ranks-per-node 2 --set "$DDP"
check 'j["bytes_per_step"] == 4 * 214272 and j["nodes"] == 4' --ranks-per-node 1 --set "$DDP"
check 'j["bytes_per_step"] == 0 and j["nodes"] == 1' --ranks-per-node 4 --set "$DDP"
check 'j["axes"]["tp"]["inter_node_bytes"] == 0 and j["axes"]["tp"]["bytes"] > 0 and
  j["axes"]["dp"]["inter_node_bytes"] == j["axes"]["dp"]["bytes"] > 0' --ranks-per-node 2 \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2},{"plugin":"ddp"}]'
check 'j["axes"]["pp p2p"]["inter_node_bytes"] == 262144 and
  j["axes"]["tied wte"]["inter_node_bytes"] == 131072 and j["axes"]["dp"]["inter_node_bytes"] == 0
  and j["bytes_per_step"] == 393216' --ranks-per-node 2 --set train.grad_accum_steps=2 \
  --set 'parallel=[{"plugin":"pipeline","size":2,"schedule":"1f1b"},{"plugin":"ddp"}]'
Z3='parallel=[{"plugin":"zero3"}]'
HYB='parallel=[{"plugin":"zero3","shard_size":2}]'
NODE='parallel=[{"plugin":"zero3","shard_size":"node"}]'
check 'j["bytes_per_step"] == 840192 and list(j["axes"]) == ["dp"]' --ranks-per-node 2 --set "$Z3"
HYB_OK='j["axes"]["dp_shard"] == {"bytes": 4 * 210048, "inter_node_bytes": 0} and
  j["axes"]["dp_replica"] == {"bytes": 4 * 71424, "inter_node_bytes": 285696} and
  j["bytes_per_step"] == 285696 and j["max_node_tx_bytes_per_step"] == 142848'
check "$HYB_OK" --ranks-per-node 2 --set "$HYB"
check "$HYB_OK" --ranks-per-node 2 --set "$NODE"
check 'j["bytes_per_step"] == 0 and list(j["axes"]) == ["dp"] and
  j["axes"]["dp"]["bytes"] == 4 * 315072' \
  --ranks-per-node 4 --set "$NODE"
HIER='comm={"plugin":"mpi","hierarchical":true}'
check 'j["axes"]["dp_node"] == {"bytes": 4 * 142848, "inter_node_bytes": 0} and
  j["axes"]["dp_cross"] == {"bytes": 4 * 71424, "inter_node_bytes": 285696} and
  j["bytes_per_step"] == 285696' --ranks-per-node 2 --set "$DDP" --set "$HIER"
check 'j["axes"]["dp_node"]["inter_node_bytes"] == 4 * 142848 and j["bytes_per_step"] == 857088' \
  --ranks-per-node 1 --set "$DDP" --set 'comm={"plugin":"mpi","hierarchical":true,"node_size":2}'
refused() { # refused MESSAGE ESTIMATE ARGS...
  local msg=$1
  shift
  if "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" "$@" >"$WORK/r.log" 2>&1; then
    die "loom estimate $* was accepted"
  fi
  grep -qF "$msg" "$WORK/r.log" || { cat "$WORK/r.log"; die "no message '$msg'"; }
  echo "refused: $(cat "$WORK/r.log")"
}
refused "shard_size: \"node\" is the launcher's ranks per node, known when the job starts: \
estimate with --ranks-per-node K" \
  --world 4 --set "$NODE"
refused "shard_size: 2 neither divides the 3 data-parallel ranks of a node (--ranks-per-node 3" \
  --world 6 --ranks-per-node 3 --set "$HYB" --set train.micro_batch_size=2 \
  --set train.global_batch_size=12
if est --ranks-per-node 3 >"$WORK/rpn.log" 2>&1; then die "--ranks-per-node 3 on 4 ranks accepted"; fi
grep -q "ranks-per-node 3: the world of 4 ranks is not a whole number of nodes of 3 ranks" \
  "$WORK/rpn.log" || { cat "$WORK/rpn.log"; die "no message naming --ranks-per-node 3 and 4 ranks"; }
echo "refused: $(cat "$WORK/rpn.log")"
