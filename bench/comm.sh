#!/bin/bash
# mpi.so's collectives on 2 ranks: "collectives": "loom" (its own segmented schedule) against
# "mpi" (Open MPI's blocking and non-blocking collectives) at 1, 4, 16 and 64 MB of fp32, as
# ratios, plus a memcpy anchor and a segment-size sweep (bench/comm.c). Timing only: a busy
# machine shifts every number; compare the ratios of one run.
#
#   bench/comm.sh [--build DIR] [--np N] [--reps R] [SIZE_MB...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build np=2 reps=9
. "$root/bench/lib.sh"
bench_options comm.sh 2,8 "build np reps ..." "$@"
exe=$build/bin/loom-bench-comm so=$build/lib/loom/plugins/mpi.so
[ -x "$exe" ] && [ -f "$so" ] || { echo "comm.sh: $exe or $so missing: build first" >&2; exit 2; }
bench_mpi_env
echo "== loom-bench-comm: $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), $(mpirun --version | head -1)"
mpirun -np "$np" --oversubscribe --bind-to none "$exe" "$so" "$reps" "${bench_rest[@]}"
