#!/bin/bash
# ctest: labels=integration,matrix
# The context-parallel matrix (context_parallel.so, ring attention): cp 4 (4 ranks, 8 chunks of 8
# tokens), cp 2 x tp 2 (4 heads, 2 per tp rank: the ring carries each rank's C/tp channels),
# cp 2 x dp 2 with ddp, with zero1 and with zero3 (the gradient sync over the dp x cp group),
# and cp 2 under full activation checkpointing (the ring runs again in the recomputed forward),
# against the single-rank fp32 run within compare_runs.py's tolerances (docs/tolerances.md).
# Then checkpoints stay portable (every cp rank holds the whole model, as a dp replica): a cp 2
# run's step-10 checkpoint resumes on 1 rank, and a 1-rank checkpoint resumes under cp 2 x dp 2
# (zero1), each continuing like the straight run (steps 11-20).
. "$(dirname "$0")/../lib/lib.sh"
make_data
CP2='{"plugin":"context_parallel","size":2}'
CK() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":10}"; }
run 1 ref --set 'parallel=[]' --set "$(CK ref)"
run 1 ref_h4 --set model.n_head=4 --set 'parallel=[]'
names=()
crun() { # crun NRANKS NAME MICRO 'PLUGINS JSON ARRAY' [--set ...]
  local n=$1 name=$2 micro=$3 par=$4
  shift 4
  run "$n" "$name" --set train.micro_batch_size="$micro" --set "parallel=$par" \
    --set "$(CK "$name")" "$@"
  names+=("$name")
}
crun 4 cp4 4 '[{"plugin":"context_parallel","size":4},{"plugin":"ddp"}]'
crun 4 cp2_dp2 2 "[$CP2,{\"plugin\":\"ddp\"}]"
crun 4 zero1_cp2_dp2 2 "[$CP2,{\"plugin\":\"zero1\"}]"
crun 4 zero3_cp2_dp2 2 "[$CP2,{\"plugin\":\"zero3\"}]"
crun 2 cp2_full 4 "[$CP2,{\"plugin\":\"ddp\"}]" --set 'activation_checkpointing={"policy":"full"}'
for r in "${names[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done
run 4 cp2_tp2 --set model.n_head=4 \
  --set "parallel=[$CP2,{\"plugin\":\"tensor_parallel\",\"size\":2},{\"plugin\":\"ddp\"}]"
echo "== cp2_tp2 vs ref_h4"
compare cp2_tp2 ref_h4
resume_from cp2_full cp2_to_1 1 --set train.micro_batch_size=4 --set 'parallel=[]'
echo "== cp 2 checkpoint resumed on 1 rank vs the 1-rank run, steps 11-20"
compare cp2_to_1 ref --steps 11:20
resume_from ref 1_to_cp2_dp2 4 --set train.micro_batch_size=2 \
  --set "parallel=[$CP2,{\"plugin\":\"zero1\"}]"
echo "== 1-rank checkpoint resumed under cp 2 x dp 2 (zero1) vs the 1-rank run, steps 11-20"
compare 1_to_cp2_dp2 ref --steps 11:20
echo "equivalence_cp_matrix: $((${#names[@]} + 1)) runs and 2 resumes match"
