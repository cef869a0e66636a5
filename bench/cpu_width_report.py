#!/usr/bin/env python3
"""The tables and ratios of bench/cpu_width.sh (issue 19), from the files of one run (--dir).

Per configuration NAME = ROW-IMPL-PREC-NPrTHREADSt (IMPL loom or torch, PREC fp32 or bf16; NP
ranks x THREADS threads, 2 cores each) and round R: NAME.rR.jsonl (loom's metrics or
torch_gpt.py's: step, tokens_per_s = global tokens of the step / its wall time), NAME.rR.log
(stdout), NAME.rR.time ("wall user sys" of the run, bash's `time`). The steps after the warm-up
(step > --skip; --big-skip for gpt2_124m) are pooled over the rounds; tokens/s is reported as the
median and as the fast phase (90th percentile, the 10% fastest steps: what compares
configurations on a shared machine; bench/README.md "Noise").

Each side's best setup on 2 cores (by the statistic in question) gives the ratios the issue asks
for: loom bf16 / PyTorch autocast bf16, loom bf16 / loom fp32, loom fp32 / PyTorch fp32.
MFU = achieved GFLOP/s / (2 cores x the 1-thread oneDNN peak of the dtype: dnnl_peak_gflops_fp32
or _bf16 of loom-dnnl-peak, the larger of before and after). FLOPs/token = 6N + 12*L*T*C, as
bench/report.py and gpt2_vocab_report.py count them (the nanoGPT / PaLM estimate: 6N for the
weight matmuls' forward and backward, 12*L*T*C for QK^T and AV's), N = V*C + T*C + L*(12C^2 +
13C) + 2C with the real vocabulary V (loom's padding to 50304 is work, not model FLOPs).

Plain python3, no third-party modules."""
import argparse
import json
import os
import re
import statistics

ROWS = {  # name: (title, V, T, L, C, global sequences a step)
    "byte": ("byte model (L4 H8 C256, V 256, T 128)", 256, 128, 4, 256, 16),
    "gpt2vocab": ("GPT-2-vocabulary model (L4 H4 C256, V 50257, T 64)", 50257, 64, 4, 256, 4),
    "gpt2_124m": ("GPT-2 124M (L12 H12 C768, V 50257, T 1024)", 50257, 1024, 12, 768, 2),
}
SETUPS = {"loom": ("2r1t", "1r2t"), "torch": ("2r1t", "1r2t")}
SETUP_TITLES = {("loom", "2r1t"): "2 ranks x 1 thread (ddp)",
                ("loom", "1r2t"): "1 rank x 2 threads",
                ("torch", "2r1t"): "2 ranks x 1 thread (DDP)",
                ("torch", "1r2t"): "1 process x 2 threads"}
IMPL_TITLES = {("loom", "fp32"): "loom fp32", ("loom", "bf16"): "loom bf16",
               ("torch", "fp32"): "PyTorch fp32", ("torch", "bf16"): "PyTorch autocast bf16"}
TARGETS = {  # (ratio, row): target
    ("bf16_vs_torch_bf16", "byte"): 1.5, ("bf16_vs_torch_bf16", "gpt2_124m"): 3.0,
    ("bf16_vs_fp32", "byte"): 1.8, ("bf16_vs_fp32", "gpt2_124m"): 1.8,
}
CORES = 2


