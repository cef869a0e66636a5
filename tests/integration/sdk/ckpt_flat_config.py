# ckpt_third_party.sh: CONFIG OUT DIR: CONFIG with its checkpoint section naming flatckpt
#   (dir DIR, every 10), written to OUT
import json, sys
c = json.load(open(sys.argv[1]))
c["checkpoint"] = {"plugin": "flatckpt", "dir": sys.argv[3], "every": 10}
json.dump(c, open(sys.argv[2], "w"))
