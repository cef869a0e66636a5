#!/bin/bash
# ctest: labels=integration,asan-full
# ctest: name=integration.export_import_matrix args=--matrix labels=integration,matrix
# loom export and init_from (docs/checkpoints.md): a run's checkpoint exported to a Hugging Face
# GPT-2 safetensors file and an llm.c model file, checked by an independent reader and a torch
# GPT-2 forward (check_export.py verify: loss within 1e-5 of loom's); export -> init_from ->
# export round trips bitwise for both formats; runs started from the file under zero3 dp2, tp2
# and pp2 match the one-rank run step by step (compare_runs.py's equivalence tolerances) and
# export the same parameters (tp2 x pp2 too) from their format-3 checkpoints (the global view),
# and a format-2 one (ckpt_format2.py) exports bitwise what its format-3 original does; a padded
# vocabulary (fortunes_gpt2's V 50257 / Vp 50304) exports its V real rows, round trips bitwise
# through a config of another padding, and trains from the file on the tagged device bitwise
# like the CPU device, its padded rows zero; the refusals (another model's file, a wrong shape)
# name the tensor or dimension and both values; a resumed run ignores init_from, and `loom
# check` says so instead of opening the file.
# Without --matrix (the CI pass) 5 of the 18 runs below and 2 small ones: both formats' export,
# verify and round trips, the padded vocabulary's at GPT-2's sizes; init_from from the
# safetensors file on 1 rank and under one sharded layout, tp2 (its slices; the other layouts'
# fills are check_model_files.c's, in every layout, and zero3's in cross_feature.sh), whose
# step-3 checkpoint also stands for the sharded exports (format 3's global view, and format 2);
# training from an llm.c file on the tagged device and the CPU, padded, on the tiny vocabulary
# (t300_*: 300 padded to 512); the resume and every refusal. The seed's step-1 loss comes from
# src (the same parameters on the same batch as seed1's).
# --matrix (tools/test.sh --full) adds init1_llmc (bitwise init1), seed1 (asserted equal to src
# on step 1), init_from under zero3 dp2, pp2 and tp2 x pp2 (with init1_m2, the one-rank run of
# their micro-batching), the 20-step exports of zero3 dp2, tp2, pp2 and tp2 x pp2 checkpoints
# against the one-rank run's, eq_tp2's as format 2 too, and the tagged device at GPT-2's sizes
# (g2_*): every run and check this script made before the split.
# Vocabulary 300 (not a multiple of 128): llm.c's file pads it to 384 rows.
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
make_data
PY=/usr/bin/python3
CHECK="$TESTLIB/check_export.py"
# find_spec, not an import: importing torch costs ~2 s of CPU (4 s of wall on a loaded 2-core
# machine), paid once in verify below, which exits 77 itself if torch is there but broken
$PY -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null ||
  { echo "SKIP: $PY finds no torch"; exit 77; }
V='--set model.vocab_size=300'
export_to() { # export_to SRC FORMAT OUT
  "$LOOM" export "$1" --format "$2" "$3" >"$WORK/export.log" 2>&1 ||
    { cat "$WORK/export.log" >&2; die "loom export $1 --format $2 failed"; }
}
verify() { # verify ST LLMC [ST LLMC ...]: check_export.py verify, one process for all pairs
  local rc=0
  $PY "$CHECK" verify "$@" --file-loss "$LOOM_BUILD/bin/file_loss" \
    --tokens "$(ls "$WORK"/data/val_*.bin | head -1)" --workdir "$WORK" || rc=$?
  [ $rc != 77 ] || exit 77
  [ $rc = 0 ] || die "verify $* failed"
}

