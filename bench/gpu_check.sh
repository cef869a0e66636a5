#!/bin/bash
# bench/gpu_check.sh — issue #9's GPU check, one script, run unchanged from the repository root
# on a machine with one NVIDIA GPU (the device machine: an H200) inside one 10-minute command,
# the carry's unpacking included. It prints one summary table (docs/gpu.md explains every row):
#   1. where CUDA's and NCCL's libraries are (a missing NCCL is a SKIP row, not an abort)
#   2. the device conformance suite on cuda (fp32 and bf16 inputs; and TF32 GEMMs, quick)
#   3. configs/tiny.json, 30 steps, fp32: cuda against cpu per-step loss; 2 ranks ddp on the one
#      GPU through mpi.so against 1 rank; nccl.so on 1 rank through every collective
#   4. configs/gpt2.json (GPT-2 124M, V 50257 padded to 50304, T 1024, B 16) on the GPU: tokens/s
#      and MFU (6N + 12 L T C FLOPs per token) in fp32 and bf16, against the bf16 GEMM rate of
#      cuBLAS measured here and against PyTorch (torch.compile, SDPA, fused AdamW) measured here
#   5. peak GPU memory per category of the bf16 run against `loom estimate`
#
# loom comes from tools/gpu_carry.sh's .gpu_carry/ (a Release install tree built with CUDA plus
# the Debian runtime packages, unpacked here into a private root: that machine has no package
# registry), or from build/ (LOOM_BUILD=DIR: that build) when loom was built on this machine.
#
#   bench/gpu_check.sh               the check (exit 3, with the reason, when there is no GPU)
#   bench/gpu_check.sh --rehearse    every row's own config end to end on the CPU device, on any
#                                    machine: the same commands with device cpu (B 1 and 2 steps
#                                    for GPT-2, after `loom check` at its own B 16), comm mpi for
#                                    nccl's row, the library search against a relocated toolkit
#                                    (GPU_CHECK_REHEARSE_NO_NCCL=1: one without NCCL); PyTorch's
#                                    and cuBLAS's rows SKIP (CUDA only). Exit 0 unless a row FAILs
#   --quick                          with --rehearse: conformance --quick, GPT-2 1 step, and
#                                    GPT-2 fp32 `loom check` only (bf16 trains: its row and the
#                                    memory row take the same code path) (CI)
#   --deadline SECONDS               rows that would start later than SECONDS after the start
#                                    are SKIP rows, a running one is stopped there (default 480)
# Results: each row as it completes, on stdout and appended to $OUT/gpu_check.md (OUT: the
# device tool's folder that comes back; /tmp/loom_gpu_check otherwise), logs refreshed in
# $OUT/gpu_check_logs.tar.gz after every row, so a killed run still leaves them; at the end the
# whole table, every row in it (those not run: SKIP with why). Every step has its own time
# limit and none runs past the deadline: about 4 minutes expected on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
REHEARSE=0 QUICK=0 DEADLINE_S=${GPU_CHECK_DEADLINE_S:-480}
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) REHEARSE=1 ;;
    --quick) QUICK=1 ;;
    --deadline) DEADLINE_S=${2:-}; shift ;;
    --deadline=*) DEADLINE_S=${1#*=} ;;
    -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown option '$1' (--rehearse, --quick, --deadline SECONDS)" >&2
       exit 2 ;;
  esac
  shift
done
case $DEADLINE_S in '' | *[!0-9]*)
  echo "gpu_check: --deadline wants whole seconds, got '$DEADLINE_S'" >&2; exit 2 ;; esac
RES=${OUT:-/tmp/loom_gpu_check}
W=$(mktemp -d /tmp/loom_gpu_check.XXXXXX)
mkdir -p "$RES" "$W/logs"
T0=$(date +%s)
DEADLINE_AT=$((T0 + DEADLINE_S))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

# ---- rows: the table always has all of them, in this order ----
ROW_NAMES=("carry" "CUDA and NCCL libraries" "GPU" "conformance cuda (fp32, bf16)"
  "conformance cuda, TF32 GEMMs" "tiny 30 steps cuda vs cpu" "2 ranks ddp on 1 GPU (mpi) vs 1"
  "nccl world 1, every collective" "cuBLAS bf16 GEMM 8192^3" "GPT-2 124M loom fp32"
  "GPT-2 124M PyTorch fp32" "GPT-2 124M loom bf16" "GPT-2 124M PyTorch bf16"
  "peak memory vs loom estimate (bf16)")
