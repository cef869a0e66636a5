#!/bin/bash
# The GPT-2-vocabulary benchmark (issue 13): loom on 1 and 2 ranks (ddp, zero1, zero2) against
# PyTorch and llm.c's CPU trainer, on two models, every number a ratio to anchors measured in the
# same run (nothing here passes or fails on time):
#
#   gpt2: L4 H4 C256, vocabulary 50257, T 64, 256 tokens per step (global), random tokens
#   byte: L4 H8 C256, vocabulary 256,   T 128, 1024 tokens per step (the main job's model)
#
#   bench/gpt2_vocab.sh [--build DIR] [--steps N] [--skip K] [--torch-steps N] [--rounds R]
#                       [--out DIR] [--no-torch] [--comm-ab]
#   LLMC_DIR=/path/to/llm.c bench/gpt2_vocab.sh ...   (adds llm.c's train_gpt2.c as an anchor)
#   make -C BUILD bench-gpt2                          (the same, with --build BUILD)
#
# 1. anchor: loom-sgemm-peak (single-thread OpenBLAS SGEMM) at the gpt2 model's shapes
# 2. R interleaved rounds of: loom gpt2 1 rank (micro 4), ddp / zero1 / zero2 on 2 ranks (micro
#    2 each: the same global batch; ddp also without the embedding's split all-reduce, to show
#    what the split hides), loom byte 1 rank (micro 8) and ddp 2 ranks (micro 4);
#    PyTorch (bench/torch_gpt.py, Debian's python3-torch, 1 thread per rank, DDP over gloo) of
#    both models on 1 and 2 ranks; llm.c (when LLMC_DIR is set) of both models on 1 thread
# 3. the anchor again, then the table and the ratios (bench/gpt2_vocab_report.py).
# --comm-ab instead runs only the gpt2 model's ddp, zero1 and zero2 rows on 2 ranks, each with
# mpi.so's "collectives": "loom" (its own sum collectives) and "mpi" (Open MPI's), interleaved,
# and prints each pair's step-time ratio (median and fast phase of the pooled rounds).
# Every rank runs one thread (device.threads=1, OMP/OPENBLAS_NUM_THREADS=1): 2 ranks = 2 cores.
#
# llm.c is not vendored: LLMC_DIR must hold karpathy/llm.c's train_gpt2.c. Its main() trains
# B=4, T=64 (the gpt2 shape) for 40 steps from gpt2_124M.bin on dev/data/tinyshakespeare; the
# script builds it with llm.c's own flags (-Ofast -fopenmp -march=native) in a scratch directory
# where those paths hold a checkpoint of our shapes (random weights, llm.c's fp32 format, the
# vocabulary padded to a multiple of 128 as llm.c pads it) and our random-token shard. For the
# byte model a copy with B=8, T=128 substituted is built there too; both copies skip its sampling
# (untimed anyway). Its "step k: ... (took X ms)" lines are the step times. Needs a checkout from
# after llm.c's padded vocabulary (llmc/ headers, checkpoint version 3, dev/data/ shards).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=20 skip=5 torch_steps=12 rounds=1 out="" torch=1 comm_ab=0
. "$root/bench/lib.sh"
bench_options gpt2_vocab.sh 2,31 \
  "build steps skip torch-steps rounds out no-torch:torch=0 comm-ab:comm_ab=1" "$@"
[ "$steps" -gt "$((skip + 2))" ] || { echo "gpt2_vocab.sh: --steps must exceed --skip + 2" >&2; exit 2; }
bench_init gpt2_vocab.sh gpt2_vocab loom loom-sgemm-peak
mkdir -p "$out/data"
torch_skip=$(( torch_steps > 6 ? 3 : 1 ))
if [ "$torch" = 1 ] && ! /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  echo "gpt2_vocab.sh: no PyTorch under /usr/bin/python3 (Debian python3-torch): skipping it" >&2
  torch=0
fi

# random-token shards in llm.c's format (the loom loader's and llm.c's): 2^20 tokens each
/usr/bin/python3 "$root/bench/token_shards.py" "$out/data" gpt2:50257 byte:256

model_gpt2="--set model.vocab_size=50257 --set model.context_length=64 --set model.n_layer=4
  --set model.n_head=4 --set model.n_embd=256 --set train.seq_len=64"
model_byte="--set model.vocab_size=256 --set model.context_length=128 --set model.n_layer=4
  --set model.n_head=8 --set model.n_embd=256 --set train.seq_len=128"

