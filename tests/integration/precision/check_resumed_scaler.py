# mixed_precision.sh: RESUMED.jsonl STRAIGHT.jsonl: the resumed run's loss scale, skipped count
#   and lr = the straight run's
import json, sys
def sc(p):
    return {r["step"]: (r["loss_scale"], r["skipped_steps"], r["lr"])
            for r in map(json.loads, open(p)) if "skipped" in r and r["step"] > 6}
a, b = sc(sys.argv[1]), sc(sys.argv[2])
assert a == b and len(a) == 6, f"resumed {a} vs straight {b}"
