#!/bin/bash
# ctest: labels=integration,asan-full
# The equivalence matrix for pipeline parallel (pipeline.so): the tiny model (2 blocks: 4 units
# embedding, block 0, block 1, head; 4 heads so tp 2 divides them), the same global batch (8
# sequences of 64 tokens) and seed on 1 rank without any parallel plugin, and under pp 2 and pp 4
# with each schedule (sequential, gpipe, 1f1b; 4 micro-batches of 2), pp 2 x dp 2 (ddp), zero1 x
# pp 2, an explicit stage split, and tp 2 x pp 2 x dp 2 on 8 ranks, must give the same per-step
# loss and grad norm and the same final parameters (reassembled from the stages' and tp ranks'
# items; the last stage's copy of the tied wte checked bitwise equal to the first's) within
# compare_runs.py's tolerances (docs/tolerances.md) over 20 steps. Then the shapes (each stage
# holds only its units) and the refusals.
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
pp() { echo "{\"plugin\":\"pipeline\",\"size\":$1,\"schedule\":\"$2\"${3:-}}"; }
run 1 ref $H --set train.micro_batch_size=8 --set 'parallel=[]'
names=()
prun() { # prun NRANKS NAME MICRO ACCUM 'PLUGINS JSON ARRAY'
  run "$1" "$2" $H --set train.micro_batch_size="$3" --set train.grad_accum_steps="$4" \
    --set "parallel=$5" --set train.eval_interval=0
  names+=("$2")
}
for s in sequential gpipe 1f1b; do
  prun 2 "pp2_$s" 2 4 "[$(pp 2 $s)]"
  prun 4 "pp4_$s" 2 4 "[$(pp 4 $s)]"
done
prun 4 pp2_dp2 2 2 "[$(pp 2 1f1b),{\"plugin\":\"ddp\"}]"
prun 4 zero1_pp2 2 2 "[$(pp 2 gpipe),{\"plugin\":\"zero1\"}]"
prun 2 pp2_stages13 2 4 "[$(pp 2 1f1b ',"stages":[1,3]')]"
prun 8 tp2_pp2_dp2 2 2 \
  "[{\"plugin\":\"tensor_parallel\",\"size\":2},$(pp 2 1f1b),{\"plugin\":\"ddp\"}]"
for r in "${names[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done

# Shapes: each stage's checkpoint items hold only its units (the tied wte copy on the last).
/usr/bin/python3 "$HERE/check_stage_shapes.py" "$WORK" || die "a stage holds tensors outside its units"

# Refusals, before training, with the numbers.
expect_refused 2 'schedule "1f1b" needs at least as many micro-batches as stages: train.grad_accum_steps is 1' \
  --set "parallel=[$(pp 2 1f1b)]"
expect_refused 3 'tensor-parallel size 1 x pipeline size 2 = 2 does not divide the world size 3' \
  --set train.grad_accum_steps=2 --set "parallel=[$(pp 2 gpipe),{\"plugin\":\"ddp\"}]"
expect_refused 1 "owns the micro-batch schedule, but so does 'pipeline'" \
  --set "parallel=[$(pp 2 gpipe),$(pp 2 gpipe)]"
expect_refused 1 "not with a plugin that owns parameter or gradient storage" \
  --set "parallel=[$(pp 2 gpipe),{\"plugin\":\"zero3\"}]"
expect_refused 1 'stages: expected 2 unit counts' --set "parallel=[$(pp 2 gpipe ',"stages":[2,1]')]"
expect_refused 1 'needs its number of stages' --set 'parallel=[{"plugin":"pipeline"}]'
expect_refused 1 'schedule: expected "sequential", "gpipe", "1f1b" or "interleaved"' \
  --set "parallel=[$(pp 1 zigzag)]"
echo "equivalence_pp: all ${#names[@]} runs match the single-rank reference"
