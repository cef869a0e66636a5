#!/bin/bash
# ctest: labels=integration,asan-full
# ctest: name=integration.equivalence_offload_matrix args=--matrix labels=integration,matrix
# Equivalence for cpu_offload (the optimizer step on the host): the same global batch (8
# sequences of 64 tokens), seed and weight decay as the single-rank run with the device
# optimizer must give the same per-step loss and grad norm and the same final parameters:
#   1 rank  ddp + cpu_offload                      bitwise (the host loop is the device formula)
#   2 ranks ddp + cpu_offload (and with accumulation)          compare_runs.py's tolerances
#   2 ranks zero1/zero2/zero3 + cpu_offload, for each .so built  the same (else skipped)
# Checkpoints interoperate (same optim.m/optim.v items): a run saved with the device optimizer
# resumes under cpu_offload and the other way round, bitwise against the straight run (also
# under zero1/zero3 partitions, when built).
# Options: the refused settings fail at create with a message naming the option.
# Without --matrix (the CI pass) 8 of the 17 training runs: the reference, 1 rank bitwise, ddp2
# + offload (small buckets; the host memory counted), and each kind of checkpoint crossing once:
# device -> offload on 1 rank (the replicated m, v loaded), offload -> device on 2 ranks (rank 0
# alone writes the replicated m, v) and device -> offload across the zero3 partition (the
# chunks' offsets). equivalence_zero's CI subset already trains ddp and each ZeRO stage with
# cpu_offload, with accumulation (fp32, uneven partitions), so `--matrix`
# (integration.equivalence_offload_matrix, tools/test.sh --full) adds ddp2 + offload with
# accumulation, zero1/2/3 + offload on 2 ranks, offload -> device on 1 rank, device -> offload
# on 2 ranks and across the zero1 partition. The refusals run in both, side by side.
# The 1-rank reference and offload runs save at step 10 and are the 1-rank crossings' straight
# runs (the configurations the crossings need: the same options, so one run each, not two).
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
make_data
WD=(--set optimizer.weight_decay=0.1) # exercise per-tensor weight decay in the host loop
OFF='{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}'  # DeepSpeed's spelling
PLUGINS=${LOOM_BUILD}/lib/loom/plugins

CK10() { echo "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$1/ckpt\",\"every\":10}"; }
run 1 ref --set train.micro_batch_size=8 "${WD[@]}" --set "$(CK10 ref)"
run 1 off1 --set train.micro_batch_size=8 "${WD[@]}" --set "parallel=[{\"plugin\":\"ddp\"},$OFF]" \
  --set "$(CK10 off1)"
run 2 ddp2_off --set train.micro_batch_size=4 "${WD[@]}" \
  --set "parallel=[{\"plugin\":\"ddp\",\"bucket_size_mb\":0.05},$OFF]"
offs=(ddp2_off)
if [ $MATRIX = 1 ]; then
  run 2 ddp2_off_accum2 --set train.micro_batch_size=2 --set train.grad_accum_steps=2 \
    "${WD[@]}" --set "parallel=[{\"plugin\":\"ddp\",\"bucket_size_mb\":0.05},$OFF]"
  offs+=(ddp2_off_accum2)
fi
grep -q '"host":[1-9]' "$WORK/ddp2_off/metrics.jsonl" || die "ddp2_off: no host memory counted"
grep -q '"optim":0,' "$WORK/ddp2_off/metrics.jsonl" || die "ddp2_off: optimizer state on the device"
echo "== off1 vs ref (bitwise)"
compare off1 ref --bitwise
for r in "${offs[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done

# ZeRO stages + offload, when their plugins are built (written separately). A plugin that does
# not own gradient sync itself (its roles say so: loom estimate) gets ddp in front of it.
# --matrix only: equivalence_zero's CI subset runs each stage + offload (3 ranks, accumulation).
zstages=()
[ $MATRIX = 1 ] && zstages=(zero1 zero2 zero3)
for z in "${zstages[@]}"; do
  if [ ! -f "$PLUGINS/$z.so" ]; then
    echo "== SKIP $z + cpu_offload: $PLUGINS/$z.so is not built"
    continue
  fi
  par="[{\"plugin\":\"$z\"},$OFF]"
  if "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world 2 --json --set "parallel=$par" \
      2>/dev/null | grep -q '"grad_sync": false'; then
    par="[{\"plugin\":\"ddp\"},{\"plugin\":\"$z\"},$OFF]"
  fi
  run 2 "${z}_off" --set train.micro_batch_size=4 "${WD[@]}" --set "parallel=$par"
  echo "== ${z}_off vs ref ($par)"
  compare "${z}_off" ref
done

