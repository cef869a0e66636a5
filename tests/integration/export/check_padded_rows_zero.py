# export_import.sh: STEP_DIR: the padded wte rows (50257..) of a run trained from the llm.c file
#   are zero
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from compare_runs import read_global
man = json.load(open(os.path.join(sys.argv[1], "manifest.json")))
wte = read_global(sys.argv[1], man, "params/wte")
pad = wte[50257 * 32:]
print(f"trained from the llm.c file: wte {len(wte) // 32} rows, rows 50257.. all zero: {not any(pad)}")
sys.exit(0 if len(pad) == (50432 - 50257) * 32 and not any(pad) else 1)
