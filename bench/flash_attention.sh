#!/bin/bash
# Flash attention against the materialised kernels, in one run (issue 20's figures):
#  1. the CPU attention kernels alone, forward + backward per layer at GPT-2 124M's heads
#     (B 2, NH 12, HS 64) for T = 256, 1024, 4096, fp32 and bf16 (loom-bench-attention: today's
#     materialised kernels and the lse ones on the same inputs, best of a few repetitions);
#  2. GPT-2 124M (L12 H12 C768, vocabulary 50257 padded to 50304, random tokens) at T = 1024,
#     2 sequences a step, fp32, one rank: model.attention "materialized" and "flash", --steps
#     steps each; the activation peak measured (mem_peak_bytes) and `loom estimate`'s, the median
#     step time after the first;
#  3. the same model at T = 8192 (context_length 8192), one sequence a step, flash: --long-steps
#     steps, its memory measured (every category, and the process's maximum RSS) and estimated;
#     the materialised estimate beside it (not run: it does not fit 24 GB).
# Prints Markdown tables. Memory is exact (measured = estimate is a test, not this script's job);
# times are medians on whatever the cores give right now, so compare within one run.
#
#   bench/flash_attention.sh [--build DIR] [--out DIR] [--steps 4] [--long-steps 3]
#                            [--threads N (default: all cores)] [--no-kernels]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=4 long_steps=3 threads=0 kernels=1
. "$root/bench/lib.sh"
bench_options flash_attention.sh 2,17 "build out steps long-steps threads no-kernels:kernels=0" "$@"
bench_init flash_attention.sh flash_attention loom loom-bench-attention
[ "$threads" -gt 0 ] || threads=$ncores
export OMP_NUM_THREADS=$threads
mkdir -p "$out/data"
/usr/bin/python3 "$root/bench/token_shards.py" "$out/data" gpt2:50257 >/dev/null

if [ "$kernels" = 1 ]; then
  echo "== 1. attention kernels, forward + backward per layer ($threads threads)"
  "$bin/loom-bench-attention" "$threads" | tee "$out/kernels.txt"
fi

model=(--set model.vocab_size=50257 --set model.padded_vocab_size=50304 --set model.n_layer=12
       --set model.n_head=12 --set model.n_embd=768 --set 'parallel=[]' --set checkpoint=null
       --set train.eval_interval=0 --set sample.tokens=0 --set logging.interval=1
       --set "data.train=$out/data/gpt2_train.bin" --set 'data.val=""' --set 'data.vocab=""'
       --set device.threads="$threads" --set 'logging.tensorboard=""')
# one run NAME T B STEPS ATTENTION: train + estimate into $out/NAME.*
one() {
  local name=$1 T=$2 B=$3 n=$4 attn=$5
  local args=("${model[@]}" --set model.context_length="$T" --set train.seq_len="$T"
              --set train.micro_batch_size="$B" --set train.grad_accum_steps=1
              --set train.steps="$n" --set lr_schedule.warmup_steps=1
              --set "model.attention=\"$attn\"")
  printf '   %-16s T %-5d B %d, %d steps ... ' "$name" "$T" "$B" "$n"
  local t0=$SECONDS
  /usr/bin/time -f '%M' -o "$out/$name.rss" "$bin/loom" train "$root/configs/tiny.json" \
    "${args[@]}" --set "logging.metrics=$out/$name.jsonl" >"$out/$name.log" 2>&1 ||
    { echo FAILED; tail -20 "$out/$name.log" >&2; exit 1; }
  "$bin/loom" estimate "$root/configs/tiny.json" --json "${args[@]}" >"$out/$name.estimate.json"
  echo "$((SECONDS - t0)) s"
}
# the materialised estimate of a run (not trained)
estimate_only() {
  local name=$1 T=$2 B=$3
  "$bin/loom" estimate "$root/configs/tiny.json" --json "${model[@]}" \
    --set model.context_length="$T" --set train.seq_len="$T" --set train.micro_batch_size="$B" \
    --set 'model.attention="materialized"' >"$out/$name.estimate.json"
}
echo "== 2. GPT-2 124M, T 1024, 2 sequences a step, fp32, one rank"
one t1024_materialized 1024 2 "$steps" materialized
one t1024_flash 1024 2 "$steps" flash
echo "== 3. GPT-2 124M, T 8192, 1 sequence a step, fp32, one rank"
one t8192_flash 8192 1 "$long_steps" flash
estimate_only t8192_materialized 8192 1

/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
MiB, GiB = 2 ** 20, 2 ** 30
def run(name):
    recs = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    steps = [r for r in recs if "loss" in r and "mem_peak_bytes" in r]
    est = json.load(open(f"{out}/{name}.estimate.json"))
    ms = [r["ms_per_step"] for r in steps[1:]] or [steps[-1]["ms_per_step"]]
    rss = int(open(f"{out}/{name}.rss").read().split()[-1]) * 1024
    return steps[-1], est, statistics.median(ms), rss
def est_act(est):
    return est["stages"][0]["bytes"]["activations"]
print("\n| T | B | attention | activations measured (MiB) | estimate (MiB) | vs materialized | "
      "all categories (GiB) | max RSS (GiB) | step (ms) | tokens/s | loss after the run |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
base = None
for name, T, B in (("t1024_materialized", 1024, 2), ("t1024_flash", 1024, 2),
                   ("t8192_flash", 8192, 1)):
    last, est, ms, rss = run(name)
    act = last["mem_peak_bytes"]["activations"]
    tot = last["mem_peak_bytes"]["total"]
    if name == "t1024_materialized":
        base = act
    ratio = f"{act / base:.3f}" if T == 1024 else "-"
    print(f"| {T} | {B} | {est.get('attention')} | {act / MiB:.1f} | {est_act(est) / MiB:.1f} | "
          f"{ratio} | {tot / GiB:.2f} | {rss / GiB:.2f} | {ms:.0f} | {T * B / ms * 1000:.0f} | "
          f"{last['loss']:.4f} |")
m8 = json.load(open(f"{out}/t8192_materialized.estimate.json"))
print(f"| 8192 | 1 | materialized (estimate only) | - | {est_act(m8) / MiB:.1f} | - | "
      f"{m8['bytes']['total'] / GiB:.2f} | - | - | - | - |")
PY
echo "== $(( $(date +%s) - t_start )) s in all; load average $(cut -d' ' -f1-3 /proc/loadavg)"
