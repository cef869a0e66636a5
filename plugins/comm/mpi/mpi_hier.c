/* The node layout of the hierarchical all_reduce (mpi_hier.h); the schedule itself is in
 * mpi_owner.c (mpi_owner_all_reduce_hier). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_hier.h"

/* A communicator of loom's own collectives over an MPI communicator (takes it over). */
static loom_comm *wrap(mpi_ctx *c, MPI_Comm mpi, int *rc) {
  loom_comm *w = calloc(1, sizeof *w);
  if (!w) {
    MPI_Comm_free(&mpi);
    c->api->set_error(c->host, "out of host memory (hierarchical communicator)");
    *rc = LOOM_NOMEM;
    return NULL;
  }
  w->mpi = mpi;
  int e = MPI_Comm_dup(mpi, &w->p2p);
  if (e != MPI_SUCCESS) {
    MPI_Comm_free(&w->mpi);
    free(w);
    *rc = mpi_fail(c, e, "MPI_Comm_dup");
    return NULL;
  }
  MPI_Comm_set_errhandler(w->p2p, MPI_ERRORS_RETURN);
  return w;
}

static void unwrap(loom_comm *w) {
  if (!w) return;
  MPI_Comm_free(&w->p2p);
  MPI_Comm_free(&w->mpi);
  free(w);
}

/* The nodes of comm's ranks: node[i] = the node of comm rank i (all gathered). Writes up to
 * `out` the ranks per node, "3 on the node of world rank 0, 1 on the node of world rank 3", and
 * returns 1 when every node holds the same number, *k of them on *nodes nodes. */
static int layout(const int *node, int n, int *k, int *nodes, char *out, size_t outlen) {
  int even = 1, first = -1, at = 0;
  *nodes = 0;
  out[0] = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0, cnt = 0;
    for (int j = 0; j < i && !seen; j++) seen = node[j] == node[i];
    if (seen) continue;
    for (int j = 0; j < n; j++) cnt += node[j] == node[i];
    if (first < 0) first = cnt;
    even = even && cnt == first;
    ++*nodes;
    if (at < (int)outlen - 1 && *nodes <= 8)
      at += snprintf(out + at, outlen - (size_t)at, "%s%d on the node of world rank %d",
                     *nodes > 1 ? ", " : "", cnt, node[i]);
  }
  if (*nodes > 8 && at < (int)outlen - 1) snprintf(out + at, outlen - (size_t)at, ", ...");
  *k = first;
  return even;
}

static int *gather_nodes(mpi_ctx *c, MPI_Comm comm, int *n, int *rc) {
  MPI_Comm_size(comm, n);
  int *node = malloc((size_t)*n * sizeof *node);
  if (!node) {
    c->api->set_error(c->host, "out of host memory (node layout)");
    *rc = LOOM_NOMEM;
    return NULL;
  }
  int e = MPI_Allgather(&c->node_id, 1, MPI_INT, node, 1, MPI_INT, comm);
  if (e != MPI_SUCCESS) {
    free(node);
    *rc = mpi_fail(c, e, "MPI_Allgather");
    return NULL;
  }
  return node;
}

int mpi_hier_init(mpi_ctx *c) {
  if (!c->hierarchical) return LOOM_OK;
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char *src = "MPI_COMM_TYPE_SHARED";
  if (c->node_size) {
    if (n % c->node_size != 0) {
      c->api->set_error(c->host, "node_size: %d does not divide the world size %d (every node "
                        "holds node_size consecutive ranks)", c->node_size, n);
      return LOOM_INVALID_CONFIG;
    }
    c->node_id = me / c->node_size * c->node_size;
    src = "\"node_size\"";
  } else {
    MPI_Comm shared;
    CHECK_MPI(c, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                     &shared), "MPI_Comm_split_type");
    int e = MPI_Allreduce(&me, &c->node_id, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);
    if (e != MPI_SUCCESS) return mpi_fail(c, e, "MPI_Allreduce");
  }
  int rc = LOOM_OK, k, nodes;
  int *node = gather_nodes(c, MPI_COMM_WORLD, &n, &rc);
  if (!node) return rc;
  char counts[512];
  int even = layout(node, n, &k, &nodes, counts, sizeof counts);
  free(node);
  if (!even) {
    c->api->set_error(c->host, "hierarchical: the nodes hold different numbers of ranks (%s; "
                      "nodes from %s): the hierarchical all-reduce needs the same number on "
                      "every node (run as many ranks per node, or set \"node_size\")", counts,
                      src);
    return LOOM_INVALID_CONFIG;
  }
  if (me == 0)
    c->api->log(c->host, LOOM_LOG_INFO, "hierarchical all-reduce: %d node%s of %d ranks (%s)%s",
                nodes, nodes == 1 ? "" : "s", k, src,
                nodes == 1 || k == 1 ? ": nothing to split, every all-reduce stays flat" : "");
  return mpi_hier_attach(c, &c->world);
}

int mpi_hier_attach(mpi_ctx *c, loom_comm *comm) {
  if (!c->hierarchical || comm->mpi == MPI_COMM_NULL) return LOOM_OK;
  int rc = LOOM_OK, n, k, nodes, me;
  int *node = gather_nodes(c, comm->mpi, &n, &rc);
  if (!node) return rc;
  char counts[512];
  int even = layout(node, n, &k, &nodes, counts, sizeof counts);
  free(node);
  if (!even) {
    c->api->set_error(c->host, "hierarchical: a communicator of %d ranks lies unevenly on the "
                      "nodes (%s): its all-reduce cannot be split by node (another mesh, or "
                      "\"node_size\" to match it)", n, counts);
    return LOOM_INVALID_CONFIG;
  }
  if (k == 1 || nodes == 1) return LOOM_OK; /* one rank per node, or one node: flat */
  MPI_Comm_rank(comm->mpi, &me);
  MPI_Comm nm, cm;
  CHECK_MPI(c, MPI_Comm_split(comm->mpi, c->node_id, me, &nm), "MPI_Comm_split");
  int local;
  MPI_Comm_rank(nm, &local);
  int e = MPI_Comm_split(comm->mpi, local, me, &cm);
  if (e != MPI_SUCCESS) {
    MPI_Comm_free(&nm);
    return mpi_fail(c, e, "MPI_Comm_split");
  }
  comm->node = wrap(c, nm, &rc);
  if (comm->node) comm->cross = wrap(c, cm, &rc);
  else MPI_Comm_free(&cm);
  if (!comm->cross) {
    unwrap(comm->node);
    comm->node = NULL;
    return rc;
  }
  return LOOM_OK;
}

void mpi_hier_detach(loom_comm *comm) {
  unwrap(comm->node);
  unwrap(comm->cross);
  comm->node = comm->cross = NULL;
}
