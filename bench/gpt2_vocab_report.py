#!/usr/bin/env python3
"""The table and ratios of bench/gpt2_vocab.sh, from the files of one run (--dir).

Per configuration NAME (files NAME.rR.jsonl / NAME.rR.log for rounds R = 1..--rounds):
  loom, PyTorch: JSONL lines with step, ms_per_step, tokens_per_s (global tokens of the step /
    its wall time); llm.c: its log's "step k: train loss x (took t ms)" lines (B*T tokens each).
The steps after the warm-up (step > skip) are pooled over the rounds; tokens/s is reported as the
median and as the fast phase (90th percentile: the 10% fastest steps, what compares configurations
on a shared machine; see bench/README.md "Noise"). Every ratio is between two configurations
of this run; MFU = achieved GFLOP/s per rank / the single-thread SGEMM peak measured before and
after the runs (the larger). FLOPs/token = 6N + 12·L·T·C (bench/README.md), N = every parameter
as loom counts it: V·C + T·C + L·(12C² + 13C) + 2C."""
import argparse
import json
import os
import re
import statistics

MODELS = {  # name: (V, T, L, C, global tokens per step)
    "gpt2": (50257, 64, 4, 256, 256),
    "byte": (256, 128, 4, 256, 1024),
}
CONFIGS = [  # (name, model, implementation, ranks)
    ("gpt2-loom-1r", "gpt2", "loom", 1), ("gpt2-ddp-2r", "gpt2", "loom ddp", 2),
    ("gpt2-ddp-nosplit-2r", "gpt2", "loom ddp, wte unsplit", 2),
    ("gpt2-zero1-2r", "gpt2", "loom zero1", 2), ("gpt2-zero2-2r", "gpt2", "loom zero2", 2),
    ("gpt2-torch-1r", "gpt2", "PyTorch", 1), ("gpt2-torch-2r", "gpt2", "PyTorch DDP", 2),
    ("gpt2-llmc-1r", "gpt2", "llm.c", 1),
    ("byte-loom-1r", "byte", "loom", 1), ("byte-ddp-2r", "byte", "loom ddp", 2),
    ("byte-torch-1r", "byte", "PyTorch", 1), ("byte-torch-2r", "byte", "PyTorch DDP", 2),
    ("byte-llmc-1r", "byte", "llm.c", 1),
]


