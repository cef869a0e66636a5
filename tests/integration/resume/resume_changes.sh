#!/bin/bash
# ctest: sanitized
# Resume must never change a run silently (issue 7, section 3). Each case of the issue:
#  - raising train.steps: the lr jump is warned with the way out; lr_schedule.decay_steps
#    extends the run with the lr continuing at min_lr (no jump);
#  - a 2-rank checkpoint resumed on 1 rank: global batch and world size reported old -> new;
#  - seq_len 64 -> 32: the token stream continues exactly (no token read twice or skipped),
#    proven by the per-sequence trace of LOOM_DATA_TRACE;
#  - another model key (model.padded_vocab_size too, also by loom check) or vocabulary: refused
#    before training, naming old and new values.
# Under the sanitizers (LOOM_SANITIZED=1) 12 of the 16 runs, every code path once: the
# "nothing left to train" rerun is left to the reformatted-vocabulary one (it ends the same
# way), the decay_steps extension to the 2 -> 1 rank resume (the same report lines, the lr's
# values per step are numerics), model.n_head's refusal to model.padded_vocab_size's (one loop
# over the model keys), and the 2 -> 1 rank resume starts from the zero1 run's last checkpoint
# instead of a 2-rank run of its own.
. "$(dirname "$0")/../lib/lib.sh"
make_data
SAN=${LOOM_SANITIZED:-0}

# resume NRANKS NAME LOG [--set ...]: train again in $WORK/NAME (its checkpoint dir), into LOG
resume() {
  local n=$1 name=$2 log=$3
  shift 3
  # the refused resumes end at once (REFUSED_RUN: no 2 s of mpirun's kill grace each)
  "${REFUSED_RUN[@]}" timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train \
    "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set logging.interval=5 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":0}" \
    "$@" >"$WORK/$name/$log" 2>&1
}
lr_of() { # lr_of NAME STEP: the lr step STEP ran at (metrics.jsonl)
  /usr/bin/python3 "$HERE/lr_of.py" "$WORK/$1/metrics.jsonl" "$2" | tail -1
}
fork() { rm -rf "$WORK/$2"; cp -r "$WORK/$1" "$WORK/$2"; } # a copy of a finished run

echo "== train.steps 20 -> 40: a run that ended at min_lr"
run 1 base
grep -q "step-00000020" "$WORK/base/ckpt/latest" || die "base run saved no step 20"
if [ "$SAN" != 1 ]; then
  fork base again
  resume 1 again out2.log || { cat "$WORK/again/out2.log"; die "rerun failed"; }
  grep -q "nothing left to train.*--set train.steps=40 --set lr_schedule.decay_steps=20" \
    "$WORK/again/out2.log" || { cat "$WORK/again/out2.log"; die "no way to extend is named"; }
fi

fork base longer
resume 1 longer out2.log --set train.steps=40 || die "resume with train.steps=40 failed"
grep -q "train.steps: 20 -> 40" "$WORK/longer/out2.log" &&
  grep -q "warning: the lr jumps: step 21 runs at 0.000569" "$WORK/longer/out2.log" &&
  grep -q "add --set lr_schedule.decay_steps=20" "$WORK/longer/out2.log" ||
  { cat "$WORK/longer/out2.log"; die "the lr jump of raising train.steps is not reported"; }

if [ "$SAN" != 1 ]; then
  fork base extended
  resume 1 extended out2.log --set train.steps=40 --set lr_schedule.decay_steps=20 ||
    die "resume with decay_steps failed"
  grep -q "the lr jumps" "$WORK/extended/out2.log" &&
    { cat "$WORK/extended/out2.log"; die "decay_steps=20 still makes the lr jump"; }
  grep -q "lr: step 21 runs at 0.0001; the checkpoint's step 20 ran at 0.0001" \
    "$WORK/extended/out2.log" || { cat "$WORK/extended/out2.log"; die "lr line missing"; }
  for s in 20 21 30 40; do
    lr=$(lr_of extended $s)
    [ "$lr" = "0.0001" ] || die "extended run: step $s ran at lr '$lr', expected min_lr 0.0001"
  done
  echo "extended: lr 0.0001 at steps 20, 21, 30, 40 (min_lr, no jump)"
