#!/bin/bash
# Memory and traffic check for pipeline parallel: `loom estimate --json` against what the
# trainer measures, for pp2 (gpipe, 1f1b, 1f1b in bf16), pp2 x dp2 (ddp) and tp2 x pp2 (1f1b),
# 3 steps of the tiny config with n_head 4 and 4 micro-batches. Rank 0 is stage 0: its metrics
# (mem_peak_bytes: params, grads, optim, activations, other; comm_bytes of a steady step, which
# counts the boundary sends, the tied wte's sum and the dp/tp collectives) are compared with the
# estimate's stage 0 within 5%; every stage's logged peaks (activations, params, grads, optim)
# with its stage's estimate, and the schedule's logged "peak N micro-batches in flight" with its
# in_flight.
. "$(dirname "$0")/../lib/lib.sh"
make_data
PLUGINS=${LOOM_BUILD}/lib/loom/plugins
for p in pipeline ddp tensor_parallel; do
  [ -f "$PLUGINS/$p.so" ] || { echo "SKIP: $PLUGINS/$p.so is not built"; exit 77; }
done
RUNS=()
case_() { # case_ NAME NRANKS PARALLEL_JSON [PRECISION]
  local name=$1 n=$2 par=$3 prec=${4:-fp32}
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.grad_accum_steps=4
              --set train.eval_interval=0 --set model.n_head=4 --set checkpoint=null
              --set "parallel=$par" --set "precision.plugin=$prec")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name")
}
case_ pp2_gpipe 2 '[{"plugin":"pipeline","size":2,"schedule":"gpipe"}]'
case_ pp2_1f1b 2 '[{"plugin":"pipeline","size":2,"schedule":"1f1b"}]'
case_ pp2_dp2 4 '[{"plugin":"pipeline","size":2,"schedule":"1f1b"},{"plugin":"ddp"}]'
case_ tp2_pp2 4 '[{"plugin":"tensor_parallel","size":2},{"plugin":"pipeline","size":2,"schedule":"1f1b"}]'
# bf16: 16-bit storage's fp32 unit work ("other") is once per rank, not per micro-batch in flight
case_ pp2_1f1b_bf16 2 '[{"plugin":"pipeline","size":2,"schedule":"1f1b"}]' bf16

/usr/bin/python3 "$HERE/check_memory_pp.py" "$WORK" "${RUNS[@]}"
