#!/bin/bash
# ctest: labels=integration,matrix
# The sequence-parallel matrix (tensor_parallel "sequence_parallel", Korthikanti et al. 2022,
# §4.2.2) against the single-rank fp32 run within compare_runs.py's tolerances
# (docs/tolerances.md): tp 2 x sp with vocab_parallel (the embedding's sum reduce-scattered
# along T, d(ln_f) reduce-scattered from the logit slices), tp 4 x sp (T/tp = 16 positions a
# rank), dp 2 x tp 2 x sp with ddp, zero1 and zero3 (4 ranks), tp 2 x sp with gradient
# accumulation 2 and with activation checkpointing (full: the recompute gathers and scatters
# again; selective), each with its traffic = the count (check_sp_traffic.py), sampling under
# sp x vocab_parallel = the single rank's tokens; tp 2 x sp under
# bf16 and fp16 (and bf16 with vocab_parallel) against the 1-rank run of that precision. Then
# checkpoints stay portable (the global view: sp shards activations, not parameters): an sp
# run's step-10 checkpoint resumes on tp 1 and a tp 1 checkpoint resumes under tp 2 x sp, each
# continuing like the straight run (steps 11-20).
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4'
SP='{"plugin":"tensor_parallel","size":2,"sequence_parallel":true}'
SPV='{"plugin":"tensor_parallel","size":2,"sequence_parallel":true,"vocab_parallel":true}'
SP4='{"plugin":"tensor_parallel","size":4,"sequence_parallel":true}'
CK() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":10}"; }
run 1 ref $H --set train.micro_batch_size=8 --set 'parallel=[]' --set "$(CK ref)" \
  --set sample.tokens=24 --set sample.top_k=0
names=()
srun() { # srun NRANKS NAME MICRO ACCUM 'PLUGINS JSON ARRAY' [--set ...]
  local n=$1 name=$2 micro=$3 accum=$4 par=$5
  shift 5
  run "$n" "$name" $H --set train.micro_batch_size="$micro" --set train.grad_accum_steps="$accum" \
    --set "parallel=$par" --set "$(CK "$name")" "$@"
  names+=("$name")
}
# name L C B T tp accum vp recomputed-blocks
traffic() { /usr/bin/python3 "$HERE/check_sp_traffic.py" "$WORK" "$@" || die "$1: traffic"; }
srun 2 sp2 8 1 "[$SP]"; traffic sp2 2 32 8 64 2 1 0 0
srun 2 sp2_vp 8 1 "[$SPV]" --set sample.tokens=24 --set sample.top_k=0
traffic sp2_vp 2 32 8 64 2 1 1 0
srun 4 sp4 8 1 "[$SP4]"; traffic sp4 2 32 8 64 4 1 0 0
srun 2 sp2_accum2 4 2 "[$SP]"; traffic sp2_accum2 2 32 4 64 2 2 0 0
srun 2 sp2_full 8 1 "[$SP]" --set 'activation_checkpointing="full"'
traffic sp2_full 2 32 8 64 2 1 0 2
srun 2 sp2_selective 8 1 "[$SP]" --set 'activation_checkpointing="selective"'
traffic sp2_selective 2 32 8 64 2 1 0 0
srun 4 ddp2_sp2 4 1 "[$SP,{\"plugin\":\"ddp\"}]"
srun 4 zero1_sp2 4 1 "[{\"plugin\":\"zero1\"},$SP]"
srun 4 zero3_sp2 4 1 "[$SP,{\"plugin\":\"zero3\"}]"
srun 4 zero3_sp2_vp 4 1 "[$SPV,{\"plugin\":\"zero3\"}]"
for r in "${names[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done
# sampling under sp x vocab_parallel: windows of every length (the sp path where T % tp = 0,
# the plain one elsewhere), each row gathered from the logit slices: the single rank's tokens
for r in ref sp2_vp; do
  sed -n '/loom: sample/,$p' "$WORK/$r/out.log" | head -3 >"$WORK/$r/s.txt"
done
[ -s "$WORK/ref/s.txt" ] || die "the reference printed no sample"
cmp -s "$WORK/ref/s.txt" "$WORK/sp2_vp/s.txt" ||
  { diff "$WORK/ref/s.txt" "$WORK/sp2_vp/s.txt"; die "sp2_vp sampled other tokens"; }
echo "sample (sp x vocab_parallel): the same tokens as the single rank"
# bf16 (16-bit storage, one micro-batch) and fp16: against the 1-rank run of the same precision
# within equivalence_bf16.sh's 1e-2 (the shards move where the 16-bit rounding happens, as the
# tp regions do, not whether); bf16 with vocab_parallel too
for prec in bf16 fp16; do
  PR="precision={\"plugin\":\"$prec\"}"
  run 1 "ref_$prec" $H --set "$PR" --set train.micro_batch_size=8 --set 'parallel=[]'
  run 2 "sp2_$prec" $H --set "$PR" --set train.micro_batch_size=8 --set "parallel=[$SP]"
  echo "== sp2_$prec vs ref_$prec"
  compare "sp2_$prec" "ref_$prec" --rtol 1e-2
done
run 2 sp2_vp_bf16 $H --set 'precision={"plugin":"bf16"}' --set train.micro_batch_size=8 \
  --set "parallel=[$SPV]"
echo "== sp2_vp_bf16 vs ref_bf16"
compare sp2_vp_bf16 ref_bf16 --rtol 1e-2
resume_from() { # resume_from SRC DST NRANKS MICRO PLUGINS
  mkdir -p "$WORK/$2/ckpt"
  cp -r "$WORK/$1/ckpt/step-00000010" "$WORK/$2/ckpt/"
  printf 'step-00000010' >"$WORK/$2/ckpt/latest"
  timeout 300 "${MPIRUN[@]}" -np "$3" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" $H --set train.micro_batch_size="$4" \
    --set "parallel=$5" --set "logging.metrics=$WORK/$2/metrics.jsonl" --set logging.interval=5 \
    --set "$(CK "$2")" >"$WORK/$2/out.log" 2>&1 || { cat "$WORK/$2/out.log"; die "$2 failed"; }
  grep -q "resumed at step 10" "$WORK/$2/out.log" || die "$2 did not resume at step 10"
}
resume_from sp2 sp2_to_tp1 1 8 '[]'
echo "== sequence-parallel checkpoint resumed on tp 1 vs the tp 1 run, steps 11-20"
compare sp2_to_tp1 ref --steps 11:20
resume_from ref tp1_to_sp2 2 8 "[$SP]"
echo "== tp 1 checkpoint resumed under tp 2 x sequence_parallel vs the tp 1 run, steps 11-20"
compare tp1_to_sp2 ref --steps 11:20
resume_from sp2_vp sp2_vp_to_sp4 4 8 "[$SP4]"
echo "== tp 2 x sp x vocab_parallel checkpoint resumed under tp 4 x sp, steps 11-20"
compare sp2_vp_to_sp4 ref --steps 11:20
echo "equivalence_sequence_parallel_matrix: ${#names[@]} runs and 3 resumes match"