# 1. a source run, exported both ways, and (3c below) a padded vocabulary, configs/
# fortunes_gpt2.json's shape (V 50257, wte padded to Vp 50304 rows) on the tiny model: the
# export holds the V real rows (safetensors [50257, 32]; llm.c's file Vp 50304 with zero rows
# past V), equal bitwise to the first V rows of the checkpoint's params/wte. All four files
# checked independently, by one verify.
run 1 src $V --set 'parallel=[]' --set train.steps=6
export_to "$WORK/src" safetensors "$WORK/src.safetensors"      # a run dir: its ckpt/'s newest
export_to "$WORK/src/ckpt/step-00000006" llmc "$WORK/src.bin"  # a step dir
G='--set model.vocab_size=50257 --set model.padded_vocab_size=50304'
run 1 g2 $G --set 'parallel=[]' --set train.steps=2 --set train.eval_interval=0
export_to "$WORK/g2" safetensors "$WORK/g2.safetensors"
export_to "$WORK/g2" llmc "$WORK/g2.bin"
verify "$WORK/src.safetensors" "$WORK/src.bin" "$WORK/g2.safetensors" "$WORK/g2.bin"
/usr/bin/python3 "$HERE/check_g2_wte.py" "$WORK/g2/ckpt/step-00000002" "$WORK/g2.safetensors" ||
  die "g2 wte"

# 2. round trips: a config with init_from, exported (its initial parameters), equals the file
config() { # config NAME INIT_PATH [FORMAT] [extra model JSON]: $WORK/NAME.json from tiny.json
  /usr/bin/python3 "$HERE/write_config.py" "$LOOM_SRC/configs/tiny.json" "$WORK" "$@"
}
config from_st "$WORK/src.safetensors"
config from_bin "$WORK/src.bin" llmc
export_to "$WORK/from_st.json" safetensors "$WORK/rt.safetensors"
export_to "$WORK/from_bin.json" llmc "$WORK/rt.bin"
export_to "$WORK/from_bin.json" safetensors "$WORK/rt_cross.safetensors"
$PY "$CHECK" same "$WORK/src.safetensors" "$WORK/rt.safetensors" || die "safetensors round trip"
cmp "$WORK/src.bin" "$WORK/rt.bin" || die "llm.c round trip is not bitwise"
echo "llm.c round trip: $WORK/src.bin == $WORK/rt.bin (cmp)"
$PY "$CHECK" same "$WORK/src.safetensors" "$WORK/rt_cross.safetensors" || die "llmc -> safetensors"

# 3a. training from the file under several layouts: each rank fills only what it holds (zero3
# its partition through init_params_range, tp2 its slices, pp2 its stage and the last stage's
# tied wte copy, tp2 x pp2 both). zero3 dp2 and pp2 (2 micro-batches of 2) against the one-rank
# run with the same micro-batching: compare_runs.py's derived tolerances (measured: params
# 1.7e-7 of 3.9e-6). tp2 (and tp2 x pp2) against the one-rank run: loss and grad norm at the
# derived tolerances, the parameters at 1e-4: tp sums the row-parallel products in another
# order, and Adam's first steps from a trained (not freshly initialised) point turn that
# rounding into ~lr * sign(noise) updates of the elements whose gradient is near zero (measured
# 3.8e-5; the same 3-step gap separates two ONE-rank runs that differ only in micro-batching,
# 9.8e-6, so it is not the import). And from the llm.c file on 1 rank, bitwise the run from the
# safetensors file. CI: 1 rank and tp2 from the safetensors file; the llm.c file's parameters
# are the safetensors file's bitwise (rt_cross above), and 3c trains from an llm.c file.
I="init_from={\"path\":\"$WORK/src.safetensors\"}"
S='--set train.steps=3 --set train.eval_interval=0'
run 1 init1 $V $S --set "$I" --set 'parallel=[]'
Z3='--set train.micro_batch_size=2 --set parallel=[{"plugin":"zero3"}]'
TP2='--set parallel=[{"plugin":"tensor_parallel","size":2}]'
MB2x2='--set train.micro_batch_size=2 --set train.grad_accum_steps=2'
PIPE='{"plugin":"pipeline","size":2,"schedule":"1f1b"}'
PP2="$MB2x2 --set parallel=[$PIPE]"
TP2PP2="$MB2x2 --set parallel=[{\"plugin\":\"tensor_parallel\",\"size\":2},$PIPE]"
run 2 init_tp2 $V $S --set "$I" $TP2
grep -q "parameters initialised from $WORK/src.safetensors (safetensors)" "$WORK/init1/out.log" ||
  die "init1 does not say where its parameters came from"
