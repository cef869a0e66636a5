#!/bin/bash
# The CPU GEMM width benchmark (issue 19): loom's CPU device on oneDNN's matmul, fp32 and bf16
# (bf16 x bf16 -> fp32 GEMM operands where oneDNN reports avx512_core_bf16 or AMX), against
# PyTorch fp32 and PyTorch under torch.autocast("cpu", dtype=torch.bfloat16), with the per-dtype
# MFU ceiling (loom-dnnl-peak: a square oneDNN GEMM in fp32 and in bf16) and OpenBLAS's SGEMM
# peak beside it, all measured in the same run: every number a ratio (nothing passes or fails).
#
#   byte:      L4 H8 C256, vocabulary 256, T 128, 16 sequences a step (the main job's model,
#              configs/fortunes_ddp.json, micro batch 8 per rank; the fortunes data)
#   gpt2vocab: L4 H4 C256, vocabulary 50257, T 64, 4 sequences a step (bench/gpt2_vocab.sh's
#              gpt2 model; random tokens, bench/token_shards.py)
#   gpt2_124m: L12 H12 C768, vocabulary 50257 (loom pads it to 50304), T 1024, 2 sequences a
#              step (GPT-2 124M; random tokens); --big-steps / --big-skip, a step takes seconds
#
#   bench/cpu_width.sh [--build DIR] [--steps N] [--skip K] [--big-steps N] [--big-skip K]
#                      [--rounds R] [--out DIR] [--data DIR] [--no-torch]
#                      [--rows byte,gpt2vocab,gpt2_124m]
#
# 1. anchors: loom-dnnl-peak (1 thread: oneDNN fp32 and bf16 on square 1024 / 2048 and the
#    models' GEMM shapes, and the ISA it ran), loom-sgemm-peak (1-thread OpenBLAS, squares 1024 /
#    2048 and the byte model's shapes, and OpenBLAS's kernel family), PyTorch's CPU capability,
#    BLAS and the oneDNN kernel its bf16 GEMMs ran (torch_gpt.py --probe, ONEDNN_VERBOSE=1)
# 2. R interleaved rounds (slow phases of the shared machine hit every configuration) of, per
#    row, each on 2 cores in two setups at the same global batch:
#      loom fp32 and bf16:      2 ranks x 1 thread (mpirun, ddp) and 1 rank x 2 threads
#      PyTorch fp32 and bf16:   2 ranks x 1 thread (DDP over gloo) and 1 process x 2 threads
#    loom and PyTorch both run --steps (first --skip left out; --big-* for gpt2_124m)
# 3. loom-dnnl-peak again (drift), then bench/cpu_width_report.py's table: tokens/s (median and
#    fast phase) per configuration, each side's best setup, the ratios loom bf16 / PyTorch
#    autocast bf16, loom bf16 / loom fp32, loom fp32 / PyTorch fp32, MFU against 2 x the 1-thread
#    oneDNN peak of the dtype, and the ISA each library ran (loom's own `loom: cpu:` line).
# ~40 min with the defaults on 2 shared cores, most of it GPT-2 124M (PyTorch ~25-50 s a step);
# --rows byte --steps 6 --skip 2 is a ~2 min smoke run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=20 skip=5 big_steps=6 big_skip=2 rounds=1 out="" data="" torch=1
rows=byte,gpt2vocab,gpt2_124m config=$root/configs/fortunes_ddp.json
. "$root/bench/lib.sh"
bench_options cpu_width.sh 2,33 \
  "build steps skip big-steps big-skip rounds out data no-torch:torch=0 rows" "$@"
[ "$big_steps" -gt "$((big_skip + 1))" ] ||
  { echo "cpu_width.sh: --big-steps must exceed --big-skip + 1" >&2; exit 2; }
IFS=, read -r -a row_list <<< "$rows"
for row in "${row_list[@]}"; do
  case $row in byte|gpt2vocab|gpt2_124m) ;;
    *) echo "cpu_width.sh: --rows: unknown row '$row' (byte, gpt2vocab, gpt2_124m)" >&2; exit 2 ;;
  esac
done
bench_setup cpu_width.sh cpu_width
[ -x "$bin/loom-dnnl-peak" ] || { echo "cpu_width.sh: $bin/loom-dnnl-peak missing: build first" >&2
                                  exit 2; }
if [ "$torch" = 1 ] && ! /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  echo "cpu_width.sh: no PyTorch under /usr/bin/python3 (Debian python3-torch): skipping it" >&2
  torch=0
fi
if [[ ",$rows," == *,gpt2vocab,* || ",$rows," == *,gpt2_124m,* ]]; then
  mkdir -p "$out/data"
  /usr/bin/python3 "$root/bench/token_shards.py" "$out/data" gpt2:50257 # 2^20 random tokens
fi

# Per row: global sequences a step, loom's --set list (after bench_train's own: later wins),
# torch_gpt.py's shape. 2 ranks run half the sequences each: every setup the same global batch.
declare -A seqs loom_sets torch_shape
seqs[byte]=16
loom_sets[byte]=""
torch_shape[byte]="--vocab 256 --ctx 128 --layers 4 --heads 8 --embd 256"
seqs[gpt2vocab]=4
loom_sets[gpt2vocab]="--set model.vocab_size=50257 --set model.context_length=64
  --set model.n_layer=4 --set model.n_head=4 --set model.n_embd=256 --set train.seq_len=64"
