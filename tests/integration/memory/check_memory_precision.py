# memory_precision.sh: WORK TINY_JSON RUN...: ddp's memory under fp32/bf16/fp16 = the estimate =
#   the formula
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records, rel

work, cfg_path, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
cfg = json.load(open(cfg_path))["model"]
C, V, T, L = cfg["n_embd"], cfg["vocab_size"], cfg["context_length"], cfg["n_layer"]
# the GPT-2 parameter count, independently of loom: wte, wpe; per block ln1, qkv, proj, ln2,
# fc, fc-proj (weights and biases); ln_f
def psi_of(V):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


psi = psi_of(V)
V_SPLIT = 4096  # strategy_ddp_split's vocabulary (wte's rows: padded_vocab_size in its 2nd run)
B_MICRO, SEQ = 2, json.load(open(cfg_path))["train"]["seq_len"]  # mem_run's micro-batch


def ddp(prec, n, accum, psi=psi):
    """DDP, every rank the whole model (ZeRO paper §3): fp32 4+4+8, mixed 2+2+12."""
    if prec == "fp32":
        return {"params": 4 * psi, "grads": 4 * psi, "optim": 8 * psi}
    return {"params": 2 * psi, "grads": (2 if accum == 1 else 4) * psi, "optim": 12 * psi}


def ddp_split(prec, n, accum):
    return ddp(prec, n, accum, psi_of(V_SPLIT))


FORMULA = {"ddp": ddp, "ddp_split": ddp_split}
CATS = ("params", "grads", "optim")


ok = True
print(f"Psi = {psi} (tiny: n_layer {L}, n_embd {C}, vocab {V}, context {T}); bytes per rank, "
      "rank 0, peak over 3 steps; states = params + grads + optim")
hdr = (f"{'run':<18}{'N':>2} {'params':>8}{'grads':>8}{'optim':>8} {'states':>8}"
       f"{'formula':>9}{'/Psi':>6}{'estimate':>9}{'rel':>7}  storage")
print(hdr)
print("-" * len(hdr))
for r in runs:
    name, strat, n, prec, accum = r.split(":")
    n, accum = int(n), int(accum)
    recs = records(f"{work}/{name}/metrics.jsonl")
    last = [x for x in recs if "loss" in x][-1]
    meas, mx = last["mem_peak_bytes"], last.get("mem_peak_bytes_max")
    est = json.load(open(f"{work}/{name}/estimate.json"))
    f = FORMULA[strat](prec, n, accum)
    m_states, f_states = sum(meas[k] for k in CATS), sum(f.values())
    e_states = sum(est["bytes"][k] for k in CATS)
    bad = []
    for k in CATS:
        if rel(meas[k], f[k]) > 0.05:
            bad.append(f"{k}: measured {meas[k]} vs formula {f[k]} ({rel(meas[k], f[k]):.1%})")
        if meas[k] != est["bytes"][k]:
            bad.append(f"{k}: measured {meas[k]} vs estimate {est['bytes'][k]}")
    if meas["activations"] != est["bytes"]["activations"]:
        bad.append(f"activations {meas['activations']} vs estimate "
                   f"{est['bytes']['activations']}")
    want_p = "fp32" if prec == "fp32" else prec
    want_g = "fp32" if prec == "fp32" or accum > 1 else prec
    if est.get("param_storage") != want_p or est.get("grad_storage") != want_g:
        bad.append(f"estimate storage {est.get('param_storage')}/{est.get('grad_storage')}, "
                   f"expected {want_p}/{want_g}")
    if strat == "ddp_split":
        # the split's buffers, from ddp.c independently of estimate.c: ids (N*B*T int32) and
        # two row buffers (N*B*T x C fp32); fp32 ddp reduces in place, so they are all of comm
        want = n * B_MICRO * SEQ * (4 + 8 * C)
        split = est.get("split_embedding", {})
        if not split.get("on"):
            bad.append("the estimate says ddp does not split wte")
        for what, v in (("rank 0", meas["comm"]), ("the largest rank", (mx or {}).get("comm")),
                        ("estimate", est["bytes"]["comm"])):
            if v != want:
                bad.append(f"comm of {what} {v} != N*B*T*(4+8C) = {want}")
        print(f"    {name}: split embedding comm {meas['comm']} measured = "
              f"{est['bytes']['comm']} estimate = {want} formula")
        # traffic, rank 0 per step: the dense all-reduce 2(N-1)/N*4Psi, the ids' all-gather
        # (N-1)*4BT, and 2(N-1)/N*4C per distinct token row of the step's batch (data-dependent,
        # at most min(N*B*T, V): the estimate's bound)
        dense = 2 * (n - 1) * 4 * psi_of(V_SPLIT) // n
        ids, row = (n - 1) * 4 * B_MICRO * SEQ, 2 * (n - 1) * 4 * C // n
        rows = []
        for x in (x for x in recs if "loss" in x):
            extra = x["comm_bytes"] - dense - ids
            rows.append(extra // row)
            if extra <= 0 or extra % row or x["comm_bytes"] > est["comm_bytes_per_step"]:
                bad.append(f"step {x['step']}: comm_bytes {x['comm_bytes']} is not dense "
                           f"{dense} + ids {ids} + k rows of {row} within the estimate "
                           f"{est['comm_bytes_per_step']}")
        print(f"    {name}: traffic = dense + ids + {min(rows)}..{max(rows)} distinct rows "
              f"<= estimate {est['comm_bytes_per_step']} (bound {split.get('rows')} rows)")
    if mx is None:
        bad.append("metrics have no mem_peak_bytes_max")
    else:
        for k in ("params", "grads", "optim", "activations", "comm", "other", "total"):
            if mx.get(k, 0) > est["bytes"][k]:
                bad.append(f"{k}: the largest rank's peak {mx[k]} exceeds the estimate "
                           f"{est['bytes'][k]}")
    print(f"{name:<18}{n:>2} {meas['params']:>8}{meas['grads']:>8}{meas['optim']:>8} "
          f"{m_states:>8}{f_states:>9}{m_states / (psi_of(V_SPLIT) if strat == 'ddp_split' else psi):>6.2f}{e_states:>9}"
          f"{rel(m_states, f_states):>7.2%}  {want_p}/{want_g}")
    for b in bad:
        print(f"    FAIL {name}: {b}")
        ok = False
print("memory_precision: " + ("measured = estimate = formula" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
