#!/bin/bash
# ctest: sanitized
# Checkpoints written before the global view (format 2: flat items per tp rank,
# "params@tp1of2") still resume: a tp 2 run's step-10 checkpoint rewritten as format 2
# (ckpt_format2.py) continues under tp 2 bitwise like the straight run, and a 1-rank one
# continues on 2 ranks under zero1 (format 2's data-parallel resharding) within the
# equivalence tolerances. What format 2 cannot do is refused before training, naming the
# combination and the reason: the tp 2 checkpoint under tp 4.
# A checkpoint plugin without the global view (the fixture ckpt_per_rank.so: checkpoint.so's
# sources without LOOM_CKPT_CAP_GLOBAL_VIEW, as any plugin before ABI 1.4) gets the per-rank
# layout: it trains and resumes under tp 2 bitwise like checkpoint.so, refuses tp 4 by name, and
# refuses a global-view checkpoint by name.
# Under the sanitizers (LOOM_SANITIZED=1) 7 of the 9 runs: the per-rank plugin's own tp 2
# resume and tp 4 refusal are left out, as they take format 2's code paths again (items per tp
# rank loaded as they are; the host's tp-size refusal of per-rank items); its save (the host's
# per-rank items, bitwise like checkpoint.so's) and its refusal of the global view stay.
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
TP2='{"plugin":"tensor_parallel","size":2}'
resume_run() { # resume_run NRANKS NAME MICRO PLUGINS [extra --set ...]
  local n=$1 r=$2 b=$3 plugins=$4
  shift 4
  "${REFUSED_RUN[@]}" timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" $H --set train.micro_batch_size=$b \
    --set "parallel=$plugins" --set "logging.metrics=$WORK/$r/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$r/ckpt\",\"every\":10}" \
    "$@" >"$WORK/$r/out.log" 2>&1
}
old_ckpt() { # old_ckpt SRC NAME: SRC's step 10 as format 2, the only checkpoint of NAME
  rm -rf "$WORK/$2" && mkdir -p "$WORK/$2/ckpt"
  /usr/bin/python3 "$TESTLIB/ckpt_format2.py" \
    "$WORK/$1/ckpt/step-00000010" "$WORK/$2/ckpt/step-00000010" || die "ckpt_format2.py failed"
  printf 'step-00000010' >"$WORK/$2/ckpt/latest"
  grep -q '"loom-checkpoint-2"' "$WORK/$2/ckpt/step-00000010/manifest.json" || die "not format 2"
}
run 2 tp2 $H --set train.micro_batch_size=8 --set "parallel=[$TP2]" \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/tp2/ckpt\",\"every\":10}"
old_ckpt tp2 tp2_old
grep -q '"params@tp1of2"' "$WORK/tp2_old/ckpt/step-00000010/manifest.json" || die "no per-rank item"
resume_run 2 tp2_old 8 "[$TP2]" || { cat "$WORK/tp2_old/out.log"; die "format 2 resume failed"; }
grep -q "resumed at step 10" "$WORK/tp2_old/out.log" || die "tp2_old did not resume at step 10"
echo "== format 2, tp 2 -> tp 2: bitwise"
compare tp2_old tp2 --bitwise --steps 11:20

run 1 one $H --set train.micro_batch_size=8 --set 'parallel=[]' \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/one/ckpt\",\"every\":10}"
old_ckpt one one_old
resume_run 2 one_old 4 '[{"plugin":"zero1"}]' ||
  { cat "$WORK/one_old/out.log"; die "format 2, 1 rank -> zero1 dp 2 failed"; }
echo "== format 2, 1 rank -> zero1 dp 2: within the equivalence tolerances"
compare one_old one --steps 11:20

old_ckpt tp2 tp4_old
if resume_run 4 tp4_old 8 '[{"plugin":"tensor_parallel","size":4}]'; then
  die "a format-2 tp 2 checkpoint resumed under tp 4 was not refused"
fi
grep -q "tensor-parallel size differs: it was saved with tp 2, this run has tp 4 (its items are per tp rank — written before the global view" \
  "$WORK/tp4_old/out.log" || { cat "$WORK/tp4_old/out.log"; die "unclear refusal"; }