def quantile(xs, q):
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo, hi = int(i), min(int(i) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


STATS = {"fast": lambda xs: quantile(xs, 0.9), "median": statistics.median}


def flops_per_token(row):
    _, V, T, L, C, _ = ROWS[row]
    n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6 * n + 12 * L * T * C


def read_kv(path, prefix):
    """The `KEY VALUE` lines of a file whose KEY starts with prefix (the value: the rest)."""
    vals = {}
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split(" ", 1)
            if len(parts) == 2 and parts[0].startswith(prefix):
                vals[parts[0]] = parts[1]
    return vals


def read_dnnl_cases(path):
    """loom-dnnl-peak's table: {(case, dtype): (GFLOP/s, implementation)}."""
    cases = {}
    if not os.path.exists(path):
        return cases
    for line in open(path):
        m = re.match(r"(.+?)\s+(fp32|bf16)\s+\d+\s+\d+\s+\d+\s+[0-9.]+\s+([0-9.]+)\s+(\S+)", line)
        if m:
            cases[(m.group(1).strip(), m.group(2))] = (float(m.group(3)), m.group(4))
    return cases


def openblas_core(path):
    """The kernel family OpenBLAS reported under OPENBLAS_VERBOSE=2 ("Core: Haswell")."""
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("Core: "):
                return line.split(":", 1)[1].strip()
    return None


def read_sgemm(path):
    """loom-sgemm-peak: its square cases and its peak line."""
    sq, peak = {}, None
    if os.path.exists(path):
        for line in open(path):
            m = re.match(r"square (\d+)\s+NN\s+\d+\s+\d+\s+\d+\s+[0-9.]+\s+([0-9.]+)", line)
            if m:
                sq[int(m.group(1))] = float(m.group(2))
            if line.startswith("sgemm_peak_gflops "):
                peak = float(line.split()[1])
    return sq, peak


def steps_of(d, name, rounds, skip):
    xs = []
    for r in range(1, rounds + 1):
        path = f"{d}/{name}.r{r}.jsonl"
        if not os.path.exists(path):
            continue
        for line in open(path):
            rec = json.loads(line)
            if rec.get("step", 0) > skip and "tokens_per_s" in rec:
                xs.append(rec["tokens_per_s"])
    return xs


def cpu_share(d, name, rounds):
    """(user + sys) / (wall x 2 cores) of the whole run, averaged over the rounds."""
    shares = []
    for r in range(1, rounds + 1):
        path = f"{d}/{name}.r{r}.time"
        if os.path.exists(path):
            w, u, s = (float(x) for x in open(path).read().split()[-3:])
            if w > 0:
                shares.append((u + s) / (w * CORES))
    return statistics.mean(shares) if shares else None


def loom_cpu_lines(d, row, prec, rounds):
    """The distinct `loom: cpu:` start-up lines of loom's runs of one row and precision."""
    lines = []
    for setup in SETUPS["loom"]:
        for r in range(1, rounds + 1):
            path = f"{d}/{row}-loom-{prec}-{setup}.r{r}.log"
            if os.path.exists(path):
                for line in open(path):
                    if line.startswith("loom: cpu:") and line.strip() not in lines:
                        lines.append(line.strip())
    return lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--rows", default="byte,gpt2vocab,gpt2_124m")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--skip", type=int, default=5)
    p.add_argument("--big-skip", type=int, default=2)
    a = p.parse_args()
    d = a.dir
    rows = [r for r in a.rows.split(",") if r in ROWS]

    # --- anchors -------------------------------------------------------------------------------
    dn = [(w, read_kv(f"{d}/dnnl_{w}.txt", "dnnl_")) for w in ("before", "after")]
    when = " / ".join(w for w, x in dn if x)  # the anchors that ran
    dn = [x for _, x in dn if x]
    peaks = {}
    for dt in ("fp32", "bf16"):
        vals = [float(x[f"dnnl_peak_gflops_{dt}"]) for x in dn if f"dnnl_peak_gflops_{dt}" in x]
        if vals:
            peaks[dt] = (max(vals), vals)
    isa = dn[0].get("dnnl_isa", "unknown") if dn else "unknown"
    cases = {}
    for w in ("before", "after"):
        for k, v in read_dnnl_cases(f"{d}/dnnl_{w}.txt").items():
            if k not in cases or v[0] > cases[k][0]:
                cases[k] = v
    sq, speak = read_sgemm(f"{d}/sgemm_before.txt")
    print("loom CPU GEMM width (issue 19): fp32 and bf16 on 2 cores, against PyTorch, with the "
          "per-dtype oneDNN ceiling")
    print()
    print("GEMM ceiling, 1 thread (loom-dnnl-peak: oneDNN matmul, best of 5 reps >= 30 ms; "
          "the larger of before / after; OpenBLAS cblas_sgemm from loom-sgemm-peak beside it):")
    print()
    print("| case | oneDNN fp32 GFLOP/s | oneDNN bf16 GFLOP/s | bf16 / fp32 | OpenBLAS fp32 | "
          "oneDNN kernels |")
    print("|---|---|---|---|---|---|")
    names = []
    for (c, _dt) in cases:
        if c not in names:
            names.append(c)
    for c in names:
        f, b = cases.get((c, "fp32")), cases.get((c, "bf16"))
        m = re.match(r"square (\d+)$", c)
        ob = sq.get(int(m.group(1))) if m else None
        impls = " / ".join(x[1] for x in (f, b) if x)
        print(f"| {c} | {f[0]:.1f} | " if f else f"| {c} | - | ", end="")
        print(f"{b[0]:.1f} | {b[0] / f[0]:.2f} | " if b and f else "- | - | ", end="")
        print(f"{ob:.1f} | {impls} |" if ob else f"- | {impls} |")
    for dt in ("fp32", "bf16"):
        if dt in peaks:
            pk, vals = peaks[dt]
            print(f"dnnl_peak_gflops_{dt}: " + " / ".join(f"{v:.1f}" for v in vals) +
                  f" ({when}), using {pk:.1f}; 2-core ceiling {CORES * pk:.1f} GFLOP/s")
        else:
            print(f"dnnl_peak_gflops_{dt}: not measured" +
                  (" (no bf16 units: the bf16 path is not available on this CPU)"
                   if dt == "bf16" else ""))
    if speak:
        core = openblas_core(f"{d}/sgemm_before.txt")
        print(f"sgemm_peak_gflops (OpenBLAS, 1 thread, squares 1024/2048 and the byte model's "
              f"shapes): {speak:.1f}" + (f"; OpenBLAS kernels: {core}" if core else ""))
    print()

    # --- ISA -----------------------------------------------------------------------------------
    print("what each library ran:")
    print(f"- oneDNN (loom's GEMMs): effective ISA {isa}; kernels: fp32 " +
          ", ".join(sorted({v[1] for k, v in cases.items() if k[1] == "fp32"})) + "; bf16 " +
          (", ".join(sorted({v[1] for k, v in cases.items() if k[1] == "bf16"})) or "-"))
    for prec in ("fp32", "bf16"):
        lines = []
        for row in rows:
            for ln in loom_cpu_lines(d, row, prec, a.rounds):
                if ln not in lines:
                    lines.append(ln)
        print(f"- loom {prec} path (`loom: cpu:` of its logs): " + (" | ".join(lines) or "unknown"))
    tp = read_kv(f"{d}/torch_probe.txt", "torch_")
    if tp:
        bf16_impls = []
        for line in open(f"{d}/torch_probe.txt"):
            m = re.match(r"(?:onednn|dnnl)_verbose,exec,cpu,(\w+),([^,]+),", line)
            if m and f"{m.group(1)} {m.group(2)}" not in bf16_impls:
                bf16_impls.append(f"{m.group(1)} {m.group(2)}")
        core = openblas_core(f"{d}/torch_probe.txt")
        print(f"- PyTorch {tp.get('torch_version', '?')}: CPU capability "
              f"{tp.get('torch_cpu_capability', '?')}; fp32 GEMMs on {tp.get('torch_blas', '?')}"
              + (f" (OpenBLAS kernels: {core})" if core else "") + "; "
              f"{tp.get('torch_onednn', '?')}; bf16 autocast GEMMs (ONEDNN_VERBOSE): "
              + (", ".join(bf16_impls) or "no oneDNN kernel seen"))
    else:
        print("- PyTorch: not run")
    print()

    # --- the runs --------------------------------------------------------------------------------
    print("tokens/s over the steps after the warm-up (skip "
          f"{a.skip}, gpt2_124m {a.big_skip}), {a.rounds} interleaved round(s) pooled; fast = "
          "90th percentile (the 10% fastest steps), median = the usual summary; GFLOP/s and MFU "
          "from the fast phase; MFU = GFLOP/s / (2 x the dtype's 1-thread oneDNN peak; the fp32 "
          "one for bf16 where the CPU has no bf16 units, loom then running fp32 GEMMs); CPU = "
          "(user+sys) / (wall x 2) of the whole run")
    print()
    print("| row | implementation | setup | tok/s fast | tok/s median | ms/step | GFLOP/s | MFU "
          "| CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    res = {}  # (row, impl, prec, setup): {stat: tokens/s}
    for row in rows:
        title, V, T, L, C, seqs = ROWS[row]
        skip = a.big_skip if row == "gpt2_124m" else a.skip
        fpt = flops_per_token(row)
        for impl, prec in IMPL_TITLES:
            for setup in SETUPS[impl]:
                name = f"{row}-{impl}-{prec}-{setup}"
                xs = steps_of(d, name, a.rounds, skip)
                if not xs:
                    continue
                st = {s: f(xs) for s, f in STATS.items()}
                res[(row, impl, prec, setup)] = st
                gf = st["fast"] * fpt / 1e9
                pk = peaks.get(prec, peaks.get("fp32", (0, [])))[0]
                mfu = f"{100 * gf / (CORES * pk):.1f}%" if pk else "-"
                cpu = cpu_share(d, name, a.rounds)
                print(f"| {row} | {IMPL_TITLES[(impl, prec)]} | {SETUP_TITLES[(impl, setup)]} | "
                      f"{st['fast']:.0f} | {st['median']:.0f} | "
                      f"{seqs * T / st['fast'] * 1000:.1f} | {gf:.1f} | {mfu} | "
                      + (f"{100 * cpu:.0f}% |" if cpu is not None else "- |"))
    print()
    for row in rows:
        _, V, T, L, C, seqs = ROWS[row]
        print(f"{row}: {ROWS[row][0]}, {seqs} x {T} = {seqs * T} tokens a step, "
              f"{flops_per_token(row) / 1e6:.3f} MFLOP/token (6N + 12LTC)")
    print()

    # --- each side's best and the ratios -------------------------------------------------------
    def best(row, impl, prec, stat):
        c = [(res[(row, impl, prec, s)][stat], s) for s in SETUPS[impl]
             if (row, impl, prec, s) in res]
        return max(c) if c else None

    print("each side's best setup on 2 cores (fast phase; median):")
    print()
    print("| row | " + " | ".join(IMPL_TITLES.values()) + " |")
    print("|---|" + "---|" * len(IMPL_TITLES))
    for row in rows:
        cells = []
        for impl, prec in IMPL_TITLES:
            f, m = best(row, impl, prec, "fast"), best(row, impl, prec, "median")
            cells.append(f"{f[0]:.0f} ({f[1]}); {m[0]:.0f} ({m[1]})" if f and m else "-")
        print(f"| {row} | " + " | ".join(cells) + " |")
    print()
    ratios = [("bf16_vs_torch_bf16", "loom bf16 / PyTorch autocast bf16", ("loom", "bf16"),
               ("torch", "bf16")),
              ("bf16_vs_fp32", "loom bf16 / loom fp32", ("loom", "bf16"), ("loom", "fp32")),
              ("fp32_vs_torch_fp32", "loom fp32 / PyTorch fp32", ("loom", "fp32"),
               ("torch", "fp32"))]
    print("| ratio (tokens/s, best setups) | row | fast phase | median | target |")
    print("|---|---|---|---|---|")
    for key, label, num, den in ratios:
        for row in rows:
            vals = []
            for stat in ("fast", "median"):
                n, dd = best(row, *num, stat), best(row, *den, stat)
                vals.append(f"{n[0] / dd[0]:.2f}" if n and dd and dd[0] else "-")
            t = TARGETS.get((key, row))
            print(f"| {label} | {row} | {vals[0]} | {vals[1]} | "
                  + (f">= {t:g} |" if t else "- |"))
    print()
    print("| MFU (best setup, fast phase) | row | GFLOP/s | 2-core oneDNN ceiling | MFU |")
    print("|---|---|---|---|---|")
    for prec in ("fp32", "bf16"):
        pk = peaks.get(prec)
        for row in rows:
            b = best(row, "loom", prec, "fast")
            if not b:
                continue
            gf = b[0] * flops_per_token(row) / 1e9
            if pk:
                print(f"| loom {prec} vs dnnl {prec} peak | {row} | {gf:.1f} | "
                      f"{CORES * pk[0]:.1f} | {100 * gf / (CORES * pk[0]):.1f}% |")
            else:
                print(f"| loom {prec} vs dnnl {prec} peak | {row} | {gf:.1f} | not measured | - |")


if __name__ == "__main__":
    main()
