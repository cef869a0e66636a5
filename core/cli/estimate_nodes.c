/* The bytes a step moves between nodes (estimate_nodes.h has the formula and where it is
 * exact): every mesh axis's per-rank traffic, split by where each rank's peers sit. */
#include "estimate_nodes.h"

#include <stdlib.h>
#include <string.h>

typedef struct coords { int dp, tp, pp; } coords;

/* A mesh axis as the trainer builds it (runtime/mesh.c's splits): the ranks of one color form
 * one group; `key` orders a group (the pipeline's neighbours are key +- 1). A new axis (a
 * hybrid-sharding split of dp, ...) is one more row of `axes` below. */
typedef struct axis_desc {
  const char *name;
  int (*color)(const loom_estimate *e, coords c); /* -1: the rank is in no group of the axis */
  int (*key)(const loom_estimate *e, coords c);
  int neighbours; /* 1: sends go to the previous and next member only; 0: to every member */
  uint64_t (*bytes)(const loom_estimate_stage *st); /* what one rank of the stage sends */
} axis_desc;

static int tp_of(const loom_estimate *e) { return e->tp > 1 ? e->tp : 1; }
static int pp_of(const loom_estimate *e) { return e->pp > 1 ? e->pp : 1; }

/* The data-parallel group splits (estimate_axes.c): hybrid sharding's shard groups of K
 * consecutive dp ranks and replica groups of the R ranks K apart; a hierarchical all-reduce's
 * in-node groups of k consecutive dp ranks and across-node groups of the ranks k apart. The
 * plain "dp" row stands for neither. */
static int hybrid(const loom_estimate *e) { return e->dp_replica > 1; }
static int hier(const loom_estimate *e) { return e->axis_node || e->axis_cross; }
static int dp_group(const loom_estimate *e, coords c) { return c.pp * tp_of(e) + c.tp; }
static int dp_color(const loom_estimate *e, coords c) {
  return hybrid(e) || hier(e) ? -1 : dp_group(e, c);
}
static int dp_key(const loom_estimate *e, coords c) { (void)e; return c.dp; }
static int shard_color(const loom_estimate *e, coords c) {
  return hybrid(e) && !hier(e) ? dp_group(e, c) * e->world + c.dp / e->dp_shard : -1;
}
static int replica_color(const loom_estimate *e, coords c) {
  return hybrid(e) ? dp_group(e, c) * e->world + c.dp % e->dp_shard : -1;
}
static int node_color(const loom_estimate *e, coords c) {
  return hier(e) ? dp_group(e, c) * e->world + c.dp / e->hier_node : -1;
}
static int cross_color(const loom_estimate *e, coords c) {
  return hier(e) ? dp_group(e, c) * e->world + c.dp % e->hier_node : -1;
}
static int tp_color(const loom_estimate *e, coords c) { return c.pp * e->world + c.dp; }
static int tp_key(const loom_estimate *e, coords c) { (void)e; return c.tp; }
static int pp_color(const loom_estimate *e, coords c) { return c.dp * tp_of(e) + c.tp; }
static int pp_key(const loom_estimate *e, coords c) { (void)e; return c.pp; }
/* the tied embedding's gradient group: the first and last stage's ranks of one tp rank */
static int tied_color(const loom_estimate *e, coords c) {
  return c.pp == 0 || c.pp == pp_of(e) - 1 ? c.tp : -1;
}
static int tied_key(const loom_estimate *e, coords c) { return c.pp * e->world + c.dp; }

static uint64_t dp_bytes(const loom_estimate_stage *st) { return st->dp_comm_bytes; }
static uint64_t replica_bytes(const loom_estimate_stage *st) { return st->replica_comm_bytes; }
static uint64_t node_bytes(const loom_estimate_stage *st) { return st->node_comm_bytes; }
static uint64_t cross_bytes(const loom_estimate_stage *st) { return st->cross_comm_bytes; }
static uint64_t tp_bytes(const loom_estimate_stage *st) { return st->tp_comm_bytes; }
static uint64_t p2p_bytes(const loom_estimate_stage *st) { return st->p2p_comm_bytes; }
static uint64_t tied_bytes(const loom_estimate_stage *st) { return st->tied_comm_bytes; }

/* The names are `loom estimate --json`'s comm_axes keys for the data-parallel splits. */
static const axis_desc axes[] = {
  {"dp", dp_color, dp_key, 0, dp_bytes},
  {"dp_shard", shard_color, dp_key, 0, dp_bytes},
  {"dp_replica", replica_color, dp_key, 0, replica_bytes},
  {"dp_node", node_color, dp_key, 0, node_bytes},
  {"dp_cross", cross_color, dp_key, 0, cross_bytes},
  {"tp", tp_color, tp_key, 0, tp_bytes},
  {"pp p2p", pp_color, pp_key, 1, p2p_bytes},
  {"tied wte", tied_color, tied_key, 0, tied_bytes},
};

typedef struct member { int color, node, key, rank; } member;

static int by_color_node(const void *a, const void *b) {
  const member *x = a, *y = b;
  if (x->color != y->color) return x->color < y->color ? -1 : 1;
  return (x->node > y->node) - (x->node < y->node);
}
static int by_color_key(const void *a, const void *b) {
  const member *x = a, *y = b;
  if (x->color != y->color) return x->color < y->color ? -1 : 1;
  return (x->key > y->key) - (x->key < y->key);
}

static coords coords_of(const loom_estimate *e, int r) {
  const int tp = tp_of(e);
  return (coords){.tp = r % tp, .dp = (r / tp) % e->world, .pp = r / (tp * e->world)};
}

