#!/bin/bash
# Memory per rank on the main job's model (configs/fortunes_ddp.json, Ψ = 3,257,856) for fp32 /
# bf16 / fp16 × ddp / zero1 / zero2 / zero3 at N = 1, 2, 4: the measured model states (params +
# grads + optim + host, mem_peak_bytes of the metrics, rank 0) against the ZeRO paper's formula
# as `loom estimate` prints it (Rajbhandari et al. 2020, §3: mixed precision 2Ψ + 2Ψ + 12Ψ,
# fp32 4Ψ + 4Ψ + 8Ψ, the sharded terms /N, ZeRO-3 + its largest gathered unit) and against the
# estimate; the fp32 working copies a 16-bit model keeps for one unit (weights, gradient
# accumulators) are temporary buffers (category other), printed apart. One optimizer step of micro-batch 1 per run (the model states do not
# depend on the batch). Prints a Markdown table; integration.memory_precision_zero checks the
# same on the tiny model. Memory, not time: nothing here is timed.
#
#   bench/memory_precision.sh [--build DIR] [--ranks "1 2 4"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build ranks="1 2 4" steps=3 skip=0
. "$root/bench/lib.sh"
bench_options memory_precision.sh 2,12 "build ranks" "$@"
bench_setup memory_precision.sh memory_precision
cfg=$root/configs/fortunes_ddp.json
export OMPI_MCA_rmaps_base_oversubscribe=1
for prec in fp32 bf16 fp16; do
  for strat in ddp zero1 zero2 zero3; do
    for n in $ranks; do
      name=${prec}_${strat}_$n
      args=(--set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin"
            --set "data.vocab=$data/vocab.json" --set checkpoint=null
            --set "parallel=[{\"plugin\":\"$strat\"}]" --set "precision={\"plugin\":\"$prec\"}"
            --set train.steps=1 --set train.eval_interval=0 --set train.micro_batch_size=1
            --set lr_schedule.warmup_steps=1 --set sample.tokens=0 --set logging.interval=1)
      mpirun -np "$n" --bind-to none "$bin/loom" train "$cfg" "${args[@]}" \
        --set "logging.metrics=$out/$name.jsonl" >"$out/$name.log" 2>&1 ||
        { cat "$out/$name.log" >&2; exit 1; }
      "$bin/loom" estimate "$cfg" --world "$n" --json "${args[@]}" >"$out/$name.estimate.json"
    done
  done
done
/usr/bin/python3 - "$out" "$ranks" <<'PY'
import json, sys
out, ranks = sys.argv[1], [int(x) for x in sys.argv[2].split()]
MiB = 2 ** 20
print("MiB per rank of params + grads + optim: measured / the ZeRO paper's formula (= loom "
      "estimate, unless the fp32 working copy of the 1.3 layout is added)")
print()
print("| precision | strategy | formula | " + " | ".join(f"N = {n}" for n in ranks) + " |")
print("|---|---|---|" + "---|" * len(ranks))
worst = 0.0
for prec in ("fp32", "bf16", "fp16"):
    for strat in ("ddp", "zero1", "zero2", "zero3"):
        cells, formula = [], ""
        for n in ranks:
            name = f"{prec}_{strat}_{n}"
            rec = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
            meas = [r for r in rec if "loss" in r][-1]["mem_peak_bytes"]
            est = json.load(open(f"{out}/{name}.estimate.json"))
            m = sum(meas[k] for k in ("params", "grads", "optim", "host"))
            paper, work = est["model_states_paper"], est["working_bytes"]
            worst = max(worst, abs(m - est["model_states"]) / est["model_states"])
            formula = est["paper_formula"] if n > 1 else formula or est["paper_formula"]
            cells.append(f"{m / MiB:.2f} / {paper / MiB:.2f}" +
                         (f" (+{work / MiB:.2f} = {(paper + work) / MiB:.2f})" if work else ""))
        print(f"| {prec} | {strat} | {formula} | " + " | ".join(cells) + " |")
print()
print(f"worst |measured - estimate| / estimate: {worst:.2%}")
# 16-bit storage's fp32 working copies of one unit are temporary buffers (category other)
rec = [json.loads(l) for l in open(f"{out}/bf16_ddp_{ranks[0]}.jsonl")]
o16 = [r for r in rec if "loss" in r][-1]["mem_peak_bytes"]["other"]
rec = [json.loads(l) for l in open(f"{out}/fp32_ddp_{ranks[0]}.jsonl")]
o32 = [r for r in rec if "loss" in r][-1]["mem_peak_bytes"]["other"]
print(f"16-bit storage's temporary buffers (fp32 working copies of one unit, stages; category "
      f"'other', not model states): {(o16 - o32) / MiB:.2f} MiB per rank")
PY
echo "memory_precision.sh: $(($(date +%s) - t_start)) s on $ncores cores"
