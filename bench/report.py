#!/usr/bin/env python3
"""Tables for loom's benchmarks (bench/throughput.sh, bench/ddp_overlap.sh).

Reads the anchor output of loom-sgemm-peak and, for every configuration, the JSONL metrics
(core/train/metrics.c, written by rank 0) and stdout of each round, and prints:
  - tokens/s: the median of tokens_per_s over the steps after the warm-up (step > --skip), pooled
    over the rounds, and the 90th percentile (the fast phase; see STATS); the spread is the range
    of the per-round values, relative to the pooled one; ms/step is tokens per step / tokens/s;
  - achieved GFLOP/s = tokens/s * FLOPs/token, in total and per rank;
  - MFU = achieved GFLOP/s per rank / single-thread SGEMM peak (the anchor); also the ratio to
    the rate the model's own GEMM shapes reach (sgemm_model_mix_gflops);
  - the ratio to the configuration's base (speedup, and scaling efficiency = speedup / (ranks /
    base ranks)), all measured in the same script;
  - comm_bytes per step per rank against the ideal ring all-reduce of the fp32 gradients,
    2(n-1)/n * 4 * N_params, and the peak memory per rank (mem_peak_bytes.total).

FLOPs per token = 6 N + 12 L T C: 6 N for the forward and backward of the weight matmuls (Kaplan
et al. 2020, section 2.1, whose forward count is 2N + 2 L T C) plus 12 L T C for the forward and
backward of the attention scores QK^T and of AV (PaLM, Chowdhery et al. 2022, appendix B). N is
every parameter, embeddings included, as loom reports it.

  report.py --anchor FILE [--anchor FILE] [--pair FILE --pair FILE] --skip K --run SPEC...
--anchor: loom-sgemm-peak outputs (before and after the runs; the max is used, being the least
disturbed); --pair: outputs of loom-sgemm-peak processes run at the same time, whose summed
model-shape rate over one process alone is the speedup the cores could give that many ranks.
  SPEC = label|ranks|micro_batch|base_label|jsonl[,jsonl...]|log[|time[,time...]]
A time file holds "wall user sys" seconds of one run (mpirun and its ranks, bash's `time`): the
CPU column is (user + sys) / (wall * ranks), the share of a core each rank got. Below ~100% the
ranks were waiting for the CPU: other load on the shared machine, or more ranks than cores.
Open MPI busy-polls while it waits for a message, so communication time counts as CPU here.
"""
import argparse
import json
import re
import statistics
import sys


