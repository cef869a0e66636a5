#!/bin/bash
# ctest: labels=integration,multinode
# The start-up line "loom: placement: ..." under each launcher's variables: Open MPI's mpirun
# (node = host name, local rank = OMPI_COMM_WORLD_LOCAL_RANK), srun's (SLURMD_NODENAME,
# SLURM_NODEID, SLURM_LOCALID: faked here per rank under mpirun, with Open MPI's own local rank
# unset, so the Slurm branch is read on every CI run; integration.slurm checks it under a real
# srun), mpirun inside a Slurm allocation (SLURMD_NODENAME with Open MPI's local rank), and more
# nodes than the line lists. The node ids follow SLURM_NODEID, not the ranks' order.
# Needs: LOOM_BUILD, LOOM_SRC.
set -u
. "$(dirname "$0")/../lib/lib.sh"
make_data
# place NRANKS NAME ENV_SETUP: one step of configs/tiny.json on NRANKS ranks, each rank's
# environment changed by ENV_SETUP (bash, sees OMPI_COMM_WORLD_RANK as R) first; the placement
# line into $WORK/NAME.line
place() {
  local n=$1 name=$2 setup=$3
  timeout 120 mpirun -np "$n" --bind-to none bash -c "R=\$OMPI_COMM_WORLD_RANK; $setup
    exec \"$LOOM\" train \"$LOOM_SRC/configs/tiny.json\" --set 'data.train=$WORK/data/train_*.bin' \
      --set data.val= --set 'data.vocab=$WORK/data/vocab.json' --set train.steps=1 \
      --set lr_schedule.warmup_steps=0 --set train.micro_batch_size=1 \
      --set logging.metrics=$WORK/$name.jsonl" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log" >&2; die "$name: the run failed"; }
  grep '^loom: placement: ' "$WORK/$name.log" > "$WORK/$name.line" ||
    { cat "$WORK/$name.log" >&2; die "$name: no placement line"; }
  [ "$(wc -l < "$WORK/$name.line")" -eq 1 ] ||
    die "$name: more than one placement line (rank 0 alone prints it)"
}
expect() { # expect NAME LINE
  [ "$(cat "$WORK/$1.line")" = "$2" ] ||
    die "$1: the placement line is
  $(cat "$WORK/$1.line")
expected
  $2"
  echo "ok: $1: $2"
}
host=$(hostname)

# 1. mpirun: one node, the host's name, Open MPI's local ranks
place 2 mpirun ""
ompi="local rank from OMPI_COMM_WORLD_LOCAL_RANK"
expect mpirun "loom: placement: 2 ranks on 1 node (node from the host name, $ompi) |\
 node 0 ${host:0:63}: ranks 0-1, local 0-1"

# 2. srun's variables (Open MPI's local rank unset): 4 ranks on 2 nodes, cyclic (rank 0 on
# node 1), so the node ids must come from SLURM_NODEID, not from the ranks' order
place 4 slurm_vars "unset OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE
  export SLURM_NODEID=\$((1 - R % 2)) SLURMD_NODENAME=gpu-\$((1 - R % 2)) SLURM_LOCALID=\$((R / 2))
  export SLURM_NTASKS_PER_NODE=2"
expect slurm_vars "loom: placement: 4 ranks on 2 nodes (node from SLURMD_NODENAME and\
 SLURM_NODEID, local rank from SLURM_LOCALID) | node 0 gpu-0: ranks 1,3, local 0-1 |\
 node 1 gpu-1: ranks 0,2, local 0-1"

# 3. mpirun inside an allocation: Slurm's node names, Open MPI's local ranks, SLURM_NODEID of
# the batch step ignored (it numbers the nodes of mpirun's daemon step, not the ranks')
place 2 mpirun_in_slurm "export SLURMD_NODENAME=cn\$((7 - R)) SLURM_NODEID=0"
expect mpirun_in_slurm "loom: placement: 2 ranks on 2 nodes (node from SLURMD_NODENAME, $ompi) |\
 node 0 cn7: rank 0, local 0 | node 1 cn6: rank 1, local 1"

# 4. more nodes than the line lists (8): the rest counted
place 10 many_nodes "export SLURMD_NODENAME=node\$R"
line=$(cat "$WORK/many_nodes.line")
case $line in
  "loom: placement: 10 ranks on 10 nodes ("*"| node 7 node7: rank 7, local 7 | ... 2 more nodes")
    ;;
  *) die "many_nodes: expected 8 nodes listed and '... 2 more nodes', got: $line" ;;
esac
echo "ok: many_nodes: ...${line: -60}"
echo "all checks passed"
