#!/bin/bash
# ctest: sanitized
# A checkpoint is fully verified before a resume uses it (issue 7, sections 3 and 5):
#  - one changed byte in any file of a checkpoint (manifest, its checksum, each rank's shard;
#    several offsets, the private RNG state included) is reported as corruption;
#  - an all-zero RNG state with valid checksums is refused (no xoshiro state is all zero);
#  - a kill after a step directory is published but before `latest` is updated: the next run
#    resumes from the newer step and says so, it never retrains and overwrites it.
# Under the sanitizers (LOOM_SANITIZED=1) one changed byte per file, not up to five: each of the
# refusal's code paths once — the manifest's checksum mismatch, manifest.crc32 not hex (its last
# byte, the newline), a chunk's checksum on rank 0 and the private state's on rank 1 (the other
# offsets repeat those paths at other places; the normal build flips all 19).
. "$(dirname "$0")/../lib/lib.sh"
make_data

resume() { # resume NRANKS NAME LOG [--set ...]
  local n=$1 name=$2 log=$3
  shift 3
  "${REFUSED_RUN[@]}" timeout 120 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set logging.interval=5 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":10}" \
    "$@" >"$WORK/$name/$log" 2>&1
}

echo "== one changed byte anywhere: reported as corruption"
run 2 base --set train.steps=10
step=$WORK/base/ckpt/step-00000010
cases=0
for f in manifest.json manifest.crc32 rank-00000.bin rank-00001.bin; do
  size=$(stat -c %s "$step/$f")
  # the first and the last byte, and three in between (the private state is the shard's end)
  offs="0 $((size / 3)) $((size / 2)) $((size - 20)) $((size - 1))"
  if [ "${LOOM_SANITIZED:-0}" = 1 ]; then
    case $f in
      manifest.json | rank-00000.bin) offs=$((size / 2)) ;; # the manifest's CRC; a chunk's
      *) offs=$((size - 1)) ;; # crc32's newline: not hex; rank 1's private state (its end)
    esac
  fi
  for off in $offs; do
    [ "$off" -ge 0 ] || continue
    rm -rf "$WORK/c"
    mkdir -p "$WORK/c"
    cp -r "$WORK/base/ckpt" "$WORK/c/ckpt"
    /usr/bin/python3 "$HERE/flip_byte.py" "$WORK/c/ckpt/step-00000010/$f" "$off"
    if resume 2 c out.log --set train.steps=20; then
      cat "$WORK/c/out.log"; die "$f byte $off changed: the resume went on"; fi
    grep -q "corrupt" "$WORK/c/out.log" ||
      { cat "$WORK/c/out.log"; die "$f byte $off changed: not reported as corruption"; }
    grep -q "^step " "$WORK/c/out.log" && die "$f byte $off changed: it trained"
    cases=$((cases + 1))
  done
done
echo "$cases corrupted checkpoints, each refused as corrupt"

echo "== an all-zero RNG state with valid checksums: refused"
rm -rf "$WORK/z" && mkdir -p "$WORK/z" && cp -r "$WORK/base/ckpt" "$WORK/z/ckpt"
/usr/bin/python3 "$HERE/zero_rng_state.py" "$WORK/z/ckpt/step-00000010"
if resume 2 z out.log --set train.steps=20; then
  cat "$WORK/z/out.log"; die "an all-zero RNG state was accepted"; fi
grep -q "rank 1's saved random state is all zero" "$WORK/z/out.log" ||
  { cat "$WORK/z/out.log"; die "the all-zero RNG state is not named"; }
grep -q "^step \|resuming from step" "$WORK/z/out.log" &&
  { cat "$WORK/z/out.log"; die "rank 0 went on before the refusal"; }

echo "== killed after publishing step 20, before updating latest"
run 1 k --set train.steps=10
if LOOM_FAULT_CKPT_BEFORE_LATEST=1 resume 1 k kill.log --set train.steps=20; then
  die "the fault did not fire"; fi
[ -f "$WORK/k/ckpt/step-00000020/manifest.json" ] || die "step 20 was not published"
[ "$(cat "$WORK/k/ckpt/latest")" = "step-00000010" ] || die "latest moved: $(cat "$WORK/k/ckpt/latest")"
resume 1 k out3.log --set train.steps=30 || { cat "$WORK/k/out3.log"; die "resume failed"; }
grep -q "latest names step-00000010, but step-00000020 is newer" "$WORK/k/out3.log" &&
  grep -q "resumed at step 20" "$WORK/k/out3.log" ||
  { cat "$WORK/k/out3.log"; die "did not resume from the newer step 20, or silently"; }
[ "$(cat "$WORK/k/ckpt/latest")" = "step-00000030" ] || die "latest is not step 30"
echo "resume_verify: corruption named, zero RNG refused, newest checkpoint used"
