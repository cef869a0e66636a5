# estimate_sdk_plugin.sh: WORK SCRATCH: every category of the template's measured peak (rank 0
#   and the largest) = its `loom estimate`; the NULL-slot default (template_sync) bounds its peak
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
