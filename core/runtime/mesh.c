/* The process mesh: the comm plugin joins the job, then the world is split into the
 * communicators of each axis. Layout as Megatron-LM: tp innermost, then dp, then pp:
 *   world_rank = (pp_rank * dp + dp_rank) * tp + tp_rank. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_open.h"
#include "plugins.h"
#include "runtime.h"
#include "util/one_line.h"

/* Open the comm plugin (loom__plugins_open normally did) and set up its host record. */
static int comm_host_init(loom_runtime *rt, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  if (!rt->comm_plugin.handle &&
      loom__plugin_open(&rt->comm_plugin, cfg->comm.name, LOOM_KIND_COMM, err, errlen) != 0)
    return -1;
  snprintf(rt->comm_label, sizeof rt->comm_label, "%s (%s)", cfg->comm.name,
           cfg->comm.json_path);
  loom__host_init(&rt->comm_host, rt, rt->comm_label, cfg->path, cfg->comm.json_path,
                  cfg->comm.options);
  return 0;
}

/* The comm plugin's refusal: its message as is when an option getter already named the file
 * and JSON path, else prefixed with them. */
static int comm_error(loom_runtime *rt, char *err, size_t errlen) {
  const loom_config *cfg = rt->cfg;
  if (loom__error_names_config(rt, rt->comm_host.error))
    snprintf(err, errlen, "%s (plugin %s)", rt->comm_host.error, rt->comm_plugin.path);
  else
    snprintf(err, errlen, "%s: %s: plugin '%s' (%s): %s", cfg->path, cfg->comm.json_path,
             cfg->comm.name, rt->comm_plugin.path, rt->comm_host.error);
  return -1;
}

int loom__comm_check_options(loom_runtime *rt, char *err, size_t errlen) {
  if (comm_host_init(rt, err, errlen) != 0) return -1;
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (!c->check_options)
    return 0; /* a 1.4 plugin: train's create() validates them */
  if (c->check_options(loom__host_api(), &rt->comm_host, &rt->comm_host.opts) != LOOM_OK)
    return comm_error(rt, err, errlen);
  return 0;
}

/* The shard size K of hybrid sharding (rt->shard_size: a number, or "node" = the ranks per
 * node / tp, from the launcher), checked on every rank alike: every rank fails with the same
 * message, so none is left waiting. "node" needs every node to hold the same number of ranks,
 * consecutive world ranks (mpirun's default --map-by slot), agreed over the world. A number K
 * must not make a shard group straddle a node boundary part-way (K divides the node's k
 * data-parallel ranks, or k divides K): such a group would send its every collective across
 * the nodes while its neighbours stay inside, hybrid sharding's saving lost unnoticed. */
