#!/bin/bash
# A checkpoint's data position must point into the data it was read from, and follow from the
# steps and batch settings that led to it (#23, item 3):
#  1. a resume after seq_len 64 -> 32, then a second resume with nothing changed: accepted (the
#     second continues the segment the first started);
#  2. the shard the position points into rewritten in place with the same name and size but
#     other tokens: refused before training, naming the file and both fingerprints (before:
#     resumed silently into other text);
#  3. the position edited in the manifest, its checksum recomputed: refused as corrupt, the
#     position it should be named beside the recorded one (before: resumed at the edited token).
. "$(dirname "$0")/../lib/lib.sh"
make_data

# train NAME STEPS LOG [--set ...]: (re)train $WORK/NAME with a checkpoint every 3 steps
train() {
  local name=$1 steps=$2 log=$3
  shift 3
  mkdir -p "$WORK/$name"
  "${REFUSED_RUN[@]}" timeout 300 mpirun -np 2 --bind-to none "$LOOM" train \
    "$LOOM_SRC/configs/tiny.json" --set "data.train=$WORK/data/train_*.bin" \
    --set "data.val=$WORK/data/val_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
    --set "train.steps=$steps" --set lr_schedule.decay_steps=12 \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set logging.interval=3 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":3,\"keep\":0}" \
    "$@" > "$WORK/$name/$log" 2>&1
}
# latest NAME STEP: make STEP the checkpoint a resume takes
latest() { printf 'step-%08d' "$2" > "$WORK/$1/ckpt/latest"; rm -rf "$WORK/$1"/ckpt/step-000000{07,08,09,10,11,12}; }

echo "== 1. seq_len 64 -> 32 at step 6, then a plain resume at step 9"
train seg 6 a.log || { cat "$WORK/seg/a.log"; die "the first run failed"; }
train seg 9 b.log --set train.seq_len=32 || { cat "$WORK/seg/b.log"; die "the seq_len resume failed"; }
grep -q "train.seq_len: 64 -> 32" "$WORK/seg/b.log" || die "the seq_len change was not reported"
train seg 12 c.log --set train.seq_len=32 ||
  { cat "$WORK/seg/c.log"; die "a plain resume after a changed seq_len was refused"; }
grep -q "resumed at step 9" "$WORK/seg/c.log" || die "the third run did not resume at step 9"
python3 - "$WORK/seg/ckpt/step-00000012/manifest.json" <<'PY' || die "the segment record"
import json, sys
d = json.load(open(sys.argv[1]))["meta"]["data"]
assert d["segment"]["step"] == 6, d["segment"]          # started by the seq_len change
assert d["fingerprint"].startswith("crc64:") and len(d["fingerprint"]) == 22, d["fingerprint"]
print("ok: segment since step 6", d["segment"], d["fingerprint"])
PY

echo "== 2. the position's shard rewritten with the same name and size, other tokens"
rm -rf "$WORK/fp" && mkdir -p "$WORK/fp"
train fp 6 a.log || { cat "$WORK/fp/a.log"; die "the run failed"; }
latest fp 6
shard=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['meta']['data']['shard'])" \
  "$WORK/fp/ckpt/step-00000006/manifest.json")
cp "$shard" "$WORK/shard.orig"
python3 - "$shard" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
body = b[1024:]
n = len(body) // 2
# the same tokens, their two halves swapped: same size, same vocabulary, other text
half = (n // 2) * 2
b[1024:] = body[half:] + body[:half]
open(p, 'wb').write(b)
PY
train fp 9 b.log && { cat "$WORK/fp/b.log"; die "a rewritten shard was resumed into"; }
cat "$WORK/fp/b.log" | grep -m1 "error" || true
grep -q "has the saved shard's name and size but other content: fingerprint crc64:[0-9a-f]\{16\}, the checkpoint recorded crc64:[0-9a-f]\{16\}; restore" \
  "$WORK/fp/b.log" || die "the refusal does not name both fingerprints"
grep -q "^step" "$WORK/fp/b.log" && die "a step ran before the refusal"
cp "$WORK/shard.orig" "$shard"
echo "ok: refused, naming both fingerprints"

echo "== 3. the position edited, the manifest's checksum recomputed"
latest fp 6
python3 - "$WORK/fp/ckpt/step-00000006" <<'PY'
import json, os, sys, zlib
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
m["meta"]["data"]["token"] += 64 * 16          # 16 sequences further than the steps read
text = json.dumps(m, indent=1).encode()
open(os.path.join(d, "manifest.json"), "wb").write(text)
open(os.path.join(d, "manifest.crc32"), "w").write("%08x\n" % zlib.crc32(text))
PY
train fp 9 c.log && { cat "$WORK/fp/c.log"; die "an edited position was resumed from"; }
grep -m1 "error" "$WORK/fp/c.log" || true
grep -q "cannot follow from the recorded batch settings: .* the checkpoint is corrupt" \
  "$WORK/fp/c.log" || die "the edited position was not refused as corrupt"
echo "ok: refused as corrupt"
echo "PASS"
