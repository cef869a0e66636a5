# export_import.sh: WORK: a run initialised from the exported file starts below the seed's loss
import json, sys
w = sys.argv[1]
first = lambda n: next(json.loads(l)["loss"] for l in open(f"{w}/{n}/metrics.jsonl") if '"loss"' in l)
a, b = first("init1"), first("seed1")
print(f"step 1 loss: from the exported run {a:.4f}, from the seed's initialisation {b:.4f}")
sys.exit(0 if a < b - 0.05 else 1)
