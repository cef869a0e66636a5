#!/bin/bash
# mpi.so's sum collectives on 1, 2, 3 and 4 ranks against exact and float64 references, bit for
# bit in the documented association (tests/integration/comm_collectives.c says what is checked).
# A deadlock in the progress of overlapping collectives shows as the 300 s timeout.
. "$(dirname "$0")/lib.sh"
exe=$LOOM_BUILD/bin/comm_collectives
so=$LOOM_BUILD/lib/loom/plugins/mpi.so
[ -x "$exe" ] && [ -f "$so" ] || die "$exe or $so missing: build first"
for np in 1 2 3 4; do
  out=$WORK/np$np.log
  timeout 300 mpirun -np "$np" --oversubscribe --bind-to none "$exe" "$so" > "$out" 2>&1
  rc=$?
  cat "$out"
  [ $rc -eq 124 ] && die "$np ranks: no result within 300 s (a collective deadlocked?)"
  [ $rc -eq 0 ] || die "$np ranks: exit $rc"
  grep -q "checks passed on $np rank" "$out" || die "$np ranks: no summary line"
done
echo "ok: mpi.so's collectives on 1-4 ranks"
