# mixed_precision.sh: BF16.jsonl FP32.jsonl: bf16 trains like fp32 (loss within 1e-2), and does
#   round
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import losses
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in b)
print(f"bf16 vs fp32: worst relative loss difference over 20 steps {worst:.2e}")
assert worst <= 1e-2 and a != b, worst
