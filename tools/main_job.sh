#!/bin/bash
# loom's main job: set up, turn real English text into token shards, train a ~3M-parameter GPT
# with data parallel (ddp.so) on 2 ranks, evaluate against the unigram baseline, sample.
#   tools/main_job.sh [TEXT_PATH...]     default text: Debian's fortunes
#   NP=4 tools/main_job.sh               more ranks (oversubscribed beyond the core count)
#   tools/main_job.sh -- --set train.steps=100   extra arguments for `loom train`
# For the tests: LOOM_BUILD_DIR=DIR uses (and builds) DIR instead of build/; LOOM_NO_SETUP=1
# skips tools/setup.sh (DIR is built already); LOOM_WORK_DIR=DIR puts data/ and runs/ in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
texts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do texts+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
build=${LOOM_BUILD_DIR:-build}
work=${LOOM_WORK_DIR:-.}
[ -n "${LOOM_NO_SETUP:-}" ] || LOOM_BUILD_DIR="$build" tools/setup.sh
data=$work/data/fortunes run=$work/runs/fortunes_ddp
if [ ${#texts[@]} -gt 0 ]; then
  data=$work/data/custom run=$work/runs/custom
  rm -rf "$data" "$run"
  "$build/bin/loom-prepare" --out "$data" "${texts[@]}"
elif [ ! -f "$data/meta.json" ]; then
  "$build/bin/loom-prepare" --out "$data" /usr/share/games/fortunes
fi
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
np=${NP:-2}
micro=$((16 / np > 0 ? 16 / np : 1))

# Fit the evaluation to the validation split it was given: the config evaluates 8 micro-batches
# per rank (8 x 16 sequences of 128 tokens, ~2.5 val blocks, ~480 KiB of text), but a smaller
# text is fine with fewer. Prints the --set to use, or why the text is too small.
fit_eval=$(python3 - "$data" "$np" "$micro" configs/fortunes_ddp.json "$@" <<'PY'
import glob, json, struct, sys
data, np, micro, config, args = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
train = json.load(open(config))["train"]
sets = {}  # the user's own --set train.* values win
for i, a in enumerate(args):
    v = args[i + 1] if a == "--set" and i + 1 < len(args) else a[6:] if a.startswith("--set=") else None
    if v and "=" in v:
        k, x = v.split("=", 1)
        sets[k] = x
if "train.eval_batches" in sets:
    sys.exit(0)
T = int(sets.get("train.seq_len", train["seq_len"]))
micro = int(sets.get("train.micro_batch_size", micro))
per_batch = micro * np  # sequences one evaluation batch reads over all ranks
seqs = 0                # what loom's loader counts: (tokens - 1) // T per shard
for f in sorted(glob.glob(f"{data}/val_*.bin")):
    with open(f, "rb") as fh:
        seqs += max(0, struct.unpack("<3i", fh.read(12))[2] - 1) // T
fit = min(train["eval_batches"], seqs // per_batch)
if fit == 0:
    meta = json.load(open(f"{data}/meta.json"))
    need = 19 * 8192 + per_batch * T + 1  # the first val block is block 19 of the text
    sys.exit(f"main job: the text is too small to evaluate: its validation split (every 20th "
             f"8 KiB block, {meta['val_tokens']} tokens) holds {seqs} sequences of {T} tokens, "
             f"one evaluation batch needs {per_batch} ({micro} per rank x {np} ranks). Give at "
             f"least {need:,} bytes (~{need // 1024} KiB) of text, or run without evaluation: "
             f"tools/main_job.sh FILES -- --set data.val= (then no verdict).")
if fit < train["eval_batches"]:
    print(f"main job: data.val holds {seqs} sequences of {T} tokens: evaluating on {fit} "
          f"batches x {per_batch} sequences instead of {train['eval_batches']}", file=sys.stderr)
print(f"train.eval_batches={fit}")
PY
)
eval_set=()
[ -z "$fit_eval" ] || eval_set=(--set "$fit_eval")
# An interrupted run resumes from its last checkpoint; delete $run to start over.
mpirun -np "$np" --oversubscribe --bind-to none "$build/bin/loom" train configs/fortunes_ddp.json \
  --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
  --set "data.vocab=$data/vocab.json" --set "train.micro_batch_size=$micro" \
  --set "checkpoint.dir=$run/ckpt" --set "logging.metrics=$run/metrics.jsonl" \
  --set "logging.tensorboard=$run/tb" \
  "${eval_set[@]}" "$@"
# The verdict: final validation loss against the unigram baseline of the same split.
python3 - "$data/meta.json" "$run/metrics.jsonl" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))["unigram_val_loss"]
vals = [json.loads(l) for l in open(sys.argv[2]) if '"val_loss"' in l]
if base is None or not vals:
    sys.exit("main job: no validation loss to judge (no validation split or data.val=null)")
last = vals[-1]["val_loss"]
print(f"main job: validation loss {last:.4f} nats/token vs unigram baseline {base:.4f} "
      f"({100 * (base - last) / base:.0f}% below)")
sys.exit(0 if last < base else 1)
PY
