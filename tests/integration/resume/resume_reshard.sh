#!/bin/bash
# under the sanitizers two pairs (1 rank -> tp2 x pp2 x dp2 -> zero3 dp3: every code path)
# ctest: sanitized
# the full matrix: every source layout continued on every other of the 9 layouts (40 resumes
# + 9 straight runs); the test above (a covering set) runs its code paths in both builds
# ctest: name=integration.resume_reshard_matrix args=--matrix labels=integration,matrix timeout=1800
# Resume on another mesh and strategy (issue 11): a checkpoint saved under one layout continues
# under another — other world size, tp, pp and stage split, ZeRO stage, offload — like a run
# trained on the target layout from the start. Each layout trains the same global batch (12
# sequences of 64 tokens) and seed for 20 steps, saving at step 10; the step-10 checkpoint of
# a source layout is copied to a new directory and resumed on a target layout for steps 11-20,
# which must equal the target's own straight run within compare_runs.py's equivalence
# tolerances (the first 10 steps ran on another layout: a reshard error or a lost moment is
# orders of magnitude above them): per-step loss and grad norm, the lr of every step exactly
# (the step and schedule carried), the final parameters, and Adam's final m and v (--state: a
# moment lost at the resume is off by beta^10, 0.35 for m, 0.6 for v).
#
# Default: a covering set — every source once, every target once, and the hardest pairs
# (tp2 x pp2 x dp2 -> 1 rank, 1 rank -> tp2 x pp2 x dp2, zero3 dp4 -> tp2 x pp2, pp2 -> zero3
# dp3), and a mixed-precision source (bf16 ddp dp2 -> bf16 ddp dp2, zero3 dp2, tp2: see
# bf16_source). --matrix: every source (ddp dp2, zero3 dp4, tp2, pp2 1f1b, tp2 x pp2 x dp2) to every
# other layout (ctest label "matrix"). In the sanitized build (LOOM_SANITIZED=1) two pairs,
# 1 rank -> tp2 x pp2 x dp2 and tp2 x pp2 x dp2 -> zero3 dp3 (the latter one of --matrix's):
# they save under 1 rank, tp x pp x dp and ZeRO-3 on uneven partitions, and load a global view
# into tp and pp slices with dp replicas and into ZeRO-3's uneven partitions, with the tp/pp
# and dp changes reported — every code path the other layouts take (tp2, pp2, tp2 x pp2 and
# zero3 dp4 are parts of those meshes; the 1-rank load is the whole tensors).
. "$(dirname "$0")/../lib/lib.sh"
make_data
H='--set model.n_head=4' # 4 heads: tp 2 divides them
TP2='{"plugin":"tensor_parallel","size":2}'
PP2='{"plugin":"pipeline","size":2,"schedule":"1f1b"}'
DDP='{"plugin":"ddp"}'
OFF='{"plugin":"cpu_offload","offload_optimizer":{"device":"cpu"}}'
# NAME -> "RANKS MICRO ACCUM PLUGINS": micro x accum x dp = 12 sequences everywhere
declare -A LAYOUT=(
  [one]="1 12 1 []"
  [ddp_dp2]="2 6 1 [$DDP]"
  [zero3_dp3]="3 4 1 [{\"plugin\":\"zero3\"}]"
  [zero3_dp4]="4 3 1 [{\"plugin\":\"zero3\"}]"
  [zero1_offload_dp2]="2 6 1 [{\"plugin\":\"zero1\"},$OFF]"
  [tp2]="2 12 1 [$TP2]"
  [pp2]="2 3 4 [$PP2]"
  [tp2_pp2]="4 3 4 [$TP2,$PP2]"
  [tp2_pp2_dp2]="8 3 2 [$TP2,$PP2,$DDP]"
)
SOURCES="ddp_dp2 zero3_dp4 tp2 pp2 tp2_pp2_dp2"
TARGETS="one ddp_dp2 zero3_dp3 zero3_dp4 zero1_offload_dp2 tp2 pp2 tp2_pp2 tp2_pp2_dp2"

# train LAYOUT NAME [--set ...]: 20 steps of LAYOUT into $WORK/NAME, saving at steps 10 and 20
train() {
  local n b acc plugins
  read -r n b acc plugins <<<"${LAYOUT[$1]}"
  run "$n" "$2" $H --set train.micro_batch_size="$b" --set train.grad_accum_steps="$acc" \
    --set "parallel=$plugins" --set train.eval_interval=0 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$2/ckpt\",\"every\":10}" "${@:3}"
}
# The runs of a group share EXTRA (train options: a precision) and TAG (their names' prefix)
EXTRA=()
TAG=
declare -A DONE=()
straight() { [ -n "${DONE[$TAG$1]:-}" ] || { train "$1" "$TAG$1" "${EXTRA[@]}"; DONE[$TAG$1]=1; }; }

