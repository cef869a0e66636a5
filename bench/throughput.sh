#!/bin/bash
# loom throughput benchmark: tokens/s, MFU, data-parallel scaling, communication bytes and peak
# memory of the main job's model (configs/fortunes_ddp.json), as ratios against anchors measured
# in the same run (the machine is shared and noisy: nothing here passes or fails on time).
#
#   bench/throughput.sh [--build DIR] [--steps N] [--skip K] [--rounds R] [--out DIR] [--data DIR]
#                       [--config FILE]
#   make -C BUILD bench          (the same, with --build BUILD)
#
# 1. anchor: loom-sgemm-peak (single-thread OpenBLAS SGEMM, square and the model's own shapes)
# 2. R rounds (interleaved, so slow phases of the machine hit every configuration) of
#      1 rank,  micro batch 8                       (the base)
#      2 ranks, micro batch 8 each (weak scaling: twice the global batch)
#      2 ranks, micro batch 4 each (strong scaling: the same global batch as 1 rank)
#    each N steps with threads=1 per rank, no checkpoint, no eval, no sample
# 3. the anchor again (drift), then the tables of bench/report.py.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=30 skip=5 rounds=2 out="" data="" config=$root/configs/fortunes_ddp.json
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "throughput.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
. "$root/bench/lib.sh"
bench_setup throughput.sh throughput

# run NAME NP MICRO ROUND [--set ...]: one training run, metrics to $out/NAME.rROUND.jsonl
run() {
  local name=$1 np=$2 mb=$3 round=$4
  shift 4
  local log=$out/$name.r$round.log
  printf '   %-26s %d rank(s), micro batch %d, round %d ... ' "$name" "$np" "$mb" "$round"
  local t0=$SECONDS TIMEFORMAT='%R %U %S'
  # wall, user and system seconds of mpirun and its ranks: how much CPU the ranks really got
  if ! { time mpirun -np "$np" --oversubscribe --bind-to none "$bin/loom" train "$config" \
      --set "train.steps=$steps" --set "lr_schedule.warmup_steps=$((steps < 30 ? steps : 30))" \
      --set "train.micro_batch_size=$mb" --set train.grad_accum_steps=1 \
      --set device.threads=1 --set checkpoint=null --set train.eval_interval=0 \
      --set sample.tokens=0 --set logging.interval=10 \
      --set "logging.metrics=$out/$name.r$round.jsonl" \
      --set "data.train=$data/train_*.bin" --set 'data.val=""' \
      --set "data.vocab=$data/vocab.json" "$@" > "$log" 2>&1; } 2> "$out/$name.r$round.time"; then
    echo "FAILED"
    tail -20 "$log" >&2
    exit 1
  fi
  echo "$((SECONDS - t0)) s"
}

echo "== loom throughput benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $ncores cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== anchor (before)"
"$bin/loom-sgemm-peak" | tee "$out/sgemm_before.txt" | tail -3
echo "== anchor: 2 SGEMM processes at once (what 2 ranks can get from the cores right now)"
"$bin/loom-sgemm-peak" -s 1024 -r 3 > "$out/sgemm_pair1.txt" &
"$bin/loom-sgemm-peak" -s 1024 -r 3 > "$out/sgemm_pair2.txt"
wait
grep -h sgemm_model_mix "$out/sgemm_pair1.txt" "$out/sgemm_pair2.txt"
echo "== training runs: $steps steps each, the first $skip skipped as warm-up"
for r in $(seq 1 "$rounds"); do
  run 1rank-mb8 1 8 "$r"
  run 2rank-mb8-weak 2 8 "$r"
  run 2rank-mb4-strong 2 4 "$r"
done
echo "== anchor (after)"
"$bin/loom-sgemm-peak" > "$out/sgemm_after.txt"
tail -1 "$out/sgemm_after.txt"
echo "== load average now $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t_start )) s in all"
echo

# files NAME EXT: the rounds' files of one configuration, comma-separated
files() { local f=() r; for r in $(seq 1 "$rounds"); do f+=("$out/$1.r$r.$2"); done
          (IFS=,; echo "${f[*]}"); }
spec() { echo "$1|$2|$3|$4|$(files "$1" jsonl)|$out/$1.r1.log|$(files "$1" time)"; }
python3 "$root/bench/report.py" --skip "$skip" \
  --anchor "$out/sgemm_before.txt" --anchor "$out/sgemm_after.txt" \
  --pair "$out/sgemm_pair1.txt" --pair "$out/sgemm_pair2.txt" \
  --title "loom throughput ($(basename "$config"), threads=1 per rank; $ncores cores, shared)" \
  --run "$(spec 1rank-mb8 1 8 1rank-mb8)" \
  --run "$(spec 2rank-mb8-weak 2 8 1rank-mb8)" \
  --run "$(spec 2rank-mb4-strong 2 4 1rank-mb8)" \
  | tee "$out/report.txt"
echo
echo "(runs, logs and JSONL in $out)"
