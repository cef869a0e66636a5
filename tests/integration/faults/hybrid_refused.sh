#!/bin/bash
# ctest: labels=integration
# Bad hybrid-sharding and hierarchical-all-reduce input is refused before training with one line
# naming the value (issue 22), by `loom check` where it can see it, else by every rank of
# `loom train` alike, so none is left waiting in a collective (each run must end well within
# its timeout: 124 would be a hang): a shard size on a plugin that cannot shard over part of
# dp, one that does not divide dp, a misspelt one, "node" on nodes of different sizes (the
# launcher's locality faked per rank), "node" in `loom estimate`, a node size that does not
# divide the world, a communicator lying unevenly on the nodes (tp 2 x dp 3 on 2 nodes of 3),
# node_size without hierarchical, hierarchical with Open MPI's collectives.
. "$(dirname "$0")/../lib/lib.sh"
make_data
TINY=$LOOM_SRC/configs/tiny.json
DATA=(--set "data.train=$WORK/data/train_*.bin" --set "data.val=$WORK/data/val_*.bin"
      --set "data.vocab=$WORK/data/vocab.json" --set checkpoint=null)
# check_refused NEEDLE [loom check args...]
check_refused() {
  local needle=$1
  shift
  if "$LOOM" check "$TINY" "${DATA[@]}" "$@" >"$WORK/check.log" 2>&1; then
    cat "$WORK/check.log"; die "loom check accepted: $*"
  fi
  grep -qF "$needle" "$WORK/check.log" || { cat "$WORK/check.log"; die "no '$needle'"; }
  [ "$(grep -c 'error:' "$WORK/check.log")" = 1 ] || { cat "$WORK/check.log"; die "not one line"; }
  echo "check refused: $(grep -m1 'error:' "$WORK/check.log")"
}
# train_refused NRANKS NEEDLE [mpirun args...] -- [loom train args...]
train_refused() {
  local n=$1 needle=$2 rc=0
  shift 2
  local pre=()
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  "${REFUSED_RUN[@]}" timeout 120 mpirun -np "$n" --bind-to none "${pre[@]}" "$LOOM" train "$TINY" \
    "${DATA[@]}" "$@" >"$WORK/fail.log" 2>&1 || rc=$?
  [ $rc != 0 ] || die "train accepted: $*"
  [ $rc != 124 ] || { cat "$WORK/fail.log"; die "train hung (timeout): $*"; }
  grep -qF "$needle" "$WORK/fail.log" || { cat "$WORK/fail.log"; die "no '$needle' in the error"; }
  echo "train refused ($(grep -cF "$needle" "$WORK/fail.log") of $n ranks said so): $(grep -m1 -F "$needle" "$WORK/fail.log")"
}
check_refused "parallel[0].shard_size: plugin 'ddp'" --set 'parallel=[{"plugin":"ddp","shard_size":2}]' --world 4
check_refused "parallel[0].shard_size: 3 does not divide the data-parallel size 4" \
  --set 'parallel=[{"plugin":"zero3","shard_size":3}]' --world 4
check_refused 'parallel[0].shard_size: expected an integer in [1, 1048576] (data-parallel ranks per shard group) or "node", got "nod"' \
  --set 'parallel=[{"plugin":"zero2","shard_size":"nod"}]' --world 4
check_refused 'node_size: 2 given without "hierarchical": true' --set 'comm={"plugin":"mpi","node_size":2}'
check_refused 'hierarchical: true needs "collectives": "loom"' \
  --set 'comm={"plugin":"mpi","hierarchical":true,"collectives":"mpi"}'
"$LOOM" estimate "$TINY" --world 4 --set 'parallel=[{"plugin":"zero3","shard_size":"node"}]' \
  >"$WORK/est.log" 2>&1 && die "estimate accepted shard_size \"node\""
grep -qF 'shard_size: "node" is the launcher' "$WORK/est.log" || { cat "$WORK/est.log"; die "estimate's message"; }
echo "estimate refused: $(cat "$WORK/est.log")"
train_refused 4 "parallel[0].shard_size: 3 does not divide the data-parallel size 4" -- \
  --set 'parallel=[{"plugin":"zero3","shard_size":3}]'
# 3 ranks on one "node", 1 on another, as the launcher would say (OMPI_COMM_WORLD_LOCAL_*)
cat >"$WORK/uneven.sh" <<'SH'
#!/bin/sh
if [ "$OMPI_COMM_WORLD_RANK" -lt 3 ]; then export OMPI_COMM_WORLD_LOCAL_SIZE=3
else export OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0; fi
exec "$@"
SH
chmod +x "$WORK/uneven.sh"
REAL_LOOM=$LOOM
LOOM="$WORK/uneven.sh $REAL_LOOM"
# shellcheck disable=SC2086
"${REFUSED_RUN[@]}" timeout 120 mpirun -np 4 --bind-to none $LOOM train "$TINY" "${DATA[@]}" \
  --set 'parallel=[{"plugin":"zero3","shard_size":"node"}]' >"$WORK/fail.log" 2>&1 && die "uneven nodes accepted"
LOOM=$REAL_LOOM
grep -qF 'shard_size: "node" needs the same number of ranks on every node, but the nodes hold between 1 and 3 ranks' \
  "$WORK/fail.log" || { cat "$WORK/fail.log"; die "uneven nodes: no message naming the counts"; }
echo "train refused: $(grep -m1 -F 'between 1 and 3' "$WORK/fail.log")"
check_refused "node_size: 3 does not divide the world size 4" --world 4 \
  --set 'comm={"plugin":"mpi","hierarchical":true,"node_size":3}'
train_refused 4 "node_size: 3 does not divide the world size 4" -- \
  --set 'comm={"plugin":"mpi","hierarchical":true,"node_size":3}'
# dp groups {0,2,4} and {1,3,5} on nodes {0,1,2},{3,4,5}: both are uneven, each names its own
# counts, and which group's ranks print before mpirun stops the job is a race.
train_refused 6 "a communicator of 3 ranks lies unevenly on the nodes (" -- \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2},{"plugin":"ddp"}]' \
  --set 'comm={"plugin":"mpi","hierarchical":true,"node_size":3}'
counts='(2 on the node of world rank 0, 1|1 on the node of world rank 0, 2)'
grep -qE "unevenly on the nodes \\($counts on the node of world rank 3\\)" "$WORK/fail.log" \
  || { cat "$WORK/fail.log"; die "uneven communicator: counts not named"; }
echo "hybrid_refused: every bad input refused before training, naming the value"
