#!/bin/bash
# Pipeline bubble and activation memory (pipeline.so): for gpipe, 1f1b and interleaved 1F1B
# (v = 2 model chunks per stage, Narayanan et al. 2021 §2.2.1) at m = 4, 8, 16 micro-batches on
# p = 2 stages (and p = 4 with --p4, oversubscribed on small machines), the fraction of each
# stage's pipeline time spent blocked in receives and send completions (the plugin's "bubble:"
# log line, averaged over the steps after the first) against the ideal (p − 1)/(v·m + p − 1)
# (v = 1 for gpipe and 1f1b), and each stage's peak activation memory (the host's per-stage
# line), 1F1B (at most p − stage micro-batches in flight) against GPipe (all m) and interleaved
# ((p − s − 1)·2 + (v − 1)·p + 1 chunk-micro-batches). The default model has 8 blocks so that
# p·v = 8 virtual stages divide them, and the main job's width (C = 256, 8 heads) so that the
# blocks' compute, not per-message latency, sets the timing (--embd 32: the tiny model). Ranks
# yield the CPU while they wait (mpi_yield_when_idle), so an oversubscribed p = 4 measures the
# schedule rather than the ranks' spinning. Prints a table; never passes or fails on time.
#
#   bench/pipeline_bubble.sh [--build DIR] [--steps N] [--layers L] [--embd C] [--p4] [--p4only]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=8 layers=8 embd=256 p4=0
. "$root/bench/lib.sh"
bench_options pipeline_bubble.sh 2,12 "build steps layers embd p4:p4=1 p4only:p4=2" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_mpi_yield_when_idle=1
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-bubble.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -d /usr/share/games/fortunes ]; then src=/usr/share/games/fortunes; else src="$root/core $root/docs"; fi
"$build/bin/loom-prepare" --out "$work/data" $src >/dev/null 2>&1
echo "p | schedule | v | m | stage | idle fraction | ideal (p-1)/(v*m+p-1) | peak in flight |" \
  "peak activations (bytes)"
echo "--|---|---|---|---|---|---|---|---"
ps=2
[ $p4 = 1 ] && ps="2 4"
[ $p4 = 2 ] && ps=4
for p in $ps; do
  for m in 4 8 16; do
    for sv in gpipe:1 1f1b:1 interleaved:2; do
      s=${sv%:*} v=${sv#*:}
      log=$work/p${p}_${s}_m$m.log
      timeout 600 mpirun -np "$p" --bind-to none "$build/bin/loom" train "$root/configs/tiny.json" \
        --set "data.train=$work/data/train_*.bin" --set "data.val=$work/data/val_*.bin" \
        --set "data.vocab=$work/data/vocab.json" --set checkpoint=null \
        --set model.n_layer=$layers --set model.n_embd=$embd --set model.n_head=8 \
        --set train.micro_batch_size=2 \
        --set train.grad_accum_steps=$m --set train.steps=$steps --set train.eval_interval=0 \
        --set logging.interval=1000 --set "logging.metrics=$work/m.jsonl" \
        --set "parallel=[{\"plugin\":\"pipeline\",\"size\":$p,\"schedule\":\"$s\",\"chunks\":$v}]" \
        >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
      /usr/bin/python3 - "$log" "$p" "$s" "$m" "$v" <<'PY'
import re, sys
log, p, s, m, v = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
text = open(log).read()
bub = {int(a): (float(b), int(c)) for a, b, c in re.findall(
    r"bubble: stage (\d+) of \d+, schedule \S+, m \d+(?:, chunks \d+)?: idle ([0-9.]+) .*?peak (\d+) "
    r"micro", text)}
act = {int(a): int(b) for a, b in re.findall(
    r"pipeline stage (\d+) of \d+ \(units [^)]*\): peak activation memory (\d+) bytes", text)}
for st in sorted(bub):
    print(f"{p} | {s} | {v} | {m} | {st} | {bub[st][0]:.3f} | {(p - 1) / (v * m + p - 1):.3f} | "
          f"{bub[st][1]} | {act.get(st, 0)}")
PY
    done
  done
done
