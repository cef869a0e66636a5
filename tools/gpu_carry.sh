#!/bin/bash
# Prepare, on this machine, what bench/gpu_check.sh needs on a GPU machine that has no package
# registry (the device machine: CUDA, PyTorch, cmake and a compiler, but no jansson, OpenBLAS,
# Open MPI, protobuf-c or ISA-L). Writes .gpu_carry/ (git-ignored), to be carried with the
# working tree (64 MiB at most):
#   .gpu_carry/prefix/   loom installed from a Release build with CUDA (cuda.so, nccl.so when
#                        their toolkit was found here): bin/, lib/loom/plugins/, share/loom/
#   .gpu_carry/debs/     the Debian runtime packages those binaries and Open MPI's mpirun and
#                        components need (the ldd closure, mapped to packages with dpkg -S),
#                        fetched with apt-get download; gpu_check.sh unpacks them with dpkg -x
#                        into a private root (never into /) and points LD_LIBRARY_PATH,
#                        OPAL_PREFIX and PATH there
#   .gpu_carry/MANIFEST  what is inside, sizes, and the versions it was built from
# Left out on purpose: libc6, libgcc-s1, libstdc++6 (the machine's own, newer, must be used) and
# CUDA's libraries (the machine has its toolkit; cuda.so and nccl.so find them by RPATH).
# Usage: tools/gpu_carry.sh   (then: run bench/gpu_check.sh there, carry [".gpu_carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu_carry
build=build-gpu-carry # git-ignored (/build*/), never carried
limit_mib=60 # the device call's working-tree limit is 64 MiB, the repository's sources included
rm -rf "$out/prefix" "$out/debs" "$out/MANIFEST"
mkdir -p "$out/debs"

echo "gpu_carry: building loom (Release) into $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_TESTS=OFF \
  -DCMAKE_INSTALL_PREFIX="$PWD/$out/prefix" > "$out/configure.log" 2>&1 ||
  { cat "$out/configure.log"; echo "gpu_carry: configure failed" >&2; exit 1; }
grep -E '^-- loom:' "$out/configure.log" || true
cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1 ||
  { tail -50 "$out/build.log"; echo "gpu_carry: build failed ($out/build.log)" >&2; exit 1; }
cmake --install "$build" > /dev/null
# the bench and test helpers gpu_check.sh runs come with the working tree itself

# the runtime closure: every library the binaries, the plugins, mpirun and Open MPI's components
# load, except the C runtime and CUDA's own
ompi_components=$(dirname "$(readlink -f "$(command -v orterun || command -v mpirun)")")
ompi_plugins=$(find /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix* \
  -name '*.so' 2>/dev/null || true)
files=$(find "$out/prefix" -type f \( -name '*.so' -o -perm -u+x \) ; echo "$ompi_components"/orterun)
libs=$(for f in $files $ompi_plugins; do ldd "$f" 2>/dev/null; done | awk '/=> \// {print $3}' |
  grep -v '^/usr/local/cuda' | sort -u)
pkgs="openmpi-bin openmpi-common libopenmpi3"
for l in $libs; do
  # dpkg knows /lib/... or /usr/lib/... (merged /usr): ask by the file name under either
  p=$(dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "*/$(basename "$(readlink -f "$l")")" \
      2>/dev/null || true)
  p=$(printf '%s\n' "$p" | head -1 | cut -d: -f1)
  [ -n "$p" ] && pkgs="$pkgs $p"
done
pkgs=$(printf '%s\n' $pkgs | sort -u | grep -vxE 'libc6|libc6-i386|libgcc-s1|libstdc\+\+6|libc-bin')
echo "gpu_carry: packages: $(echo $pkgs)"
(cd "$out/debs" && apt-get download $pkgs > ../download.log 2>&1) ||
  { cat "$out/download.log"; echo "gpu_carry: apt-get download failed" >&2; exit 1; }

{
  echo "built $(date -u +%FT%TZ) on $(uname -m), $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "loom $(git describe --always --dirty 2>/dev/null || echo '?')"
  echo "plugins: $(ls "$out/prefix/lib/loom/plugins" | tr '\n' ' ')"
  echo "debs:"; ls -s --block-size=K "$out/debs" | sed 's/^/  /'
} > "$out/MANIFEST"
size_kib=$(du -sk --exclude='*.log' "$out" | cut -f1)
echo "gpu_carry: $out without build/ is $((size_kib / 1024)) MiB (limit ${limit_mib} MiB)"
[ "$size_kib" -le $((limit_mib * 1024)) ] ||
  { echo "gpu_carry: too large to carry" >&2; exit 1; }
echo "gpu_carry: done; carry \".gpu_carry\" and run bench/gpu_check.sh"
