#!/bin/bash
# Where a data-parallel step's time goes on the GPT-2-vocabulary model (issue 13), pass by pass:
# the fixed per-rank passes over parameter-sized memory (zero_grad, the 1/dp average, the norm's
# sum of squares, AdamW, the ZeRO plugins' scratch and copies) against the GEMMs and the
# communication. Nothing passes or fails on time.
#
#   bench/step_passes.sh [--build DIR] [--steps N] [--strategies "ddp zero1 zero2"]
#                        [--ab BASE_BUILD] [--rounds R] [--out DIR]
#
# 1. profile: each strategy on 2 ranks (micro-batch 2 each, bench/gpt2_vocab.sh's gpt2 shape)
#    under `perf record -e cpu-clock --call-graph dwarf` (software clock: works in VMs without
#    hardware counters); bench/step_passes.py groups rank 0's samples inside train_step by the
#    pass their call stack belongs to, skipping the first 2 steps (first-touch page faults), and
#    prints ms of CPU per step and share. CPU time, not wall time: a rank waiting in MPI is
#    "communication".
# 2. --ab BASE_BUILD: R interleaved rounds of BASE_BUILD and --build (same strategies, no perf),
#    and the ratio of their median ms/step per strategy: the wall-clock effect of a change,
#    measured against an anchor in the same run (DESIGN.md "Benchmarks").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=12 strategies="ddp zero1 zero2" ab="" rounds=3 out=""
. "$root/bench/lib.sh"
bench_options step_passes.sh 2,19 "build steps strategies ab rounds out" "$@"
[ "$steps" -gt 4 ] || { echo "step_passes.sh: --steps must exceed 4" >&2; exit 2; }
bench_init step_passes.sh step_passes loom
mkdir -p "$out/data"
# bench/gpt2_vocab.sh's random-token shard (2^20 tokens, vocabulary 50257)
/usr/bin/python3 "$root/bench/token_shards.py" "$out/data" gpt2:50257

# train BUILD NAME STRATEGY [WRAP...]: one 2-rank run, metrics to $out/NAME.jsonl
train() {
  local bld=$1 name=$2 strat=$3
  shift 3
  mpirun -np 2 --oversubscribe --bind-to none "$@" "$bld/bin/loom" train \
    "$root/configs/fortunes_ddp.json" --set model.vocab_size=50257 \
    --set model.context_length=64 --set model.n_layer=4 --set model.n_head=4 \
    --set model.n_embd=256 --set train.seq_len=64 --set "train.steps=$steps" \
    --set lr_schedule.warmup_steps=2 --set train.micro_batch_size=2 \
    --set train.grad_accum_steps=1 --set device.threads=1 --set checkpoint=null \
    --set train.eval_interval=0 --set sample.tokens=0 --set logging.interval=1 \
    --set 'logging.tensorboard=""' --set "logging.metrics=$out/$name.jsonl" \
    --set "data.train=$out/data/gpt2_train.bin" --set 'data.val=""' --set 'data.vocab=""' \
    --set "parallel=[{\"plugin\":\"$strat\"}]" > "$out/$name.log" 2>&1 \
    || { echo "step_passes.sh: $name failed:" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
}

if command -v perf > /dev/null; then
  cat > "$out/perf_rank.sh" <<EOF2
#!/bin/bash
exec perf record -q -e cpu-clock -F 997 --call-graph dwarf,8192 -o "$out/perf.\$STEP_PASSES_NAME.\$OMPI_COMM_WORLD_RANK" "\$@"
EOF2
  chmod +x "$out/perf_rank.sh"
  for s in $strategies; do
    echo "== profile: $s, 2 ranks, $steps steps"
    train "$build" "prof_$s" "$s" -x "STEP_PASSES_NAME=$s" "$out/perf_rank.sh"
    /usr/bin/python3 "$root/bench/step_passes.py" "$out/perf.$s.0" "$steps"
  done
else
  echo "step_passes.sh: no perf: skipping the per-pass profile" >&2
fi

[ -n "$ab" ] || exit 0
ab=$(cd "$ab" && pwd)
for r in $(seq 1 "$rounds"); do
  for s in $strategies; do
    echo "== round $r: $s (base, then this build)"
    train "$ab" "base_${s}_r$r" "$s"
    train "$build" "new_${s}_r$r" "$s"
  done
done
/usr/bin/python3 - "$out" "$rounds" $strategies <<'PY'
import json, statistics, sys
out, rounds, strategies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def ms(name):  # ms/step of the steps after the first 2 (warm-up, first touch)
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return [r["ms_per_step"] for r in rows if "ms_per_step" in r and r["step"] > 2]
print(f"{'strategy':10s} {'base ms/step':>13s} {'new ms/step':>12s} {'new/base':>9s}  (medians over {rounds} interleaved rounds)")
for s in strategies:
    b = statistics.median(x for r in range(1, rounds + 1) for x in ms(f"base_{s}_r{r}"))
    n = statistics.median(x for r in range(1, rounds + 1) for x in ms(f"new_{s}_r{r}"))
    print(f"{s:10s} {b:13.1f} {n:12.1f} {n / b:9.3f}")
PY
