#!/bin/bash
# Install what loom needs from Debian (missing packages only) and build it into build/.
#   tools/setup.sh            runtime + build dependencies
#   tools/setup.sh --tests    also what the tests need (PyTorch for the reference tests)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs="build-essential cmake pkg-config libjansson-dev libopenmpi-dev openmpi-bin
      libopenblas-dev zlib1g-dev fortunes-min fortunes python3"
if [ "${1:-}" = "--tests" ]; then pkgs="$pkgs check libsubunit-dev python3-torch"; fi
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