declare -A ROWS
FAILS=0 HIT=0 GPUNAME="no GPU"
MODE=$([ $REHEARSE = 1 ] && echo ", rehearsal on the CPU device" || true)
title() { echo "## gpu_check $(date -u +%F) on $GPUNAME$MODE, $1"; }
{ title "running (rows appended as they complete; deadline $DEADLINE_S s)"; echo
  echo "| check | result | detail |"; echo "| --- | --- | --- |"; } > "$RES/gpu_check.md"
# the log archive, replaced whole (a run killed while it is written keeps the previous one);
# tar's exit 1 (a log still growing as it was read, e.g. a stopped command's child) is a
# complete archive all the same
logs() {
  local rc=0
  tar -czf "$RES/gpu_check_logs.tar.gz.part" -C "$W" logs 2>/dev/null || rc=$?
  [ $rc -le 1 ] && mv "$RES/gpu_check_logs.tar.gz.part" "$RES/gpu_check_logs.tar.gz"
}
# row NAME STATUS DETAIL: one row, printed and appended to the table as it completes. A FAIL
# whose command the deadline stopped (HIT) is a SKIP: the code did not fail, time ran out.
row() {
  local st=$2 why=$3
  if [ "$st" = FAIL ] && [ $HIT = 1 ]; then
    st=SKIP why="deadline: stopped at $DEADLINE_S s; $why"
  fi
  [ "$st" = FAIL ] && FAILS=$((FAILS + 1))
  ROWS[$1]="| $1 | $st | $why |"
  printf '[%4ds] %-36s %-5s %s\n' $(($(date +%s) - T0)) "$1" "$st" "$why"
  logs # first: a row in the table has its logs in the archive, whenever the run is killed
  echo "${ROWS[$1]}" >> "$RES/gpu_check.md"
}
# finish RC WHY: the whole table (rows never reached: SKIP, WHY), the logs, exit RC
finish() {
  local n
  { title "$(($(date +%s) - T0)) s (deadline $DEADLINE_S s)"; echo
    echo "| check | result | detail |"; echo "| --- | --- | --- |"
    for n in "${ROW_NAMES[@]}"; do echo "${ROWS[$n]:-| $n | SKIP | not run: $2 |}"; done
  } > "$RES/gpu_check.md.part" && mv "$RES/gpu_check.md.part" "$RES/gpu_check.md"
  cat "$RES/gpu_check.md"
  logs
  exit "$1"
}
die() { echo "gpu_check: $*" >&2; row "$CUR" FAIL "$*"; finish 1 "the check stopped at '$CUR'"; }
# start NAME: 0 when the row may start; past the deadline, its SKIP row and 1
start() {
  CUR=$1 HIT=0
  [ "$(date +%s)" -lt $DEADLINE_AT ] && return 0
  row "$1" SKIP \
    "deadline: not started, $(($(date +%s) - T0)) s after the start (--deadline $DEADLINE_S)"
  return 1
}
# tmo SECONDS CMD...: CMD under SECONDS or the time left before the deadline, whichever is less
tmo() {
  local s=$1 capped=0 rc left=$((DEADLINE_AT - $(date +%s)))
  shift
  [ "$left" -lt "$s" ] && s=$left capped=1
  [ "$s" -ge 1 ] || { HIT=1; return 124; }
  timeout -k 5 "$s" "$@"
  rc=$?
  [ $capped = 1 ] && { [ $rc = 124 ] || [ $rc = 137 ]; } && HIT=1
  return $rc
}
L() { "${LENV[@]}" "$@"; }               # a loom command, with loom's library path
Lt() { local s=$1; shift; tmo "$s" "${LENV[@]}" "$@"; } # the same, under a time limit

