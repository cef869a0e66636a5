#!/bin/bash
# Memory and traffic of context parallel (context_parallel.so; the tiny config, B 4, T 64):
# `loom estimate --json` against what the trainer measures (mem_peak_bytes per category, the
# largest rank's, and comm_bytes of a steady step), to the byte, for 1 rank, cp 2 with ddp, and
# cp 2 x tp 2 (4 heads, 4 ranks); then the activations per rank of cp 2 are half the 1-rank
# run's (each rank holds T/cp tokens of every sequence) and the ring buffers are what
# gpt_cp_scratch_bytes says: 4 blocks of B*T/cp*2C/tp fp32 + 2 x (T/cp, C).
. "$(dirname "$0")/../lib/lib.sh"
make_data
CP2='{"plugin":"context_parallel","size":2}'
RUNS=()
case_() { # case_ NAME NRANKS PARALLEL_JSON [--set ...]
  local name=$1 n=$2 par=$3
  shift 3
  local args=(--set train.steps=4 --set train.eval_interval=0 --set checkpoint=null
              --set "parallel=$par" --set logging.interval=1 "$@")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name")
}
case_ one 1 '[]' --set model.n_head=4
case_ cp2 2 "[$CP2,{\"plugin\":\"ddp\"}]" --set model.n_head=4
case_ cp2_tp2 4 "[$CP2,{\"plugin\":\"tensor_parallel\",\"size\":2},{\"plugin\":\"ddp\"}]" \
  --set model.n_head=4
/usr/bin/python3 - "$WORK" "${RUNS[@]}" <<'PY' || die "cp memory or traffic != loom estimate"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["LOOM_SRC"], "tests", "integration", "lib"))
from runs import records
work, names = sys.argv[1], sys.argv[2:]
CATS = ("params", "grads", "optim", "activations", "comm", "other", "total")
ok, meas = True, {}
print(f"{'run':<8} {'cat':<12}{'measured':>11}{'estimate':>11}")
for name in names:
    steps = [x for x in records(f"{work}/{name}/metrics.jsonl") if "loss" in x]
    m = steps[-1]["mem_peak_bytes_max"]
    est = json.load(open(f"{work}/{name}/estimate.json"))["stages"][0]
    rows = [(k, m[k], est["bytes"][k]) for k in CATS]
    rows.append(("comm/step", steps[-1]["comm_bytes"], est["comm_bytes_per_step"]))
    for k, a, b in rows:
        bad = a != b
        ok = ok and not bad
        print(f"{name:<8} {k:<12}{a:>11}{b:>11}{'  FAIL' if bad else ''}")
    meas[name] = m
B, T, C, cp = 4, 64, 32, 2
a1, a2 = meas["one"]["activations"], meas["cp2"]["activations"]
print(f"activations per rank: 1 rank {a1}, cp 2 {a2} ({a2 / a1:.4f} of it)")
ok = ok and 2 * a2 == a1
al = lambda x: (x + 63) // 64 * 64
for name, tp in (("cp2", 1), ("cp2_tp2", 2)):
    ring = 4 * al(B * T // cp * 2 * C // tp * 4) + 2 * al(T // cp * C * 4)
    print(f"{name}: ring buffers {meas[name]['comm']} bytes, 4 x B*T/cp*2C/tp*4 + 2 x T/cp*C*4 "
          f"= {ring}")
    ok = ok and meas[name]["comm"] == ring
print("memory_cp: " + ("PASS" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
PY