echo "== init_tp2 vs init1"
compare init_tp2 init1 --rtol-params 1e-4
if [ $MATRIX = 1 ]; then
  run 1 init1_llmc $V $S --set "init_from={\"path\":\"$WORK/src.bin\"}" --set 'parallel=[]'
  compare init1_llmc init1 --bitwise
  run 1 init1_m2 $V $S --set "$I" --set 'parallel=[]' --set train.micro_batch_size=2 \
    --set train.grad_accum_steps=2
  run 1 seed1 $V $S --set 'parallel=[]'
  run 2 init_zero3 $V $S --set "$I" $Z3
  run 2 init_pp2 $V $S --set "$I" $PP2
  run 4 init_tp2pp2 $V $S --set "$I" $TP2PP2
  for r in init_zero3 init_pp2; do
    echo "== $r vs init1_m2"
    compare "$r" init1_m2
  done
  echo "== init_tp2pp2 vs init1_m2"
  compare init_tp2pp2 init1_m2 --rtol-params 1e-4
fi
# the seed's loss on step 1: src's (the seed's parameters, the same first batch), and seed1's
# (init1's settings without init_from), which must equal it
/usr/bin/python3 "$HERE/check_init_loss.py" "$WORK" src $([ $MATRIX = 0 ] || echo seed1) ||
  die "the init_from run does not start from the file"

# 3b. export from sharded checkpoints, format 3 (the global view) and format 2 (flat items per
# tp rank, written before the global view). CI: init_tp2's step 3, whose export equals init1's
# within the 1e-4 its parameters were compared at above (the same max|a-b| / max|b|), and
# rewritten as format 2 exports bitwise what its format-3 original does.
# --matrix: zero3 dp2, tp2, pp2 and tp2 x pp2 checkpoints after the same 20 steps from the same
# seed as the one-rank run's (the equivalence matrix's runs) within compare_runs.py's parameter
# tolerance there, rho * S / 30 = 2.6e-5 for this model (the tolerance it derives and prints for
# these runs), each format 3 with the global view, and eq_tp2's as format 2 too.
format3() { # format3 STEP_DIR: a format-3 checkpoint with the global view
  grep -q '"loom-checkpoint-3"' "$1/manifest.json" &&
    grep -q '"items": *"global"' "$1/manifest.json" ||
    die "$1 is not format 3 with the global view"
}
format2_same() { # format2_same STEP_DIR ITS.safetensors NAME: rewritten as format 2, same export
  mkdir -p "$WORK/$3"
  $PY "$TESTLIB/ckpt_format2.py" "$1" "$WORK/$3/$(basename "$1")" || die "ckpt_format2.py failed"
  grep -q '"params@tp1of2"' "$WORK/$3/$(basename "$1")/manifest.json" || die "$3: not format 2"
  export_to "$WORK/$3/$(basename "$1")" safetensors "$WORK/$3.safetensors"
  $PY "$CHECK" same "$WORK/$3.safetensors" "$2" || die "$3: format 2 export"
}
export_to "$WORK/init1/ckpt/step-00000003" safetensors "$WORK/init1.safetensors"
export_to "$WORK/init_tp2/ckpt/step-00000003" safetensors "$WORK/init_tp2.safetensors"
$PY "$CHECK" close "$WORK/init_tp2.safetensors" "$WORK/init1.safetensors" 1e-4 ||
  die "init_tp2 export"
format3 "$WORK/init_tp2/ckpt/step-00000003"
format2_same "$WORK/init_tp2/ckpt/step-00000003" "$WORK/init_tp2.safetensors" init_tp2_f2
if [ $MATRIX = 1 ]; then
  S='--set train.steps=20 --set train.eval_interval=0'
  run 1 eq1 $V $S --set 'parallel=[]'
  run 2 eq_zero3 $V $S $Z3
  run 2 eq_tp2 $V $S $TP2
  run 2 eq_pp2 $V $S $PP2
  run 4 eq_tp2pp2 $V $S $TP2PP2
  export_to "$WORK/eq1" safetensors "$WORK/eq1.safetensors"
  for r in eq_zero3 eq_tp2 eq_pp2 eq_tp2pp2; do
    export_to "$WORK/$r" safetensors "$WORK/$r.safetensors"
    $PY "$CHECK" close "$WORK/$r.safetensors" "$WORK/eq1.safetensors" 2.6e-5 || die "$r export"
    format3 "$WORK/$r/ckpt/step-00000020"
  done
  format2_same "$WORK/eq_tp2/ckpt/step-00000020" "$WORK/eq_tp2.safetensors" eq_tp2_f2
