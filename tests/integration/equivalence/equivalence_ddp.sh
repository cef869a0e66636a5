#!/bin/bash
# under the sanitizers each ddp path once on 2 ranks, 6 steps (below)
# ctest: sanitized
# The equivalence matrix for data parallel: the same global batch (8 sequences of 64 tokens)
# and seed on 1 rank, 2 and 4 ranks under ddp (also with the embedding's split all-reduce), and
# with gradient accumulation, must give the same per-step loss and grad norm and the same final
# parameters, 20 steps, within compare_runs.py's tolerances (derived from fp32 rounding:
# docs/tolerances.md).
# Under the sanitizers (LOOM_SANITIZED=1: memory safety, the numerics are the normal build's)
# each path of ddp.c once, on 2 ranks, 6 steps (evaluation at 3 and 6): overlapped and blocking
# all-reduce, the split embedding with no_sync accumulation micro-steps, and the 1.4 host's
# own averaging. Left to the normal build: 4 ranks (the same code on another size), 1-rank
# accumulation and dp2 x accum 2 without the split (the split run's bucket path), the split
# without accumulation (the split run's synchronising micro-step), and the canary (a check of
# compare_runs.py: ref's code path).
. "$(dirname "$0")/../lib/lib.sh"
make_data
SAN=0 ST=''
[ "${LOOM_SANITIZED:-0}" = 1 ] && SAN=1 ST='--set train.steps=6 --set train.eval_interval=3'
runs=(ddp2 ddp4 accum4 ddp2_accum2 ddp2_nooverlap ddp2_split ddp4_split ddp2_accum2_split)
[ $SAN = 1 ] && runs=(ddp2 ddp2_nooverlap ddp2_accum2_split)
drun() { # drun NRANKS NAME [--set ...]: run NAME if this build's list has it
  [ "$2" = ref ] || [[ " ${runs[*]} " == *" $2 "* ]] || return 0
  local n=$1 name=$2
  shift 2
  # shellcheck disable=SC2086
  run "$n" "$name" $ST "$@"
}
drun 1 ref --set train.micro_batch_size=8
drun 2 ddp2 --set train.micro_batch_size=4
drun 4 ddp4 --set train.micro_batch_size=2
drun 1 accum4 --set train.micro_batch_size=2 --set train.grad_accum_steps=4
drun 2 ddp2_accum2 --set train.micro_batch_size=2 --set train.grad_accum_steps=2
drun 2 ddp2_nooverlap --set train.micro_batch_size=4 --set 'parallel[0].overlap=false'
# the split all-reduce of the tied embedding (ddp.c: head part early, the batch's token rows
# after the encoder; "auto" leaves it off for this model, whose wte is 23 % of the parameters),
# also with no_sync accumulation micro-steps before the synchronising one
drun 2 ddp2_split --set train.micro_batch_size=4 --set 'parallel[0].split_embedding=true'
drun 4 ddp4_split --set train.micro_batch_size=2 --set 'parallel[0].split_embedding=true'
drun 2 ddp2_accum2_split --set train.micro_batch_size=2 --set train.grad_accum_steps=2 \
  --set 'parallel[0].split_embedding=true'
for r in "${runs[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done
# ABI 1.5 (docs/abi.md): ddp only sums, the host folds 1/dp into the loss gradient. On a host
# whose table ends before grads_predivided (a 1.4 host: LOOM_TEST_HOST_MINOR=4) neither happens
# and ddp averages itself, with the same bits for dp 2 (scaling by 1/2 commutes with rounding)
LOOM_TEST_HOST_MINOR=4 run 2 ddp2_host14 $ST --set train.micro_batch_size=4
echo "== ddp2 on a 1.4 host vs ddp2 (bitwise)"
compare ddp2_host14 ddp2 --bitwise
if [ $SAN = 1 ]; then # the canary below checks compare_runs.py, on ref's code path
  echo "equivalence (sanitized build): every ddp path matches the single-rank reference"
  exit 0
fi
# The tolerances are not so loose that a small real difference passes: a learning rate 1% off
# moves the loss, the grad norm and the parameters 13-70x past them (docs/tolerances.md).
run 1 lr_1pct_off --set train.micro_batch_size=8 --set optimizer.lr=1.01e-3
if /usr/bin/python3 "$TESTLIB/compare_runs.py" "$WORK/lr_1pct_off/metrics.jsonl" \
    "$WORK/lr_1pct_off/ckpt" "$WORK/ref/metrics.jsonl" "$WORK/ref/ckpt" >"$WORK/canary.log"; then
  cat "$WORK/canary.log" >&2
  die "compare_runs.py accepted a run whose learning rate is 1% off"
fi
grep -q "FAIL final parameters" "$WORK/canary.log" && grep -q "FAIL step .* loss" "$WORK/canary.log" &&
  grep -q "FAIL step .* grad_norm" "$WORK/canary.log" ||
  { cat "$WORK/canary.log" >&2; die "a 1% learning-rate change was not caught on every quantity"; }
echo "canary: a 1% learning-rate change is reported on the loss, the grad norm and the parameters"
echo "equivalence: all runs match the single-rank reference"
