#!/usr/bin/python3
"""Compare two loom runs: per-step loss and grad norm from their JSONL metrics, and the final
parameters from their last checkpoints: each global tensor "params/NAME" reassembled from its
chunks, whatever tp slicing, stage or ZeRO partition wrote them (format 3, the global view);
checkpoints from before it ("items" absent) under tensor parallel from the tp ranks'
"params@tpRofN" items with the tensor table in the manifest's metadata, and replicated tensors
checked identical across tp ranks.

usage: compare_runs.py [--rtol R | --rtol-loss R --rtol-grad-norm R --rtol-params R] [--bitwise]
                       [--steps A:B] [--state [--rtol-state R]] METRICS_A CKPT_A METRICS_B CKPT_B

Tolerances are relative: |a - b| <= rtol * |b| for each step's loss and grad norm, and
||a - b||_inf <= rtol * ||b||_inf over the flat final parameters (the L2 ratio ||a - b|| / ||b||
is printed too). --rtol sets all three; --bitwise demands exact equality. Prints the worst of
each quantity and its margin (tolerance / worst). Exit 1 on a mismatch, printing the worst step
and element; the standard library only (no numpy).

Default tolerances are derived from run B's checkpoint (its manifest holds the config) with
u = 2^-24, lambda = 6 and the reduction lengths along the model's path (the count of
tests/unit/gpt_path.h: layernorms, GEMMs, attention, head, and the N = global batch x seq_len
rows summed into every weight gradient). Derivation and measurements: docs/tolerances.md.

  loss       rho_f = 2 lambda sqrt(n_fwd + N) u: two fp32 forwards that round differently
             (summed in other orders), then the mean over N tokens
  grad norm  2.5 rho, rho = 2 lambda sqrt(n_fwd + n_bwd) u: the gradient's rounding, times an
             allowance for the step's conditioning (a gradient that is a small sum of large
             per-sequence terms loses relative accuracy; measured up to 1.1 rho)
  m, v       (--state) 2 x the grad norm's: Adam's m averages gradients (each within rho), v
             their squares (2 rho); a moment lost at a resume is off by beta^k ~ 0.35-0.6
  params     rho * S / 30 after S steps: rounding differences compound through the optimizer
             steps, measured ~linear in S (0.0028 rho per step on configs/tiny.json, 20-300
             steps), so 12x margin

configs/tiny.json (n_fwd 1344, n_bwd 1312 + N, N = 512): loss 3.1e-5, grad norm 1.0e-4, params
4.0e-5 at 30 steps.

16-bit runs (run B's precision plugin bf16 or fp16; u16 = 2^-8 or 2^-11, the format's unit
roundoff) are bounded by 16-bit rounding, which dwarfs fp32's: two layouts round the same values
to 16 bits at different places (a gradient summed on the wire, in a reduce-scatter or as tensor
parallel's partial sums, then stored in 16 bits), each re-rounding within u16 of the element:

  loss, grad norm  2 u16: the gradient rounded at two places where the other layout rounds once
                   (the loss moves only through the parameters those gradients update)
  m, v             (--state) 2 x the grad norm's, as in fp32
  params           2 u16 * S / 10 after S steps: Adam normalises the update, so each step's
                   differs by ~2 u16 of an lr-sized step and they compound over the steps

bf16: 7.8e-3 for loss and grad norm, 1.6e-2 for the parameters at 20 steps; measured worst on
configs/tiny.json (tests/integration/precision/equivalence_bf16.sh, 20 steps, strategies against 1 rank):
1.5e-3 on the metrics, 3.6e-3 on the parameters. Without a config in the manifest: 3e-5, 1e-4, 1e-4. A real bug is orders of
magnitude above these: a missing 1/dp doubles the grad norm (1.0 relative), a dropped micro-batch
moves the first step's grad norm by ~0.5."""
import argparse
import array
import json
import math
import os
import sys


def read_metrics(path, lo, hi):
    steps = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec and lo <= rec["step"] <= hi:
                steps[rec["step"]] = rec
    return steps