# loom NAME MODEL NP MICRO ROUND [--set ...]: one training run, metrics to $out/NAME.rROUND.jsonl
loom() {
  local name=$1 model=$2 np=$3 mb=$4 round=$5
  shift 5
  local sets=model_$model
  printf '   %-16s %d rank(s), micro batch %d, round %d ... ' "$name" "$np" "$mb" "$round"
  local t0=$SECONDS
  # shellcheck disable=SC2086 # the model's --set list splits on whitespace
  if ! mpirun -np "$np" --oversubscribe --bind-to none "$bin/loom" train \
      "$root/configs/fortunes_ddp.json" ${!sets} \
      --set "train.steps=$steps" --set "lr_schedule.warmup_steps=$skip" \
      --set "train.micro_batch_size=$mb" --set train.grad_accum_steps=1 \
      --set device.threads=1 --set checkpoint=null --set train.eval_interval=0 \
      --set sample.tokens=0 --set logging.interval=10 --set 'logging.tensorboard=""' \
      --set "logging.metrics=$out/$name.r$round.jsonl" \
      --set "data.train=$out/data/${model}_train.bin" --set 'data.val=""' --set 'data.vocab=""' \
      "$@" > "$out/$name.r$round.log" 2>&1; then
    echo "FAILED"; tail -20 "$out/$name.r$round.log" >&2; exit 1
  fi
  echo "$((SECONDS - t0)) s"
}

# torchrun NAME MODEL RANKS ROUND
torchrun() {
  local name=$1 model=$2 np=$3 round=$4 shape
  [ "$model" = gpt2 ] && shape="--vocab 50257 --ctx 64 --heads 4 --batch 4" \
                      || shape="--vocab 256 --ctx 128 --heads 8 --batch 8"
  printf '   %-16s %d rank(s), round %d ... ' "$name" "$np" "$round"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  if ! /usr/bin/python3 "$root/bench/torch_gpt.py" $shape --layers 4 --embd 256 \
      --steps "$torch_steps" --ranks "$np" --out "$out/$name.r$round.jsonl" \
      > "$out/$name.r$round.log" 2>&1; then
    echo "FAILED"; tail -20 "$out/$name.r$round.log" >&2; exit 1
  fi
  echo "$((SECONDS - t0)) s"
}

