#!/bin/bash
# Set up and run the tests: unit (Check), reference (PyTorch), multi-rank integration (mpirun),
# fault tests — on the normal build, the main job's build on a machine without the test
# packages, then the unit tests and a representative subset of the rest on an AddressSanitizer +
# UBSan build (what CI runs: .ci/run).
#   tools/test.sh          the stages above
#   tools/test.sh --full   also the exhaustive matrices (label "matrix": the 53-run ZeRO matrix,
#                          the 49-run cross-mesh resume matrix, the other plugins' conformance
#                          batteries, the main job through a real Slurm, which --full installs:
#                          tools/setup.sh --slurm) and, under the sanitizers, the integration
#                          tests the CI pass leaves to the normal build (label "asan-full")
# Labels: "normal-only", "readme", "fresh": never under the sanitizers (they test scripts, docs
# or a 3-minute bound, not memory safety); "fresh" runs once, as its own stage.
# Every stage runs even when an earlier one fails (a stage that needs a failed build is skipped,
# and says so); the run ends with one line per stage and exits non-zero if any stage failed.
# Logs: build-logs/<stage>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
full=0
case ${1:-} in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: tools/test.sh [--full]" >&2; exit 2 ;;
esac
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
jobs=$(nproc)
# ctest slots: twice the cores under the sanitizers, three times in the normal build. The
# multi-rank tests are start-up bound (0.3-0.6 s of CPU per second of wall) and claim 2 slots
# each (PROCESSORS 2): in the normal build two of them left the cores 31 % idle, three keep them
# 89 % busy (the same tests in 14 % less wall time); the sanitized processes are CPU-bound, and two
# at a time already keep the cores 90 % busy. The timing-sensitive and CPU-heavy tests run
# alone (RUN_SERIAL: a `# ctest: serial` line in the script; tests/integration/CMakeLists.txt).
slots=$((2 * jobs)) normal_slots=$((3 * jobs))
logs=build-logs
rm -rf "$logs" && mkdir -p "$logs"
names=() results=() notes=()

# stage NAME COMMAND...: run it with its output shown and logged; record passed/failed, the
# time it took and, for a ctest stage, ctest's closing line.
stage() {
  local name=$1 t0=$SECONDS rc note
  shift
  echo
  echo "== $name"
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  note="$((SECONDS - t0)) s"
  local line skipped
  line=$(grep -E '^[0-9]+% tests passed' "$logs/$name.log" | tail -n 1)
  skipped=$(grep -cE '\((Skipped|Not Run|Disabled)\)' "$logs/$name.log")
  [ -n "$line" ] && note="$note; $line"
  # a failure without ctest's line: its last message (the whole output is in the log)
  [ "$rc" -ne 0 ] && [ -z "$line" ] &&
    note="$note; $(grep -v '^[[:space:]]*$' "$logs/$name.log" | tail -n 1 | cut -c1-100)"
  [ "$skipped" -gt 0 ] && note="$note; $skipped test(s) skipped (listed above)"
  names+=("$name")
  if [ "$rc" -eq 0 ]; then results+=(passed); else results+=("FAILED (exit $rc)"); fi
  notes+=("$note")
  return "$rc"
}
skip() { # skip NAME WHY
  echo
  echo "== $1: skipped ($2)"
  names+=("$1") results+=(skipped) notes+=("$2")
}

# cmake --build with its configure step's output in a log, shown whole when configuring fails
configure_and_build() { # configure_and_build DIR CMAKE_ARGS...
  local dir=$1
  shift
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" "$@" > "$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"
    echo "test.sh: configuring $dir failed: cmake's output is above"
    return 1
  fi
  grep -E '^-- loom:' "$dir/configure.log"
  cmake --build "$dir" -j"$jobs"
}

setup_args=(--tests)
[ "$full" -eq 1 ] && setup_args+=(--slurm) # integration.slurm's daemons: the full run only
if stage setup tools/setup.sh "${setup_args[@]}"; then
  stage tests bash -c "cd build && ctest --output-on-failure -j$normal_slots -LE 'fresh|matrix'"
  if [ "$full" -eq 1 ]; then
    stage matrix bash -c "cd build && ctest --output-on-failure -j$normal_slots -L matrix"
  fi
else
  skip tests "the setup stage (install + build of build/) failed"
  [ "$full" -eq 1 ] && skip matrix "the setup stage (install + build of build/) failed"
fi
# Independent of build/: configures and builds its own temporary tree with Check hidden.
stage fresh-machine env LOOM_SRC="$PWD" bash tests/integration/readme/fresh_machine.sh
if stage asan-build configure_and_build build-asan -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON \
     -DLOOM_TESTS_REQUIRED=ON; then
  # OpenMPI's own allocations are not freed at exit; leaks are checked in the unit tests only.
  # The matrices and the scripts' and docs' tests run in the normal build only (labels
  # "matrix", "normal-only", "readme", "fresh"); the integration tests labelled "asan-full"
  # repeat code paths the others take, at more sizes: --full only.
  never='unit|matrix|normal-only|fresh|readme'
  stage asan-tests bash -c "cd build-asan && ASAN_OPTIONS=detect_leaks=0 \
    ctest --output-on-failure -j$slots -LE '$never|asan-full'"
  if [ "$full" -eq 1 ]; then
    stage asan-full bash -c "cd build-asan && ASAN_OPTIONS=detect_leaks=0 \
      ctest --output-on-failure -j$slots -L asan-full -LE '$never'"
  fi
  stage asan-unit-leaks bash -c "cd build-asan && ASAN_OPTIONS=detect_leaks=1 \
    ctest --output-on-failure -j$slots -L unit"
else
  skip asan-tests "the asan-build stage failed"
  [ "$full" -eq 1 ] && skip asan-full "the asan-build stage failed"
  skip asan-unit-leaks "the asan-build stage failed"
fi

echo
echo "== summary (logs in $logs/)"
failed=0
for i in "${!names[@]}"; do
  printf '  %-16s %-18s %s\n' "${names[$i]}" "${results[$i]}" "${notes[$i]}"
  case ${results[$i]} in FAILED*) failed=1 ;; esac
done
if [ "$failed" -ne 0 ]; then echo "test.sh: some stages FAILED (see above)"; exit 1; fi
echo "test.sh: every stage passed"