def read_item(step_dir, man, name):
    """The flat item `name` assembled from its chunks in every shard, or None."""
    out = None
    for shard in man["shards"]:
        for ch in shard["chunks"]:
            if ch["name"] != name:
                continue
            if out is None:
                out = array.array("f", bytes(4 * ch["global_numel"]))
            with open(os.path.join(step_dir, ch["file"]), "rb") as f:
                f.seek(ch["at"])
                part = array.array("f")
                part.frombytes(f.read(4 * ch["count"]))
            out[ch["offset"]:ch["offset"] + ch["count"]] = part
    return out


def local_positions(t, tp, r):
    """For tensor t (manifest metadata) and tp rank r: the global flat index of each local
    element, in local order (row-major local tensor)."""
    shape = t["shape"]
    rows, cols = shape[0], (shape[1] if len(shape) == 2 else 1)
    d, parts = t["split_dim"], t["split_parts"]
    if d < 0 or tp == 1:
        return range(rows * cols)
    if d == 0:
        per_part = rows // parts
        lrows = per_part // tp
        out = []
        for p in range(parts):
            for lr in range(lrows):
                g = p * per_part + r * lrows + lr
                out.extend(range(g * cols, (g + 1) * cols))
        return out
    lcols = cols // tp
    return [row * cols + r * lcols + c for row in range(rows) for c in range(lcols)]


def assemble(step_dir, tensors, shards, tp):
    """[(name, global flat values, is tied copy)] of a tensor table whose flat items per tp rank
    are `shards`; replicated tensors must be identical on every tp rank (no drift)."""
    out = []
    for t in tensors:
        n = math.prod(t["shape"])
        g = array.array("f", bytes(4 * n))
        for r in range(tp):
            local = shards[r][t["offset"]:t["offset"] + t["numel"]]
            if (t["split_dim"] < 0 or tp == 1) and r > 0:
                if local != shards[0][t["offset"]:t["offset"] + t["numel"]]:
                    sys.exit(f"FAIL {step_dir}: replicated tensor {t['name']} differs between "
                             f"tp ranks 0 and {r}")
                continue
            for v, i in zip(local, local_positions(t, tp, r)):
                g[i] = v
        out.append((t["name"], g, bool(t.get("tied_copy"))))
    return out


def slice_runs(ch):
    """(run length, [global start of each run]) of the slice a format-3 chunk holds, in local
    order (plugins/checkpoint/checkpoint/slice.c): rows split: one run of whole rows per block;
    columns split: one run per row and block."""
    shape = ch["shape"]
    rows, cols = shape[0], (shape[1] if len(shape) == 2 else 1)
    d, parts, idx, size = ch["split_dim"], ch["split_parts"], ch["split_index"], ch["split_size"]
    if d < 0 or size == 1:
        return rows * cols, [0]
    if d == 0:
        block, lrows = rows // parts, rows // parts // size
        return lrows * cols, [(p * block + idx * lrows) * cols for p in range(parts)]
    block, lcols = cols // parts, cols // parts // size
    return lcols, [r * cols + p * block + idx * lcols for r in range(rows) for p in range(parts)]


