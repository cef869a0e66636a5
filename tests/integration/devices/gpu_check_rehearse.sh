#!/bin/bash
# bench/gpu_check.sh --rehearse on this machine (issue #21, items 1, 5, 9): every row of the GPU
# check runs its own config on the CPU device, or is a SKIP row with its reason, and the table
# has every row. Three cases:
#   full      --rehearse --quick: every row ran or SKIPped with a reason; the library search
#             found the relocated toolkit (libraries under targets/<arch>-linux/lib, NCCL in a
#             wheel's nvidia/nccl/lib); GPT-2's rows ran configs/gpt2.json (preflight at B 16;
#             bf16 trained, fp32 checked only: --quick)
#   slow      --rehearse: as full, and GPT-2 fp32 trained too (tools/test.sh --full)
#   deadline  no NCCL on the rehearsed machine and --deadline 3: nccl's row is a SKIP naming the
#             missing library (not an abort), the rows past the deadline are SKIP (deadline),
#             the script exits 0 well inside its deadline's reach, the table is complete
#   killed    the run killed (SIGKILL) once a few rows are done: $OUT/gpu_check.md and the log
#             archive hold the rows completed before
# GPU_CHECK=PATH runs another copy of the script (to see these fail on an older one).
# ctest: name=bench.gpu_check_rehearse args=full labels=device,normal-only timeout=300 cost=45
# ctest: name=bench.gpu_check_rehearse_slow args=slow labels=device,normal-only,matrix timeout=300
# ctest: name=bench.gpu_check_deadline args=deadline labels=device timeout=120
# ctest: name=bench.gpu_check_killed args=killed labels=device,normal-only timeout=300
set -uo pipefail
mode=${1:?usage: gpu_check_rehearse.sh full|deadline|killed}
: "${LOOM_BUILD:?}" "${LOOM_SRC:?}"
script=${GPU_CHECK:-$LOOM_SRC/bench/gpu_check.sh}
OUT=$LOOM_BUILD/gpu_check_$mode
rm -rf "$OUT" && mkdir -p "$OUT"
export OUT LOOM_BUILD
fails=0
fail() { echo "gpu_check_rehearse $mode: FAIL: $*"; fails=$((fails + 1)); }
rows=("carry" "CUDA and NCCL libraries" "GPU" "conformance cuda (fp32, bf16)"
  "conformance cuda, TF32 GEMMs" "tiny 30 steps cuda vs cpu" "2 ranks ddp on 1 GPU (mpi) vs 1"
  "nccl world 1, every collective" "cuBLAS bf16 GEMM 8192^3" "GPT-2 124M loom fp32"
  "GPT-2 124M PyTorch fp32" "GPT-2 124M loom bf16" "GPT-2 124M PyTorch bf16"
  "peak memory vs loom estimate (bf16)")
# status NAME: the result column of NAME's row in $OUT/gpu_check.md (its last one)
status() { awk -F' [|] ' -v n="$1" '$1 == "| " n {s = $2} END {print s}' "$OUT/gpu_check.md"; }
detail() { awk -F' [|] ' -v n="$1" '$1 == "| " n {s = $3} END {print s}' "$OUT/gpu_check.md"; }
# every_row OK...: each row is in the table once, with a result in OK... and, when SKIP, a reason
every_row() {
  local n st
  for n in "${rows[@]}"; do
    [ "$(grep -c -F "| $n | " "$OUT/gpu_check.md")" = 1 ] || fail "the table has not one '$n' row"
    st=$(status "$n")
    case " $* " in *" $st "*) ;; *) fail "'$n': '$st', expected one of: $*" ;; esac
    [ "$st" != SKIP ] || [ -n "$(detail "$n" | tr -d ' |')" ] || fail "'$n': SKIP without a reason"
  done
}
cuda_built() { [ -f "$LOOM_BUILD/lib/loom/plugins/cuda.so" ]; }
nccl_built() { [ -f "$LOOM_BUILD/lib/loom/plugins/nccl.so" ]; }

