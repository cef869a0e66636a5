/* Option "hierarchical" of mpi.so: the all_reduce SUM of loom's own collectives over a
 * communicator that spans nodes runs in three phases — reduce_scatter among the ranks of each
 * node, all_reduce of each rank's chunk among the ranks with the same index in their nodes (one
 * per node), all_gather within the node (NCCL's and Horovod's hierarchical all-reduce) — so
 * each byte crosses between nodes 2(N-1) times in all instead of the flat schedule's 2(n-k)
 * (N nodes of k ranks, n = N k): 1/k of the inter-node bytes, the same bytes per rank.
 *
 * The nodes: MPI_COMM_TYPE_SHARED (the launcher's idea of a host), or option "node_size": K,
 * which makes every K consecutive world ranks a node (testable on one host, and right where
 * the launcher's locality is not). Every node must hold the same number of ranks: create()
 * refuses otherwise, on every rank alike, naming the counts; a communicator whose ranks lie
 * unevenly on the nodes is refused by split() the same way. A communicator within one node, or
 * with one rank per node, stays flat (the schedules coincide). Other operations stay flat. */
#ifndef LOOM_MPI_HIER_H
#define LOOM_MPI_HIER_H

#include "mpi_internal.h"

/* create(), once MPI is up: find this rank's node (c->node_id) and check that every node holds
 * the same number of ranks, then attach the world. LOOM_OK (nothing when not hierarchical), or
 * LOOM_INVALID_CONFIG with the plugin's error set (the same on every rank). */
int mpi_hier_init(mpi_ctx *c);
/* Collective over comm: build comm->node and comm->cross when comm spans several nodes with
 * several of its ranks on each. LOOM_OK, LOOM_INVALID_CONFIG (uneven), or an MPI error. */
int mpi_hier_attach(mpi_ctx *c, loom_comm *comm);
/* Free what mpi_hier_attach built (before MPI_Finalize). */
void mpi_hier_detach(loom_comm *comm);

#endif
