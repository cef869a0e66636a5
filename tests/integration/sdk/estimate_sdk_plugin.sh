#!/bin/bash
# A third party's parallel plugin describes its own memory (ABI 1.6, loom_parallel_v1.estimate)
# and `loom estimate` counts it: sdk/template, built out of tree against an installed loom,
# holds a known comm buffer (its "comm_scratch_bytes" option) from setup to destroy and reports
# it in its estimate slot. Trained 3 steps next to ddp on 2 ranks, every category of its
# measured peak (mem_peak_bytes in metrics.jsonl, rank 0 and the largest rank) equals
# `loom estimate --json` of the same config, comm = ddp's + the scratch. Then the NULL-slot
# default: template_sync.so (a gradient-sync owner without the slot) is accounted by its role
# and bounds its measured peak, with params, grads, optim and activations exact.
# Needs: LOOM_BUILD, LOOM_SRC.
set -u
. "$(dirname "$0")/../lib/lib.sh"
SCRATCH=123456

echo "== install loom and build sdk/template against the install only"
cmake --install "$LOOM_BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
  { cat "$WORK/install.log"; die "cmake --install failed"; }
cp -r "$LOOM_SRC/sdk/template" "$WORK/tpl"
rm -rf "$WORK/tpl/build"
cmake -S "$WORK/tpl" -B "$WORK/tpl/build" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  >"$WORK/tpl.log" 2>&1 && cmake --build "$WORK/tpl/build" >>"$WORK/tpl.log" 2>&1 ||
  { cat "$WORK/tpl.log"; die "the template did not build out of tree"; }
SO=$WORK/tpl/build/template.so
[ -f "$SO" ] || die "no $SO"

make_data
# case NAME PARALLEL_JSON: train 3 steps on 2 ranks, then estimate the same config
case_() {
  local name=$1 par=$2
  local args=(--set train.steps=3 --set train.micro_batch_size=2 --set train.eval_interval=0
              --set checkpoint=null --set "parallel=$par")
  run 2 "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
}
case_ own "[{\"plugin\":\"ddp\"},{\"plugin\":\"$SO\",\"comm_scratch_bytes\":$SCRATCH}]"
case_ ddp_only '[{"plugin":"ddp"}]'
case_ default "[{\"plugin\":\"$LOOM_BUILD/tests/fixtures/template_sync.so\"}]"

/usr/bin/python3 "$HERE/estimate_peaks.py" "$WORK" "$SCRATCH"
[ $? -eq 0 ] || die "the estimate does not match the measured peak"
echo "estimate_sdk_plugin: an out-of-tree plugin's own estimate = its measured peak; the role default bounds one without"