# checkpoint interoperability, 1 rank (bitwise) and 2 ranks (bitwise against the straight run
# of the same configuration): save at 10 with one optimizer, resume with the other
resume_from() { # resume_from NRANKS NAME FROM_RUN [--set ...]: steps 11-20 from FROM_RUN's step 10
  local n=$1 name=$2 from=$3
  shift 3
  rm -rf "$WORK/$name"
  mkdir -p "$WORK/$name/ckpt"
  cp -r "$WORK/$from/ckpt/step-00000010" "$WORK/$name/ckpt/"
  printf 'step-00000010' >"$WORK/$name/ckpt/latest"
  timeout 300 "${MPIRUN[@]}" -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set "logging.metrics=$WORK/$name/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":10}" \
    ${LOOM_TEST_THREADS:+--set device.threads=$LOOM_TEST_THREADS} \
    "$@" >"$WORK/$name/out.log" 2>&1 || { cat "$WORK/$name/out.log" >&2; die "run $name failed"; }
  grep -q "resumed at step 10" "$WORK/$name/out.log" || die "$name did not resume at step 10"
}
# The straight runs: on 1 rank ref and off1 (the same options, saved at step 10), on 2 ranks
# their own; CI crosses device -> offload on 1 rank and offload -> device on 2 (see the top).
for n in 1 2; do
  b=$((8 / n))
  dev=(--set train.micro_batch_size=$b "${WD[@]}")
  off=("${dev[@]}" --set "parallel=[{\"plugin\":\"ddp\"},$OFF]")
  sdev=ref soff=off1
  if [ "$n" = 2 ]; then
    sdev=straight_dev2 soff=straight_off2
    [ $MATRIX = 1 ] && run 2 $sdev "${dev[@]}" --set "$(CK10 $sdev)"
    run 2 $soff "${off[@]}" --set "$(CK10 $soff)"
  fi
  if [ $MATRIX = 1 ] || [ "$n" = 1 ]; then
    resume_from "$n" dev_to_off$n $sdev "${off[@]}"
    echo "== $n rank(s): device checkpoint resumed with cpu_offload vs straight, steps 11-20"
    compare dev_to_off$n $sdev --bitwise --steps 11:20
  fi
  if [ $MATRIX = 1 ] || [ "$n" = 2 ]; then
    resume_from "$n" off_to_dev$n $soff "${dev[@]}"
    echo "== $n rank(s): cpu_offload checkpoint resumed on the device vs straight, steps 11-20"
    compare off_to_dev$n $soff --bitwise --steps 11:20
  fi
done

# the same across a ZeRO partition: the chunks carry their offsets (2 ranks, sharded m, v);
# zero1's in --matrix only
zs=(zero3)
[ $MATRIX = 1 ] && zs=(zero1 zero3)
for z in "${zs[@]}"; do
  [ -f "$PLUGINS/$z.so" ] || { echo "== SKIP $z checkpoint interop: $z.so is not built"; continue; }
  dev=(--set train.micro_batch_size=4 "${WD[@]}" --set "parallel=[{\"plugin\":\"$z\"}]")
  off=(--set train.micro_batch_size=4 "${WD[@]}" --set "parallel=[{\"plugin\":\"$z\"},$OFF]")
  run 2 straight_$z "${dev[@]}" --set "$(CK10 straight_$z)"
  resume_from 2 ${z}_to_off straight_$z "${off[@]}"
  echo "== 2 ranks: $z checkpoint resumed with $z + cpu_offload vs straight, steps 11-20"
  compare ${z}_to_off straight_$z --bitwise --steps 11:20
done

# refused options: a clear message naming the option, at create, before any step
refused() { # refused NAME EXPECTED_TEXT OPTIONS_JSON
  local name=$1 want=$2
  mkdir -p "$WORK/$name"
  if "$LOOM" train "$LOOM_SRC/configs/tiny.json" --set "data.train=$WORK/data/train_*.bin" \
      --set "data.val=$WORK/data/val_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
      --set train.steps=2 \
      --set "parallel=[{\"plugin\":\"cpu_offload\"$3}]" >"$WORK/$name/out.log" 2>&1; then
    die "$name: the run should have been refused"
  fi
  grep -q -- "$want" "$WORK/$name/out.log" ||
    { cat "$WORK/$name/out.log" >&2; die "$name: no '$want'"; }
  echo "refused as expected: $(grep -m1 error "$WORK/$name/out.log")"
}
# Each is ~0.5 s of start-up (MPI's singleton init) and almost no CPU: run side by side, the six
# cost about one. A refusal that fails exits its subshell non-zero (die), counted below.
pids=()
refused opt_none 'remove {"plugin": "cpu_offload"}' ',"offload_optimizer":"none"' &
pids+=($!)
refused param_cpu 'offload_param: "cpu"' ',"offload_param":"cpu"' &
pids+=($!)
refused bad_device 'expected "cpu" or "none", got "nvme"' ',"offload_optimizer":"nvme"' &
pids+=($!)
refused sub_key 'unknown key (expected one of: device, pin_memory)' \
  ',"offload_optimizer":{"devic":"cpu"}' &
pids+=($!)
refused string_form_bad 'expected {"device": "cpu"}' ',"offload_optimizer":3' &
pids+=($!)
refused unknown_key 'offload_optimiser' ',"offload_optimiser":"cpu"' &
pids+=($!)
BG_JOBS+=("${pids[@]}") # killed with their trees if this script is interrupted while they run
bad=0
for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
BG_JOBS=() # reaped: their ids may be reused, so the exit trap must not kill them
[ $bad = 0 ] || die "$bad of the ${#pids[@]} refused options were not refused as expected"
echo "equivalence_offload: all runs match$(
  [ $MATRIX = 1 ] || echo " (covering subset; --matrix: all)")"
