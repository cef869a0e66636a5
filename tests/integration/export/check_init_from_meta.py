# export_import.sh: MANIFEST PATH: the checkpoint records init_from (path, format, bytes)
import json, sys
m = json.load(open(sys.argv[1]))["meta"]["init_from"]
print(f"manifest meta.init_from: {m}")
sys.exit(0 if m["path"] == sys.argv[2] and m["format"] == "safetensors" and m["bytes"] > 0 else 1)