fi

# 3c. the padded vocabulary of section 1: a config with another padding (50432) starts from
# either file (its padded rows zero) and exports it back bitwise; training from the llm.c file
# on the tagged device (tests/fixtures/tagged_device.c: init_from writes only through the
# device API) is bitwise the CPU device's, and the padded rows stay zero (no gradient reaches
# them). CI trains so on the tiny vocabulary, 300 padded to 512 from src.bin (whose llm.c file
# holds 384 rows, zero past 300: rows in the file and rows past it, as 50432 past g2.bin's
# 50304): the same fill, one from_host per tensor whatever its size, at 1/100 of the bytes;
# --matrix at GPT-2's too.
config g2_st "$WORK/g2.safetensors" "" '{"vocab_size": 50257, "padded_vocab_size": 50432}'
config g2_bin "$WORK/g2.bin" llmc '{"vocab_size": 50257, "padded_vocab_size": 50432}'
export_to "$WORK/g2_st.json" safetensors "$WORK/g2_rt.safetensors"
export_to "$WORK/g2_bin.json" llmc "$WORK/g2_rt.bin"
$PY "$CHECK" same "$WORK/g2.safetensors" "$WORK/g2_rt.safetensors" ||
  die "g2 safetensors round trip"
cmp "$WORK/g2.bin" "$WORK/g2_rt.bin" || die "g2 llm.c round trip is not bitwise"
echo "padded vocabulary round trip: $WORK/g2.bin == $WORK/g2_rt.bin (cmp)"
tagged_pair() { # tagged_pair NAME V VP LLMC_FILE: NAME_cpu and NAME_tagged, 2 steps from the file
  local dev type
  for dev in cpu tagged; do
    type=cpu
    [ "$dev" = tagged ] && type=$LOOM_BUILD/tests/fixtures/tagged_device.so
    run 1 "$1_$dev" --set model.vocab_size="$2" --set model.padded_vocab_size="$3" \
      --set "init_from={\"path\":\"$4\",\"format\":\"llmc\"}" --set 'parallel=[]' \
      --set train.steps=2 --set train.eval_interval=0 --set "device.type=\"$type\""
  done
  compare "$1_tagged" "$1_cpu" --bitwise
  /usr/bin/python3 "$HERE/check_padded_rows_zero.py" "$WORK/$1_tagged/ckpt/step-00000002" \
    "$2" "$3" || die "$1_tagged: padded wte rows not zero"
}
tagged_pair t300 300 512 "$WORK/src.bin"
[ $MATRIX = 0 ] || tagged_pair g2 50257 50432 "$WORK/g2.bin"

/usr/bin/python3 "$HERE/check_init_from_meta.py" "$WORK/init1/ckpt/step-00000003/manifest.json" "$WORK/src.safetensors" ||
  die "the checkpoint does not record init_from"

# 4. resume wins: init_from is not even opened when the run resumes
timeout 300 mpirun -np 1 --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" $V \
  --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
  --set "data.vocab=$WORK/data/vocab.json" --set 'parallel=[]' --set train.steps=5 \
  --set "init_from={\"path\":\"$WORK/no-such-file.safetensors\"}" \
  --set "logging.metrics=$WORK/init1/metrics.jsonl" \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/init1/ckpt\",\"every\":0,\"keep\":0}" \
  >"$WORK/resume.log" 2>&1 || { cat "$WORK/resume.log" >&2; die "resume with init_from failed"; }
grep -q "init_from $WORK/no-such-file.safetensors ignored: resuming from the checkpoint of step 3" \
  "$WORK/resume.log" || { cat "$WORK/resume.log"; die "resume did not say init_from was ignored"; }
grep -q '"init_from"' "$WORK/init1/ckpt/step-00000005/manifest.json" ||
  die "the resumed run's checkpoint lost the init_from record"
# loom check follows the same rule: with a checkpoint to resume from it does not open the
# missing file and says resume wins; without one (a fresh checkpoint dir) it refuses the file
CK=(--set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin"
    --set "data.vocab=$WORK/data/vocab.json" --set 'parallel=[]'
    --set "init_from={\"path\":\"$WORK/no-such-file.safetensors\"}")
