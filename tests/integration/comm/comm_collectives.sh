#!/bin/bash
# under the sanitizers: 2 and 3 ranks only, no training runs
# ctest: sanitized cost=21
# mpi.so's sum collectives on 1, 2, 3 and 4 ranks against exact and float64 references, bit for
# bit in the documented association (comm_collectives.c beside it says what is checked).
# A deadlock in the progress of overlapping collectives shows as the 300 s timeout. Then the
# end-to-end consequence: ZeRO-2's reduce-scatter of differently cut buckets and ddp's all-reduce
# give bitwise equal training runs on 3 and 4 ranks (an element's sum does not depend on the cut).
. "$(dirname "$0")/../lib/lib.sh"
exe=$LOOM_BUILD/bin/comm_collectives
so=$LOOM_BUILD/lib/loom/plugins/mpi.so
[ -x "$exe" ] && [ -f "$so" ] || die "$exe or $so missing: build first"
# under the sanitizers (~20x slower) 2 and 3 ranks take every code path (3: partial sums)
nps="1 2 3 4"
[ "${LOOM_SANITIZED:-0}" = 1 ] && nps="2 3"
for np in $nps; do
  out=$WORK/np$np.log
  timeout 300 mpirun -np "$np" --oversubscribe --bind-to none "$exe" "$so" > "$out" 2>&1
  rc=$?
  cat "$out"
  [ $rc -eq 124 ] && die "$np ranks: no result within 300 s (a collective deadlocked?)"
  [ $rc -eq 0 ] || die "$np ranks: exit $rc"
  grep -q "checks passed on $np rank" "$out" || die "$np ranks: no summary line"
done
if [ "${LOOM_SANITIZED:-0}" = 1 ]; then # the training runs' paths run in equivalence_* there
  echo "ok: mpi.so's collectives on $nps ranks (sanitizers: no training runs)"
  exit 0
fi
make_data
for np in 3 4; do
  common=(--set train.steps=4 --set train.eval_interval=0 --set train.micro_batch_size=$((12 / np)))
  run $np ddp_$np "${common[@]}" --set 'parallel=[{"plugin":"ddp","bucket_size_mb":0.05}]'
  run $np zero2_$np "${common[@]}" --set 'parallel=[{"plugin":"zero2","reduce_bucket_size":7000}]'
  echo "== $np ranks: zero2 vs ddp, bitwise"
  compare zero2_$np ddp_$np --bitwise
done
echo "ok: mpi.so's collectives on 1-4 ranks; zero2 == ddp bitwise on 3 and 4 ranks"
