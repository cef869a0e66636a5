#!/bin/bash
# bench/gpu_check.sh — issue #9's GPU check, one script, run unchanged from the repository root
# on a machine with one NVIDIA GPU (the device machine: an H200), under 8 minutes. It prints one
# summary table (docs/gpu.md explains every row):
#   1. the device conformance suite on cuda (fp32 and bf16 inputs; and TF32 GEMMs, quick)
#   2. configs/tiny.json, 30 steps, fp32: cuda against cpu per-step loss; 2 ranks ddp on the one
#      GPU through mpi.so against 1 rank; nccl.so on 1 rank through every collective
#   3. GPT-2 124M (12 layers, 12 heads, 768 channels, V 50257, T 1024) on the GPU: tokens/s and
#      MFU (6N + 12 L T C FLOPs per token) in fp32 and bf16, against the bf16 GEMM rate of cuBLAS
#      measured here and against PyTorch (torch.compile, SDPA, fused AdamW) measured here
#   4. peak GPU memory per category of the bf16 run against `loom estimate`
#
# loom comes from tools/gpu_carry.sh's .gpu_carry/ (a Release install tree built with CUDA plus
# the Debian runtime packages, unpacked here into a private root: that machine has no package
# registry), or from build/ (LOOM_BUILD=DIR: that build) when loom was built on this machine.
#
#   bench/gpu_check.sh              the check (exit 3, with the reason, when there is no GPU)
#   bench/gpu_check.sh --rehearse   the CPU parts only, anywhere: unpack the carry, check that
#                                   every library resolves inside it, run loom and mpirun from
#                                   it on the CPU device, then stop where the GPU is needed
# Results: the table on stdout and in $OUT/gpu_check.md (OUT: the device tool's folder that
# comes back; /tmp/loom_gpu_check otherwise), logs in $OUT/gpu_check_logs.tar.gz. Every step has
# its own time limit (a stuck one is a FAIL row, not a lost table): about 4 minutes expected,
# 8 at most.
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
REHEARSE=0
[ "${1:-}" = "--rehearse" ] && REHEARSE=1
RES=${OUT:-/tmp/loom_gpu_check}
W=$(mktemp -d /tmp/loom_gpu_check.XXXXXX)
mkdir -p "$RES" "$W/logs"
T0=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
ROWS=()
row() { ROWS+=("| $1 | $2 | $3 |"); printf '[%4ds] %-34s %-5s %s\n' $(($(date +%s) - T0)) "$1" "$2" "$3"; }
die() { echo "gpu_check: $*" >&2; exit 1; }

