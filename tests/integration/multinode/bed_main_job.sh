#!/bin/bash
# ctest: labels=integration,multinode,matrix timeout=1500
# The main job across machines: configs/fortunes_ddp.json (README command 1's run: 600 steps on
# Debian's fortunes, byte-level) on 2 nodes x 2 ranks of tools/nodes.sh's test bed against the
# same run on one host with 4 ranks: the loss curve, grad norms, validation losses and final
# parameters equal within compare_runs.py's tolerances (docs/tolerances.md), and the final
# validation loss beats the unigram baseline as the main job requires. Skips (77) where
# namespaces cannot be made.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/bed.sh"
bed_up 2
make_data
main_job() { # main_job NAME: the main job's config on 4 ranks, through "${MPIRUN[@]}"
  mkdir -p "$WORK/$1"
  timeout 1200 "${MPIRUN[@]}" -np 4 --bind-to none "$LOOM" train \
    "$LOOM_SRC/configs/fortunes_ddp.json" --set "data.train=$WORK/data/train_*.bin" \
    --set "data.val=$WORK/data/val_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
    --set "logging.metrics=$WORK/$1/metrics.jsonl" --set logging.tensorboard= \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":0,\"keep\":0}" \
    > "$WORK/$1/out.log" 2>&1 || { tail -20 "$WORK/$1/out.log"; die "the main job ($1) failed"; }
}
main_job bed
on_host main_job host
compare bed host
python3 - "$WORK/bed/metrics.jsonl" "$WORK/data/meta.json" <<'PY' || die "the bed run's loss"
import json, sys
val = [r["val_loss"] for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r][-1]
base = json.load(open(sys.argv[2]))["unigram_val_loss"]
print(f"final val loss across 2 nodes: {val:.4f} (unigram baseline {base:.4f}, "
      f"{100 * (1 - val / base):.0f} % below)")
sys.exit(0 if val < base else 1)
PY
echo "PASS: the main job on 2 nodes x 2 ranks equals the one-host 4-rank run"
