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
. "$root/bench/lib.sh"
bench_options ddp_overlap.sh 2,18 "build steps skip rounds micro out data config" "$@"
bench_setup ddp_overlap.sh ddp_overlap
bench_mpirun_opts=(-x LOOM_DEBUG=1) # ddp's "N buckets of" line

# run NAME OVERLAP BUCKET_MB ROUND: one 2-rank training run, metrics to $out/NAME.rROUND.jsonl
run() {
  local name=$1 overlap=$2 mb=$3 round=$4
  printf '   %-12s overlap %-5s bucket %5s MB, round %d ... ' "$name" "$overlap" "$mb" "$round"
  local t0=$SECONDS nb
  bench_train "$name" 2 "$micro" "$round" \
    --set "parallel[0].overlap=$overlap" --set "parallel[0].bucket_size_mb=$mb"
  nb=$(grep -o '[0-9]* buckets of' "$out/$name.r$round.log" | head -1 | cut -d' ' -f1)
  echo "$((SECONDS - t0)) s (${nb:-?} buckets)"
}

bench_banner "ddp overlap"
bench_anchors_before 1
echo "== training runs: 2 ranks, micro batch $micro each, $steps steps, the first $skip skipped"
for r in $(seq 1 "$rounds"); do
  run off-25MB false 25 "$r"
  run on-25MB true 25 "$r"
  run on-1MB true 1 "$r"
  run on-0.25MB true 0.25 "$r"
  run off-0.25MB false 0.25 "$r"
done
bench_anchor_after
spec() { bench_spec "$1" 2 "$micro" off-25MB; }
bench_report "loom ddp overlap ($(basename "$config"), 2 ranks, threads=1 per rank; $ncores cores, shared); speedup = tokens/s ratio vs off-25MB" \
  "$(spec off-25MB)" "$(spec on-25MB)" "$(spec on-1MB)" "$(spec on-0.25MB)" "$(spec off-0.25MB)"
