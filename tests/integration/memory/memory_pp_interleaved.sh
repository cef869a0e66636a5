#!/bin/bash
# Memory and traffic check for interleaved 1F1B (pipeline.so "schedule": "interleaved"): `loom
# estimate --json` against what the trainer measures, pp 2 x v 2 in fp32 and bf16, 3 steps of
# the tiny config with n_head 4, n_layer 4 and 4 micro-batches, through check_memory_pp.py
# (every stage's logged peaks and in-flight count; rank 0's categories and traffic). The
# activations must match to the byte: the host keeps one slot pool per chunk, chunk k's as many
# slots as the order holds chunk-k micro-batches at once (Narayanan et al. 2021's in-flight
# count, per chunk), each laid out for that chunk alone.
. "$(dirname "$0")/../lib/lib.sh"
make_data
PLUGINS=${LOOM_BUILD}/lib/loom/plugins
[ -f "$PLUGINS/pipeline.so" ] || { echo "SKIP: $PLUGINS/pipeline.so is not built"; exit 77; }
RUNS=()
case_() { # case_ NAME NRANKS PARALLEL_JSON [PRECISION]
  local name=$1 n=$2 par=$3 prec=${4:-fp32}
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.grad_accum_steps=4
              --set train.eval_interval=0 --set model.n_head=4 --set model.n_layer=4
              --set checkpoint=null --set "parallel=$par" --set "precision.plugin=$prec")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name")
}
IL='{"plugin":"pipeline","size":2,"schedule":"interleaved","chunks":2}'
case_ pp2_v2 2 "[$IL]"
case_ pp2_v2_bf16 2 "[$IL]" bf16
/usr/bin/python3 "$HERE/check_memory_pp.py" --exact-acts "$WORK" "${RUNS[@]}"
