/* `loom estimate`'s traffic per communicator ("axis") of the data-parallel group (issue 22):
 * hybrid sharding's shard group and replica group, and a hierarchical all-reduce's in-node and
 * across-node parts, each with its formula, so that a per-axis figure (bytes x the share of
 * the group's peers on other nodes) composes. */
#ifndef LOOM_CORE_ESTIMATE_AXES_H
#define LOOM_CORE_ESTIMATE_AXES_H

#include <jansson.h>

#include "estimate.h"

/* The data-parallel group's layout for e->world ranks: hybrid sharding from the host key
 * "shard_size" (K must divide N; "node" is the launcher's ranks per node / tp, so it needs
 * e->ranks_per_node, else it is refused; with e->ranks_per_node a K that straddles the nodes is
 * refused as the trainer refuses it), and the comm plugin's hierarchical all-reduce (comm ABI
 * 1.11: nodes of K consecutive world ranks, i.e. K / tp data-parallel ranks; the launcher's
 * nodes are e->ranks_per_node's, not split when unknown). Returns 0 or -1 with a one-line
 * message. */
int loom__estimate_mesh(loom_runtime *rt, loom_estimate *e, char *err, size_t errlen);

/* Split the data-parallel plugin's bytes per step `dp` (its formula `f`) into the axes and
 * return what the host adds: hybrid sharding's sum of the partition's gradient over the R
 * replicas, an in-place ring-count all-reduce of G x partition bytes, 2(R-1)/R x G Psi/K.
 * g = gradient bytes per element, part = the partition's elements (rank 0's, the largest). */
uint64_t loom__estimate_axes(loom_estimate *e, uint64_t dp, const char *f, uint64_t g,
                             uint64_t part);

/* One line per axis (the table), and {"dp": {"bytes", "formula", "group"}, ...} (--json). */
void loom__estimate_axes_print(FILE *out, const loom_estimate *e);
json_t *loom__estimate_axes_json(const loom_estimate *e);

#endif
