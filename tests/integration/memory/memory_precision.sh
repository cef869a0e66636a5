#!/bin/bash
# ctest: labels=integration,asan-full
# ctest: name=integration.memory_precision_matrix args=--matrix labels=integration,matrix
# Memory under each precision: the peak bytes per category a rank measures (mem_peak_bytes in
# the metrics JSONL, rank 0, and the largest over all ranks) against the ZeRO paper's
# mixed-precision accounting (Rajbhandari et al. 2020, §3: 2Ψ fp16 parameters + 2Ψ fp16
# gradients + K = 12 bytes of fp32 optimizer state — master, Adam m, v — per parameter) and
# against `loom estimate --json` for the same config, at N = 1, 2, 4 ranks, for fp32, bf16 and
# fp16, 3 steps of the tiny config.
#
# fp32 has no separate master (the parameters are the fp32 values the optimizer steps), so its
# model states are 4Ψ + 4Ψ + 8Ψ: the same 16Ψ. With grad_accum_steps > 1 the gradients stay fp32
# (4Ψ; accumulation over micro-batches in fp32, DeepSpeed's grad_accum_dtype), so mixed
# precision is then 2Ψ + 4Ψ + 12Ψ = 18Ψ.
#
# Fails when params, grads or optim differ from the formula by more than 5% (they are in fact
# exact) or from the estimate at all, when the activations differ from the estimate, or when
# any rank's peak in any category exceeds the estimate.
#
# Plus ddp's split embedding all-reduce (on where wte holds at least half of the parameters): the
# tiny model with vocab 4096 (and 4000 padded to 4096, ddp.so copied and named by path) on 2
# fp32 ranks, its comm buffers measured = estimate = N*B*T*(4+8C) on every rank, and each step's traffic = the dense all-reduce + the ids' all-gather + whole
# token rows, within the estimate's bound.
#
# Shape (one function per strategy, each adding runs to RUNS as NAME:STRATEGY:N:PRECISION:ACCUM,
# and one formula per strategy in the Python below): strategy_ddp here; the ZeRO strategies add
# strategy_zero1 .. strategy_zero3 (and their FORMULA entries) the same way.
#
# Without --matrix (the CI pass) a covering 5 of the 12 runs: each precision once, each on
# another rank count (fp32 on 4, bf16 on 1, fp16 on 2), bf16 with accumulation, and the split
# embedding through the ddp.so copy named by path with the padded vocabulary (the role lookup
# and the padded rows at once). The other 6 precision x rank runs and the split by plugin name
# move to --matrix (integration.memory_precision_matrix, tools/test.sh --full): all 12.
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
COVERING=" ddp_fp32_n4 ddp_bf16_n1 ddp_fp16_n2 ddp_bf16_acc2_n2 ddp_split_pad_n2 "
make_data
RUNS=()

# mem_run NAME STRATEGY N PRECISION ACCUM PARALLEL_JSON [--set ...]: train 3 steps, estimate.
mem_run() {
  local name=$1 strat=$2 n=$3 prec=$4 accum=$5 par=$6
  shift 6
  selected "$name" || return 0
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
              --set checkpoint=null --set "parallel=$par"
              --set "precision={\"plugin\":\"$prec\"}" --set "train.grad_accum_steps=$accum"
              "$@")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name:$strat:$n:$prec:$accum")
}

strategy_ddp() {
  local prec n
  for prec in fp32 bf16 fp16; do
    for n in 1 2 4; do
      mem_run "ddp_${prec}_n$n" ddp "$n" "$prec" 1 '[{"plugin":"ddp"}]'
    done
  done
  # accumulation over micro-batches keeps fp32 gradients (4Ψ)
  mem_run ddp_bf16_acc2_n2 ddp 2 bf16 2 '[{"plugin":"ddp"}]'
}

# ddp's split embedding all-reduce (ddp.c): on by default ("auto") where wte holds at least half
# of the parameters, as with a GPT-2 vocabulary; here the tiny model with vocab 4096 (wte 131072
# of 158592 parameters). Its buffers (every rank's token ids and two row buffers, N*B*T*(4+8C)
# bytes) are comm: measured = estimate, on every rank.
# The estimate finds the splitting plugin by its role, not its name: the second run names a copy
# of ddp.so by path, with a padded vocabulary (4000 -> 4096 rows: ddp splits a padded wte too).
strategy_ddp_split() {
  mem_run ddp_split_fp32_n2 ddp_split 2 fp32 1 '[{"plugin":"ddp"}]' --set model.vocab_size=4096
  cp "$LOOM_BUILD/lib/loom/plugins/ddp.so" "$WORK/dp_sync.so"
  mem_run ddp_split_pad_n2 ddp_split 2 fp32 1 "[{\"plugin\":\"$WORK/dp_sync.so\"}]" \
    --set model.vocab_size=4000 --set model.padded_vocab_size=4096
}

strategy_ddp
strategy_ddp_split

/usr/bin/python3 "$HERE/check_memory_precision.py" "$WORK" "$LOOM_SRC/configs/tiny.json" "${RUNS[@]}"