static int shard_size_of(loom_runtime *rt, int *K, char *err, size_t errlen) {
  loom_mesh *m = &rt->mesh;
  *K = m->dp;
  if (!rt->shard_size) return 0;
  const loom_config *cfg = rt->cfg;
  const char *at = cfg->parallel[rt->shard_owner].json_path;
  const int node = rt->shard_size == LOOM_SHARD_NODE;
  int k = rt->shard_size;
  int lr, ls;
  const char *src;
  loom__local_rank(rt, &lr, &ls, &src);
  /* min and max of the local size, whether every rank sits at world_rank % local_size, and
   * whether an explicit K fits every rank's node (its dp ranks per node ls / tp) */
  const int kn = ls % m->tp == 0 ? ls / m->tp : 0;
  const int fits = node || (kn && (kn % k == 0 || k % kn == 0));
  int32_t v[4] = {ls, -ls, lr == m->world_rank % ls ? 1 : 0, fits};
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (m->world_size > 1 &&
      c->all_reduce(rt->comm_ctx, m->axis[LOOM_AXIS_WORLD], v, 4, LOOM_I32, LOOM_OP_MIN,
                    NULL) != LOOM_OK) {
    snprintf(err, errlen, "plugin '%s': agreeing on the ranks per node: %s", cfg->comm.name,
             rt->comm_host.error);
    return -1;
  }
  if (node) {
    if (v[0] != -v[1]) {
      snprintf(err, errlen, "%s: %s.shard_size: \"node\" needs the same number of ranks on "
               "every node, but the nodes hold between %d and %d ranks (from %s): give a number "
               "instead", cfg->path, at, v[0], -v[1], src);
      return -1;
    }
    if (!v[2]) {
      snprintf(err, errlen, "%s: %s.shard_size: \"node\" needs each node's ranks to be "
               "consecutive world ranks (mpirun --map-by slot), but they are not (local ranks "
               "from %s): give a number instead", cfg->path, at, src);
      return -1;
    }
    if (ls % m->tp != 0) {
      snprintf(err, errlen, "%s: %s.shard_size: \"node\": %d ranks per node is not a multiple "
               "of the tensor-parallel size %d", cfg->path, at, ls, m->tp);
      return -1;
    }
    k = ls / m->tp;
  }
  if (k < 1 || m->dp % k != 0) {
    snprintf(err, errlen, "%s: %s.shard_size: %s%d does not divide the data-parallel size %d "
             "(world %d / tp %d / pp %d): the data-parallel ranks form shard groups of "
             "shard_size ranks", cfg->path, at, node ? "\"node\" (ranks per node / tp) = " : "",
             k, m->dp, m->world_size, m->tp, m->pp);
    return -1;
  }
  /* nodes of consecutive ranks only: elsewhere the groups' placement is the launcher's */
  if (!v[3] && v[2]) {
    snprintf(err, errlen, "%s: %s.shard_size: %d neither divides the %d data-parallel ranks of "
             "a node (%d ranks per node from %s / tp %d) nor is a multiple of them: shard "
             "groups would straddle the nodes (give a divisor of %d, or \"node\")", cfg->path,
             at, k, kn, ls, src, m->tp, kn);
    return -1;
  }
  *K = k;
  return 0;
}

int loom__comm_all_reduce_nodes(loom_runtime *rt, int *node_size, char *err, size_t errlen) {
  *node_size = 0;
  if (comm_host_init(rt, err, errlen) != 0) return -1;
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (!c->all_reduce_nodes) return 0; /* older than 1.11: flat */
  if (c->all_reduce_nodes(loom__host_api(), &rt->comm_host, &rt->comm_host.opts, node_size) !=
      LOOM_OK)
    return comm_error(rt, err, errlen);
  return 0;
}