# llm.c: a scratch directory per model with its expected file names, built with its own flags
llmc_prepare() {
  local model=$1 dir=$out/llmc-$1 B T V NH
  [ "$model" = gpt2 ] && { B=4; T=64; V=50257; NH=4; } || { B=8; T=128; V=256; NH=8; }
  mkdir -p "$dir/dev/data/tinyshakespeare"
  ln -sf "$out/data/${model}_train.bin" "$dir/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
  ln -sf "$out/data/${model}_train.bin" "$dir/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
  # the shapes, and no sampling every 20 steps (untimed; it needs gpt2_tokenizer.bin for its
  # end-of-text token, which a checkpoint of our shapes has no use for)
  sed -e "s/int B = 4;/int B = $B;/" -e "s/int T = 64;/int T = $T;/" \
    -e 's/if (step > 0 \&\& step % 20 == 0)/if (0)/' \
    "$LLMC_DIR/train_gpt2.c" > "$dir/train_gpt2.c"
  # a main() that differs from the one patched above would train another shape, or sample with
  # no tokenizer (an unset end-of-text token): refuse it rather than time the wrong thing
  grep -q "int B = $B;" "$dir/train_gpt2.c" && grep -q "int T = $T;" "$dir/train_gpt2.c" \
    && grep -q 'if (0)' "$dir/train_gpt2.c" \
    || { echo "gpt2_vocab.sh: $LLMC_DIR/train_gpt2.c: main() lacks 'int B = 4;', 'int T = 64;'" \
              "or the sampling every 20 steps that this script patches: no llm.c anchor" >&2
         return 1; }
  [ -d "$LLMC_DIR/llmc" ] && ln -sfn "$LLMC_DIR/llmc" "$dir/llmc"
  gcc -Ofast -Wno-unused-result -Wno-ignored-pragmas -Wno-unknown-attributes -march=native \
    -fopenmp -DOMP "$dir/train_gpt2.c" -lm -lgomp -o "$dir/train_gpt2" > "$dir/build.log" 2>&1 \
    || { echo "llm.c build failed: $dir/build.log" >&2; return 1; }
  # llm.c's fp32 checkpoint (header version 3): its parameter order, random weights
  /usr/bin/python3 - "$dir/gpt2_124M.bin" "$T" "$V" 4 "$NH" 256 <<'EOF'
import array, random, struct, sys
path, T, V, L, NH, C = sys.argv[1], *map(int, sys.argv[2:])
Vp = (V + 127) // 128 * 128
sizes = [Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
         L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
ones = {2, 8, 14}  # ln1w, ln2w, lnfw
rng = random.Random(1)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240326, 3, T, V, L, NH, C, Vp, *([0] * 248)))
    for i, n in enumerate(sizes):
        if i in ones:
            a = array.array("f", [1.0]) * n
        else:
            a = array.array("f", (rng.gauss(0, 0.02) for _ in range(min(n, 65536))))
            a = (a * (n // len(a) + 1))[:n]
        f.write(a.tobytes())
EOF
}

llmcrun() {
  local name=$1 model=$2 round=$3 dir=$out/llmc-$2
  printf '   %-16s 1 thread, round %d ... ' "$name" "$round"
  local t0=$SECONDS
  if ! (cd "$dir" && OMP_NUM_THREADS=1 ./train_gpt2) > "$out/$name.r$round.log" 2>&1; then
    echo "FAILED"; tail -20 "$out/$name.r$round.log" >&2; exit 1
  fi
  echo "$((SECONDS - t0)) s"
}

llmc=0
if [ -n "${LLMC_DIR:-}" ]; then
  if [ -f "$LLMC_DIR/train_gpt2.c" ] && ! { grep -q padded_vocab_size "$LLMC_DIR/train_gpt2.c" &&
      grep -q dev/data/tinyshakespeare/tiny_shakespeare_train.bin "$LLMC_DIR/train_gpt2.c"; }; then
    echo "gpt2_vocab.sh: $LLMC_DIR/train_gpt2.c predates llm.c's padded vocabulary or its dev/data" \
         "shards (checkpoint version 3, shard magic 20240520): update the checkout; no llm.c anchor" >&2
  elif [ -f "$LLMC_DIR/train_gpt2.c" ]; then
    echo "== building llm.c's train_gpt2.c from $LLMC_DIR"
    llmc_prepare gpt2 && llmc_prepare byte && llmc=1
  else
    echo "gpt2_vocab.sh: $LLMC_DIR/train_gpt2.c missing: no llm.c anchor" >&2
  fi
fi

bench_banner GPT-2-vocabulary
if [ "$comm_ab" = 1 ]; then
  echo "== mpi.so \"collectives\": \"loom\" vs \"mpi\": gpt2 ddp / zero1 / zero2 on 2 ranks," \
       "$steps steps (first $skip skipped), $rounds round(s)"
  for r in $(seq 1 "$rounds"); do
    for par in ddp zero1 zero2; do
      for coll in loom mpi; do
        loom "gpt2-$par-2r-$coll" gpt2 2 2 "$r" --set "parallel=[{\"plugin\": \"$par\"}]" \
          --set "comm={\"plugin\": \"mpi\", \"collectives\": \"$coll\"}"
      done
    done
  done
  /usr/bin/python3 - "$out" "$rounds" "$skip" <<'EOF'
import json, statistics, sys
out, rounds, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def ms(name):  # pooled ms_per_step of the steps after the warm-up, every round
    xs = []
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{name}.r{r}.jsonl"):
            rec = json.loads(line)
            if rec.get("step", 0) > skip and "ms_per_step" in rec:
                xs.append(rec["ms_per_step"])
    xs.sort()
    return statistics.median(xs), xs[max(0, len(xs) // 10 - 1)]
print("| gpt2, 2 ranks | loom: ms/step median (fast) | mpi: ms/step median (fast) | mpi / loom: median (fast) |")
print("|---|---|---|---|")
for par in ("ddp", "zero1", "zero2"):
    (lm, lf), (mm, mf) = ms(f"gpt2-{par}-2r-loom"), ms(f"gpt2-{par}-2r-mpi")
    print(f"| {par} | {lm:.1f} ({lf:.1f}) | {mm:.1f} ({mf:.1f}) | {mm / lm:.2f} ({mf / lf:.2f}) |")
EOF
  echo "(fast = the 10% fastest steps; load average now $(cut -d' ' -f1-3 /proc/loadavg); runs in $out)"
  exit 0
fi
echo "== anchor (before): loom-sgemm-peak at the gpt2 model's shapes"
"$bin/loom-sgemm-peak" -B 4 -T 64 -C 256 -H 4 -V 50257 -L 4 > "$out/sgemm_before.txt"
tail -2 "$out/sgemm_before.txt"
echo "== runs: loom $steps steps (first $skip skipped), PyTorch $torch_steps (first $torch_skip" \
     "skipped), llm.c its 41 (first 3 skipped)"
for r in $(seq 1 "$rounds"); do
  loom gpt2-loom-1r gpt2 1 4 "$r"
  loom gpt2-ddp-2r gpt2 2 2 "$r"
  loom gpt2-ddp-nosplit-2r gpt2 2 2 "$r" --set 'parallel[0].split_embedding=false'
  loom gpt2-zero1-2r gpt2 2 2 "$r" --set 'parallel=[{"plugin": "zero1"}]'
  loom gpt2-zero2-2r gpt2 2 2 "$r" --set 'parallel=[{"plugin": "zero2"}]'
  loom byte-loom-1r byte 1 8 "$r"
  loom byte-ddp-2r byte 2 4 "$r"
  if [ "$torch" = 1 ]; then
    torchrun gpt2-torch-1r gpt2 1 "$r"
    torchrun gpt2-torch-2r gpt2 2 "$r"
    torchrun byte-torch-1r byte 1 "$r"
    torchrun byte-torch-2r byte 2 "$r"
  fi
  if [ "$llmc" = 1 ]; then
    llmcrun gpt2-llmc-1r gpt2 "$r"
    llmcrun byte-llmc-1r byte "$r"
  fi
done
bench_anchor_after -B 4 -T 64 -C 256 -H 4 -V 50257 -L 4
python3 "$root/bench/gpt2_vocab_report.py" --dir "$out" --rounds "$rounds" --skip "$skip" \
  --torch-skip "$torch_skip" --llmc-skip 3 | tee "$out/report.txt"
echo
echo "(runs, logs and JSONL in $out)"
