#!/bin/bash
# fp16 dynamic loss scaling end to end (2 ranks, ddp, the tiny model), and bf16 against fp32:
#  - an infinity injected into rank 1's gradient (after the gradient sync, so only rank 1 sees
#    it) at steps 3 and 5 makes every rank skip exactly those steps;
#  - the loss scale each step ran with follows DeepSpeed's DynamicLossScaler (re-implemented
#    below from deepspeed/runtime/fp16/loss_scaler.py): hysteresis 2 absorbs the first overflow,
#    the second halves the scale, loss_scale_window (4 here) clean steps double it again;
#  - a skipped step does not advance the lr schedule (the lr of step k+1 is the lr of step k);
#  - a run resumed from the step-6 checkpoint (taken at the halved scale) continues bitwise;
#  - a scale stuck at min_loss_scale is an error naming the step;
#  - bf16 (8-bit mantissa) trains the tiny model like fp32 does;
#  - bf16 with 16-bit storage resumes bitwise, and an fp32 checkpoint resumes in bf16;
#  - under bf16 and fp16 each rank's measured memory per category = `loom estimate`'s.
. "$(dirname "$0")/../lib/lib.sh"
make_data
# initial scale 2^8, not DeepSpeed's 2^16: at 2^16 the tiny model's fp16 gradient all-reduce
# overflows for real in the first steps, which would mix with the injected overflows
FP16='precision={"plugin":"fp16","loss_scale_window":4,"hysteresis":2,"initial_scale_power":8}'
CK() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":6}"; }

export LOOM_INJECT_INF=1:3,5
run 2 straight --set "$FP16" --set train.steps=12 --set "$(CK straight)" \
  --set train.micro_batch_size=2
for r in 0 1; do
  n=$(grep -c "loom\[$r\] info: .*gradient overflow, step skipped" "$WORK/straight/out.log")
  [ "$n" = 2 ] || die "rank $r logged $n skipped steps, expected 2 (steps 3 and 5)"
done
/usr/bin/python3 "$HERE/check_fp16_scaler.py" "$WORK/straight/metrics.jsonl" || die "fp16 scaler metrics"

# resume from step 6: the saved scale is 128 (not the initial 256) and the counters
grep -Eq '"scale": *128' "$WORK/straight/ckpt/step-00000006/manifest.json" ||
  die "the step-6 checkpoint does not hold the halved scale"
mkdir -p "$WORK/resumed/ckpt"
cp -r "$WORK/straight/ckpt/step-00000006" "$WORK/resumed/ckpt/"
printf 'step-00000006' >"$WORK/resumed/ckpt/latest"
timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" --set "logging.metrics=$WORK/resumed/metrics.jsonl" \
  --set "$FP16" --set train.steps=12 --set "$(CK resumed)" --set train.micro_batch_size=2 \
  >"$WORK/resumed/out.log" 2>&1 || { cat "$WORK/resumed/out.log"; die "resume run failed"; }
grep -q "resumed at step 6" "$WORK/resumed/out.log" || die "run did not resume at step 6"
compare resumed straight --bitwise --steps 7:12
# the scaler continued where it was (a power-of-two scale change leaves fp16 values bitwise the
# same unless they overflow, so the scale itself is compared): 128, grown back at step 9 as before
/usr/bin/python3 "$HERE/check_resumed_scaler.py" "$WORK/resumed/metrics.jsonl" "$WORK/straight/metrics.jsonl" ||
  die "the resumed run's loss scale, skipped count or lr differ from the straight run's"
unset LOOM_INJECT_INF

# stuck: scale 1 = min_loss_scale, no hysteresis: the first overflow is an error with its step
rm -rf "$WORK/stuck"
mkdir -p "$WORK/stuck"
if LOOM_INJECT_INF=0:2 timeout 120 "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set train.steps=4 \
    --set 'precision={"plugin":"fp16","initial_scale_power":0,"hysteresis":1}' \
    >"$WORK/stuck/out.log" 2>&1; then
  die "a loss scale stuck at min_loss_scale did not stop the run"
fi
grep -q "loss scale is stuck at min_loss_scale 1 at step 2" "$WORK/stuck/out.log" ||
  { cat "$WORK/stuck/out.log"; die "the stuck-scale error does not name the step"; }

# A skipped step leaves the training state bitwise as it was, and nothing of it carries over:
# overflows injected at steps 2 and 3 (as the main job's real ones at 1 and 2); a checkpoint
# after every step. The parameters, Adam m and v after steps 1, 2 and 3 must be the same bytes
# (same crc32 per chunk: no update, no Adam moment touched on a skipped step), and step 4 run
# by this process must be bitwise step 4 of a fresh process resumed from the step-3 checkpoint
# (a gradient buffer not zeroed after the skipped steps, or a scale mixed up across the
# halving, would make them differ). docs/mixed_precision.md: "The main job's excursion".
LOOM_INJECT_INF=1:2,3 run 2 skipped --set "$FP16" --set train.steps=4 --set logging.interval=1 \
  --set train.micro_batch_size=2 --set lr_schedule.warmup_steps=0 \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/skipped/ckpt\",\"every\":1,\"keep\":0}"
