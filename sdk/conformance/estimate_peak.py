"""The measured peak against `loom estimate`: estimate_peak.py METRICS_JSONL ESTIMATE_JSON.

Prints one line; exit status 1 when a category of the largest rank's peak (mem_peak_bytes_max,
else rank 0's mem_peak_bytes, of the last step) exceeds the estimate's bytes for it."""
import json
import sys

recs = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in recs if "loss" in r and "mem_peak_bytes" in r]
if not steps:
    print("the metrics have no mem_peak_bytes")
    sys.exit(1)
peak = steps[-1].get("mem_peak_bytes_max") or steps[-1]["mem_peak_bytes"]
est = json.load(open(sys.argv[2]))["bytes"]
over = [f"{k} {v} > {est.get(k, 0)}" for k, v in peak.items() if v > est.get(k, 0)]
comm = f"comm {peak.get('comm', 0)} of {est.get('comm', 0)} estimated"
if over:
    print("the measured peak exceeds the estimate: " + ", ".join(over) + f" ({comm})")
    sys.exit(1)
print(f"peak {peak.get('total', 0)} <= estimate {est.get('total', 0)} bytes, {comm}")
