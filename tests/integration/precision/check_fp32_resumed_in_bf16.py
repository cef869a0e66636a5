# mixed_precision.sh: RESUMED.jsonl FP32.jsonl: an fp32 checkpoint resumed in bf16 continues
#   within bf16's rounding
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import losses
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
print(f"fp32 checkpoint resumed in bf16: steps {sorted(a)}, worst relative loss diff {worst:.2e}")
assert sorted(a) == [5, 6, 7, 8] and worst <= 1e-2 and a != {s: b[s] for s in a}, (a, worst)
