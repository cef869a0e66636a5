#!/bin/bash
# The lesson's DeepSpeed config, verbatim (tests/fixtures/deepspeed/lesson.json: train_batch_size
# 128, accumulation 4, fp16, ZeRO-3 with optimizer and parameter offload to the CPU), with the
# model/data loom config tests/fixtures/deepspeed/model.json, trains on 2 CPU ranks as zero3 +
# cpu_offload under fp16 dynamic loss scaling, micro-batch 16 derived by DeepSpeed's batch rule
# (128 / 2 / 4), offload_param accepted with its note; and every step's loss, gradient norm,
# loss scale and lr, and the final validation loss, equal bit for bit those of the same run
# written in loom's own schema (tests/fixtures/deepspeed/lesson_loom.json). The "deepspeed" key
# in a loom config gives `loom check` the same mapping as --deepspeed.
. "$(dirname "$0")/../lib/lib.sh"
make_data
FIX=$LOOM_SRC/tests/fixtures/deepspeed
DATA=(--set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin"
      --set "data.vocab=$WORK/data/vocab.json")

ds_run() { # ds_run NAME CONFIG [ARGS...]: 2 ranks into $WORK/NAME
  local name=$1
  shift
  mkdir -p "$WORK/$name"
  timeout 300 "${MPIRUN[@]}" -np 2 --bind-to none "$LOOM" train "$@" "${DATA[@]}" \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" >"$WORK/$name/out.log" 2>&1 ||
    { cat "$WORK/$name/out.log" >&2; die "run $name failed"; }
}
ds_run ds "$FIX/model.json" --deepspeed "$FIX/lesson.json"
ds_run own "$FIX/lesson_loom.json"

log=$WORK/ds/out.log
grep -q "^loom: plugins: zero3 cpu_offload fp16$" "$log" || { cat "$log"; die "not zero3 + cpu_offload + fp16"; }
grep -q "train_batch_size 128 = micro 16 x accumulation 4 x dp 2" "$log" ||
  { cat "$log"; die "the batch rule did not derive micro 16"; }
grep -q 'offload_param.device = "cpu": accepted: on the CPU device the parameters already live in host memory' "$log" ||
  die "offload_param's note is missing"

/usr/bin/python3 - "$WORK/ds/metrics.jsonl" "$WORK/own/metrics.jsonl" <<'PY' || die "the DeepSpeed run differs from loom's own schema"
import json, sys
def recs(p):
    rs = [json.loads(l) for l in open(p)]
    return [r for r in rs if "loss" in r], [r for r in rs if "val_loss" in r]
(a, av), (b, bv) = recs(sys.argv[1]), recs(sys.argv[2])
assert len(a) == len(b) == 6, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("step", "loss", "grad_norm", "loss_scale", "lr", "skipped"):
        assert x.get(k) == y.get(k), f"step {x['step']}: {k} {x.get(k)!r} != {y.get(k)!r}"
assert a[0]["loss_scale"] == 65536, a[0]["loss_scale"]  # DeepSpeed's 2^16: the dynamic scaler
assert a[-1]["loss"] < a[0]["loss"], "did not train"
assert [r["val_loss"] for r in av] == [r["val_loss"] for r in bv], (av, bv)
print(f"bitwise: {len(a)} steps, loss {a[0]['loss']:.6f} -> {a[-1]['loss']:.6f}, "
      f"val {av[-1]['val_loss']:.6f}")
PY

# "deepspeed": PATH in the loom config = --deepspeed PATH
/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["deepspeed"]=sys.argv[2]; json.dump(c, open(sys.argv[3], "w"))' \
  "$FIX/model.json" "$FIX/lesson.json" "$WORK/with_key.json"
"$LOOM" check "$WORK/with_key.json" "${DATA[@]}" --world 2 >"$WORK/key.out" 2>&1 || { cat "$WORK/key.out"; die "check of the deepspeed key failed"; }
"$LOOM" check "$FIX/model.json" --deepspeed "$FIX/lesson.json" "${DATA[@]}" --world 2 >"$WORK/flag.out" 2>&1 ||
  { cat "$WORK/flag.out"; die "check --deepspeed failed"; }
diff <(grep '^loom: deepspeed: ' "$WORK/key.out") <(grep '^loom: deepspeed: ' "$WORK/flag.out") ||
  die "the deepspeed key and --deepspeed map differently"
[ "$(grep -c '^loom: deepspeed: ' "$WORK/flag.out")" = 8 ] || { cat "$WORK/flag.out"; die "expected 8 mapping lines (6 keys, 2 defaults)"; }
echo "deepspeed_lesson: ok"
