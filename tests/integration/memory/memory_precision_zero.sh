#!/bin/bash
# ctest: labels=integration,asan-full
# ctest: name=integration.memory_precision_zero_matrix args=--matrix labels=integration,matrix
# Memory and traffic under each precision, ZeRO side (issue #8; ddp is memory_precision.sh's):
# for fp32, bf16 and fp16 at N = 1, 2, 4 ranks and zero1 / zero2 / zero3, 2 steps of the
# tiny config, rank 0's measured peak bytes per category (mem_peak_bytes in the metrics JSONL)
# against `loom estimate --json` for the same config and against the ZeRO paper's formula
# (Rajbhandari et al. 2020, §3, Fig. 1), computed here independently of loom:
#   model states = P·Ψp + G·Ψg + K·Ψo (+ ZeRO-3's gathered unit P·g)
#   fp32:  P = 4, G = 4, K = 8  (m, v; the parameters are their own master)
#   16-bit storage: P = 2, G = 2 (4 with grad_accum_steps > 1: accumulation in fp32),
#                   K = 12 (fp32 master, m, v)
#   Ψx = Ψ, or Ψ/N from the stage that shards it on (ZeRO-1 optimizer, ZeRO-2 + gradients,
#   ZeRO-3 + parameters); cpu_offload moves K (+ the staged gradient) to host memory.
#   Under 16-bit storage a model's fp32 working copies of one unit are temporary buffers (the
#   paper's residual states, category "other"), so the model states are the formula exactly.
# Fails when params+grads+optim+host differ by more than 5 % from the formula, any of those
# categories by more than 5 % from the estimate, the activations from the estimate at all, or
# a category of the largest rank's peak (mem_peak_bytes_max) exceeds the estimate.
# Traffic: every multi-rank 16-bit run moves exactly half the bytes of its fp32 twin per step
# (step 2; ZeRO's reduce-scatter and all-gather in 16 bits), and equals the
# estimate's comm_bytes_per_step. Variants on 2 ranks: bf16 ddp/zero2/zero3 with cpu_offload
# (master, m, v on the host), bf16 zero2 with 2 micro-batches (fp32 gradients: G = 4) and bf16
# zero3 with prefetch (two gathered units at once).
# Without --matrix (the CI pass) a covering 11 of those 32 runs, each an MPI start-up for a few
# milliseconds of steps: one fp32 / 16-bit twin per stage for the traffic check (zero1 bf16 at
# N = 2, zero2 fp16 at N = 4, zero3 fp16 at N = 2), bf16 zero3 on 1 rank (the gathered unit,
# nothing sharded), and the variants but bf16 zero2 + cpu_offload (16-bit offload stays covered
# sharded by zero3's and unsharded by ddp's; zero2 + offload by memory_zero.sh): every
# precision, every stage, N = 1, 2, 4, offload, accumulation and prefetch once. --matrix
# (integration.memory_precision_zero_matrix, tools/test.sh --full) runs all 32.
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
COVERING=" fp32_zero1_n2 bf16_zero1_n2 fp32_zero2_n4 fp16_zero2_n4 fp32_zero3_n2 fp16_zero3_n2
  bf16_zero3_n1 bf16_ddp_off_n2 bf16_zero3_off_n2 bf16_zero2_acc2_n2 bf16_zero3pf_n2 "
make_data
PLUGINS=${LOOM_BUILD}/lib/loom/plugins
RUNS=()

one() { # one NAME PRECISION STRATEGY OFFLOAD N [--set ...]
  local name=$1 prec=$2 strat=$3 off=$4 n=$5
  shift 5
  selected "$name" || return 0
  [ -f "$PLUGINS/$strat.so" ] || { echo "SKIP $name: $strat.so is not built"; return 0; }
  local par="{\"plugin\":\"$strat\"}"
  [ "$off" = 1 ] && par="$par,{\"plugin\":\"cpu_offload\"}"
  local pr="{\"plugin\":\"$prec\"}"
  # fp16: a scale that does not overflow the tiny model's first gradients (no skipped step)
  [ "$prec" = fp16 ] && pr='{"plugin":"fp16","initial_scale_power":8}'
  local args=(--set train.steps=2 --set train.micro_batch_size=2 --set train.eval_interval=0
              --set checkpoint=null --set "parallel=[$par]" --set "precision=$pr" "$@")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name:$prec:$strat:$off:$n")
}

for prec in fp32 bf16 fp16; do
  for strat in zero1 zero2 zero3; do
    for n in 1 2 4; do one "${prec}_${strat}_n$n" "$prec" "$strat" 0 "$n"; done
  done
done
one bf16_ddp_off_n2 bf16 ddp 1 2
one bf16_zero2_off_n2 bf16 zero2 1 2
one bf16_zero3_off_n2 bf16 zero3 1 2
one bf16_zero2_acc2_n2 bf16 zero2 0 2 --set train.grad_accum_steps=2
one bf16_zero3pf_n2 bf16 zero3 0 2 --set 'parallel=[{"plugin":"zero3","prefetch":true}]'

/usr/bin/python3 "$HERE/check_memory_precision_zero.py" "$WORK" "$LOOM_SRC/configs/tiny.json" "${RUNS[@]}"
