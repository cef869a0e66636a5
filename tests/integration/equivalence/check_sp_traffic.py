# equivalence_sequence_parallel*.sh: WORK NAME L C B T TP ACCUM VP RECOMP: the measured
# tensor-parallel bytes per step of a sequence-parallel run = the count of core/model/gpt_sp.c's
# collectives (docs/parallelism.md, "Sequence parallel"). h = (t-1)/t * B*T*C*4 is one
# all-gather or reduce-scatter of a (B,T,C) fp32 activation (an all-reduce is 2h):
#   per block 10h: forward 2 all-gathers + 2 reduce-scatters (= tp's 2 all-reduces), backward
#     2 all-gathers + 2 reduce-scatters (= tp's 2) + 2 all-gathers of the saved LayerNorm
#     outputs (Megatron regathers instead of keeping them whole); a fully recomputed block 3h
#     more (its forward up to mlp.fc again);
#   embedding 1h (backward gather; vocab_parallel: + the forward's reduce-scatter), head 1h
#     (ln_f's output gathered; vocab_parallel: + d(ln_f) reduce-scattered, + the row
#     statistics' all-reduces 2(t-1)/t * 24*B*T);
#   the LayerNorms' weight gradients: all-reduce 2(t-1)/t * 4 * (4C per block + 2C).
import json, sys
work, name = sys.argv[1], sys.argv[2]
L, C, B, T, tp, accum, vp, recomp = (int(x) for x in sys.argv[3:11])
h = (tp - 1) / tp * B * T * C * 4
ar = 2 * (tp - 1) / tp
want = L * 10 * h + recomp * 3 * h + (1 + vp) * h + (1 + vp) * h
want += vp * ar * 24 * B * T + ar * 4 * (4 * C * L + 2 * C)
want *= accum
got = [json.loads(l)["comm_bytes"] for l in open(f"{work}/{name}/metrics.jsonl") if '"loss"' in l]
got = sorted(got)[len(got) // 2]  # the median step (step 1 carries start-up control bytes)
tp_want = L * 4 * accum * 2 * (tp - 1) / tp * B * T * C * 4
print(f"traffic {name}: {got} bytes/step sent per rank, sequence-parallel count {want:.0f} "
      f"(ratio {got / want:.6f}); tensor parallel's f/g alone would be {tp_want:.0f} "
      f"({got / tp_want:.4f}x)")
sys.exit(0 if abs(got - want) <= 1e-9 * want + 1 else 1)
