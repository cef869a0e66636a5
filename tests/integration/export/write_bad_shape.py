# export_import.sh: SRC OUT: OUT = SRC.safetensors with one tensor's shape reversed
import json, os, struct, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import safetensors_header
d = open(sys.argv[1], "rb").read()
n, h = safetensors_header(d)
h["h.1.attn.c_attn.weight"]["shape"] = h["h.1.attn.c_attn.weight"]["shape"][::-1]  # (out, in)
t = json.dumps(h).encode()
t += b" " * (-(8 + len(t)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + d[8 + n:])
