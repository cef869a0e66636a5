# Shared setup of the throughput benchmarks (sourced after each script parsed its options).
# bench_setup NAME SUBDIR: checks the build and the step counts, prepares the fortunes data
# once, makes $out, and pins every rank to one thread. Uses and sets: build bin data out steps
# skip ncores t_start.
bench_setup() {
  local name=$1 subdir=$2
  build=$(cd "$build" && pwd)
  bin=$build/bin
  for exe in loom loom-prepare loom-sgemm-peak; do
    [ -x "$bin/$exe" ] || { echo "$name: $bin/$exe missing: build first" >&2; exit 2; }
  done
  [ "$steps" -gt "$((skip + 2))" ] || { echo "$name: --steps must exceed --skip + 2" >&2; exit 2; }
  data=${data:-$build/bench-data/fortunes}
  out=${out:-$build/bench-runs/$subdir}
  rm -rf "$out"
  mkdir -p "$out"
  if [ ! -f "$data/meta.json" ]; then
    echo "== preparing the fortunes data in $data"
    "$bin/loom-prepare" --out "$data" /usr/share/games/fortunes > "$out/prepare.log"
  fi
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  ncores=$(getconf _NPROCESSORS_ONLN) # before OMP_NUM_THREADS: nproc obeys it
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  t_start=$(date +%s)
}
