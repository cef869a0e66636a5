# equivalence_bf16.sh: BF16.jsonl FP32.jsonl: ddp's bf16 all-reduce moves half the fp32 bytes
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import comm_per_step as comm
a, b = comm(sys.argv[1]), comm(sys.argv[2])
print(f"ddp2 gradient traffic per step: bf16 {a[-1]} bytes, fp32 {b[-1]} bytes")
# step 1 also carries 8 bytes of set-up traffic in both runs
assert len(a) == len(b) == 20 and all(2 * x == y > 0 for x, y in zip(a[1:], b[1:])), (a, b)