torch_shape[gpt2vocab]="--vocab 50257 --ctx 64 --layers 4 --heads 4 --embd 256"
seqs[gpt2_124m]=2
loom_sets[gpt2_124m]="--set model.vocab_size=50257 --set model.padded_vocab_size=50304
  --set model.context_length=1024 --set model.n_layer=12 --set model.n_head=12
  --set model.n_embd=768 --set train.seq_len=1024"
torch_shape[gpt2_124m]="--vocab 50257 --ctx 1024 --layers 12 --heads 12 --embd 768"

# row_steps ROW: "STEPS SKIP" of the row (bench_train reads $steps: the runners make it local)
row_steps() {
  if [ "$1" = gpt2_124m ]; then echo "$big_steps $big_skip"; else echo "$steps $skip"; fi
}

# loomrun ROW PREC NP THREADS ROUND: one bench_train run, NAME = ROW-loom-PREC-NPrTHREADSt
loomrun() {
  local row=$1 prec=$2 np=$3 th=$4 round=$5 name="$1-loom-$2-$3r$4t" rs
  rs=$(row_steps "$row") # before the locals below hide the global steps and skip
  local steps=${rs% *} skip=${rs#* }
  local sets=(--set device.threads="$th" --set "precision={\"plugin\": \"$prec\"}"
              --set 'logging.tensorboard=""')
  if [ "$row" != byte ]; then
    sets+=(--set "data.train=$out/data/gpt2_train.bin" --set 'data.vocab=""')
  fi
  printf '   %-26s %d rank(s) x %d thread(s), micro batch %d, round %d ... ' "$name" "$np" "$th" \
    "$((seqs[$row] / np))" "$round"
  local t0=$SECONDS
  # shellcheck disable=SC2086 # the row's --set list splits on whitespace
  OMP_NUM_THREADS=$th bench_train "$name" "$np" "$((seqs[$row] / np))" "$round" \
    ${loom_sets[$row]} "${sets[@]}"
  echo "$((SECONDS - t0)) s"
}

# torchrun ROW PREC NP THREADS ROUND: torch_gpt.py, NAME = ROW-torch-PREC-NPrTHREADSt
torchrun() {
  local row=$1 prec=$2 np=$3 th=$4 round=$5 name="$1-torch-$2-$3r$4t" rs
  rs=$(row_steps "$row") # before the locals below hide the global steps and skip
  local steps=${rs% *} skip=${rs#* }
  local ac=none TIMEFORMAT='%R %U %S'
  [ "$prec" = bf16 ] && ac=bf16
  printf '   %-26s %d rank(s) x %d thread(s), round %d ... ' "$name" "$np" "$th" "$round"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  if ! { time /usr/bin/python3 "$root/bench/torch_gpt.py" ${torch_shape[$row]} \
      --batch "${seqs[$row]}" --steps "$steps" --ranks "$np" --threads "$th" --autocast "$ac" \
      --out "$out/$name.r$round.jsonl" > "$out/$name.r$round.log" 2>&1; } \
      2> "$out/$name.r$round.time"; then
    echo "FAILED"; tail -20 "$out/$name.r$round.log" >&2; exit 1
  fi
  echo "$((SECONDS - t0)) s"
}

bench_banner "CPU GEMM width (fp32 / bf16)"
echo "== anchors (before): loom-dnnl-peak (oneDNN, 1 thread), loom-sgemm-peak (OpenBLAS, 1 thread)"
"$bin/loom-dnnl-peak" > "$out/dnnl_before.txt"
grep '^dnnl_' "$out/dnnl_before.txt"
# OPENBLAS_VERBOSE=2: OpenBLAS names the kernel family it picked ("Core: Haswell") on stderr
OPENBLAS_VERBOSE=2 "$bin/loom-sgemm-peak" -s 1024,2048 > "$out/sgemm_before.txt" 2>&1
tail -1 "$out/sgemm_before.txt"
if [ "$torch" = 1 ]; then
  echo "== PyTorch: what it runs on"
  ONEDNN_VERBOSE=1 OPENBLAS_VERBOSE=2 /usr/bin/python3 "$root/bench/torch_gpt.py" --probe \
    > "$out/torch_probe.txt" 2>&1
  grep '^torch_' "$out/torch_probe.txt"
fi
echo "== runs: rows $rows; $steps steps (first $skip skipped), gpt2_124m $big_steps" \
     "(first $big_skip skipped); $rounds round(s)"
for r in $(seq 1 "$rounds"); do
  for row in "${row_list[@]}"; do
    for prec in fp32 bf16; do
      loomrun "$row" "$prec" 2 1 "$r"
      loomrun "$row" "$prec" 1 2 "$r"
      if [ "$torch" = 1 ]; then
        torchrun "$row" "$prec" 2 1 "$r"
        torchrun "$row" "$prec" 1 2 "$r"
      fi
    done
  done
done
echo "== anchor (after): loom-dnnl-peak"
"$bin/loom-dnnl-peak" > "$out/dnnl_after.txt"
grep '^dnnl_peak' "$out/dnnl_after.txt"
echo "== load average now $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t_start )) s in all"
echo
python3 "$root/bench/cpu_width_report.py" --dir "$out" --rows "$rows" --rounds "$rounds" \
  --skip "$skip" --big-skip "$big_skip" | tee "$out/report.txt"
echo
echo "(runs, logs and JSONL in $out)"