/* B * off / peers without overflow (B up to 2^64, peers up to 2^20) */
static uint64_t share(uint64_t b, uint64_t off, uint64_t peers) {
  return peers ? (uint64_t)((unsigned __int128)b * off / peers) : 0;
}

/* One axis over the world: each member's bytes times the share of its peers on other nodes,
 * added to its node's sends. m has one entry per rank (scratch). */
static void axis_traffic(const loom_estimate *e, const axis_desc *a, int K, member *m,
                         uint64_t *node_tx, loom_nodes_axis *out) {
  const int W = e->world * tp_of(e) * pp_of(e);
  int n = 0;
  for (int r = 0; r < W; r++) {
    coords c = coords_of(e, r);
    int color = a->color(e, c);
    if (color >= 0) m[n++] = (member){color, r / K, a->key(e, c), r};
  }
  snprintf(out->name, sizeof out->name, "%s", a->name);
  qsort(m, (size_t)n, sizeof *m, a->neighbours ? by_color_key : by_color_node);
  for (int i = 0; i < n;) {
    int g = i; /* the group: [g, end) */
    while (g < n && m[g].color == m[i].color) g++;
    for (int j = i; j < g; j++) {
      const loom_estimate_stage *st = &e->stages[coords_of(e, m[j].rank).pp];
      uint64_t b = a->bytes(st), peers = 0, off = 0;
      if (a->neighbours) {
        for (int d = -1; d <= 1; d += 2) {
          int k = j + d;
          if (k < i || k >= g || m[k].key != m[j].key + d) continue;
          peers++;
          off += m[k].node != m[j].node;
        }
      } else {
        int same = 0; /* members of j's node: a run of the (color, node) order */
        for (int k = j; k >= i && m[k].node == m[j].node; k--) same++;
        for (int k = j + 1; k < g && m[k].node == m[j].node; k++) same++;
        peers = (uint64_t)(g - i - 1);
        off = (uint64_t)(g - i - same);
      }
      if (!peers) continue;
      uint64_t x = share(b, off, peers);
      out->bytes += b;
      out->inter_node += x;
      node_tx[m[j].node] += x;
    }
    i = g;
  }
}

int loom_estimate_nodes_compute(const loom_estimate *e, int ranks_per_node,
                                loom_estimate_nodes *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  const int W = e->world * tp_of(e) * pp_of(e);
  if (ranks_per_node < 1 || W % ranks_per_node != 0) {
    snprintf(err, errlen, "--ranks-per-node %d: the world of %d ranks is not a whole number of "
             "nodes of %d ranks (expected a divisor of %d)", ranks_per_node, W, ranks_per_node,
             W);
    return -1;
  }
  out->ranks_per_node = ranks_per_node;
  out->world = W;
  out->n_nodes = W / ranks_per_node;
  if (out->n_nodes > LOOM_NODES_MAX_NODES) {
    snprintf(err, errlen, "--ranks-per-node %d: %d nodes, more than the %d this estimate "
             "places", ranks_per_node, out->n_nodes, LOOM_NODES_MAX_NODES);
    return -1;
  }
  member *m = malloc((size_t)W * sizeof *m);
  uint64_t *node_tx = calloc((size_t)out->n_nodes, sizeof *node_tx);
  if (!m || !node_tx) {
    free(m);
    free(node_tx);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++) {
    loom_nodes_axis *ax = &out->axes[out->n_axes];
    axis_traffic(e, &axes[i], ranks_per_node, m, node_tx, ax);
    if (!ax->bytes) { /* an axis of one rank, or one that moves nothing: not listed */
      memset(ax, 0, sizeof *ax);
      continue;
    }
    out->inter_node_bytes += ax->inter_node;
    out->n_axes++;
  }
  for (int k = 0; k < out->n_nodes; k++)
    if (node_tx[k] > out->max_node_tx) out->max_node_tx = node_tx[k];
  free(m);
  free(node_tx);
  return 0;
}

void loom_estimate_nodes_print(FILE *out, const loom_estimate_nodes *n) {
  fprintf(out, "across nodes (%d nodes x %d ranks, ranks by block): %llu bytes per step leave "
          "their node (payload), the busiest node's link sends %llu\n", n->n_nodes,
          n->ranks_per_node, (unsigned long long)n->inter_node_bytes,
          (unsigned long long)n->max_node_tx);
  for (int i = 0; i < n->n_axes; i++)
    fprintf(out, "  %-10s %15llu of %15llu bytes per step cross nodes\n", n->axes[i].name,
            (unsigned long long)n->axes[i].inter_node, (unsigned long long)n->axes[i].bytes);
}

json_t *loom_estimate_nodes_json(const loom_estimate_nodes *n) {
  json_t *axes_obj = json_object();
  if (!axes_obj) return NULL;
  for (int i = 0; i < n->n_axes; i++)
    json_object_set_new(axes_obj, n->axes[i].name,
                        json_pack("{s:I, s:I}", "bytes", (json_int_t)n->axes[i].bytes,
                                  "inter_node_bytes", (json_int_t)n->axes[i].inter_node));
  return json_pack("{s:i, s:i, s:I, s:I, s:o}", "ranks_per_node", n->ranks_per_node, "nodes",
                   n->n_nodes, "bytes_per_step", (json_int_t)n->inter_node_bytes,
                   "max_node_tx_bytes_per_step", (json_int_t)n->max_node_tx, "axes", axes_obj);
}