fi

two_to_one() { # two_to_one SRC: SRC's last checkpoint (2 ranks, 4 sequences each), on 1 rank
  echo "== 2 ranks ($1) -> 1 rank: the global batch halves, reported"
  fork "$1" one
  resume 1 one out2.log --set train.steps=30 --set lr_schedule.decay_steps=20 ||
    { cat "$WORK/one/out2.log"; die "resume on 1 rank failed"; }
  grep -q "global batch: 8 -> 4 sequences" "$WORK/one/out2.log" &&
    grep -q "world size: 2 -> 1 (dp 2 -> 1" "$WORK/one/out2.log" ||
    { cat "$WORK/one/out2.log"; die "the world size / global batch change is not reported"; }
}
if [ "$SAN" != 1 ]; then
  run 2 two
  two_to_one two
fi

echo "== resharding: a 2-rank zero1 checkpoint (sharded Adam state) resumed on 1 rank, same"
echo "   global batch, continues like the 2-rank run (the data position is global, in tokens)"
run 2 z2 --set "parallel=[{\"plugin\":\"zero1\"}]" \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/z2/ckpt\",\"every\":10}"
rm -rf "$WORK/z1" && mkdir -p "$WORK/z1/ckpt"
cp -r "$WORK/z2/ckpt/step-00000010" "$WORK/z1/ckpt/"
head -n 10 "$WORK/z2/metrics.jsonl" >"$WORK/z1/metrics.jsonl"
resume 1 z1 out.log --set train.micro_batch_size=8 ||
  { cat "$WORK/z1/out.log"; die "resume on 1 rank failed"; }
grep -q "world size: 2 -> 1" "$WORK/z1/out.log" && ! grep -q "global batch:" "$WORK/z1/out.log" ||
  { cat "$WORK/z1/out.log"; die "world size change not reported (or a global batch change)"; }
compare z1 z2 --rtol 1e-5 --steps 11:20
[ "$SAN" != 1 ] || two_to_one z2 # the sanitized build's 2 -> 1 rank resume: no run "two"

echo "== seq_len 64 -> 32: no token read twice, none skipped"
rm -f "$WORK/trace.txt"
LOOM_DATA_TRACE=$WORK/trace.txt run 1 seq --set train.steps=10 --set lr_schedule.decay_steps=20
LOOM_DATA_TRACE=$WORK/trace.txt resume 1 seq out2.log --set train.steps=20 \
  --set lr_schedule.decay_steps=20 --set train.seq_len=32 ||
  { cat "$WORK/seq/out2.log"; die "resume with seq_len 32 failed"; }
grep -q "train.seq_len: 64 -> 32 (the data continues at the same token" "$WORK/seq/out2.log" ||
  { cat "$WORK/seq/out2.log"; die "the seq_len change is not reported"; }
/usr/bin/python3 "$HERE/check_token_stream.py" "$WORK/trace.txt" || die "the token stream is not continuous"

echo "== optimizer, seed and data files: reported old -> new"
fork base opt
mkdir -p "$WORK/moved"
cp "$WORK/data/train_000.bin" "$WORK/moved/"
resume 1 opt out2.log --set train.steps=25 --set lr_schedule.decay_steps=20 \
  --set optimizer.weight_decay=0.1 --set optimizer.betas=[0.8,0.95] --set train.seed=7 \
  --set "data.train=$WORK/moved/train_*.bin" || { cat "$WORK/opt/out2.log"; die "resume failed"; }
