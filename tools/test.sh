#!/bin/bash
# Set up and run every test: unit (Check), reference (PyTorch), multi-rank integration
# (mpirun), fault tests — on the normal build, then again on an AddressSanitizer + UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --tests
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
jobs=$(nproc)
echo "== tests (build/)"
(cd build && ctest --output-on-failure -j"$jobs")
echo "== tests under AddressSanitizer + UBSan (build-asan/)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
# OpenMPI's own allocations are not freed at exit; leaks are checked in the unit tests only.
# The big equivalence matrix (label "matrix") runs in the normal build only.
(cd build-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j"$jobs" -LE 'unit|matrix' &&
  ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -L unit)
