#!/bin/bash
# loom's main job: set up, turn real English text into token shards, train a ~3M-parameter GPT
# with data parallel (ddp.so) on 2 ranks, evaluate against the unigram baseline, sample.
#   tools/main_job.sh [TEXT_PATH...]     default text: Debian's fortunes
#   NP=4 tools/main_job.sh               more ranks (oversubscribed beyond the core count)
#   tools/main_job.sh -- --set train.steps=100   extra arguments for `loom train`
set -euo pipefail
cd "$(dirname "$0")/.."
texts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do texts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
tools/setup.sh
data=data/fortunes run=runs/fortunes_ddp
if [ ${#texts[@]} -gt 0 ]; then
  data=data/custom run=runs/custom
  rm -rf "$data" "$run"
  build/bin/loom-prepare --out "$data" "${texts[@]}"
elif [ ! -f "$data/meta.json" ]; then
  build/bin/loom-prepare --out "$data" /usr/share/games/fortunes
fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
np=${NP:-2}
# An interrupted run resumes from its last checkpoint; delete $run to start over.
mpirun -np "$np" --oversubscribe --bind-to none build/bin/loom train configs/fortunes_ddp.json \
  --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
  --set "data.vocab=$data/vocab.json" --set "train.micro_batch_size=$((16 / np > 0 ? 16 / np : 1))" \
  --set "checkpoint.dir=$run/ckpt" --set "logging.metrics=$run/metrics.jsonl" \
  "$@"
# The verdict: final validation loss against the unigram baseline of the same split.
python3 - "$data/meta.json" "$run/metrics.jsonl" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))["unigram_val_loss"]
vals = [json.loads(l) for l in open(sys.argv[2]) if '"val_loss"' in l]
last = vals[-1]["val_loss"]
print(f"main job: validation loss {last:.4f} nats/token vs unigram baseline {base:.4f} "
      f"({100 * (base - last) / base:.0f}% below)")
sys.exit(0 if last < base else 1)
PY
