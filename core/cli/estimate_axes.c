/* Traffic per data-parallel communicator (estimate_axes.h).
 *
 * Hybrid sharding (dp = K x R): the plugin's collectives run over the shard group (its report
 * is made with N = K), and the host all-reduces the partition's gradient over the replica
 * group once per step: 2(R-1)/R x G Psi/K per rank (trainer.c, replica_sum).
 *
 * A hierarchical all-reduce of S bytes over n = N k ranks (N nodes of k; mpi.so's
 * "hierarchical") sends per rank (k-1)/k S reduce-scattering in the node, 2(N-1)/N S/k
 * all-reducing its chunk across the nodes, (k-1)/k S all-gathering in the node: 2(n-1)/n S in
 * all, what the flat schedule sends. So ddp's bytes split exactly, whatever the buckets, into
 * the in-node share (n-N)/(n-1) and the across-node share (N-1)/(n-1). Across nodes in total
 * (all ranks): flat 2(n-k)S (each rank sends its chunks to n-1 peers, n-k of them remote, in
 * each of the two phases), hierarchical 2(N-1)S (k chunk all-reduces over N ranks whose peers
 * are all remote): 1/k of the flat schedule's. */
#include <stdio.h>
#include <string.h>

#include "estimate_axes.h"

int loom__estimate_mesh(loom_runtime *rt, loom_estimate *e, char *err, size_t errlen) {
  const loom_config *cfg = rt->cfg;
  const int N = e->world, rpn = e->ranks_per_node;
  const char *at = rt->shard_size ? cfg->parallel[rt->shard_owner].json_path : "";
  int K = N;
  if (rt->shard_size == LOOM_SHARD_NODE) {
    if (!rpn) {
      snprintf(err, errlen, "%s: %s.shard_size: \"node\" is the launcher's ranks per node, "
               "known when the job starts: estimate with --ranks-per-node K (or "
               "--set '%s.shard_size=K')", cfg->path, at, at);
      return -1;
    }
    if (rpn % e->tp != 0) { /* the trainer's message (runtime/mesh.c) */
      snprintf(err, errlen, "%s: %s.shard_size: \"node\": %d ranks per node is not a multiple "
               "of the tensor-parallel size %d", cfg->path, at, rpn, e->tp);
      return -1;
    }
  }
  if (rt->shard_size) {
    K = rt->shard_size == LOOM_SHARD_NODE ? rpn / e->tp : rt->shard_size;
    if (N % K != 0) {
      snprintf(err, errlen, "%s: %s.shard_size: %s%d does not divide the data-parallel size %d "
               "(--world %d / tp %d / pp %d): the data-parallel ranks form shard groups of "
               "shard_size ranks", cfg->path, at, rt->shard_size == LOOM_SHARD_NODE ?
               "\"node\" (ranks per node / tp) = " : "", K, N, N * e->tp * e->pp, e->tp, e->pp);
      return -1;
    }
    /* as the trainer refuses it on the launcher's nodes (runtime/mesh.c): a shard group must
     * not straddle a node boundary part-way */
    const int k = rpn && rpn % e->tp == 0 ? rpn / e->tp : 0;
    if (k && k % K != 0 && K % k != 0) {
      snprintf(err, errlen, "%s: %s.shard_size: %d neither divides the %d data-parallel ranks "
               "of a node (--ranks-per-node %d / tp %d) nor is a multiple of them: shard groups "
               "would straddle the nodes", cfg->path, at, K, k, rpn, e->tp);
      return -1;
    }
  }
  e->dp_shard = K;
  e->dp_replica = N / K;
  int node = 0;
  if (loom__comm_all_reduce_nodes(rt, &node, err, errlen) != 0) return -1;
  if (node < 0) node = rpn; /* over the launcher's nodes: --ranks-per-node's, else unknown */
  /* dp ranks per node: nodes of `node` consecutive world ranks hold node / tp of one stage's
   * data-parallel group when they tile it (tp innermost, pp outermost) */
  int k = node > 0 && node % e->tp == 0 ? node / e->tp : 0;
  e->hier_node = k > 1 && N % k == 0 && N / k > 1 ? k : 0;
  return 0;
}

