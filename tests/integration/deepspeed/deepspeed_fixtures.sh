#!/bin/bash
# DeepSpeed configs in the shape of DeepSpeed's documented examples (tests/fixtures/deepspeed/:
# ZeRO-1, ZeRO-2 with fp16, ZeRO-3 with bf16, bf16 with ZeRO-Offload) each train 6 steps on 2
# ranks under the plugins they map to, each step at the lr DeepSpeed's scheduler gives it
# (WarmupLR, WarmupDecayLR, WarmupCosineLR: check_ds_lr.py); the ZeRO-Offload tutorial's, as
# written, is refused with one report line per unsupported key (its weight_decay). Bad input is
# refused before training by one error line naming the DeepSpeed file and the JSON path: an
# unknown key, a wrong type, Hugging Face's "auto", NVMe offload, offload_param on a GPU device,
# a missing file, invalid JSON, a value the loom config sets differently, batch numbers that do
# not multiply (DeepSpeed's rule, its three numbers), no batch size at all.
. "$(dirname "$0")/../lib/lib.sh"
make_data
FIX=$LOOM_SRC/tests/fixtures/deepspeed
DATA=(--set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin"
      --set "data.vocab=$WORK/data/vocab.json")

runs() { # runs NAME PLUGINS: train FIX/NAME.json 6 steps on 2 ranks, check the plugins line
  local out=$WORK/$1.log
  timeout 300 "${MPIRUN[@]}" -np 2 --bind-to none "$LOOM" train "$FIX/model.json" \
    --deepspeed "$FIX/$1.json" "${DATA[@]}" --set "logging.metrics=$WORK/$1.jsonl" >"$out" 2>&1 ||
    { cat "$out" >&2; die "$1.json did not train"; }
  grep -q "^loom: plugins: $2\$" "$out" || { cat "$out" >&2; die "$1.json: expected plugins $2"; }
  /usr/bin/python3 "$HERE/check_ds_lr.py" "$FIX/$1.json" "$WORK/$1.jsonl" 1e-3 ||
    die "$1.json: the lr of each step is not DeepSpeed's"
  echo "$1.json: trains as $2"
}
runs zero1 "zero1 fp32"
runs zero2 "zero2 fp16"
runs zero3 "zero3 bf16"
runs bf16 "zero2 cpu_offload bf16"

# refused: CHECK_ARGS... -- NEEDLE...: loom check fails with one error line holding each needle
refused() {
  local args=() needles=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  needles=("$@")
  if "$LOOM" check "${args[@]}" "${DATA[@]}" >"$WORK/out" 2>"$WORK/err"; then
    cat "$WORK/out" "$WORK/err"; die "expected a refusal: ${args[*]}"
  fi
  [ "$(wc -l <"$WORK/err")" = 1 ] || { cat "$WORK/err"; die "expected one error line: ${args[*]}"; }
  grep -q '^loom: error: ' "$WORK/err" || { cat "$WORK/err"; die "not an error line"; }
  local n
  for n in "${needles[@]}"; do
    grep -qF -- "$n" "$WORK/err" || { cat "$WORK/err"; die "no '$n' in the error"; }
  done
  echo "refused: $(cat "$WORK/err")"
}
ds() { printf '%s\n' "$1" >"$WORK/$2"; echo "$WORK/$2"; } # ds JSON NAME: a DeepSpeed file

# the ZeRO-Offload tutorial as written: one line for its one unsupported key
refused "$FIX/model.json" --deepspeed "$FIX/zero_offload.json" -- \
  "zero_offload.json: optimizer.params.weight_decay = 3e-7: refused"
grep '^loom: deepspeed: .*: refused: ' "$WORK/out" >"$WORK/refused"
[ "$(wc -l <"$WORK/refused")" = 1 ] || { cat "$WORK/out"; die "expected 1 refused line"; }
grep -q 'zero_offload.json: optimizer.params.weight_decay = 3e-7: refused: ' "$WORK/refused" ||
  die "not the weight_decay key"
[ "$(grep -c '^loom: deepspeed: ' "$WORK/out")" -gt 10 ] || die "the other keys have no lines"
# two unsupported keys: two lines, and the error counts the second
refused "$FIX/model.json" --deepspeed "$(ds '{"train_batch_size": 8, "prescale_gradients": true, "zero_optimization": {"stage": 2, "reduce_scatter": false}}' two.json)" -- \
  "two.json: prescale_gradients = true: refused" "(and 1 more refused keys"
