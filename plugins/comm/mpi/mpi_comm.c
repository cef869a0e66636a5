/* mpi.so — the communication backend for CPU ranks, on OpenMPI (or any MPI-3 library).
 *
 * Sums of fp32, bf16 and fp16 (the gradients' all_reduce and reduce_scatter) run loom's own
 * segmented point-to-point schedule by default (mpi_owner.h: 2-7x faster than Open MPI's
 * non-blocking collectives on one node, and summed in rank order, so results do not depend on
 * how a buffer is cut); option "collectives": "mpi" sends them to Open MPI as well. Every other
 * operation maps onto one MPI call; asynchronous variants use MPI-3 non-blocking collectives
 * (MPI_Iallreduce, ...) and return the MPI_Request wrapped in a loom_request.
 * Errors are returned (MPI_ERRORS_RETURN), not fatal, so the host can print the plugin's
 * message and bring the job down with abort().
 *
 * 16-bit sums (mixed precision's gradient all-reduce in bf16 / fp16): MPI has no bf16 or fp16
 * type, so they travel as MPI_UINT16_T (half the bytes of fp32) and are added by a user MPI_Op
 * that widens both operands to fp32, adds, and rounds the sum back to nearest even (what NCCL
 * does for bf16 on GPUs; mpi_sum.c, shared with the own schedule); an fp16 sum that overflows is
 * +-inf, as the loss scaler expects.
 *
 * Devices whose memory is not host memory (no LOOM_DEVICE_CAP_HOST_ADDRESSABLE: CUDA, the
 * tagged test device): this MPI is not assumed CUDA-aware, so every buffer is staged through
 * malloc'd host memory with the device's to_host / from_host (comm_v1.h: once the host opened
 * the device, buffers are device memory). A non-blocking operation keeps its staging buffers
 * in its request; wait() copies the received values back to the device and frees them
 * (mpi_staging.c; mpi_raw.c: the MPI calls on host buffers; this file: the lifecycle and the
 * table). */
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "mpi_hier.h"
#include "mpi_internal.h"
#include "mpi_owner.h"

/* inout[i] = in[i] + inout[i] for n bf16 / fp16 values, added in fp32, rounded back. */
static void sum_bf16_fn(void *in, void *inout, int *n, MPI_Datatype *dt) {
  (void)dt;
  mpi_sum(LOOM_BF16, inout, in, inout, (size_t)*n);
}
static void sum_f16_fn(void *in, void *inout, int *n, MPI_Datatype *dt) {
  (void)dt;
  mpi_sum(LOOM_F16, inout, in, inout, (size_t)*n);
}


/* The options as parsed. */
typedef struct mpi_opts {
  int own;               /* "collectives" is "loom" */
  int64_t segment_bytes; /* in [4 KiB, 1 GiB] */
  int hierarchical;      /* "hierarchical" (mpi_hier.h) */
  int64_t node_size;     /* "node_size": 0 (MPI_COMM_TYPE_SHARED) or ranks per node */
} mpi_opts;

/* The options, checked (unknown keys, types, ranges, combinations). LOOM_OK or
 * LOOM_INVALID_CONFIG with set_error. */
static int parse_options(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                         mpi_opts *o) {
  static const char *const keys[] = {"collectives", "segment_bytes", "hierarchical",
                                     "node_size", NULL};
  const char *coll = NULL;
  if (api->opt_check_keys(host, opts, keys) != LOOM_OK ||
      api->opt_string(host, opts, "collectives", "loom", &coll) != LOOM_OK ||
      api->opt_int(host, opts, "segment_bytes", 512 << 10, 4096, 1 << 30, &o->segment_bytes) !=
          LOOM_OK ||
      api->opt_bool(host, opts, "hierarchical", 0, &o->hierarchical) != LOOM_OK ||
      api->opt_int(host, opts, "node_size", 0, 0, 1 << 20, &o->node_size) != LOOM_OK)
    return LOOM_INVALID_CONFIG;
  if (strcmp(coll, "loom") != 0 && strcmp(coll, "mpi") != 0) {
    api->set_error(host, "collectives: expected \"loom\" (loom's own sum collectives) or "
                   "\"mpi\" (Open MPI's), got \"%s\"", coll);
    return LOOM_INVALID_CONFIG;
  }
  o->own = strcmp(coll, "loom") == 0;
  if (o->hierarchical && !o->own) {
    api->set_error(host, "hierarchical: true needs \"collectives\": \"loom\" (the "
                   "hierarchical all-reduce is one of loom's own schedules), got \"%s\"", coll);
    return LOOM_INVALID_CONFIG;
  }
  if (o->node_size && !o->hierarchical) {
    api->set_error(host, "node_size: %lld given without \"hierarchical\": true (it groups the "
                   "ranks into nodes for the hierarchical all-reduce only)",
                   (long long)o->node_size);
    return LOOM_INVALID_CONFIG;
  }
  return LOOM_OK;
}

