# shellcheck shell=bash
# What the benchmark scripts share: their option parsing, their setup, and the throughput
# benchmarks' timed training run, anchors and report. Sourced by every bench/*.sh; each script
# sets root and its defaults first.

# bench_options NAME HELP SPEC ARG...: the script's options into variables, with its own
# defaults already set. SPEC (one string, words separated by spaces) lists them: `steps` takes a value
# (--steps N sets steps; --torch-steps N sets torch_steps), `no-torch:torch=0` takes none and
# sets torch=0, and a final `...` ends the options at the first other argument, which with
# the ones after it lands in the array bench_rest (without it, another argument is an
# error). -h/--help prints lines HELP (sed's M,N) of the script: its header.
bench_options() {
  local name=$1 help=$2 spec=$3 word var
  shift 3
  bench_rest=()
  while [ $# -gt 0 ]; do
    case "$1" in -h|--help) sed -n "${help}p" "$0"; exit 0 ;; esac
    var=""
    if [[ $1 == --* ]]; then
      for word in $spec; do
        case $word in
          "${1#--}") var=${word//-/_}; break ;;
          "${1#--}":*) var=${word#*:}; break ;;
        esac
      done
    fi
    if [[ $var == *=* ]]; then
      printf -v "${var%%=*}" '%s' "${var#*=}"
      shift
    elif [ -n "$var" ]; then
      [ $# -ge 2 ] || { echo "$name: $1 needs a value" >&2; exit 2; }
      printf -v "$var" '%s' "$2"
      shift 2
    elif [[ " $spec " == *" ... "* ]]; then
      bench_rest=("$@")
      return 0
    else
      echo "$name: unknown argument $1" >&2; exit 2
    fi
  done
}

# bench_mpi_env: lets mpirun start ranks as root (Open MPI refuses by default).
bench_mpi_env() {
  if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
}

# bench_init NAME SUBDIR EXE...: an absolute $build and its $bin, which must hold every EXE; a
# fresh $out (default BUILD/bench-runs/SUBDIR); mpirun as root; one thread per rank. Sets
# build bin out ncores t_start.
bench_init() {
  local name=$1 subdir=$2 exe
  shift 2
  build=$(cd "$build" && pwd)
  bin=$build/bin
  for exe; do
    [ -x "$bin/$exe" ] || { echo "$name: $bin/$exe missing: build first" >&2; exit 2; }
  done
  out=${out:-$build/bench-runs/$subdir}
  rm -rf "$out"
  mkdir -p "$out"
  bench_mpi_env
  ncores=$(getconf _NPROCESSORS_ONLN) # before OMP_NUM_THREADS: nproc obeys it
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  t_start=$(date +%s)
}

# bench_setup NAME SUBDIR: the fortunes benchmarks' setup: --steps must exceed --skip + 2, then
# bench_init with loom, loom-prepare and loom-sgemm-peak, and the fortunes data prepared once
# into $data (default BUILD/bench-data/fortunes). Uses steps skip; sets data and bench_init's.
bench_setup() {
  local name=$1 subdir=$2
  [ "$steps" -gt "$((skip + 2))" ] || { echo "$name: --steps must exceed --skip + 2" >&2; exit 2; }
  bench_init "$name" "$subdir" loom loom-prepare loom-sgemm-peak
  data=${data:-$build/bench-data/fortunes}
  if [ ! -f "$data/meta.json" ]; then
    echo "== preparing the fortunes data in $data"
    "$bin/loom-prepare" --out "$data" /usr/share/games/fortunes > "$out/prepare.log"
  fi
}

# bench_banner WHAT: the first line of a benchmark's output: what, when, and how busy the machine is.
bench_banner() {
  echo "== loom $1 benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $ncores cores," \
       "load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

# bench_train NAME NP MICRO ROUND [ARG...]: one timed training run of $config on NP ranks,
# micro batch MICRO, $steps steps with threads=1 per rank, no checkpoint, eval or sample, on
# the fortunes data in $data; the log, the metrics and `time`'s wall, user and system seconds
# (how much CPU the ranks really got) in $out/NAME.rROUND.{log,jsonl,time}. ARGs (more --set)
# follow the shared ones; the array bench_mpirun_opts goes to mpirun (bench_launcher). On failure: the log's
# tail, and the script exits 1.
bench_train() {
  local name=$1 np=$2 mb=$3 round=$4
  shift 4
  local log=$out/$name.r$round.log TIMEFORMAT='%R %U %S'
  if ! { time "${bench_launcher[@]}" -np "$np" --oversubscribe --bind-to none "${bench_mpirun_opts[@]}" \
      "$bin/loom" train "$config" \
      --set "train.steps=$steps" --set "lr_schedule.warmup_steps=$((steps < 30 ? steps : 30))" \
      --set "train.micro_batch_size=$mb" --set train.grad_accum_steps=1 \
      --set device.threads=1 --set checkpoint=null --set train.eval_interval=0 \
      --set sample.tokens=0 --set logging.interval=10 \
      --set "logging.metrics=$out/$name.r$round.jsonl" \
      --set "data.train=$data/train_*.bin" --set 'data.val=""' \
      --set "data.vocab=$data/vocab.json" "$@" > "$log" 2>&1; } 2> "$out/$name.r$round.time"; then
    echo "FAILED"
    tail -20 "$log" >&2
    exit 1
  fi
}
bench_mpirun_opts=()
# what bench_train starts the ranks with: mpirun here; bench/multinode.sh's bed (tools/nodes.sh
# mpirun ID: mpirun in node 1 over the bed's hostfile)
bench_launcher=(mpirun)

# bench_anchors_before LINES: the SGEMM anchor (its last LINES lines shown), then two SGEMM
# processes at once, into $out/sgemm_{before,pair1,pair2}.txt.
bench_anchors_before() {
  echo "== anchor (before)"
  "$bin/loom-sgemm-peak" > "$out/sgemm_before.txt"
  tail -"$1" "$out/sgemm_before.txt"
  echo "== anchor: 2 SGEMM processes at once (what 2 ranks can get from the cores right now)"
  "$bin/loom-sgemm-peak" -s 1024 -r 3 > "$out/sgemm_pair1.txt" &
  "$bin/loom-sgemm-peak" -s 1024 -r 3 > "$out/sgemm_pair2.txt"
  wait
  grep -h sgemm_model_mix "$out/sgemm_pair1.txt" "$out/sgemm_pair2.txt"
}

# bench_anchor_after [ARG...]: the SGEMM anchor again (with loom-sgemm-peak's ARGs) into
# $out/sgemm_after.txt, for the drift, then the load and the time since bench_init.
bench_anchor_after() {
  echo "== anchor (after)"
  "$bin/loom-sgemm-peak" "$@" > "$out/sgemm_after.txt"
  tail -1 "$out/sgemm_after.txt"
  echo "== load average now $(cut -d' ' -f1-3 /proc/loadavg); $(( $(date +%s) - t_start )) s in all"
  echo
}

# bench_files NAME EXT: the $rounds rounds' files of one configuration, comma-separated.
bench_files() {
  local f=() r
  for r in $(seq 1 "$rounds"); do f+=("$out/$1.r$r.$2"); done
  (IFS=,; echo "${f[*]}")
}

# bench_spec NAME NP MICRO BASE: bench/report.py's --run for configuration NAME, against BASE.
bench_spec() {
  echo "$1|$2|$3|$4|$(bench_files "$1" jsonl)|$out/$1.r1.log|$(bench_files "$1" time)"
}

# bench_report TITLE RUN...: bench/report.py's tables of the runs (each a bench_spec) against
# the anchors of bench_anchors_before and bench_anchor_after, also into $out/report.txt.
bench_report() {
  local title=$1 r runs=()
  shift
  for r; do runs+=(--run "$r"); done
  python3 "$root/bench/report.py" --skip "$skip" \
    --anchor "$out/sgemm_before.txt" --anchor "$out/sgemm_after.txt" \
    --pair "$out/sgemm_pair1.txt" --pair "$out/sgemm_pair2.txt" \
    --title "$title" "${runs[@]}" | tee "$out/report.txt"
  echo
  echo "(runs, logs and JSONL in $out)"
}
