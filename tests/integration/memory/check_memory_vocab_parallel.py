# memory_vocab_parallel.sh: WORK TP2 VP: each run's measured peak per category (the largest
#   rank's) and steady-step traffic within 5 % of `loom estimate`, then the vocab-parallel peak
#   per rank at most 0.6 of tp 2's; tokens/s (each run's best step of steps 2..) printed, and
#   a failure only below 0.5 of tp 2's (a gross regression such as a host pass over the
#   logits): on 2 cores shared with other jobs both runs' steps swing 2-4x (docs/parallelism.md
#   has the alternating 57-step measurement)
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records, rel

work, tp2, vp = sys.argv[1], sys.argv[2], sys.argv[3]
CATS = ("params", "grads", "optim", "activations", "comm", "other", "total")
ok, got = True, {}
print(f"{'run':<8} {'cat':<12}{'measured':>11}{'estimate':>11}{'rel':>8}")
for name in (tp2, vp):
    steps = [x for x in records(f"{work}/{name}/metrics.jsonl") if "loss" in x]
    meas = steps[-1]["mem_peak_bytes_max"]
    est = json.load(open(f"{work}/{name}/estimate.json"))["stages"][0]
    rows = [(k, meas[k], est["bytes"][k]) for k in CATS]
    rows.append(("comm/step", steps[1]["comm_bytes"], est["comm_bytes_per_step"]))
    for k, m, e in rows:
        bad = rel(m, e) > 0.05
        ok = ok and not bad
        print(f"{name:<8} {k:<12}{m:>11}{e:>11}{rel(m, e):>8.2%}{'  FAIL' if bad else ''}")
    got[name] = (meas["total"], max(x["tokens_per_s"] for x in steps[1:]))
(t_mem, t_tps), (v_mem, v_tps) = got[tp2], got[vp]
print(f"peak per rank: tp2 {t_mem} bytes, tp2 x vocab_parallel {v_mem} bytes "
      f"({v_mem / t_mem:.3f} of tp2, {1 - v_mem / t_mem:.1%} lower); tokens/s {t_tps:.0f} -> "
      f"{v_tps:.0f} ({v_tps / t_tps:.2f}x)")
if v_mem > 0.6 * t_mem:
    print("FAIL: the vocab-parallel peak is not below 0.6 of tp 2's")
    ok = False
if v_tps < 0.5 * t_tps:
    print("FAIL: vocab-parallel tokens/s below 0.5 of tp 2's")
    ok = False
print("memory_vocab_parallel: " + ("PASS" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
