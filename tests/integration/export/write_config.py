# export_import.sh config(): TINY_JSON WORK NAME INIT_PATH [FORMAT] [MODEL_JSON]: WORK/NAME.json
#   with init_from
import json, sys
src, work, name, path = sys.argv[1:5]
c = json.load(open(src))
c["model"]["vocab_size"] = 300
c["data"] = {"train": f"{work}/data/train_*.bin", "val": f"{work}/data/val_*.bin",
             "vocab": f"{work}/data/vocab.json"}
c["init_from"] = {"path": path}
if len(sys.argv) > 5 and sys.argv[5]:
    c["init_from"]["format"] = sys.argv[5]
if len(sys.argv) > 6:
    c["model"].update(json.loads(sys.argv[6]))
json.dump(c, open(f"{work}/{name}.json", "w"), indent=1)