int loom__mesh_init(loom_runtime *rt, int tp, int pp, char *err, size_t errlen) {
  loom_config *cfg = rt->cfg;
  if (comm_host_init(rt, err, errlen) != 0) return -1;
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  if (c->create(loom__host_api(), &rt->comm_host, &rt->comm_host.opts, &rt->comm_ctx) !=
      LOOM_OK)
    return comm_error(rt, err, errlen);
  loom_mesh *m = &rt->mesh;
  if (c->world(rt->comm_ctx, &m->world_rank, &m->world_size) != LOOM_OK) {
    snprintf(err, errlen, "plugin '%s': %s", cfg->comm.name, rt->comm_host.error);
    return -1;
  }
  if (tp < 1 || pp < 1 || m->world_size % (tp * pp) != 0) {
    snprintf(err, errlen,
             "%s: parallel: the mesh is dp x tp x pp = world size, but tensor-parallel size "
             "%d x pipeline size %d = %d does not divide the world size %d (run a multiple of "
             "%d ranks)", cfg->path, tp, pp, tp * pp, m->world_size, tp * pp);
    return -1;
  }
  m->tp = tp;
  m->pp = pp;
  m->dp = m->world_size / (tp * pp);
  m->tp_rank = m->world_rank % tp;
  m->dp_rank = (m->world_rank / tp) % m->dp;
  m->pp_rank = m->world_rank / (tp * m->dp);
  /* context parallel: the cp ranks of a sequence are consecutive dp ranks (cp innermost of
   * dp, inside tp as Megatron-LM's tp-cp-dp-pp order), so DP stays the dp x cp gradient
   * group that every data-parallel plugin reduces over */
  const int cp = rt->cp_size > 1 ? rt->cp_size : 1;
  if (m->dp % cp != 0) {
    snprintf(err, errlen, "%s: parallel: context-parallel size %d does not divide the %d ranks "
             "left after tensor-parallel size %d x pipeline size %d (world %d): run a multiple "
             "of %d ranks", cfg->path, cp, m->dp, tp, pp, m->world_size, tp * pp * cp);
    return -1;
  }
  if (cp > 1 && rt->shard_size) {
    snprintf(err, errlen, "%s: %s.shard_size: hybrid sharding does not compose with context "
             "parallel (cp %d) in this loom: shard over the whole dp x cp group (drop "
             "shard_size)", cfg->path, cfg->parallel[rt->shard_owner].json_path, cp);
    return -1;
  }
  m->cp = cp;
  m->cp_rank = m->dp_rank % cp;
  m->data_dp = m->dp / cp;
  m->data_rank = m->dp_rank / cp;
  m->axis[LOOM_AXIS_WORLD] = c->world_comm(rt->comm_ctx);
  int K;
  if (shard_size_of(rt, &K, err, errlen) != 0) return -1;
  m->dp_shard = K;
  m->dp_replica = m->dp / K;
  m->shard_rank = m->dp_rank % K;
  m->replica_rank = m->dp_rank / K;
  const int R = m->dp_replica, fixed = m->pp_rank * tp + m->tp_rank;
  /* color = the coordinates that stay fixed along the axis; key = position along it */
  struct { loom_axis axis; int color, key; } splits[] = {
    {LOOM_AXIS_DP, fixed, m->dp_rank},
    {LOOM_AXIS_TP, m->pp_rank * m->dp + m->dp_rank, m->tp_rank},
    {LOOM_AXIS_PP, m->dp_rank * tp + m->tp_rank, m->pp_rank},
    {LOOM_AXIS_DP_SHARD, fixed * R + m->replica_rank, m->shard_rank},
    {LOOM_AXIS_DP_REPLICA, fixed * K + m->shard_rank, m->replica_rank},
    {LOOM_AXIS_CP, fixed * m->data_dp + m->data_rank, m->cp_rank},
  };
  for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
    if (c->split(rt->comm_ctx, m->axis[LOOM_AXIS_WORLD], splits[i].color, splits[i].key,
                 &m->axis[splits[i].axis]) != LOOM_OK) {
      snprintf(err, errlen, "plugin '%s': building the mesh: %s", cfg->comm.name,
               rt->comm_host.error);
      return -1;
    }
  }
  /* the tied embedding's gradient group: the first and the last stage with the same tp rank
   * (all their dp ranks); every other rank gets a group of its own, unused */
  if (pp > 1) {
    int member = m->pp_rank == 0 || m->pp_rank == pp - 1;
    int color = member ? m->tp_rank : tp + m->world_rank;
    if (c->split(rt->comm_ctx, m->axis[LOOM_AXIS_WORLD], color, m->world_rank, &rt->emb_comm) !=
        LOOM_OK) {
      snprintf(err, errlen, "plugin '%s': building the embedding group: %s", cfg->comm.name,
               rt->comm_host.error);
      return -1;
    }
  }
  return 0;
}

void loom__mesh_free(loom_runtime *rt) {
  if (!rt->comm_ctx) return;
  const loom_comm_v1 *c = &rt->comm_plugin.u.comm;
  for (int a = LOOM_AXIS_DP; a <= LOOM_AXIS_CP; a++)
    if (rt->mesh.axis[a]) c->comm_free(rt->comm_ctx, rt->mesh.axis[a]);
  if (rt->emb_comm) c->comm_free(rt->comm_ctx, rt->emb_comm);
  rt->emb_comm = NULL;
  memset(rt->mesh.axis, 0, sizeof rt->mesh.axis);
  c->destroy(rt->comm_ctx);
  rt->comm_ctx = NULL;
  loom__host_release(&rt->comm_host);
  loom__plugin_close(&rt->comm_plugin);
}

void loom__fatal(loom_runtime *rt, int code, const char *msg) {
  int rank = rt && rt->comm_ctx ? rt->mesh.world_rank : loom__launcher_rank();
  char prefix[48];
  snprintf(prefix, sizeof prefix, "loom[%d]: error: ", rank);
  loom__put_line(stderr, prefix, msg); /* one line, whatever a quoted file name holds */
  fflush(stderr);
  fflush(stdout);
  if (rt && rt->comm_ctx && rt->mesh.world_size > 1)
    rt->comm_plugin.u.comm.abort(rt->comm_ctx, code); /* takes every rank down */
  exit(code);
}
