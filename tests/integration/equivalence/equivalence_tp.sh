#!/bin/bash
# under the sanitizers one run per plugin and path, 6 steps (below)
# ctest: sanitized
# The equivalence matrix for tensor parallel (tensor_parallel.so, Megatron-LM §3): a tiny model
# with 4 heads (n_embd 32, head size 8), the same global batch (8 sequences of 64 tokens) and
# seed on 1 rank without any parallel plugin, and under tp 2, tp 4, dp 2 x tp 2 (ddp), zero1 x
# tp 2, zero2 / zero3 x tp 2, ddp + cpu_offload x tp 2 and tp 2 with gradient accumulation 4,
# must give the same per-step loss and grad norm and the same final parameters (reassembled
# from the tp ranks' shards) within compare_runs.py's tolerances (docs/tolerances.md) over 20
# steps. Then the traffic check (4
# all-reduces of B*T*C floats per block per micro-step, ring 2(n-1)/n) and the refusals.
# Under the sanitizers (LOOM_SANITIZED=1: memory safety, the numerics are the normal build's)
# every plugin and collective path once, 6 steps (evaluation at 3 and 6): tp2 x accum 4, zero1
# x tp2 (zero1 listed first: the hooks in the other order) and zero1 x tp2 x accum 2 (small
# buckets), zero2 / zero3 x tp2 and ddp + cpu_offload x tp2 against the reference, the traffic
# of tp2 x accum 4, and every refusal. Left to the normal build: tp 4 (tp 2's code on another
# size), ddp2 x tp2 (ddp + offload's all-reduce, without the offload) and plain tp2 (the last
# micro-step of tp2 x accum 4).
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
TP2='{"plugin":"tensor_parallel","size":2}'
SAN=0 ST=''
[ "${LOOM_SANITIZED:-0}" = 1 ] && SAN=1 ST='--set train.steps=6 --set train.eval_interval=3'
run 1 ref $H $ST --set train.micro_batch_size=8 --set 'parallel=[]'
names=()
trun() { # trun NRANKS NAME MICRO ACCUM 'PLUGINS JSON ARRAY'
  [ $SAN = 1 ] && case $2 in tp2 | tp4 | ddp2_tp2) return 0 ;; esac
  run "$1" "$2" $H $ST --set train.micro_batch_size="$3" --set train.grad_accum_steps="$4" \
    --set "parallel=$5"
  names+=("$2")
}
trun 2 tp2 8 1 "[$TP2]"
trun 4 tp4 8 1 '[{"plugin":"tensor_parallel","size":4}]'
trun 4 ddp2_tp2 4 1 "[$TP2,{\"plugin\":\"ddp\"}]"
trun 4 zero1_tp2 4 1 "[{\"plugin\":\"zero1\"},$TP2]"
trun 2 tp2_accum4 2 4 "[$TP2]"
trun 4 zero1_tp2_accum2 2 2 "[$TP2,{\"plugin\":\"zero1\",\"reduce_bucket_size\":3000}]"
trun 4 zero2_tp2 4 1 "[$TP2,{\"plugin\":\"zero2\"}]"
trun 4 zero3_tp2 4 1 "[$TP2,{\"plugin\":\"zero3\"}]"
trun 4 ddp_offload_tp2 4 1 "[$TP2,{\"plugin\":\"ddp\"},{\"plugin\":\"cpu_offload\",\"offload_optimizer\":{\"device\":\"cpu\"}}]"
for r in "${names[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done

# Traffic: Megatron's count, 2 all-reduces of (B*T*C) floats per block in forward and 2 in
# backward, each 2(n-1)/n of its bytes with a ring: tp 2 and tp 4, steps without eval/save
# (sanitized: tp2 x accum 4, the same accounting per micro-step).
L=2 C=32 T=64
traffic=(tp2 tp4 tp2_accum4)
[ $SAN = 1 ] && traffic=(tp2_accum4)
/usr/bin/python3 "$HERE/check_tp_traffic.py" "$WORK" $L $C $T "${traffic[@]}" ||
  die "tensor-parallel traffic differs from Megatron's count"

# Refusals, before training, with the numbers.
expect_refused 1 'model.n_head (4) must be divisible by the tensor-parallel size (3)' $H \
  --set 'parallel=[{"plugin":"tensor_parallel","size":3}]'
expect_refused 1 "does not declare LOOM_PAR_CAP_AXIS_TP" --set 'parallel=[{"plugin":"ddp","size":2}]'
expect_refused 1 "but so does 'tensor_parallel'" $H \
  --set "parallel=[$TP2,$TP2]"
expect_refused 1 'needs its size' $H --set 'parallel=[{"plugin":"tensor_parallel"}]'
expect_refused 3 'tensor-parallel size 2 x pipeline size 1 = 2 does not divide the world size 3' \
  $H --set "parallel=[$TP2,{\"plugin\":\"ddp\"}]"
echo "equivalence_tp: all ${#names[@]} runs match the single-rank reference"
