# equivalence_tp.sh: WORK L C T RUN...: tensor-parallel bytes per step = Megatron's count, for
# each RUN named (of tp2, tp4, tp2_accum4: the sanitized build runs tp2_accum4 only)
import json, sys
work, L, C, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
RUNS = {"tp2": (2, 8, 1), "tp4": (4, 8, 1), "tp2_accum4": (2, 2, 4)}  # tp, micro batch, accum
if len(sys.argv) < 6:
    sys.exit("usage: check_tp_traffic.py WORK L C T RUN...")
for name in sys.argv[5:]:
    tp, B, accum = RUNS[name]
    want = L * 4 * accum * 2 * (tp - 1) / tp * B * T * C * 4
    got = [json.loads(l)["comm_bytes"] for l in open(f"{work}/{name}/metrics.jsonl")
           if '"loss"' in l]
    got = sorted(got)[len(got) // 2]  # the median step (step 1 carries start-up control bytes)
    print(f"traffic {name}: {got} bytes/step sent per rank, Megatron 4 x L x 2(n-1)/n x B*T*C*4"
          f" x accum = {want:.0f} (ratio {got / want:.4f})")
    if abs(got - want) > 1e-9 * want:
        sys.exit(1)
