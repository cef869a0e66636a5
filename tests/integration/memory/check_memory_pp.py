# memory_pp.sh: [--exact-acts] WORK RUN...: every stage's measured memory, traffic and in-flight
#   micro-batches within 5 % of the estimate (--exact-acts: the logged activation peaks and the
#   in-flight counts to the byte / exactly)
import json, os, re, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records, rel

args = sys.argv[1:]
exact = "--exact-acts" in args
args = [a for a in args if a != "--exact-acts"]
work, runs = args[0], args[1:]
CATS = ("params", "grads", "optim", "activations", "other")


ok = True
hdr = (f"{'run':<10} {'stage':>5} {'units':>6} {'cat':<12}{'measured':>11}{'estimate':>11}"
       f"{'rel':>8}")
print(hdr)
print("-" * len(hdr))
for name in runs:
    recs = records(f"{work}/{name}/metrics.jsonl")
    steps = [x for x in recs if "loss" in x]
    meas = steps[-1]["mem_peak_bytes"]
    comm = steps[1]["comm_bytes"]  # step 2: a steady-state step
    est = json.load(open(f"{work}/{name}/estimate.json"))
    log = open(f"{work}/{name}/out.log").read()
    st = est["stages"]
    rows = [(0, k, meas[k], st[0]["bytes"][k]) for k in CATS]
    rows.append((0, "comm/step", comm, st[0]["comm_bytes_per_step"]))
    # every stage's activation peak and in-flight micro-batches, from the logs (any dp/tp rank)
    found = re.findall(
        r"pipeline stage (\d+) of \d+ \(units (\d+)\.\.(\d+)\): peak activation memory (\d+) "
        r"bytes; params (\d+), grads (\d+), optim (\d+) bytes", log)
    logged = {int(x[0]): [int(v) for v in x[3:]] for x in found}
    acts = {s: v[0] for s, v in logged.items()}
    for x in found:  # the trainer's split is the estimate's (one function)
        s, a, b = int(x[0]), int(x[1]), int(x[2])
        if s >= len(st) or (st[s]["first_unit"], st[s]["last_unit"]) != (a, b):
            print(f"    FAIL {name}: stage {s} trains units {a}..{b}, the estimate split "
                  f"differently")
            ok = False
    fl = {int(s): int(k) for s, k in re.findall(
        r"bubble: stage (\d+) of \d+, .*?peak (\d+) micro-batches in flight", log)}
    if len(acts) != len(st) or len(fl) != len(st):
        print(f"    FAIL {name}: expected {len(st)} stages in the logs, found {sorted(acts)} / "
              f"{sorted(fl)}")
        ok = False
    for s in sorted(logged):
        for k, v in zip(("activations", "params", "grads", "optim"), logged[s]):
            rows.append((s, ("acts" if k == "activations" else k) + " (log)", v,
                         st[s]["bytes"][k]))
    for s in sorted(fl):
        rows.append((s, "in flight", fl[s], st[s]["in_flight"]))
    for s, k, m, e in rows:
        r = rel(m, e)
        units = f"{st[s]['first_unit']}..{st[s]['last_unit']}"
        bad = r > 0.05 or (exact and k in ("acts (log)", "in flight") and m != e)
        print(f"{name:<10} {s:>5} {units:>6} {k:<12}{m:>11}{e:>11}{r:>8.2%}"
              f"{'  FAIL' if bad else ''}")
        ok = ok and not bad
print("memory_pp: " + ("every figure within 5% of the estimate" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
