#!/bin/bash
# What an abrupt end leaves of a run's record:
#   1. a closed stdout (`loom train | grep -m1 step`: the reader exits after one line) neither
#      stops nor kills training: loom exits 0, says so once on stderr, and metrics.jsonl and the
#      TensorBoard file hold every step (before: SIGPIPE killed loom, exit 141, 3 records);
#   2. a SIGKILL mid-run loses at most the record being written: every complete JSONL line is
#      JSON, the records grew on disk while the run went on (flushed record by record), and the
#      TensorBoard file reads back (tb_read.py --live: whole records, checksums right) with the
#      same scalars as the JSONL.
# Under mpirun, a closed stdout is mpirun's to handle (it aborts the job on SIGPIPE): docs/
# monitoring.md says to redirect or tee instead. Needs: LOOM_BUILD, LOOM_SRC; python3-protobuf
# and python3-crc32c for the TensorBoard reads (skipped without them).
set -u
. "$(dirname "$0")/../lib/lib.sh"
/usr/bin/python3 -c "import google.protobuf, crc32c" 2>/dev/null ||
  { echo "SKIP: python3-protobuf or python3-crc32c not installed"; exit 77; }
READ="/usr/bin/python3 $TESTLIB/tb_read.py"
make_data
train_args() { # train_args DIR STEPS
  echo "$LOOM_SRC/configs/tiny.json" --set "data.train=$WORK/data/train_*.bin" \
    --set "data.val=$WORK/data/val_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
    --set "train.steps=$2" --set train.eval_interval=10 --set logging.interval=1 \
    --set "logging.metrics=$1/metrics.jsonl" --set "logging.tensorboard=$1/tb" --set checkpoint=null
}

# 1. stdout closed after the first progress line
out=$WORK/pipe
mkdir -p "$out"
# shellcheck disable=SC2046
timeout 300 "$LOOM" train $(train_args "$out" 40) 2> "$out/err.txt" | grep -m1 '^step' > /dev/null
rcs=("${PIPESTATUS[@]}")
cat "$out/err.txt"
[ "${rcs[0]}" -eq 0 ] || die "loom train with its stdout closed exited ${rcs[0]} (141: SIGPIPE)"
[ "$(grep -c 'stdout is closed' "$out/err.txt")" -eq 1 ] ||
  die "the closed stdout was not said exactly once on stderr"
n=$(grep -c '"loss"' "$out/metrics.jsonl")
[ "$n" -eq 40 ] || die "metrics.jsonl holds $n training steps of 40 after stdout closed"
$READ "$out/tb" --jsonl "$out/metrics.jsonl" || die "the TensorBoard file is not whole"
echo "ok: stdout closed after one line: exit 0, one note, 40/40 steps in the JSONL and TensorBoard"

# 2. SIGKILL mid-run
out=$WORK/kill
mkdir -p "$out"
# shellcheck disable=SC2046
"$LOOM" train $(train_args "$out" 100000) > "$out/train.log" 2>&1 &
pid=$!
track_job $pid
seen=0
for _ in $(seq 600); do
  [ -f "$out/metrics.jsonl" ] && seen=$(grep -c '"loss"' "$out/metrics.jsonl")
  [ "$seen" -ge 20 ] && break
  kill -0 $pid 2>/dev/null || { cat "$out/train.log"; die "the run ended on its own"; }
  sleep 0.1
done
[ "$seen" -ge 20 ] || die "only $seen records reached the disk in 60 s: not flushed per record"
kill -9 $pid
wait $pid 2>/dev/null
python3 - "$out/metrics.jsonl" "$seen" <<'PY' || die "metrics.jsonl after SIGKILL"
import json, sys
data = open(sys.argv[1]).read()
lines = data.split('\n')
tail = lines.pop()                     # after the last newline: a record being written, or ''
steps = [json.loads(l)['step'] for l in lines]   # every complete line is a whole record
assert steps == sorted(steps), "steps out of order"
n = sum(1 for l in lines if '"loss"' in l)
assert n >= int(sys.argv[2]), f"{n} training records on disk after the kill, {sys.argv[2]} before"
print(f"ok: SIGKILL at step {steps[-1]}: {len(lines)} whole records, "
      f"{len(tail)} bytes of a partial one")
PY
$READ "$out/tb" --jsonl "$out/metrics.jsonl" --live || die "the TensorBoard file after SIGKILL"
echo "PASS"