static int mpi_check_options(const loom_host_api_v1 *api, loom_host *host,
                             const loom_options *opts) {
  mpi_opts o;
  return parse_options(api, host, opts, &o);
}

static int mpi_all_reduce_nodes(const loom_host_api_v1 *api, loom_host *host,
                                const loom_options *opts, int *node_size) {
  mpi_opts o;
  int rc = parse_options(api, host, opts, &o);
  *node_size = !o.hierarchical ? 0 : o.node_size ? (int)o.node_size : -1;
  return rc;
}

static int mpi_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                      void **out) {
  mpi_opts o;
  if (parse_options(api, host, opts, &o) != LOOM_OK) return LOOM_INVALID_CONFIG;
  mpi_ctx *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  c->api = api;
  c->host = host;
  c->own = o.own;
  c->segment_bytes = (size_t)o.segment_bytes;
  c->hierarchical = o.hierarchical;
  c->node_size = (int)o.node_size;
  if (comm_mpi_start(api, host, &c->initialized_here) != LOOM_OK) {
    free(c);
    return LOOM_SYSTEM;
  }
  c->world.mpi = MPI_COMM_WORLD;
  int *ub = NULL, has_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub);
  c->tag_ub = has_ub && ub ? *ub : 32767; /* the least MPI guarantees */
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->world.p2p);
  if (rc != MPI_SUCCESS) {
    mpi_fail(c, rc, "MPI_Comm_dup");
    free(c);
    return LOOM_SYSTEM;
  }
  MPI_Comm_set_errhandler(c->world.p2p, MPI_ERRORS_RETURN);
  if (MPI_Op_create(sum_bf16_fn, 1, &c->sum_bf16) != MPI_SUCCESS ||
      MPI_Op_create(sum_f16_fn, 1, &c->sum_f16) != MPI_SUCCESS) {
    api->set_error(host, "MPI_Op_create failed (the 16-bit sums)");
    MPI_Comm_free(&c->world.p2p);
    free(c);
    return LOOM_SYSTEM;
  }
  /* the node layout, agreed by every rank (an uneven one is refused on all of them alike) */
  if ((rc = mpi_hier_init(c)) != LOOM_OK) {
    MPI_Comm_free(&c->world.p2p);
    free(c);
    return rc;
  }
  *out = c;
  return LOOM_OK;
}

static void mpi_destroy(void *ctx) {
  mpi_ctx *c = ctx;
  if (!c) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    while (c->hier_active) mpi_owner_abandon(c, c->hier_active); /* never waited: the job */
    while (c->active) mpi_owner_abandon(c, c->active);            /* is ending */
    mpi_hier_detach(&c->world);
    MPI_Comm_free(&c->world.p2p);
    if (c->sum_bf16 != MPI_OP_NULL) MPI_Op_free(&c->sum_bf16);
    if (c->sum_f16 != MPI_OP_NULL) MPI_Op_free(&c->sum_f16);
  }
  if (c->initialized_here && !finalized) MPI_Finalize();
  free(c);
}

