# export_import.sh: STEP_DIR V VP: the padded wte rows (V..VP-1) of a run trained from the llm.c
#   file are zero, and wte has VP rows
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from compare_runs import read_global
step, V, VP = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
man = json.load(open(os.path.join(step, "manifest.json")))
wte = read_global(step, man, "params/wte")
C = 32  # configs/tiny.json's n_embd
pad = wte[V * C:]
print(f"trained from the llm.c file: wte {len(wte) // C} rows, rows {V}.. all zero: {not any(pad)}")
sys.exit(0 if len(wte) == VP * C and not any(pad) else 1)
