# equivalence_pp.sh: WORK: each pipeline stage's checkpoint items hold only its own units (the
#   tied wte copy on the last)
import json, os, sys
work = sys.argv[1]
for name, want in (("pp2_1f1b", [(0, 1), (2, 3)]), ("pp4_gpipe", [(0, 0), (1, 1), (2, 2), (3, 3)]),
                   ("pp2_stages13", [(0, 0), (1, 3)])):
    d = os.path.join(work, name, "ckpt")
    step = open(os.path.join(d, "latest")).read().strip()
    man = json.load(open(os.path.join(d, step, "manifest.json")))
    stages = man["meta"]["stages"]
    got = [(s["first_unit"], s["last_unit"]) for s in stages]
    assert got == want, (name, got, want)
    for k, s in enumerate(stages):
        names = [t["name"] for t in s["tensors"]]
        numel = sum(t["numel"] for t in s["tensors"])
        # stage k runs on rank k: its shard holds the params of its own tensors (global view,
        # "params/NAME"), the tied wte copy as "params/wte@tied_copy", nothing else
        chunks = [c for c in man["shards"][k]["chunks"] if c["name"].startswith("params/")]
        tied = any(t.get("tied_copy") for t in s["tensors"])
        own = {t["name"] for t in s["tensors"] if not t.get("tied_copy")}
        assert {c["name"][7:] for c in chunks} == own | ({"wte@tied_copy"} if tied else set()), \
            (name, k, sorted(c["name"] for c in chunks))
        assert sum(c["count"] for c in chunks) == numel, (name, k)
        emb = "wte" in names and s["first_unit"] == 0
        blocks = sorted({n.split(".")[1] for n in names if n.startswith("h.")})
        want_blocks = [str(u - 1) for u in range(max(1, s["first_unit"]), min(2, s["last_unit"]) + 1)]
        assert blocks == want_blocks, (name, k, blocks, want_blocks)
        assert ("ln_f.weight" in names) == (s["last_unit"] == 3), (name, k)
        assert ("wpe" in names) == (s["first_unit"] == 0), (name, k)
        print(f"shapes {name} stage {k}: units {s['first_unit']}..{s['last_unit']}, {numel} "
              f"parameters: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}")
