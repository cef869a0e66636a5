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
. "$root/bench/lib.sh"
bench_options throughput.sh 2,17 "build steps skip rounds out data config" "$@"
bench_setup throughput.sh throughput

# run NAME NP MICRO ROUND [--set ...]: one training run, metrics to $out/NAME.rROUND.jsonl
run() {
  printf '   %-26s %d rank(s), micro batch %d, round %d ... ' "$1" "$2" "$3" "$4"
  local t0=$SECONDS
  bench_train "$@"
  echo "$((SECONDS - t0)) s"
}

bench_banner throughput
bench_anchors_before 3
echo "== training runs: $steps steps each, the first $skip skipped as warm-up"
for r in $(seq 1 "$rounds"); do
  run 1rank-mb8 1 8 "$r"
  run 2rank-mb8-weak 2 8 "$r"
  run 2rank-mb4-strong 2 4 "$r"
done
bench_anchor_after
bench_report "loom throughput ($(basename "$config"), threads=1 per rank; $ncores cores, shared)" \
  "$(bench_spec 1rank-mb8 1 8 1rank-mb8)" \
  "$(bench_spec 2rank-mb8-weak 2 8 1rank-mb8)" \
  "$(bench_spec 2rank-mb4-strong 2 4 1rank-mb8)"
