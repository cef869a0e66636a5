#!/bin/bash
# ctest: labels=integration,matrix
# Memory and traffic of tensor_parallel's "sequence_parallel" (Korthikanti et al. 2022,
# §4.2.2): tp 2 and tp 2 x sp, tp 4 and tp 4 x sp (n_embd 64, n_head 4, B 8, T 64, L 2, fp32,
# flash attention where the device has it): `loom estimate --json` against what the trainer
# measures (mem_peak_bytes per category, the largest rank's, and comm_bytes of a steady step),
# equal to the byte (also tp 2 x sp under bf16, and with vocab_parallel under full
# checkpointing); then the activations beside Korthikanti's per-block formula adapted to
# loom's saved tensors (check_memory_sequence_parallel.py): sp's activation pool below tp's.
. "$(dirname "$0")/../lib/lib.sh"
make_data
RUNS=()
case_() { # case_ NAME RANKS PARALLEL_JSON [--set ...]
  local name=$1 n=$2 par=$3
  shift 3
  local args=(--set train.steps=6 --set train.micro_batch_size=8 --set train.eval_interval=0
              --set model.n_head=4 --set model.n_embd=64 --set checkpoint=null
              --set "parallel=$par" --set logging.interval=1 "$@")
  run "$n" "$name" "${args[@]}"
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$n" --json "${args[@]}" \
    >"$WORK/$name/estimate.json" || die "loom estimate failed for $name"
  RUNS+=("$name")
}
case_ tp2 2 '[{"plugin":"tensor_parallel","size":2}]'
case_ tp2_sp 2 '[{"plugin":"tensor_parallel","size":2,"sequence_parallel":true}]'
case_ tp4 4 '[{"plugin":"tensor_parallel","size":4}]'
case_ tp4_sp 4 '[{"plugin":"tensor_parallel","size":4,"sequence_parallel":true}]'
# bf16 (16-bit saved copies; no 16-bit region buffer: the plugin's region is not called) and
# full checkpointing with vocab_parallel: equal to the byte as well
case_ tp2_sp_bf16 2 '[{"plugin":"tensor_parallel","size":2,"sequence_parallel":true}]' \
  --set 'precision={"plugin":"bf16"}'
case_ tp2_sp_vp_full 2 \
  '[{"plugin":"tensor_parallel","size":2,"sequence_parallel":true,"vocab_parallel":true}]' \
  --set 'activation_checkpointing="full"'
/usr/bin/python3 "$HERE/check_memory_sequence_parallel.py" "$WORK" 2 64 8 64 4 "${RUNS[@]}"
