# memory_hybrid.sh: WORK TINY_JSON NAME:RANKS...: hybrid sharding's model states and traffic,
#   measured = `loom estimate` = the formula with N = the shard group's size
import json, math, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records

work, cfg_path, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = json.load(open(cfg_path))["model"]
C, V, T, L = cfg["n_embd"], cfg["vocab_size"], cfg["context_length"], cfg["n_layer"]
unit0, block, head = V * C + T * C, 12 * C * C + 13 * C, 2 * C  # GPT-2's count, not loom's
psi = unit0 + L * block + head
gathered = max([unit0] + [block] * L + [head + V * C])  # zero3: the head with the tied wte
CATS = ("params", "grads", "optim")


def formula(stage, K):
    """fp32 model states per rank sharded over K ranks (ZeRO paper sec. 5)."""
    s = math.ceil(psi / K)
    return {"params": 4 * (s + gathered) if stage == 3 else 4 * psi,
            "grads": 4 * s if stage >= 2 else 4 * psi, "optim": 8 * (s if stage else psi)}


ok, states = True, {}
print(f"Psi = {psi}; rank 0's peak bytes over 3 steps; comm: bytes sent in step 2")
for r in runs:
    name, n = r.split(":")
    n = int(n)
    steps = [x for x in records(f"{work}/{name}/metrics.jsonl") if "loss" in x]
    meas, mx, comm = steps[-1]["mem_peak_bytes"], steps[-1]["mem_peak_bytes_max"], steps[1]["comm_bytes"]
    est = json.load(open(f"{work}/{name}/estimate.json"))
    K, R = est["dp_shard"], est["dp_replica"]
    stage = est["stage"]
    f = formula(stage, K)
    m_states = sum(meas[k] for k in CATS)
    states[name] = m_states
    axes = est["comm_axes"]
    bad = []
    if m_states != est["model_states"] or m_states != sum(f.values()):
        bad.append(f"model states {m_states} vs estimate {est['model_states']} / formula "
                   f"{sum(f.values())} (N = {K})")
    if comm != est["comm_bytes_per_step"]:
        bad.append(f"comm {comm} vs estimate {est['comm_bytes_per_step']}")
    if sum(a["bytes"] for a in axes.values()) != est["comm_bytes_per_step"]:
        bad.append(f"comm_axes {axes} do not add up to {est['comm_bytes_per_step']}")
    if R > 1 and axes["dp_replica"]["bytes"] != 2 * (R - 1) * 4 * math.ceil(psi / K) // R:
        bad.append(f"dp_replica {axes['dp_replica']['bytes']} != 2(R-1)/R*4*ceil(Psi/K)")
    if name.startswith("ddp_hier") and set(axes) != {"dp_node", "dp_cross"}:
        bad.append(f"ddp over the hierarchical all-reduce: axes {sorted(axes)}")
    for k in ("params", "grads", "optim", "activations", "comm", "other", "total"):
        if mx.get(k, 0) > est["bytes"][k]:
            bad.append(f"{k}: the largest rank's peak {mx[k]} exceeds the estimate "
                       f"{est['bytes'][k]}")
    print(f"{name:<13} ranks {n} = {K} x {R}: states {m_states} (estimate "
          f"{est['model_states']}, formula {sum(f.values())}); comm {comm} (estimate "
          f"{est['comm_bytes_per_step']}: " +
          ", ".join(f"{a} {v['bytes']}" for a, v in axes.items()) + ")")
    for b in bad:
        print(f"    FAIL {name}: {b}")
        ok = False
for s in ("zero3", "zero2"):  # sharded over the 2 ranks of a group, as on 2 ranks alone
    if f"hybrid_{s}" in states and states[f"hybrid_{s}"] != states[f"{s}_n2"]:
        print(f"    FAIL hybrid {s} on 4 ranks holds {states[f'hybrid_{s}']}, plain {s} on 2 "
              f"ranks {states[f'{s}_n2']}")
        ok = False
print("memory_hybrid: " + ("measured = estimated = formula" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
