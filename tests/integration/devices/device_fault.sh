#!/bin/bash
# A device fault is reported as the device's own error (device ABI 1.10, device_v1.error), not as
# divergence or an fp16 overflow (issue 21, item 7). tagged_device.so's "fault_at_forward": N
# fails its context at its Nth forward as cuda.so's does after a CUDA fault: from then on
# to_host returns 0xff bytes (NaN), sum_squares NaN, and its error slot the fault's message. The
# job must fail (exit non-zero) with "device 'tagged_device' failed: <message>", never say
# "diverged", never skip a step past it (fp16) and never finish; on 2 ranks the faulting rank
# takes the job down (comm abort) and no rank is left waiting in a collective (bounded time).
# ctest: labels=integration,device timeout=300
. "$(dirname "$0")/../lib/lib.sh"
make_data
TAGGED=$LOOM_BUILD/tests/fixtures/tagged_device.so
[ -f "$TAGGED" ] || die "missing $TAGGED"
NEEDLE="device 'tagged_device' failed: injected fault in encoder_forward call"

# fault NAME NRANKS DEVICE_OPTIONS [--set ...]: the run must fail within its time limit with the
# device's message, and without any word of divergence, skipping or finishing.
fault() {
  local name=$1 n=$2 opts=$3
  shift 3
  local log=$WORK/$name.log start=$SECONDS rc=0
  "${REFUSED_RUN[@]}" timeout 120 mpirun -np "$n" --bind-to none "$LOOM" train \
    "$LOOM_SRC/configs/tiny.json" --set "data.train=$WORK/data/train_*.bin" \
    --set "data.val=$WORK/data/val_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
    --set checkpoint=null --set train.steps=8 --set logging.interval=1 \
    --set "device={\"type\":\"$TAGGED\",$opts}" "$@" >"$log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || { cat "$log" >&2; die "$name: the run succeeded past a device fault"; }
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || { cat "$log" >&2; die "$name: a rank hung (timeout)"; }
  grep -qF "$NEEDLE" "$log" || { cat "$log" >&2; die "$name: no \"$NEEDLE\" in the output"; }
  if grep -qiE 'diverged|non-finite|skipp|loom: finished' "$log"; then
    cat "$log" >&2
    die "$name: the fault was read as divergence / overflow, or the run went on"
  fi
  echo "$name ($n ranks, rc $rc, $((SECONDS - start)) s): $(grep -m1 -F "$NEEDLE" "$log")"
}

# 1 rank: fp32 and bf16 (a non-finite gradient would be "training diverged"), fp16 (a dynamic
# loss scaler would skip the step and halve the scale, forever)
fault fp32 1 '"fault_at_forward":3'
fault bf16 1 '"fault_at_forward":3' --set 'precision={"plugin":"bf16"}'
fault fp16 1 '"fault_at_forward":3' --set 'precision={"plugin":"fp16"}'
# a fault during evaluation (forward 3 is the first validation batch after step 2)
fault eval 1 '"fault_at_forward":3' --set train.eval_interval=2
# 2 ranks, ddp: one rank's device faults, the other's is healthy (its gradients arrive as NaN
# through the all-reduce): the faulting rank's message ends the job, nobody hangs
fault ddp_rank1 2 '"fault_at_forward":4,"fault_local_rank":1' \
  --set 'parallel=[{"plugin":"ddp"}]' --set train.micro_batch_size=2
fault ddp_fp16_rank0 2 '"fault_at_forward":2,"fault_local_rank":0' \
  --set 'parallel=[{"plugin":"ddp"}]' --set train.micro_batch_size=2 \
  --set 'precision={"plugin":"fp16"}'
grep -qF "loom[1]: error: $NEEDLE" "$WORK/ddp_rank1.log" ||
  die "ddp_rank1: the message is not rank 1's"
# and an armed fault on another rank's context changes nothing on this one: bitwise a clean run
run 1 clean --set train.steps=4 --set "device.type=\"$TAGGED\""
run 1 armed_elsewhere --set train.steps=4 \
  --set "device={\"type\":\"$TAGGED\",\"fault_at_forward\":1,\"fault_local_rank\":5}"
compare clean armed_elsewhere --bitwise
echo "device faults: reported as the device's error on 1 and 2 ranks"
