#!/bin/bash
# loom ddp benchmark: gradient all-reduce overlapped with backward (ddp's default) against all
# buckets launched at the end of backward (overlap=false), and the bucket size, on 2 ranks of the
# main job's model (configs/fortunes_ddp.json). tokens/s as ratios against overlap-off measured
# in the same run; nothing passes or fails on time (the machine is shared and noisy).
#
#   bench/ddp_overlap.sh [--build DIR] [--steps N] [--skip K] [--rounds R] [--micro B]
#                        [--out DIR] [--data DIR] [--config FILE]
#   make -C BUILD bench-overlap   (the same, with --build BUILD)
#
# Configurations (R interleaved rounds, N steps each, threads=1 per rank, micro batch B per rank,
# default 4: the same global batch as 1 rank at 8, and more communication per FLOP than at 8):
#   off-25MB (the base), on-25MB, on-1MB, on-0.25MB, off-0.25MB
# With 13 MB of fp32 gradients a 25 MB bucket holds the whole model, so on-25MB has nothing to
# overlap: the all-reduce starts when backward is done, as with overlap off. off-0.25MB separates
# the cost of many small all-reduces from the gain of overlapping them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=25 skip=5 rounds=2 micro=4 out="" data=""
config=$root/configs/fortunes_ddp.json
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --micro) micro=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "ddp_overlap.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
. "$root/bench/lib.sh"
bench_setup ddp_overlap.sh ddp_overlap

# run NAME OVERLAP BUCKET_MB ROUND: one 2-rank training run, metrics to $out/NAME.rROUND.jsonl
run() {
  local name=$1 overlap=$2 mb=$3 round=$4
  local log=$out/$name.r$round.log
  printf '   %-12s overlap %-5s bucket %5s MB, round %d ... ' "$name" "$overlap" "$mb" "$round"
  local t0=$SECONDS TIMEFORMAT='%R %U %S'
  if ! { time LOOM_DEBUG=1 mpirun -np 2 --oversubscribe --bind-to none -x LOOM_DEBUG \
      "$bin/loom" train "$config" \
      --set "train.steps=$steps" --set "lr_schedule.warmup_steps=$((steps < 30 ? steps : 30))" \
      --set "train.micro_batch_size=$micro" --set train.grad_accum_steps=1 \
      --set device.threads=1 --set checkpoint=null --set train.eval_interval=0 \
      --set sample.tokens=0 --set logging.interval=10 \
      --set "logging.metrics=$out/$name.r$round.jsonl" \
      --set "data.train=$data/train_*.bin" --set 'data.val=""' \
      --set "data.vocab=$data/vocab.json" \
      --set "parallel[0].overlap=$overlap" --set "parallel[0].bucket_size_mb=$mb" \
      > "$log" 2>&1; } 2> "$out/$name.r$round.time"; then
    echo "FAILED"
    tail -20 "$log" >&2
    exit 1
  fi
  local nb
  nb=$(grep -o '[0-9]* buckets of' "$log" | head -1 | cut -d' ' -f1)
  echo "$((SECONDS - t0)) s (${nb:-?} buckets)"
}

echo "== loom ddp overlap benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $ncores cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== anchor (before)"
"$bin/loom-sgemm-peak" > "$out/sgemm_before.txt"
tail -1 "$out/sgemm_before.txt"
echo "== anchor: 2 SGEMM processes at once (what 2 ranks can get from the cores right now)"
"$bin/loom-sgemm-peak" -s 1024 -r 3 > "$out/sgemm_pair1.txt" &
"$bin/loom-sgemm-peak" -s 1024 -r 3 > "$out/sgemm_pair2.txt"
wait
grep -h sgemm_model_mix "$out/sgemm_pair1.txt" "$out/sgemm_pair2.txt"
echo "== training runs: 2 ranks, micro batch $micro each, $steps steps, the first $skip skipped"
for r in $(seq 1 "$rounds"); do
  run off-25MB false 25 "$r"
  run on-25MB true 25 "$r"
  run on-1MB true 1 "$r"
  run on-0.25MB true 0.25 "$r"
  run off-0.25MB false 0.25 "$r"
done
echo "== anchor (after)"
"$bin/loom-sgemm-peak" > "$out/sgemm_after.txt"
tail -1 "$out/sgemm_after.txt"
echo "== load average now $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t_start )) s in all"
echo

files() { local f=() r; for r in $(seq 1 "$rounds"); do f+=("$out/$1.r$r.$2"); done
          (IFS=,; echo "${f[*]}"); }
spec() { echo "$1|2|$micro|off-25MB|$(files "$1" jsonl)|$out/$1.r1.log|$(files "$1" time)"; }
python3 "$root/bench/report.py" --skip "$skip" \
  --anchor "$out/sgemm_before.txt" --anchor "$out/sgemm_after.txt" \
  --pair "$out/sgemm_pair1.txt" --pair "$out/sgemm_pair2.txt" \
  --title "loom ddp overlap ($(basename "$config"), 2 ranks, threads=1 per rank; $ncores cores, shared); speedup = tokens/s ratio vs off-25MB" \
  --run "$(spec off-25MB)" --run "$(spec on-25MB)" --run "$(spec on-1MB)" \
  --run "$(spec on-0.25MB)" --run "$(spec off-0.25MB)" \
  | tee "$out/report.txt"
echo
echo "(runs, logs and JSONL in $out)"