def quantile(xs, q):
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo, hi = int(i), min(int(i) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def flops_per_token(model):
    V, T, L, C, _ = MODELS[model]
    n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * n + 12 * L * T * C


def read_anchor(path):
    vals = {}
    for line in open(path):
        m = re.match(r"(sgemm_\w+) ([0-9.]+)", line)
        if m:
            vals[m.group(1)] = float(m.group(2))
    return vals


def tokens_per_s(d, name, rounds, skip, tokens):
    """Pooled per-step tokens/s after the warm-up, or None when the configuration did not run."""
    xs = []
    for r in range(1, rounds + 1):
        jl, log = f"{d}/{name}.r{r}.jsonl", f"{d}/{name}.r{r}.log"
        if os.path.exists(jl):
            for line in open(jl):
                rec = json.loads(line)
                if rec.get("step", 0) > skip and "tokens_per_s" in rec:
                    xs.append(rec["tokens_per_s"])
        elif "llmc" in name and os.path.exists(log):
            for line in open(log):
                m = re.match(r"step (\d+): train loss \S+ \(took ([0-9.]+) ms\)", line)
                if m and int(m.group(1)) >= skip:
                    xs.append(tokens / float(m.group(2)) * 1000.0)
    return xs or None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--skip", type=int, default=5)
    p.add_argument("--torch-skip", type=int, default=3)
    p.add_argument("--llmc-skip", type=int, default=3)
    a = p.parse_args()
    anchors = [read_anchor(f"{a.dir}/sgemm_{w}.txt") for w in ("before", "after")
               if os.path.exists(f"{a.dir}/sgemm_{w}.txt")]
    peak = max(x.get("sgemm_peak_gflops", 0) for x in anchors) if anchors else 0
    mix = max(x.get("sgemm_model_mix_gflops", 0) for x in anchors) if anchors else 0
    print(f"anchor: single-thread SGEMM peak {peak:.1f} GFLOP/s (max of before/after: "
          + ", ".join(f"{x.get('sgemm_peak_gflops', 0):.1f}" for x in anchors)
          + f"); the gpt2 model's GEMM mix {mix:.1f} GFLOP/s")
    for m in MODELS:
        V, T, L, C, tok = MODELS[m]
        print(f"{m}: V {V} T {T} L {L} C {C}, {tok} tokens/step, "
              f"{flops_per_token(m) / 1e6:.3f} MFLOP/token (6N + 12LTC)")
    print()
    res = {}
    hdr = ("config", "impl", "ranks", "tok/s median", "tok/s fast", "ms/step", "GFLOP/s/rank",
           "MFU")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for name, model, impl, ranks in CONFIGS:
        skip = a.torch_skip if "torch" in name else a.llmc_skip if "llmc" in name else a.skip
        xs = tokens_per_s(a.dir, name, a.rounds, skip, MODELS[model][4])
        if not xs:
            continue
        med, fast = statistics.median(xs), quantile(xs, 0.9)
        res[name] = (med, fast)
        gf = fast * flops_per_token(model) / 1e9 / ranks
        mfu = f"{100 * gf / peak:.1f}%" if peak else "-"
        print(f"| {name} | {impl} | {ranks} | {med:.0f} | {fast:.0f} | "
              f"{MODELS[model][4] / fast * 1000:.1f} | {gf:.2f} | {mfu} |")
    print("\n(ms/step, GFLOP/s and MFU from the fast phase; MFU per rank against the 1-core peak)\n")

    def ratio(label, num, den, target=None, col=1):
        if num not in res or den not in res:
            return
        r = res[num][col] / res[den][col]
        rm = res[num][0] / res[den][0]
        t = f"  (target >= {target})" if target else ""
        print(f"| {label} | {r:.2f} | {rm:.2f} |{t}")

    print("| ratio (tokens/s) | fast phase | median |")
    print("|---|---|---|")
    ratio("gpt2 ddp 2 ranks / loom 1 rank", "gpt2-ddp-2r", "gpt2-loom-1r", 1.6)
    ratio("gpt2 ddp: split wte all-reduce / unsplit", "gpt2-ddp-2r", "gpt2-ddp-nosplit-2r")
    ratio("gpt2 zero1 2 ranks / loom 1 rank", "gpt2-zero1-2r", "gpt2-loom-1r", 1.8)
    ratio("gpt2 zero2 2 ranks / loom 1 rank", "gpt2-zero2-2r", "gpt2-loom-1r", 1.8)
    ratio("gpt2 PyTorch DDP 2 ranks / PyTorch 1 rank", "gpt2-torch-2r", "gpt2-torch-1r")
    ratio("gpt2 loom 1 rank / PyTorch 1 rank", "gpt2-loom-1r", "gpt2-torch-1r", 4)
    ratio("gpt2 loom 1 rank / llm.c 1 thread", "gpt2-loom-1r", "gpt2-llmc-1r", 3)
    ratio("gpt2 loom ddp 2 ranks / PyTorch DDP 2 ranks", "gpt2-ddp-2r", "gpt2-torch-2r")
    ratio("byte loom ddp 2 ranks / loom 1 rank", "byte-ddp-2r", "byte-loom-1r")
    best = max((n for n in ("byte-torch-1r", "byte-torch-2r") if n in res),
               key=lambda n: res[n][1], default=None)
    if best:
        ratio(f"byte loom ddp 2 ranks / PyTorch's best ({best})", "byte-ddp-2r", best, 1.3)
    ratio("byte loom 1 rank / llm.c 1 thread", "byte-loom-1r", "byte-llmc-1r")
    if "byte-ddp-2r" in res and peak:
        gf = res["byte-ddp-2r"][1] * flops_per_token("byte") / 1e9
        print(f"| byte loom ddp 2 ranks: % of the 2-core SGEMM peak | {100 * gf / (2 * peak):.1f}% "
              f"| {100 * res['byte-ddp-2r'][0] * flops_per_token('byte') / 1e9 / (2 * peak):.1f}%"
              " |  (target >= 85%)")


if __name__ == "__main__":
    main()
