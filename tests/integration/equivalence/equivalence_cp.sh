#!/bin/bash
# Context parallel (context_parallel.so, ring attention over the cp axis): the tiny model on 1
# rank without any parallel plugin and under cp 2 (each rank holds chunks r and 3-r of the 4
# chunks of every sequence) with ddp, cp 2 with gradient accumulation 2, and cp 2 at T 1024
# against its own 1-rank run, must give the same
# per-step loss and grad norm and the same final parameters within compare_runs.py's
# tolerances (docs/tolerances.md) over 20 steps. Then the traffic: per step the ring's
# 3 x L x (cp-1) K/V blocks of B*T/cp*2C floats (forward K/V, backward K/V and dK/dV) plus
# ddp's 2(n-1)/n x 4Psi over the dp x cp gradient group; and the refusals, before training,
# naming the values. The cp x tp, cp x dp, ZeRO and resume compositions: the _matrix test.
. "$(dirname "$0")/../lib/lib.sh"
make_data
CP2='{"plugin":"context_parallel","size":2}'
run 1 ref --set 'parallel=[]'
run 2 cp2 --set "parallel=[$CP2,{\"plugin\":\"ddp\"}]"
run 2 cp2_accum2 --set train.micro_batch_size=2 --set train.grad_accum_steps=2 \
  --set "parallel=[$CP2,{\"plugin\":\"ddp\"}]"
for r in cp2 cp2_accum2; do
  echo "== $r vs ref"
  compare "$r" ref
done
# a longer sequence: T 1024, chunks of 256 tokens (the CPU block kernels' query-row blocks of
# 128 against the diagonal's growing key range), one sequence a step
LONG=(--set model.context_length=1024 --set train.seq_len=1024 --set train.micro_batch_size=1
      --set train.steps=6)
run 1 ref_long "${LONG[@]}" --set 'parallel=[]'
run 2 cp2_long "${LONG[@]}" --set "parallel=[$CP2,{\"plugin\":\"ddp\"}]"
echo "== cp2_long vs ref_long"
compare cp2_long ref_long

# traffic (tiny.json: L 2, C 32, T 64, B 4; Psi from the run's own parameter bytes)
/usr/bin/python3 - "$WORK" <<'PY' || die "context-parallel traffic differs from the ring's count"
import json, sys
work = sys.argv[1]
L, C, T, cp = 2, 32, 64, 2
for name, B, accum in (("cp2", 4, 1), ("cp2_accum2", 2, 2)):
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl") if '"loss"' in l]
    psi4 = rows[0]["mem_peak_bytes"]["params"]  # 4 Psi: fp32 parameters
    ring = 3 * L * (cp - 1) * B * (T // cp) * 2 * C * 4 * accum
    want = ring + 2 * (cp - 1) / cp * psi4
    got = sorted(r["comm_bytes"] for r in rows)[len(rows) // 2]
    print(f"traffic {name}: {got} bytes/step, ring 3L(cp-1) x B*T/cp*2C*4 x accum = {ring} + "
          f"ddp 2(n-1)/n x 4Psi = {want - ring:.0f} (ratio {got / want:.6f})")
    if abs(got - want) > 1e-9 * want:
        sys.exit(1)
PY

# Refusals, before training, with the numbers.
CPD="[$CP2,{\"plugin\":\"ddp\"}]"
expect_refused 2 \
  'train.seq_len (62) must be divisible by 2 x the context-parallel size (2 x 2 = 4)' \
  --set train.seq_len=62 --set "parallel=$CPD"
expect_refused 3 \
  'context-parallel size 2 does not divide the 3 ranks left after tensor-parallel size 1 x' \
  --set "parallel=$CPD"
expect_refused 1 \
  'context parallel (size 2) does not compose with model.attention "materialized"' \
  --set model.attention=materialized --set "parallel=$CPD"
expect_refused 1 \
  'context parallel (size 2) does not compose with activation_checkpointing "selective"' \
  --set 'activation_checkpointing={"policy":"selective"}' --set "parallel=$CPD"
expect_refused 1 'context parallel (size 2) does not compose with sample.tokens > 0' \
  --set sample.tokens=10 --set "parallel=$CPD"
expect_refused 1 \
  'context parallel (size 2) does not compose with pipeline parallel (size > 1)' \
  --set "parallel=[$CP2,{\"plugin\":\"pipeline\",\"size\":2}]"
expect_refused 1 \
  "context parallel (size 2) does not compose with tensor_parallel's vocab_parallel" \
  --set model.n_head=4 \
  --set "parallel=[$CP2,{\"plugin\":\"tensor_parallel\",\"size\":2,\"vocab_parallel\":true}]"
expect_refused 2 'context parallel (cp 2): it runs in fp32 only' \
  --set 'precision={"plugin":"bf16"}' --set "parallel=$CPD"
expect_refused 2 'hybrid sharding does not compose with context parallel (cp 2)' \
  --set "parallel=[$CP2,{\"plugin\":\"zero3\",\"shard_size\":1}]"
expect_refused 1 'works on the context-parallel axis and needs its size' \
  --set 'parallel=[{"plugin":"context_parallel"}]'
echo "equivalence_cp: cp 2 and cp 2 x accum 2 match the single-rank reference; traffic and refusals"
