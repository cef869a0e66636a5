#!/usr/bin/env python3
"""The lr of each step of a run against DeepSpeed's scheduler, written here from
deepspeed/runtime/lr_schedules.py (WarmupLR, WarmupDecayLR, WarmupCosineLR) and the engine's
order: the scheduler starts at last_batch_iteration -1 and steps after every optimizer step, so
the k-th step runs at iteration k - 2.

usage: check_ds_lr.py DS_CONFIG METRICS_JSONL OPTIMIZER_LR
"""
import json
import math
import sys


def gamma_warm(it, w, kind):
    return math.log(it + 1) / math.log(w) if kind == "log" else it / w


def ds_lr(sched, base_lr, k):
    if not sched:
        return base_lr
    t, p = sched["type"], sched.get("params", {})
    it = k - 2
    w = max(2, p.get("warmup_num_steps", 1000))
    kind = p.get("warmup_type", "log")
    if t == "WarmupCosineLR":
        if it < 0:
            return 0.0
        if it < w:
            r0 = p.get("warmup_min_ratio", 0.0)
            return base_lr * (r0 + gamma_warm(it, w, kind) * (1 - r0))
        total, cmin = p["total_num_steps"], p.get("cos_min_ratio", 0.0001)
        r = (1 + math.cos(math.pi * (it - w + 1) / (total - w))) / 2
        return base_lr * max(0.0, cmin + (1 - cmin) * r)
    lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", 0.001)
    if it < 0:
        return lo
    if it < w:
        g = gamma_warm(it, w, kind)
    elif t == "WarmupLR":
        g = 1.0
    else:
        total = p["total_num_steps"]
        g = max(0.0, (total - it) / max(1.0, total - w))
    return lo + (hi - lo) * g


def main():
    ds = json.load(open(sys.argv[1]))
    recs = [json.loads(l) for l in open(sys.argv[2])]
    recs = [r for r in recs if "loss" in r and "lr" in r]
    base = ds.get("optimizer", {}).get("params", {}).get("lr", float(sys.argv[3]))
    bad = 0
    for r in recs:
        want = ds_lr(ds.get("scheduler"), base, r["step"])
        if abs(r["lr"] - want) > 1e-12 + 1e-9 * abs(want):
            print(f"step {r['step']}: lr {r['lr']!r}, DeepSpeed's {want!r}")
            bad += 1
    print(f"check_ds_lr: {len(recs)} steps, {bad} differ")
    return 1 if bad or not recs else 0


if __name__ == "__main__":
    sys.exit(main())
