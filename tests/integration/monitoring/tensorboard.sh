#!/bin/bash
# TensorBoard event files of a 2-rank run, read back by an independent reader (tb_read.py:
# python3-protobuf messages declared from TensorFlow's field numbers, python3-crc32c checksums):
#   1. mid-run: while the run trains, the files already read back (whole records, checksums
#      right) and their scalars equal the JSONL's so far;
#   2. after the run: every scalar of every step equals the JSONL's (float32), and the config is
#      there as text;
#   3. the reader can fail: one flipped byte is reported as a bad checksum.
# Needs: LOOM_BUILD, LOOM_SRC; python3-protobuf and python3-crc32c (skipped without them).
set -u
. "$(dirname "$0")/../lib/lib.sh"
/usr/bin/python3 -c "import google.protobuf, crc32c" 2>/dev/null ||
  { echo "SKIP: python3-protobuf or python3-crc32c not installed"; exit 77; }
READ="/usr/bin/python3 $TESTLIB/tb_read.py"
make_data
out=$WORK/tb2
mkdir -p "$out"
steps=300
timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" --set train.steps=$steps --set train.eval_interval=50 \
  --set "logging.metrics=$out/metrics.jsonl" --set "logging.tensorboard=$out/tb" \
  --set logging.interval=50 --set logging.peak_gflops=10 > "$out/train.log" 2>&1 &
pid=$!
track_job $pid # killed with its tree on every exit path (lib.sh)

# 1. read mid-run: as soon as 10 steps are in the JSONL, while mpirun is still running
for _ in $(seq 600); do
  [ -f "$out/metrics.jsonl" ] && [ "$(grep -c '"loss"' "$out/metrics.jsonl")" -ge 10 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -0 $pid 2>/dev/null || { cat "$out/train.log"; die "the run ended before the mid-run read"; }
$READ "$out/tb" --jsonl "$out/metrics.jsonl" --live > "$out/mid.txt" ||
  { kill $pid; wait $pid; cat "$out/mid.txt"; die "the event files are not valid mid-run"; }
running=no
kill -0 $pid 2>/dev/null && running=yes
cat "$out/mid.txt"
[ $running = yes ] || die "the run had finished before the mid-run read completed (read again with more steps)"
echo "mid-run read while the run was still training"
wait $pid || { cat "$out/train.log"; die "the 2-rank run failed"; }

# 2. the finished run: every scalar of every step
$READ "$out/tb" --jsonl "$out/metrics.jsonl" > "$out/final.txt" || { cat "$out/final.txt"; die "final read"; }
cat "$out/final.txt"
grep -q "over $steps steps (last $steps)" "$out/final.txt" || die "expected all $steps steps in the event files"
for tag in loss lr grad_norm tokens_per_s gflops mfu comm_bytes mem_peak_bytes_max/params \
    mem_peak_bytes_max/activations; do
  grep -q "\"${tag##*/}\"" "$out/metrics.jsonl" || die "the JSONL has no $tag"
done
grep -q '"val_loss"' "$out/metrics.jsonl" || die "no val_loss in the JSONL"

# 3. a flipped byte in the middle of the file is a checksum failure
f=$(ls "$out"/tb/events.out.tfevents.* | head -n 1)
mkdir -p "$out/bad"
cp "$f" "$out/bad/"
g=$out/bad/$(basename "$f")
size=$(stat -c %s "$g")
printf '\xff' | dd of="$g" bs=1 seek=$((size / 2)) conv=notrunc status=none
if $READ "$out/bad" --jsonl "$out/metrics.jsonl" > "$out/bad.txt" 2>&1; then
  die "the reader accepted a corrupted event file"
fi
grep -q "checksum is wrong" "$out/bad.txt" || { cat "$out/bad.txt"; die "expected a checksum failure"; }
echo "ok: TensorBoard files of a 2-rank run read back mid-run and at the end; corruption detected"
