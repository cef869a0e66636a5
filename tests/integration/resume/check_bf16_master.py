# resume_reshard.sh: STEP_DIR LIB_DIR: a bf16 checkpoint holds the fp32 master, not the 16-bit
#   copy
import json, struct, sys
sys.path.insert(0, sys.argv[2])
import compare_runs as cr
step_dir = sys.argv[1]
man = json.load(open(step_dir + "/manifest.json"))
meta = man["meta"]
if meta["config"]["precision"]["plugin"] != "bf16" or meta.get("items") != "global":
    sys.exit(f"FAIL {step_dir}: not a bf16 checkpoint with the global view")
n = off = 0
for name in cr.global_names(meta):
    for x in cr.read_global(step_dir, man, "params/" + name):
        n += 1
        off += struct.unpack("<I", struct.pack("<f", x))[0] & 0xffff != 0
# 10 AdamW steps of ~lr = 1e-3 leave bits below bf16's 8 in almost every fp32 master value
if off * 10 < n * 9:
    sys.exit(f"FAIL {step_dir}: {n - off} of {n} parameters are bf16 values: the checkpoint "
             f"holds the 16-bit copy, not the fp32 master")
print(f"bf16 source, step 10: {off} of {n} parameters carry bits below bf16's: the fp32 master")
