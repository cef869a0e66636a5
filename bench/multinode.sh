#!/bin/bash
# loom across nodes: the main job's model (configs/fortunes_ddp.json) on 2 nodes x 2 ranks of
# tools/nodes.sh's test bed (nodes as network namespaces; root), every inter-node link limited
# to --rate (tbf, both directions; 1 Gbit/s) and delayed by --delay where the kernel has
# sch_netem (1 ms; without it the delay is skipped with a note). Per row: the median step time,
# the bytes that cross between the nodes per step (veth counters, a --skip-step run subtracted
# from the full run, so start-up and the first steps cancel), `loom estimate --ranks-per-node 2`'s
# figure, and the time the busiest link needs for its bytes at --rate; ratios against the first
# row. Nothing passes or fails on time (the machine is shared and noisy).
#
#   bench/multinode.sh [--build DIR] [--steps N] [--skip K] [--rounds R] [--micro B] [--rate R]
#                      [--delay D] [--rows NAME,...] [--out DIR] [--data DIR] [--config FILE]
#
# Rows (ROWS below, one line each: name|parallel|extra --set; add one to compare another
# strategy): ddp (flat all-reduce), ddp_hier (mpi.so's hierarchical all-reduce, nodes from
# MPI_COMM_TYPE_SHARED: the bed's nodes), zero3, hybrid_zero3 (shard_size "node": shard in the
# node, replicate across). The pairs' ratios (hierarchical / flat ddp, hybrid / plain zero3:
# bytes, estimate and step time) are printed under the table. Defaults: --steps 12, --skip 2,
# --rounds 2 (rows interleaved; the step time is the median over every round's steps), --micro 8.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build steps=12 skip=2 rounds=2 micro=8 rate=1gbit delay=1ms rows="" out="" data=""
config=$root/configs/fortunes_ddp.json
. "$root/bench/lib.sh"
bench_options multinode.sh 2,16 "build steps skip rounds micro rate delay rows out data config" "$@"
ROWS='ddp|[{"plugin":"ddp","bucket_size_mb":25}]|
ddp_hier|[{"plugin":"ddp","bucket_size_mb":25}]|comm={"plugin":"mpi","hierarchical":true}
zero3|[{"plugin":"zero3"}]|
hybrid_zero3|[{"plugin":"zero3","shard_size":"node"}]|'
# (what a row is compared with, what with)
PAIRS='ddp_hier ddp
hybrid_zero3 zero3'
NODES=$root/tools/nodes.sh
why=$("$NODES" check) || { echo "multinode.sh: no test bed here: $why" >&2; exit 77; }
bench_setup multinode.sh multinode
bed=$(LOOM_BED_OWNER=$$ "$NODES" new-id)
trap '"$NODES" down "$bed"' EXIT
LOOM_BED_OWNER=$$ "$NODES" up "$bed" 2
"$NODES" limit "$bed" "$rate" "$delay" 2>&1
bench_launcher=("$NODES" mpirun "$bed")
tx() { "$NODES" bytes "$bed" | awk '{ s += $2 } END { printf "%.0f\n", s }'; }

bench_banner "multinode (2 nodes x 2 ranks, links at $rate)"
echo "== $steps steps per row and round (micro batch $micro per rank, 4 ranks), the first $skip left out"
table=$out/rows.txt
: >"$table"
# round 1: per row the warm-up run, the counted run and the estimate; rounds 2..R: the counted
# run again, rows interleaved (the machine's load drifts: each row sees the same minutes)
for r in $(seq 1 "$rounds"); do
  while IFS='|' read -r -u 3 name par extra; do
    [ -z "$rows" ] || [[ ",$rows," == *",$name,"* ]] || continue
    sets=(--set "parallel=$par" --set logging.interval=1)
    [ -z "$extra" ] || sets+=(--set "$extra")
    printf '   %-10s round %d ... ' "$name" "$r"
    t0=$SECONDS
    if [ "$r" = 1 ]; then
      b0=$(tx)
      (steps=$skip; bench_train "$name.warm" 4 "$micro" 1 "${sets[@]}")
      b1=$(tx)
      bench_train "$name" 4 "$micro" 1 "${sets[@]}"
      b2=$(tx)
      "$bin/loom" estimate "$config" --world 4 --ranks-per-node 2 --json \
        --set "train.micro_batch_size=$micro" --set train.grad_accum_steps=1 "${sets[@]}" \
        >"$out/$name.estimate.json"
      echo "$name $(( ((b2 - b1) - (b1 - b0)) / (steps - skip) )) $out/$name.estimate.json" >>"$table"
    else
      bench_train "$name" 4 "$micro" "$r" "${sets[@]}"
    fi
    echo "$((SECONDS - t0)) s"
  done 3<<<"$ROWS"
done
python3 - "$table" "$skip" "$rate" "$out" "$rounds" "$PAIRS" <<'PY'
import json, statistics, sys
table, skip, rate, out, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
pairs = [p.split() for p in sys.argv[6].splitlines() if p.strip()]
units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1}
r = rate.lower()
bps = next(float(r[: -len(u)]) * m for u, m in units.items() if r.endswith(u))
rows = []
for line in open(table):
    name, measured, est = line.split()
    ms = []  # every round's steps after the skipped ones
    for r in range(1, rounds + 1):
        recs = [json.loads(l) for l in open(f"{out}/{name}.r{r}.jsonl") if l.strip()]
        ms += [m["ms_per_step"] for m in recs if m.get("step", 0) > skip and "ms_per_step" in m]
    e = json.load(open(est))["inter_node"]
    rows.append((name, statistics.median(ms), int(measured), e["bytes_per_step"],
                 e["max_node_tx_bytes_per_step"] * 8 / bps * 1e3))
b = rows[0]
print(f"\n{'row':<12} {'ms/step':>9} {'x ' + b[0]:>9} {'inter-node MB/step':>19} {'x ' + b[0]:>9}"
      f" {'estimate MB':>12} {'meas/est':>9} {'wire ms':>8}")
for n, t, m, e, w in rows:
    print(f"{n:<12} {t:9.1f} {t / b[1]:9.2f} {m / 1e6:19.3f} {m / b[2]:9.2f} {e / 1e6:12.3f}"
          f" {m / e if e else float('nan'):9.4f} {w:8.1f}")
print(f"(wire ms: the busiest node link's estimated bytes at {rate}, the least time they take)")
by = {r[0]: r for r in rows}
for a, o in pairs:
    if a in by and o in by:
        x, y = by[a], by[o]
        print(f"{a} / {o}: inter-node bytes {x[2] / y[2]:.4f} measured, {x[3] / y[3]:.4f} "
              f"estimated; step time {x[1] / y[1]:.3f}")
PY
echo "(logs, JSONL and estimates in $out)"
