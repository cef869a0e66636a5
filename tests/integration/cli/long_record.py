# cli_errors.sh output_paths: one metrics record longer than any buffer (9000 bytes), to stdout
import json; print(json.dumps({"step": 4, "pad": "x" * 9000}))