uint64_t loom__estimate_axes(loom_estimate *e, uint64_t dp, const char *f, uint64_t g,
                             uint64_t part) {
  const uint64_t R = (uint64_t)(e->dp_replica > 1 ? e->dp_replica : 1);
  e->axis_dp = dp;
  snprintf(e->axis_formula[0], sizeof e->axis_formula[0], "%s", f);
  e->axis_replica = 0;
  if (R > 1) {
    e->axis_replica = 2 * (R - 1) * g * part / R;
    snprintf(e->axis_formula[1], sizeof e->axis_formula[1], "2(R-1)/R*%lluPsi/N, R = %llu",
             (unsigned long long)g, (unsigned long long)R);
  }
  e->axis_node = e->axis_cross = 0;
  /* ddp's bytes are all-reduces: split them as the hierarchical schedule sends them */
  const uint64_t n = (uint64_t)e->world, k = (uint64_t)e->hier_node;
  if (k && e->stage == 0 && dp) {
    e->axis_node = (uint64_t)((double)dp * (double)(n - n / k) / (double)(n - 1) + 0.5);
    e->axis_cross = dp - e->axis_node;
    snprintf(e->axis_formula[2], sizeof e->axis_formula[2],
             "2(k-1)/k*S, k = %llu ranks per node (reduce-scatter + all-gather)",
             (unsigned long long)k);
    snprintf(e->axis_formula[3], sizeof e->axis_formula[3],
             "2(M-1)/M*S/k, M = %llu nodes (all-reduce of the chunk)",
             (unsigned long long)(n / k));
  }
  return e->axis_replica;
}

/* The axes present, in order: name, bytes, formula, the group. */
typedef struct axis_row { const char *name; uint64_t bytes; const char *formula; char group[96]; } axis_row;

static int axis_rows(const loom_estimate *e, axis_row *r) {
  int n = 0, K = e->dp_shard ? e->dp_shard : e->world, R = e->dp_replica;
  if (e->axis_node || e->axis_cross) {
    r[n] = (axis_row){"dp_node", e->axis_node, e->axis_formula[2], ""};
    snprintf(r[n++].group, sizeof r->group, "the %d dp ranks of a node", e->hier_node);
    r[n] = (axis_row){"dp_cross", e->axis_cross, e->axis_formula[3], ""};
    snprintf(r[n++].group, sizeof r->group, "%d dp ranks, one per node (same index)",
             e->world / e->hier_node);
  } else {
    r[n] = (axis_row){R > 1 ? "dp_shard" : "dp", e->axis_dp, e->axis_formula[0], ""};
    if (R > 1) snprintf(r[n].group, sizeof r->group, "%d consecutive dp ranks", K);
    else snprintf(r[n].group, sizeof r->group, "all %d dp ranks", e->world);
    n++;
  }
  if (R > 1) {
    r[n] = (axis_row){"dp_replica", e->axis_replica, e->axis_formula[1], ""};
    snprintf(r[n++].group, sizeof r->group, "%d dp ranks %d apart (same shard)", R, K);
  }
  return n;
}

void loom__estimate_axes_print(FILE *out, const loom_estimate *e) {
  if (e->world <= 1) return;
  axis_row r[4];
  int n = axis_rows(e, r);
  if (n == 1 && !strcmp(r[0].name, "dp")) return; /* one axis: the line above says it all */
  fprintf(out, "  per communicator (sums to the data-parallel part):\n");
  for (int i = 0; i < n; i++)
    fprintf(out, "    %-10s %-40s %12llu bytes  (%s)\n", r[i].name, r[i].formula,
            (unsigned long long)r[i].bytes, r[i].group);
}

json_t *loom__estimate_axes_json(const loom_estimate *e) {
  json_t *o = json_object();
  axis_row r[4];
  int n = e->world > 1 ? axis_rows(e, r) : 0;
  for (int i = 0; i < n; i++)
    json_object_set_new(o, r[i].name,
                        json_pack("{s:I, s:s, s:s}", "bytes", (json_int_t)r[i].bytes,
                                  "formula", r[i].formula, "group", r[i].group));
  return o;
}
