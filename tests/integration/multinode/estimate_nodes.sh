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
if est --ranks-per-node 3 >"$WORK/rpn.log" 2>&1; then die "--ranks-per-node 3 on 4 ranks accepted"; fi
grep -q "ranks-per-node 3: the world of 4 ranks is not a whole number of nodes of 3 ranks" \
  "$WORK/rpn.log" || { cat "$WORK/rpn.log"; die "no message naming --ranks-per-node 3 and 4 ranks"; }
echo "refused: $(cat "$WORK/rpn.log")"
