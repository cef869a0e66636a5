#!/bin/bash
# ctest: labels=integration,matrix
# The vocabulary-parallel matrix (tensor_parallel "vocab_parallel", Megatron-LM §3): tp 2 x
# vocab_parallel composed with data parallel, dp 2 x tp 2 with ddp, with zero1 and with zero3
# (4 ranks), and tp 2 x vocab_parallel with gradient accumulation 2, against the single-rank fp32
# run within compare_runs.py's tolerances (docs/tolerances.md), and tp 2 x vocab_parallel under
# bf16 against the 1-rank bf16 run (equivalence_bf16.sh's 1e-2). Then checkpoints stay portable
# (the global view: each rank saves its Vp/tp rows of wte as split_index r of 2): a
# vocab-parallel run's step-10 checkpoint resumes on tp 1 (1 rank) and a tp 1 checkpoint
# resumes under tp 2 x vocab_parallel, each continuing like the straight run (steps 11-20).
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
VP='{"plugin":"tensor_parallel","size":2,"vocab_parallel":true}'
CK() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":10}"; }
run 1 ref $H --set train.micro_batch_size=8 --set 'parallel=[]' --set "$(CK ref)"
names=()
vrun() { # vrun NRANKS NAME MICRO ACCUM 'PLUGINS JSON ARRAY'
  run "$1" "$2" $H --set train.micro_batch_size="$3" --set train.grad_accum_steps="$4" \
    --set "parallel=$5" --set "$(CK "$2")"
  names+=("$2")
}
vrun 2 vp2 8 1 "[$VP]"
vrun 2 vp2_accum2 4 2 "[$VP]"
vrun 4 ddp2_vp2 4 1 "[$VP,{\"plugin\":\"ddp\"}]"
vrun 4 zero1_vp2 4 1 "[{\"plugin\":\"zero1\"},$VP]"
vrun 4 zero3_vp2 4 1 "[$VP,{\"plugin\":\"zero3\"}]"
for r in "${names[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done
# bf16 (16-bit storage, one micro-batch): against the 1-rank bf16 run within equivalence_bf16.sh's
# 1e-2 (its derivation: the split moves where bf16 rounding happens, not whether)
BF='precision={"plugin":"bf16"}'
run 1 ref_bf16 $H --set "$BF" --set train.micro_batch_size=8 --set 'parallel=[]'
run 2 vp2_bf16 $H --set "$BF" --set train.micro_batch_size=8 --set "parallel=[$VP]"
echo "== vp2_bf16 vs ref_bf16"
compare vp2_bf16 ref_bf16 --rtol 1e-2
# wte saved as 2 row slices (split_dim 0) of its global (Vp, C) shape
/usr/bin/python3 - "$WORK/vp2/ckpt/step-00000010/manifest.json" <<'PY' || die "wte is not saved as tp 2 row slices"
import json, sys
man = json.load(open(sys.argv[1]))
w = [c for sh in man["shards"] for c in sh["chunks"] if c["name"] == "params/wte"]
assert sorted(c["split_index"] for c in w) == [0, 1], w
assert all(c["split_size"] == 2 and c["split_dim"] == 0 for c in w), w
print("wte: 2 row slices in the checkpoint")
PY
resume_from vp2 vp2_to_tp1 1 $H --set train.micro_batch_size=8 --set 'parallel=[]'
echo "== vocab-parallel checkpoint resumed on tp 1 vs the tp 1 run, steps 11-20"
compare vp2_to_tp1 ref --steps 11:20
resume_from ref tp1_to_vp2 2 $H --set train.micro_batch_size=8 --set "parallel=[$VP]"
echo "== tp 1 checkpoint resumed under tp 2 x vocab_parallel vs the tp 1 run, steps 11-20"
compare tp1_to_vp2 ref --steps 11:20
echo "equivalence_vocab_parallel_matrix: ${#names[@]} runs and 2 resumes match"
