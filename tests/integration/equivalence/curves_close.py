# cross_feature.sh curves_close: A.jsonl B.jsonl: per-step loss and grad norm within 1e-2
#   relative
import json, sys
def curve(p):
    return {r["step"]: r for r in map(json.loads, open(p)) if "loss" in r and "grad_norm" in r}
a, b = curve(sys.argv[1]), curve(sys.argv[2])
assert a.keys() == b.keys() and a, f"steps differ: {sorted(a)} vs {sorted(b)}"
worst = max(abs(a[s][k] - b[s][k]) / abs(b[s][k]) for s in b for k in ("loss", "grad_norm"))
print(f"per-step loss and grad norm over {len(b)} steps: worst rel diff {worst:.3g}; tolerance 0.01")
sys.exit(0 if worst <= 1e-2 else 1)
