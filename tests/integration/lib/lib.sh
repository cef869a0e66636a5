# Shared helpers for the integration tests (sourced). Needs: LOOM_BUILD (build dir), LOOM_SRC.
set -u
LOOM=${LOOM_BUILD}/bin/loom
# TESTLIB: this folder (lib.sh, compare_runs.py and the other python every folder shares);
# HERE: the running script's folder (its own .py checks, beside it)
TESTLIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
# OpenMPI refuses root and more ranks than cores unless told; CI runs as root on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# keep MPI on loopback/shared memory, quiet about missing fabrics
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
# The launcher run() and expect_refused() start their ranks with. LOOM_BED=ID (a bed of
# tools/nodes.sh, set by tests/integration/multinode/) runs them across its nodes instead:
# mpirun in node 1, with the bed's hostfile (2 slots a node, filled in order) and rsh agent,
# TCP between nodes on the bed's interface only.
MPIRUN=(mpirun)
[ -z "${LOOM_BED:-}" ] || MPIRUN=("$LOOM_SRC/tools/nodes.sh" mpirun "$LOOM_BED")
# After a rank exits non-zero mpirun gives the others odls_base_sigkill_timeout (1 s) between
# SIGTERM and SIGKILL and ends ~2 s later in all (`mpirun -np 1 false`: 2.06 s; 0.05 s with 0).
# A run that is meant to be refused (bad options, a corrupt checkpoint) needs no grace period:
# "${REFUSED_RUN[@]}" timeout 120 mpirun ... Not for graceful stops: rank_failure's SIGTERM
# case needs the other ranks to finish their checkpoint.
REFUSED_RUN=(env OMPI_MCA_odls_base_sigkill_timeout=0)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/loom-it.XXXXXX")
# Background jobs a script started (track_job PID): killed with their whole process tree on
# every exit path, so a failing or interrupted test never leaves an mpirun or a rank behind.
BG_JOBS=()
on_exit() {
  local p
  for p in "${BG_JOBS[@]}"; do kill_tree "$p"; done
  [ -n "${LOOM_KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# descendants PID: every process below PID (children, grandchildren, ...), one per line. Walks
# the parent links of this machine's process table, so only PID's own tree is ever named,
# never another job's processes that happen to run the same command line.
descendants() {
  ps -eo pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2; pids[NR] = $1 }
    END { for (i = 1; i <= NR; i++) { p = pids[i]; q = parent[p]; n = 0
            while (q != "" && q > 1 && n++ < 64) { if (q == root) { print p; break }; q = parent[q] } } }'
}

# kill_tree PID: SIGKILL PID and everything below it (a stopped rank too), then reap PID.
kill_tree() {
  local all
  all="$(descendants "$1") $1"
  # shellcheck disable=SC2086
  kill -9 $all 2>/dev/null
  wait "$1" 2>/dev/null
  return 0
}
track_job() { BG_JOBS+=("$1"); }

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

# run NRANKS NAME [--set ...]: train configs/tiny.json on NRANKS ranks into $WORK/NAME, within
# LOOM_RUN_TIMEOUT seconds (300; bed.sh: 120, below its tests' ctest timeouts, so a hung run
# ends in die and the script's EXIT trap still tears the bed down).
# LOOM_TEST_THREADS=N (by hand, to measure tolerances) gives each rank N threads.
run() {
  local n=$1 name=$2
  shift 2
  rm -rf "$WORK/$name"
  mkdir -p "$WORK/$name"
  timeout "${LOOM_RUN_TIMEOUT:-300}" "${MPIRUN[@]}" -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" \
    --set "logging.metrics=$WORK/$name/metrics.jsonl" --set logging.interval=5 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$name/ckpt\",\"every\":0,\"keep\":0}" \
    ${LOOM_TEST_THREADS:+--set device.threads=$LOOM_TEST_THREADS} \
    "$@" >"$WORK/$name/out.log" 2>&1 || { cat "$WORK/$name/out.log" >&2; die "run $name failed"; }
}

# resume_from SRC DST NRANKS [--set ...]: train configs/tiny.json on NRANKS ranks into
# $WORK/DST from run SRC's step-10 checkpoint (copied into DST's checkpoint folder, saved every
# 10 steps) with the --set options; it must resume at step 10.
resume_from() {
  local src=$1 dst=$2 n=$3
  shift 3
  mkdir -p "$WORK/$dst/ckpt"
  cp -r "$WORK/$src/ckpt/step-00000010" "$WORK/$dst/ckpt/"
  printf 'step-00000010' >"$WORK/$dst/ckpt/latest"
  timeout 300 "${MPIRUN[@]}" -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
    --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
    --set "data.vocab=$WORK/data/vocab.json" --set "logging.metrics=$WORK/$dst/metrics.jsonl" \
    --set logging.interval=5 \
    --set "checkpoint={\"plugin\":\"checkpoint\",\"dir\":\"$WORK/$dst/ckpt\",\"every\":10}" \
    "$@" >"$WORK/$dst/out.log" 2>&1 || { cat "$WORK/$dst/out.log"; die "$dst failed"; }
  grep -q "resumed at step 10" "$WORK/$dst/out.log" || die "$dst did not resume at step 10"
}

# selected NAME: whether a script with a covering subset runs case NAME: every case under
# --matrix (the script sets MATRIX=1), else only those in COVERING (" name name ... ")
selected() { [ "${MATRIX:-0}" = 1 ] || [[ "${COVERING:-}" == *[[:space:]]$1[[:space:]]* ]]; }
compare() { # compare A B [compare_runs.py options]
  local a=$1 b=$2
  shift 2
  /usr/bin/python3 "$TESTLIB/compare_runs.py" "$@" \
    "$WORK/$a/metrics.jsonl" "$WORK/$a/ckpt" "$WORK/$b/metrics.jsonl" "$WORK/$b/ckpt" ||
    die "$a vs $b differ"
}

# expect_refused NRANKS NEEDLE [--set ...]: train configs/tiny.json (no checkpoint) on NRANKS
# ranks with the --set options: it must fail, with NEEDLE in its output (shown).
expect_refused() {
  local n=$1 needle=$2
  shift 2
  if "${REFUSED_RUN[@]}" timeout 120 "${MPIRUN[@]}" -np "$n" --bind-to none "$LOOM" train "$LOOM_SRC/configs/tiny.json" \
      --set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin" \
      --set "data.vocab=$WORK/data/vocab.json" --set checkpoint=null "$@" >"$WORK/fail.log" 2>&1; then
    die "expected a failure containing '$needle'"
  fi
  grep -qF "$needle" "$WORK/fail.log" || { cat "$WORK/fail.log" >&2; die "no '$needle' in the error"; }
  echo "refused: $(grep -m1 -F "$needle" "$WORK/fail.log")"
}