# ---- where CUDA's libraries are: cuda.so and nccl.so carry a RUNPATH of the build machine's
# toolkit and a standard install's places; this machine may have them elsewhere (a versioned
# /usr/local/cuda-X.Y, CUDA_HOME, or only the pip wheels' nvidia/*/lib, where PyTorch's NCCL
# lives). Every directory found goes to loom's commands' LD_LIBRARY_PATH (not to python's: torch
# keeps the libraries it was built with). GPU_CHECK_CUDA_ROOTS replaces the toolkit roots.
PY_SEARCH=(python3)
cuda_libdirs() {
  local arch r d real seen=" " roots
  arch=$(uname -m)
  [ "$arch" = aarch64 ] && arch=sbsa
  roots=${GPU_CHECK_CUDA_ROOTS-"${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda
    $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV) /opt/cuda"}
  {
    for r in $roots; do
      for d in lib64 lib "targets/$arch-linux/lib"; do [ -d "$r/$d" ] && echo "$r/$d"; done
    done
    command -v python3 > /dev/null && timeout 30 "${PY_SEARCH[@]}" - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia  # the wheels' namespace package: nvidia/cublas/lib, nvidia/nccl/lib, ...
except Exception:
    raise SystemExit(0)
for p in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(p, "*", "lib"))):
        print(d)
PY
  } | while read -r d; do # one entry per real directory (lib64 is often a link to lib)
    real=$(readlink -f "$d")
    case $seen in *" $real "*) ;; *) seen="$seen$real "; echo "$d" ;; esac
  done
}
# unresolved SO: the libraries SO needs that do not resolve with loom's library path (the
# driver's libcuda.so.1 aside: the machine's own, absent without a GPU)
unresolved() { L ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | grep -v '^libcuda\.so' ; }
# resolved SO LIB: where SO's library LIB... resolves
resolved() { L ldd "$1" 2>/dev/null | awk -v l="$2" 'index($1, l) == 1 {print $3; exit}'; }
# relocate SO OUT [LIB]: a copy of SO whose RUNPATH names a directory that does not exist (the
# same length: the string is patched in place), so only the search can find its libraries;
# with LIB (a soname such as libnccl.so.2), it needs LIB's major 9 instead, which no machine has:
# this machine's ld.so.cache may know the real one, and a library the copy cannot find anywhere
# is what a GPU machine without NCCL looks like
relocate() {
  local rp
  rp=$(readelf -d "$1" 2>/dev/null | sed -n 's/.*Library r[a-z]*path: \[\(.*\)\]/\1/p' | head -1)
  python3 - "$1" "$2" "$rp" "${3:-}" <<'PY'
import re, sys
src, dst, rp, lib = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode()
b = open(src, "rb").read()
if rp:
    b = b.replace(rp + b"\0", b"/" + b"x" * (len(rp) - 1) + b"\0")
if lib:
    b = b.replace(b"\0" + lib + b"\0", b"\0" + re.sub(rb"\d+$", lambda m: b"9" * len(m[0]), lib)
                  + b"\0")
open(dst, "wb").write(b)
PY
}
# fake_toolkit: the rehearsal's GPU machine, with this machine's CUDA libraries where another
# install puts them: the toolkit under targets/<arch>-linux/lib only (no lib, no lib64), NCCL
# only in a wheel's nvidia/nccl/lib (none with GPU_CHECK_REHEARSE_NO_NCCL=1), and the plugins'
# RUNPATH pointing nowhere. The search and the checks below then run as on a GPU machine.
fake_toolkit() {
  local arch so lib f
  arch=$(uname -m)
  [ "$arch" = aarch64 ] && arch=sbsa
  FAKE_LIB=$W/toolkit/targets/$arch-linux/lib FAKE_NCCL=$W/site/nvidia/nccl/lib
  mkdir -p "$FAKE_LIB" "$FAKE_NCCL" "$W/relocated"
  for so in cuda.so nccl.so; do
    [ -f "$PLUGDIR/$so" ] || continue
    L ldd "$PLUGDIR/$so" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}' | while read -r lib f; do
      case $lib in
        libnccl*) [ "${GPU_CHECK_REHEARSE_NO_NCCL:-0}" = 1 ] || ln -sf "$f" "$FAKE_NCCL/$lib" ;;
        libcudart* | libcublas*) ln -sf "$f" "$FAKE_LIB/$lib" ;;
      esac
    done
    if [ $so = nccl.so ] && [ "${GPU_CHECK_REHEARSE_NO_NCCL:-0}" = 1 ]; then
      relocate "$PLUGDIR/$so" "$W/relocated/$so" \
        "$(L ldd "$PLUGDIR/$so" 2>/dev/null | awk '$1 ~ /^libnccl/ {print $1; exit}')"
    else
      relocate "$PLUGDIR/$so" "$W/relocated/$so"
    fi
  done
  GPU_CHECK_CUDA_ROOTS=$W/toolkit CHECKDIR=$W/relocated
  PY_SEARCH=(env "PYTHONPATH=$W/site" python3 -S) # -S: the fake wheel only, not the machine's
}

