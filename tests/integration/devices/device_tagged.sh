#!/bin/bash
# under the sanitizers each strategy once on the tagged device only, 4 steps (below)
# ctest: sanitized
# The core never dereferences device memory (issue #9): configs/tiny.json trained on
# tagged_device.so — the CPU device's kernels behind pointers that fault on any host load or
# store, without LOOM_DEVICE_CAP_HOST_ADDRESSABLE (tests/fixtures/tagged_device.c) — against the
# built-in CPU device, for the strategies that move device memory in different ways: 1 rank
# with sampling (the logits read-back), ddp (bucketed async all-reduce staged by mpi.so), zero3
# (reduce-scatter / all-gather_v of shards), tensor parallel, the pipeline (boundary send/recv,
# the tied-embedding sum, sampling broadcast over stages), bf16 (16-bit convert and the bf16
# all-reduce), zero1 + cpu_offload (to_host / from_host of the partition), and checkpoint +
# resume on the tagged device. The arithmetic is the same code on the same values, so every
# step's loss and grad norm and the final parameters must be BITWISE equal: any difference, or a
# crash, means a host-side touch of device memory or a staging bug.
# Under the sanitizers (LOOM_SANITIZED=1: memory safety; the bitwise equality is the same code
# on the same values in either build, so the normal build's) each strategy runs once, on the
# tagged device only, 4 steps (evaluation at 2 and 4): a host touch of its memory still
# faults, and ASan watches the staging around it. The fp32 ddp case is the checkpointed ddp
# run's (the same config), whose resume at step 2 must equal it bitwise; the greps and the
# comm self-test are kept. Left to the normal build: the CPU twin of each run and the
# comparisons with it (the CPU device's paths run in every other test).
. "$(dirname "$0")/../lib/lib.sh"
make_data
TAGGED=$LOOM_BUILD/tests/fixtures/tagged_device.so
export TAGGED_DEVICE_LOG=1 # the device prints the compute dtype the host hints
[ -f "$TAGGED" ] || die "missing $TAGGED"
S='--set train.steps=8 --set train.eval_interval=4'
K=4 # the checkpoint the resume starts from
DEVS='cpu tagged'
SAN=0
if [ "${LOOM_SANITIZED:-0}" = 1 ]; then
  SAN=1 S='--set train.steps=4 --set train.eval_interval=2' K=2 DEVS=tagged
