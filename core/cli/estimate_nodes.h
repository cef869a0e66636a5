/* `loom estimate --ranks-per-node K`: the bytes a step moves between nodes.
 *
 * Ranks sit on nodes by block, as `mpirun --map-by slot` (and Slurm's block distribution)
 * places them: world rank r on node r / K. The mesh is the trainer's (runtime/mesh.c): world
 * rank = (pp_rank * dp + dp_rank) * tp + tp_rank, so tensor-parallel groups are the closest
 * neighbours, then data parallel, then the pipeline.
 *
 * Per mesh axis a and rank r, with B_a(r) the bytes r sends per step over a (the plugins'
 * estimate reports for that axis on r's pipeline stage: loom_estimate_stage's dp, tp, p2p and
 * tied_wte figures; under hybrid sharding dp is its shard group's and dp_replica the host's sum
 * over the replicas, under a hierarchical all-reduce dp_node and dp_cross split the dp bytes:
 * estimate_axes.c) and peers_a(r) the ranks it sends them to (the members of r's group on the
 * axis, as the trainer's mesh and mpi.so's node split make them, placed by block):
 *   inter-node bytes = sum over a, r of  B_a(r) * |peers_a(r) on another node| / |peers_a(r)|
 * Exact when r sends each peer the same share: mpi.so's own collectives (mpi_owner.c: the sum
 * all_reduce, reduce_scatter and all_gather send every other member 1/n of the buffer per phase,
 * directly), and the pipeline's boundary sends (A x B*T*C to each neighbour and direction).
 * Not exact for Open MPI's own collectives (comm.options.collectives "mpi", and what mpi.so
 * leaves to them: broadcasts, and every reduction but a 16/32-bit float sum: the trainer's
 * float64 loss and grad-norm sums, int64 maxima of memory peaks and flags): their trees and
 * rings send to a few peers chosen by the algorithm, not an equal share to each. Per step these
 * are a few scalars, outside the figures (docs/multinode.md's band allows for them). The
 * figures count payload: TCP/IP framing and Open MPI's headers come on top (docs/multinode.md). */
#ifndef LOOM_CLI_ESTIMATE_NODES_H
#define LOOM_CLI_ESTIMATE_NODES_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "estimate.h"

#define LOOM_NODES_MAX_AXES 8
#define LOOM_NODES_MAX_NODES 4096

/* One axis's traffic per step, summed over every rank of the world. */
typedef struct loom_nodes_axis {
  char name[24];        /* "dp" (or "dp_shard" + "dp_replica", or "dp_node" + "dp_cross"),
                           "tp", "pp p2p", "tied wte" */
  uint64_t bytes;       /* every rank's sends over the axis */
  uint64_t inter_node;  /* of them, the bytes that cross to another node */
} loom_nodes_axis;

typedef struct loom_estimate_nodes {
  int ranks_per_node, n_nodes, world;
  int n_axes;
  loom_nodes_axis axes[LOOM_NODES_MAX_AXES];
  uint64_t inter_node_bytes;   /* per step: the sum of the axes' inter_node (payload) */
  uint64_t max_node_tx;        /* the largest node's share of it (what its link sends) */
} loom_estimate_nodes;

/* Split e's per-rank traffic into bytes within and across nodes of `ranks_per_node` ranks each
 * (block placement). Returns 0, or -1 with one line in err when ranks_per_node does not divide
 * the world (the message names both). */
int loom_estimate_nodes_compute(const loom_estimate *e, int ranks_per_node,
                                loom_estimate_nodes *out, char *err, size_t errlen);

/* One line per axis and the total, for loom estimate's table. */
void loom_estimate_nodes_print(FILE *out, const loom_estimate_nodes *n);

/* {"ranks_per_node", "nodes", "bytes_per_step", "max_node_tx_bytes_per_step", "axes": {name:
 * {"bytes", "inter_node_bytes"}}}; NULL when out of memory. */
json_t *loom_estimate_nodes_json(const loom_estimate_nodes *n);

#endif
