/* nccl.so — the communication backend for ranks on the CUDA device (cuda.so), on NCCL.
 *
 * Open MPI stays the launcher and the control plane: MPI_Init joins the job, the mesh's
 * communicators are MPI_Comm_split like mpi.so's, and each of them gets two NCCL communicators
 * (collectives, point to point; one pair per mesh axis: dp, tp, pp, world, and the pipeline's
 * embedding group), all made at the first device operation of any kind, in the order the
 * communicators were split (nccl_stream.c says why then and why that order cannot hang): rank 0
 * of each group makes the ncclUniqueIds and MPI_Bcasts them, every rank calls ncclCommInitRank.
 * Not at split time, because the mesh is built before the device is opened (comm_v1.h) and NCCL
 * binds a communicator to the current GPU: operations before that — the host's configuration
 * check — are on host memory and run over MPI.
 *
 * Once the device is open every buffer is device memory and every operation is enqueued on the
 * device's native stream (device_v1.native_stream), the stream its kernels run on, so a
 * collective is ordered after the kernels that produced its input and overlaps the host (ddp's
 * bucket overlap, ZeRO-3's prefetch): a request is a CUDA event recorded after the operation;
 * test() queries it, wait() waits for it. A blocking call (req NULL) waits the same way.
 * Waiting polls ncclCommGetAsyncError, so a failed or aborted peer surfaces as LOOM_REMOTE with
 * NCCL's message (and the host brings the job down) instead of a hang; abort() calls
 * ncclCommAbort on every communicator first, then MPI_Abort, so no rank stays in a kernel.
 *
 * Refuses clearly: no CUDA device (create), a device that is not CUDA (the host checks the caps:
 * this plugin declares device memory only). NCCL refuses two ranks on one GPU: use mpi.so
 * (which stages through host memory) to share a GPU between ranks.
 *
 * This file: the plugin's table, its lifecycle and communicators. nccl_stream.c: the stream,
 * the NCCL communicators, requests and waiting. nccl_ops.c: the operations. nccl_p2p.c:
 * send/recv (queued, issued in groups on their own stream, tags kept by issue order). */
#include <stdlib.h>

#include "comm_mpi.h"
#include "nccl_internal.h"

/* ---- lifecycle ---- */

/* nccl.so takes no options: any key is refused. */
static int nccl_check_options(const loom_host_api_v1 *api, loom_host *host,
                              const loom_options *opts) {
  static const char *const keys[] = {NULL};
  return api->opt_check_keys(host, opts, keys) != LOOM_OK ? LOOM_INVALID_CONFIG : LOOM_OK;
}

static int nccl_create(const loom_host_api_v1 *api, loom_host *host, const loom_options *opts,
                       void **out) {
  if (nccl_check_options(api, host, opts) != LOOM_OK) return LOOM_INVALID_CONFIG;
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0) {
    api->set_error(host, "nccl.so needs a CUDA GPU on every rank: %s (use comm \"mpi\" on the "
                   "CPU device)", ce != cudaSuccess ? cudaGetErrorString(ce)
                                                    : "cudaGetDeviceCount found 0 devices");
    return LOOM_UNSUPPORTED;
  }
  nccl_ctx *c = calloc(1, sizeof *c);
  if (!c) return LOOM_NOMEM;
  c->api = api;
  c->host = host;
  if (comm_mpi_start(api, host, &c->initialized_here) != LOOM_OK) {
    free(c);
    return LOOM_SYSTEM;
  }
  c->world.mpi = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &c->world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->world.size);
  *out = c;
  return LOOM_OK;
}

static void nccl_destroy(void *ctx) {
  nccl_ctx *c = ctx;
  if (!c) return;
  if (c->world.nccl) ncclCommDestroy(c->world.nccl);
  if (c->world.p2p) ncclCommDestroy(c->world.p2p);
  if (c->p2p_stream) cudaStreamDestroy(c->p2p_stream);
  free(c->queue); /* requests never waited: the job is ending */
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (c->initialized_here && !finalized) MPI_Finalize();
  free(c);
}

static int nccl_world(void *ctx, int *rank, int *size) {
  nccl_ctx *c = ctx;
  *rank = c->world.rank;
  *size = c->world.size;
  return LOOM_OK;
}

static loom_comm *nccl_world_comm(void *ctx) { return &((nccl_ctx *)ctx)->world; }

