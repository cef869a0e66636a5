#!/bin/bash
# ctest: labels=integration,asan-full
# ctest: name=integration.memory_zero_matrix args=--matrix labels=integration,matrix
# Memory check: the peak bytes per category a rank measures (mem_peak_bytes in the metrics
# JSONL, rank 0) against the ZeRO paper's accounting (Rajbhandari et al. 2020, §3-5; fp32:
# params 4Ψ, grads 4Ψ, Adam K = 8, the sharded terms /N) and against `loom estimate --json` for
# the same config, for ddp, zero1, zero2, zero3 (each plugin that is built; the others are
# skipped with a note), each with and without cpu_offload, on 2 and 4 ranks, 3 steps of the
# tiny config. Fails when params+grads+optim+host differ by more than 5% from either, or when
# the activations differ from the estimate at all (they are computed, not modelled). The
# per-step communication is compared too (printed; more than 5% off the estimate fails). The
# estimate must bound every rank: each category and the total of mem_peak_bytes_max (the largest
# peak over all ranks) must not exceed it.
# Without --matrix (the CI pass) a covering 7 of the 19 runs: every strategy with cpu_offload
# (its host placement per stage, the thing this script adds to memory_precision_zero.sh) on
# N = 2 (ddp, zero2) or 4 (zero1, zero3), and the three variants (zero2 and zero3 without
# offload there). ddp and zero1 without offload, and the other rank count of each, move to
# --matrix (integration.memory_zero_matrix, tools/test.sh --full), which runs all 19; the same
# fp32 ddp and zero1 configs run in CI in memory_precision.sh and memory_precision_zero.sh.
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
COVERING=" ddp_off_n2 zero1_off_n4 zero2_off_n2 zero3_off_n4 zero3pf_n2 zero2acc2_n2
  zero3acc2_n2 "
make_data
PLUGINS=${LOOM_BUILD}/lib/loom/plugins
OFF='{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}'
RUNS=()
for strat in ddp zero1 zero2 zero3; do
  if [ ! -f "$PLUGINS/$strat.so" ]; then
    echo "SKIP $strat: $PLUGINS/$strat.so is not built (re-run once it is)"
    continue
  fi
  for off in 0 1; do
    par="{\"plugin\":\"$strat\"}"
    [ "$off" = 1 ] && par="$par,$OFF"
    par="[$par]"
    # a sharding plugin that does not own gradient sync itself gets ddp in front (its roles
    # decide, as loom estimate reports them)
    if [ "$strat" != ddp ] && "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json \
        --set "parallel=$par" 2>/dev/null | grep -q '"grad_sync": false'; then
      par="[{\"plugin\":\"ddp\"},${par#[}"
    fi
    for n in 2 4; do
      name=${strat}$([ "$off" = 1 ] && echo _off)_n$n
      selected "$name" || continue
      args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
            --set checkpoint=null --set "parallel=$par")
      run "$n" "$name" "${args[@]}"
      "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
        >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
      RUNS+=("$name:$strat:$off:$n")
    done
  done
done

# variants on 2 ranks: zero3 prefetching (two gathered units); zero2 and zero3 with gradient
# accumulation (they reduce on every micro-step: the traffic grows with A)
extra() { # extra NAME STRATEGY[+prefetch] PARALLEL_JSON [--set ...]
  local name=$1 label=$2 par=$3
  shift 3
  selected "$name" || return 0
  [ -f "$PLUGINS/${label%+prefetch}.so" ] || return 0
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
              --set checkpoint=null --set "parallel=$par" "$@")
  run 2 "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name:$label:0:2")
}
extra zero3pf_n2 zero3+prefetch '[{"plugin":"zero3","prefetch":true}]'
extra zero2acc2_n2 zero2 '[{"plugin":"zero2"}]' --set train.grad_accum_steps=2
extra zero3acc2_n2 zero3 '[{"plugin":"zero3"}]' --set train.grad_accum_steps=2

/usr/bin/python3 "$HERE/check_memory_zero.py" "$WORK" "$LOOM_SRC/configs/tiny.json" "${RUNS[@]}"
