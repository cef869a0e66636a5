#!/bin/bash
# the README's scripts and docs: the normal build only (label readme); trains the 3.3M-
# parameter model (44 s of CPU, the most of any test), so it runs alone
# ctest: name=readme.readme_ab labels=readme serial
# The README's A/B recipe, as the README orders it: after a main job (tools/main_job.sh, short),
# run the README's own A/B block — extracted from README.md, so the docs and this test cannot
# drift — with fewer steps, in a scratch copy of the repository layout. The block is one
# `loom compare` command: both runs must train from step 1 (not resume the main job's
# checkpoint), in their own run directories, and --expect-equal must pass.
# Needs: LOOM_BUILD, LOOM_SRC; Debian's fortunes (skipped without them).
set -u
. "$(dirname "$0")/../lib/lib.sh"
[ -d /usr/share/games/fortunes ] || { echo "SKIP: /usr/share/games/fortunes not installed"; exit 77; }
ab_steps=8
repo=$WORK/repo
mkdir -p "$repo"
ln -s "$LOOM_SRC/configs" "$LOOM_SRC/tests" "$LOOM_SRC/tools" "$repo/"
ln -s "$LOOM_BUILD" "$repo/build"

# 1. a main job (40 steps): data/fortunes and runs/fortunes_ddp, as the README's command 1 leaves them
LOOM_NO_SETUP=1 LOOM_BUILD_DIR="$LOOM_BUILD" LOOM_WORK_DIR="$repo" \
  timeout 600 bash "$LOOM_SRC/tools/main_job.sh" -- --set train.steps=40 \
  --set lr_schedule.warmup_steps=5 --set sample.tokens=0 > "$WORK/main_job.log" 2>&1 ||
  { cat "$WORK/main_job.log"; die "the main job failed"; }
[ -d "$repo/runs/fortunes_ddp/ckpt" ] || die "the main job left no checkpoint in runs/fortunes_ddp/ckpt"

# 2. the README's A/B block, with ab_steps steps instead of 100 (warm-up shortened to fit)
awk '/readme_ab.sh runs the block below/ { want = 1; next }
     want && /^```sh/ { inside = 1; next }
     inside && /^```/ { exit }
     inside { print }' "$LOOM_SRC/README.md" > "$WORK/ab_readme.sh"
grep -q "loom compare" "$WORK/ab_readme.sh" || die "README.md: the A/B block (after its marker comment) was not found"
grep -q -- "--steps 100" "$WORK/ab_readme.sh" || die "README.md: the A/B block no longer says --steps 100"
sed "s/--steps 100/--steps $ab_steps --set lr_schedule.warmup_steps=2 --set sample.tokens=0/" \
  "$WORK/ab_readme.sh" > "$WORK/ab.sh"
echo "== the README's A/B block (steps $ab_steps):"
cat "$WORK/ab.sh"
(cd "$repo" && timeout 600 bash -e "$WORK/ab.sh") > "$WORK/ab.log" 2>&1 ||
  { cat "$WORK/ab.log"; die "the README's A/B recipe failed after the main job"; }
cat "$WORK/ab.log"
grep -q "fortunes_zero3 equals fortunes_ddp within 1e-05" "$WORK/ab.log" || die "no equality verdict"

# 3. both A/B runs trained steps 1..ab_steps themselves: none resumed the main job's checkpoint
logs=("$repo/runs/compare/fortunes_ddp/train.log" "$repo/runs/compare/fortunes_zero3/train.log")
cat "${logs[@]}" > "$WORK/runs.log" || die "the A/B runs' logs are not in runs/compare/NAME/train.log"
grep -q "resumed at step\|nothing left to train" "$WORK/runs.log" &&
  { cat "$WORK/runs.log"; die "an A/B run resumed a checkpoint instead of training from step 1"; }
n=$(grep -c "finished at step $ab_steps:" "$WORK/runs.log")
[ "$n" -eq 2 ] || { cat "$WORK/runs.log"; die "expected 2 runs finishing at step $ab_steps, saw $n"; }
for f in plots/loss.png plots/loss.svg plots/memory.png compare.html; do
  [ -s "$repo/runs/compare/$f" ] || die "loom compare wrote no runs/compare/$f"
done
steps=$(sed -n 's/^{"step": *\([0-9]*\),.*"loss".*/\1/p' "$repo/runs/fortunes_ddp/metrics.jsonl" | tail -n 1)
[ "$steps" = 40 ] || die "the main job's metrics were changed by the A/B runs (last step $steps, expected 40)"
echo "ok: the README's A/B command ran after the main job: both runs trained $ab_steps steps, equal within 1e-5"
