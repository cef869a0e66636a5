/* The ranks' placement on nodes, as train's start-up line shows it:
 *
 *   loom: placement: 4 ranks on 2 nodes (node from SLURMD_NODENAME and SLURM_NODEID, local
 *   rank from SLURM_LOCALID) | node 0 n01: ranks 0-1, local 0-1 | node 1 n02: ranks 2-3, local 0-1
 *
 * so a cluster user sees at once whether the launcher put the ranks where the job script asked
 * (nodes x tasks per node) and which variables loom read. Each rank contributes one fixed-size
 * record; an all-gather on host memory (before the device is open: comm_v1.h) gives every rank
 * all of them, and the summary is written on every rank (rank 0 prints it). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device_open.h"
#include "placement.h"

#define NODE_NAME_MAX 64 /* bytes with the NUL; longer names are cut (display only) */
#define NODES_SHOWN 8    /* nodes listed on the line; the rest are counted */

/* One rank's record, gathered as bytes (every rank runs the same binary: same layout). */
typedef struct rank_place {
  char node[NODE_NAME_MAX]; /* NUL-terminated */
  int32_t node_id;          /* SLURM_NODEID when srun started the rank, else -1 */
  int32_t local_rank;
} rank_place;

/* Appends to a fixed buffer; a line that would overflow ends in "..." instead. */
typedef struct line_buf {
  char *s;
  size_t cap, len;
} line_buf;

static void put(line_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line_buf *b, const char *fmt, ...) {
  if (b->len + 1 >= b->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (b->len + (size_t)n >= b->cap) { /* cut: mark it */
    b->len = b->cap - 1;
    if (b->cap > 4) memcpy(b->s + b->cap - 4, "...", 4);
    return;
  }
  b->len += (size_t)n;
}

/* "0-3,6,8-9": the integers of v (n of them, in the order given) with runs of consecutive
 * values written as ranges. */
static void put_ranges(line_buf *b, const int *v, int n) {
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && v[j + 1] == v[j] + 1) j++;
    put(b, "%s%d", i ? "," : "", v[i]);
    if (j > i) put(b, "-%d", v[j]);
    i = j + 1;
  }
}

static void own_record(loom_runtime *rt, rank_place *me, const char **local_var,
                       const char **node_var, int *slurm_ids) {
  int local_rank, local_size;
  const char *source;
  loom__local_rank(rt, &local_rank, &local_size, &source);
  memset(me, 0, sizeof *me);
  me->local_rank = local_rank;
  me->node_id = -1;
  /* Slurm's node name is the one its job scripts and sinfo use (it may differ from the host
   * name); mpirun inside an allocation inherits it too */
  const char *slurm_node = getenv("SLURMD_NODENAME");
  if (slurm_node && *slurm_node) {
    snprintf(me->node, sizeof me->node, "%s", slurm_node);
    *node_var = "SLURMD_NODENAME";
  } else {
    if (gethostname(me->node, sizeof me->node - 1) != 0) snprintf(me->node, sizeof me->node, "?");
    *node_var = "the host name";
  }
  /* SLURM_NODEID is the node's index in srun's step only when srun started this rank; under
   * mpirun in an allocation the daemons' own step numbers the nodes differently */
  *slurm_ids = 0;
  if (strcmp(source, "Slurm") == 0) {
    *local_var = "local rank from SLURM_LOCALID";
    const char *id = getenv("SLURM_NODEID");
    char *end;
    long x = id && *id ? strtol(id, &end, 10) : -1;
    if (id && *id && *end == '\0' && x >= 0 && x < INT32_MAX) {
      me->node_id = (int32_t)x;
      *slurm_ids = 1;
    }
  } else if (strcmp(source, "Open MPI") == 0) {
    *local_var = "local rank from OMPI_COMM_WORLD_LOCAL_RANK";
  } else if (strcmp(source, "no launcher") == 0) {
    *local_var = "no launcher: local rank 0";
  } else {
    *local_var = "local rank from the comm plugin's shared-memory split";
  }
}