[ "$(grep -c '^loom: deepspeed: .*: refused: ' "$WORK/out")" = 2 ] || { cat "$WORK/out"; die "expected 2 refused lines"; }

M=$FIX/model.json
B='"train_micro_batch_size_per_gpu": 2'
refused "$M" --deepspeed "$(ds "{$B, \"zero_optimization\": {\"stgae\": 3}}" unknown.json)" -- \
  "unknown.json: zero_optimization.stgae: refused: unknown key (expected one of: stage,"
refused "$M" --deepspeed "$(ds '{"train_batch_size": "128"}' type.json)" -- \
  'type.json: train_batch_size = "128": refused: expected an integer >= 1'
refused "$M" --deepspeed "$(ds '{"train_batch_size": "auto"}' auto.json)" -- \
  'auto.json: train_batch_size = "auto": refused: "auto" is a placeholder Hugging Face'
refused "$M" --deepspeed "$(ds "{$B, \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/nvme\"}}}" nvme.json)" -- \
  'nvme.json: zero_optimization.offload_param.device = "nvme": refused: NVMe offload'
refused "$M" --deepspeed "$FIX/lesson.json" --set device.type=cuda -- \
  'lesson.json: zero_optimization.offload_param.device = "cpu": refused: on a GPU device'
refused "$M" --deepspeed "$WORK/absent.json" -- \
  "model.json: deepspeed: $WORK/absent.json: cannot open: No such file or directory"
refused "$M" --deepspeed "$(ds '{"train_batch_size": 8,, }' syntax.json)" -- \
  "syntax.json:1:" "(the DeepSpeed config $M: deepspeed names)"
refused "$M" --deepspeed "$(ds "{$B, \"gradient_clipping\": 0.5}" conflict.json)" \
  --set optimizer.grad_clip=2 -- \
  "conflict.json: gradient_clipping (optimizer.grad_clip = 0.5) conflicts with $M: optimizer.grad_clip = 2"
refused "$M" --deepspeed "$(ds "{$B, \"zero_optimization\": {\"stage\": 2}}" par.json)" \
  --set 'parallel=[{"plugin":"ddp"}]' -- \
  "par.json: zero_optimization (parallel = [{\"plugin\":\"zero2\"}]) conflicts with $M: parallel = [{\"plugin\":\"ddp\"}]"
refused "$M" --world 2 --deepspeed "$(ds '{"train_batch_size": 128, "train_micro_batch_size_per_gpu": 21, "gradient_accumulation_steps": 3}' batch.json)" -- \
  "batch.json: train_batch_size 128 != train_micro_batch_size_per_gpu 21 x gradient_accumulation_steps 3 x data-parallel size 2"
refused "$M" --world 3 --deepspeed "$FIX/lesson.json" -- \
  "lesson.json: train_batch_size 128 != train_micro_batch_size_per_gpu 10 x gradient_accumulation_steps 4 x data-parallel size 3"
refused "$M" --deepspeed "$(ds '{"gradient_accumulation_steps": 4}' nobatch.json)" -- \
  "nobatch.json: train_batch_size: Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"
refused "$M" --deepspeed "$(ds "{$B, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"cos_min_ratio\": 0.1}}}" sched.json)" -- \
  "sched.json: scheduler.params.cos_min_ratio = 0.1: refused: not a parameter of WarmupLR"
refused "$M" --set 'lr_schedule={"type":"WarmupLR","warmup_steps":2}' -- \
  "model.json: lr_schedule.warmup_steps: loom's schedule key, not one of WarmupLR's"
refused "$M" --deepspeed "$(ds '[1, 2]' array.json)" -- \
  "array.json: expected a JSON object at the top level, got [1,2]"
# the same value in both files is no conflict; a loom key the file does not hold is kept
"$LOOM" check "$M" --deepspeed "$(ds "{$B, \"fp16\": {\"enabled\": true}}" same.json)" \
  "${DATA[@]}" --set 'precision={"plugin":"fp16","loss_scale_window":4}' >"$WORK/out" 2>&1 ||
  { cat "$WORK/out"; die "a loom fp16 key beside the DeepSpeed file's fp16 was refused"; }
echo "deepspeed_fixtures: ok"