# ---- loom: the carried tree or a local build ----
start "carry"
CUDA_LD=
if [ -d .gpu_carry/prefix ] && [ -z "${LOOM_BUILD:-}" ]; then
  ROOT=/tmp/loom_root
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  for d in .gpu_carry/debs/*.deb; do dpkg -x "$d" "$ROOT" || die "dpkg -x $d failed"; done
  PREFIX=$SRC/.gpu_carry/prefix
  LIBS="$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/lib/x86_64-linux-gnu"
  # Debian's alternatives symlinks (libopenblas, libpsm) are not in the debs: their real folders
  LIBS="$LIBS:$ROOT/usr/lib/x86_64-linux-gnu/openmpi/lib"
  LIBS="$LIBS:$ROOT/usr/lib/x86_64-linux-gnu/openblas-pthread"
  LIBS="$LIBS:$ROOT/usr/lib/libpsm1"
  # and some ship only the versioned file: make the soname links (ldconfig -n: those folders only)
  for d in ${LIBS//:/ }; do [ -d "$d" ] && ldconfig -n "$d" 2>/dev/null; done
  # only loom's commands see the carried libraries (python and torch keep the machine's own)
  set_lenv() {
    LENV=(env "LD_LIBRARY_PATH=$LIBS${CUDA_LD:+:$CUDA_LD}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
          "OPAL_PREFIX=$ROOT/usr" "PATH=$ROOT/usr/bin:$PATH")
  }
  LOOM=$PREFIX/bin/loom PREPARE=$PREFIX/bin/loom-prepare PLUGDIR=$PREFIX/lib/loom/plugins
  MPIRUN=$ROOT/usr/bin/orterun # Debian's mpirun is an alternatives link, not in the deb
  CARRIED=1
elif [ -x "${LOOM_BUILD:-build}/bin/loom" ]; then
  set_lenv() {
    LENV=(env ${CUDA_LD:+"LD_LIBRARY_PATH=$CUDA_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"})
  }
  B=$(cd "${LOOM_BUILD:-build}" && pwd)
  LOOM=$B/bin/loom PREPARE=$B/bin/loom-prepare PLUGDIR=$B/lib/loom/plugins
  MPIRUN=mpirun
  CARRIED=0
else
  LENV=(env)
  die "no loom here: run tools/gpu_carry.sh on the build machine and carry .gpu_carry, or build"
fi
set_lenv
CHECKDIR=$PLUGDIR
[ $REHEARSE = 1 ] && fake_toolkit
CUDA_LD=$(cuda_libdirs | paste -sd: -)
set_lenv
if [ $CARRIED = 1 ]; then
  # every library resolves, and inside the carry unless it is the C runtime or CUDA's (the
  # machine's own): a library found on the build machine's system would be missing there.
  # CUDA's and NCCL's own are the next row's business (a missing NCCL only SKIPs its row).
  deps=$(for f in "$LOOM" "$PREPARE" "$PLUGDIR"/*.so "$ROOT"/usr/bin/orterun \
           "$ROOT"/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so; do L ldd "$f" 2>/dev/null
         done | sort -u)
  missing=$(grep 'not found' <<<"$deps" | grep -v 'libcuda\.so\|libcudart\|libcublas\|libnccl' ||
            true)
  [ -z "$missing" ] || die "libraries missing from the carry: $missing"
  own="^$ROOT/\|^/usr/local/cuda\|/libc\.so\|/libm\.so\|/libgcc_s\|/libstdc++\|/ld-linux"
  own="$own\|/libdl\.so\|/libpthread\|/librt\.so\|/libcuda\|/libnvidia\|/libcudart\|/libcublas"
  own="$own\|/libnccl"
  outside=$(awk '/=> \// {print $3}' <<<"$deps" | grep -v "$own" | sort -u || true)
  [ -z "$outside" ] || die "libraries the carry lacks (found on this system only): $(echo $outside)"
  relocated=$(L ompi_info --path pkglibdir --parsable 2>/dev/null | cut -d: -f3-)
  case "$relocated" in "$ROOT"/*) ;;
    *) die "Open MPI is not relocated into the carry ($relocated)" ;; esac
  n=$(ls .gpu_carry/debs | wc -l)
  row "carry" ok "$(du -sm .gpu_carry | cut -f1) MiB carried, $n debs unpacked; every library \
resolves inside"
else
  row "carry" ok "none: using $B (loom built on this machine)"
fi
L "$LOOM" version > "$W/logs/version.txt" 2>&1 ||
  die "loom does not run: $(cat "$W/logs/version.txt")"
L "$LOOM" plugins > "$W/logs/plugins.txt" 2>&1

# ---- CUDA's and NCCL's libraries: cuda.so's must resolve on a GPU machine; nccl.so's missing
# only SKIPs nccl's row. In the rehearsal: against fake_toolkit's layout, which must be found.
start "CUDA and NCCL libraries"
have_cuda=0 have_nccl=0 cuda_why="cuda.so was not built (no CUDA toolkit where loom was built)"
nccl_why="nccl.so was not built (no CUDA toolkit or NCCL where loom was built)"
searched="searched: ${CUDA_LD:-no CUDA library directory found}"
if [ -f "$CHECKDIR/cuda.so" ]; then
  miss=$(unresolved "$CHECKDIR/cuda.so")
  if [ -z "$miss" ]; then have_cuda=1 cuda_why="cuda.so: $(resolved "$CHECKDIR/cuda.so" libcudart)"
  else cuda_why="cuda.so: $(echo $miss) not found ($searched)"; fi
fi
if [ -f "$CHECKDIR/nccl.so" ]; then
  miss=$(unresolved "$CHECKDIR/nccl.so")
  if [ -z "$miss" ]; then have_nccl=1 nccl_why="nccl.so: $(resolved "$CHECKDIR/nccl.so" libnccl)"
  else nccl_why="nccl.so: $(echo $miss) not found ($searched)"; fi
fi
echo "LD_LIBRARY_PATH for loom: $CUDA_LD" > "$W/logs/libraries.txt"
for so in "$CHECKDIR"/cuda.so "$CHECKDIR"/nccl.so; do [ -f "$so" ] && L ldd "$so"; done \
  >> "$W/logs/libraries.txt" 2>&1
if [ $REHEARSE = 1 ] && [ -f "$CHECKDIR/cuda.so" ]; then
  # the relocated layout must be where the libraries came from, not the build machine's own
  bad=
  case $cuda_why in "cuda.so: $FAKE_LIB/"*) ;; *) bad="cuda.so not from $FAKE_LIB" ;; esac
  [ $have_nccl = 0 ] || case $nccl_why in "nccl.so: $FAKE_NCCL/"*) ;;
    *) bad="$bad${bad:+; }nccl.so not from $FAKE_NCCL" ;; esac
  if [ -n "$bad" ]; then
    row "CUDA and NCCL libraries" FAIL "relocated toolkit: $bad ($cuda_why; $nccl_why)"
  else row "CUDA and NCCL libraries" ok "relocated toolkit found: $cuda_why; $nccl_why"; fi
elif [ $REHEARSE = 1 ] || [ $have_cuda = 1 ]; then
  row "CUDA and NCCL libraries" ok "$cuda_why; $nccl_why"
else
  row "CUDA and NCCL libraries" FAIL "$cuda_why; $nccl_why"
fi

L "$PREPARE" --out "$W/data" "$SRC/docs" "$SRC/core" > "$W/logs/prepare.txt" 2>&1 ||
  die "loom-prepare failed: $(tail -3 "$W/logs/prepare.txt")"
DATA=(--set "data.train=$W/data/train_*.bin" --set "data.val=$W/data/val_*.bin"
      --set "data.vocab=$W/data/vocab.json")

# ---- the GPU; the rehearsal runs every row below on the CPU device instead ----
start "GPU"
if [ $REHEARSE = 1 ]; then
  DEV='{"type":"cpu","threads":1}' DEV_SHARED=$DEV CONFDEV=cpu
  why="rehearsal: the rows below run on the CPU device"
  if [ $have_cuda = 1 ]; then # cuda.so loads and refuses with the reason, as without a GPU
    Lt 60 "$LOOM" conformance --device cuda --quick > "$W/logs/conf_rh.txt" 2>&1
    why="$why; cuda.so without a GPU: $(grep -m1 '^SKIP  device.create' "$W/logs/conf_rh.txt" |
      sed 's/^SKIP  device.create *//' | cut -c1-120)"
  fi
  row "GPU" SKIP "$why"
