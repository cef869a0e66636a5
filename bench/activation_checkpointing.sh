#!/bin/bash
# Activation checkpointing: for each precision (fp32, bf16 by default) and policy (none,
# selective, full, full every 2nd block) the main job's model (configs/fortunes_ddp.json: 4 blocks, 8 heads, C = 256, T = 128) on one
# rank, one thread, micro-batch 8: the measured peak activation memory (mem_peak_bytes in the
# metrics) against `loom estimate`, and the median step time relative to no checkpointing in
# the same precision and to fp32 without checkpointing. The (precision, policy) runs go in
# turn, --rounds times, and each median is over all its rounds' steps after --skip (a shared
# machine's noise lands on every run alike). Prints a Markdown table; never passes or fails on
# time.
#
#   bench/activation_checkpointing.sh [--build DIR] [--steps N] [--skip K] [--rounds R]
#                                     [--micro B] [--precisions fp32,bf16,fp16]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=12 skip=2 rounds=2 micro=8 precisions=fp32,bf16
. "$root/bench/lib.sh"
bench_options activation_checkpointing.sh 2,13 "build steps skip rounds micro precisions" "$@"
bench_setup activation_checkpointing.sh activation_checkpointing
cfg=$root/configs/fortunes_ddp.json
policies=(none selective full every2)
IFS=, read -r -a precs <<<"$precisions"
policy_json() {
  case $1 in
    every2) echo '{"policy":"full","every":2}' ;;
    *) echo "\"$1\"" ;;
  esac
}
args_of() { # the run's overrides for precision $2, policy $1
  echo --set "precision={\"plugin\":\"$2\"}" --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
    --set "data.vocab=$data/vocab.json" --set checkpoint=null --set 'parallel=[]' \
    --set train.steps="$steps" --set train.eval_interval=0 --set train.eval_batches=1 \
    --set train.micro_batch_size="$micro" --set lr_schedule.warmup_steps=1 --set sample.tokens=0 \
    --set logging.interval=1000 \
    --set "activation_checkpointing=$(policy_json "$1")"
}
for r in $(seq 1 "$rounds"); do
  for pr in "${precs[@]}"; do
    for p in "${policies[@]}"; do
      # shellcheck disable=SC2046 # the overrides are words without spaces
      "$bin/loom" train "$cfg" $(args_of "$p" "$pr") \
        --set "logging.metrics=$out/${pr}_${p}_$r.jsonl" >"$out/${pr}_${p}_$r.log" 2>&1 ||
        { cat "$out/${pr}_${p}_$r.log" >&2; exit 1; }
    done
  done
done
for pr in "${precs[@]}"; do
  for p in "${policies[@]}"; do
    # shellcheck disable=SC2046
    "$bin/loom" estimate "$cfg" --world 1 --json $(args_of "$p" "$pr") \
      >"$out/${pr}_${p}_estimate.json"
  done
done
/usr/bin/python3 - "$out" "$skip" "$rounds" "$precisions" "${policies[@]}" <<'PY'
import json, statistics, sys
out, skip, rounds, precs, policies = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                      sys.argv[4].split(","), sys.argv[5:])
rows = {}
for pr in precs:
  for p in policies:
    ms, peak = [], 0
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{pr}_{p}_{r}.jsonl"):
            rec = json.loads(line)
            if "ms_per_step" not in rec:
                continue
            if rec["step"] > skip:
                ms.append(rec["ms_per_step"])
            peak = max(peak, rec["mem_peak_bytes"]["activations"])
    est = json.load(open(f"{out}/{pr}_{p}_estimate.json"))
    rows[pr, p] = (peak, est["bytes"]["activations"], est["activation_checkpointing"]["recompute_bytes"],
               statistics.median(ms), len(ms))
ref_ms = rows[precs[0], "none"][3]
label = {"none": "none", "selective": "selective", "full": "full",
         "every2": "full, every 2nd block"}
print(f"| precision | policy | peak activations measured (MiB) | estimate (MiB) | of which "
      f"recompute scratch | vs none | step time (ms, median) | vs none | vs {precs[0]} none |")
print("|---|---|---|---|---|---|---|---|---|")
for pr in precs:
  base_peak, base_ms = rows[pr, "none"][0], rows[pr, "none"][3]
  for p in policies:
    peak, est, scratch, ms, n = rows[pr, p]
    print(f"| {pr} | {label.get(p, p)} | {peak / 2**20:.2f} | {est / 2**20:.2f}"
          f"{'' if peak == est else ' (differs!)'} | {scratch / 2**20:.2f} | "
          f"{peak / base_peak:.2f} | {ms:.0f} (n={n}) | {ms / base_ms:.2f} | "
          f"{ms / ref_ms:.2f} |")
PY
echo "activation_checkpointing.sh: $(($(date +%s) - t_start)) s on $ncores cores" \
  "($rounds rounds x ${#precs[@]} precisions x ${#policies[@]} policies x $steps steps," \
  "medians after step $skip)"
