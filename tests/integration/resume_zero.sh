#!/bin/bash
# Resume under ZeRO stages 1-3: 20 steps straight vs 10 steps + checkpoint + a new process
# resuming + 10 steps must give bitwise identical losses and final parameters, on the same world
# size (2 ranks, and 3 ranks: uneven partitions). The checkpoint holds the parameters (ZeRO-3:
# one chunk per rank's partition) and the host's partitioned AdamW state (one chunk per rank).
. "$(dirname "$0")/lib.sh"
make_data
for z in zero1 zero2 zero3; do
  for n in 2 3; do
    b=$((12 / n))
    s=${z}_straight$n r=${z}_resumed$n
    run "$n" $s --set train.micro_batch_size=$b --set "parallel=[{\"plugin\":\"$z\"}]" \
      --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$s/ckpt\",\"every\":10}"
    # the resumed run starts from a copy of the step-10 checkpoint only
    mkdir -p "$WORK/$r/ckpt"
    cp -r "$WORK/$s/ckpt/step-00000010" "$WORK/$r/ckpt/"
    printf 'step-00000010' >"$WORK/$r/ckpt/latest"
    timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
      --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
      --set "data.vocab=$WORK/data/vocab.json" --set train.micro_batch_size=$b \
      --set "parallel=[{\"plugin\":\"$z\"}]" \
      --set "logging.metrics=$WORK/$r/metrics.jsonl" \
      --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$r/ckpt\",\"every\":10}" \
      >"$WORK/$r/out.log" 2>&1 || { cat "$WORK/$r/out.log"; die "$z resume run failed"; }
    grep -q "resumed at step 10" "$WORK/$r/out.log" || die "$z run did not resume at step 10"
    echo "== $z, $n ranks: resumed vs straight, steps 11-20"
    compare $r $s --bitwise --steps 11:20
  done
done
echo "resume_zero: bitwise identical continuation under zero1, zero2 and zero3"