elif ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > "$W/logs/gpus.txt" 2>&1; then
  why="no GPU on this machine (nvidia-smi: $(head -1 "$W/logs/gpus.txt" 2>/dev/null ||
    echo 'not installed'))"
  row "GPU" FAIL "$why"
  echo "gpu_check: $why: run this script on a GPU machine for the table, or --rehearse here"
  finish 3 "no GPU"
else
  DEV='{"type":"cuda"}' DEV_SHARED='{"type":"cuda","share_gpus":true}' CONFDEV=cuda
  GPUNAME=$(head -1 "$W/logs/gpus.txt" | cut -c1-60)
  row "GPU" ok "$(head -1 "$W/logs/gpus.txt" | cut -c1-80)"
fi
# cuda's rows need cuda.so's libraries on a GPU machine; the rehearsal never loads it there
cuda_skip() {
  [ $REHEARSE = 0 ] && [ $have_cuda = 0 ] && { row "$1" FAIL "$cuda_why"; return 0; }
  return 1
}

# train NAME NP ARGS...: configs/tiny.json (or --config) into $W/NAME, metrics every step
train() {
  local name=$1 np=$2 cfg=$SRC/configs/tiny.json
  shift 2
  if [ "${1:-}" = "--config" ]; then cfg=$2; shift 2; fi
  mkdir -p "$W/$name"
  Lt "${TRAIN_TIMEOUT:-120}" "$MPIRUN" -np "$np" --bind-to none "$LOOM" train "$cfg" "${DATA[@]}" \
    --set "logging.metrics=$W/$name/metrics.jsonl" --set logging.interval=1 \
    --set train.eval_interval=0 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$W/$name/ckpt\",\"every\":0,
           \"keep\":1}" \
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
  Lt 60 "$LOOM" estimate "$cfg" "$@" > "$W/logs/estimate.txt" 2>&1 &&
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

# ---- 1. the device conformance suite on cuda (the rehearsal: on cpu) ----
# conf_row NAME LOG RC: PASS / FAIL, or what create_ex said when the device refused (on a GPU
# machine a refusal of the plain run is a failure; of the TF32 run, an option it lacks)
conf_row() {
  local why
  why=$(grep -m1 '^SKIP  device.create' "$2" | sed 's/^SKIP  device.create *//' | cut -c1-150)
  if [ -n "$why" ]; then row "$1" "$4" "$CONFDEV refused: $why"
  elif [ "$3" = 0 ]; then row "$1" PASS "$(grep '^summary' "$2" | cut -c10-150)"
  else row "$1" FAIL "$(grep -m1 '^FAIL' "$2" | cut -c1-150)$([ "$3" = 124 ] && echo "timed out")"
  fi
}
Q=$([ $QUICK = 1 ] && echo --quick || true)
if start "conformance cuda (fp32, bf16)" && ! cuda_skip "$CUR"; then
  Lt 120 "$LOOM" conformance --device $CONFDEV $Q > "$W/logs/conformance_cuda.txt" 2>&1
  conf_row "$CUR" "$W/logs/conformance_cuda.txt" $? FAIL
fi
if start "conformance cuda, TF32 GEMMs" && ! cuda_skip "$CUR"; then
  Lt 60 "$LOOM" conformance --device $CONFDEV --options "{\"type\":\"$CONFDEV\",\"tf32\":true}" \
    --dtype fp32 --quick > "$W/logs/conformance_cuda_tf32.txt" 2>&1
  conf_row "$CUR" "$W/logs/conformance_cuda_tf32.txt" $? SKIP
fi

# ---- 2. tiny: cuda vs cpu, 2 ranks on one GPU, NCCL world 1 ----
# Tolerance cuda vs cpu: the same fp32 model with other summation orders (cuBLAS, the CUDA
# kernels' reductions): per step 2·λ·√n·u with the model path n (docs/tolerances.md, ~2e-5 for
# tiny), grown by 30 Adam steps; 1e-4 on loss and grad norm, 1e-3 on the final parameters.
T1=(--set train.steps=30 --set 'parallel=[]')
if start "tiny 30 steps cuda vs cpu" && ! cuda_skip "$CUR"; then
  train tiny_cpu 1 "${T1[@]}" && train tiny_cuda 1 "${T1[@]}" --set "device=$DEV"
  if [ $? = 0 ] &&
     compare tiny_cuda tiny_cpu --rtol-loss 1e-4 --rtol-grad-norm 1e-4 --rtol-params 1e-3; then
    row "$CUR" PASS "$(last "$W/logs/compare_tiny_cuda_tiny_cpu.txt")"
  else
    row "$CUR" FAIL "$(last "$W/logs/compare_tiny_cuda_tiny_cpu.txt" 2>/dev/null ||
      last "$W/logs/tiny_cuda.txt")"
  fi
