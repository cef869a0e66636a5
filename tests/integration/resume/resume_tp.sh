#!/bin/bash
# ctest: labels=integration,asan-full
# Resume under tensor parallel: 20 steps straight vs 10 steps + checkpoint + a new process
# resuming + 10 steps must give bitwise identical losses, grad norms and final parameters on the
# same mesh: tp 2 (2 ranks) and dp 2 x tp 2 with ddp (4 ranks). Each tp rank saves its slice of
# each global tensor ("params/h.0.attn.qkv.weight", split_index 1 of split_size 2; the global
# view). Then the tp 2 checkpoint continues under tp 4 like the tp 2 run, within the
# equivalence tolerances (resume_reshard.sh covers the other layouts).
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
TP2='{"plugin":"tensor_parallel","size":2}'
resume_run() { # resume_run NRANKS NAME MICRO PLUGINS [extra --set ...]
  local n=$1 r=$2 b=$3 plugins=$4
  shift 4
  timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" $H --set train.micro_batch_size=$b \
    --set "parallel=$plugins" --set "logging.metrics=$WORK/$r/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$r/ckpt\",\"every\":10}" \
    "$@" >"$WORK/$r/out.log" 2>&1
}
for cfg in "2 tp2 8 [$TP2]" "4 ddp2_tp2 4 [$TP2,{\"plugin\":\"ddp\"}]"; do
  read -r n name b plugins <<<"$cfg"
  s=${name}_straight r=${name}_resumed
  run "$n" $s $H --set train.micro_batch_size=$b --set "parallel=$plugins" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$s/ckpt\",\"every\":10}"
  /usr/bin/python3 "$HERE/check_tp_slices.py" "$WORK/$s/ckpt/step-00000010/manifest.json" ||
    die "$name: no tp 2 slices of params/h.0.attn.qkv.weight in the checkpoint"
  mkdir -p "$WORK/$r/ckpt"
  cp -r "$WORK/$s/ckpt/step-00000010" "$WORK/$r/ckpt/"
  printf 'step-00000010' >"$WORK/$r/ckpt/latest"
  resume_run "$n" $r $b "$plugins" || { cat "$WORK/$r/out.log"; die "$name resume run failed"; }
  grep -q "resumed at step 10" "$WORK/$r/out.log" || die "$name run did not resume at step 10"
  echo "== $name ($n ranks): resumed vs straight, steps 11-20"
  compare $r $s --bitwise --steps 11:20
done
# another tensor-parallel size on the tp 2 checkpoint: each tp 4 rank reads its quarter
mkdir -p "$WORK/tp_changed/ckpt"
cp -r "$WORK/tp2_straight/ckpt/step-00000010" "$WORK/tp_changed/ckpt/"
printf 'step-00000010' >"$WORK/tp_changed/ckpt/latest"
resume_run 4 tp_changed 8 '[{"plugin":"tensor_parallel","size":4}]' ||
  { cat "$WORK/tp_changed/out.log"; die "the tp 2 checkpoint did not resume under tp 4"; }
grep -q "resumed at step 10" "$WORK/tp_changed/out.log" || die "tp 4 did not resume at step 10"
echo "== tp 2 checkpoint resumed under tp 4 vs tp 2 straight, steps 11-20"
compare tp_changed tp2_straight --steps 11:20 --state
echo "resume_tp: bitwise identical continuation under tp 2 and dp 2 x tp 2; tp 2 -> tp 4"
