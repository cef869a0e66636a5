# equivalence_tp.sh: WORK L C T: tensor-parallel bytes per step = Megatron's count
import json, sys
work, L, C, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for name, tp, B, accum in (("tp2", 2, 8, 1), ("tp4", 4, 8, 1), ("tp2_accum4", 2, 2, 4)):
    want = L * 4 * accum * 2 * (tp - 1) / tp * B * T * C * 4
    got = [json.loads(l)["comm_bytes"] for l in open(f"{work}/{name}/metrics.jsonl")
           if '"loss"' in l]
    got = sorted(got)[len(got) // 2]  # the median step (step 1 carries start-up control bytes)
    print(f"traffic {name}: {got} bytes/step sent per rank, Megatron 4 x L x 2(n-1)/n x B*T*C*4"
          f" x accum = {want:.0f} (ratio {got / want:.4f})")
    if abs(got - want) > 1e-9 * want:
        sys.exit(1)