fi
# 2 ranks ddp sharing the GPU through mpi.so (staged through host memory) vs 1 rank, same
# global batch: the equivalence tests' fp32 bound, 1e-5. cuda.so gives each local rank its own
# GPU unless "share_gpus" allows more ranks than GPUs.
if start "2 ranks ddp on 1 GPU (mpi) vs 1" && ! cuda_skip "$CUR"; then
  train tiny_cuda_1r 1 --set train.steps=30 --set 'parallel=[]' --set train.micro_batch_size=8 \
    --set "device=$DEV" &&
    train tiny_cuda_ddp2 2 --set train.steps=30 --set train.micro_batch_size=4 \
      --set "device=$DEV_SHARED"
  if [ $? = 0 ] && compare tiny_cuda_ddp2 tiny_cuda_1r --rtol 1e-5; then
    row "$CUR" PASS "$(last "$W/logs/compare_tiny_cuda_ddp2_tiny_cuda_1r.txt")"
  else
    row "$CUR" FAIL "$(last "$W/logs/compare_tiny_cuda_ddp2_tiny_cuda_1r.txt" 2>/dev/null ||
      last "$W/logs/tiny_cuda_ddp2.txt")"
  fi
fi
# nccl.so needs a GPU: the rehearsal runs the same self-test through mpi.so on the CPU device
PROBE=$(dirname "$PLUGDIR")/conformance/conformance_probe.so
if [ $have_nccl = 0 ]; then
  row "nccl world 1, every collective" SKIP "$nccl_why"