# ---- loom: the carried tree or a local build ----
if [ -d .gpu_carry/prefix ] && [ -z "${LOOM_BUILD:-}" ]; then
  ROOT=/tmp/loom_root
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  for d in .gpu_carry/debs/*.deb; do dpkg -x "$d" "$ROOT" || die "dpkg -x $d failed"; done
  PREFIX=$SRC/.gpu_carry/prefix
  LIBS="$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/lib/x86_64-linux-gnu"
  # Debian's alternatives symlinks (libopenblas, libpsm) are not in the debs: their real folders
  LIBS="$LIBS:$ROOT/usr/lib/x86_64-linux-gnu/openmpi/lib:$ROOT/usr/lib/x86_64-linux-gnu/openblas-pthread"
  LIBS="$LIBS:$ROOT/usr/lib/libpsm1"
  # and some ship only the versioned file: make the soname links (ldconfig -n: those folders only)
  for d in ${LIBS//:/ }; do [ -d "$d" ] && ldconfig -n "$d" 2>/dev/null; done
  # only loom's commands see the carried libraries (python and torch keep the machine's own)
  L() { env LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OPAL_PREFIX="$ROOT/usr" \
        PATH="$ROOT/usr/bin:$PATH" "$@"; }
  LOOM=$PREFIX/bin/loom PREPARE=$PREFIX/bin/loom-prepare PLUGDIR=$PREFIX/lib/loom/plugins
  MPIRUN=$ROOT/usr/bin/orterun # Debian's mpirun is an alternatives link, not in the deb
  # every library resolves, and inside the carry unless it is the C runtime or CUDA's (the
  # machine's own): a library found on the build machine's system would be missing there
  deps=$(for f in "$LOOM" "$PREPARE" "$PLUGDIR"/*.so "$ROOT"/usr/bin/orterun \
           "$ROOT"/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do L ldd "$f" 2>/dev/null
         done | sort -u)
  missing=$(grep 'not found' <<<"$deps" | grep -v 'libcuda.so' || true)
  [ -z "$missing" ] || die "libraries missing from the carry: $missing"
  outside=$(awk '/=> \// {print $3}' <<<"$deps" | grep -v "^$ROOT/\|^/usr/local/cuda\|/libc\.so\|/libm\.so\|/libgcc_s\|/libstdc++\|/ld-linux\|/libdl\.so\|/libpthread\|/librt\.so\|/libcuda\|/libnvidia\|/libcudart\|/libcublas\|/libnccl" | sort -u || true)
  [ -z "$outside" ] || die "libraries the carry lacks (found on this system only): $(echo $outside)"
  relocated=$(L ompi_info --path pkglibdir --parsable 2>/dev/null | cut -d: -f3-)
  case "$relocated" in "$ROOT"/*) ;; *) die "Open MPI is not relocated into the carry ($relocated)" ;; esac
  row "carry" ok "$(du -sm .gpu_carry | cut -f1) MiB carried, $(ls .gpu_carry/debs | wc -l) debs unpacked; every library resolves inside"
elif [ -x "${LOOM_BUILD:-build}/bin/loom" ]; then
  L() { "$@"; }
  B=$(cd "${LOOM_BUILD:-build}" && pwd)
  LOOM=$B/bin/loom PREPARE=$B/bin/loom-prepare PLUGDIR=$B/lib/loom/plugins
  MPIRUN=mpirun
  row "carry" ok "none: using $B (loom built on this machine)"
else
  die "no loom here: run tools/gpu_carry.sh on the build machine and carry .gpu_carry, or build"
fi
L "$LOOM" version > "$W/logs/version.txt" 2>&1 || die "loom does not run: $(cat "$W/logs/version.txt")"
L "$LOOM" plugins > "$W/logs/plugins.txt" 2>&1
have_cuda=0 have_nccl=0
[ -f "$PLUGDIR/cuda.so" ] && have_cuda=1
[ -f "$PLUGDIR/nccl.so" ] && have_nccl=1
L "$PREPARE" --out "$W/data" "$SRC/docs" "$SRC/core" > "$W/logs/prepare.txt" 2>&1 ||
  die "loom-prepare failed: $(tail -3 "$W/logs/prepare.txt")"

# train NAME NP ARGS...: configs/tiny.json (or --config) into $W/NAME, metrics every step
train() {
  local name=$1 np=$2 cfg=$SRC/configs/tiny.json
  shift 2
  if [ "${1:-}" = "--config" ]; then cfg=$2; shift 2; fi
  mkdir -p "$W/$name"
  L timeout "${TRAIN_TIMEOUT:-120}" "$MPIRUN" -np "$np" --bind-to none "$LOOM" train "$cfg" \
    --set "data.train=$W/data/train_*.bin" --set "data.val=$W/data/val_*.bin" \
    --set "data.vocab=$W/data/vocab.json" --set "logging.metrics=$W/$name/metrics.jsonl" \
    --set logging.interval=1 --set train.eval_interval=0 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$W/$name/ckpt\",\"every\":0,\"keep\":1}" \
    "$@" > "$W/logs/$name.txt" 2>&1
}
compare() { # compare A B OPTIONS: compare_runs.py, its last line
  python3 "$SRC/tests/integration/lib/compare_runs.py" "${@:3}" "$W/$1/metrics.jsonl" "$W/$1/ckpt" \
    "$W/$2/metrics.jsonl" "$W/$2/ckpt" > "$W/logs/compare_$1_$2.txt" 2>&1
}
last() { tail -1 "$1" | cut -c1-160; }

# mem_compare METRICS CONFIG [--set ...]: each category's peak (the run's last record) against
# `loom estimate` on the same config, one line each into $W/logs/memory.txt
mem_compare() {
  local metrics=$1 cfg=$2
  shift 2
  L "$LOOM" estimate "$cfg" "$@" > "$W/logs/estimate.txt" 2>&1
  python3 - "$metrics" "$W/logs/estimate.txt" > "$W/logs/memory.txt" 2>&1 <<'PY'
import json, sys
peak = [json.loads(l) for l in open(sys.argv[1]) if "mem_peak_bytes" in l][-1]["mem_peak_bytes"]
rows = {"parameters": "params", "gradients": "grads", "optimizer state": "optim",
        "activations": "activations", "comm buffers": "comm", "other": "other", "total": "total"}
est = {}
for line in open(sys.argv[2]):
    for name, key in rows.items():
        if line.startswith("  " + name + " "):
            est[key] = int(line.split()[-2])
assert len(est) == len(rows), f"loom estimate's table changed: found {sorted(est)}"
for key in rows.values():
    e, m = est[key], peak.get(key, 0)
    print("%s measured %.1f MiB / estimate %.1f MiB" % (key, m / 2**20, e / 2**20))
PY
}

if [ "$REHEARSE" = 1 ]; then
  # the CPU parts of what follows, on the CPU device: loom and the carried mpirun work
  train rh_cpu1 1 --set train.steps=3 --set 'parallel=[]' || die "1-rank cpu run: $(tail -3 "$W/logs/rh_cpu1.txt")"
  train rh_cpu2 2 --set train.steps=3 --set train.micro_batch_size=2 ||
    die "2-rank cpu run through the carried mpirun: $(tail -3 "$W/logs/rh_cpu2.txt")"
  row "rehearsal" ok "1 and 2 ranks train on the CPU device with the carried loom and mpirun"
  mem_compare "$W/rh_cpu1/metrics.jsonl" "$SRC/configs/tiny.json" --set 'parallel=[]' &&
    row "rehearsal: memory vs estimate" ok "$(head -1 "$W/logs/memory.txt")" ||
    die "the memory comparison failed: $(cat "$W/logs/memory.txt")"
  if [ $have_cuda = 1 ]; then
    L "$LOOM" conformance --device cuda --quick > "$W/logs/conf_rh.txt" 2>&1
    row "cuda.so without a GPU" "$(grep -q '^SKIP  device.create' "$W/logs/conf_rh.txt" && echo skip || echo ?)" \
      "$(grep '^SKIP  device.create' "$W/logs/conf_rh.txt" | cut -c51-170)"
  fi
fi
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > "$W/logs/gpus.txt" 2>&1; then
  printf '%s\n' "${ROWS[@]}"
  echo "gpu_check: no GPU on this machine (nvidia-smi: $(head -1 "$W/logs/gpus.txt" 2>/dev/null || echo 'not installed')):"
  echo "gpu_check: the CPU parts ran; run this script on a GPU machine for the table"
  exit 3
fi
[ $have_cuda = 1 ] || die "cuda.so was not built (no CUDA toolkit where loom was built)"
row "GPU" ok "$(head -1 "$W/logs/gpus.txt" | cut -c1-80)"

# ---- 1. the device conformance suite on cuda ----
# conf_row NAME LOG RC: PASS / FAIL, or what create_ex said when cuda.so refused (on a GPU
# machine a refusal of the plain run is a failure; of the TF32 run, an option it lacks)
conf_row() {
  local why
  why=$(grep -m1 '^SKIP  device.create' "$2" | cut -c51-200)
  if [ -n "$why" ]; then row "$1" "$4" "cuda.so refused: $why"
  elif [ "$3" = 0 ]; then row "$1" PASS "$(grep '^summary' "$2" | cut -c10-150)"
  else row "$1" FAIL "$(grep -m1 '^FAIL' "$2" | cut -c1-150)"; fi
}
L timeout 120 "$LOOM" conformance --device cuda > "$W/logs/conformance_cuda.txt" 2>&1
conf_row "conformance cuda (fp32, bf16)" "$W/logs/conformance_cuda.txt" $? FAIL
L timeout 60 "$LOOM" conformance --device cuda --options '{"type":"cuda","tf32":true}' --dtype fp32 --quick \
  > "$W/logs/conformance_cuda_tf32.txt" 2>&1
conf_row "conformance cuda, TF32 GEMMs" "$W/logs/conformance_cuda_tf32.txt" $? SKIP

# ---- 2. tiny: cuda vs cpu, 2 ranks on one GPU, NCCL world 1 ----
# Tolerance cuda vs cpu: the same fp32 model with other summation orders (cuBLAS, the CUDA
# kernels' reductions): per step 2·λ·√n·u with the model path n (docs/tolerances.md, ~2e-5 for
# tiny), grown by 30 Adam steps; 1e-4 on loss and grad norm, 1e-3 on the final parameters.
T1='--set train.steps=30 --set parallel=[]'
train tiny_cpu 1 $T1 && train tiny_cuda 1 $T1 --set 'device={"type":"cuda"}'
if [ $? = 0 ] && compare tiny_cuda tiny_cpu --rtol-loss 1e-4 --rtol-grad-norm 1e-4 --rtol-params 1e-3; then
  row "tiny 30 steps cuda vs cpu" PASS "$(last "$W/logs/compare_tiny_cuda_tiny_cpu.txt")"
else
  row "tiny 30 steps cuda vs cpu" FAIL "$(last "$W/logs/compare_tiny_cuda_tiny_cpu.txt" 2>/dev/null || last "$W/logs/tiny_cuda.txt")"
fi
# 2 ranks ddp sharing the GPU through mpi.so (staged through host memory) vs 1 rank, same
# global batch: the equivalence tests' fp32 bound, 1e-5. cuda.so gives each local rank its own
# GPU unless "share_gpus" allows more ranks than GPUs.
train tiny_cuda_1r 1 --set train.steps=30 --set 'parallel=[]' --set train.micro_batch_size=8 \
  --set 'device={"type":"cuda"}' &&
  train tiny_cuda_ddp2 2 --set train.steps=30 --set train.micro_batch_size=4 \
    --set 'device={"type":"cuda","share_gpus":true}'
if [ $? = 0 ] && compare tiny_cuda_ddp2 tiny_cuda_1r --rtol 1e-5; then
  row "2 ranks ddp on 1 GPU (mpi) vs 1" PASS "$(last "$W/logs/compare_tiny_cuda_ddp2_tiny_cuda_1r.txt")"
else
  row "2 ranks ddp on 1 GPU (mpi) vs 1" FAIL "$(last "$W/logs/tiny_cuda_ddp2.txt")"
fi
PROBE=$(dirname "$PLUGDIR")/conformance/conformance_probe.so
if [ $have_nccl = 1 ]; then
  train nccl1 1 --set train.steps=2 --set 'device={"type":"cuda"}' --set 'comm={"plugin":"nccl"}' \
    --set "parallel=[{\"plugin\":\"$PROBE\",\"comm_selftest\":true}]"
  rc=$?
  row "nccl world 1, every collective" "$([ $rc = 0 ] && grep -q 'checks passed' "$W/logs/nccl1.txt" && echo PASS || echo FAIL)" \
    "$(grep -m1 'comm self-test\|error' "$W/logs/nccl1.txt" | cut -c1-150)"
else
  row "nccl world 1, every collective" SKIP "nccl.so was not built"
fi

# ---- 3. GPT-2 124M: loom fp32 / bf16, PyTorch fp32 / bf16, cuBLAS bf16 GEMM ----
cat > "$W/gpt2.json" <<EOF
{"model": {"vocab_size": 50257, "context_length": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768},
 "data": {"train": "x", "vocab": "x"},
 "train": {"micro_batch_size": 16, "seq_len": 1024, "grad_accum_steps": 1, "steps": 12,
           "eval_interval": 0, "seed": 1},
 "optimizer": {"name": "adamw", "lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1, "grad_clip": 1.0},
 "device": {"type": "cuda"}, "comm": {"plugin": "mpi"}, "parallel": [],
 "precision": {"plugin": "fp32"}, "logging": {"interval": 1}, "sample": {"tokens": 0}}
EOF
timeout 60 python3 bench/gpt2_torch.py gemm > "$W/logs/gemm.txt" 2>&1
GEMM=$(tail -1 "$W/logs/gemm.txt" | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["bf16_gemm_tflops"])' 2>/dev/null || echo 0)
row "cuBLAS bf16 GEMM 8192^3" "$([ "$GEMM" != 0 ] && echo ok || echo FAIL)" "$GEMM TFLOP/s (the MFU denominator)"
# tokens/s: median over steps 4..12 (after warm-up); FLOPs per token 6N + 12 L T C
tps() { python3 - "$1" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
print("%.0f" % statistics.median(x["tokens_per_s"] for x in r[3:]) if len(r) > 3 else 0)
PY
}
mfu() { python3 -c "n=$1; print('%.1f' % (100 * $2 * (6 * n + 12 * 12 * 1024 * 768) / ($GEMM * 1e12)) if $GEMM else 0)"; }
for dt in fp32 bf16; do
  TRAIN_TIMEOUT=100 train "gpt2_$dt" 1 --config "$W/gpt2.json" --set "precision={\"plugin\":\"$dt\"}" \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$W/gpt2_$dt/ckpt\",\"every\":0,\"keep\":0}"
  N=$(grep -om1 '[0-9]* parameters' "$W/logs/gpt2_$dt.txt" | cut -d' ' -f1)
  T=$(tps "$W/gpt2_$dt/metrics.jsonl" 2>/dev/null || echo 0)
  if [ -n "$N" ] && [ "$T" != 0 ]; then
    row "GPT-2 124M loom $dt" ok "$T tok/s, MFU $(mfu "$N" "$T") % of measured bf16 GEMM (N = $N)"
  else
    row "GPT-2 124M loom $dt" FAIL "$(tail -1 "$W/logs/gpt2_$dt.txt" | cut -c1-150)"
  fi
  timeout 150 python3 bench/gpt2_torch.py train --dtype "$dt" --batch 16 --seq 1024 --steps 8 \
    > "$W/logs/torch_$dt.txt" 2>&1
  PT=$(tail -1 "$W/logs/torch_$dt.txt" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f %d %.0f" % (r["tokens_per_s"], r["params"], r["warmup_s"]))' 2>/dev/null || echo "0 0 0")
  set -- $PT
  if [ "$1" != 0 ]; then
    row "GPT-2 124M PyTorch $dt" ok "$1 tok/s, MFU $(mfu "$2" "$1") % (torch.compile warm-up $3 s); loom/PyTorch = $(python3 -c "print('%.2f' % (${T:-0} / $1))")"
  else
    row "GPT-2 124M PyTorch $dt" FAIL "$(tail -1 "$W/logs/torch_$dt.txt" | cut -c1-150)"
  fi
done

# ---- 4. peak GPU memory per category (the bf16 run) against loom estimate ----
mem_compare "$W/gpt2_bf16/metrics.jsonl" "$W/gpt2.json" --set 'precision={"plugin":"bf16"}'
row "peak memory vs loom estimate (bf16)" "$([ -s "$W/logs/memory.txt" ] && echo ok || echo FAIL)" \
  "$(tr '\n' ';' < "$W/logs/memory.txt" | cut -c1-300)"

# ---- the table ----
{
  echo "## gpu_check $(date -u +%F) on $(head -1 "$W/logs/gpus.txt" | cut -c1-60), $(($(date +%s) - T0)) s"
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${ROWS[@]}"
} | tee "$RES/gpu_check.md"
tar -czf "$RES/gpu_check_logs.tar.gz" -C "$W" logs 2>/dev/null
