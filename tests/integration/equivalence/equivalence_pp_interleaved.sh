#!/bin/bash
# ctest: labels=integration
# ctest: name=integration.equivalence_pp_interleaved_matrix args=--matrix labels=integration,matrix timeout=1500
# Interleaved 1F1B (pipeline.so "schedule": "interleaved", "chunks": v; Narayanan et al. 2021,
# §2.2.1) against the single-rank fp32 run: the tiny model with 4 blocks (6 units), the same
# global batch (8 sequences of 64 tokens, 4 micro-batches of 2) and seed. CI: pp 2 x v 2 (4
# virtual stages of one block: rank 0 holds the embedding + block 0 and block 2, rank 1 block 1
# and block 3 + head, the ring wrap from rank 1's chunk 0 to rank 0's chunk 1) must give the
# same per-step loss and grad norm and final parameters within compare_runs.py's tolerances
# (docs/tolerances.md) over 20 steps, with evaluation (the chunked forward-only pass) on; then
# the refusals, before training, naming the values. --matrix adds pp 4 x v 2 (8 blocks), pp 2 x
# v 2 x dp 2 with ddp and with zero1, tp 2 x pp 2 x v 2, an explicit "stages" placement (units
# per virtual stage), full activation checkpointing of every second block, bf16 against the
# 1-rank bf16 run, and resume across the placement: pp 2 v 2 -> pp 2 v 1 -> pp 1 -> pp 2 v 2,
# each leg resumed from the previous one's checkpoint, against the reference.
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4 --set model.n_layer=4'
il() { echo "{\"plugin\":\"pipeline\",\"size\":$1,\"schedule\":\"interleaved\",\"chunks\":$2${3:-}}"; }
run 1 ref $H --set train.micro_batch_size=8 --set 'parallel=[]'
names=()
prun() { # prun NRANKS NAME MICRO ACCUM 'PLUGINS JSON ARRAY' [more --set]
  local n=$1 name=$2 mb=$3 acc=$4 par=$5
  shift 5
  run "$n" "$name" $H --set train.micro_batch_size="$mb" --set train.grad_accum_steps="$acc" \
    --set "parallel=$par" "$@"
  names+=("$name")
}
prun 2 pp2_v2 2 4 "[$(il 2 2)]"
grep -q 'schedule interleaved, m 4, chunks 2' "$WORK/pp2_v2/out.log" ||
  { cat "$WORK/pp2_v2/out.log"; die "pp2_v2: no interleaved bubble line"; }
if [ "${1:-}" = --matrix ]; then
  H8='--set model.n_head=4 --set model.n_layer=8'
  run 1 ref8 $H8 --set train.micro_batch_size=8 --set 'parallel=[]'
  run 4 pp4_v2 $H8 --set train.micro_batch_size=2 --set train.grad_accum_steps=4 \
    --set "parallel=[$(il 4 2)]"
  echo "== pp4_v2 vs ref8"
  compare pp4_v2 ref8
  prun 4 pp2_v2_dp2 2 2 "[$(il 2 2),{\"plugin\":\"ddp\"}]"
  prun 4 pp2_v2_zero1 2 2 "[$(il 2 2),{\"plugin\":\"zero1\"}]"
  prun 4 tp2_pp2_v2 2 4 "[{\"plugin\":\"tensor_parallel\",\"size\":2},$(il 2 2)]"
  # an explicit placement: units per virtual stage (embedding + 2 blocks, 1 block, 1, head)
  prun 2 pp2_v2_stages 2 4 "[$(il 2 2 ',"stages":[3,1,1,1]')]"
  # activation checkpointing per chunk: the blocks checkpointed by their global index
  prun 2 pp2_v2_ckpt_every2 2 4 "[$(il 2 2)]" \
    --set 'activation_checkpointing={"policy":"full","every":2}'
  # bf16 against the 1-rank bf16 run (equivalence_bf16.sh's tolerance)
  BF='precision={"plugin":"bf16"}'
  run 1 ref_bf16 $H --set "$BF" --set train.micro_batch_size=8 --set 'parallel=[]'
  run 2 pp2_v2_bf16 $H --set "$BF" --set train.micro_batch_size=2 --set train.grad_accum_steps=4 \
    --set "parallel=[$(il 2 2)]"
  echo "== pp2_v2_bf16 vs ref_bf16"
  compare pp2_v2_bf16 ref_bf16 --rtol 1e-2
fi
for r in "${names[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done
if [ "${1:-}" = --matrix ]; then
  # resume across the placement: each leg resumes from the previous leg's checkpoint
  ck() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":5}"; }
  leg() { # leg NRANKS NAME FROM STEP 'PLUGINS'
    local n=$1 name=$2 from=$3 step=$4 par=$5 d
    d=$(printf 'step-%08d' "$4")
    rm -rf "$WORK/$name" && mkdir -p "$WORK/$name/ckpt"
    cp -r "$WORK/$from/ckpt/$d" "$WORK/$name/ckpt/" && printf '%s' "$d" >"$WORK/$name/ckpt/latest"
    timeout 300 "${MPIRUN[@]}" -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
      --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
      --set "data.vocab=$WORK/data/vocab.json" $H --set train.micro_batch_size=2 \
      --set train.grad_accum_steps=4 --set "parallel=$par" \
      --set "logging.metrics=$WORK/$name/metrics.jsonl" --set logging.interval=5 \
      --set "$(ck "$name")" >"$WORK/$name/out.log" 2>&1 ||
      { cat "$WORK/$name/out.log"; die "$name: the resumed run failed"; }
    grep -q "resumed at step $step" "$WORK/$name/out.log" || die "$name did not resume at step $step"
  }
  run 2 r_v2 $H --set train.micro_batch_size=2 --set train.grad_accum_steps=4 \
    --set "parallel=[$(il 2 2)]" --set "$(ck r_v2)"
  leg 2 r_v1 r_v2 5 '[{"plugin":"pipeline","size":2,"schedule":"1f1b"}]'
  leg 1 r_pp1 r_v1 10 '[]'
  leg 2 r_back r_pp1 15 "[$(il 2 2)]"
  for x in "r_v1 6:20" "r_pp1 11:20" "r_back 16:20"; do
    read -r r steps <<<"$x"
    echo "== $r (resumed) vs ref, steps $steps"
    compare "$r" ref --steps "$steps"
  done
fi

# Refusals, before training, with the numbers.
expect_refused 2 'needs at least 2 stages and a number of micro-batches that is a multiple of the stages: train.grad_accum_steps is 3, the pipeline has 2 stages' \
  $H --set train.grad_accum_steps=3 --set "parallel=[$(il 2 2)]"
expect_refused 2 'chunks 2 needs "schedule": "interleaved" (schedule "1f1b"' $H \
  --set train.grad_accum_steps=2 --set 'parallel=[{"plugin":"pipeline","size":2,"chunks":2}]'
expect_refused 2 'chunks 3 x size 2 = 6 virtual stages do not divide model.n_layer 4 evenly' \
  $H --set train.grad_accum_steps=2 --set "parallel=[$(il 2 3)]"
expect_refused 2 'stages: expected 4 unit counts >= 1 (one per virtual stage: size x chunks)' \
  $H --set train.grad_accum_steps=2 --set "parallel=[$(il 2 2 ',"stages":[3,3]')]"
echo "equivalence_pp_interleaved: all ${#names[@]} runs match the single-rank reference"