elif start "nccl world 1, every collective" && ! cuda_skip "$CUR"; then
  COMM=$([ $REHEARSE = 1 ] && echo mpi || echo nccl)
  train nccl1 1 --set train.steps=2 --set "device=$DEV" --set "comm={\"plugin\":\"$COMM\"}" \
    --set "parallel=[{\"plugin\":\"$PROBE\",\"comm_selftest\":true}]"
  rc=$?
  st=$([ $rc = 0 ] && grep -q 'checks passed' "$W/logs/nccl1.txt" && echo PASS || echo FAIL)
  row "$CUR" "$st" "$([ $REHEARSE = 1 ] && echo "rehearsal, comm mpi: ")$(
    grep -m1 'comm self-test\|error' "$W/logs/nccl1.txt" | cut -c1-150)"
fi

# ---- 3. GPT-2 124M (configs/gpt2.json): loom fp32 / bf16, PyTorch fp32 / bf16, cuBLAS ----
G=$SRC/configs/gpt2.json
GPT_SET=(--set "device=$DEV")
# the rehearsal: `loom check` at the config's own B 16 first (preflight sees the real shape:
# data, eval_batches), then train at B 1 (B 16 x T 1024 wants ~40 GiB and minutes per step on a
# CPU), 2 steps (--quick: 1)
[ $REHEARSE = 1 ] && GPT_SET+=(--set train.micro_batch_size=1 --set "train.steps=$((2 - QUICK))")
GEMM=0
if [ $REHEARSE = 1 ]; then
  row "cuBLAS bf16 GEMM 8192^3" SKIP "rehearsal: torch.matmul on CUDA needs a GPU"
elif start "cuBLAS bf16 GEMM 8192^3"; then
  tmo 60 python3 bench/gpt2_torch.py gemm > "$W/logs/gemm.txt" 2>&1
  GEMM=$(tail -1 "$W/logs/gemm.txt" | python3 -c \
    'import json,sys; print("%.1f" % json.load(sys.stdin)["bf16_gemm_tflops"])' 2>/dev/null ||
    echo 0)
  row "$CUR" "$([ "$GEMM" != 0 ] && echo ok || echo FAIL)" "$GEMM TFLOP/s (the MFU denominator)"
