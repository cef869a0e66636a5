#!/bin/bash
# Context parallel at T = 4096 (issue 24's bench row): the main job's model (L4 H8 C256, the
# byte vocabulary, random tokens) with one sequence of 4096 tokens a step, fp32, on
#   one      1 rank, 1 thread (flash attention: the device's attention_forward_lse kernels)
#   one_2t   1 rank, 2 threads (the same two cores as cp2, in one process)
#   cp2      2 ranks x 1 thread, context_parallel size 2 with ddp: each rank holds 2048 tokens
#            (chunks r and 3-r of 4), ring attention (attention_block_* kernels)
#   ddp2     2 ranks x 1 thread, ddp, a sequence per rank (2 a step): what two ranks of this
#            machine give without context parallel (the scaling cp2's tokens/s is to be read
#            against; it holds a whole sequence per rank, 1-rank memory)
# R interleaved rounds of --steps steps each; per row the peak memory per rank (measured, the
# largest rank's, and `loom estimate`'s: the same bytes), the median step time after the first
# and the tokens/s it gives (4096 tokens a step), and the CPU seconds the ranks used per step
# (user + system over the whole run, all ranks, / steps: the work, less sensitive than the wall
# clock to other jobs on the cores). Prints a Markdown table; times are whatever the cores give
# right now (compare rows within one run).
#
#   bench/context_parallel.sh [--build DIR] [--out DIR] [--steps 5] [--rounds 2] [--seq 4096]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=5 rounds=2 seq=4096
. "$root/bench/lib.sh"
bench_options context_parallel.sh 2,15 "build out steps rounds seq" "$@"
bench_init context_parallel.sh context_parallel loom
mkdir -p "$out/data"
/usr/bin/python3 "$root/bench/token_shards.py" "$out/data" byte:256 >/dev/null
bench_banner "context-parallel (T = $seq)"
common=(--set model.vocab_size=256 --set model.n_layer=4 --set model.n_head=8
        --set model.n_embd=256 --set model.context_length="$seq" --set train.seq_len="$seq"
        --set train.micro_batch_size=1 --set train.grad_accum_steps=1 --set checkpoint=null
        --set train.steps="$steps" --set lr_schedule.warmup_steps=1 --set train.eval_interval=0
        --set sample.tokens=0 --set logging.interval=1 --set "data.train=$out/data/byte_train.bin"
        --set 'data.val=""' --set 'data.vocab=""' --set 'logging.tensorboard=""')
CP2='[{"plugin":"context_parallel","size":2},{"plugin":"ddp"}]'
# row NAME NP THREADS PARALLEL ROUND
row() {
  local name=$1 np=$2 threads=$3 par=$4 round=$5
  local args=("${common[@]}" --set device.threads="$threads" --set "parallel=$par")
  printf '   %-7s round %d: %d rank(s) x %d thread(s) ... ' "$name" "$round" "$np" "$threads"
  local t0=$SECONDS TIMEFORMAT='%R %U %S'
  { time OMP_NUM_THREADS=$threads mpirun -np "$np" --oversubscribe --bind-to none "$bin/loom" \
      train "$root/configs/tiny.json" "${args[@]}" \
      --set "logging.metrics=$out/$name.r$round.jsonl" \
      >"$out/$name.r$round.log" 2>&1 || { echo FAILED; tail -20 "$out/$name.r$round.log" >&2
                                          exit 1; }; } 2>"$out/$name.r$round.time"
  [ "$round" -gt 1 ] || "$bin/loom" estimate "$root/configs/tiny.json" --world "$np" --json \
    "${args[@]}" >"$out/$name.estimate.json"
  echo "$((SECONDS - t0)) s"
}
for r in $(seq 1 "$rounds"); do
  row one 1 1 '[]' "$r"
  row cp2 2 1 "$CP2" "$r"
  row one_2t 1 2 '[]' "$r"
  row ddp2 2 1 '[{"plugin":"ddp"}]' "$r"
done
/usr/bin/python3 - "$out" "$rounds" "$seq" <<'PY'
import json, statistics, sys
out, rounds, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MiB = 2 ** 20
rows = {}
NAMES = ("one", "one_2t", "ddp2", "cp2")
for name in NAMES:
    ms, peak, cpu = [], None, []
    for r in range(1, rounds + 1):
        _, u, s = (float(x) for x in open(f"{out}/{name}.r{r}.time").read().split()[-3:])
        cpu.append((u + s) / len([1 for l in open(f"{out}/{name}.r{r}.jsonl") if '"loss"' in l]))
        recs = [json.loads(l) for l in open(f"{out}/{name}.r{r}.jsonl")]
        steps = [x for x in recs if "loss" in x and "mem_peak_bytes_max" in x]
        ms += [x["ms_per_step"] for x in steps[1:]]
        peak = steps[-1]["mem_peak_bytes_max"]
    est = json.load(open(f"{out}/{name}.estimate.json"))["stages"][0]
    rows[name] = (peak, est, statistics.median(ms), statistics.median(cpu))
print(f"\n| T = {T}, L4 H8 C256, 1 sequence a step, fp32 | ranks x threads | peak per rank "
      "(measured = estimate) | activations per rank | K/V ring buffers | ms/step (median) | "
      "tokens/s | CPU s/step |")
print("|---|---|---|---|---|---|---|---|")
label = {"one": ("1 rank, flash attention", "1 x 1"), "one_2t": ("1 rank, flash attention",
         "1 x 2"), "ddp2": ("ddp, a sequence per rank (2 a step)", "2 x 1"),
         "cp2": ("context_parallel size 2 (ring)", "2 x 1")}
for name in NAMES:
    peak, est, ms, cs = rows[name]
    e = est["bytes"]["total"]
    same = "=" if peak["total"] == e else f"estimate {e / MiB:.2f}"
    seqs = 2 if name == "ddp2" else 1
    print(f"| {label[name][0]} | {label[name][1]} | {peak['total'] / MiB:.2f} MiB ({same}) | "
          f"{peak['activations'] / MiB:.2f} MiB | {peak['comm'] / MiB:.2f} MiB | {ms:.0f} | "
          f"{seqs * T / ms * 1000:.0f} | {cs:.2f} |")
p1, pc = rows["one"][0]["total"], rows["cp2"][0]["total"]
a1, ac = rows["one"][0]["activations"], rows["cp2"][0]["activations"]
print(f"\ncp2 / 1 rank: peak per rank {pc / p1:.3f}, activations {ac / a1:.3f}; tokens/s "
      f"{rows['one'][2] / rows['cp2'][2]:.2f}x of 1 x 1, {rows['one_2t'][2] / rows['cp2'][2]:.2f}x "
      f"of 1 x 2; CPU per step {rows['cp2'][3] / rows['one'][3]:.2f}x of 1 x 1")
PY
