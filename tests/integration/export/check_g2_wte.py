# export_import.sh: STEP_DIR FILE.safetensors: the export's wte.weight = the checkpoint's first
#   50257 rows
import json, os, sys, array
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from compare_runs import read_global
from runs import safetensors_header
step, st = sys.argv[1:3]
man = json.load(open(os.path.join(step, "manifest.json")))
wte = read_global(step, man, "params/wte")
d = open(st, "rb").read()
n, h = safetensors_header(d)
h = h["wte.weight"]
b, e = h["data_offsets"]
got = array.array("f", d[8 + n + b:8 + n + e])
print(f"checkpoint wte {len(wte) // 32} rows, safetensors wte.weight {h['shape']}")
sys.exit(0 if h["shape"] == [50257, 32] and got == wte[:50257 * 32] else 1)
