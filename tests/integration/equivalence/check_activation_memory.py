# activation_checkpointing.sh, long_context.sh: WORK RUN...: each run's activation peak and
#   traffic = `loom estimate`'s, within 5 % of a per-layer model, none > selective > full for
#   every strategy run under the three (run names STRATEGY_POLICY)
import json, sys

work, runs = sys.argv[1], sys.argv[2:]


def last_step(path):
    rec = None
    for line in open(path):
        r = json.loads(line)
        if "mem_peak_bytes" in r and "loss" in r:
            rec = r
    return rec


def att_bytes(est):
    """What one block keeps of its attention, and backward's scratch for it: the probabilities
    4as^2b/t and a (B,NH,T,T) datt, or under flash attention the rows' log-sum-exp 4asb/t and no
    datt."""
    m = est["model"]
    s, b, a, t = m["seq_len"], m["micro_batch_size"], m["n_head"], est["tp"]
    if est.get("attention") == "flash":
        return 4 * a * s * b // t, 0
    return 4 * a * s * s * b // t, 4 * a * s * s * b // t


def model_bytes16(est, stage, policy, every):
    """The same under 16-bit activations end to end (estimate's activations_16bit): every tensor
    above in 2 bytes but the LayerNorm stats, the probabilities and the losses; no fp32 forward
    scratch or widening buffer."""
    m = est["model"]
    s, b, h, a, V = m["seq_len"], m["micro_batch_size"], m["n_embd"], m["n_head"], m["vocab_size"]
    t = est["tp"]
    kept = s * b * h * 8 + s * b * h * 24 // t + 16 * s * b
    att, datt = att_bytes(est)
    values = 2 * s * b * (3 * h + 12 * h // t)
    blocks = [u - 1 for u in range(stage["first_unit"], stage["last_unit"] + 1)
              if 1 <= u <= m["n_layer"]]
    ck = lambda l: policy != "none" and l % every == 0
    pool = 2 * s * b * h
    for l in blocks:
        pool += 2 * s * b * h if policy == "full" and ck(l) else kept + (0 if ck(l) else att)
    pool += 2 * s * b * h + 8 * s * b + 2 * s * b * V + 4 * s * b   # ln_f, logits, losses
    block_scratch = 2 * s * b * (4 * h // t * 2 + 3 * h // t + h // t) + datt
    pool += 2 * 2 * s * b * h + max(4 * V, block_scratch if blocks else 0)  # dres, dln, scratch
    recompute = 0
    if any(ck(l) for l in blocks):
        recompute = att + (values + 16 * s * b if policy == "full" else 0)
    return pool * stage["in_flight"] + recompute


def model_bytes(est, stage, policy, every):
    """Rank 0's activation bytes by the per-layer model: each micro-batch in flight holds the
    stage's input (B,T,C), its blocks' saved tensors, the head's, and backward's scratch; one
    recompute scratch per rank. s = T, b = B, h = C, a = NH, t = tp, V = vocab (fp32; under
    bf16 the block's saved values are 2 bytes each, its forward computes them in the backward
    scratch, and one (B,T,4C/t) fp32 buffer per rank widens them for backward)."""
    if est.get("activations_16bit"):
        return model_bytes16(est, stage, policy, every)
    m = est["model"]
    s, b, h, a, V = m["seq_len"], m["micro_batch_size"], m["n_embd"], m["n_head"], m["vocab_size"]
    t = est["tp"]
    half = est["precision"] != "fp32"
    kept = s * b * h * 16 + s * b * h * 48 // t + 16 * s * b   # ln1/ln2 out, residuals, q k v,
    att, datt = att_bytes(est)                                   # attn out, fc, gelu; probs
    values = 4 * s * b * (3 * h + 12 * h // t)                   # ln1, res2, ln2; qkv, atty, fc, gelu
    if half:
        kept -= values // 2
    first, last = stage["first_unit"], stage["last_unit"]
    blocks = [u - 1 for u in range(first, last + 1) if 1 <= u <= m["n_layer"]]
    head = last == m["n_layer"] + 1
    ck = lambda l: policy != "none" and l % every == 0
    pool = 4 * s * b * h                                          # the stage's input
    for l in blocks:
        if policy == "full" and ck(l):
            pool += 4 * s * b * h                                 # its output only
        else:
            pool += kept + (0 if ck(l) else att)
    if head:
        pool += 4 * s * b * h + 8 * s * b + 4 * s * b * V + 4 * s * b  # ln_f, logits, losses
    block_scratch = 4 * s * b * (4 * h // t * 2 + 3 * h // t + h // t) + datt
    fwd16 = 4 * s * b * (2 * h + 8 * h // t) if half and blocks else 0
    # dres, dln and the scratch (dlogits overwrite the logits: the head needs one probs row)
    pool += 2 * 4 * s * b * h + max(4 * V if head else 0, block_scratch if blocks else 0, fwd16)
    recompute = 0
    if any(ck(l) for l in blocks):
        recompute = att + (values + 16 * s * b if policy == "full" else 0)
    if half and blocks and not (policy == "full" and any(ck(l) for l in blocks)):
        recompute += 4 * s * b * 4 * h // t
    return pool * stage["in_flight"] + recompute


def block_model(est):
    """The per-block bytes `loom estimate` prints (Korthikanti-style), from the same terms."""
    m = est["model"]
    s, b, h, a, t = m["seq_len"], m["micro_batch_size"], m["n_embd"], m["n_head"], est["tp"]
    att = att_bytes(est)[0]
    if est.get("activations_16bit"):
        kept = s * b * h * 8 + s * b * h * 24 // t + 16 * s * b
        return {"none": kept + att, "selective": kept, "full": 2 * s * b * h}
    kept = s * b * h * 16 + s * b * h * 48 // t + 16 * s * b
    if est["precision"] != "fp32":
        kept -= 2 * s * b * (3 * h + 12 * h // t)
    return {"none": kept + att, "selective": kept, "full": 4 * s * b * h}


fails = 0
peaks = {}
print(f"{'run':<16} {'measured':>10} {'estimate':>10} {'model':>10} {'model err':>9}"
      f" {'comm/step':>10} {'estimate':>10}")
for name in runs:
    est = json.load(open(f"{work}/{name}/estimate.json"))
    rec = last_step(f"{work}/{name}/metrics.jsonl")
    measured = rec["mem_peak_bytes"]["activations"]
    stage0 = est["stages"][0]
    predicted = stage0["bytes"]["activations"]
    ac = est["activation_checkpointing"]
    policy = ac["policy"]
    modelled = model_bytes(est, stage0, policy, ac["every"])
    err = abs(modelled - measured) / measured
    comm, comm_est = rec["comm_bytes"], stage0["comm_bytes_per_step"]
    print(f"{name:<16} {measured:>10} {predicted:>10} {modelled:>10} {err:>9.4f}"
          f" {comm:>10} {comm_est:>10}")
    if measured != predicted:
        print(f"FAIL {name}: measured activation peak {measured} != estimate {predicted}")
        fails += 1
    if err > 0.05:
        print(f"FAIL {name}: the per-layer model {modelled} is {err:.1%} off the measured {measured}")
        fails += 1
    if comm != comm_est:
        print(f"FAIL {name}: rank 0 sent {comm} bytes in a step, the estimate says {comm_est}")
        fails += 1
    peaks[name] = measured
    if ac["block_bytes"] != block_model(est):
        print(f"FAIL {name}: estimate's per-block bytes {ac['block_bytes']} != {block_model(est)}")
        fails += 1
# every strategy run under all three policies (run names STRATEGY_POLICY)
strategies = sorted({n.rsplit("_", 1)[0] for n in runs})
for strat in strategies:
    if not all(f"{strat}_{pol}" in peaks for pol in ("none", "selective", "full")):
        print(f"{strat}: not run under all three policies, no order to check")
        continue
    p = {pol: peaks[f"{strat}_{pol}"] for pol in ("none", "selective", "full")}
    ok = p["none"] > p["selective"] > p["full"]
    print(f"{strat}: activation peak none {p['none']} > selective {p['selective']} > full "
          f"{p['full']} ({p['full'] / p['none']:.2f} of none): {'ok' if ok else 'FAIL'}")
    fails += not ok
# tensor parallel: full recompute adds one all-reduce of B*T*C floats per block per micro-step
# (a caller with tp2 runs has both; one without has neither: a missing one is a KeyError)
has_tp2 = any(n.startswith("tp2_") for n in runs)
tp_none, tp_full = ((json.load(open(f"{work}/tp2_{p}/estimate.json")) if has_tp2 else None)
                    for p in ("none", "full"))
m = tp_full["model"] if tp_full else None
extra = (m["n_layer"] * 2 * (2 - 1) * m["micro_batch_size"] * m["seq_len"] * m["n_embd"] * 4 // 2
         if m else 0)
if tp_none and tp_full and tp_full["tp_comm_bytes"] - tp_none["tp_comm_bytes"] != extra:
    print(f"FAIL tp2: full recompute adds {tp_full['tp_comm_bytes'] - tp_none['tp_comm_bytes']} "
          f"bytes of f/g traffic in the estimate, expected {extra}")
    fails += 1
sys.exit(1 if fails else 0)