# reshard SRC DST [COMPARE_OPTIONS]: SRC's step-10 checkpoint resumed under DST, compared with
# DST's straight run (default: within the derived tolerances, Adam's state included)
reshard() {
  local src=$1 dst=$2 r="$TAG$1-to-$2"
  shift 2
  local opts=("$@")
  [ ${#opts[@]} -gt 0 ] || opts=(--state)
  straight "$src"
  straight "$dst"
  rm -rf "$WORK/$r" && mkdir -p "$WORK/$r/ckpt"
  cp -r "$WORK/$TAG$src/ckpt/step-00000010" "$WORK/$r/ckpt/"
  printf 'step-00000010' >"$WORK/$r/ckpt/latest"
  local n b acc plugins
  read -r n b acc plugins <<<"${LAYOUT[$dst]}"
  timeout 600 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" $H --set train.micro_batch_size="$b" \
    --set train.grad_accum_steps="$acc" --set "parallel=$plugins" --set train.eval_interval=0 \
    --set "logging.metrics=$WORK/$r/metrics.jsonl" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$r/ckpt\",\"every\":10}" \
    "${EXTRA[@]}" >"$WORK/$r/out.log" 2>&1 || { cat "$WORK/$r/out.log"; die "$r: the resume failed"; }
  grep -q "resumed at step 10" "$WORK/$r/out.log" || die "$r did not resume at step 10"
  case "$src/$dst" in # the change of split is reported
    one/tp2_pp2_dp2) grep -q "model-parallel split: tp 1 -> 2, pp 1 -> 2" "$WORK/$r/out.log" ||
      { cat "$WORK/$r/out.log"; die "$r: the tp/pp change is not reported"; } ;;
  esac
  echo "== $TAG$src (${LAYOUT[$src]%% *} ranks) -> $dst (${LAYOUT[$dst]%% *} ranks): steps 11-20"
  compare "$r" "$TAG$dst" --steps 11:20 "${opts[@]}"
}

# A mixed-precision source (bf16 with 16-bit parameter and gradient storage): the checkpoint
# carries the fp32 master, not the bf16 copy the model reads. Proved three ways: (1) the step-10
# parameters are not bf16 values (a bf16 copy would be); (2) bf16 ddp dp2 resumed on the same
# layout, and on bf16 zero3 dp2 (whose 16-bit reduce-scatter on 2 ranks sums the same bf16
# values: equivalence_bf16.sh), equals the uninterrupted run BITWISE, Adam's m and v included (a
# master rounded to bf16 at the save would move every later step); (3) it continues on bf16 tp2
# within compare_runs.py's bf16 tolerances (2 u16 on the metrics, u16 = 2^-8; measured worst:
# loss 2.2e-5, grad norm 4.0e-4, parameters 2.2e-3, m 1.4e-3, v 1.8e-3).
bf16_source() {
  LAYOUT[zero3_dp2]="2 6 1 [{\"plugin\":\"zero3\"}]"
  EXTRA=(--set 'precision={"plugin":"bf16"}')
  TAG=bf16_
  straight ddp_dp2
  /usr/bin/python3 "$HERE/check_bf16_master.py" "$WORK/bf16_ddp_dp2/ckpt/step-00000010" "$TESTLIB" ||
    die "the bf16 checkpoint does not carry the fp32 master"
  reshard ddp_dp2 ddp_dp2 --bitwise --state
  reshard ddp_dp2 zero3_dp2 --bitwise --state
  reshard ddp_dp2 tp2
  EXTRA=()
  TAG=
}

if [ "${1:-}" = "--matrix" ]; then
  for s in $SOURCES; do
    for t in $TARGETS; do [ "$s" = "$t" ] || reshard "$s" "$t"; done
  done
  echo "resume_reshard --matrix: every source continued on every other layout"
  exit 0
fi
if [ "${LOOM_SANITIZED:-0}" = 1 ]; then # memory safety, not numerics: 5 runs, not 10
  reshard one tp2_pp2_dp2
  reshard tp2_pp2_dp2 zero3_dp3
  echo "resume_reshard (sanitized build): 1 rank -> tp2 x pp2 x dp2 -> zero3 dp3 continue" \
    "within the tolerances"
  exit 0
fi
reshard tp2_pp2_dp2 one
reshard one tp2_pp2_dp2
reshard zero3_dp4 tp2_pp2
reshard pp2 zero3_dp3
reshard ddp_dp2 tp2
bf16_source
reshard tp2 zero3_dp4
reshard tp2_pp2_dp2 pp2
reshard pp2 ddp_dp2
reshard zero3_dp4 zero1_offload_dp2
echo "resume_reshard: every source and every target, and the hardest pairs, continue within" \
  "the equivalence tolerances"
