# resume_tp.sh: MANIFEST: params/h.0.attn.qkv.weight is saved as tp 2 slices
import json, sys
man = json.load(open(sys.argv[1]))
qkv = [c for sh in man["shards"] for c in sh["chunks"] if c["name"] == "params/h.0.attn.qkv.weight"]
assert sorted(c["split_index"] for c in qkv) == [0, 1], qkv
assert all(c["split_size"] == 2 and c["split_parts"] == 3 and c["split_dim"] == 0 for c in qkv)