static int nccl_split(void *ctx, loom_comm *parent, int color, int key, loom_comm **out) {
  nccl_ctx *c = ctx;
  loom_comm *nc = calloc(1, sizeof *nc);
  if (!nc) return LOOM_NOMEM;
  int rc = comm_mpi_split(c->api, c->host, parent ? parent->mpi : MPI_COMM_WORLD, color, key,
                          &nc->mpi);
  if (rc != LOOM_OK) {
    free(nc);
    return rc;
  }
  MPI_Comm_rank(nc->mpi, &nc->rank);
  MPI_Comm_size(nc->mpi, &nc->size);
  nc->next = c->world.next; /* the list abort() and nccl_open_comms walk */
  c->world.next = nc;
  *out = nc;
  /* after the NCCL communicators were made: this one's pair now (split was collective over
   * the parent, so every rank of the new group is here) */
  return c->opened ? nccl_open_comm(c, nc) : LOOM_OK;
}

static void nccl_comm_free(void *ctx, loom_comm *comm) {
  nccl_ctx *c = ctx;
  if (!comm || comm == &c->world) return;
  for (loom_comm **p = &c->world.next; *p; p = &(*p)->next)
    if (*p == comm) {
      *p = comm->next;
      break;
    }
  if (comm->nccl) ncclCommDestroy(comm->nccl);
  if (comm->p2p) ncclCommDestroy(comm->p2p);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  free(comm);
}

static int nccl_barrier(void *ctx, loom_comm *comm) {
  nccl_ctx *c = ctx;
  cudaStream_t s;
  int on_device, rc = nccl_device_stream(c, &s, &on_device);
  if (rc) return rc;
  if (on_device) {
    /* a barrier is where a rank may wait for its peers: the communicators exist (a peer may
     * be creating them, nccl_stream.c) and what it posted is issued; then what it enqueued on
     * the device's stream is done, and the ranks meet. Not the p2p stream: a barrier does not
     * complete sends and receives (their peers may post the match after it). */
    if ((rc = nccl_open_comms(c)) != LOOM_OK || (rc = nccl_p2p_flush(c)) != LOOM_OK) return rc;
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return nccl_cuda_fail(c, e, "cudaStreamSynchronize");
  }
  rc = MPI_Barrier(comm->mpi);
  return rc == MPI_SUCCESS ? LOOM_OK : nccl_mpi_fail(c, rc, "MPI_Barrier");
}

static int nccl_local(void *ctx, int *local_rank, int *local_size) {
  nccl_ctx *c = ctx;
  MPI_Comm node;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return nccl_mpi_fail(c, rc, "MPI_Comm_split_type");
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  return LOOM_OK;
}

/* A rank failed: abort every NCCL communicator (peers blocked in a kernel see the error and
 * return), then take the job down. */
static void nccl_abort(void *ctx, int exit_code) {
  nccl_ctx *c = ctx;
  for (loom_comm *m = c ? &c->world : NULL; m; m = m->next) {
    if (m->nccl) ncclCommAbort(m->nccl);
    if (m->p2p) ncclCommAbort(m->p2p);
    m->nccl = m->p2p = NULL;
  }
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  exit(exit_code); /* MPI_Abort does not return; this is for the compiler */
}

LOOM_EXPORT const loom_comm_v1 loom_plugin_v1 = {
  .hdr = LOOM_PLUGIN_HEADER_INIT(LOOM_KIND_COMM, "nccl", "1.0.0",
                                 "NCCL collectives on the CUDA device's stream (MPI launches)",
                                 LOOM_COMM_CAP_DEVICE_MEMORY, loom_comm_v1),
  .create = nccl_create,
  .destroy = nccl_destroy,
  .world = nccl_world,
  .world_comm = nccl_world_comm,
  .split = nccl_split,
  .comm_free = nccl_comm_free,
  .all_reduce = nccl_all_reduce,
  .reduce_scatter = nccl_reduce_scatter,
  .all_gather = nccl_all_gather,
  .broadcast = nccl_broadcast,
  .send = nccl_send,
  .recv = nccl_recv,
  .test = nccl_test,
  .wait = nccl_wait,
  .barrier = nccl_barrier,
  .abort = nccl_abort,
  .reduce_scatter_v = nccl_reduce_scatter_v,
  .all_gather_v = nccl_all_gather_v,
  .local = nccl_local,
  .check_options = nccl_check_options,
};
