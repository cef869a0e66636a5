#!/bin/bash
# ctest: labels=integration,asan-full
# Hybrid sharding's memory and traffic, measured = estimated (issue 22): zero2 and zero3 with
# "shard_size": 2 on 4 ranks (dp = 2 x 2), 3 steps of the tiny config. Rank 0's peak
# params + grads + optim (mem_peak_bytes) must equal `loom estimate --json` for the same config
# and the ZeRO paper's formula with N = the shard group's 2 ranks (not dp's 4: check_memory_
# hybrid.py computes it from the GPT-2 parameter count, not from loom) and plain zero2/zero3 on
# 2 ranks, each category of every rank's peak (mem_peak_bytes_max) must stay within the
# estimate, and the bytes sent in step 2 must equal the estimate's, which add the host's sum of
# the partition's gradient over the 2 replicas, 2(R-1)/R x 4 ceil(Psi/K), to the shard
# group's; the per-communicator split (comm_axes) must add up. ddp over the hierarchical
# all-reduce likewise: measured bytes = estimate = dp_node + dp_cross.
. "$(dirname "$0")/../lib/lib.sh"
make_data
RUNS=()
# mrun NAME RANKS PARALLEL [--set ...]: 3 steps, then the estimate for the same overrides
mrun() {
  local name=$1 n=$2 par=$3
  shift 3
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
              --set checkpoint=null --set "parallel=$par" "$@")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name:$n")
}
mrun hybrid_zero3 4 '[{"plugin":"zero3","shard_size":2}]'
mrun hybrid_zero2 4 '[{"plugin":"zero2","shard_size":2}]'
mrun zero3_n2 2 '[{"plugin":"zero3"}]'
mrun zero2_n2 2 '[{"plugin":"zero2"}]'
mrun ddp_hier 4 '[{"plugin":"ddp"}]' --set 'comm={"plugin":"mpi","hierarchical":true,"node_size":2}'
/usr/bin/python3 "$HERE/check_memory_hybrid.py" "$WORK" "$LOOM_SRC/configs/tiny.json" "${RUNS[@]}"
