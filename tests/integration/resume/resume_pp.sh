#!/bin/bash
# Resume under pipeline parallel: 20 steps straight vs 10 steps + checkpoint + a new process
# resuming + 10 steps must give bitwise identical losses, grad norms and final parameters on the
# same mesh: pp 2 with 1f1b (2 ranks) and pp 2 x dp 2 with ddp (4 ranks). Each stage saves its
# own tensors ("params/h.1.mlp.fc.weight", ...; the global view). Then the pp 2 checkpoint
# continues under pp 4 (another stage split) like the pp 2 run, within the equivalence
# tolerances (resume_reshard.sh covers the other layouts).
. "$(dirname "$0")/../lib/lib.sh"
make_data
PP2='{"plugin":"pipeline","size":2,"schedule":"1f1b"}'
resume_run() { # resume_run NRANKS NAME PLUGINS [extra --set ...]
  local n=$1 r=$2 plugins=$3
  shift 3
  timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set train.micro_batch_size=2 \
    --set train.grad_accum_steps=2 --set "parallel=$plugins" \
    --set "logging.metrics=$WORK/$r/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$r/ckpt\",\"every\":10}" \
    "$@" >"$WORK/$r/out.log" 2>&1
}
for cfg in "2 pp2 [$PP2]" "4 pp2_dp2 [$PP2,{\"plugin\":\"ddp\"}]"; do
  read -r n name plugins <<<"$cfg"
  s=${name}_straight r=${name}_resumed
  run "$n" $s --set train.micro_batch_size=2 --set train.grad_accum_steps=2 \
    --set "parallel=$plugins" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$s/ckpt\",\"every\":10}"
  grep -q '"params/h.1.mlp.fc.weight"' "$WORK/$s/ckpt/step-00000010/manifest.json" ||
    die "$name: no params/h.1.mlp.fc.weight item in the checkpoint"
  mkdir -p "$WORK/$r/ckpt"
  cp -r "$WORK/$s/ckpt/step-00000010" "$WORK/$r/ckpt/"
  printf 'step-00000010' >"$WORK/$r/ckpt/latest"
  resume_run "$n" $r "$plugins" || { cat "$WORK/$r/out.log"; die "$name resume run failed"; }
  grep -q "resumed at step 10" "$WORK/$r/out.log" || die "$name run did not resume at step 10"
  echo "== $name ($n ranks): resumed vs straight, steps 11-20"
  compare $r $s --bitwise --steps 11:20
done
# another pipeline size on the pp 2 checkpoint: each stage of pp 4 reads its units' tensors
mkdir -p "$WORK/pp_changed/ckpt"
cp -r "$WORK/pp2_straight/ckpt/step-00000010" "$WORK/pp_changed/ckpt/"
printf 'step-00000010' >"$WORK/pp_changed/ckpt/latest"
resume_run 4 pp_changed '[{"plugin":"pipeline","size":4,"schedule":"gpipe"}]' ||
  { cat "$WORK/pp_changed/out.log"; die "the pp 2 checkpoint did not resume under pp 4"; }
grep -q "resumed at step 10" "$WORK/pp_changed/out.log" || die "pp 4 did not resume at step 10"
echo "== pp 2 checkpoint resumed under pp 4 vs pp 2 straight, steps 11-20"
compare pp_changed pp2_straight --steps 11:20 --state
echo "resume_pp: bitwise identical continuation under pp 2 and pp 2 x dp 2; pp 2 -> pp 4"
