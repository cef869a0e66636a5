# equivalence_bf16.sh: BF16.jsonl FP32.jsonl: the pipeline's bf16 boundaries send 32768 bytes
#   fewer per step
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import comm_per_step as comm
a, b = comm(sys.argv[1]), comm(sys.argv[2])
print(f"pp2 stage 0 traffic per step: bf16 {a[-1]} bytes, fp32 {b[-1]} bytes")
assert all(y - x == 32768 for x, y in zip(a[1:], b[1:])), (a, b)
