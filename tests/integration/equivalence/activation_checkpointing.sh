#!/bin/bash
# ctest: labels=integration,asan-full
# --matrix: all 29 runs described below, in `tools/test.sh --full` (normal build only); the
# test above runs the covering 11 named at the end of this comment in every pass.
# ctest: name=integration.activation_checkpointing_matrix args=--matrix labels=integration,matrix
# Activation checkpointing under every kind of strategy: the tiny model (3 blocks, 4 heads so
# tp 2 divides them), 10 steps, under ddp (2 ranks), zero3 (2 ranks), tp 2 and pp 2 1f1b (4
# micro-batches of 2), each with "activation_checkpointing" none, full and selective (and
# {"policy": "full", "every": 2} under ddp and pp 2), and zero2 + cpu_offload (2 ranks) with none
# and full, pp 2 gpipe (4 micro-batches in flight sharing one recompute scratch) with none and
# full: every checkpointed run must give BITWISE
# the per-step loss and grad norm and the final parameters of its run without checkpointing
# (recompute runs the same kernels on the same inputs; fp32, same threads).
# Then memory: rank 0's measured activation peak (mem_peak_bytes.activations) must equal
# `loom estimate --json`'s exactly (gpt.c's pool per micro-batch in flight plus one recompute
# scratch) and be within 5% of an independent per-layer model in the style of Korthikanti et
# al. 2022, Table 2 (written below from the kernels' tensors, without gpt.c's alignment), and
# must order none > selective > full. Under tp 2, full recompute runs the attention's g
# all-reduce again: rank 0's measured bytes per step must equal the estimate's, one more
# all-reduce per block than without checkpointing.
# bf16 (ddp and pp 2 1f1b, every policy): the saved activations are 2 bytes per element, so the
# same checks hold with the 16-bit terms (checkpointed runs bitwise those without; peak = the
# estimate to the byte; the per-layer model with 2-byte values and one (B,T,4C/tp) fp32
# widening buffer per rank).
# Attention is flash (the CPU device's default: the rows' log-sum-exp saved, no T x T buffer);
# ddpmat repeats ddp with model.attention "materialized", whose (B,NH,T,T) probabilities the
# same checks size.
# Without --matrix (the CI pass) a covering 11 of the 29 runs, every strategy and every policy
# at least once, each run's peak and traffic = the estimate and the per-layer model: tp2 none,
# full and selective (bitwise both, the order none > selective > full, full's extra all-reduce
# per block), pp2 1f1b bf16 none and every 2 (bitwise: a pipeline schedule, 16-bit saved
# activations and a partial policy), and one run each of zero3 full, zero2 + cpu_offload full,
# pp2 1f1b selective, pp2 gpipe full, bf16 ddp full and ddpmat selective (the ddp plugin under
# bf16 and materialised: fp32 ddp's activations are zero3's and zero2's to the byte). --matrix
# adds the cross product: every strategy under every policy it takes, each bitwise against its
# none run, and the order for each strategy that takes all three.
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
COVERING=" tp2_none tp2_full tp2_selective pp2bf16_none pp2bf16_every2 zero3_full zero2off_full
  pp2_selective pp2gpipe_full ddpbf16_full ddpmat_selective "
make_data
PLUGINS=${LOOM_BUILD}/lib/loom/plugins
for p in ddp zero2 zero3 cpu_offload tensor_parallel pipeline; do
  [ -f "$PLUGINS/$p.so" ] || { echo "SKIP: $PLUGINS/$p.so is not built"; exit 77; }
done
MODEL=(--set model.n_head=4 --set model.n_layer=3 --set train.steps=10
       --set train.eval_interval=0 --set train.eval_batches=1)
PP='{"plugin":"pipeline","size":2,"schedule":"1f1b"}'
declare -A PAR=(
  [ddp]='[{"plugin":"ddp"}]|2|4|1'
  [zero3]='[{"plugin":"zero3"}]|2|4|1'
  [zero2off]='[{"plugin":"zero2"},{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}]|2|4|1'
  [tp2]='[{"plugin":"tensor_parallel","size":2}]|2|8|1'
  [pp2]="[$PP]|2|2|4"
  [pp2gpipe]='[{"plugin":"pipeline","size":2,"schedule":"gpipe"}]|2|2|4'
  [ddpbf16]='[{"plugin":"ddp"}]|2|4|1|bf16'
  [pp2bf16]="[$PP]|2|2|4|bf16"
  [ddpmat]='[{"plugin":"ddp"}]|2|4|1||materialized'
)  # parallel | ranks | micro-batch | accumulation | precision | attention: 8 sequences a step
POLICIES=(none full selective every2)
policy_json() {
  case $1 in
    every2) echo '{"policy":"full","every":2}' ;;
    *) echo "\"$1\"" ;;
  esac
}
RUNS=() BITWISE=()
for strat in ddp zero3 zero2off tp2 pp2 pp2gpipe ddpbf16 pp2bf16 ddpmat; do
  IFS='|' read -r par n micro accum prec attn <<<"${PAR[$strat]}"
  for pol in "${POLICIES[@]}"; do
    [ "$pol" = every2 ] && [ "${strat%bf16}" != ddp ] && [ "${strat%bf16}" != pp2 ] && continue
    [ "$pol" = selective ] && { [ "$strat" = zero2off ] || [ "$strat" = pp2gpipe ]; } && continue
    name=${strat}_$pol
    selected "$name" || continue
    args=("${MODEL[@]}" --set "parallel=$par" --set train.micro_batch_size="$micro"
          --set train.grad_accum_steps="$accum"
          --set "activation_checkpointing=$(policy_json "$pol")")
    [ -n "$prec" ] && args+=(--set "precision={\"plugin\":\"$prec\"}")
    [ -n "$attn" ] && args+=(--set "model.attention=\"$attn\"")
    run "$n" "$name" "${args[@]}"
    "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
      --set checkpoint=null >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
    RUNS+=("$name")
  done
  for pol in "${POLICIES[@]}"; do
    # each checkpointed run against its strategy's run without (CI runs some without one)
    [ -d "$WORK/${strat}_$pol" ] && [ "$pol" != none ] && [ -d "$WORK/${strat}_none" ] || continue
    echo "== ${strat}: $pol vs none (bitwise)"
    compare "${strat}_$pol" "${strat}_none" --bitwise
    BITWISE+=("${strat}_$pol")
  done
done

/usr/bin/python3 "$HERE/check_activation_memory.py" "$WORK" "${RUNS[@]}"
[ $? = 0 ] || die "activation memory or traffic does not match"
echo "activation checkpointing: ${BITWISE[*]} bitwise equal to none;" \
     "activation peaks of ${RUNS[*]} match the estimate"
