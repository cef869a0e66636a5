# cli_errors.sh output_paths: METRICS after a resume over a long line hold no piece of it, and
#   step 4 once more
import json, sys
steps = [json.loads(l).get("step") for l in open(sys.argv[1])]
assert "x" * 100 not in open(sys.argv[1]).read(), "the dropped record left a piece behind"
assert steps.count(4) >= 1 and max(steps) == 4, steps
