# The multi-node test bed for the integration tests (sourced after lib.sh): tools/nodes.sh's
# nodes as network namespaces, torn down on every exit path of the script.
#
#   bed_up N            build a bed of N nodes (a fresh id) and run run()/expect_refused() on
#                       it (LOOM_BED, MPIRUN); exits 77 with the reason where beds cannot be
#                       built (not root, namespaces forbidden)
#   on_host CMD...      CMD with run()/expect_refused() on this host, as every other test
#   bed_tx              the bytes every node's link has sent so far (the sum over the nodes)
#   bed_step_bytes S1 S2 NP NAME [--set ...]
#                       the bytes per step that cross between nodes: two runs of S1 and S2
#                       steps (else the same; no evaluation but the last, no checkpoint but the
#                       last) differenced, so start-up, evaluation and checkpoint traffic cancel
#   estimate_inter_node NP [--set ...]   loom estimate --ranks-per-node 2's bytes per step
#   check_step_bytes LABEL MEASURED ESTIMATE NP   within the framing tolerance, or die
NODES=$LOOM_SRC/tools/nodes.sh
# a hung run is killed (and the script dies, its trap tearing the bed down) well before ctest's
# timeout would kill the script itself, trap and all
export LOOM_RUN_TIMEOUT=${LOOM_RUN_TIMEOUT:-120}
BED_ID=

bed_down() {
  [ -n "$BED_ID" ] || return 0
  "$NODES" down "$BED_ID"
  BED_ID=
}
# lib.sh's on_exit (background jobs, $WORK) after the bed is gone
trap 'bed_down; on_exit' EXIT

bed_up() {
  local why
  why=$("$NODES" check) || { echo "SKIP: no multi-node test bed here: $why"; exit 77; }
  # owner: this script, so `nodes.sh gc` collects the bed if the script is killed with SIGKILL
  BED_ID=$(LOOM_BED_OWNER=$$ "$NODES" new-id) || die "no bed id"
  LOOM_BED_OWNER=$$ "$NODES" up "$BED_ID" "$1" || die "bed $BED_ID did not come up"
  export LOOM_BED=$BED_ID
  MPIRUN=("$NODES" mpirun "$BED_ID")
}

on_host() {
  local saved=("${MPIRUN[@]}")
  MPIRUN=(mpirun)
  "$@"
  MPIRUN=("${saved[@]}")
}

bed_tx() { "$NODES" bytes "$BED_ID" | awk '{ s += $2 } END { printf "%.0f\n", s }'; }

bed_step_bytes() {
  local s1=$1 s2=$2 np=$3 name=$4
  shift 4
  local b0 b1 b2
  b0=$(bed_tx)
  run "$np" "${name}_s$s1" --set train.steps="$s1" --set train.eval_interval=100000 "$@"
  b1=$(bed_tx)
  run "$np" "${name}_s$s2" --set train.steps="$s2" --set train.eval_interval=100000 "$@"
  b2=$(bed_tx)
  echo $(( ((b2 - b1) - (b1 - b0)) / (s2 - s1) ))
}

estimate_inter_node() {
  local np=$1
  shift
  "$LOOM" estimate "$LOOM_SRC/configs/tiny.json" --world "$np" --ranks-per-node 2 --json "$@" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["inter_node"]["bytes_per_step"])'
}

# The veth counters count frames: the payload loom estimates plus TCP/IP framing (Ethernet 14 +
# IPv4 20 + TCP 20 + timestamps 12 = 66 bytes per segment of at most 1448 payload bytes at MTU
# 1500; with GSO one header per 64 KiB super-packet), the ACKs coming back (at most one 66-byte
# frame per data segment), Open MPI's headers (ob1 match/rendezvous, btl tcp: tens of bytes a
# fragment) and the per-step scalars its own collectives carry (loss, grad norm, metrics: a few
# small messages a rank). So: ESTIMATE <= MEASURED <= ESTIMATE * (1 + 2*66/1448) + 4 KiB per
# rank per step; 1 % below the estimate is allowed for the payload's rounding (uneven chunks).
check_step_bytes() {
  local label=$1 measured=$2 est=$3 np=$4
  /usr/bin/python3 - "$label" "$measured" "$est" "$np" <<'EOF' || die "$label: inter-node bytes per step off the estimate"
import sys
label, m, e, np = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lo, hi = 0.99 * e, e * (1 + 2 * 66 / 1448) + 4096 * np
ok = lo <= m <= hi
print(f"{label}: inter-node bytes per step measured {m}, estimate {e}"
      f" (ratio {m / e if e else float('nan'):.4f}; allowed {lo:.0f}..{hi:.0f}){'' if ok else ': OUT OF BOUNDS'}")
sys.exit(0 if ok else 1)
EOF
}
