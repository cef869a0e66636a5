#!/bin/bash
# Mixed precision on the main job: configs/fortunes_ddp.json (3.26 M parameters, 2 ranks, ddp,
# 600 steps of 16 x 128 tokens) in fp32, bf16 and fp16, one run after the other. Prints, per
# precision: the final validation loss and its difference from fp32's (acceptance: within 2 %),
# the worst relative difference of the per-step training loss over the first 50 steps against
# fp32 (bound below), the steps fp16 skipped and its last loss scale, the gradient bytes per step
# and the wall time relative to fp32. A hand run (~4 min per precision on 2 cores); the numbers
# are recorded in docs/mixed_precision.md and the README.
#
# The first-50-steps bound, derived: bf16 keeps 8 significant bits, so every stored activation
# and weight carries a relative rounding error of at most 2^-9 (fp16: 2^-12); the loss is a
# log-sum-exp over logits of size |z| ~ 1..5 here, whose error is then ~|z| * 2^-9 <= 1e-2
# absolute per step for bf16, ~1.2e-3 for fp16, i.e. 0.2 % / 0.03 % of a loss of ~5 early on.
# The weights' drift compounds over the steps; bound: 2 % (bf16) and 1 % (fp16) per step.
#
#   bench/mixed_precision.sh [--build DIR] [--steps N] [--np N] [--precisions "fp32 bf16 fp16"]
#                            [--report-only DIR]
# --precisions runs a subset (into a fresh output dir); --report-only prints the table from the
# PREC.jsonl / PREC.seconds files already in DIR (e.g. runs made one at a time on a busy
# machine; a missing .seconds leaves the time column out).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=600 np=2 skip=0 precisions="fp32 bf16 fp16" report_only=
. "$root/bench/lib.sh"
bench_options mixed_precision.sh 2,21 "build steps np precisions report-only" "$@"
if [ -z "$report_only" ]; then
bench_setup mixed_precision.sh mixed_precision
for prec in $precisions; do
  echo "== $prec: $np ranks, $steps steps"
  t0=$(date +%s.%N)
  mpirun -np "$np" --bind-to none "$bin/loom" train "$root/configs/fortunes_ddp.json" \
    --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
    --set "data.vocab=$data/vocab.json" --set checkpoint=null --set train.steps="$steps" \
    --set "precision={\"plugin\":\"$prec\"}" --set sample.tokens=0 \
    --set "logging.metrics=$out/$prec.jsonl" >"$out/$prec.log" 2>&1 ||
    { tail -20 "$out/$prec.log"; echo "mixed_precision.sh: the $prec run failed" >&2; exit 1; }
  echo "$t0 $(date +%s.%N)" >"$out/$prec.seconds"
done
else
  out=$report_only
fi
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(p):
    steps, evals = {}, {}
    for r in map(json.loads, open(os.path.join(out, p + ".jsonl"))):
        if "skipped" in r:
            steps[r["step"]] = r
        elif "val_loss" in r:
            evals[r["step"]] = r["val_loss"]
    return steps, evals
runs = {p: load(p) for p in ("fp32", "bf16", "fp16")
        if os.path.exists(os.path.join(out, p + ".jsonl"))}
def seconds(p):
    path = os.path.join(out, p + ".seconds")
    if not os.path.exists(path):
        return None
    a, b = map(float, open(path).read().split())
    return b - a
secs = {p: seconds(p) for p in runs}
ref_steps, ref_evals = runs["fp32"]
last = max(ref_evals)
print("| precision | val loss (step %d) | vs fp32 | worst loss diff, steps 1-50 | skipped | "
      "last loss scale | grad bytes/step | time vs fp32 |" % last)
print("|---|---|---|---|---|---|---|---|")
for p, (steps, evals) in runs.items():
    d = (evals[last] - ref_evals[last]) / ref_evals[last]
    w = max(abs(steps[s]["loss"] - ref_steps[s]["loss"]) / ref_steps[s]["loss"]
            for s in range(1, 51) if s in steps)
    sk = sum(r["skipped"] for r in steps.values())
    t = f"{secs[p] / secs['fp32']:.2f}" if secs[p] and secs.get("fp32") else "-"
    print(f"| {p} | {evals[last]:.4f} | {d:+.2%} | {w:.2%} | {sk} | "
          f"{steps[max(steps)].get('loss_scale', 1):g} | {steps[max(steps)]['comm_bytes']} | {t} |")
PY
