# export_import.sh: WORK SEED_RUN [SEED_RUN ...]: a run initialised from the exported file
# (init1) starts below the seed's loss. Each SEED_RUN is a run from the seed's initialisation
# on the same first batch (src, the exported run itself; seed1, a run of init1's settings
# without init_from): their step-1 losses must be equal, the loss of the same parameters on
# the same tokens, so src alone stands for seed1 in the CI pass.
import json, sys
w = sys.argv[1]
first = lambda n: next(json.loads(l)["loss"] for l in open(f"{w}/{n}/metrics.jsonl")
                       if '"loss"' in l)
a = first("init1")
seeds = {n: first(n) for n in sys.argv[2:]}
b = seeds[sys.argv[2]]
print(f"step 1 loss: from the exported run {a:.4f}, from the seed's initialisation {b:.4f} "
      f"({', '.join(f'{n} {v!r}' for n, v in seeds.items())})")
if any(v != b for v in seeds.values()):
    print("FAIL: the seed's runs differ on step 1")
    sys.exit(1)
sys.exit(0 if a < b - 0.05 else 1)
