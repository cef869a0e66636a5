#!/bin/bash
# A third party's checkpoint plugin gets what loom's own gets (docs/abi.md "Reading a
# checkpoint"): tests/fixtures/ckpt_third_party/flatckpt.c, a format of its own (one flat file
# per rank, no manifest), built out of tree against the installed SDK alone, is
#   1. saved and resumed by loom train: 2 ranks, 20 steps straight vs 10 steps + a new job
#      resuming from its step-10 files + 10 steps: the same losses, bitwise; and the same as
#      the run with checkpoint.so (a checkpoint plugin changes no number);
#   2. exported by loom export through its reader (--checkpoint NAME, and --config naming it
#      with its options) to the same safetensors tensors, bitwise, as checkpoint.so's export of
#      the same run; the run's last line says where its checkpoints are (its where() slot);
#   3. compared (loom compare --expect-equal 0 against the checkpoint.so run) and reported
#      (loom report) like our runs.
# The same plugin built without the reader slots is refused by loom export, which says so.
. "$(dirname "$0")/../lib/lib.sh"
make_data
PY=/usr/bin/python3
CMAKE=${CMAKE:-cmake}
unset LOOM_PLUGIN_PATH

echo "== install loom, build flatckpt.so against the install only"
"$CMAKE" --install "$LOOM_BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log"; die "cmake --install failed"; }
"$CMAKE" -S "$LOOM_SRC/tests/fixtures/ckpt_third_party" -B "$WORK/tp" \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" >"$WORK/tp.log" 2>&1 &&
  "$CMAKE" --build "$WORK/tp" >>"$WORK/tp.log" 2>&1 || { cat "$WORK/tp.log"; die "build failed"; }
[ -f "$WORK/tp/flatckpt.so" ] || die "no flatckpt.so"
grep -q "$WORK/prefix/include" "$WORK/tp/CMakeFiles/flatckpt.dir/flags.make" ||
  die "flatckpt.so was not compiled against the installed SDK headers"
export LOOM_PLUGIN_PATH="$WORK/tp"
"$LOOM" plugins | grep -q "^flatckpt  *checkpoint " || die "loom plugins does not list flatckpt"

FLAT() { echo "checkpoint={\"plugin\":\"flatckpt\",\"dir\":\"$WORK/$1/ckpt\",\"every\":10}"; }
B='--set train.micro_batch_size=4'
run 2 ours $B --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/ours/ckpt\",\"every\":10}"
run 2 flat $B --set "$(FLAT flat)"
grep -q "checkpoints in $WORK/flat/ckpt\$" "$WORK/flat/out.log" ||
  { tail -3 "$WORK/flat/out.log"; die "the run does not say where flatckpt keeps its checkpoints"; }
[ -f "$WORK/flat/ckpt/00000010.done" ] && [ -f "$WORK/flat/ckpt/00000020.r1" ] &&
  [ ! -e "$WORK/flat/ckpt/step-00000010" ] || die "flatckpt did not write its own format"

echo "== 1. resume: a new job from flatckpt's step-10 files"
mkdir -p "$WORK/resumed"
cp -r "$WORK/flat/ckpt" "$WORK/flat/metrics.jsonl" "$WORK/resumed/"
rm "$WORK/resumed/ckpt/"00000020.*
timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" $B \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" --set "logging.metrics=$WORK/resumed/metrics.jsonl" \
  --set logging.interval=5 --set "$(FLAT resumed)" >"$WORK/resumed/out.log" 2>&1 ||
  { cat "$WORK/resumed/out.log"; die "the resumed run failed"; }
grep -q "resumed at step 10" "$WORK/resumed/out.log" ||
  { cat "$WORK/resumed/out.log"; die "the run did not resume at step 10"; }
$PY "$HERE/ckpt_same_losses.py" "$WORK" || die "losses differ"

echo "== 2. export through the reader"
"$LOOM" export "$WORK/ours" --format safetensors "$WORK/ours.safetensors" >"$WORK/e.log" 2>&1 ||
  { cat "$WORK/e.log"; die "export of checkpoint.so's run failed"; }
"$LOOM" export "$WORK/flat/ckpt" --checkpoint flatckpt --format safetensors \
  "$WORK/flat.safetensors" >"$WORK/e.log" 2>&1 || { cat "$WORK/e.log"; die "export --checkpoint flatckpt failed"; }
cat "$WORK/e.log"
grep -q "(step 20, dp 2 x tp 1 x pp 1)" "$WORK/e.log" || die "not step 20 of a dp 2 run"
$PY "$TESTLIB/check_export.py" same "$WORK/ours.safetensors" \
  "$WORK/flat.safetensors" || die "flatckpt's export differs from checkpoint.so's"
# --config: the run's config names the plugin and its options (the reader finds dir itself)
$PY "$HERE/ckpt_flat_config.py" "$LOOM_SRC/configs/tiny.json" "$WORK/flat.json" "$WORK/flat/ckpt"
"$LOOM" export "$WORK/flat" --config "$WORK/flat.json" --format llmc "$WORK/flat.bin" \
  >"$WORK/e.log" 2>&1 || { cat "$WORK/e.log"; die "export --config failed"; }
"$LOOM" export "$WORK/ours" --format llmc "$WORK/ours.bin" >"$WORK/e.log" 2>&1 || die "llmc export"
cmp "$WORK/ours.bin" "$WORK/flat.bin" || die "llm.c files differ"
echo "export: flatckpt's safetensors and llm.c files equal checkpoint.so's, bitwise"
# checkpoint.so's reader does not take flatckpt's files for its own; flatckpt built without
# the reader slots (a plugin from before ABI 1.6) is refused by name
if "$LOOM" export "$WORK/flat" --format llmc "$WORK/x.bin" >"$WORK/e.log" 2>&1; then
  die "checkpoint.so's reader opened flatckpt's files"
fi
grep -q "no checkpoint there" "$WORK/e.log" || { cat "$WORK/e.log"; die "no reason given"; }
if "$LOOM" export "$WORK/flat" --checkpoint flatckpt_noreader --format llmc "$WORK/x.bin" \
    >"$WORK/e.log" 2>&1; then
  die "a plugin without the reader slots was read"
fi
grep -q "checkpoint plugin 'flatckpt_noreader' .* has no reader" "$WORK/e.log" ||
  { cat "$WORK/e.log"; die "the refusal does not name the missing reader"; }
cat "$WORK/e.log"

echo "== 3. loom compare and loom report"
"$LOOM" compare "$WORK/ours" "$WORK/flat" "$WORK/resumed" --out "$WORK/cmp" --expect-equal 0 \
  >"$WORK/c.log" 2>&1 || { cat "$WORK/c.log"; die "loom compare failed or found a difference"; }
grep -q "flat equals ours" "$WORK/c.log" && grep -q "resumed equals ours" "$WORK/c.log" ||
  { cat "$WORK/c.log"; die "no equality verdict"; }
"$LOOM" report "$WORK/flat" >"$WORK/r.log" 2>&1 || { cat "$WORK/r.log"; die "loom report failed"; }
[ -s "$WORK/flat/report/report.html" ] || die "no report.html"
echo "PASS"