fi
# tokens/s: median over the steps after 3 of warm-up (all of them when there are no more: the
# rehearsal); FLOPs per token 6N + 12 L T C
tps() { python3 - "$1" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
r = r[3:] if len(r) > 3 else r
print("%.0f" % statistics.median(x["tokens_per_s"] for x in r) if r else 0)
PY
}
mfu() {
  [ "$GEMM" != 0 ] || { echo "n/a (no GEMM rate measured)"; return; }
  python3 -c "n=$1; print('%.1f %% of the measured bf16 GEMM'
    % (100 * $2 * (6 * n + 12 * 12 * 1024 * 768) / ($GEMM * 1e12)))"
}
for dt in fp32 bf16; do
  P=(--set "precision={\"plugin\":\"$dt\"}")
  T=0
  if start "GPT-2 124M loom $dt" && ! cuda_skip "$CUR"; then
    ok=1
    if [ $REHEARSE = 1 ]; then
      chk=$W/logs/gpt2_${dt}_check.txt
      Lt 60 "$LOOM" check "$G" "${DATA[@]}" --set "device=$DEV" "${P[@]}" > "$chk" 2>&1 ||
        { ok=0; row "$CUR" FAIL "loom check at B 16: $(tail -1 "$chk" | cut -c1-200)"; }
    fi
    if [ $ok = 1 ] && [ $REHEARSE = 1 ] && [ $QUICK = 1 ] && [ $dt = fp32 ]; then
      ok=0
      row "$CUR" SKIP "--quick: loom check at B 16 passed; training is the bf16 row's"
    fi
    if [ $ok = 1 ]; then
      TRAIN_TIMEOUT=100 train "gpt2_$dt" 1 --config "$G" "${GPT_SET[@]}" "${P[@]}" \
        --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$W/gpt2_$dt/ckpt\",\"every\":0,
               \"keep\":0}"
      N=$(grep -om1 '[0-9]* parameters' "$W/logs/gpt2_$dt.txt" | cut -d' ' -f1)
      T=$(tps "$W/gpt2_$dt/metrics.jsonl" 2>/dev/null || echo 0)
      if [ -n "$N" ] && [ "$T" != 0 ] && grep -q 'val loss' "$W/logs/gpt2_$dt.txt"; then
        row "$CUR" ok "$T tok/s, MFU $(mfu "$N" "$T") (N = $N)$([ $REHEARSE = 1 ] &&
          echo "; rehearsal: B 1, cpu")"
      else
        row "$CUR" FAIL "$(tail -1 "$W/logs/gpt2_$dt.txt" | cut -c1-150)"
      fi
    fi
  fi
  if [ $REHEARSE = 1 ]; then
    row "GPT-2 124M PyTorch $dt" SKIP "rehearsal: bench/gpt2_torch.py trains on CUDA only"
  elif start "GPT-2 124M PyTorch $dt"; then
    tmo 150 python3 bench/gpt2_torch.py train --dtype "$dt" --batch 16 --seq 1024 --steps 8 \
      > "$W/logs/torch_$dt.txt" 2>&1
    PT=$(tail -1 "$W/logs/torch_$dt.txt" | python3 -c 'import json,sys; r=json.load(sys.stdin)
print("%.0f %d %.0f" % (r["tokens_per_s"], r["params"], r["warmup_s"]))' 2>/dev/null ||
      echo "0 0 0")
    set -- $PT
    if [ "$1" != 0 ]; then
      ratio=$(python3 -c "print('%.2f' % (${T:-0} / $1))")
      row "$CUR" ok "$1 tok/s, MFU $(mfu "$2" "$1") (torch.compile warm-up $3 s); \
loom/PyTorch = $ratio"
    else
      row "$CUR" FAIL "$(tail -1 "$W/logs/torch_$dt.txt" | cut -c1-150)"
    fi
  fi
done

# ---- 4. peak GPU memory per category (the bf16 run) against loom estimate ----
if start "peak memory vs loom estimate (bf16)" && ! cuda_skip "$CUR"; then
  if [ -s "$W/gpt2_bf16/metrics.jsonl" ] &&
     mem_compare "$W/gpt2_bf16/metrics.jsonl" "$G" "${GPT_SET[@]}" \
       --set 'precision={"plugin":"bf16"}'; then
    row "$CUR" ok "$(tr '\n' ';' < "$W/logs/memory.txt" | cut -c1-300)"
  else
    row "$CUR" FAIL "$([ -s "$W/gpt2_bf16/metrics.jsonl" ] && cat "$W/logs/estimate.txt" \
      "$W/logs/memory.txt" 2>/dev/null | tail -1 | cut -c1-200 || echo "no bf16 run to measure")"
  fi
fi

finish $([ $FAILS = 0 ] && echo 0 || echo 1) "?"