def read_global(step_dir, man, name):
    """The global tensor `name` ("params/wte") of a format-3 checkpoint, assembled from every
    chunk of it (whatever slicing and partition wrote it), or None; every element must be
    written exactly once."""
    out, seen = None, 0
    for shard in man["shards"]:
        for ch in shard["chunks"]:
            if ch["name"] != name:
                continue
            if out is None:
                out = array.array("f", bytes(4 * ch["global_numel"]))
            with open(os.path.join(step_dir, ch["file"]), "rb") as f:
                f.seek(ch["at"])
                part = array.array("f")
                part.frombytes(f.read(4 * ch["count"]))
            run, starts = slice_runs(ch)
            lo, hi = ch["offset"], ch["offset"] + ch["count"]
            for k in range(lo // run, (hi + run - 1) // run):
                a, b = max(lo, k * run), min(hi, (k + 1) * run)
                g = starts[k] + (a - k * run)
                out[g:g + (b - a)] = part[a - lo:b - lo]
            seen += ch["count"]
    if out is not None and seen != len(out):
        sys.exit(f"FAIL {step_dir}: '{name}' has {seen} elements in its chunks, {len(out)} global")
    return out


def global_names(meta):
    """The model's tensor names in the single-rank flat order (the tensor tables of the
    metadata: meta.tensors, or each stage's under pipeline parallel), without tied copies."""
    tables = [s["tensors"] for s in meta["stages"]] if meta.get("pp", 1) > 1 else [meta["tensors"]]
    names = [t["name"] for tab in tables for t in tab if not t.get("tied_copy")]

    def unit(name):  # an interleaved stage's table holds several chunks: sort by unit
        if name in ("wte", "wpe"):
            return 0
        if name.startswith("h."):
            return 1 + int(name.split(".")[1])
        return 1 << 30  # the head's ln_f
    return sorted(names, key=unit)  # stable: each unit's tensors keep their flat order


def newest_manifest(ckpt_dir):
    with open(os.path.join(ckpt_dir, "latest")) as f:
        step_dir = os.path.join(ckpt_dir, f.read().strip())
    with open(os.path.join(step_dir, "manifest.json")) as f:
        return step_dir, json.load(f)


def read_state(ckpt_dir, kind):
    """Global flat `kind` ("optim.m", "optim.v") of the newest format-3 checkpoint, in the
    single-rank order; exits when the checkpoint has no global view."""
    step_dir, man = newest_manifest(ckpt_dir)
    meta = man.get("meta", {})
    if meta.get("items") != "global":
        sys.exit(f"{step_dir}: --state needs a checkpoint with the global view")
    out = array.array("f")
    for name in global_names(meta):
        g = read_global(step_dir, man, f"{kind}/{name}")
        if g is None:
            sys.exit(f"{step_dir}: no '{kind}/{name}' item")
        out.extend(g)
    return out


def read_params(ckpt_dir):
    """The global flat parameters of the newest checkpoint in ckpt_dir, in the single-rank
    layout: the 'params' item, or under tensor parallel the 'params@tpRofN' items reassembled
    tensor by tensor with the manifest's tensor table (meta.tensors), or under pipeline parallel
    each stage's 'params@ppSofP[@tpRofN]' items with that stage's table (meta.stages), stages
    concatenated in order; the last stage's copy of the tied wte must equal the first's."""
    with open(os.path.join(ckpt_dir, "latest")) as f:
        step_dir = os.path.join(ckpt_dir, f.read().strip())
    with open(os.path.join(step_dir, "manifest.json")) as f:
        man = json.load(f)
    meta = man.get("meta", {})
    tp, pp = meta.get("tp", 1), meta.get("pp", 1)
    if meta.get("items") == "global":
        out = array.array("f")
        for name in global_names(meta):
            g = read_global(step_dir, man, "params/" + name)
            if g is None:
                sys.exit(f"{step_dir}: no 'params/{name}' item")
            out.extend(g)
        tied = read_global(step_dir, man, "params/wte@tied_copy")
        if tied is not None:
            if tied != read_global(step_dir, man, "params/wte"):
                sys.exit(f"FAIL {step_dir}: the last stage's copy of the tied wte differs "
                         f"from the first stage's wte")
            print("tied wte copy on the last stage: bitwise equal to stage 0's wte")
        return man["step"], out
    if tp == 1 and pp == 1:
        out = read_item(step_dir, man, "params")
        if out is None:
            sys.exit(f"{step_dir}: no 'params' item")
        return man["step"], out
    if pp == 1:
        stages = [{"tensors": meta["tensors"]}]
    else:
        stages = meta["stages"]
    parts, wte = [], None
    for s, st in enumerate(stages):
        shards = []
        for r in range(tp):
            name = "params" + (f"@pp{s}of{pp}" if pp > 1 else "") + \
                (f"@tp{r}of{tp}" if tp > 1 else "")
            x = read_item(step_dir, man, name)
            if x is None:
                sys.exit(f"{step_dir}: no '{name}' item")
            shards.append(x)
        for name, g, tied in assemble(step_dir, st["tensors"], shards, tp):
            if tied:
                if g != wte:
                    sys.exit(f"FAIL {step_dir}: the last stage's copy of the tied wte differs "
                             f"from the first stage's wte")
                print(f"tied wte copy on stage {s}: bitwise equal to stage 0's wte")
                continue
            if name == "wte":
                wte = g
            parts.append(g)
    out = array.array("f")
    for g in parts:
        out.extend(g)
    return man["step"], out


FP32_U = 2.0 ** -24
LAMBDA = 6.0


def gpt_reductions(model, T, N):
    """Reduction lengths (forward, backward) along loom's GPT path, as tests/unit/gpt_path.h."""
    C, L, V = model["n_embd"], model["n_layer"], model["vocab_size"]
    HS = C / model["n_head"]
    fwd = L * (2 * C + C + HS + 2 * T + C + 2 * C + C + 4 * C) + 2 * C + C + V
    bwd = L * (2 * C + 4 * C + C + C + 3 * C + T + HS + 2 * C) + V + 2 * C + N
    return fwd, bwd


def derived_tolerances(ckpt_dir):
    """({loss, grad_norm, params}, how they were found) for comparing another run with the run
    whose newest checkpoint is in ckpt_dir (module docstring); fixed defaults when its manifest
    has no config."""
    fallback = {"loss": 3e-5, "grad_norm": 1e-4, "params": 1e-4}
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            step_dir = os.path.join(ckpt_dir, f.read().strip())
        with open(os.path.join(step_dir, "manifest.json")) as f:
            man = json.load(f)
        meta = man.get("meta", {})
        cfg, steps = meta["config"], int(man["step"])
        model, train = cfg["model"], cfg["train"]
        tp, pp = meta.get("tp", 1), meta.get("pp", 1)
        dp = max(1, int(man["world_size"]) // (tp * pp))
        T = int(train.get("seq_len", model["context_length"]))
        N = int(train["micro_batch_size"]) * int(train.get("grad_accum_steps", 1)) * dp * T
        fwd, bwd = gpt_reductions(model, T, N)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return fallback, "fixed defaults: no config in the reference checkpoint"
    u16 = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}.get(
        (cfg.get("precision") or {}).get("plugin"))
    if u16:
        name = cfg["precision"]["plugin"]
        return ({"loss": 2 * u16, "grad_norm": 2 * u16, "params": 2 * u16 * max(steps, 10) / 10},
                f"derived: {name}, u16 = 2^{int(math.log2(u16))}, {steps} steps")
    rho_f = 2 * LAMBDA * math.sqrt(fwd + N) * FP32_U
    rho = 2 * LAMBDA * math.sqrt(fwd + bwd) * FP32_U
    return ({"loss": rho_f, "grad_norm": 2.5 * rho, "params": rho * max(steps, 1) / 30},
            f"derived: n_fwd {fwd:.0f}, n_bwd {bwd:.0f}, N {N}, {steps} steps")


def margin(tol, worst):
    """', margin Nx' (tolerance / worst), or '' when either is 0."""
    if worst <= 0 or tol <= 0:
        return ""
    m = tol / worst
    return f", margin {m:.0f}x" if m >= 10 else f", margin {m:.2g}x"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtol", type=float, help="one tolerance for loss, grad norm and params")
    ap.add_argument("--rtol-loss", type=float)
    ap.add_argument("--rtol-grad-norm", type=float)
    ap.add_argument("--rtol-params", type=float)
    ap.add_argument("--bitwise", action="store_true")
    ap.add_argument("--steps", default="1:1000000000")
    ap.add_argument("--state", action="store_true",
                    help="also compare Adam's m and v of the final checkpoints (global view): "
                    "max|a-b|/max|b| of each within --rtol-state, and the lr of every step "
                    "exactly")
    ap.add_argument("--rtol-state", type=float,
                    help="default 2x the grad norm's: m averages gradients, v their squares")
    ap.add_argument("metrics_a")
    ap.add_argument("ckpt_a")
    ap.add_argument("metrics_b")
    ap.add_argument("ckpt_b")
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.steps.split(":"))
    derived, why = derived_tolerances(a.ckpt_b)
    if a.rtol is not None:
        derived, why = dict.fromkeys(derived, a.rtol), "--rtol"
    if a.bitwise:
        derived, why = dict.fromkeys(derived, 0.0), "--bitwise"
    a.rtol_loss = derived["loss"] if a.rtol_loss is None else a.rtol_loss
    a.rtol_grad_norm = derived["grad_norm"] if a.rtol_grad_norm is None else a.rtol_grad_norm
    a.rtol_params = derived["params"] if a.rtol_params is None else a.rtol_params
    if not a.bitwise:
        print(f"tolerances ({why}): loss {a.rtol_loss:.2g}, grad norm {a.rtol_grad_norm:.2g}, "
              f"final parameters {a.rtol_params:.2g}")
    rtols = {"loss": a.rtol_loss, "grad_norm": a.rtol_grad_norm}
    ma, mb = read_metrics(a.metrics_a, lo, hi), read_metrics(a.metrics_b, lo, hi)
    if not ma or sorted(ma) != sorted(mb):
        sys.exit(f"FAIL: the runs logged different steps: {sorted(ma)} vs {sorted(mb)}")
    ok = True
    for key, rtol in rtols.items():
        worst, wstep = 0.0, None
        for s in sorted(ma):
            x, y = ma[s][key], mb[s][key]
            if x is None or y is None:  # a skipped (overflowed) fp16 step logs a null norm
                if x is not y:
                    print(f"FAIL step {s} {key}: {x!r} vs {y!r} (one run skipped the step)")
                    ok = False
                continue
            rel = abs(x - y) / max(abs(y), 1e-30)
            if rel > worst:
                worst, wstep = rel, s
            if abs(x - y) > rtol * abs(y):
                print(f"FAIL step {s} {key}: {x!r} vs {y!r} (rel {rel:.3g} > {rtol:g})")
                ok = False
        print(f"per-step {key} over {len(ma)} steps: worst rel diff {worst:.3g}"
              + (f" (step {wstep})" if wstep else "") + f"; tolerance {rtol:.3g}"
              + margin(rtol, worst))
    sa, pa = read_params(a.ckpt_a)
    sb, pb = read_params(a.ckpt_b)
    if sa != sb or len(pa) != len(pb):
        sys.exit(f"FAIL: final checkpoints differ in step ({sa} vs {sb}) or size")
    maxdiff, imax, maxref, l2d, l2r = 0.0, 0, 0.0, 0.0, 0.0
    for i, (x, y) in enumerate(zip(pa, pb)):
        d = abs(x - y)
        if d > maxdiff:
            maxdiff, imax = d, i
        maxref = max(maxref, abs(y))
        l2d += d * d
        l2r += y * y
    rel_inf = maxdiff / max(maxref, 1e-30)
    rtol = a.rtol_params
    print(f"final parameters (step {sa}, {len(pa)} values): max|a-b|/max|b| = {rel_inf:.3g}"
          f" (element {imax}), ||a-b||/||b|| = {math.sqrt(l2d / max(l2r, 1e-30)):.3g}"
          f"; tolerance {rtol:.3g}" + margin(rtol, rel_inf))
    if (a.bitwise and maxdiff != 0.0) or rel_inf > rtol:
        print(f"FAIL final parameters: {rel_inf:.3g} > {rtol:g}")
        ok = False
    if a.state:
        a.state = 2 * a.rtol_grad_norm if a.rtol_state is None else a.rtol_state
        for s in sorted(ma):
            if ma[s].get("lr") != mb[s].get("lr"):
                print(f"FAIL step {s} lr: {ma[s].get('lr')!r} vs {mb[s].get('lr')!r} (the "
                      f"schedule did not continue at the saved step)")
                ok = False
        for kind in ("optim.m", "optim.v"):
            xa, xb = read_state(a.ckpt_a, kind), read_state(a.ckpt_b, kind)
            if len(xa) != len(xb):
                sys.exit(f"FAIL {kind}: {len(xa)} vs {len(xb)} values")
            d, i = max((abs(x - y), i) for i, (x, y) in enumerate(zip(xa, xb)))
            ref = max(abs(y) for y in xb)
            rel = d / max(ref, 1e-30)
            print(f"final {kind} ({len(xa)} values): max|a-b|/max|b| = {rel:.3g} (element {i});"
                  f" tolerance {a.state:.3g}" + margin(a.state, rel))
            if rel > a.state:
                print(f"FAIL final {kind}: {rel:.3g} > {a.state:g}")
                ok = False
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