case $mode in
  full | slow)
    quick=$([ "$mode" = full ] && echo --quick || true)
    bash "$script" --rehearse $quick > "$OUT/stdout.txt" 2>&1
    rc=$?
    cat "$OUT/stdout.txt"
    [ $rc = 0 ] || fail "exit $rc, expected 0"
    every_row PASS ok SKIP
    # the rows that can run on a CPU did: only the GPU, cuBLAS, PyTorch and TF32 rows SKIP
    for n in "${rows[@]}"; do
      case $n in GPU | "cuBLAS bf16 GEMM 8192^3" | *PyTorch* | *TF32*) continue ;; esac
      [ "$n" = "nccl world 1, every collective" ] && ! nccl_built && continue
      if [ "$n" = "GPT-2 124M loom fp32" ] && [ -n "$quick" ]; then
        [ "$(status "$n")" = SKIP ] && detail "$n" | grep -q 'loom check at B 16 passed' ||
          fail "'$n' under --quick: expected a SKIP after loom check passed: $(detail "$n")"
        continue
      fi
      case $(status "$n") in PASS | ok) ;; *) fail "'$n' did not run: $(detail "$n")" ;; esac
    done
    if cuda_built; then
      lib=$(detail "CUDA and NCCL libraries")
      grep -q 'relocated toolkit found: cuda.so: .*/toolkit/targets/[a-z0-9_]*-linux/lib/libcudart' \
        <<<"$lib" || fail "the relocated toolkit was not found: $lib"
      ! nccl_built || grep -q 'nccl.so: .*/site/nvidia/nccl/lib/libnccl' <<<"$lib" ||
        fail "NCCL in a wheel's nvidia/nccl/lib was not found"
    fi
    for dt in bf16 $([ -z "$quick" ] && echo fp32); do
      detail "GPT-2 124M loom $dt" | grep -q 'N = 124475904' ||
        fail "GPT-2's $dt row did not train configs/gpt2.json (vocabulary padded to 50304:" \
          "N = 124475904)"
    done
    ;;
  deadline)
    t0=$(date +%s)
    GPU_CHECK_REHEARSE_NO_NCCL=1 bash "$script" --rehearse --quick --deadline 3 \
      > "$OUT/stdout.txt" 2>&1
    rc=$? took=$(($(date +%s) - t0))
    cat "$OUT/stdout.txt"
    [ $rc = 0 ] || fail "exit $rc, expected 0 (a missing NCCL and late rows are SKIP rows)"
    every_row PASS ok SKIP
    [ $took -le 30 ] || fail "took $took s with --deadline 3"
    for n in "GPT-2 124M loom fp32" "GPT-2 124M loom bf16" "peak memory vs loom estimate (bf16)"; do
      detail "$n" | grep -q '^deadline' || fail "'$n' is not a deadline SKIP: $(detail "$n")"
    done
    if nccl_built; then
      [ "$(status "nccl world 1, every collective")" = SKIP ] &&
        detail "nccl world 1, every collective" | grep -q 'libnccl.*not found' ||
        fail "no NCCL did not give nccl's row a SKIP naming libnccl"
    fi
    ;;
  killed)
    setsid bash "$script" --rehearse --quick > "$OUT/stdout.txt" 2>&1 &
    pid=$!
    for _ in $(seq 240); do
      grep -q '^| 2 ranks ddp' "$OUT/gpu_check.md" 2>/dev/null && break
      sleep 0.5
    done
    kill -KILL -- -"$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    cat "$OUT/stdout.txt" "$OUT/gpu_check.md"
    for n in carry "tiny 30 steps cuda vs cpu" "2 ranks ddp on 1 GPU (mpi) vs 1"; do
      case $(status "$n") in PASS | ok) ;; *) fail "the killed run left no '$n' row" ;; esac
    done
    # the listing first: `tar | grep -q` under pipefail fails when grep's early exit SIGPIPEs tar
    listing=$(tar -tzf "$OUT/gpu_check_logs.tar.gz" 2>/dev/null)
    grep -q 'logs/tiny_cpu.txt' <<< "$listing" ||
      fail "the killed run left no log archive with the rows' logs"
    ;;
  *) echo "gpu_check_rehearse.sh: unknown case '$mode'" >&2; exit 2 ;;
esac
[ $fails = 0 ] && echo "gpu_check_rehearse $mode: ok"
[ $fails = 0 ]
