#!/bin/bash
# ctest: labels=integration
# Sequence parallel (tensor_parallel's "sequence_parallel", Korthikanti et al. 2022, §4.2.2):
# between the tensor-parallel regions the LayerNorms and the residual stream are sharded along
# T, each tp rank holding (B, T/tp, C); f/g become all-gather / reduce-scatter pairs along T
# and the LayerNorms' weight gradients are summed over tp. tp 2 x sp against the single-rank
# fp32 run on the tiny model: same per-step loss, grad norm and final parameters within
# compare_runs.py's tolerances (docs/tolerances.md); sampling (a growing window of any length)
# gives the single rank's tokens; the traffic is measured against the formula; the refusals
# come before training, naming the values. The slow compositions are
# equivalence_sequence_parallel_matrix.sh.
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
SP='{"plugin":"tensor_parallel","size":2,"sequence_parallel":true}'
run 1 ref $H --set train.micro_batch_size=8 --set 'parallel=[]' --set sample.tokens=24 \
  --set sample.top_k=0
run 2 sp2 $H --set train.micro_batch_size=8 --set "parallel=[$SP]" --set sample.tokens=24 \
  --set sample.top_k=0
echo "== sp2 vs ref"
compare sp2 ref
sed -n '/loom: sample/,$p' "$WORK/ref/out.log" | head -3 >"$WORK/ref/sample.txt"
sed -n '/loom: sample/,$p' "$WORK/sp2/out.log" | head -3 >"$WORK/sp2/sample.txt"
[ -s "$WORK/ref/sample.txt" ] || die "the reference printed no sample"
cmp -s "$WORK/ref/sample.txt" "$WORK/sp2/sample.txt" ||
  { diff "$WORK/ref/sample.txt" "$WORK/sp2/sample.txt"; die "sp2 sampled other tokens"; }
echo "sample: the same tokens as the single rank"
# the traffic: the count of gpt_sp.c's collectives (tiny: L 2, C 32, B 8, T 64)
/usr/bin/python3 "$HERE/check_sp_traffic.py" "$WORK" sp2 2 32 8 64 2 1 0 0 ||
  die "sequence-parallel traffic differs from the count"
# Refusals, before training, with the numbers.
expect_refused 2 'sequence_parallel: train.seq_len (63) must be divisible by the tensor-parallel size (2)' \
  $H --set train.seq_len=63 --set "parallel=[$SP]"
expect_refused 1 'sequence_parallel: needs a tensor-parallel size > 1 (size is 1)' \
  $H --set 'parallel=[{"plugin":"tensor_parallel","size":1,"sequence_parallel":true}]'
expect_refused 4 'sequence_parallel with pipeline stages' $H \
  --set "parallel=[$SP,{\"plugin\":\"pipeline\",\"size\":2,\"schedule\":\"gpipe\"}]"
expect_refused 2 'sequence_parallel: expected true or false' $H \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2,"sequence_parallel":1}]'
echo "equivalence_sequence_parallel: PASS"