/usr/bin/python3 "$HERE/check_skipped_state.py" "$WORK/skipped/ckpt" || die "a skipped step changed the training state"
mkdir -p "$WORK/skipped_resumed"
cp -r "$WORK/skipped/ckpt" "$WORK/skipped_resumed/ckpt"
rm -rf "$WORK/skipped_resumed/ckpt/step-00000004"
echo step-00000003 > "$WORK/skipped_resumed/ckpt/latest"
timeout 120 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" --set "$FP16" --set train.steps=4 \
  --set train.micro_batch_size=2 --set lr_schedule.warmup_steps=0 --set logging.interval=1 \
  --set "logging.metrics=$WORK/skipped_resumed/metrics.jsonl" \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/skipped_resumed/ckpt\",\"every\":1,\"keep\":0}" \
  >"$WORK/skipped_resumed/out.log" 2>&1 ||
  { cat "$WORK/skipped_resumed/out.log"; die "resume from the skipped step's checkpoint failed"; }
compare skipped_resumed skipped --bitwise --steps 4:4

# bf16 vs fp32 on 1 rank, 20 steps: bf16 keeps 8 significant bits, a relative rounding of at
# most 2^-9 = 2e-3 per store; the loss is a log-sum-exp of logits whose own error is about that
# relative to their size (< 1 here), so one step's loss differs by ~2e-3 * |logit| / loss
# < 1e-3 relative, and the weights' drift over 20 small steps adds little. Bound 1e-2 (10x that);
# measured worst: 1.2e-4. The runs must also differ (bf16 really rounds).
run 1 fp32 --set train.steps=20
run 1 bf16 --set train.steps=20 --set 'precision={"plugin":"bf16"}'
/usr/bin/python3 "$HERE/check_bf16_vs_fp32.py" "$WORK/bf16/metrics.jsonl" "$WORK/fp32/metrics.jsonl" || die "bf16 vs fp32"
# bf16 with 16-bit parameter and gradient storage (ddp sets LOOM_PAR_STORAGE_16BIT): a run
# resumed from its step-4 checkpoint continues bitwise (the checkpoint holds the fp32 master,
# Adam m and v; the 16-bit parameters are rounded from the master on resume, exactly as after
# every step), and the checkpoint is precision-independent: an fp32 run's checkpoint resumes in
# bf16 (its step 5 within bf16's rounding of the fp32 run's, bound 1e-2 as above).
BF16='precision={"plugin":"bf16"}'
CK4() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":4}"; }
run 2 bf16_straight --set "$BF16" --set train.steps=8 --set train.micro_batch_size=2 \
  --set logging.interval=1 --set "$(CK4 bf16_straight)"
grep -q "16-bit storage" "$WORK/bf16_straight/out.log" &&
  die "ddp under bf16 fell back to fp32 buffers (no 16-bit storage)"
run 2 fp32_ck --set train.steps=8 --set train.micro_batch_size=2 --set logging.interval=1 \
  --set "$(CK4 fp32_ck)"
for src in bf16_straight fp32_ck; do
  dst=${src}_resumed
  mkdir -p "$WORK/$dst/ckpt"
  cp -r "$WORK/$src/ckpt/step-00000004" "$WORK/$dst/ckpt/"
  printf 'step-00000004' >"$WORK/$dst/ckpt/latest"
  timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set "logging.metrics=$WORK/$dst/metrics.jsonl" \
    --set "$BF16" --set train.steps=8 --set train.micro_batch_size=2 --set logging.interval=1 \
    --set "$(CK4 "$dst")" >"$WORK/$dst/out.log" 2>&1 ||
    { cat "$WORK/$dst/out.log"; die "bf16 resume from $src's step-4 checkpoint failed"; }
  grep -q "resumed at step 4" "$WORK/$dst/out.log" || die "$dst did not resume at step 4"
done
compare bf16_straight_resumed bf16_straight --bitwise --steps 5:8
/usr/bin/python3 "$HERE/check_fp32_resumed_in_bf16.py" "$WORK/fp32_ck_resumed/metrics.jsonl" "$WORK/fp32_ck/metrics.jsonl" ||
  die "an fp32 checkpoint resumed in bf16 does not continue the fp32 run within bf16's rounding"

# memory under bf16 and fp16: what each rank measures = what `loom estimate` predicts for the
# same config (16-bit parameters and gradients, the fp32 master in optim: ddp and ZeRO 1/2/3
# set LOOM_PAR_STORAGE_16BIT), for ddp and ZeRO 1/2/3 on 2 ranks; the estimate bounds every rank
# (memory_precision.sh and memory_precision_zero.sh check the formulas)
MEM=()
for prec in bf16 fp16; do
  for strat in ddp zero1 zero2 zero3; do
    name=mem_${prec}_$strat
    args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
          --set checkpoint=null --set "parallel=[{\"plugin\":\"$strat\"}]"
          --set "precision={\"plugin\":\"$prec\"}")
    run 2 "$name" "${args[@]}"
    "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json "${args[@]}" \
      >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
    MEM+=("$name")
  done
done
# every in-tree data-parallel plugin stores 16 bits: none falls back to the 1.3 layout
for strat in ddp zero1 zero2 zero3; do
  grep -q "16-bit storage" "$WORK/mem_bf16_$strat/out.log" &&
    die "$strat under bf16: a line says it runs without 16-bit storage"
done
/usr/bin/python3 "$HERE/check_16bit_memory.py" "$WORK" "${MEM[@]}" || die "16-bit memory: measurement != estimate"
echo "mixed_precision: fp16 skip/scale/resume/stuck, bf16 vs fp32, 16-bit memory = estimate"
