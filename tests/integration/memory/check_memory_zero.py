# memory_zero.sh: WORK TINY_JSON RUN...: ZeRO memory and traffic within 5 % of the paper's
#   formulas and the estimate
import json, os, math, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records, rel

work, cfg_path, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = json.load(open(cfg_path))["model"]
C, V, T, L = cfg["n_embd"], cfg["vocab_size"], cfg["context_length"], cfg["n_layer"]
# the GPT-2 parameter count, independently of loom: wte, wpe; per block ln1, qkv, proj, ln2,
# fc, fc-proj (weights and biases); ln_f
unit0, block, head = V * C + T * C, 12 * C * C + 13 * C, 2 * C
psi = unit0 + L * block + head
# ZeRO-3 holds the largest gathered unit (the head's with the tied wte it reads); with
# "prefetch": true the next one is in flight as well: the largest pair of neighbouring units
g = [unit0] + [block] * L + [head + V * C]
gathered = {False: max(g), True: max(g[i] + g[i + 1] for i in range(len(g) - 1))}
STAGE = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}
CATS = ("params", "grads", "optim", "host")


def formula(stage, off, n, prefetch):
    shard = math.ceil(psi / n)
    part = shard if stage >= 1 else psi
    return {
        "params": 4 * (shard + gathered[prefetch]) if stage >= 3 else 4 * psi,
        "grads": 4 * shard if stage >= 2 else 4 * psi,
        "optim": 0 if off else 8 * part,
        "host": 16 * part if off else 0,
    }


ok = True
print(f"Psi = {psi} (tiny: n_layer {L}, n_embd {C}, vocab {V}, context {T}); bytes per rank, "
      "rank 0, peak over 3 steps")
hdr = (f"{'run':<14}{'N':>2} {'params':>8}{'grads':>8}{'optim':>8}{'host':>8} "
       f"{'states':>9}{'formula':>9}{'estimate':>9}{'rel':>7}  {'act ok':>6} "
       f"{'comm/step':>10}{'est':>10}{'rel':>7}")
print(hdr)
print("-" * len(hdr))
for r in runs:
    name, strat, off, n = r.split(":")
    off, n = off == "1", int(n)
    prefetch = strat.endswith("+prefetch")
    strat = strat.replace("+prefetch", "")
    recs = records(f"{work}/{name}/metrics.jsonl")
    steps = [x for x in recs if "loss" in x]
    meas = steps[-1]["mem_peak_bytes"]
    mx = steps[-1].get("mem_peak_bytes_max")  # the largest peak over all ranks
    comm = steps[1]["comm_bytes"]  # step 2: a steady-state step
    est = json.load(open(f"{work}/{name}/estimate.json"))
    f = formula(STAGE[strat], off, n, prefetch)
    m_states = sum(meas[k] for k in CATS)
    f_states = sum(f.values())
    e_states = est["model_states"]
    r_states = max(rel(m_states, f_states), rel(m_states, e_states))
    act_ok = meas["activations"] == est["bytes"]["activations"]
    r_comm = rel(comm, est["comm_bytes_per_step"])
    bad = []
    if r_states > 0.05:
        bad.append(f"params+grads+optim+host {m_states} vs formula {f_states} / estimate "
                   f"{e_states}")
    if not act_ok:
        bad.append(f"activations {meas['activations']} vs estimate "
                   f"{est['bytes']['activations']}")
    if r_comm > 0.05:
        bad.append(f"comm {comm} vs estimate {est['comm_bytes_per_step']}")
    if est["stage"] != STAGE[strat] or est["roles"]["offload"] != off:
        bad.append(f"estimate read the roles as stage {est['stage']}, offload "
                   f"{est['roles']['offload']}")
    print(f"{name:<14}{n:>2} {meas['params']:>8}{meas['grads']:>8}{meas['optim']:>8}"
          f"{meas['host']:>8} {m_states:>9}{f_states:>9}{e_states:>9}{r_states:>7.2%}  "
          f"{'yes' if act_ok else 'NO':>6} {comm:>10}{est['comm_bytes_per_step']:>10}"
          f"{r_comm:>7.2%}")
    for k in CATS:  # categories off by more than 5% are worth a look even when the sum fits
        if rel(meas[k], f[k]) > 0.05 and max(meas[k], f[k]) > 0:
            print(f"    note: {k} measured {meas[k]} vs formula {f[k]}")
    mcomm = (mx or meas)["comm"]  # the largest rank's, which the estimate bounds
    if rel(mcomm, est["bytes"]["comm"]) > 0.05 and mcomm + est["bytes"]["comm"]:
        # how far below the bound depends on when non-blocking reductions complete
        print(f"    note: comm buffers measured {mcomm} (largest rank) vs estimate "
              f"{est['bytes']['comm']} (an upper bound)")
    # the estimate is an upper bound for EVERY rank: each category and the total against the
    # largest peak over all ranks (mem_peak_bytes_max; uneven partitions, the rank that
    # receives the largest block of a bucket, differ from rank 0)
    if mx is None:
        bad.append("metrics have no mem_peak_bytes_max")
    else:
        for k in ("params", "grads", "optim", "host", "activations", "comm", "other", "total"):
            e_k = est["bytes"][k]
            if mx.get(k, 0) > e_k:
                bad.append(f"{k}: the largest rank's peak {mx[k]} exceeds the estimate {e_k}")
    for b in bad:
        print(f"    FAIL {name}: {b}")
        ok = False
print("memory_zero: " + ("all runs within 5% of the formula and the estimate" if ok else
                         "MISMATCH"))
sys.exit(0 if ok else 1)