grep -q "step    11" "$WORK/tp4_old/out.log" && die "tp4_old trained before refusing"
echo "refused: $(grep -m1 'tensor-parallel size differs' "$WORK/tp4_old/out.log")"

PR=$LOOM_BUILD/tests/fixtures/ckpt_per_rank.so
[ -f "$PR" ] || die "$PR is not built"
ckpt_pr() { echo "checkpoint={\"plugin\":\"$PR\",\"dir\":\"$WORK/$1/ckpt\",\"every\":10}"; }
run 2 tp2_pr $H --set train.micro_batch_size=8 --set "parallel=[$TP2]" --set "$(ckpt_pr tp2_pr)"
grep -q '"params@tp1of2"' "$WORK/tp2_pr/ckpt/step-00000010/manifest.json" ||
  die "ckpt_per_rank.so: no per-rank item params@tp1of2"
grep -q '"items"' "$WORK/tp2_pr/ckpt/step-00000010/manifest.json" && die "per-rank says global"
echo "== per-rank plugin, tp 2, 20 steps vs checkpoint.so's: bitwise"
compare tp2_pr tp2 --bitwise
[ "${LOOM_SANITIZED:-0}" != 1 ] || { echo "resume_format2 (sanitized build): the per-rank" \
  "plugin's resume and tp 4 refusal left to the normal build"; PR_RESUME=0; }
for cfg in "2 tp2_pr_resumed 2" "4 tp4_pr_refused 4"; do
  [ "${PR_RESUME:-1}" = 1 ] || break
  read -r n r tp <<<"$cfg"
  rm -rf "$WORK/$r" && mkdir -p "$WORK/$r/ckpt"
  cp -r "$WORK/tp2_pr/ckpt/step-00000010" "$WORK/$r/ckpt/"
  printf 'step-00000010' >"$WORK/$r/ckpt/latest"
  resume_run "$n" "$r" 8 "[{\"plugin\":\"tensor_parallel\",\"size\":$tp}]" --set "$(ckpt_pr "$r")"
  echo "rc=$?" >>"$WORK/$r/out.log"
done
if [ "${PR_RESUME:-1}" = 1 ]; then
  grep -q "rc=0" "$WORK/tp2_pr_resumed/out.log" ||
    { cat "$WORK/tp2_pr_resumed/out.log"; die "per-rank resume failed"; }
  echo "== per-rank plugin, tp 2 -> tp 2: bitwise"
  compare tp2_pr_resumed tp2 --bitwise --steps 11:20
  grep -q "rc=0" "$WORK/tp4_pr_refused/out.log" && die "per-rank tp 2 -> tp 4 was not refused"
  grep -q "tensor-parallel size differs: it was saved with tp 2, this run has tp 4" \
    "$WORK/tp4_pr_refused/out.log" || { cat "$WORK/tp4_pr_refused/out.log"; die "unclear refusal"; }
  echo "refused: $(grep -m1 'tensor-parallel size differs' "$WORK/tp4_pr_refused/out.log")"
fi
# a global-view checkpoint given to the per-rank plugin
rm -rf "$WORK/global_pr" && mkdir -p "$WORK/global_pr/ckpt"
cp -r "$WORK/tp2/ckpt/step-00000010" "$WORK/global_pr/ckpt/"
printf 'step-00000010' >"$WORK/global_pr/ckpt/latest"
if resume_run 2 global_pr 8 "[$TP2]" --set "$(ckpt_pr global_pr)"; then
  die "the per-rank plugin loaded a global-view checkpoint"
fi
grep -q "its items are slices of global tensors (saved with dp 1, tp 2, pp 1), and checkpoint plugin 'checkpoint' (ABI 1\.[0-9]*) cannot load that layout" \
  "$WORK/global_pr/out.log" || { cat "$WORK/global_pr/out.log"; die "unclear refusal"; }
echo "refused: $(grep -m1 'cannot load that layout' "$WORK/global_pr/out.log")"
echo "resume_format2: format-2 checkpoints resume (tp 2 bitwise, 1 rank -> zero1 dp 2), tp 2 -> 4" \
  "refused; a plugin without the global view keeps the per-rank layout"
