#!/usr/bin/env python3
"""step_passes.py PERF_DATA STEPS [TOP]: the cpu-clock samples of one rank's training steps
(perf record --call-graph dwarf, bench/step_passes.sh), grouped by the pass of the step their
call stack belongs to; the first 2 steps are skipped (first touch of the buffers). Prints ms of
CPU per step and the share of each pass; TOP > 0 also lists the TOP hottest 3-frame stacks.

A sample belongs to the first rule (in order) one of whose frames is on its stack. The
device's memset/copy/scale are tail calls, so their callers (gpt_zero_grad, ...) are often not
on the stack: glibc's memset right under train_step is zero_grad's."""
import collections
import subprocess
import sys

RULES = [
    ("communication (MPI calls, waits, progress)",
     {"host_all_reduce", "host_test", "host_wait", "host_reduce_scatter_v", "host_all_gather_v",
      "mpi_wait", "mpi_test", "opal_progress", "loom__ctl_all_reduce", "PMPI_Allreduce"}),
    ("zero2/3: partition memset (begin_step)", {"zc_gb_begin_step"}),
    ("plugin scratch alloc per step (zero-fill, page faults)", {"host_alloc"}),
    ("plugin scratch free per step (munmap, brk)", {"host_free"}),
    ("zero2/3: reduced block added into the partition", {"gb_complete"}),
    ("norm: sum of squares", {"grad_sq_partition", "grad_sum_squares", "cpu_sum_squares"}),
    ("AdamW", {"host_adamw_range", "cpu_adamw", "host_adamw_range_mixed"}),
    ("zero1: reduced block copied into the partition", {"zc_avg_into"}),
    ("1/dp average (scale)", {"average", "cpu_scale"}),
    ("ddp: split wte rows", {"split_before_encoder", "split_after_encoder"}),
    ("GEMM (oneDNN; OpenBLAS before issue 19)", {"loom__cpu_gemm_w", "loom__cpu_gemm",
                                                 "cblas_sgemm"}),
    ("softmax / cross-entropy", {"loom__cpu_crossentropy_fused",
                                 "loom__cpu_crossentropy_forward",
                                 "loom__cpu_crossentropy_backward"}),
    ("memset elsewhere (activation grads, buckets)", {"__memset_avx512_unaligned_erms",
                                                       "__memset_evex_unaligned_erms",
                                                       "__memset_avx2_unaligned_erms"}),
]


def read(path):
    txt = subprocess.run(["perf", "script", "-i", path, "-F", "time,period,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    for block in txt.split("\n\n"):
        lines = [l for l in block.strip().split("\n") if l.strip()]
        if not lines:
            continue
        head = lines[0].split()
        try:
            t, period = float(head[0].rstrip(":")), int(head[1])
        except (ValueError, IndexError):
            continue
        frames = []
        for l in lines[1:]:
            parts = l.split(None, 1)
            frames.append(parts[1].split("+")[0].replace(" (inlined)", "").strip()
                          if len(parts) > 1 else "?")
        yield t, period, frames


def label(frames):
    mem = [k for k, f in enumerate(frames) if "memset" in f]
    if mem and mem[0] + 1 < len(frames) and frames[mem[0] + 1] == "train_step":
        return "zero_grad (gpt_zero_grad's memset)"
    on = set(frames)
    for name, keys in RULES:
        if on & keys:
            return name
    return "other (attention, layernorm, GELU, loader, metrics)"


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    inside = [s for s in read(path) if "train_step" in s[2]]
    if not inside or steps <= 2:
        sys.exit(f"{path}: no samples inside train_step")
    t0, t1 = inside[0][0], inside[-1][0]
    cut = t0 + (t1 - t0) * 2 / steps
    kept = [s for s in inside if s[0] >= cut]
    n = steps - 2
    acc, stacks = collections.Counter(), collections.Counter()
    for _, p, fr in kept:
        acc[label(fr)] += p
        stacks[" <- ".join(fr[:3])] += p
    total = sum(acc.values())
    print(f"{path}: {total / 1e6 / n:.1f} ms of CPU per step in train_step ({n} steps)")
    for name, p in acc.most_common():
        print(f"  {name:56s} {100 * p / total:5.1f} %  {p / 1e6 / n:7.1f} ms/step")
    for k, v in stacks.most_common(top):
        print(f"    {v / 1e6 / n:7.2f} ms  {k}")


if __name__ == "__main__":
    main()
