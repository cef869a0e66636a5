#!/bin/bash
# ctest: labels=integration,multinode timeout=300
# Layouts that do not fit the real nodes of tools/nodes.sh's test bed (each node its own Open
# MPI host) are refused before training, by every rank alike, naming the values, with no
# process left behind in any node (ip netns pids: each node holds only its holder):
#   - 3 nodes for 4 ranks (hostfile slots 2, 1, 1: the node count does not divide the world):
#     zero3 shard_size "node" names the ranks per node it found (between 1 and 2); ddp over the
#     hierarchical all-reduce (nodes from MPI_COMM_TYPE_SHARED) names each node's count;
#   - 2 nodes of 3 ranks: zero3 shard_size 2 divides dp 6 but not a node's 3 dp ranks (a shard
#     group would straddle the nodes), named with both numbers; shard_size "node" with tp 2:
#     3 ranks per node is not a multiple of tp 2.
# (On one host the same messages are faked per rank by faults.hybrid_refused; here the
# launcher's locality is real.) Skips (77) where namespaces cannot be made.
. "$(dirname "$0")/../lib/lib.sh"
. "$TESTLIB/bed.sh"
bed_up 3
make_data

# only_holders: every node's processes are its holder alone (no rank or orted left behind)
only_holders() {
  local k pids holder
  for k in 1 2 3; do
    pids=$(ip netns pids "loom${BED_ID}n$k" | sort | tr '\n' ' ')
    holder=$(cat "/run/loom-nodes/$BED_ID/n$k.pid")
    [ "$pids" = "$holder " ] ||
      { ps -o pid,args -p "${pids// /,}0" >&2; die "node $k: processes left behind: $pids"; }
  done
}
# hosts SLOTS...: a hostfile of the first nodes with these slots, path printed
hosts() {
  local f=$WORK/hosts.$*
  f=${f// /_}
  : >"$f"
  local k=1 s
  for s in "$@"; do
    echo "$("$NODES" host "$BED_ID" "$k") slots=$s" >>"$f"
    k=$((k + 1))
  done
  echo "$f"
}
# refused HOSTFILE NRANKS NEEDLE [--set ...]: refused within 60 s on every rank alike
refused() {
  local hf=$1 n=$2 needle=$3 t0=$SECONDS
  shift 3
  LOOM_NODES_HOSTFILE=$hf expect_refused "$n" "$needle" --set train.steps=2 "$@"
  local said
  said=$(grep -cF "$needle" "$WORK/fail.log")
  echo "   ($((SECONDS - t0)) s; $said line(s) of $n ranks name it)"
  [ $((SECONDS - t0)) -le 60 ] || die "refusal took $((SECONDS - t0)) s"
  only_holders
}
H211=$(hosts 2 1 1)
H33=$(hosts 3 3)
B12=(--set train.micro_batch_size=2 --set train.global_batch_size=12)
refused "$H211" 4 'parallel[0].shard_size: "node" needs the same number of ranks on every node, but the nodes hold between 1 and 2 ranks (from Open MPI)' \
  --set 'parallel=[{"plugin":"zero3","shard_size":"node"}]'
refused "$H211" 4 "hierarchical: the nodes hold different numbers of ranks (2 on the node of world rank 0, 1 on the node of world rank 2, 1 on the node of world rank 3; nodes from MPI_COMM_TYPE_SHARED)" \
  --set 'parallel=[{"plugin":"ddp"}]' --set 'comm={"plugin":"mpi","hierarchical":true}'
refused "$H33" 6 "parallel[0].shard_size: 2 neither divides the 3 data-parallel ranks of a node (3 ranks per node from Open MPI / tp 1)" \
  --set 'parallel=[{"plugin":"zero3","shard_size":2}]' "${B12[@]}"
refused "$H33" 6 'parallel[1].shard_size: "node": 3 ranks per node is not a multiple of the tensor-parallel size 2' \
  --set 'parallel=[{"plugin":"tensor_parallel","size":2},{"plugin":"zero3","shard_size":"node"}]' \
  --set train.micro_batch_size=2 --set train.global_batch_size=6
echo "ok: layouts that do not fit the bed's nodes refused on every rank, naming the values"