def quantile(xs, q):
    """The q-quantile of xs, linear between order statistics."""
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo = int(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


# The median is the usual summary; on a shared machine whose other jobs come and go, the steps
# are bimodal (a rank sharing its core with another job runs at half speed, and a synchronous
# data-parallel step waits for its slowest rank), so the fast phase, the 90th percentile of
# tokens/s (the 10% fastest steps), is what compares configurations when the machine is busy.
STATS = {"median": statistics.median, "p90": lambda xs: quantile(xs, 0.9)}
STAT_TITLES = {
    "median": "median tokens/s (the usual summary; includes the slow phases of the machine)",
    "p90": "fast phase: 90th percentile of tokens/s (the 10% fastest steps; least disturbed)"}


def read_anchor(path):
    vals = {}
    for line in open(path):
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("sgemm_"):
            vals[parts[0]] = float(parts[1])
    if "sgemm_peak_gflops" not in vals:
        sys.exit(f"report.py: {path}: no sgemm_peak_gflops line")
    return vals


def read_model(log):
    """N, L, C, T and the global batch from rank 0's first lines."""
    text = open(log).read()
    m = re.search(r"loom: (\d+) parameters \| (\d+) layers, (\d+) heads, (\d+) embd, vocab (\d+)"
                  r" \| world (\d+) \(dp (\d+)\) \| global batch (\d+) x (\d+) tokens", text)
    if not m:
        sys.exit(f"report.py: {log}: no 'loom: N parameters' line")
    g = [int(x) for x in m.groups()]
    return dict(N=g[0], L=g[1], H=g[2], C=g[3], V=g[4], world=g[5], dp=g[6], G=g[7], T=g[8])


def read_steps(path, skip):
    rows = []
    for line in open(path):
        r = json.loads(line)
        if "tokens_per_s" in r and r["step"] > skip:
            rows.append(r)
    if not rows:
        sys.exit(f"report.py: {path}: no training steps after step {skip}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anchor", action="append", required=True)
    ap.add_argument("--pair", action="append", default=[],
                    help="loom-sgemm-peak outputs of processes run at the same time")
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--run", action="append", required=True)
    ap.add_argument("--title", default="")
    a = ap.parse_args()

    anchors = [read_anchor(p) for p in a.anchor]
    peaks = [x["sgemm_peak_gflops"] for x in anchors]
    mixes = [x.get("sgemm_model_mix_gflops", 0.0) for x in anchors]
    # the least disturbed anchor measurement is the closest to what the core can do
    peak, mix = max(peaks), max(mixes)

    runs = []
    for spec in a.run:
        fields = spec.split("|")
        label, ranks, mb, base, jsonls, log = fields[:6]
        cpu = None
        if len(fields) > 6 and fields[6]:
            shares = []
            for p in fields[6].split(","):
                w, u, s_ = (float(x) for x in open(p).read().split()[-3:])
                shares.append((u + s_) / (w * int(ranks)) if w > 0 else 0.0)
            cpu = statistics.mean(shares)
        model = read_model(log)
        per_round = [read_steps(p, a.skip) for p in jsonls.split(",")]
        steps = [r for rr in per_round for r in rr]
        run = dict(label=label, ranks=int(ranks), mb=int(mb), base=base, model=model,
                   rounds=len(per_round), cpu=cpu,
                   comm=statistics.median(r["comm_bytes"] for r in steps),
                   comm_min=min(r["comm_bytes"] for r in steps),
                   comm_max=max(r["comm_bytes"] for r in steps),
                   mem=max(r["mem_peak_bytes"]["total"] for r in steps),
                   act=max(r["mem_peak_bytes"].get("activations", 0) for r in steps))
        for stat, f in STATS.items():
            tps = f([r["tokens_per_s"] for r in steps])
            rounds = [f([r["tokens_per_s"] for r in rr]) for rr in per_round]
            run[stat] = dict(tps=tps, spread=(max(rounds) - min(rounds)) / tps if tps else 0.0,
                             ms=1e3 * model["G"] * model["T"] / tps if tps else 0.0)
        runs.append(run)
    by_label = {r["label"]: r for r in runs}

    m0 = runs[0]["model"]
    N, L, T, C = m0["N"], m0["L"], m0["T"], m0["C"]
    fpt = 6 * N + 12 * L * T * C
    if a.title:
        print(a.title)
    print(f"model: N = {N:,} parameters, L {L}, C {C}, T {T}, vocab {m0['V']}")
    print(f"FLOPs/token = 6N + 12*L*T*C = {6 * N / 1e6:.3f}M + {12 * L * T * C / 1e6:.3f}M "
          f"= {fpt / 1e6:.3f} MFLOP (Kaplan et al. 2020 sec. 2.1 + PaLM app. B attention term)")
    print("anchor: single-thread SGEMM peak " + " / ".join(f"{p:.1f}" for p in peaks) +
          f" GFLOP/s (before / after the runs; using the max {peak:.1f}); "
          f"the model's GEMM shapes: {mix:.1f} GFLOP/s")
    if a.pair:
        pair = [read_anchor(p).get("sgemm_model_mix_gflops", 0.0) for p in a.pair]
        single = mixes[0]
        print(f"anchor: {len(pair)} SGEMM processes at once (model GEMM shapes): "
              + " + ".join(f"{x:.1f}" for x in pair) + f" = {sum(pair):.1f} GFLOP/s, "
              f"{sum(pair) / single if single else 0:.2f}x one alone ({single:.1f}, before): "
              f"the speedup {len(pair)} ranks could get from the cores at that moment")
    print(f"tokens/s over the steps > {a.skip} of {runs[0]['rounds']} interleaved round(s), "
          "pooled; spread = range of the per-round values / the pooled value")
    print("MFU = GFLOP/s per rank / SGEMM peak; vs mix = per rank / the rate of the model's GEMM "
          "shapes; eff = speedup / (ranks / base ranks); CPU = (user+sys) / (wall*ranks) of the "
          "whole run, the share of a core each rank got (MPI busy-polls: waiting counts)")
    for stat, what in STAT_TITLES.items():
        print()
        print(what)
        hdr = (f"{'config':<20} {'ranks':>5} {'micro':>5} {'tok/step':>8} {'tokens/s':>9} "
               f"{'spread':>6} {'ms/step':>8} {'GFLOP/s':>8} {'/rank':>7} {'MFU':>6} "
               f"{'vs mix':>6} {'speedup':>7} {'eff':>6} {'CPU':>5}")
        print(hdr)
        print("-" * len(hdr))
        for r in runs:
            b = by_label.get(r["base"], r)
            x, bx = r[stat], b[stat]
            gf = x["tps"] * fpt / 1e9
            per = gf / r["ranks"]
            speedup = x["tps"] / bx["tps"] if bx["tps"] else 0.0
            eff = speedup / (r["ranks"] / b["ranks"])
            print(f"{r['label']:<20} {r['ranks']:>5} {r['mb']:>5} {r['model']['G'] * T:>8} "
                  f"{x['tps']:>9.0f} {100 * x['spread']:>5.1f}% {x['ms']:>8.1f} {gf:>8.2f} "
                  f"{per:>7.2f} {100 * per / peak:>5.1f}% "
                  f"{100 * per / mix if mix else 0:>5.1f}% {speedup:>7.3f} {100 * eff:>5.1f}% "
                  + (f"{100 * r['cpu']:>4.0f}%" if r["cpu"] is not None else f"{'-':>5}"))
    print()
    hdr = (f"{'config':<20} {'ranks':>5} {'comm MB/step/rank':>17} {'ideal ring MB':>13} "
           f"{'ratio':>7} {'peak MiB/rank':>13} {'activations MiB':>15}")
    print(hdr)
    print("-" * len(hdr))
    for r in runs:
        n = r["ranks"]
        ideal = 2 * (n - 1) / n * 4 * N
        ratio = f"{r['comm'] / ideal:.4f}" if ideal else "-"
        note = "" if r["comm_min"] == r["comm_max"] else \
            f" (steps vary {r['comm_min'] / 1e6:.3f}..{r['comm_max'] / 1e6:.3f})"
        print(f"{r['label']:<20} {n:>5} {r['comm'] / 1e6:>17.3f} {ideal / 1e6:>13.3f} "
              f"{ratio:>7} {r['mem'] / 2**20:>13.2f} {r['act'] / 2**20:>15.2f}{note}")


if __name__ == "__main__":
    main()
