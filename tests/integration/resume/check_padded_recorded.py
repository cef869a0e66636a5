# resume_changes.sh: MANIFEST: the checkpoint records model.padded_vocab_size 256 (exit 1 if
#   not)
import json,sys; m = json.load(open(sys.argv[1]))["meta"]["model"]
sys.exit(m.get("padded_vocab_size") != 256)