fi
PP2='{"plugin":"pipeline","size":2,"schedule":"1f1b"}'
OFF='{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}'
cases=(
  "single|1|8|1|[]|--set sample.tokens=4"
  "ddp2|2|4|1|[{\"plugin\":\"ddp\",\"bucket_size_mb\":0.05}]|"
  "zero3|2|4|1|[{\"plugin\":\"zero3\"}]|"
  "tp2|2|8|1|[{\"plugin\":\"tensor_parallel\",\"size\":2}]|"
  "pp2|2|4|2|[$PP2]|--set sample.tokens=4"
  "bf16_ddp2|2|4|1|[{\"plugin\":\"ddp\"}]|--set precision={\"plugin\":\"bf16\"}"
  "zero1_off|2|4|1|[{\"plugin\":\"zero1\"},$OFF]|"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name n mbs accum plugins extra <<<"$c"
  [ $SAN = 1 ] && [ "$name" = ddp2 ] && continue # straight_tagged below is this run
  for dev in $DEVS; do
    type=cpu
    [ "$dev" = tagged ] && type=$TAGGED
    # shellcheck disable=SC2086
    run "$n" "${name}_$dev" $S --set train.micro_batch_size="$mbs" \
      --set train.grad_accum_steps="$accum" --set "parallel=$plugins" \
      --set "device.type=\"$type\"" $extra
  done
  if [ $SAN = 0 ]; then
    echo "== $name ($n ranks): tagged device vs cpu"
    compare "${name}_tagged" "${name}_cpu" --bitwise
  fi
  if [ -n "$extra" ] && grep -q sample.tokens <<<"$extra"; then
    # the sampled text is printed by rank 0 after "loom: sample (...)": the same bytes
    sample() {
      # other ranks' lines ("loom[1] info: ...", the tagged device's unbuffered stderr lines
      # "tagged_device: ...") may land in between, even inside one of rank 0's buffered stdout
      # lines: cut each such line out wherever it starts, then take the sample's block
      perl -0pe 's/(?:loom\[\d+\]|tagged_device:)[^\n]*\n//g' "$WORK/$1/out.log" |
        sed -n '/^loom: sample (/,/^loom: finished/{/^loom: finished/!p}' || true
    }
    if [ $SAN = 1 ]; then
      [ -n "$(sample "${name}_tagged")" ] || die "$name: no sample in the log"
    else
      [ -n "$(sample "${name}_cpu")" ] || die "$name: no sample in the log"
      cmp -s <(sample "${name}_cpu") <(sample "${name}_tagged") ||
        die "$name: the sampled text differs between the devices"
    fi
  fi
done
# the host told the device the precision plugin's dtype (set_compute_dtype, ABI 1.4)
grep -q 'tagged_device: set_compute_dtype(bf16)' "$WORK/bf16_ddp2_tagged/out.log" ||
  die "bf16 run: the device was not told the compute dtype"
FP32=ddp2
[ $SAN = 1 ] && FP32=zero3 # any fp32 run tells the device so
grep -q 'tagged_device: set_compute_dtype(fp32)' "$WORK/${FP32}_tagged/out.log" ||
  die "fp32 run: the device was not told the compute dtype"
# the model took the fused classifier (ABI 1.4 crossentropy_fused) on the tagged device, in
# training (dlogits in place over the logits) and in evaluation (the loss only): the bitwise
# comparisons above then prove that path free of host dereferences
for mode in 'dlogits' 'loss only'; do
  grep -q "tagged_device: crossentropy_fused($mode)" "$WORK/single_tagged/out.log" ||
    die "the tagged device's crossentropy_fused ($mode) was never called"
done
# checkpoint on the tagged device at step K (4; sanitized: 2), a new process resumes there on
# the tagged device: the continuation equals the straight CPU run bitwise (sanitized: the
# straight tagged run)
CK="{\"plugin\":\"checkpoint\",\"dir\":\"$WORK/straight_tagged/ckpt\",\"every\":$K}"
run 2 straight_tagged $S --set "device.type=\"$TAGGED\"" --set "checkpoint=$CK"
mkdir -p "$WORK/resumed_tagged/ckpt"
cp -r "$WORK/straight_tagged/ckpt/$(printf 'step-%08d' $K)" "$WORK/resumed_tagged/ckpt/"
printf 'step-%08d' $K >"$WORK/resumed_tagged/ckpt/latest"
timeout 300 mpirun -np 2 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" $S --set "device.type=\"$TAGGED\"" \
  --set "logging.metrics=$WORK/resumed_tagged/metrics.jsonl" --set logging.interval=1 \
  --set "checkpoint=${CK/straight_tagged/resumed_tagged}" \
  >"$WORK/resumed_tagged/out.log" 2>&1 ||
  { cat "$WORK/resumed_tagged/out.log"; die "resume failed"; }
grep -q "resumed at step $K" "$WORK/resumed_tagged/out.log" || die "run did not resume at step $K"
if [ $SAN = 1 ]; then
  echo "== resumed on the tagged device vs straight on the tagged device, steps 3-4"
  compare resumed_tagged straight_tagged --bitwise --steps 3:4
else
  run 2 straight_cpu $S \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/straight_cpu/ckpt\",\"every\":4}"
  echo "== resumed on the tagged device vs straight on cpu, steps 5-8"
  compare resumed_tagged straight_cpu --bitwise --steps 5:8
fi
# every collective of mpi.so on the tagged device's memory (staged), 2 ranks: the conformance
# probe's self-test (world and data-parallel communicators, blocking and asynchronous)
PROBE=$LOOM_BUILD/lib/loom/conformance/conformance_probe.so
run 2 selftest --set train.steps=2 --set "device.type=\"$TAGGED\"" \
  --set "parallel=[{\"plugin\":\"ddp\"},{\"plugin\":\"$PROBE\",\"comm_selftest\":true}]"
grep -q "comm self-test: [0-9]* checks passed on the world" "$WORK/selftest/out.log" ||
  die "the comm self-test on the tagged device did not pass"
grep "comm self-test" "$WORK/selftest/out.log" | head -2
if [ $SAN = 1 ]; then
  echo "device_tagged (sanitized build): every strategy ran on the non-host-addressable device"
else
  echo "device_tagged: every run on the non-host-addressable device equals the CPU run bitwise"
fi
