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
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
exe=$build/bin/loom-bench-comm so=$build/lib/loom/plugins/mpi.so
[ -x "$exe" ] && [ -f "$so" ] || { echo "comm.sh: $exe or $so missing: build first" >&2; exit 2; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
echo "== loom-bench-comm: $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), $(mpirun --version | head -1)"
mpirun -np "$np" --oversubscribe --bind-to none "$exe" "$so" "$reps" "$@"
