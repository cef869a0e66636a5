# ckpt_third_party.sh: WORK: steps 1-20 of flatckpt straight, flatckpt resumed at 10 and
#   checkpoint.so log the same loss text, bitwise
import json, sys
w = sys.argv[1]
def losses(run):  # the exact text of each step's loss, as logged
    out = {}
    for line in open(f"{w}/{run}/metrics.jsonl"):
        r = json.loads(line)
        if "loss" in r and "step" in r:
            out[r["step"]] = line.split('"loss":')[1].split(",")[0]
    return out
ours, flat, resumed = losses("ours"), losses("flat"), losses("resumed")
assert sorted(flat) == list(range(1, 21)), sorted(flat)
assert sorted(resumed) == list(range(1, 21)), sorted(resumed)
bad = [s for s in flat if not (flat[s] == resumed[s] == ours[s])]
print(f"steps 1-20: flatckpt straight, resumed at 10, and checkpoint.so: {'same' if not bad else bad}")
sys.exit(1 if bad else 0)
