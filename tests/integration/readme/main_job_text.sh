#!/bin/bash
# the README's scripts and docs, not memory safety: the normal build only (label readme)
# ctest: name=readme.main_job_text labels=readme
# README command 1 on the user's own text (tools/main_job.sh FILES): the main job fits its
# evaluation to the validation split it was given and says so, refuses a text too small to
# evaluate with the real minimum and the --set that runs without evaluation, and its run ends
# with the line that says where the metrics and the checkpoints went.
# Text: /usr/share/common-licenses (Debian's base-files, ~237 KB: one 8 KiB validation block,
# 63 sequences of 128 tokens, where the config's 8 batches x 16 sequences need 128).
# Needs: LOOM_BUILD, LOOM_SRC.
set -u
. "$(dirname "$0")/../lib/lib.sh"
text=/usr/share/common-licenses
[ -d "$text" ] || { echo "SKIP: $text not found"; exit 77; }
main_job() { # main_job LOG TEXT... [-- ARGS]: the main job on 2 ranks, data and runs in $WORK
  local log=$1
  shift
  NP=2 LOOM_NO_SETUP=1 LOOM_BUILD_DIR="$LOOM_BUILD" LOOM_WORK_DIR="$WORK" \
    timeout 600 bash "$LOOM_SRC/tools/main_job.sh" "$@" > "$log" 2>&1
}

# 1. a text too small for one evaluation batch: refused before training, with the minimum
main_job "$WORK/small.log" "$text/GPL-3" -- --set train.steps=2 --set lr_schedule.warmup_steps=1 &&
  { cat "$WORK/small.log"; die "the main job accepted a text with no validation split"; }
grep -q "the text is too small to evaluate" "$WORK/small.log" &&
  grep -q "Give at least 157,697 bytes" "$WORK/small.log" && grep -q -- "--set data.val=" "$WORK/small.log" ||
  { cat "$WORK/small.log"; die "no message with the real minimum for a too-small text"; }
grep -q "^step" "$WORK/small.log" && die "the too-small text was trained on before the refusal"
echo "ok: a too-small text is refused: $(grep -o 'the text is too small.*' "$WORK/small.log" | cut -c1-100)..."

# 2. ~237 KB: evaluation fitted to 3 batches, training runs, the verdict is printed
main_job "$WORK/licenses.log" "$text" -- --set train.steps=20 --set lr_schedule.warmup_steps=5 \
  --set sample.tokens=20 || { cat "$WORK/licenses.log"; die "the main job failed on $text"; }
grep -q "evaluating on 3 batches x 16 sequences instead of 8" "$WORK/licenses.log" ||
  { cat "$WORK/licenses.log"; die "the main job did not fit (or did not report) its evaluation"; }
grep -q "main job: validation loss" "$WORK/licenses.log" || die "no verdict line"
line="loom: finished at step 20: metrics in $WORK/runs/custom/metrics.jsonl, checkpoints in $WORK/runs/custom/ckpt"
grep -qF "$line" "$WORK/licenses.log" || { cat "$WORK/licenses.log"; die "no end-of-run line: $line"; }
[ -s "$WORK/runs/custom/metrics.jsonl" ] && [ -d "$WORK/runs/custom/ckpt" ] ||
  die "the metrics or the checkpoints are not where the end-of-run line says"
echo "ok: $(grep 'evaluating on' "$WORK/licenses.log")"
echo "ok: $(grep 'main job: validation loss' "$WORK/licenses.log")"

# 3. the user's own --set train.eval_batches wins over the fit (and is checked by loom itself)
main_job "$WORK/own.log" "$text" -- --set train.steps=2 --set lr_schedule.warmup_steps=1 \
  --set train.eval_batches=8 && { cat "$WORK/own.log"; die "eval_batches=8 on 63 sequences was accepted"; }
grep -q "evaluating on" "$WORK/own.log" && die "the fit overrode the user's train.eval_batches"
grep -q "data.val holds only 63 sequences" "$WORK/own.log" || { cat "$WORK/own.log"; die "loom's own refusal missing"; }
echo "all checks passed"
