#!/bin/bash
# a full configure + build of its own: tools/test.sh runs it once, as its own stage (label
# fresh), not again under the sanitizers
# ctest: name=fresh.main_job_build labels=fresh serial processors=1 skip=none env=LOOM_SRC
# README command 1 on a machine without the test packages: configure and build the main job's
# way (tools/setup.sh, no --tests) with Check and libsubunit hidden from pkg-config, into a
# temporary build directory; the build must succeed without them, skip the unit tests with a
# note, and produce what the main job runs (loom, loom-prepare, the plugins). Then
# `tools/setup.sh --tests` must fail at configure time and show cmake's line naming Check
# (setup.sh used to send that output to /dev/null).
# Cost: one full configure + build (~10 s idle, a minute or two on 2 busy cores); with ccache
# (tools/setup.sh --tests installs it; CMakeLists.txt uses it) its objects are build/'s: ~30 s.
# Needs: LOOM_SRC (source tree); the runtime packages installed (they are, after setup.sh).
set -u
SRC=${LOOM_SRC:?LOOM_SRC: the source tree}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-fresh.XXXXXX")
[ -n "${LOOM_KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }

# pkg-config's search path with every .pc file but the test packages' (links to the real ones).
# PKG_CONFIG_LIBDIR replaces the default path, and PKG_CONFIG_PATH is unset, so pkg-config (the
# only way tests/CMakeLists.txt looks for Check) cannot find them.
hidden="check.pc libsubunit.pc"
mkdir -p "$WORK/pc"
IFS=: read -r -a dirs <<< "$(pkg-config --variable pc_path pkg-config)"
for d in "${dirs[@]}"; do
  for pc in "$d"/*.pc; do
    [ -e "$pc" ] || continue
    case " $hidden " in *" $(basename "$pc") "*) continue ;; esac
    [ -e "$WORK/pc/$(basename "$pc")" ] || ln -s "$pc" "$WORK/pc/"
  done
done
hide() { env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR="$WORK/pc" "$@"; }
hide pkg-config --exists check && die "the hidden pkg-config path still finds check"
hide pkg-config --exists jansson || die "the hidden pkg-config path lost jansson (a runtime package)"

# ---- the main job's build, without the test packages ----
echo "== tools/setup.sh with Check hidden, into $WORK/build"
if ! hide LOOM_BUILD_DIR="$WORK/build" bash "$SRC/tools/setup.sh" > "$WORK/setup.log" 2>&1; then
  cat "$WORK/setup.log" >&2
  die "tools/setup.sh (the main job's build) failed without the test packages"
fi
grep -q "loom: Check not found" "$WORK/setup.log" ||
  { cat "$WORK/setup.log" >&2; die "setup.sh did not say that the unit tests were skipped"; }
[ -z "$(ls "$WORK/build/bin" | grep '^check_')" ] || die "unit tests were built although Check is hidden"
for f in bin/loom bin/loom-prepare lib/loom/plugins/ddp.so lib/loom/plugins/mpi.so \
         lib/loom/plugins/fp32.so lib/loom/plugins/checkpoint.so lib/loom/plugins/zero3.so; do
  [ -s "$WORK/build/$f" ] || die "the main job's build lacks $f"
done
"$WORK/build/bin/loom" plugins > "$WORK/plugins.log" 2>&1 || { cat "$WORK/plugins.log"; die "loom plugins failed"; }
grep -q ddp "$WORK/plugins.log" || { cat "$WORK/plugins.log"; die "loom plugins does not list ddp"; }
echo "ok: built without Check: loom, loom-prepare, the plugins; unit tests skipped with a note"

# ---- the test build with a test package missing: a failure that names it ----
echo "== tools/setup.sh --tests with Check hidden: must fail and name Check"
if hide LOOM_BUILD_DIR="$WORK/build-tests" bash "$SRC/tools/setup.sh" --tests > "$WORK/setup-tests.log" 2>&1; then
  cat "$WORK/setup-tests.log"
  die "tools/setup.sh --tests succeeded although Check is hidden"
fi
grep -q "Package 'check'.*not found" "$WORK/setup-tests.log" &&
  grep -q "loom: the tests need Check" "$WORK/setup-tests.log" ||
  { cat "$WORK/setup-tests.log"; die "setup.sh --tests failed without cmake's message naming Check"; }
echo "ok: setup.sh --tests stops at configure with cmake's message:"
grep -E "Package 'check'|loom: the tests need" "$WORK/setup-tests.log" | sed 's/^/    /'
echo "all checks passed"
