# memory_sequence_parallel.sh: WORK L C B T NH TP2 TP2_SP TP4 TP4_SP [MORE...]: each run's
#   measured peak per category (the largest rank's) and steady-step traffic = `loom estimate`
#   to the byte; then the activation pools beside the per-block formula. Korthikanti et al.
#   2022 (Table 2) count 2-byte activations with dropout: sbh(10 + 24/t) + 5as^2b/t per block
#   under tensor parallel, sbh(34/t) + 5as^2b/t with sequence parallel. loom has no dropout
#   (their 2sbh of masks, 10 -> 8, 34 -> 32), keeps fp32 (x 2), saves the block's output
#   instead of the next LayerNorm's input (the same tensor), and under flash attention keeps
#   the row log-sum-exp 4asb/t instead of 5as^2b/t; its LayerNorm statistics add 16sb (tp) ->
#   16sb/t (sp):
#   tp: 2sbh(8 + 24/t) + 16sb + 4asb/t      sp: 2sbh(32/t) + 16sb/t + 4asb/t
#   (materialised attention: 4as^2b/t instead of 4asb/t).
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from runs import records

work = sys.argv[1]
L, C, B, T, NH = (int(x) for x in sys.argv[2:7])
names = sys.argv[7:]
CATS = ("params", "grads", "optim", "activations", "comm", "other", "total")
ok, act = True, {}
print(f"{'run':<8} {'cat':<12}{'measured':>11}{'estimate':>11}")
for name in names:
    steps = [x for x in records(f"{work}/{name}/metrics.jsonl") if "loss" in x]
    meas = steps[-1]["mem_peak_bytes_max"]
    doc = json.load(open(f"{work}/{name}/estimate.json"))
    est = doc["stages"][0]
    rows = [(k, meas[k], est["bytes"][k]) for k in CATS]
    rows.append(("comm/step", steps[2]["comm_bytes"], est["comm_bytes_per_step"]))
    for k, m, e in rows:
        bad = m != e
        ok = ok and not bad
        print(f"{name:<8} {k:<12}{m:>11}{e:>11}{'  FAIL' if bad else ''}")
    act[name] = (meas["activations"], doc.get("attn_lse", True))
s, b, h, a = T, B, C, NH
for tpn, spn, t in ((names[0], names[1], 2), (names[2], names[3], 4)):
    att = 4 * a * s * b / t  # flash attention's lse (fp32)
    f_tp = 2 * s * b * h * (8 + 24 / t) + 16 * s * b + att
    f_sp = 2 * s * b * h * (32 / t) + 16 * s * b / t + att
    (m_tp, _), (m_sp, _) = act[tpn], act[spn]
    print(f"t={t}: per block tp 2sbh(8+24/t)+16sb+4asb/t = {f_tp:.0f} B, sp 2sbh(32/t)+16sb/t"
          f"+4asb/t = {f_sp:.0f} B (x L={L}: {L * f_tp:.0f} -> {L * f_sp:.0f}, saves "
          f"{L * (f_tp - f_sp):.0f}); measured pool {m_tp} -> {m_sp} B, saves {m_tp - m_sp} "
          f"(the rest: the embedding's output and backward scratch, sp's gather buffers)")
    if m_sp >= m_tp:
        print(f"FAIL: t={t}: the sequence-parallel pool is not below tensor parallel's")
        ok = False
print("memory_sequence_parallel: " + ("PASS" if ok else "MISMATCH"))
sys.exit(0 if ok else 1)
