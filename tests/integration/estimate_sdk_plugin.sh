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
. "$(dirname "$0")/lib.sh"
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

/usr/bin/python3 - "$WORK" "$SCRATCH" <<'PY'
import json, sys
work, scratch = sys.argv[1], int(sys.argv[2])
CATS = ("params", "grads", "optim", "host", "activations", "comm", "other", "total")

def load(name):
    recs = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    last = [r for r in recs if "loss" in r][-1]
    return last["mem_peak_bytes"], last.get("mem_peak_bytes_max"), \
        json.load(open(f"{work}/{name}/estimate.json"))

bad = []
meas, mx, est = load("own")
_, _, ddp = load("ddp_only")
print(f"{'category':<12}{'rank 0':>12}{'largest':>12}{'estimate':>12}")
for k in CATS:
    e = est["bytes"][k]
    print(f"{k:<12}{meas.get(k, 0):>12}{(mx or {}).get(k, 0):>12}{e:>12}")
    for who, v in (("rank 0", meas.get(k, 0)), ("the largest rank", (mx or {}).get(k, 0))):
        if v != e:
            bad.append(f"own slot: {k} of {who} {v} != estimate {e}")
if est["bytes"]["comm"] != ddp["bytes"]["comm"] + scratch:
    bad.append(f"estimate comm {est['bytes']['comm']} != ddp's {ddp['bytes']['comm']} + the "
               f"template's {scratch}")
if "template scratch" not in est["formula"]["comm"]:
    bad.append(f"the comm formula does not name the template's report: {est['formula']['comm']}")
meas, mx, est = load("default")
for k in CATS:
    e = est["bytes"][k]
    if k in ("params", "grads", "optim", "activations") and meas.get(k, 0) != e:
        bad.append(f"default (no slot): {k} measured {meas.get(k, 0)} != estimate {e}")
    if (mx or meas).get(k, 0) > e:
        bad.append(f"default (no slot): {k} peak {(mx or meas).get(k, 0)} exceeds the estimate {e}")
print(f"default (template_sync, no slot): peak {(mx or meas)['total']} <= estimate "
      f"{est['bytes']['total']}, comm/step {est['comm_bytes_per_step']}")
for b in bad:
    print("FAIL", b)
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] || die "the estimate does not match the measured peak"
echo "estimate_sdk_plugin: an out-of-tree plugin's own estimate = its measured peak; the role default bounds one without"
