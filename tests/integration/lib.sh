# Shared helpers for the integration tests (sourced). Needs: LOOM_BUILD (build dir), LOOM_SRC.
set -u
LOOM=${LOOM_BUILD}/bin/loom
# OpenMPI refuses root and more ranks than cores unless told; CI runs as root on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# keep MPI on loopback/shared memory, quiet about missing fabrics
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-it.XXXXXX")
[ -n "${LOOM_KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT

die() { echo "FAIL: $*" >&2; exit 1; }

# A small corpus: Debian's fortunes when installed, else loom's own sources and docs.
make_data() {
  local out=$WORK/data
  [ -f "$out/meta.json" ] && return 0
  if [ -d /usr/share/games/fortunes ]; then
    "$LOOM_BUILD/bin/loom-prepare" --out "$out" /usr/share/games/fortunes >/dev/null 2>&1
  else
    "$LOOM_BUILD/bin/loom-prepare" --out "$out" "$LOOM_SRC/core" "$LOOM_SRC/docs" >/dev/null 2>&1
  fi || die "loom-prepare failed"
}

# run NRANKS NAME [--set ...]: train configs/tiny.json on NRANKS ranks into $WORK/NAME.
# LOOM_TEST_THREADS=N (by hand, to measure tolerances) gives each rank N threads.
run() {
  local n=$1 name=$2
  shift 2
  rm -rf "$WORK/$name"
  mkdir -p "$WORK/$name"
  timeout 300 mpirun -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set logging.interval=5 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":0,\"keep\":0}" \
    ${LOOM_TEST_THREADS:+--set device.threads=$LOOM_TEST_THREADS} \
    "$@" >"$WORK/$name/out.log" 2>&1 || { cat "$WORK/$name/out.log" >&2; die "run $name failed"; }
}

compare() { # compare A B [compare_runs.py options]
  local a=$1 b=$2
  shift 2
  /usr/bin/python3 "$LOOM_SRC/tests/integration/compare_runs.py" "$@" \
    "$WORK/$a/metrics.jsonl" "$WORK/$a/ckpt" "$WORK/$b/metrics.jsonl" "$WORK/$b/ckpt" ||
    die "$a vs $b differ"
}
