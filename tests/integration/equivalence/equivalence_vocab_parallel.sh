#!/bin/bash
# ctest: labels=integration
# Vocabulary-parallel embedding and cross-entropy (tensor_parallel's "vocab_parallel",
# Megatron-LM, Shoeybi et al. 2019, §3): wte (tied with the head) split over the padded
# vocabulary, each rank's (B*T, Vp/tp) logit slice, the loss from the all-reduced row max, sum
# of exponentials and target logit. tp 2 x vocab_parallel against the single-rank fp32 run on
# the tiny model (vocab 256, and 256 padded to 384: rank 1's slice holds the 128 -inf columns, which never enter the softmax),
# same per-step loss, grad norm and final parameters (wte reassembled from the slices) within
# compare_runs.py's tolerances (docs/tolerances.md), then the refusals, before training, naming
# the values. The slow matrix (dp, ZeRO, resume) is equivalence_vocab_parallel_matrix.sh.
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
VP='{"plugin":"tensor_parallel","size":2,"vocab_parallel":true}'
run 1 ref $H --set train.micro_batch_size=8 --set 'parallel=[]'
run 2 vp2 $H --set train.micro_batch_size=8 --set "parallel=[$VP]"
echo "== vp2 vs ref"
compare vp2 ref
# a padded vocabulary (256 -> 384): rank 1 holds columns 192..383, 128 of them padding
run 1 ref_pad $H --set train.micro_batch_size=8 --set model.vocab_size=256 \
  --set model.padded_vocab_size=384 --set 'parallel=[]'
run 2 vp2_pad $H --set train.micro_batch_size=8 --set model.vocab_size=256 \
  --set model.padded_vocab_size=384 --set "parallel=[$VP]"
echo "== vp2_pad vs ref_pad"
compare vp2_pad ref_pad
# Sampling reads whole rows: each tp rank's slice is gathered. After the same
# 20 steps, temperature 1 over the whole vocabulary (top_k 0), the same seed: the same 24 tokens
# as the single rank's (a rank sampling from its slice alone would feed the ranks different
# windows, and the all-reduced activations would differ).
run 1 ref_s $H --set train.micro_batch_size=8 --set 'parallel=[]' --set sample.tokens=24 \
  --set sample.top_k=0
run 2 vp2_s $H --set train.micro_batch_size=8 --set "parallel=[$VP]" --set sample.tokens=24 \
  --set sample.top_k=0
sed -n '/loom: sample/,$p' "$WORK/ref_s/out.log" | head -3 >"$WORK/ref_s/sample.txt"
sed -n '/loom: sample/,$p' "$WORK/vp2_s/out.log" | head -3 >"$WORK/vp2_s/sample.txt"
[ -s "$WORK/ref_s/sample.txt" ] || die "the reference printed no sample"
cmp -s "$WORK/ref_s/sample.txt" "$WORK/vp2_s/sample.txt" ||
  { diff "$WORK/ref_s/sample.txt" "$WORK/vp2_s/sample.txt"; die "vp2 sampled other tokens"; }
echo "sample: the same tokens as the single rank"
# Refusals, before training, with the numbers.
expect_refused 2 'vocab_parallel: the padded vocabulary (257 rows, vocab_size 256, padded_vocab_size 257) must be divisible by the tensor-parallel size (2)' \
  $H --set model.padded_vocab_size=257 --set "parallel=[$VP]"
expect_refused 2 "tp rank 1's 256 rows of wte would all be padding (vocab_size 256 padded to 512 over 2 ranks)" \
  $H --set model.padded_vocab_size=512 --set "parallel=[$VP]"
expect_refused 4 'vocab_parallel with pipeline stages' $H \
  --set "parallel=[$VP,{\"plugin\":\"pipeline\",\"size\":2,\"schedule\":\"gpipe\"}]"
expect_refused 2 'vocab_parallel: expected true or false' $H \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2,"vocab_parallel":1}]'
echo "equivalence_vocab_parallel: PASS"