for want in "optimizer.weight_decay: 0 -> 0.1" "optimizer.betas\[0\]: 0.9 -> 0.8" \
    "train.seed: 1337 -> 7" "data.train: .* (the saved position's shard is in the new data"; do
  grep -q "$want" "$WORK/opt/out2.log" || { cat "$WORK/opt/out2.log"; die "not reported: $want"; }
done
fork base newdata
resume 1 newdata out2.log --set train.steps=25 --set lr_schedule.decay_steps=20 \
  --set "data.train=$WORK/data/val_*.bin" || { cat "$WORK/newdata/out2.log"; die "resume failed"; }
grep -q "warning: the checkpoint's data position .* is not in data.train" \
  "$WORK/newdata/out2.log" || { cat "$WORK/newdata/out2.log"; die "lost position not warned"; }
if "$LOOM" check "$LOOM_SRC/configs/tiny.json" --set lr_schedule.decay_steps=1 \
    >"$WORK/check.log" 2>&1; then die "decay_steps < warmup_steps accepted"; fi
grep -q "decay_steps: expected 0 (= train.steps) or >= warmup_steps (2), got 1" "$WORK/check.log" ||
  { cat "$WORK/check.log"; die "decay_steps error not named"; }

echo "== another model or vocabulary: refused before training"
if [ "$SAN" != 1 ]; then
  fork base heads
  if resume 1 heads out2.log --set model.n_head=4; then die "model.n_head 2 -> 4 was accepted"; fi
  grep -q "model.n_head was 2, this run has 4" "$WORK/heads/out2.log" ||
    { cat "$WORK/heads/out2.log"; die "the model change is not named"; }
  grep -q "^step " "$WORK/heads/out2.log" && die "it trained before refusing"
fi
fork base padded # another padding of the same vocabulary: wte's row count; check refuses it too
if resume 1 padded out2.log --set model.padded_vocab_size=320; then
  die "model.padded_vocab_size 256 -> 320 was accepted"; fi
grep -q "model.padded_vocab_size was 256, this run has 320" "$WORK/padded/out2.log" ||
  { cat "$WORK/padded/out2.log"; die "the padding change is not named"; }
grep -q "^step " "$WORK/padded/out2.log" && die "it trained before refusing"
if "$LOOM" check "$LOOM_SRC/configs/tiny.json" --set model.padded_vocab_size=320 \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/padded/ckpt\"}" \
    >"$WORK/check.log" 2>&1; then die "loom check accepted another padding"; fi
grep -q "model.padded_vocab_size was 256, this run has 320" "$WORK/check.log" ||
  { cat "$WORK/check.log"; die "loom check does not name the padding change"; }
/usr/bin/python3 "$HERE/check_padded_recorded.py" "$WORK/base/ckpt/step-00000020/manifest.json" ||
  die "the checkpoint does not record model.padded_vocab_size"
fork base vocab
printf '{"type": "byte", "vocab_size": 256, "_note": "another vocabulary"}\n' >"$WORK/vocab2.json"
if resume 1 vocab out2.log --set "data.vocab=$WORK/vocab2.json"; then
  die "another vocabulary was accepted"; fi
grep -q "the vocabulary differs" "$WORK/vocab/out2.log" ||
  { cat "$WORK/vocab/out2.log"; die "the vocabulary change is not named"; }
# the same vocabulary written differently is the same vocabulary
printf '{ "vocab_size" : 256,\n  "type":"byte" }' >"$WORK/vocab3.json"
resume 1 vocab out3.log --set "data.vocab=$WORK/vocab3.json" ||
  { cat "$WORK/vocab/out3.log"; die "a reformatted vocabulary was refused"; }
# at step 20 of 20: the sanitized build's "nothing left to train" (its rerun "again" skipped)
[ "$SAN" != 1 ] || grep -q "nothing left to train.*--set train.steps=40" "$WORK/vocab/out3.log" ||
  { cat "$WORK/vocab/out3.log"; die "no way to extend is named"; }
echo "resume_changes: every change refused or reported"