/* The summary of all n records into rt->placement. */
static void summarize(loom_runtime *rt, const rank_place *all, int n, const char *local_var,
                      const char *node_var, int slurm_ids) {
  int *node_of = malloc(sizeof(int) * (size_t)n); /* each rank's node: its lowest rank */
  int *firsts = malloc(sizeof(int) * (size_t)n);  /* each node's lowest rank, ordered by id */
  int *ids = malloc(sizeof(int) * (size_t)n);     /* the node ids, same order */
  int *ranks = malloc(sizeof(int) * (size_t)n), *locals = malloc(sizeof(int) * (size_t)n);
  line_buf b = {rt->placement, sizeof rt->placement, 0};
  rt->placement[0] = '\0';
  if (!node_of || !firsts || !ids || !ranks || !locals) {
    put(&b, "%d ranks (no memory for the summary)", n);
    goto out;
  }
  int nodes = 0;
  for (int r = 0; r < n; r++) {
    node_of[r] = r;
    for (int q = 0; q < r; q++)
      if (strcmp(all[q].node, all[r].node) == 0) {
        node_of[r] = node_of[q];
        break;
      }
    if (node_of[r] != r) continue;
    /* a node's id: Slurm's when it gave them, else its place in the order of lowest ranks;
     * kept sorted by id (insertion: the nodes arrive almost in order) */
    int id = slurm_ids ? all[r].node_id : nodes, k = nodes++;
    while (k > 0 && ids[k - 1] > id) {
      ids[k] = ids[k - 1];
      firsts[k] = firsts[k - 1];
      k--;
    }
    ids[k] = id;
    firsts[k] = r;
  }
  put(&b, "%d rank%s on %d node%s (node from %s%s, %s)", n, n == 1 ? "" : "s",
      nodes, nodes == 1 ? "" : "s", node_var, slurm_ids ? " and SLURM_NODEID" : "", local_var);
  int shown = nodes < NODES_SHOWN ? nodes : NODES_SHOWN;
  for (int k = 0; k < shown; k++) {
    int m = 0;
    for (int r = 0; r < n; r++)
      if (node_of[r] == firsts[k]) {
        ranks[m] = r;
        locals[m++] = all[r].local_rank;
      }
    put(&b, " | node %d %s: rank%s ", ids[k], all[firsts[k]].node, m == 1 ? "" : "s");
    put_ranges(&b, ranks, m);
    put(&b, ", local ");
    put_ranges(&b, locals, m);
  }
  if (shown < nodes) put(&b, " | ... %d more node%s", nodes - shown, nodes - shown == 1 ? "" : "s");
out:
  free(node_of);
  free(firsts);
  free(ids);
  free(ranks);
  free(locals);
}

int loom__placement_gather(loom_runtime *rt, char *err, size_t errlen) {
  const char *local_var, *node_var;
  int slurm_ids;
  rank_place me;
  own_record(rt, &me, &local_var, &node_var, &slurm_ids);
  int n = rt->mesh.world_size > 0 ? rt->mesh.world_size : 1;
  if (n == 1) {
    summarize(rt, &me, 1, local_var, node_var, slurm_ids);
    return 0;
  }
  rank_place *all = calloc((size_t)n, sizeof *all);
  if (!all) {
    snprintf(err, errlen, "gathering the ranks' placement failed: out of memory (%d ranks)", n);
    return -1;
  }
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (c->all_gather(rt->comm_ctx, rt->mesh.axis[LOOM_AXIS_WORLD], &me, all, sizeof me, LOOM_U8,
                    NULL) != LOOM_OK) {
    snprintf(err, errlen, "gathering the ranks' placement failed: %s", rt->comm_host.error);
    free(all);
    return -1;
  }
  /* every rank read the same launcher's variables: Slurm's ids only when all have them */
  for (int r = 0; r < n; r++) {
    all[r].node[NODE_NAME_MAX - 1] = '\0';
    if (all[r].node_id < 0) slurm_ids = 0;
  }
  summarize(rt, all, n, local_var, node_var, slurm_ids);
  free(all);
  return 0;
}
