#!/bin/bash
# under the sanitizers three of its ten cases (zero1 bf16, zero3 fp32, zero2 + offload)
# ctest: sanitized
# Resume under ZeRO stages 1-3: 20 steps straight vs 10 steps + checkpoint + a new process
# resuming + 10 steps must give bitwise identical losses and final parameters, on the same world
# size (2 ranks, and 3 ranks: uneven partitions). The checkpoint holds the parameters (ZeRO-3:
# one chunk per rank's partition) and the host's partitioned AdamW state (one chunk per rank).
# Under bf16 with 16-bit storage (3 ranks, uneven partitions; and zero2 + cpu_offload on 2) the
# checkpoint holds each rank's fp32 master partition as the parameters: a resumed rank rounds
# its own range of the 16-bit parameters from it and ZeRO-1/2 all-gather the others' at the
# first step, so the continuation is bitwise too.
. "$(dirname "$0")/../lib/lib.sh"
make_data
OFF='{"plugin":"cpu_offload"}'
cases=()
for z in zero1 zero2 zero3; do
  for n in 2 3; do cases+=("$z|$n|fp32|{\"plugin\":\"$z\"}"); done
done
for z in zero1 zero2 zero3; do cases+=("$z|3|bf16|{\"plugin\":\"$z\"}"); done
cases+=("zero2off|2|bf16|{\"plugin\":\"zero2\"},$OFF")
# Under the sanitizers (LOOM_SANITIZED=1) every code path once, on uneven partitions where the
# case has 3 ranks: zero1 in bf16 (the fp32 master saved as the parameters, each rank rounding
# its own range, the first step's all-gather of the 16-bit parameters), zero3 in fp32 (its
# partitioned parameters saved and loaded as they are) and zero2 + cpu_offload in bf16 (the
# offload plugin's host-side m, v and master). The others cross the same save and load code
# with another stage (zero2 is zero1's path from the checkpoint's side), precision or rank
# count: numerics, which the normal build checks.
if [ "${LOOM_SANITIZED:-0}" = 1 ]; then
  cases=("${cases[6]}" "${cases[5]}" "${cases[9]}")
fi
for c in "${cases[@]}"; do
  IFS='|' read -r z n prec par <<<"$c"
  b=$((12 / n))
  s=${z}_${prec}_straight$n r=${z}_${prec}_resumed$n
  pr="precision={\"plugin\":\"$prec\"}"
  run "$n" $s --set train.micro_batch_size=$b --set "parallel=[$par]" --set "$pr" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$s/ckpt\",\"every\":10}"
  # the resumed run starts from a copy of the step-10 checkpoint only
  mkdir -p "$WORK/$r/ckpt"
  cp -r "$WORK/$s/ckpt/step-00000010" "$WORK/$r/ckpt/"
  printf 'step-00000010' >"$WORK/$r/ckpt/latest"
  timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set train.micro_batch_size=$b \
    --set "parallel=[$par]" --set "$pr" \
    --set "logging.metrics=$WORK/$r/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$r/ckpt\",\"every\":10}" \
    >"$WORK/$r/out.log" 2>&1 || { cat "$WORK/$r/out.log"; die "$z resume run failed"; }
  grep -q "resumed at step 10" "$WORK/$r/out.log" || die "$z run did not resume at step 10"
  echo "== $z, $n ranks, $prec: resumed vs straight, steps 11-20"
  compare $r $s --bitwise --steps 11:20
done
echo "resume_zero: bitwise identical continuation under zero1, zero2 and zero3 (fp32, bf16)"
