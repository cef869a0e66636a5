# resume_changes.sh lr_of: METRICS STEP: print the lr step STEP ran at
import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("step") == int(sys.argv[2]) and "lr" in r: print("%.9g" % r["lr"])