static int mpi_world(void *ctx, int *rank, int *size) {
  mpi_ctx *c = ctx;
  CHECK_MPI(c, MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank");
  CHECK_MPI(c, MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size");
  return LOOM_OK;
}

static loom_comm *mpi_world_comm(void *ctx) { return &((mpi_ctx *)ctx)->world; }

static int mpi_split(void *ctx, loom_comm *parent, int color, int key, loom_comm **out) {
  mpi_ctx *c = ctx;
  loom_comm *nc = calloc(1, sizeof *nc);
  if (!nc) return LOOM_NOMEM;
  int rc = comm_mpi_split(c->api, c->host, parent ? parent->mpi : MPI_COMM_WORLD, color, key,
                          &nc->mpi);
  if (rc != LOOM_OK) {
    free(nc);
    return rc;
  }
  nc->p2p = MPI_COMM_NULL;
  if (nc->mpi != MPI_COMM_NULL && (rc = MPI_Comm_dup(nc->mpi, &nc->p2p)) != MPI_SUCCESS) {
    MPI_Comm_free(&nc->mpi);
    free(nc);
    return mpi_fail(c, rc, "MPI_Comm_dup");
  }
  if (nc->p2p != MPI_COMM_NULL) MPI_Comm_set_errhandler(nc->p2p, MPI_ERRORS_RETURN);
  if ((rc = mpi_hier_attach(c, nc)) != LOOM_OK) {
    if (nc->p2p != MPI_COMM_NULL) MPI_Comm_free(&nc->p2p);
    MPI_Comm_free(&nc->mpi);
    free(nc);
    return rc;
  }
  *out = nc;
  return LOOM_OK;
}

static void mpi_comm_free(void *ctx, loom_comm *comm) {
  if (!comm || comm == &((mpi_ctx *)ctx)->world) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    mpi_hier_detach(comm);
    if (comm->p2p != MPI_COMM_NULL) MPI_Comm_free(&comm->p2p);
    MPI_Comm_free(&comm->mpi);
  }
  free(comm);
}

/* The ranks of this job on this node (MPI_COMM_TYPE_SHARED), for the device's GPU choice. */
static int mpi_local(void *ctx, int *local_rank, int *local_size) {
  mpi_ctx *c = ctx;
  MPI_Comm node;
  CHECK_MPI(c, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                   &node), "MPI_Comm_split_type");
  int rc1 = MPI_Comm_rank(node, local_rank), rc2 = MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  if (rc1 != MPI_SUCCESS) return mpi_fail(c, rc1, "MPI_Comm_rank");
  if (rc2 != MPI_SUCCESS) return mpi_fail(c, rc2, "MPI_Comm_size");
  return LOOM_OK;
}


static void mpi_abort(void *ctx, int exit_code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  exit(exit_code); /* MPI_Abort does not return; this is for the compiler */
}

#ifndef LOOM_MPI_PLUGIN_NAME /* tests/fixtures builds wrong copies under their own names */
#define LOOM_MPI_PLUGIN_NAME "mpi"
#endif

LOOM_EXPORT const loom_comm_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_COMM, LOOM_MPI_PLUGIN_NAME, "1.0.0",
                                 "MPI collectives and point-to-point (OpenMPI); device memory "
                                 "that is not host memory is staged through the host",
                                 LOOM_COMM_CAP_HOST_MEMORY | LOOM_COMM_CAP_DEVICE_MEMORY,
                                 loom_comm_v1),
  .create = mpi_create,
  .destroy = mpi_destroy,
  .world = mpi_world,
  .world_comm = mpi_world_comm,
  .split = mpi_split,
  .comm_free = mpi_comm_free,
  .all_reduce = mpi_all_reduce,
  .reduce_scatter = mpi_reduce_scatter,
  .all_gather = mpi_all_gather,
  .broadcast = mpi_broadcast,
  .send = mpi_send,
  .recv = mpi_recv,
  .test = mpi_test,
  .wait = mpi_wait,
  .barrier = mpi_barrier,
  .abort = mpi_abort,
  .reduce_scatter_v = mpi_reduce_scatter_v,
  .all_gather_v = mpi_all_gather_v,
  .local = mpi_local,
  .check_options = mpi_check_options,
  .all_reduce_nodes = mpi_all_reduce_nodes,
};
