# mixed_precision.sh: WORK RUN...: each rank's memory under bf16/fp16 = `loom estimate`'s
import json, os, sys
work, names = sys.argv[1], sys.argv[2:]
for name in names:
    est = json.load(open(os.path.join(work, name, "estimate.json")))
    rec = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl")) if '"skipped"' in l][-1]
    got, want, worst = rec["mem_peak_bytes"], est["bytes"], rec["mem_peak_bytes_max"]
    assert est["precision"] == name.split("_")[1], (name, est["precision"])
    for cat in ("params", "grads", "optim", "activations"):
        assert got[cat] == want[cat], f"{name} {cat}: measured {got[cat]}, estimate {want[cat]}"
    assert got["comm"] <= want["comm"] and worst["total"] <= est["bytes"]["total"], (name, got, want)
    print(f"{name}: params {got['params']} grads {got['grads']} optim {got['optim']} comm "
          f"{got['comm']} (estimate {want['comm']}) = estimate")
