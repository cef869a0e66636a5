# memory_precision_zero.sh: WORK TINY_JSON RUN...: ZeRO 1/2/3 (+ offload) memory under 16-bit
#   storage = the estimate = the formula
import json, os, math, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records, rel

work, cfg_path, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = json.load(open(cfg_path))["model"]
C, V, T, L = cfg["n_embd"], cfg["vocab_size"], cfg["context_length"], cfg["n_layer"]
# the GPT-2 parameter count, independently of loom
wte, wpe, block, head = V * C, T * C, 12 * C * C + 13 * C, 2 * C
psi = wte + wpe + L * block + head
units = [wte + wpe] + [block] * L + [head + wte]  # the head reads the tied wte
STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
CATS = ("params", "grads", "optim", "host")


def formula(prec, stage, off, n, accum, prefetch=False):
    s16 = prec != "fp32"
    P, K = (2, 12) if s16 else (4, 8)
    G = 2 if s16 and accum == 1 else 4
    k_all = (K + G) if (off and s16) else (K + 8) if off else K  # offload: + staging (+ master)
    full = div = 0
    for coef, sharded in ((P, stage >= 3), (G, stage >= 2), (k_all, stage >= 1)):
        if sharded and n > 1:
            div += coef
        else:
            full += coef
    states = full * psi + div * psi / n
    if stage >= 3:  # the largest gathered unit, with prefetch the largest neighbouring pair
        states += P * (max(units[i] + units[i + 1] for i in range(len(units) - 1))
                       if prefetch else max(units))
    # the 1.3 layout's fp32 working copy of one unit would be a parameter; 16-bit storage
    # keeps it (and the gradient accumulators) in "other"
    working = 0
    text = " + ".join(([f"{full}Psi"] if full else []) + ([f"{div}Psi/N"] if div else []))
    if stage >= 3:
        text += f" + {P}*gathered"
    return states, working, text


ok = True
comm = {}
print(f"Psi = {psi} (tiny); bytes per rank, rank 0, peak over 2 steps")
hdr = (f"{'run':<20}{'N':>2} {'params':>8}{'grads':>8}{'optim':>8}{'host':>8} {'states':>9}"
       f"{'estimate':>9}{'formula':>9} {'paper':<22}{'rel':>7} {'comm/step':>10}{'est':>10}")
print(hdr)
print("-" * len(hdr))
for r in runs:
    name, prec, strat, off, n = r.split(":")
    off, n = off == "1", int(n)
    accum = 2 if "acc2" in name else 1
    prefetch = "pf" in name
    recs = records(f"{work}/{name}/metrics.jsonl")
    steps = [x for x in recs if "loss" in x]
    meas, mx = steps[-1]["mem_peak_bytes"], steps[-1].get("mem_peak_bytes_max")
    c = steps[-1]["comm_bytes"]  # step 2: a steady-state step
    est = json.load(open(f"{work}/{name}/estimate.json"))
    f_states, f_work, paper = formula(prec, STAGE[strat], off, n, accum, prefetch)
    f_total = f_states + f_work
    m_states = sum(meas[k] for k in CATS)
    r_states = rel(m_states, f_total)
    bad = []
    if r_states > 0.05:
        bad.append(f"params+grads+optim+host {m_states} vs formula {paper} + working = "
                   f"{f_total:.0f}")
    for k in CATS:
        if max(meas[k], est["bytes"][k]) and rel(meas[k], est["bytes"][k]) > 0.05:
            bad.append(f"{k}: measured {meas[k]} vs estimate {est['bytes'][k]}")
    if meas["activations"] != est["bytes"]["activations"]:
        bad.append(f"activations {meas['activations']} vs estimate {est['bytes']['activations']}")
    if c != est["comm_bytes_per_step"]:
        bad.append(f"comm {c} bytes/step vs estimate {est['comm_bytes_per_step']}")
    if est.get("paper_formula") != paper:
        bad.append(f"estimate prints the formula {est['paper_formula']!r}, expected {paper!r}")
    if mx is None:
        bad.append("metrics have no mem_peak_bytes_max")
    else:
        for k in ("params", "grads", "optim", "host", "activations", "comm", "other", "total"):
            if mx.get(k, 0) > est["bytes"][k]:
                bad.append(f"{k}: the largest rank's peak {mx[k]} exceeds the estimate "
                           f"{est['bytes'][k]}")
    comm[(prec, strat, off, n, accum)] = c
    print(f"{name:<20}{n:>2} {meas['params']:>8}{meas['grads']:>8}{meas['optim']:>8}"
          f"{meas['host']:>8} {m_states:>9}{est['model_states']:>9}{f_total:>9.0f} "
          f"{paper:<22}{r_states:>7.2%} {c:>10}{est['comm_bytes_per_step']:>10}")
    for b in bad:
        print(f"    FAIL {name}: {b}")
        ok = False

# 16-bit traffic is half of fp32's, run by run (ZeRO's reduce-scatter + all-gather: every
# payload is 16-bit with one micro-batch)
print("traffic per step, 16-bit / fp32:")
for (prec, strat, off, n, accum), c in sorted(comm.items()):
    if prec == "fp32" or n == 1 or off or accum > 1:
        continue
    c32 = comm.get(("fp32", strat, off, n, accum))
    if c32 is None:  # the script's run lists (CI's covering subset too) pair every such run
        print(f"    FAIL {prec} {strat} N={n}: no fp32 twin ran, its traffic is unchecked")
        ok = False
        continue
    ratio = c / c32 if c32 else float("nan")
    print(f"  {prec} {strat} N={n}: {c} / {c32} = {ratio:.4f}")
    if 2 * c != c32:
        print(f"    FAIL {prec} {strat} N={n}: 16-bit traffic is not half of fp32's")
        ok = False
print("memory_precision_zero: " + ("every run within 5% of the formula and the estimate; "
                                   "16-bit traffic = fp32/2" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
