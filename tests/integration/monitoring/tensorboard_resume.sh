#!/bin/bash
# TensorBoard after a resume (tensorflow/tensorboard#3732): a run interrupted at step 13 whose
# newest checkpoint is step 10 is resumed; the interrupted process's steps 11-13 are in its
# event file, and the resumed process logs 11-20 in a new one. Read as TensorBoard's event
# accumulator reads the directory (tb_read.py: every SessionLog START after the first purges
# what was read at steps >= its step), every scalar must be there once and equal the JSONL's
# (which drops the lines after the checkpoint and appends). Before loom wrote the START event,
# steps 11-13 were shown twice ("written twice" here).
# The interruption: a 13-step run, then its step-13 checkpoint removed (what a SIGKILL between
# the checkpoint at 10 and the one at 20 leaves; resume.sh kills for real).
# Needs: LOOM_BUILD, LOOM_SRC; python3-protobuf and python3-crc32c.
set -u
. "$(dirname "$0")/../lib/lib.sh"
/usr/bin/python3 -c "import google.protobuf, crc32c" 2>/dev/null ||
  { echo "SKIP: python3-protobuf or python3-crc32c not installed"; exit 77; }
make_data
out=$WORK/tbres
mkdir -p "$out"
train() { # train STEPS LOG
  "$LOOM" train "$LOOM_SRC/configs/tiny.json" --set "data.train=$WORK/data/train_*.bin" \
    --set "data.val=$WORK/data/val_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
    --set "train.steps=$1" --set lr_schedule.decay_steps=20 --set train.eval_interval=5 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$out/ckpt\",\"every\":10}" \
    --set "logging.metrics=$out/metrics.jsonl" --set "logging.tensorboard=$out/tb" > "$2" 2>&1 ||
    { cat "$2"; die "loom train ($1 steps) failed"; }
}
train 13 "$out/first.log"
rm -rf "$out/ckpt/step-00000013"
printf 'step-00000010' > "$out/ckpt/latest"
sleep 1.1 # the second file's name (unix seconds) sorts after the first's, as TensorBoard orders
train 20 "$out/second.log"
grep -q "resumed at step 10" "$out/second.log" || die "the second run did not resume at step 10"
[ "$(ls "$out/tb" | wc -l)" -eq 2 ] || die "expected two event files, got: $(ls "$out/tb")"
/usr/bin/python3 "$TESTLIB/tb_read.py" "$out/tb" --jsonl "$out/metrics.jsonl" > "$out/read.txt"
rc=$?
cat "$out/read.txt"
[ $rc -eq 0 ] || die "TensorBoard's reading of the resumed run's files differs from the JSONL"
grep -q "over 20 steps (last 20).*scalars of steps a restart replaced purged" "$out/read.txt" ||
  die "the reader did not purge the interrupted process's steps 11-13"
echo "PASS"