"$LOOM" check "$LOOM_SRC/configs/tiny.json" $V "${CK[@]}" \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/init1/ckpt\"}" \
  >"$WORK/check.log" 2>&1 || { cat "$WORK/check.log" >&2; die "loom check opened init_from on resume"; }
grep -q "init_from $WORK/no-such-file.safetensors ignored: resuming from the checkpoint of step 5 (resume wins)" \
  "$WORK/check.log" || { cat "$WORK/check.log"; die "loom check did not say resume wins"; }
cat "$WORK/check.log"
if "$LOOM" check "$LOOM_SRC/configs/tiny.json" $V "${CK[@]}" \
  --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/fresh_ckpt\"}" \
  >"$WORK/check.log" 2>&1; then die "loom check accepted a missing init_from with nothing to resume"; fi
grep -q "init_from.path: .*no-such-file.safetensors" "$WORK/check.log" ||
  { cat "$WORK/check.log"; die "loom check's refusal does not name init_from.path"; }
echo "refused: $(tail -1 "$WORK/check.log")"

# 5. refusals, before training, naming what differs
expect_fail() { # expect_fail NEEDLE CONFIG|--train ARGS...
  local needle=$1
  shift
  if "$@" >"$WORK/fail.log" 2>&1; then die "expected a failure containing '$needle'"; fi
  grep -qF "$needle" "$WORK/fail.log" || { cat "$WORK/fail.log"; die "message lacks '$needle'"; }
  echo "refused: $(tail -1 "$WORK/fail.log")"
}
config l3 "$WORK/src.safetensors" "" '{"n_layer": 3}'
expect_fail "the file's layer count (h.0 .. h.N) is 2, the config's model.n_layer is 3" \
  "$LOOM" check "$WORK/l3.json"
expect_fail "the file's layer count (h.0 .. h.N) is 2, the config's model.n_layer is 3" \
  "$LOOM" export "$WORK/l3.json" --format safetensors "$WORK/x.safetensors"
config h4 "$WORK/src.safetensors" "" '{"n_head": 4}'
expect_fail "the file's n_head (metadata loom.model) is 2, the config's model.n_head is 4" \
  "$LOOM" export "$WORK/h4.json" --format safetensors "$WORK/x.safetensors"
config v256 "$WORK/src.bin" "" '{"vocab_size": 256}'
expect_fail "the file's vocab_size is 300, the config's model.vocab_size is 256" \
  "$LOOM" export "$WORK/v256.json" --format llmc "$WORK/x.bin"
/usr/bin/python3 "$HERE/write_bad_shape.py" "$WORK/src.safetensors" "$WORK/bad_shape.safetensors"
expect_fail "tensor 'h.1.attn.c_attn.weight' has shape [96, 32], the config needs [32, 96] (Conv1D: (in, out))" \
  timeout 120 "$LOOM" train "$LOOM_SRC/configs/tiny.json" $V --set checkpoint=null \
  --set "data.train=$WORK/data/train_*.bin" --set "data.vocab=$WORK/data/vocab.json" \
  --set 'parallel=[]' --set "init_from={\"path\":\"$WORK/bad_shape.safetensors\"}"
expect_fail "init_from.format: expected \"safetensors\" or \"llmc\"" \
  "$LOOM" check "$LOOM_SRC/configs/tiny.json" --set 'init_from={"path":"x.pt","format":"pt"}'
expect_fail "no checkpoint there" "$LOOM" export "$WORK/data" --format llmc "$WORK/x.bin"
cp -r "$WORK/src/ckpt/step-00000006" "$WORK/step-00000006"  # one flipped byte in a chunk
printf '\xff' | dd of="$WORK/step-00000006/rank-00000.bin" bs=1 seek=1000 conv=notrunc 2>/dev/null
expect_fail "checksum mismatch in item 'params/wte'" \
  "$LOOM" export "$WORK/step-00000006" --format llmc "$WORK/x.bin"
[ ! -e "$WORK/x.bin" ] && [ ! -e "$WORK/x.bin.tmp" ] || die "a failed export left a file behind"
echo "PASS"
