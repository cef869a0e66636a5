#!/bin/bash
# Resume: 20 steps straight vs 10 steps + checkpoint + a new process resuming + 10 steps must give
# bitwise identical losses and final parameters (same world size), on 1 and on 2 ranks.
. "$(dirname "$0")/../lib/lib.sh"
make_data
for n in 1 2; do
  b=$((8 / n))
  run "$n" straight$n --set train.micro_batch_size=$b \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/straight$n/ckpt\",\"every\":10}"
  # the resumed run starts from a copy of the step-10 checkpoint only
  mkdir -p "$WORK/resumed$n/ckpt"
  cp -r "$WORK/straight$n/ckpt/step-00000010" "$WORK/resumed$n/ckpt/"
  printf 'step-00000010' >"$WORK/resumed$n/ckpt/latest"
  timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set train.micro_batch_size=$b \
    --set "logging.metrics=$WORK/resumed$n/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/resumed$n/ckpt\",\"every\":10}" \
    >"$WORK/resumed$n/out.log" 2>&1 || { cat "$WORK/resumed$n/out.log"; die "resume run failed"; }
  grep -q "resumed at step 10" "$WORK/resumed$n/out.log" || die "run did not resume at step 10"
  echo "== $n rank(s): resumed vs straight, steps 11-20"
  compare "resumed$n" "straight$n" --bitwise --steps 11:20
done
echo "resume: bitwise identical continuation"
